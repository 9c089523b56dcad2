/*
 * record.h — the unit of data between stages: one sample or one batch, as a small header and
 * named tensors. The C twin of VISSL's sample dict (data.0 … data.K, label, data_valid,
 * data_idx, plus whatever a method needs).
 *
 * The same bytes are used in a ring slot, a pipe frame, a file and a ZeroMQ message, so a
 * record is self-describing and self-delimiting:
 *
 *   offset 0     rec_header (64 bytes): magic "SSRC", version, kind, flags, n_tensors,
 *                size (bytes of the whole record), seq, epoch, source
 *   offset 64    n_tensors × rec_tensor (128 bytes each): name (NUL-padded, ≤ 31 chars),
 *                dtype, ndim, shape[8], offset and nbytes of the payload
 *   then         payloads, each at a 64-byte-aligned offset from the record start, in the
 *                order of the descriptors, not overlapping; size is a multiple of 64
 *
 * Everything is little-endian (the only byte order we run on; rec_parse refuses others by
 * magic). A writer builds a record in place in a caller's buffer (a ring slot): it reserves
 * the descriptor table up front (max_tensors), so payload pointers are final the moment
 * rec_add returns them and nothing is ever copied or moved. A reader validates every field
 * before it trusts it (records come from pipes, files and the network) and then reads the
 * payloads in place.
 *
 * Kinds: REC_DATA is a sample or batch; REC_EOS ends a stream on the byte transports (pipe,
 * file, tcp), where "the producer closed cleanly" must be told apart from "the producer died".
 *
 * An end-of-stream record is the writer's account of its stream: its seq is the number of
 * data records the writer sent, and its flags say how the stream ended — REC_EOS_FINISHED
 * (the writer did all its work) or REC_EOS_STOPPED (a signal or a stop request cut it short).
 * A reader holds it against what it received (rec_stream_note): a stopped stream, a count
 * that differs or a record after the end is an error, never a short stream taken as whole.
 */
#ifndef SELFSUP_RECORD_H
#define SELFSUP_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define REC_MAGIC 0x43525353u /* "SSRC" read as a little-endian uint32 */
#define REC_VERSION 1
#define REC_ALIGN 64
#define REC_HEADER_BYTES 64
#define REC_TENSOR_BYTES 128
#define REC_NAME_MAX 31 /* characters, without the NUL */
#define REC_MAX_DIMS 8
#define REC_MAX_TENSORS 256
/* A bound on what a reader accepts from a stream before it allocates (1 GiB). */
#define REC_MAX_BYTES (1ull << 30)

typedef enum { REC_DATA = 1, REC_EOS = 2 } rec_kind;

/* The flags of an end-of-stream record: exactly one of these. */
#define REC_EOS_FINISHED 1u
#define REC_EOS_STOPPED 2u

/* Element types, numbered for the wire; never renumber. */
typedef enum {
    REC_U8 = 1,
    REC_I8 = 2,
    REC_I16 = 3,
    REC_I32 = 4,
    REC_I64 = 5,
    REC_F16 = 6,
    REC_BF16 = 7,
    REC_F32 = 8,
    REC_F64 = 9,
    REC_BOOL = 10,
} rec_dtype;

typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t kind;
    uint32_t flags;     /* free for the stages; 0 unless a stage documents a bit */
    uint32_t n_tensors;
    uint64_t size;      /* bytes of the whole record, header included; multiple of 64 */
    uint64_t seq;       /* sequence number (sample index or batch index) */
    uint32_t epoch;
    uint32_t source;    /* who made it (rank or worker id); informational */
    uint8_t reserved[24]; /* zero */
} rec_header;

typedef struct {
    char name[REC_NAME_MAX + 1]; /* NUL-terminated, NUL-padded */
    uint16_t dtype;
    uint16_t ndim;
    uint32_t reserved0;          /* zero */
    uint64_t offset;             /* of the payload, from the record start; multiple of 64 */
    uint64_t nbytes;             /* == product(shape) × dtype size */
    uint64_t shape[REC_MAX_DIMS]; /* unused dims are 0 */
    uint8_t reserved1[8];        /* zero */
} rec_tensor;

_Static_assert(sizeof(rec_header) == REC_HEADER_BYTES, "rec_header layout");
_Static_assert(sizeof(rec_tensor) == REC_TENSOR_BYTES, "rec_tensor layout");

/* Bytes per element (0 for an unknown code) and the numpy-style name ("uint8", "float32"). */
size_t rec_dtype_size(int dtype);
const char *rec_dtype_name(int dtype);
/* Parse "uint8", "u8", "float32", "f32" ...; -1 when unknown. */
int rec_dtype_parse(const char *name);

/* ---- writing, in place -------------------------------------------------------------------- */

