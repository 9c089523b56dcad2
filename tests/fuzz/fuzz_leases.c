/*
 * fuzz_leases.c — libFuzzer target for the decode farm's lease book (stages/collate/leases.h).
 *
 * What reaches the book comes from farm hosts over the network: the epoch length in a hello,
 * and the (epoch, position) in the header of every record collate receives. Each input is a
 * plan (4 bytes) and then a stream of operations, 9 bytes each: who (one of 4 hosts), what
 * (hello, want, a record arriving, silence and expiry, consumption, bye) and a 7-byte
 * argument. Besides ASan/UBSan's findings, the book must keep its promises whatever the
 * hosts send: a position reported new twice is a bug, so is a lease outside the plan, and so
 * is a run that says it is done before every planned sample came.
 */
#include "collate/leases.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOTAL 4096

static uint64_t arg_of(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 7; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    lease_plan plan = {.first_epoch = data[0] % 4, .epochs = 1 + data[1] % 3, .first_pos = data[2] % 8,
                       .lease_len = 1 + data[3] % 16, .window = data[3] / 16 * 4};
    lease_book *b = lease_book_new(&plan);
    static uint8_t arrived[MAX_TOTAL];
    memset(arrived, 0, sizeof arrived);
    const char *hosts[4] = {"farm.0", "farm.1", "farm.2", "farm.3"};
    double now = 0;
    uint64_t per_epoch = 0, new_samples = 0;
    for (size_t at = 4; at + 9 <= size; at += 9) {
        const char *h = hosts[data[at] % 4];
        uint64_t arg = arg_of(data + at + 2);
        now += 0.25;
        lease l;
        switch (data[at + 1] % 6) {
        case 0: /* hello: an epoch length */
            if (lease_book_set_epoch_len(b, arg % 512) == 0)
                per_epoch = lease_book_epoch_len(b);
            lease_book_seen(b, h, now);
            break;
        case 1: /* want */
            if (lease_book_deal(b, h, now, &l) == LEASE_GIVEN &&
                (l.epoch < plan.first_epoch || l.epoch >= plan.first_epoch + plan.epochs || l.start >= l.end ||
                 l.end > per_epoch || l.end - l.start > plan.lease_len))
                abort();
            break;
        case 2: { /* a record: any header a host could send */
            uint32_t epoch = (uint32_t)(arg >> 32);
            uint64_t pos = arg & 0xffffffffu;
            if (arg & (1ull << 55)) /* mostly plausible ones, to reach deep states */
                epoch = plan.first_epoch + (uint32_t)(epoch % plan.epochs), pos %= per_epoch ? per_epoch : 1;
            int got = lease_book_received(b, epoch, pos);
            if (got == 1) {
                uint64_t g = (uint64_t)(epoch - plan.first_epoch) * per_epoch + pos;
                if (g >= MAX_TOTAL || arrived[g]++)
                    abort(); /* new twice, or beyond the plan */
                new_samples++;
            }
            break;
        }
        case 3: /* time passes */
            now += (double)(arg % 8);
            lease_book_expire(b, now, 2.0);
            break;
        case 4:
            lease_book_consumed(b, (uint32_t)(arg >> 32), arg & 0xffffffffu);
            break;
        default:
            lease_book_leave(b, h);
            break;
        }
    }
    if (lease_book_done(b) && new_samples != plan.epochs * per_epoch - plan.first_pos)
        abort(); /* done before every sample came */
    lease_book_free(b);
    return 0;
}
