/*
 * tbevents.c — TensorBoard scalar event files (see tbevents.h): a hand-rolled protobuf
 * encoder for the two messages we write, TFRecord framing, CRC-32C by table.
 */
#include "tbevents.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct tb_writer {
    FILE *f;
    char *path;
    bool failed;
};

/* ---- CRC-32C ------------------------------------------------------------------------------- */

static uint32_t crc_table[256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1; /* Castagnoli, reflected */
        crc_table[i] = c;
    }
}

uint32_t tb_crc32c(const void *data, size_t n)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, crc_init);
    const uint8_t *p = data;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

static uint32_t masked_crc(const void *data, size_t n)
{
    uint32_t c = tb_crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void put_le(uint8_t *out, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        out[i] = (uint8_t)(v >> (8 * i));
}

void tb_record(const void *payload, size_t n, uint8_t *out)
{
    put_le(out, n, 8);
    put_le(out + 8, masked_crc(out, 8), 4);
    memcpy(out + 12, payload, n);
    put_le(out + 12 + n, masked_crc(payload, n), 4);
}

/* ---- protobuf ------------------------------------------------------------------------------ */

static size_t put_varint(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    do {
        out[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/* wall_time (field 1, fixed64 double) and step (field 2, varint). */
static size_t event_head(double wall_time, int64_t step, uint8_t *out)
{
    uint64_t bits;
    memcpy(&bits, &wall_time, sizeof bits);
    out[0] = 0x09;
    put_le(out + 1, bits, 8);
    out[9] = 0x10;
    return 10 + put_varint(out + 10, (uint64_t)step);
}

/* TensorFlow's default histogram edges: -1e20 … -1e-12, 0, 1e-12 … 1e20 (×1.1 a step). */
static double *hist_edges;
static size_t hist_nedges;

static void edges_init(void)
{
    size_t half = 0;
    for (double v = 1e-12; v < 1e20; v *= 1.1)
        half++;
    hist_edges = xmalloc((2 * half + 1) * sizeof *hist_edges);
    double v = 1e-12;
    for (size_t i = 0; i < half; i++, v *= 1.1)
        hist_edges[half - 1 - i] = -v, hist_edges[half + 1 + i] = v;
    hist_edges[half] = 0.0;
    hist_nedges = 2 * half + 1;
}

/* The first edge >= x (beyond ±1e20: the end buckets). */
static size_t bucket_of(double x)
{
    size_t lo = 0, hi = hist_nedges - 1;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (hist_edges[mid] >= x)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static size_t put_double(uint8_t *out, int field, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    out[0] = (uint8_t)(field << 3 | 1);
    put_le(out + 1, bits, 8);
    return 9;
}

uint8_t *tb_histogram_proto(const float *values, size_t n, size_t *len)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, edges_init);
    int64_t *count = xcalloc(hist_nedges, sizeof *count);
    double mn = INFINITY, mx = -INFINITY, sum = 0.0, sq = 0.0, num = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = values[i];
        if (!isfinite(x))
            continue;
        mn = x < mn ? x : mn, mx = x > mx ? x : mx;
        sum += x, sq += x * x, num += 1.0;
        count[bucket_of(x)]++;
    }
    size_t first = 0, last = hist_nedges; /* the non-empty span [first, last) */
    while (first < hist_nedges && !count[first])
        first++;
    while (last > first && !count[last - 1])
        last--;
    size_t nb = last - first;
    uint8_t *out = xmalloc(64 + 2 * (12 + 8 * nb));
    size_t k = 0;
    k += put_double(out + k, 1, num ? mn : 0.0);
    k += put_double(out + k, 2, num ? mx : 0.0);
    k += put_double(out + k, 3, num);
    k += put_double(out + k, 4, sum);
    k += put_double(out + k, 5, sq);
    for (int field = 6; field <= 7 && nb; field++) { /* packed: key, byte length, the doubles */
        out[k++] = (uint8_t)(field << 3 | 2);
        k += put_varint(out + k, 8 * nb);
        for (size_t b = first; b < last; b++) {
            double v = field == 6 ? hist_edges[b] : (double)count[b];
            uint64_t bits;
            memcpy(&bits, &v, sizeof bits);
            put_le(out + k, bits, 8);
            k += 8;
        }
    }
    free(count);
    *len = k;
    return out;
}

/* An Event with one Summary.Value into out (64 + TB_MAX_TAG + flen bytes): the tag, then the
 * value's field, already encoded (key and payload) in fb. Returns the length. */
static size_t value_event(double wall_time, int64_t step, const char *tag, const uint8_t *fb, size_t flen,
                          uint8_t *out)
{
    size_t tlen = strlen(tag);
    tlen = tlen < TB_MAX_TAG ? tlen : TB_MAX_TAG;
    uint8_t key[12];
    size_t klen = 1 + put_varint(key + 1, tlen), v = klen + tlen + flen; /* the Value's length */
    key[0] = 0x0a;
    uint8_t inner[10];
    size_t ilen = put_varint(inner, v), n = event_head(wall_time, step, out);
    out[n++] = 0x2a; /* Event.summary (5) { Summary.value (1) { … } } */
    n += put_varint(out + n, 1 + ilen + v);
    out[n++] = 0x0a;
    memcpy(out + n, inner, ilen);
    n += ilen;
    memcpy(out + n, key, klen);
    memcpy(out + n + klen, tag, tlen);
    memcpy(out + n + klen + tlen, fb, flen);
    return n + v;
}

size_t tb_scalar_event(double wall_time, int64_t step, const char *tag, float value, uint8_t *out)
{
    uint8_t fb[5] = {0x15}; /* simple_value (2, fixed32) */
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    put_le(fb + 1, bits, 4);
    return value_event(wall_time, step, tag, fb, sizeof fb, out);
}

/* ---- the file ------------------------------------------------------------------------------ */

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int write_payload(tb_writer *w, const uint8_t *payload, size_t n)
{
    uint8_t *rec = xmalloc(n + 16);
    tb_record(payload, n, rec);
    bool ok = fwrite(rec, 1, n + 16, w->f) == n + 16;
    free(rec);
    if (!ok && !w->failed)
        log_warn("TensorBoard: cannot write %s: %s", w->path, strerror(errno));
    w->failed |= !ok;
    return ok ? 0 : -1;
}

tb_writer *tb_open(const char *dir, char **err)
{
    if (make_dirs(dir, 0777, err) != 0)
        return NULL;
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    tb_writer *w = xcalloc(1, sizeof *w);
    w->path = xasprintf("%s/events.out.tfevents.%lld.%s.%d", dir, (long long)time(NULL), host, (int)getpid());
    if (!(w->f = fopen(w->path, "wb"))) {
        report_failure(err, "TensorBoard: cannot create %s: %s", w->path, strerror(errno));
        free(w->path);
        free(w);
        return NULL;
    }
    uint8_t ev[64];
    size_t n = event_head(wall_now(), 0, ev);
    static const char version[] = "brain.Event:2";
    ev[n++] = 0x1a; /* file_version (3) */
    ev[n++] = (uint8_t)(sizeof version - 1);
    memcpy(ev + n, version, sizeof version - 1);
    n += sizeof version - 1;
    write_payload(w, ev, n);
    fflush(w->f);
    return w;
}

int tb_histogram(tb_writer *w, const char *tag, const float *values, size_t n, int64_t step)
{
    if (!w || w->failed)
        return -1;
    size_t hlen;
    uint8_t *h = tb_histogram_proto(values, n, &hlen), *fb = xmalloc(hlen + 12);
    fb[0] = 0x2a; /* histo (5, length-delimited) */
    size_t flen = 1 + put_varint(fb + 1, hlen);
    memcpy(fb + flen, h, hlen);
    flen += hlen;
    uint8_t *ev = xmalloc(64 + TB_MAX_TAG + flen);
    int rc = write_payload(w, ev, value_event(wall_now(), step, tag, fb, flen, ev));
    free(h), free(fb), free(ev);
    return rc;
}

int tb_scalar(tb_writer *w, const char *tag, double value, int64_t step)
{
    if (!w || w->failed)
        return -1;
    uint8_t *ev = xmalloc(64 + TB_MAX_TAG + 5);
    size_t n = tb_scalar_event(wall_now(), step, tag, (float)value, ev);
    int rc = write_payload(w, ev, n);
    free(ev);
    return rc;
}

void tb_flush(tb_writer *w)
{
    if (w && w->f)
        fflush(w->f);
}

const char *tb_path(const tb_writer *w) { return w->path; }

void tb_close(tb_writer *w)
{
    if (!w)
        return;
    if (w->f)
        fclose(w->f);
    free(w->path);
    free(w);
}
