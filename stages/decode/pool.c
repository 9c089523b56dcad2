/*
 * pool.c — see pool.h. A ring of slots guarded by one mutex: the caller submits at the tail
 * and takes from the head; workers claim the oldest submitted slot, decode it without the
 * lock and mark it done. Two condition variables: "work" wakes workers when a job is
 * submitted (or at shutdown), "done" wakes the caller when a job finishes.
 */
#include "pool.h"

#include "log.h"
#include "util.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { SLOT_FREE, SLOT_QUEUED, SLOT_RUNNING, SLOT_DONE } slot_state;

typedef struct {
    decode_job job;
    decode_ctx *ctx;
    slot_state state;
} pool_slot;

struct decode_pool {
    pool_slot *slots;
    unsigned n_slots, head, count;
    pthread_t *threads;
    unsigned n_threads; /* started worker threads (0: decode in the caller) */
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    bool stopping;
    decode_sample_roi_fn roi;
    const void *roi_arg;
};

/* decode_roi_fn's view of one job: the pool's function with the job's sample. */
typedef struct {
    const decode_pool *p;
    const decode_job *job;
} job_roi;

static void roi_of_job(void *arg, int w, int h, int box[4])
{
    const job_roi *r = arg;
    r->p->roi(r->p->roi_arg, r->job->epoch, r->job->file.tag, w, h, box);
}

static void run_job(const decode_pool *p, pool_slot *s)
{
    decode_job *j = &s->job;
    if (j->file.error) {
        j->rc = -1;
        snprintf(j->why, sizeof j->why, "cannot read: %s", strerror(j->file.error));
        return;
    }
    job_roi r = {.p = p, .job = j};
    j->rc = decode_image_roi(s->ctx, j->file.data, j->file.len, p->roi ? roi_of_job : NULL, &r, &j->im, j->why,
                             sizeof j->why);
    free(j->file.data);
    j->file.data = NULL;
}

/* The oldest queued slot, or NULL. Called with the lock held. */
static pool_slot *next_queued(decode_pool *p)
{
    for (unsigned k = 0; k < p->count; k++) {
        pool_slot *s = &p->slots[(p->head + k) % p->n_slots];
        if (s->state == SLOT_QUEUED)
            return s;
    }
    return NULL;
}

static void *worker(void *arg)
{
    decode_pool *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        pool_slot *s = NULL;
        while (!p->stopping && !(s = next_queued(p)))
            pthread_cond_wait(&p->work, &p->lock);
        if (p->stopping)
            break;
        s->state = SLOT_RUNNING;
        pthread_mutex_unlock(&p->lock);
        run_job(p, s);
        pthread_mutex_lock(&p->lock);
        s->state = SLOT_DONE;
        pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

decode_pool *decode_pool_new(unsigned threads, unsigned slots, const decode_options *opt)
{
    decode_pool *p = xcalloc(1, sizeof *p);
    p->n_slots = slots ? slots : 1;
    p->slots = xcalloc(p->n_slots, sizeof *p->slots);
    for (unsigned i = 0; i < p->n_slots; i++)
        if (!(p->slots[i].ctx = decode_ctx_new(opt)))
            die(EXIT_RUNTIME, "out of memory for decoders");
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    if (threads > 1) {
        p->threads = xcalloc(threads, sizeof *p->threads);
        for (; p->n_threads < threads; p->n_threads++)
            if (pthread_create(&p->threads[p->n_threads], NULL, worker, p) != 0)
                break; /* fewer threads still work; none means the caller decodes */
    }
    return p;
}

void decode_pool_free(decode_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    for (unsigned i = 0; i < p->n_slots; i++) {
        free(p->slots[i].job.file.data);
        decode_ctx_free(p->slots[i].ctx);
    }
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p->slots);
    free(p);
}

unsigned decode_pool_room(const decode_pool *p)
{
    return p->n_slots - p->count; /* only the caller changes count */
}

void decode_pool_set_roi(decode_pool *p, decode_sample_roi_fn fn, const void *arg)
{
    p->roi = fn;
    p->roi_arg = arg;
}

void decode_pool_submit(decode_pool *p, decode_file *f, uint32_t epoch)
{
    pthread_mutex_lock(&p->lock);
    pool_slot *s = &p->slots[(p->head + p->count) % p->n_slots];
    s->job = (decode_job){.file = *f, .epoch = epoch};
    s->state = SLOT_QUEUED;
    p->count++;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->lock);
    f->data = NULL;
}

decode_job *decode_pool_get(decode_pool *p, unsigned k)
{
    if (k >= p->count)
        return NULL;
    pool_slot *s = &p->slots[(p->head + k) % p->n_slots];
    if (p->n_threads == 0) {
        if (s->state == SLOT_QUEUED) {
            run_job(p, s);
            s->state = SLOT_DONE;
        }
        return &s->job;
    }
    pthread_mutex_lock(&p->lock);
    while (s->state != SLOT_DONE)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
    return &s->job;
}

void decode_pool_release(decode_pool *p)
{
    pthread_mutex_lock(&p->lock);
    p->slots[p->head].state = SLOT_FREE;
    p->head = (p->head + 1) % p->n_slots;
    p->count--;
    pthread_mutex_unlock(&p->lock);
}
