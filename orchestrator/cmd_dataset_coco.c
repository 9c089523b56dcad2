/*
 * cmd_dataset_coco.c — `selfsup dataset coco2014 ANNOTATIONS DST`: COCO's multi-label data files,
 * as VISSL's extra_scripts/create_coco_data_files.py writes them.
 *
 *   selfsup dataset coco2014 ANNOTATIONS DST --train-images DIR --val-images DIR
 *
 * For each partition P of val, train, minival and valminusminival whose ANNOTATIONS/
 * instances_P2014.json exists (VISSL asserts all four; train and val are required here), writes
 *
 *   DST/P_images.npy   '<U' paths PREFIX/<file_name>, file names sorted; PREFIX the train images'
 *                      folder for train, the val images' for the others
 *   DST/P_labels.npy   int32 N × categories (in the file's category order): 1 when a valid
 *                      object of that category is in the image, else 0
 *
 * An object is valid as VISSL's get_valid_objs has it: not "ignore": 1; its box (x, y, w, h) as
 * x1 = x, x2 = x + max(0, w − 1) (y likewise), clipped to [0, width − 1] × [0, height − 1], must
 * have x2 > x1 and y2 > y1, and its area must be positive. Images that share a file name share a
 * row (VISSL's map is keyed by it); an image without a valid object gets a row of zeros.
 * DST/dataset_catalog.json gets the entry coco2014_filelist: train the train files, val the val
 * ones, absolute paths.
 *
 * The whole annotation file is read into memory (jansson), as VISSL reads it (twice: json and
 * pycocotools): instances_train2014.json takes a few GB.
 *
 * Exit codes: 0 written, 1 an annotation file that is missing or malformed, or a write that
 * failed, 2 usage errors.
 */
#include "cmd.h"
#include "dataset_files.h"

#include "log.h"
#include "npy.h"
#include "util.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const PARTITIONS[] = {"val", "train", "minival", "valminusminival"};

typedef struct {
    const char *annotations, *dst, *train_images, *val_images;
} coco_args;

/* One image of the file: its id, name and size, and the row its name gets. */
typedef struct {
    json_int_t id;
    const char *file_name;
    double width, height;
    size_t row;
} coco_image;

/* An annotation's image id and its position in the file. */
typedef struct {
    json_int_t image_id;
    size_t index;
} ann_ref;

static void usage(FILE *f)
{
    fputs("usage: selfsup dataset coco2014 ANNOTATIONS DST --train-images DIR --val-images DIR\n"
          "  ANNOTATIONS: the folder of instances_{train,val,minival,valminusminival}2014.json; writes\n"
          "  DST/<partition>_images.npy and DST/<partition>_labels.npy (1 present, 0 absent), as\n"
          "  VISSL's create_coco_data_files.py, and DST/dataset_catalog.json (coco2014_filelist)\n",
          f);
}

/* ---- the objects ------------------------------------------------------------------------------- */

static double number(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_true(v) ? 1.0 : json_number_value(v);
}

static double clip(double v, double size) { return fmin(size - 1.0, fmax(0.0, v)); }

/* VISSL's get_valid_objs test for one annotation of an image of width × height. */
static bool valid_object(const json_t *ann, double width, double height)
{
    const json_t *ignore = json_object_get(ann, "ignore");
    if (ignore && (json_is_true(ignore) || (json_is_number(ignore) && json_number_value(ignore) == 1.0)))
        return false;
    const json_t *box = json_object_get(ann, "bbox");
    double x = json_number_value(json_array_get(box, 0)), y = json_number_value(json_array_get(box, 1));
    double w = json_number_value(json_array_get(box, 2)), h = json_number_value(json_array_get(box, 3));
    double x1 = clip(x, width), y1 = clip(y, height);
    double x2 = clip(x + fmax(0.0, w - 1.0), width), y2 = clip(y + fmax(0.0, h - 1.0), height);
    return number(ann, "area") > 0 && x2 > x1 && y2 > y1;
}

