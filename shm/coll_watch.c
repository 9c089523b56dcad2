/*
 * coll_watch.c — the watching thread of coll_watch.h.
 *
 * The thread sleeps on a condition variable for the interval, so a stop wakes it at once, and
 * checks the world between sleeps. A lost rank ends the watch: the world is broken then, and
 * every later check would say the same.
 */
#include "coll_watch.h"

#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct coll_watch {
    coll *world;
    int interval_ms;
    char *what;
    coll_lost_fn lost;
    void *arg;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stopping;
};

static struct timespec after_ms(int ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L)
        t.tv_sec++, t.tv_nsec -= 1000000000L;
    return t;
}

/* Sleep one interval; true once the watch is stopped. */
static bool sleep_interval(coll_watch *w)
{
    struct timespec until = after_ms(w->interval_ms);
    pthread_mutex_lock(&w->lock);
    while (!w->stopping && pthread_cond_timedwait(&w->wake, &w->lock, &until) != ETIMEDOUT)
        ;
    bool stopping = w->stopping;
    pthread_mutex_unlock(&w->lock);
    return stopping;
}

static void *watch_main(void *arg)
{
    coll_watch *w = arg;
    while (!sleep_interval(w)) {
        char *why = NULL;
        if (coll_check_peers(w->world, w->what, &why) != 0) {
            w->lost(why ? why : "a rank was lost", w->arg);
            free(why);
            break;
        }
    }
    return NULL;
}

coll_watch *coll_watch_start(coll *world, int interval_ms, const char *what, coll_lost_fn lost, void *arg,
                             char **err)
{
    coll_watch *w = xcalloc(1, sizeof *w);
    *w = (coll_watch){.world = world, .interval_ms = interval_ms > 0 ? interval_ms : 1, .what = xstrdup(what),
                      .lost = lost, .arg = arg};
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&w->lock, NULL);
    int rc = pthread_create(&w->thread, NULL, watch_main, w);
    if (rc != 0) {
        report_failure(err, "cannot start a thread to watch the world: %s", strerror(rc));
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->lock);
        free(w->what);
        free(w);
        return NULL;
    }
    return w;
}

void coll_watch_stop(coll_watch *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    free(w->what);
    free(w);
}
