/*
 * filelist.h — the .npy files of a disk_filelist source: an array of image paths, and an
 * array of labels.
 */
#ifndef SELFSUP_DECODE_FILELIST_H
#define SELFSUP_DECODE_FILELIST_H

#include <stddef.h>
#include <stdint.h>

/* Read a 1-D .npy of strings — numpy unicode ('<U…', what np.save writes for a list of
 * str) or bytes ('|S…') — into count malloc'd UTF-8 paths. 0, or -1 with *err (malloc'd). */
int decode_filelist_read(const char *path, char ***paths, size_t *count, char **err);
/* The same from a .npy image in memory (`name` for messages); for tests and fuzzing. */
int decode_filelist_parse(const uint8_t *buf, size_t len, const char *name, char ***paths, size_t *count, char **err);
void decode_filelist_free(char **paths, size_t count);

/* Read a .npy of integer labels (any integer or bool dtype, one label per sample: shape (N,)
 * or (N, 1)) as int64, as VISSL's np.load + astype(int64). 0, or -1 with *err. */
int decode_labels_read(const char *path, int64_t **labels, size_t *count, char **err);
/* The same, also taking a row of labels per sample: shape (N, M) in C order (VOC07's
 * [N, 20] {1, 0, -1} matrix; np.load(path)[idx] is then a row of M values). *labels holds
 * count * *width values, row-major; *width is 1 for (N,) and (N, 1). Fortran order and
 * other shapes are refused with a message naming the file and its shape. */
int decode_labels_read_rows(const char *path, int64_t **labels, size_t *count, size_t *width, char **err);

#endif
