/*
 * test_stage.h — what the test stages share: the synthetic record they pass around and the
 * options that make them misbehave on purpose (fail, die, go slow) for the fault tests.
 *
 * A test record is seq-numbered; its "data" tensor (uint8, `size` bytes) is a pattern that
 * depends only on (seq, i), and its "sum" tensor (uint64) is the FNV-1a hash of the data, so
 * a consumer can check every byte that crossed the pipeline without knowing the producer.
 */
#ifndef SELFSUP_TEST_STAGE_H
#define SELFSUP_TEST_STAGE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline uint8_t test_pattern(uint64_t seq, size_t i)
{
    uint64_t x = seq * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return (uint8_t)(x * 0x94D049BB133111EBull >> 56);
}

static inline uint64_t test_fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Options every test stage takes: --sleep-us N (per record), --fail-after N (exit 1 after N
 * records), --crash-after N (SIGKILL itself after N records), --peers-lost-after N (the stage's
 * poll hook says the peers it serves are gone after N records, as collate's lease server says
 * of its farm hosts; passthru only). Returns arguments used. */
typedef struct {
    long sleep_us, fail_after, crash_after, peers_lost_after;
    long records; /* forwarded so far, for the poll hook */
} test_misbehave;

/* "--NAME N" for one of names[0..n) into *targets[i]; returns the arguments used (0 when the
 * option is not one of them, -1 when its value is missing). */
static inline int test_long_option(int argc, char **argv, const char *const *names, long *const *targets, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(argv[0], names[i])) {
            if (argc < 2)
                return -1;
            *targets[i] = strtol(argv[1], NULL, 10);
            return 2;
        }
    return 0;
}

static inline int test_misbehave_option(test_misbehave *m, int argc, char **argv)
{
    static const char *const names[] = {"--sleep-us", "--fail-after", "--crash-after", "--peers-lost-after"};
    long *const targets[] = {&m->sleep_us, &m->fail_after, &m->crash_after, &m->peers_lost_after};
    return test_long_option(argc, argv, names, targets, 4);
}

#endif
