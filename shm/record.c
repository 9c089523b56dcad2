/*
 * record.c — records: the dtype table, the in-place writer, the validating reader, printing,
 * and reading/writing records on file descriptors. See record.h for the byte format.
 *
 * The writer lays a record out canonically: header, max_tensors descriptors (zeroed up front,
 * so unused slots and every reserved byte are zero), then payloads in the order they are
 * added, each at the next 64-byte boundary, with the padding after each payload zeroed. A
 * record written with max_tensors == n_tensors is therefore fully determined by its tensors
 * and header fields, which is what lets the fuzzer and the Python writer compare bytes.
 *
 * The reader trusts nothing: rec_peek_size checks the 64-byte header alone (enough for a
 * stream reader to size its buffer before it allocates), rec_parse then checks every
 * descriptor. All size arithmetic goes through overflow-checked helpers, because every field
 * may come from a pipe, a file or the network. Messages name the record (its seq), the tensor
 * (name and index) and the numbers involved. A stream reader grows its buffer as bytes arrive
 * rather than trusting the size a header claims, so garbage cannot make it allocate 1 GiB.
 */
#include "record.h"

#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ALIGN_UP(x) (((x) + (REC_ALIGN - 1)) & ~(uint64_t)(REC_ALIGN - 1))

/* ---- dtypes ------------------------------------------------------------------------------- */

static const struct {
    unsigned char size;
    const char *name, *short_name;
} DTYPES[] = {
    [REC_U8] = {1, "uint8", "u8"},       [REC_I8] = {1, "int8", "i8"},
    [REC_I16] = {2, "int16", "i16"},     [REC_I32] = {4, "int32", "i32"},
    [REC_I64] = {8, "int64", "i64"},     [REC_F16] = {2, "float16", "f16"},
    [REC_BF16] = {2, "bfloat16", "bf16"}, [REC_F32] = {4, "float32", "f32"},
    [REC_F64] = {8, "float64", "f64"},   [REC_BOOL] = {1, "bool", "b1"},
};

static bool dtype_known(int dtype)
{
    return dtype > 0 && (size_t)dtype < ARRAY_LEN(DTYPES) && DTYPES[dtype].size;
}

size_t rec_dtype_size(int dtype)
{
    return dtype_known(dtype) ? DTYPES[dtype].size : 0;
}

const char *rec_dtype_name(int dtype)
{
    return dtype_known(dtype) ? DTYPES[dtype].name : "?";
}

int rec_dtype_parse(const char *name)
{
    for (int d = 1; d < (int)ARRAY_LEN(DTYPES); d++)
        if (!strcmp(name, DTYPES[d].name) || !strcmp(name, DTYPES[d].short_name))
            return d;
    return -1;
}

/* numel × item size of a shape, or false when it does not fit 64 bits. */
static bool shape_bytes(int ndim, const uint64_t *shape, size_t item, uint64_t *out)
{
    uint64_t n = item;
    for (int i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(n, shape[i], &n))
            return false;
    *out = n;
    return true;
}

/* A name is 1..31 printable ASCII characters (they end up in messages and terminals). */
static bool name_char_ok(unsigned char c)
{
    return c > 32 && c < 127;
}

/* ---- writing ------------------------------------------------------------------------------ */

static rec_header *whdr(rec_writer *w)
{
    return (rec_header *)w->buf;
}

static rec_tensor *wtensors(rec_writer *w)
{
    return (rec_tensor *)(w->buf + REC_HEADER_BYTES);
}

