/*
 * cmd_dataset_imagenet.c — `selfsup dataset imagenet SRC DST`: the disk_filelist files of an
 * ImageNet-style folder (SRC/{train,val}/<class>/<image>), as VISSL's
 * extra_scripts/create_imagenet_data_files.py writes them (it serves Places205 too).
 *
 *   selfsup dataset imagenet SRC DST [--generate-json] [--listdir-order]
 *
 * For train and val:
 *
 *   DST/<split>_images.npy   '<U' paths SRC/<split>/<class>/<image>
 *   DST/<split>_labels.npy   int64 class numbers, one per image
 *   DST/<split>_targets.json with --generate-json: {"<class>/<image>": number}
 *
 * Order. VISSL numbers the classes, and lists the images, in os.listdir order: the order the
 * file system returns directory entries, which differs between file systems and copies of the
 * same tree. By default the classes and images are sorted here instead (torchvision's
 * ImageFolder order, the disk_folder source's): the same numbers on every disk. --listdir-order
 * keeps VISSL's order (the files
 * VISSL's script writes on this disk, byte for byte). Either way each split numbers its own
 * classes, as VISSL's does: when train and val hold different classes their numbers differ,
 * and a warning says so. An entry of SRC/<split> that is not a folder is skipped with a warning
 * (VISSL's script stops on it).
 *
 * DST/dataset_catalog.json gets the entry imagenet1k_filelist (train, val; absolute paths).
 *
 * Exit codes: 0 written, 1 a folder that cannot be read or a file that cannot be written,
 * 2 usage errors.
 */
#include "cmd.h"
#include "dataset_files.h"

#include "log.h"
#include "npy.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const char *src, *dst;
    bool json, listdir_order;
} imagenet_args;

static void usage(FILE *f)
{
    fputs("usage: selfsup dataset imagenet SRC DST [--generate-json] [--listdir-order]\n"
          "  SRC/{train,val}/<class>/<image> -> DST/<split>_images.npy, DST/<split>_labels.npy, as VISSL's\n"
          "  create_imagenet_data_files.py; classes and images sorted (--listdir-order: VISSL's\n"
          "  file-system order)\n",
          f);
}

/* The entries of dir but . and .. (os.listdir), in readdir order or sorted. */
static int list_dir(const char *dir, bool sorted, strlist *out, char **err)
{
    DIR *d = opendir(dir);
    if (!d)
        return report_failure(err, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            strlist_push(out, xstrdup(e->d_name));
        }
    closedir(d);
    if (sorted)
        strlist_sort(out);
    return 0;
}

/* The split's classes: its folders, in the chosen order (other entries skipped, warned). */
static int list_classes(const char *split_dir, bool sorted, strlist *classes, char **err)
{
    strlist all = {0};
    if (list_dir(split_dir, sorted, &all, err) != 0)
        return -1;
    for (size_t i = 0; i < all.n; i++) {
        char *path = path_join(split_dir, all.v[i]);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            strlist_push(classes, all.v[i]);
            all.v[i] = NULL;
        } else {
            log_warn("imagenet: %s is not a class folder: skipped", path);
        }
        free(path);
    }
    strlist_free(&all);
    return 0;
}

/* {"<class>/<image>": label} as Python's json.dump writes it (", " and ": " separators). */
static int write_targets(const char *path, char **ids, const int64_t *labels, size_t n, char **err)
{
    strbuf b = {0};
    sb_putc(&b, '{');
    for (size_t i = 0; i < n; i++) {
        char *key = py_json_string(ids[i]);
        sb_printf(&b, "%s%s: %lld", i ? ", " : "", key, (long long)labels[i]);
        free(key);
    }
    sb_putc(&b, '}');
    int rc = write_text_atomic(path, b.s, err);
    sb_free(&b);
    return rc;
}

/* One split's files; its classes, in their numbers' order, in *classes. */
static int write_split(const imagenet_args *a, const char *split, strlist *classes_out, char **err)
{
    char *split_dir = xasprintf("%s/%s", a->src, split);
    strlist classes = {0}, paths = {0}, ids = {0};
    int64_t *labels = NULL;
    int rc = list_classes(split_dir, !a->listdir_order, &classes, err);
    for (size_t c = 0; rc == 0 && c < classes.n; c++) {
        char *class_dir = xasprintf("%s/%s", split_dir, classes.v[c]);
        strlist images = {0};
        rc = list_dir(class_dir, !a->listdir_order, &images, err);
        for (size_t i = 0; rc == 0 && i < images.n; i++) {
            labels = xrealloc(labels, (paths.n + 1) * sizeof *labels);
            labels[paths.n] = (int64_t)c;
            strlist_push(&paths, xasprintf("%s/%s", class_dir, images.v[i]));
            strlist_push(&ids, xasprintf("%s/%s", classes.v[c], images.v[i]));
        }
        strlist_free(&images);
        free(class_dir);
    }
    char *images_npy = xasprintf("%s/%s_images.npy", a->dst, split), *labels_npy = xasprintf("%s/%s_labels.npy", a->dst, split);
    size_t shape[1] = {paths.n};
    if (rc == 0)
        rc = write_unicode_npy(images_npy, paths.v, paths.n, err);
    if (rc == 0)
        rc = npy_write(labels_npy, NPY_I8, 1, shape, labels, err);
    if (rc == 0 && a->json) {
        char *targets = xasprintf("%s/%s_targets.json", a->dst, split);
        rc = write_targets(targets, ids.v, labels, ids.n, err);
        free(targets);
    }
    if (rc == 0)
        log_info("imagenet: %s: %zu images of %zu classes -> %s", split, paths.n, classes.n, images_npy);
    *classes_out = classes;
    strlist_free(&paths), strlist_free(&ids);
    free(labels), free(images_npy), free(labels_npy), free(split_dir);
    return rc;
}

static bool same_names(const strlist *a, const strlist *b)
{
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->v[i], b->v[i]))
            return false;
    return true;
}

static int parse_args(int argc, char **argv, imagenet_args *a)
{
    static const char *const FLAGS[] = {"--generate-json", "--listdir-order"};
    bool on[2] = {false, false};
    *a = (imagenet_args){0};
    int rc = parse_src_dst(argc, argv, FLAGS, on, 2, &a->src, &a->dst, usage);
    a->json = on[0], a->listdir_order = on[1];
    return rc;
}

int cmd_dataset_imagenet(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    imagenet_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;
    char *err = NULL;
    strlist train = {0}, val = {0};
    rc = make_dirs(a.dst, 0777, &err);
    if (rc == 0)
        rc = write_split(&a, "train", &train, &err) || write_split(&a, "val", &val, &err) ? -1 : 0;
    if (rc == 0 && !same_names(&train, &val))
        log_warn("imagenet: train has %zu classes and val %zu, or not in the same order: each split numbers its own "
                 "(as VISSL's script), so a class's number may differ between them", train.n, val.n);
    strlist_free(&train), strlist_free(&val);
    if (rc == 0)
        rc = write_filelist_catalog(a.dst, "imagenet1k_filelist", "train", "val", &err);
    if (rc != 0) {
        log_error("%s", err);
        free(err);
        return EXIT_RUNTIME;
    }
    printf("%s: train and val file lists written from %s (catalog entry 'imagenet1k_filelist')\n", a.dst, a.src);
    return 0;
}
