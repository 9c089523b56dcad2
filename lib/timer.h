/*
 * timer.h — monotonic time for measuring durations: a clock reading, a stopwatch that
 * can be paused and resumed, and a sleep that survives signals.
 *
 * Everything reads CLOCK_MONOTONIC, which never jumps when the wall clock is set, so
 * durations are never negative. The values are seconds as doubles (ns resolution for
 * ~100 days of uptime), good for logging and benchmarks, not for timestamps.
 */
#ifndef SELFSUP_TIMER_H
#define SELFSUP_TIMER_H

#include <stdbool.h>
#include <stdint.h>

/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC). */
double now_seconds(void);
/* The same in integer nanoseconds. */
uint64_t now_ns(void);

/* Accumulates time between start and stop; zero-initialise or call stopwatch_reset. */
typedef struct {
    double accumulated; /* seconds of finished start..stop intervals */
    double started_at;  /* now_seconds() at the last start, when running */
    bool running;
} stopwatch;

void stopwatch_reset(stopwatch *sw);
/* Start (or resume); no effect when already running. */
void stopwatch_start(stopwatch *sw);
/* Stop and add the interval; no effect when not running. Returns the total elapsed. */
double stopwatch_stop(stopwatch *sw);
/* Total seconds so far, including the current interval when running. */
double stopwatch_elapsed(const stopwatch *sw);

/* Sleep at least `seconds` (<= 0: return at once), resuming after signal interruptions. */
void sleep_seconds(double seconds);

#endif