/* Record the first error only: later ones are usually consequences of it. */
static void *writer_fail(rec_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void *writer_fail(rec_writer *w, const char *fmt, ...)
{
    if (!w->error[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->error, sizeof w->error, fmt, ap);
        va_end(ap);
    }
    return NULL;
}

int rec_writer_init(rec_writer *w, void *buf, size_t cap, rec_kind kind, uint64_t seq, uint32_t epoch,
                    uint32_t max_tensors)
{
    memset(w, 0, sizeof *w);
    w->buf = buf;
    w->cap = cap;
    w->max_tensors = max_tensors;
    if ((uintptr_t)buf % REC_ALIGN) {
        writer_fail(w, "record buffer %p is not 64-byte aligned", buf);
        return -1;
    }
    if (kind != REC_DATA && kind != REC_EOS) {
        writer_fail(w, "unknown record kind %d", (int)kind);
        return -1;
    }
    if (max_tensors > REC_MAX_TENSORS || (kind == REC_EOS && max_tensors)) {
        writer_fail(w, "max_tensors %u is over the limit of %d%s", max_tensors,
                    kind == REC_EOS ? 0 : REC_MAX_TENSORS, kind == REC_EOS ? " for an end-of-stream record" : "");
        return -1;
    }
    size_t table_end = REC_HEADER_BYTES + (size_t)max_tensors * REC_TENSOR_BYTES;
    w->needed = table_end;
    if (table_end > cap) {
        w->overflow = true;
        writer_fail(w, "record needs %zu bytes for its header and %u descriptors but the buffer holds %zu",
                    table_end, max_tensors, cap);
        return -1;
    }
    memset(buf, 0, table_end);
    rec_header *h = whdr(w);
    h->magic = REC_MAGIC;
    h->version = REC_VERSION;
    h->kind = (uint16_t)kind;
    h->size = table_end;
    h->seq = seq;
    h->epoch = epoch;
    w->used = table_end;
    return 0;
}

/* Argument checks that do not depend on the buffer; sets *nbytes. */
static bool add_args_ok(rec_writer *w, const char *name, rec_dtype dtype, int ndim, const uint64_t *shape,
                        uint64_t *nbytes)
{
    size_t len = strlen(name);
    if (len == 0 || len > REC_NAME_MAX)
        return writer_fail(w, "tensor '%s': name is %zu characters; it must be 1 to %d", name, len,
                           REC_NAME_MAX), false;
    for (size_t i = 0; i < len; i++)
        if (!name_char_ok((unsigned char)name[i]))
            return writer_fail(w, "tensor '%s': name has a non-printable or space byte at %zu", name, i), false;
    if (!dtype_known(dtype))
        return writer_fail(w, "tensor '%s': unknown dtype code %d", name, (int)dtype), false;
    if (ndim < 0 || ndim > REC_MAX_DIMS || (ndim > 0 && !shape))
        return writer_fail(w, "tensor '%s': ndim %d is not in 0..%d", name, ndim, REC_MAX_DIMS), false;
    if (!shape_bytes(ndim, shape, rec_dtype_size(dtype), nbytes) || *nbytes > REC_MAX_BYTES)
        return writer_fail(w, "tensor '%s': shape is over the record limit of %llu bytes", name,
                           (unsigned long long)REC_MAX_BYTES), false;
    return true;
}

/* Checks against what is already in the table; only meaningful while the table exists. */
static bool add_table_ok(rec_writer *w, const char *name)
{
    const rec_header *h = whdr(w);
    for (uint32_t i = 0; i < h->n_tensors; i++)
        if (!strcmp(wtensors(w)[i].name, name))
            return writer_fail(w, "tensor '%s': the record already has a tensor of that name (#%u)", name, i),
                   false;
    if (h->n_tensors >= w->max_tensors)
        return writer_fail(w, "tensor '%s': the record's table of %u tensors is full", name, w->max_tensors),
               false;
    return true;
}

void *rec_add(rec_writer *w, const char *name, rec_dtype dtype, int ndim, const uint64_t *shape)
{
    uint64_t nbytes;
    if (!w->used && !w->overflow)
        return NULL; /* rec_writer_init failed before the header existed */
    if (!add_args_ok(w, name, dtype, ndim, shape, &nbytes))
        return NULL;
    /* After an overflow the payloads are not written, but `needed` keeps counting so the
     * caller learns the total size it should have asked for. */
    if (!w->overflow && !add_table_ok(w, name))
        return NULL;
    uint64_t off = w->needed, end = off + nbytes, next = ALIGN_UP(end); /* all ≤ ~2^31 + 2^30 */
    if (next > REC_MAX_BYTES)
        return writer_fail(w, "tensor '%s': the record would need %" PRIu64 " bytes, over the limit of %llu",
                           name, next, (unsigned long long)REC_MAX_BYTES);
    w->needed = (size_t)next;
    if (w->overflow || next > w->cap) {
        if (!w->overflow)
            writer_fail(w, "tensor '%s' does not fit: the record needs %" PRIu64 " bytes but the buffer holds %zu",
                        name, next, w->cap);
        w->overflow = true;
        return NULL;
    }
    rec_tensor *t = &wtensors(w)[whdr(w)->n_tensors++];
    memcpy(t->name, name, strlen(name)); /* the rest of the slot is already zero */
    t->dtype = (uint16_t)dtype;
    t->ndim = (uint16_t)ndim;
    t->offset = off;
    t->nbytes = nbytes;
    for (int i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    memset(w->buf + end, 0, (size_t)(next - end)); /* padding is zero, so records compare bytewise */
    w->used = (size_t)next;
    return w->buf + off;
}

int rec_add_copy(rec_writer *w, const char *name, rec_dtype dtype, int ndim, const uint64_t *shape,
                 const void *src)
{
    uint8_t *p = rec_add(w, name, dtype, ndim, shape);
    if (!p)
        return -1;
    size_t n = (size_t)wtensors(w)[whdr(w)->n_tensors - 1].nbytes;
    if (n)
        memcpy(p, src, n);
    return 0;
}

size_t rec_finish(rec_writer *w)
{
    if (w->overflow) {
        /* Replace the first message with the final total, which is what the caller must size. */
        snprintf(w->error, sizeof w->error, "record needs %zu bytes but the buffer holds %zu", w->needed, w->cap);
        return 0;
    }
    if (w->error[0])
        return 0;
    whdr(w)->size = w->used;
    return w->used;
}

size_t rec_writer_needed(const rec_writer *w)
{
    return w->needed;
}

rec_header *rec_writer_header(rec_writer *w)
{
    return whdr(w);
}

size_t rec_write_eos(void *buf, size_t cap, uint64_t records, bool stopped)
{
    if (cap < REC_HEADER_BYTES)
        return 0;
    rec_header h = {.magic = REC_MAGIC, .version = REC_VERSION, .kind = REC_EOS, .size = REC_HEADER_BYTES,
                    .seq = records, .flags = stopped ? REC_EOS_STOPPED : REC_EOS_FINISHED};
    memcpy(buf, &h, sizeof h);
    return REC_HEADER_BYTES;
}

/* ---- reading ------------------------------------------------------------------------------ */

static int check_zero(const uint8_t *p, size_t n, const char *what, uint64_t seq, char **err)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return report_failure(err, "record seq %" PRIu64 ": %s byte %zu is 0x%02x; reserved bytes must be 0",
                                  seq, what, i, p[i]);
    return 0;
}

size_t rec_peek_size(const void *header64, char **err)
{
    rec_header h;
    memcpy(&h, header64, sizeof h);
    if (h.magic == __builtin_bswap32(REC_MAGIC))
        return report_failure(err, "record is big-endian (magic 0x%08x); only little-endian records are read",
                              h.magic), 0;
    if (h.magic != REC_MAGIC)
        return report_failure(err, "not a record: bad magic 0x%08x (expected 0x%08x, \"SSRC\")", h.magic,
                              REC_MAGIC), 0;
    uint64_t seq = h.seq;
    if (h.version != REC_VERSION)
        return report_failure(err, "record seq %" PRIu64 ": version %u, expected %d (written by another selfsup?)",
                              seq, h.version, REC_VERSION), 0;
    if (h.kind != REC_DATA && h.kind != REC_EOS)
        return report_failure(err, "record seq %" PRIu64 ": unknown kind %u (1 is data, 2 end of stream)", seq,
                              h.kind), 0;
    if (check_zero(h.reserved, sizeof h.reserved, "reserved header", seq, err))
        return 0;
    if (h.size % REC_ALIGN || h.size < REC_HEADER_BYTES)
        return report_failure(err, "record seq %" PRIu64 ": size %" PRIu64 " is not a positive multiple of 64",
                              seq, h.size), 0;
    if (h.size > REC_MAX_BYTES)
        return report_failure(err, "record seq %" PRIu64 ": size %" PRIu64 " is over the limit of %llu bytes", seq,
                              h.size, (unsigned long long)REC_MAX_BYTES), 0;
    if (h.n_tensors > REC_MAX_TENSORS)
        return report_failure(err, "record seq %" PRIu64 ": n_tensors %u is over the limit of %d", seq,
                              h.n_tensors, REC_MAX_TENSORS), 0;
    uint64_t table_end = REC_HEADER_BYTES + (uint64_t)h.n_tensors * REC_TENSOR_BYTES;
    if (table_end > h.size)
        return report_failure(err, "record seq %" PRIu64 ": n_tensors %u needs a descriptor table ending at %" PRIu64
                              ", past the record size %" PRIu64, seq, h.n_tensors, table_end, h.size), 0;
    if (h.kind == REC_EOS && (h.n_tensors || h.size != REC_HEADER_BYTES))
        return report_failure(err, "record seq %" PRIu64 ": end-of-stream record has %u tensors and size %" PRIu64
                              " (it must have none and be 64 bytes)", seq, h.n_tensors, h.size), 0;
    if (h.kind == REC_EOS && h.flags != REC_EOS_FINISHED && h.flags != REC_EOS_STOPPED)
        return report_failure(err, "end-of-stream record with flags 0x%x: it must say whether its writer finished "
                              "(0x1) or was stopped (0x2), and how many records it sent (an older selfsup's "
                              "file? write it again)", h.flags), 0;
    return (size_t)h.size;
}

/* The name must be 1..31 printable characters, NUL-terminated and NUL-padded. */
static int check_name(const rec_tensor *t, uint32_t i, uint64_t seq, char **err)
{
    size_t len = strnlen(t->name, sizeof t->name);
    if (len == sizeof t->name)
        return report_failure(err, "record seq %" PRIu64 ": tensor #%u: name is not NUL-terminated within %d bytes",
                              seq, i, REC_NAME_MAX + 1);
    if (len == 0)
        return report_failure(err, "record seq %" PRIu64 ": tensor #%u: name is empty", seq, i);
    for (size_t k = 0; k < len; k++)
        if (!name_char_ok((unsigned char)t->name[k]))
            return report_failure(err, "record seq %" PRIu64 ": tensor #%u: name has a non-printable byte 0x%02x at %zu",
                                  seq, i, (unsigned char)t->name[k], k);
    for (size_t k = len; k < sizeof t->name; k++)
        if (t->name[k])
            return report_failure(err, "record seq %" PRIu64 ": tensor '%s' (#%u): name is not NUL-padded (byte %zu is 0x%02x)",
                                  seq, t->name, i, k, (unsigned char)t->name[k]);
    return 0;
}

/* dtype, ndim, unused dims, reserved bytes and nbytes of one descriptor. */
static int check_layout(const rec_tensor *t, uint32_t i, uint64_t seq, char **err)
{
#define TFAIL(fmt, ...) report_failure(err, "record seq %" PRIu64 ": tensor '%s' (#%u): " fmt, seq, t->name, i, ##__VA_ARGS__)
    if (!dtype_known(t->dtype))
        return TFAIL("unknown dtype code %u", t->dtype);
    if (t->ndim > REC_MAX_DIMS)
        return TFAIL("ndim %u is over the limit of %d", t->ndim, REC_MAX_DIMS);
    for (int d = t->ndim; d < REC_MAX_DIMS; d++)
        if (t->shape[d])
            return TFAIL("shape[%d] is %" PRIu64 " but ndim is %u (unused dims must be 0)", d, t->shape[d], t->ndim);
    if (t->reserved0)
        return TFAIL("reserved0 is 0x%08x; reserved fields must be 0", t->reserved0);
    for (size_t k = 0; k < sizeof t->reserved1; k++)
        if (t->reserved1[k])
            return TFAIL("reserved1 byte %zu is 0x%02x; reserved fields must be 0", k, t->reserved1[k]);
    uint64_t want;
    if (!shape_bytes(t->ndim, t->shape, rec_dtype_size(t->dtype), &want))
        return TFAIL("shape × %s size overflows 64 bits", rec_dtype_name(t->dtype));
    if (t->nbytes != want)
        return TFAIL("nbytes %" PRIu64 " != %" PRIu64 " (shape × %zu-byte %s)", t->nbytes, want,
                     rec_dtype_size(t->dtype), rec_dtype_name(t->dtype));
    return 0;
}

/* Payload placement: aligned, past the table and the previous payload, inside the record. */
static int check_offset(const rec_tensor *t, uint32_t i, uint64_t table_end, uint64_t prev_end, uint64_t size,
                        uint64_t seq, char **err)
{
    if (t->offset % REC_ALIGN)
        return TFAIL("payload offset %" PRIu64 " is not a multiple of 64", t->offset);
    if (t->offset < table_end)
        return TFAIL("payload offset %" PRIu64 " is inside the header and descriptor table, which end at %" PRIu64,
                     t->offset, table_end);
    if (t->offset < prev_end)
        return TFAIL("payload offset %" PRIu64 " overlaps the previous payload, which ends at %" PRIu64
                     " (payloads must be in order and not overlap)", t->offset, prev_end);
    if (t->offset > size || t->nbytes > size - t->offset)
        return TFAIL("payload offset %" PRIu64 " + %" PRIu64 " bytes is past the record end %" PRIu64, t->offset,
                     t->nbytes, size);
    return 0;
#undef TFAIL
}

int rec_parse(const void *buf, size_t len, rec_view *view, char **err)
{
    if (len < REC_HEADER_BYTES)
        return report_failure(err, "record truncated: %zu bytes, less than the 64-byte header", len);
    if ((uintptr_t)buf % 8)
        return report_failure(err, "record buffer %p is not 8-byte aligned", buf);
    if (!rec_peek_size(buf, err))
        return -1;
    const rec_header *h = buf;
    if (h->size != len)
        return report_failure(err, "record seq %" PRIu64 ": size field says %" PRIu64 " bytes but %zu are there%s",
                              h->seq, h->size, len, len < h->size ? " (truncated)" : "");
    const rec_tensor *t = (const rec_tensor *)((const uint8_t *)buf + REC_HEADER_BYTES);
    uint64_t table_end = REC_HEADER_BYTES + (uint64_t)h->n_tensors * REC_TENSOR_BYTES, prev_end = table_end;
    for (uint32_t i = 0; i < h->n_tensors; i++) {
        if (check_name(&t[i], i, h->seq, err) || check_layout(&t[i], i, h->seq, err) ||
            check_offset(&t[i], i, table_end, prev_end, h->size, h->seq, err))
            return -1;
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(t[j].name, t[i].name))
                return report_failure(err, "record seq %" PRIu64 ": tensor '%s' (#%u): name repeats tensor #%u",
                                      h->seq, t[i].name, i, j);
        prev_end = t[i].offset + t[i].nbytes;
    }
    *view = (rec_view){.hdr = h, .tensors = t, .base = buf};
    return 0;
}

