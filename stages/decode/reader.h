/*
 * reader.h — reading whole files ahead of the decoder: io_uring with a window of reads in
 * flight, or plain pread when io_uring is not available.
 *
 * The caller pushes paths in the order it will want them (sampler order) while there is
 * room, and pops the files back in that same order; with io_uring up to `depth` reads
 * proceed in the background meanwhile, so the decoder rarely waits for the disk.
 */
#ifndef SELFSUP_DECODE_READER_H
#define SELFSUP_DECODE_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Files larger than this are refused (EFBIG) rather than read. */
#define DECODE_READER_MAX_FILE ((size_t)1 << 31)

typedef struct {
    const char *path; /* as pushed (not copied: must outlive the read) */
    uint64_t tag;     /* as pushed */
    uint8_t *data;    /* the contents, malloc'd, now the caller's to free; NULL on error */
    size_t len;
    int error;        /* 0, or an errno saying why the file could not be read */
} decode_file;

typedef struct decode_reader decode_reader;

/* depth ≥ 1 reads in flight. force_pread: skip io_uring (tests of the fallback). When
 * io_uring cannot be set up (old kernel, seccomp), the reader falls back to pread. */
decode_reader *decode_reader_new(unsigned depth, bool force_pread);
void decode_reader_free(decode_reader *r);
bool decode_reader_uses_io_uring(const decode_reader *r);
/* How many more paths can be pushed now. */
unsigned decode_reader_room(const decode_reader *r);
/* Start reading `path` (needs room). */
void decode_reader_push(decode_reader *r, const char *path, uint64_t tag);
/* The oldest pushed file, waiting for its read. Returns 1 with *out set, 0 when nothing is
 * pending. */
int decode_reader_pop(decode_reader *r, decode_file *out);

#endif