/* ---- the partition ------------------------------------------------------------------------------- */

static int cmp_ann(const void *a, const void *b)
{
    const ann_ref *x = a, *y = b;
    return x->image_id < y->image_id ? -1 : x->image_id > y->image_id ? 1 : (x->index > y->index) - (x->index < y->index);
}

static int cmp_name(const void *a, const void *b, void *images)
{
    const coco_image *im = images;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    int c = strcmp(im[i].file_name, im[j].file_name);
    return c ? c : (i > j) - (i < j);
}

/* Every image's row: its file name's rank among the distinct names; returns their count. */
static size_t assign_rows(coco_image *im, size_t n, const char ***names)
{
    size_t *order = xmalloc((n ? n : 1) * sizeof *order), rows = 0;
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    qsort_r(order, n, sizeof *order, cmp_name, im);
    *names = xmalloc((n ? n : 1) * sizeof **names);
    for (size_t k = 0; k < n; k++) {
        if (!k || strcmp(im[order[k]].file_name, im[order[k - 1]].file_name))
            (*names)[rows++] = im[order[k]].file_name;
        im[order[k]].row = rows - 1;
    }
    free(order);
    return rows;
}

/* Category id → column (the file's category order). -1 when unknown. */
static long column_of(const json_t *cats, json_int_t id)
{
    for (size_t c = 0; c < json_array_size(cats); c++)
        if (json_integer_value(json_object_get(json_array_get(cats, c), "id")) == id)
            return (long)c;
    return -1;
}

/* The images of `root`; false with *err for one without an id, a name or a size. */
static bool read_images(const json_t *root, coco_image **out, size_t *n, char **err)
{
    const json_t *images = json_object_get(root, "images");
    *n = json_array_size(images);
    *out = xcalloc(*n ? *n : 1, sizeof **out);
    for (size_t i = 0; i < *n; i++) {
        const json_t *e = json_array_get(images, i), *name = json_object_get(e, "file_name");
        if (!json_is_integer(json_object_get(e, "id")) || !json_is_string(name)) {
            report_failure(err, "image %zu has no integer id or no file_name", i);
            return false;
        }
        (*out)[i] = (coco_image){.id = json_integer_value(json_object_get(e, "id")), .file_name = json_string_value(name),
                                 .width = number(e, "width"), .height = number(e, "height")};
    }
    return true;
}

/* The labels (rows × categories) from the valid objects of every image, through its annotations
 * found by image id (pycocotools' imgToAnns). */
static int32_t *label_rows(const json_t *root, const coco_image *im, size_t n, size_t rows, char **err)
{
    const json_t *anns = json_object_get(root, "annotations"), *cats = json_object_get(root, "categories");
    size_t na = json_array_size(anns), nc = json_array_size(cats);
    ann_ref *refs = xmalloc((na ? na : 1) * sizeof *refs);
    for (size_t a = 0; a < na; a++)
        refs[a] = (ann_ref){json_integer_value(json_object_get(json_array_get(anns, a), "image_id")), a};
    qsort(refs, na, sizeof *refs, cmp_ann);
    int32_t *labels = xcalloc(rows * nc > 0 ? rows * nc : 1, sizeof *labels);
    for (size_t i = 0; i < n; i++) {
        size_t lo = 0, hi = na; /* the first annotation of image im[i].id */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (refs[mid].image_id < im[i].id)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t a = lo; a < na && refs[a].image_id == im[i].id; a++) {
            const json_t *ann = json_array_get(anns, refs[a].index);
            if (!valid_object(ann, im[i].width, im[i].height))
                continue;
            long col = column_of(cats, json_integer_value(json_object_get(ann, "category_id")));
            if (col < 0) {
                report_failure(err, "annotation %zu names a category that is not in the file", refs[a].index);
                free(refs), free(labels);
                return NULL;
            }
            labels[im[i].row * nc + (size_t)col] = 1;
        }
    }
    free(refs);
    return labels;
}

