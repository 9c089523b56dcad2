/*
 * queue.c — VISSL's QueueDataset (vissl/data/data_helper.py), with its exact queue moves.
 *
 * Two FIFOs of capacity queue_size. on_sucess(img): skip images with w·h > 10,000,000; put
 * the image into the enqueue FIFO when it is not full; then, when the enqueue FIFO is full
 * and the dequeue FIFO is not, move queue_size − len(dequeue) images from one to the other.
 * on_failure(): take the oldest image of the dequeue FIFO, if any. So replacements start only
 * after queue_size valid images, and each remembered image replaces at most one failure
 * (no duplicates within a batch). VISSL keeps one such queue per data source and per loader
 * worker; the decode stage keeps one per source.
 */
#include "queue.h"

#include "util.h"

#include <stdlib.h>
#include <string.h>

static void fifo_init(decode_fifo *f, size_t cap)
{
    f->items = xcalloc(cap ? cap : 1, sizeof *f->items);
    f->head = f->len = 0;
}

static void fifo_put(decode_fifo *f, size_t cap, decode_queued_image im)
{
    f->items[(f->head + f->len) % cap] = im;
    f->len++;
}

static decode_queued_image fifo_get(decode_fifo *f, size_t cap)
{
    decode_queued_image im = f->items[f->head];
    f->head = (f->head + 1) % cap;
    f->len--;
    return im;
}

void decode_queue_init(decode_queue *q, size_t size)
{
    q->size = size ? size : 1;
    fifo_init(&q->enqueue, q->size);
    fifo_init(&q->dequeue, q->size);
}

void decode_queue_free(decode_queue *q)
{
    decode_fifo *fifos[] = {&q->enqueue, &q->dequeue};
    for (size_t k = 0; k < 2; k++) {
        while (fifos[k]->len)
            free(fifo_get(fifos[k], q->size).px);
        free(fifos[k]->items);
    }
    *q = (decode_queue){0};
}

void decode_queue_on_success(decode_queue *q, const uint8_t *px, int w, int h)
{
    if ((int64_t)w * h > DECODE_QUEUE_MAX_PIXELS)
        return;
    if (q->enqueue.len < q->size) {
        size_t n = (size_t)w * (size_t)h * 3;
        decode_queued_image im = {.px = xmalloc(n ? n : 1), .w = w, .h = h};
        memcpy(im.px, px, n);
        fifo_put(&q->enqueue, q->size, im);
    }
    if (q->enqueue.len == q->size && q->dequeue.len < q->size) {
        size_t moves = q->size - q->dequeue.len;
        for (size_t k = 0; k < moves; k++)
            fifo_put(&q->dequeue, q->size, fifo_get(&q->enqueue, q->size));
    }
}

bool decode_queue_on_failure(decode_queue *q, decode_queued_image *out)
{
    if (q->dequeue.len == 0)
        return false;
    *out = fifo_get(&q->dequeue, q->size);
    return true;
}
