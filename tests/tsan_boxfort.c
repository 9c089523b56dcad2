/*
 * tsan_boxfort.c — lets Criterion run under ThreadSanitizer (`make SANITIZE=thread unit` links
 * it into the test binary; no other build has it).
 *
 * Criterion runs each test in a sandbox made by its bundled BoxFort, which shares an "arena"
 * with the sandbox mapped at the same address in both processes. BoxFort 2.4 picks that
 * address as 0x200000000000 + (rand_r() & 0x3fffff) << 24, i.e. anywhere in
 * [0x2000'0000'0000, 0x6000'0000'0000), checks with mincore() that it is free, and gives up
 * after 10 taken addresses ("Could not initialize inheritable arena", or a crash on the arena
 * that it then does not check). TSan reserves almost all of that range for its shadow and
 * protects the gaps between its application ranges; only the range it keeps for PIE binaries,
 * [0x5500'0000'0000, 0x5680'0000'0000), is free there, so nearly every run of Criterion under
 * TSan dies before its first test (Snaipe/Criterion issue #274, open since 2018).
 *
 * This rand_r steers the picks made from inside libcriterion into that range, where memory is
 * ordinary application memory with shadow; BoxFort's own checks (mincore, its 10 tries) stay
 * in force. Every other caller gets glibc's rand_r unchanged.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

/* The free range in BoxFort's units: (0x5500'0000'0000 - 0x2000'0000'0000) >> 24 onwards. */
#define FREE_FIRST 0x350000u
#define FREE_COUNT 0x18000u /* up to 0x5680'0000'0000 */

static int from_criterion(const void *caller)
{
    Dl_info info;
    return dladdr(caller, &info) && info.dli_fname && strstr(info.dli_fname, "libcriterion");
}

int rand_r(unsigned *seed)
{
    static int (*real)(unsigned *);
    if (!real)
        real = (int (*)(unsigned *))dlsym(RTLD_NEXT, "rand_r");
    int r = real(seed);
    if (!from_criterion(__builtin_return_address(0)))
        return r;
    return (int)(FREE_FIRST + (uint32_t)r % FREE_COUNT);
}
