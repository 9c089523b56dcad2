/*
 * timer.c — see timer.h. A thin layer over clock_gettime(CLOCK_MONOTONIC) and
 * clock_nanosleep, which takes an absolute deadline so that interrupted sleeps resume
 * without drifting.
 */
#include "timer.h"

#include "log.h"

#include <errno.h>
#include <string.h>
#include <time.h>

static struct timespec monotonic_now(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        die(EXIT_RUNTIME, "clock_gettime(CLOCK_MONOTONIC): %s", strerror(errno));
    return ts;
}

uint64_t now_ns(void)
{
    struct timespec ts = monotonic_now();
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double now_seconds(void)
{
    struct timespec ts = monotonic_now();
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void stopwatch_reset(stopwatch *sw)
{
    sw->accumulated = 0.0;
    sw->started_at = 0.0;
    sw->running = false;
}

void stopwatch_start(stopwatch *sw)
{
    if (sw->running)
        return;
    sw->started_at = now_seconds();
    sw->running = true;
}

double stopwatch_stop(stopwatch *sw)
{
    if (sw->running) {
        sw->accumulated += now_seconds() - sw->started_at;
        sw->running = false;
    }
    return sw->accumulated;
}

double stopwatch_elapsed(const stopwatch *sw)
{
    if (!sw->running)
        return sw->accumulated;
    return sw->accumulated + (now_seconds() - sw->started_at);
}

void sleep_seconds(double seconds)
{
    if (!(seconds > 0.0))
        return;
    if (seconds > 1e9) /* ~31 years; keeps the time_t conversion defined */
        seconds = 1e9;
    struct timespec deadline = monotonic_now();
    double whole = (double)(time_t)seconds;
    deadline.tv_sec += (time_t)seconds;
    deadline.tv_nsec += (long)((seconds - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec += 1;
        deadline.tv_nsec -= 1000000000L;
    }
    int rc;
    while ((rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, NULL)) == EINTR)
        ;
    if (rc != 0)
        die(EXIT_RUNTIME, "clock_nanosleep: %s", strerror(rc));
}
