/*
 * dataset_files.h — what `selfsup dataset` writes, shared by its datasets (cmd_dataset.c,
 * cmd_dataset_voc.c): numpy '<U' path arrays, atomic text files, catalog entries.
 */
#ifndef SELFSUP_DATASET_FILES_H
#define SELFSUP_DATASET_FILES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* A growable list of owned strings (file names, paths, ids). */
typedef struct {
    char **v;
    size_t n;
} strlist;
/* Append s (taken over). */
void strlist_push(strlist *l, char *s);
/* Free every string and the list; it is empty again. */
void strlist_free(strlist *l);
/* Sort in strcmp order (Python's sorted() of str, for UTF-8). */
void strlist_sort(strlist *l);

/* numpy.save of a 1-d '<U' array of these strings (format 1.0, header padded as numpy does;
 * each string's code points as Python's os.fsdecode sees the bytes), written atomically. */
int write_unicode_npy(const char *path, char **strings, size_t count, char **err);
/* `text` as the whole of `path`, atomically. 0, or -1 with *err. */
int write_text_atomic(const char *path, const char *text, char **err);
/* `s` as Python's json.dump writes a string: quoted, escaped, non-ASCII as \uXXXX; the
   caller frees the returned string. */
char *py_json_string(const char *s);
/* The JSON array [a, b]: a catalog split's data and label paths. */
json_t *catalog_pair(const char *a, const char *b);
/* `catalog` (a map of dataset name → {"train": [..], "val": [..]}) as DIR/dataset_catalog.json,
 * indented as VISSL's file is. */
int write_catalog(const char *dir, json_t *catalog, char **err);
/* DST/dataset_catalog.json with one entry, `name`: "train" DST/<train>_images.npy and
 * DST/<train>_labels.npy, "val" the same of the split `val` (absolute paths). */
int write_filelist_catalog(const char *dst, const char *name, const char *train, const char *val, char **err);
/* A dataset command's "SRC DST [--flag ...]" (argv[0] is the dataset's name): flags[i] is set when
 * names[i] is given. 0, or EXIT_USAGE after saying why (`usage` printed for a missing operand). */
int parse_src_dst(int argc, char **argv, const char *const *names, bool *flags, int nflags, const char **src,
                  const char **dst, void (*usage)(FILE *));

#endif