/* One partition's two files from its annotation file. */
static int write_partition(const coco_args *a, const char *part, const char *json_path, char **err)
{
    json_error_t je;
    json_t *root = json_load_file(json_path, 0, &je);
    if (!root)
        return report_failure(err, "%s:%d: %s", json_path, je.line, je.text);
    coco_image *im = NULL;
    const char **names = NULL;
    size_t n = 0, rows = 0, classes = json_array_size(json_object_get(root, "categories"));
    int32_t *labels = NULL;
    int rc = read_images(root, &im, &n, err) ? 0 : -1;
    if (rc == 0) {
        rows = assign_rows(im, n, &names);
        labels = label_rows(root, im, n, rows, err);
        rc = labels ? 0 : -1;
    }
    const char *prefix = !strcmp(part, "train") ? a->train_images : a->val_images;
    char **paths = xmalloc((rows ? rows : 1) * sizeof *paths);
    for (size_t r = 0; r < rows; r++)
        paths[r] = xasprintf("%s/%s", prefix, names[r]);
    char *images_npy = xasprintf("%s/%s_images.npy", a->dst, part), *labels_npy = xasprintf("%s/%s_labels.npy", a->dst, part);
    size_t shape[2] = {rows, classes};
    if (rc == 0)
        rc = write_unicode_npy(images_npy, paths, rows, err);
    if (rc == 0)
        rc = npy_write(labels_npy, NPY_I4, 2, shape, labels, err);
    if (rc == 0)
        log_info("coco: %s: %zu images, %zu categories -> %s", part, rows, classes, images_npy);
    else if (*err) { /* name the file */
        char *why = *err;
        *err = xasprintf("%s: %s", json_path, why);
        free(why);
    }
    for (size_t r = 0; r < rows; r++)
        free(paths[r]);
    free(paths), free(images_npy), free(labels_npy), free(labels), free(names), free(im);
    json_decref(root);
    return rc;
}

/* ---- the command ------------------------------------------------------------------------------------ */

static int parse_args(int argc, char **argv, coco_args *a)
{
    *a = (coco_args){0};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if ((!strcmp(o, "--train-images") || !strcmp(o, "--val-images")) && i + 1 < argc) {
            *(!strcmp(o, "--train-images") ? &a->train_images : &a->val_images) = argv[++i];
        } else if (o[0] == '-') {
            log_error("coco: unknown option '%s'", o);
            return EXIT_USAGE;
        } else if (!a->annotations) {
            a->annotations = o;
        } else if (!a->dst) {
            a->dst = o;
        } else {
            log_error("coco: one ANNOTATIONS and one DST only ('%s' is extra)", o);
            return EXIT_USAGE;
        }
    }
    if (!a->annotations || !a->dst || !a->train_images || !a->val_images) {
        usage(stderr);
        return EXIT_USAGE;
    }
    return 0;
}

static int run_coco(const coco_args *a, char **err)
{
    int rc = make_dirs(a->dst, 0777, err);
    for (size_t p = 0; rc == 0 && p < ARRAY_LEN(PARTITIONS); p++) {
        char *json_path = xasprintf("%s/instances_%s2014.json", a->annotations, PARTITIONS[p]);
        bool required = p < 2;
        if (access(json_path, R_OK) == 0)
            rc = write_partition(a, PARTITIONS[p], json_path, err);
        else if (required)
            rc = report_failure(err, "%s: %s", json_path, strerror(errno));
        else
            log_info("coco: no %s (VISSL's script asks for it too): skipped", json_path);
        free(json_path);
    }
    return rc == 0 ? write_filelist_catalog(a->dst, "coco2014_filelist", "train", "val", err) : rc;
}

int cmd_dataset_coco(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    coco_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;
    char *err = NULL;
    if (run_coco(&a, &err) != 0) {
        log_error("%s", err);
        free(err);
        return EXIT_RUNTIME;
    }
    printf("%s: COCO 2014 data files written from %s (catalog entry 'coco2014_filelist')\n", a.dst, a.annotations);
    return 0;
}