int rec_find(const rec_view *view, const char *name)
{
    for (uint32_t i = 0; i < view->hdr->n_tensors; i++)
        if (!strcmp(view->tensors[i].name, name))
            return (int)i;
    return -1;
}

const void *rec_data(const rec_view *view, int i)
{
    return view->base + view->tensors[i].offset;
}

uint64_t rec_numel(const rec_view *view, int i)
{
    const rec_tensor *t = &view->tensors[i];
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d]; /* rec_parse proved the product fits */
    return n;
}

/* ---- printing ----------------------------------------------------------------------------- */

static float half_to_float(uint16_t h)
{
    int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float v;
    if (exp == 0)
        v = ldexpf((float)man, -24); /* zero and subnormals */
    else if (exp == 31)
        v = man ? NAN : INFINITY;
    else
        v = ldexpf((float)(man + 1024), exp - 25);
    return (h & 0x8000) ? -v : v;
}

static float bf16_to_float(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Element k of a payload as text; memcpy because a reader may not assume host alignment. */
static void print_value(FILE *out, int dtype, const uint8_t *p)
{
    union { uint8_t u8; int8_t i8; int16_t i16; int32_t i32; int64_t i64; uint16_t u16; float f; double d; } v;
    memcpy(&v, p, rec_dtype_size(dtype));
    switch (dtype) {
    case REC_U8: fprintf(out, "%u", v.u8); break;
    case REC_I8: fprintf(out, "%d", v.i8); break;
    case REC_I16: fprintf(out, "%d", v.i16); break;
    case REC_I32: fprintf(out, "%" PRId32, v.i32); break;
    case REC_I64: fprintf(out, "%" PRId64, v.i64); break;
    case REC_F16: fprintf(out, "%g", (double)half_to_float(v.u16)); break;
    case REC_BF16: fprintf(out, "%g", (double)bf16_to_float(v.u16)); break;
    case REC_F32: fprintf(out, "%g", (double)v.f); break;
    case REC_F64: fprintf(out, "%g", v.d); break;
    case REC_BOOL: fputs(v.u8 ? "true" : "false", out); break;
    default: fputc('?', out);
    }
}

static void print_tensor(FILE *out, const rec_view *view, int i, int name_width, int max_values)
{
    const rec_tensor *t = &view->tensors[i];
    char shape[REC_MAX_DIMS * 22 + 3];
    int n = snprintf(shape, sizeof shape, "[");
    for (int d = 0; d < t->ndim; d++)
        n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%" PRIu64, d ? ", " : "", t->shape[d]);
    snprintf(shape + n, sizeof shape - (size_t)n, "]");
    fprintf(out, "  %-*s %-8s %s", name_width, t->name, rec_dtype_name(t->dtype), shape);
    uint64_t numel = rec_numel(view, i), show = max_values < 0 ? numel : (uint64_t)max_values;
    if (show > numel)
        show = numel;
    if (max_values != 0) {
        const uint8_t *p = rec_data(view, i);
        fputs(" = [", out);
        for (uint64_t k = 0; k < show; k++) {
            if (k)
                fputs(", ", out);
            print_value(out, t->dtype, p + k * rec_dtype_size(t->dtype));
        }
        fputs(show < numel ? ", ...]" : "]", out);
    }
    fputc('\n', out);
}

void rec_print(FILE *out, const rec_view *view, int max_values)
{
    const rec_header *h = view->hdr;
    if (h->kind == REC_EOS) {
        fprintf(out, "end of stream: %" PRIu64 " data records, %s\n", h->seq,
                h->flags & REC_EOS_STOPPED ? "writer stopped" : "writer finished");
        return;
    }
    fprintf(out, "record seq %" PRIu64 " epoch %u: %u tensor%s, %" PRIu64 " bytes, flags 0x%x, source %u\n", h->seq,
            h->epoch, h->n_tensors, h->n_tensors == 1 ? "" : "s", h->size, h->flags, h->source);
    int width = 0;
    for (uint32_t i = 0; i < h->n_tensors; i++) {
        int l = (int)strlen(view->tensors[i].name);
        width = l > width ? l : width;
    }
    for (uint32_t i = 0; i < h->n_tensors; i++)
        print_tensor(out, view, (int)i, width, max_values);
}

/* ---- streams ------------------------------------------------------------------------------ */

int rec_stream_note(rec_stream *s, const rec_view *view, const char *what, char **err)
{
    const rec_header *h = view->hdr;
    if (s->ended)
        return report_failure(err, "%s: a record follows the end-of-stream record (seq %" PRIu64 ")", what, h->seq);
    if (h->kind != REC_EOS) {
        s->data++;
        return 0;
    }
    s->ended = true;
    if (h->flags & REC_EOS_STOPPED)
        return report_failure(err, "%s: the stage writing it was stopped after %" PRIu64 " records (a signal or a "
                              "stop request); the stream is incomplete", what, h->seq);
    if (h->seq != s->data)
        return report_failure(err, "%s: the end-of-stream record says %" PRIu64 " records were sent, but %" PRIu64
                              " arrived", what, h->seq, s->data);
    return 0;
}

void rec_buf_free(rec_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->cap = 0;
}

/* Make room for `need` bytes (a multiple of 64), keeping the first `keep` (read so far). */
static int buf_reserve(rec_buf *b, size_t need, size_t keep, char **err)
{
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap * 2 > need ? b->cap * 2 : need;
    if (cap > REC_MAX_BYTES)
        cap = need; /* need itself is ≤ REC_MAX_BYTES, checked by rec_peek_size */
    uint8_t *p = aligned_alloc(REC_ALIGN, cap);
    if (!p)
        return report_failure(err, "out of memory for a %zu-byte record", need);
    if (keep)
        memcpy(p, b->data, keep);
    free(b->data);
    b->data = p;
    b->cap = cap;
    return 0;
}

/* Prefix an error with the stream offset, when the caller tracks one. */
static int stream_fail(char **err, const uint64_t *offset, const char *msg)
{
    if (offset)
        return report_failure(err, "stream offset %" PRIu64 ": %s", *offset, msg);
    return report_failure(err, "%s", msg);
}

static int stream_failf(char **err, const uint64_t *offset, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int stream_failf(char **err, const uint64_t *offset, const char *fmt, ...)
{
    strbuf sb = {0};
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&sb, fmt, ap);
    va_end(ap);
    stream_fail(err, offset, sb_str(&sb));
    sb_free(&sb);
    return -1;
}

/* Read the rest of a record whose header is in b. The buffer grows with the bytes that
 * actually arrive (doubling, from 64 KiB), not to the size the header claims up front, so a
 * stray header that says "1 GiB" followed by nothing costs no gigabyte. Returns bytes read. */
static ssize_t read_body(int fd, rec_buf *b, size_t size, char **err)
{
    size_t got = REC_HEADER_BYTES;
    while (got < size) {
        size_t step = b->cap * 2 > (64u << 10) ? b->cap * 2 : (64u << 10);
        size_t target = size - got < step ? size : got + step;
        if (buf_reserve(b, target, got, err))
            return -1;
        ssize_t r = read_upto(fd, b->data + got, target - got);
        if (r < 0)
            return report_failure(err, "read: %s", strerror(errno));
        got += (size_t)r;
        if (got < target)
            break; /* end of file */
    }
    return (ssize_t)got;
}

int rec_fd_read(int fd, rec_buf *b, rec_view *view, uint64_t *offset, char **err)
{
    if (buf_reserve(b, REC_HEADER_BYTES, 0, err))
        return -1;
    ssize_t got = read_upto(fd, b->data, REC_HEADER_BYTES);
    if (got < 0)
        return stream_failf(err, offset, "read: %s", strerror(errno));
    if (got == 0)
        return 0; /* clean end of file, at a record boundary */
    if (got < REC_HEADER_BYTES)
        return stream_failf(err, offset, "record truncated: the stream ends %zd bytes into a 64-byte header", got);
    char *msg = NULL;
    size_t size = rec_peek_size(b->data, &msg);
    if (!size || (got = read_body(fd, b, size, &msg)) < 0) {
        stream_fail(err, offset, msg);
        free(msg);
        return -1;
    }
    if ((size_t)got < size)
        return stream_failf(err, offset, "record seq %" PRIu64 " truncated: the stream ends after %zd of its %zu bytes",
                            ((const rec_header *)b->data)->seq, got, size);
    if (rec_parse(b->data, size, view, &msg)) {
        stream_fail(err, offset, msg);
        free(msg);
        return -1;
    }
    if (offset)
        *offset += size;
    return 1;
}

int rec_fd_write(int fd, const void *data, size_t len, char **err)
{
    const uint8_t *p = data;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return report_failure(err, "write: %s", strerror(errno));
        p += w;
        len -= (size_t)w;
    }
    return 0;
}
