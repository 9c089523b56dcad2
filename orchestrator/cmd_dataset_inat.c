/*
 * cmd_dataset_inat.c — `selfsup dataset inaturalist2018 SRC DST`: iNaturalist 2018's file lists,
 * as VISSL's extra_scripts/datasets/create_inaturalist2018_data_files.py writes them.
 *
 *   selfsup dataset inaturalist2018 SRC DST
 *
 * SRC holds the competition's train2018.json and val2018.json and the images under
 * train_val2018/. For each image of a file's "images" list, in its order: the path
 * SRC/train_val2018/<file_name without its first folder> and the label, the number of the
 * file name's third part (train_val2018/<kingdom>/<category id>/<image>: the category id), as
 * the script takes them. Writes DST/{train,val}_images.npy ('<U') and DST/{train,val}_labels.npy
 * (int64), and DST/dataset_catalog.json's entry inaturalist2018_filelist. The script's download
 * option is not here: nothing is downloaded.
 *
 * Exit codes: 0 written, 1 a missing or malformed annotation file, or a write that failed, 2 usage.
 */
#include "cmd.h"
#include "dataset_files.h"

#include "log.h"
#include "npy.h"
#include "util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fputs("usage: selfsup dataset inaturalist2018 SRC DST\n"
          "  SRC: train2018.json, val2018.json and train_val2018/; writes DST/{train,val}_images.npy and\n"
          "  DST/{train,val}_labels.npy as VISSL's create_inaturalist2018_data_files.py\n",
          f);
}

/* One image's path and label from its file_name; false when the name has fewer than three
 * parts or its third is not a number (the script would fail on it). */
static bool image_entry(const char *src, const char *file_name, char **path, int64_t *label)
{
    const char *first = strchr(file_name, '/'), *second = first ? strchr(first + 1, '/') : NULL;
    if (!first || !second)
        return false;
    const char *third_end = strchr(second + 1, '/');
    char *part = third_end ? xasprintf("%.*s", (int)(third_end - second - 1), second + 1) : xstrdup(second + 1), *end;
    errno = 0;
    long long v = strtoll(part, &end, 10);
    bool ok = *part && !*end && !errno;
    free(part);
    if (!ok)
        return false;
    *label = v;
    *path = xasprintf("%s/train_val2018/%s", src, first + 1);
    return true;
}

static int write_split(const char *src, const char *dst, const char *split, char **err)
{
    char *json_path = xasprintf("%s/%s2018.json", src, split);
    json_error_t je;
    json_t *root = json_load_file(json_path, 0, &je);
    int rc = root ? 0 : report_failure(err, "%s:%d: %s", json_path, je.line, je.text);
    const json_t *images = root ? json_object_get(root, "images") : NULL;
    if (rc == 0 && !json_is_array(images))
        rc = report_failure(err, "%s has no 'images' list", json_path);
    size_t n = json_array_size(images);
    char **paths = xcalloc(n ? n : 1, sizeof *paths);
    int64_t *labels = xcalloc(n ? n : 1, sizeof *labels);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const char *name = json_string_value(json_object_get(json_array_get(images, i), "file_name"));
        if (!name || !image_entry(src, name, &paths[i], &labels[i]))
            rc = report_failure(err, "%s: image %zu: file_name '%s' is not train_val2018/<kingdom>/<category>/<image>",
                                json_path, i, name ? name : "(missing)");
    }
    char *images_npy = xasprintf("%s/%s_images.npy", dst, split), *labels_npy = xasprintf("%s/%s_labels.npy", dst, split);
    size_t shape[1] = {n};
    if (rc == 0)
        rc = write_unicode_npy(images_npy, paths, n, err);
    if (rc == 0)
        rc = npy_write(labels_npy, NPY_I8, 1, shape, labels, err);
    if (rc == 0)
        log_info("inaturalist2018: %s: %zu images -> %s", split, n, images_npy);
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths), free(labels), free(images_npy), free(labels_npy), free(json_path);
    json_decref(root);
    return rc;
}

int cmd_dataset_inat(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    if (argc != 3 || argv[1][0] == '-' || argv[2][0] == '-') {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *src = argv[1], *dst = argv[2];
    char *err = NULL;
    int rc = make_dirs(dst, 0777, &err);
    if (rc == 0)
        rc = write_split(src, dst, "train", &err) || write_split(src, dst, "val", &err) ? -1 : 0;
    if (rc == 0)
        rc = write_filelist_catalog(dst, "inaturalist2018_filelist", "train", "val", &err);
    if (rc != 0) {
        log_error("%s", err);
        free(err);
        return EXIT_RUNTIME;
    }
    printf("%s: train and val file lists written from %s (catalog entry 'inaturalist2018_filelist')\n", dst, src);
    return 0;
}
