/*
 * test_tbevents.c — TensorBoard event files (lib/tbevents.c) against what the formats say:
 * CRC-32C check values (the "123456789" check value of the Castagnoli CRC, RFC 3720's
 * 32-byte vectors), an Event protobuf assembled by hand from the wire-format rules, the
 * TFRecord framing, and a file read back record by record.
 */
#include "tbevents.h"
#include "util.h"

#include "test_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Test(tbevents, crc32c_check_values)
{
    cr_expect_eq(tb_crc32c("123456789", 9), 0xe3069283u);
    uint8_t zeros[32] = {0}, ones[32];
    memset(ones, 0xff, sizeof ones);
    cr_expect_eq(tb_crc32c(zeros, 32), 0x8a9136aau);
    cr_expect_eq(tb_crc32c(ones, 32), 0x62a8ab43u);
}

/* Event{wall_time 1.5, step 10, summary{value{tag "Training/Loss", simple_value 0.5}}}:
 * 09 + the double's 8 bytes, 10 0A, 2A len(Summary) [0A len(Value) [0A 0D tag, 15 + the
 * float's 4 bytes]]. */
Test(tbevents, scalar_event_bytes_by_hand)
{
    static const uint8_t want[] = {0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f, 0x10, 0x0a, 0x2a, 0x16, 0x0a,
                                   0x14, 0x0a, 0x0d, 'T',  'r',  'a',  'i',  'n',  'i',  'n',  'g',  '/',  'L',  'o',
                                   's',  's',  0x15, 0x00, 0x00, 0x00, 0x3f};
    uint8_t got[128];
    size_t n = tb_scalar_event(1.5, 10, "Training/Loss", 0.5f, got);
    cr_assert_eq(n, sizeof want);
    cr_expect_arr_eq(got, want, sizeof want);
    /* a step of 300 is the varint AC 02 */
    n = tb_scalar_event(1.5, 300, "a", 1.0f, got);
    cr_expect(got[9] == 0x10 && got[10] == 0xac && got[11] == 0x02, "%02x %02x %02x", got[9], got[10], got[11]);
}

static uint32_t masked(const void *p, size_t n)
{
    uint32_t c = tb_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint64_t le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

Test(tbevents, records_are_framed_and_a_file_reads_back)
{
    uint8_t rec[64];
    tb_record("abc", 3, rec);
    cr_expect_eq(le(rec, 8), 3);
    cr_expect_eq(le(rec + 8, 4), masked(rec, 8));
    cr_expect(!memcmp(rec + 12, "abc", 3));
    cr_expect_eq(le(rec + 15, 4), masked("abc", 3));

    char *dir = test_make_tmpdir(), *sub = xasprintf("%s/tb/run", dir), *err = NULL;
    tb_writer *w = tb_open(sub, &err);
    cr_assert(w, "%s", err);
    cr_expect_eq(tb_scalar(w, "Training/Loss", 2.25, 7), 0);
    cr_expect_eq(tb_scalar(w, "Training/Learning_rate", 0.1, 8), 0);
    char *path = xstrdup(tb_path(w));
    tb_close(w);
    cr_expect(strstr(path, "/events.out.tfevents."), "%s", path);
    size_t len = 0;
    char *data = read_whole_file(path, &len);
    cr_assert(data);
    const uint8_t *p = (const uint8_t *)data;
    size_t off = 0;
    int records = 0;
    uint8_t want[128];
    while (off + 12 <= len) {
        uint64_t n = le(p + off, 8);
        cr_assert_leq(off + 16 + n, len);
        cr_expect_eq(le(p + off + 8, 4), masked(p + off, 8), "record %d: length CRC", records);
        cr_expect_eq(le(p + off + 12 + n, 4), masked(p + off + 12, n), "record %d: data CRC", records);
        const uint8_t *ev = p + off + 12;
        if (records == 0)
            cr_expect(n > 15 && !memcmp(ev + n - 13, "brain.Event:2", 13), "the first record names the version");
        if (records == 1) { /* all but the wall time as tb_scalar_event makes it */
            size_t m = tb_scalar_event(0.0, 7, "Training/Loss", 2.25f, want);
            cr_expect(n == m && !memcmp(ev + 9, want + 9, m - 9), "record 1");
        }
        off += 16 + n;
        records++;
    }
    cr_expect_eq(off, len);
    cr_expect_eq(records, 3);
    free(data), free(path), free(sub);
    test_rm_rf(dir); /* it holds folders */
    free(dir);
}

Test(tbevents, a_folder_that_cannot_be_made_is_an_error)
{
    char *err = NULL;
    cr_expect_null(tb_open("/proc/selfsup-cannot-be-here/tb", &err));
    cr_expect(err, "an error message");
    free(err);
}

static double le_double(const uint8_t *p)
{
    uint64_t bits = le(p, 8);
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* A HistogramProto by hand: min, max, num, sum, sum_squares of the finite values (NaN and
 * inf left out), bucket edges increasing by TensorFlow's factor 1.1, every value in the bucket
 * whose right edge is the first one at or above it, the counts adding up to num, no empty
 * bucket at either end. */
Test(tbevents, histogram_by_hand)
{
    const float v[] = {0.5f, 1.0f, -2.0f, NAN, INFINITY, 0.0f};
    size_t len;
    uint8_t *h = tb_histogram_proto(v, 6, &len);
    static const uint8_t keys[] = {0x09, 0x11, 0x19, 0x21, 0x29};
    static const double want[] = {-2.0, 1.0, 4.0, -0.5, 5.25};
    for (int f = 0; f < 5; f++) {
        cr_expect_eq(h[9 * f], keys[f], "field %d key", f + 1);
        cr_expect_eq(le_double(h + 9 * f + 1), want[f], "field %d", f + 1);
    }
    size_t off = 45;
    cr_assert_eq(h[off], 0x32, "bucket_limit, packed");
    size_t vlen = h[off + 1] & 0x80 ? 2 : 1; /* the byte length, a varint of one or two bytes */
    size_t nb = (h[off + 1] & 0x7f) | (vlen == 2 ? (size_t)h[off + 2] << 7 : 0);
    cr_assert_eq(nb % 8, 0);
    nb /= 8;
    const uint8_t *limits = h + off + 1 + vlen, *counts = limits + 8 * nb + 1 + vlen;
    cr_assert_eq(limits[8 * nb], 0x3a, "bucket, packed");
    cr_assert_eq(counts + 8 * nb, h + len);
    double total = 0.0;
    for (size_t b = 0; b < nb; b++) {
        double edge = le_double(limits + 8 * b), c = le_double(counts + 8 * b);
        if (b > 0) {
            double prev = le_double(limits + 8 * (b - 1));
            cr_expect_gt(edge, prev);
            if (prev > 0)
                cr_expect_float_eq(edge / prev, 1.1, 1e-9, "edges %g, %g", prev, edge);
        }
        /* which of the finite values land here */
        double lo = b ? le_double(limits + 8 * (b - 1)) : -INFINITY, here = 0;
        for (int i = 0; i < 6; i++)
            here += isfinite(v[i]) && v[i] > lo && v[i] <= edge;
        cr_expect_eq(c, here, "bucket %zu (%g, %g]", b, lo, edge);
        total += c;
    }
    cr_expect_eq(total, 4.0);
    cr_expect_neq(le_double(counts), 0.0, "no empty first bucket");
    cr_expect_neq(le_double(counts + 8 * (nb - 1)), 0.0, "no empty last bucket");
    free(h);
}
