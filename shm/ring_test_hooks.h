/*
 * ring_test_hooks.h — what only the ring's tests call: a forged registration, to check that
 * peers tell a dead process from a newer one that reuses its pid. Production code never
 * includes this header; the definition lives in ring.c, beside the registry it edits.
 */
#ifndef SELFSUP_RING_TEST_HOOKS_H
#define SELFSUP_RING_TEST_HOOKS_H

#include <stdint.h>

#include "ring.h"

/* Pretend this process registered with another start time, as if it had died and its pid now
 * belonged to a newer process (peers must then count it as dead). */
void ring_forge_start_time_for_test(ring *r, uint64_t start_time);

#endif
