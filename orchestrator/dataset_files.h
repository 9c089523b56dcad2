/*
 * dataset_files.h — what `selfsup dataset` writes, shared by its datasets (cmd_dataset.c,
 * cmd_dataset_voc.c): numpy '<U' path arrays, atomic text files, catalog entries.
 */
#ifndef SELFSUP_DATASET_FILES_H
#define SELFSUP_DATASET_FILES_H

#include <jansson.h>
#include <stddef.h>

/* numpy.save of a 1-d '<U' array of these strings (format 1.0, header padded as numpy does;
 * each string's code points as Python's os.fsdecode sees the bytes), written atomically. */
int write_unicode_npy(const char *path, char **strings, size_t count, char **err);
/* `text` as the whole of `path`, atomically. 0, or -1 with *err. */
int write_text_atomic(const char *path, const char *text, char **err);
/* `s` as Python's json.dump writes a string: quoted, escaped, non-ASCII as \uXXXX (new). */
char *py_json_string(const char *s);
/* The JSON array [a, b]: a catalog split's data and label paths. */
json_t *catalog_pair(const char *a, const char *b);
/* `catalog` (a map of dataset name → {"train": [..], "val": [..]}) as DIR/dataset_catalog.json,
 * indented as VISSL's file is. */
int write_catalog(const char *dir, json_t *catalog, char **err);

#endif
