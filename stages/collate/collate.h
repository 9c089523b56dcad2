/*
 * collate.h — VISSL's collators: N sample records in, one batch record out.
 *
 * A collator reads the samples' tensors (data.K, label, data_valid, data_idx; sample.h) and
 * writes VISSL's batch dict with the naming rule of sample.h (list entry i of key K is "K.i").
 * The tensor order is VISSL's exactly: crop-major for simclr_collator and multicrop_collator,
 * image-major towers for siamese_collator, and so on (spec part 2 §3.3).
 */
#ifndef SELFSUP_COLLATE_H
#define SELFSUP_COLLATE_H

#include "record.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    COLLATE_DEFAULT,       /* default_collate */
    COLLATE_SIMCLR,        /* simclr_collator */
    COLLATE_MULTICROP,     /* multicrop_collator */
    COLLATE_MOCO,          /* moco_collator */
    COLLATE_SIAMESE,       /* siamese_collator */
    COLLATE_PATCH_AND_IMAGE, /* patch_and_image_collator */
    COLLATE_MIXUP,           /* multicrop_mixup_collator */
} collate_kind;

/* What a collator draws at random, drawn by the caller (collate_mixup_lambda) so that tests
 * can fix it. */
typedef struct {
    double mixup_lambda; /* multicrop_mixup_collator's mixing factor */
} collate_options;

/* multicrop_mixup_collator's lambda ~ Beta(0.2, 0.2), one per batch, from the counter-based
 * stream (seed, RNG_PURPOSE_COLLATOR, epoch, batch). */
double collate_mixup_lambda(uint64_t seed, uint32_t epoch, uint64_t batch);

/* The collator for a COLLATE_FUNCTION name; -1 when selfsup does not have it (`why` says
 * whether VISSL knows the name). */
int collate_from_name(const char *name, collate_kind *kind, char *why, size_t why_len);

/* Upper bound on the tensors a batch of these samples needs (for stage_record_begin). */
uint32_t collate_max_tensors(collate_kind kind, const rec_view *first);

/* Write the batch of samples[0..n) into w. Returns 0, or -1 with `why` set when the samples
 * do not fit the collator (VISSL would raise): missing tensors, mismatched shapes. */
int collate_batch(collate_kind kind, const rec_view *samples, int n, const collate_options *opt, rec_writer *w,
                  char *why, size_t why_len);

#endif
