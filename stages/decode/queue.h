/*
 * queue.h — VISSL's QueueDataset: with ENABLE_QUEUE_DATASET, an unreadable image is replaced
 * by a copy of an earlier valid one (data_valid stays 1) instead of the gray image.
 */
#ifndef SELFSUP_DECODE_QUEUE_H
#define SELFSUP_DECODE_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* QueueDataset skips images with more pixels than this. */
#define DECODE_QUEUE_MAX_PIXELS 10000000

typedef struct {
    uint8_t *px; /* RGB, rows packed */
    int w, h;
} decode_queued_image;

typedef struct {
    decode_queued_image *items;
    size_t head, len;
} decode_fifo;

typedef struct {
    size_t size;             /* queue_size = BATCHSIZE_PER_REPLICA */
    decode_fifo enqueue, dequeue;
} decode_queue;

void decode_queue_init(decode_queue *q, size_t size);
void decode_queue_free(decode_queue *q);
/* on_sucess: remember a copy of a valid image (w·h ≤ 10,000,000). */
void decode_queue_on_success(decode_queue *q, const uint8_t *px, int w, int h);
/* on_failure: take a remembered image (the caller frees out->px). false when none is ready. */
bool decode_queue_on_failure(decode_queue *q, decode_queued_image *out);

#endif