typedef struct {
    uint8_t *buf;
    size_t cap;        /* bytes available at buf */
    size_t used;       /* end of the last payload, rounded up to 64 */
    uint32_t max_tensors;
    bool overflow;     /* a rec_add did not fit: rec_finish fails */
    size_t needed;     /* bytes the record would have needed (for the error message) */
    char error[160];
} rec_writer;

/* Start a record of `kind` in buf[0..cap). buf must be 64-byte aligned. Reserves room for
 * max_tensors descriptors (≤ REC_MAX_TENSORS). Returns -1 (with w->error set) when even
 * the header and descriptors do not fit. */
int rec_writer_init(rec_writer *w, void *buf, size_t cap, rec_kind kind, uint64_t seq, uint32_t epoch,
                    uint32_t max_tensors);
/* Append a tensor and return its payload (64-byte aligned, uninitialised) to fill in place.
 * NULL when it does not fit, the name is too long or repeated, or the tensor table is full;
 * w->error says which. The record stays usable for rec_writer_needed(). */
void *rec_add(rec_writer *w, const char *name, rec_dtype dtype, int ndim, const uint64_t *shape);
/* Append a tensor and copy its payload from src. */
int rec_add_copy(rec_writer *w, const char *name, rec_dtype dtype, int ndim, const uint64_t *shape,
                 const void *src);
/* Bytes the record needs so far (header, max_tensors descriptors and every payload asked
 * for, including those that did not fit): the capacity to retry with after an overflow. */
size_t rec_writer_needed(const rec_writer *w);
/* Close the record; returns its size in bytes, or 0 when something did not fit (w->error says
 * how many bytes it needed against the capacity) or any rec_add failed (w->error says why). */
size_t rec_finish(rec_writer *w);
/* The header being written (to set flags or source). */
rec_header *rec_writer_header(rec_writer *w);

/* An end-of-stream record: 64 bytes, kind REC_EOS, no tensors, seq = `records` (the data
 * records the writer sent), flags REC_EOS_STOPPED when `stopped`, else REC_EOS_FINISHED.
 * Returns its size (0 when cap < 64). */
size_t rec_write_eos(void *buf, size_t cap, uint64_t records, bool stopped);

/* ---- reading, in place -------------------------------------------------------------------- */

typedef struct {
    const rec_header *hdr;
    const rec_tensor *tensors; /* hdr->n_tensors of them */
    const uint8_t *base;       /* the record's first byte */
} rec_view;

/* Validate the `len` bytes at buf as one record (len must equal hdr->size) and point `view`
 * at it. Checks magic, version, kind, size, reserved fields, names (NUL-terminated, printable,
 * unique), dtype codes, ndim, shape × dtype size == nbytes without overflow, payload offsets
 * (aligned, after the descriptor table, inside the record, increasing, not overlapping).
 * Returns 0, or -1 with a message (see report_failure in util.h). */
int rec_parse(const void *buf, size_t len, rec_view *view, char **err);
/* Check only the 64-byte header (magic, version, kind, size bounds), to learn how many more
 * bytes to read from a stream. Returns the record size or 0 with *err. */
size_t rec_peek_size(const void *header64, char **err);

/* What a reader of one writer's stream has seen, to hold the end-of-stream record against. */
typedef struct {
    uint64_t data;  /* data records so far */
    bool ended;     /* the end-of-stream record came */
} rec_stream;

/* Account for one record read from a stream. 0, or -1 with *err saying what is wrong: a
 * record after the end, an end that says it was stopped, or one whose count of records is not
 * the number that arrived. `what` names the stream in the message. */
int rec_stream_note(rec_stream *s, const rec_view *view, const char *what, char **err);

/* Index of the tensor named `name`, or -1. */
int rec_find(const rec_view *view, const char *name);
/* Payload of tensor i (already validated by rec_parse). */
const void *rec_data(const rec_view *view, int i);
/* Number of elements of tensor i. */
uint64_t rec_numel(const rec_view *view, int i);

/* Print a record for humans: header, then one line per tensor (name, dtype, shape) with its
 * first `max_values` values. Used by `selfsup inspect`. */
void rec_print(FILE *out, const rec_view *view, int max_values);

/* ---- streams (pipes and files) ---------------------------------------------------------- */

/* A growable, 64-byte-aligned buffer that stream readers reuse from record to record. */
typedef struct {
    uint8_t *data;
    size_t cap;
} rec_buf;
void rec_buf_free(rec_buf *b);

/* Read one record from fd into b and validate it (rec_parse). Retries EINTR and short reads.
 * Returns 1 with *view set, 0 at end of file exactly at a record boundary, -1 on error: I/O,
 * a record cut short (the writer died mid-record), or an invalid record (*err says which,
 * with the byte offset in the stream when `offset` is not NULL; *offset advances by each
 * record read). */
int rec_fd_read(int fd, rec_buf *b, rec_view *view, uint64_t *offset, char **err);
/* Write len bytes (one or more records) to fd, retrying EINTR and short writes. 0 or -1. */
int rec_fd_write(int fd, const void *data, size_t len, char **err);

#endif
