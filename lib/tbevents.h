/*
 * tbevents.h — TensorBoard event files (what torch.utils.tensorboard's SummaryWriter writes),
 * scalars only, with nothing but the C library.
 *
 * A file "events.out.tfevents.<seconds>.<host>.<pid>" in the log folder holds TFRecords:
 * uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes, the payload, uint32
 * masked CRC-32C of the payload; masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8. Each
 * payload is a tensorflow.Event protobuf: wall_time (field 1, double), step (2, int64), then
 * file_version (3, "brain.Event:2") for the first record, or summary (5) holding one
 * Summary.Value: tag (1, string), then simple_value (2, float) or histo (5, HistogramProto:
 * min 1, max 2, num 3, sum 4, sum_squares 5, packed bucket_limit 6 and bucket 7, doubles).
 *
 * Histograms use TensorFlow's default buckets, as SummaryWriter.add_histogram(bins=
 * "tensorflow") does: edges ±1e-12·1.1^k up to 1e20 and 0, a value counted in the bucket whose
 * right edge is the first one ≥ it; empty buckets at either end are left out.
 *
 * CRC-32C (Castagnoli) is written out here: Debian ships no C library for it (only
 * python3-crc32c), and it is one table.
 */
#ifndef SELFSUP_TBEVENTS_H
#define SELFSUP_TBEVENTS_H

#include <stddef.h>
#include <stdint.h>

typedef struct tb_writer tb_writer;

#define TB_MAX_TAG 1024 /* bytes of a tag kept (longer ones are cut) */

/* Create `dir` (and its parents) and a new event file in it. NULL with *err. */
tb_writer *tb_open(const char *dir, char **err);
/* One scalar: `tag` = value (stored as float32, as SummaryWriter does) at `step`. Returns 0,
 * or -1 when the file cannot be written (logged once). */
int tb_scalar(tb_writer *w, const char *tag, double value, int64_t step);
/* A histogram of n values (non-finite ones are left out). Returns 0 or -1 as tb_scalar. */
int tb_histogram(tb_writer *w, const char *tag, const float *values, size_t n, int64_t step);
void tb_flush(tb_writer *w);
void tb_close(tb_writer *w);
const char *tb_path(const tb_writer *w);

/* The pieces, for tests: CRC-32C of n bytes; one TFRecord (framing of `payload`) into out
 * (n + 16 bytes); an Event protobuf with a scalar summary into out (returns its length,
 * at most 64 + TB_MAX_TAG). */
uint32_t tb_crc32c(const void *data, size_t n);
void tb_record(const void *payload, size_t n, uint8_t *out);
size_t tb_scalar_event(double wall_time, int64_t step, const char *tag, float value, uint8_t *out);
/* The HistogramProto of n values: its encoded bytes (malloc'd) and length. */
uint8_t *tb_histogram_proto(const float *values, size_t n, size_t *len);

#endif
