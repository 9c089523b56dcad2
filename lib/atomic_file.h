/*
 * atomic_file.h — crash-safe file replacement, shared by every writer of results
 * (.npy features, safetensors checkpoints): a run killed mid-write leaves the old file or
 * the whole new one, never half of one.
 */
#ifndef SELFSUP_ATOMIC_FILE_H
#define SELFSUP_ATOMIC_FILE_H

#include <jansson.h>
#include <stddef.h>

/*
 * atomic_file — write a file under a temporary name in the same directory, then fsync it,
 * rename it over `path` and fsync the directory, so readers see the old file or the whole new
 * one. The temp file is created with mode 0666 & ~umask, like fopen would.
 */
typedef struct {
    int fd;
    char *path;
    char *tmp;
} atomic_file;

int atomic_file_open(atomic_file *f, const char *path, char **err);
/* Reserve `bytes` of disk for the file before writing it (best effort: ignored where the
 * filesystem cannot). Large writes then avoid ext4's delayed allocation work, as numpy's
 * np.save does with fallocate; small ones are not worth the call. */
void atomic_file_reserve(atomic_file *f, size_t bytes);
int atomic_file_write(atomic_file *f, const void *buf, size_t n, char **err);
/* fsync, close, rename, fsync the directory. On failure the temp file is removed. */
int atomic_file_commit(atomic_file *f, char **err);
/* Close and remove the temp file; safe after commit or on a failed open. */
void atomic_file_abort(atomic_file *f);

/* The whole of buf[0..n) as `path`, by the steps above: 0, or -1 with *err and nothing left. */
int atomic_file_write_whole(const char *path, const void *buf, size_t n, char **err);
/* A results document as `path`: indented, keys in insertion order, doubles to 17 digits, a
 * newline at the end. */
int json_write_file(const json_t *doc, const char *path, char **err);

#endif
