/*
 * pool.h — decoding on several threads, results handed back in submission order.
 *
 * One decode process feeds every augment worker of a node, so it decodes in parallel: jobs
 * (one file each) go into a window of slots, worker threads decode them in any order, and
 * the caller takes them back oldest first, so records still come out in sampler order and
 * the output never depends on the number of threads. Each slot owns its own decoder
 * context, so a result's pixels stay valid until the slot is released. With 1 thread no
 * thread is started: the job is decoded by the caller when it asks for it.
 */
#ifndef SELFSUP_DECODE_POOL_H
#define SELFSUP_DECODE_POOL_H

#include "decode/decoder.h"
#include "decode/reader.h"

typedef struct {
    decode_file file; /* what was read (tag: the sample index); its data is freed once decoded */
    uint32_t epoch;   /* the sample's epoch (for the crop boxes of decode_pool_set_roi) */
    int rc;           /* decode_image's result */
    decode_rgb im;    /* when rc == 0; valid until decode_pool_release */
    char why[256];    /* when rc != 0 (also set for a read error) */
} decode_job;

typedef struct decode_pool decode_pool;

/* threads ≥ 1 decoders, `slots` jobs in flight (at least threads + 1 makes sense), each
 * decoder set up with opt (NULL: the defaults). */
decode_pool *decode_pool_new(unsigned threads, unsigned slots, const decode_options *opt);
void decode_pool_free(decode_pool *p);
unsigned decode_pool_room(const decode_pool *p);
/* Decode only what the crops of sample (epoch, index) need: fn sets the box of the image as
 * decode_roi_fn does, given the sample. Called on the worker threads; must be thread-safe.
 * Set before the first submit. */
typedef void (*decode_sample_roi_fn)(const void *arg, uint32_t epoch, uint64_t index, int w, int h, int box[4]);
void decode_pool_set_roi(decode_pool *p, decode_sample_roi_fn fn, const void *arg);
/* Queue the decode of a file of `epoch` (needs room); takes ownership of f->data. */
void decode_pool_submit(decode_pool *p, decode_file *f, uint32_t epoch);
/* The k-th oldest job (0 = the oldest), once decoded; NULL when fewer are queued. */
decode_job *decode_pool_get(decode_pool *p, unsigned k);
/* Done with the oldest job: its slot (and pixels) are reused. */
void decode_pool_release(decode_pool *p);

#endif
