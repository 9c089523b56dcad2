/*
 * imagefolder.c — torchvision's ImageFolder(root) listing (datasets/folder.py, 0.14).
 *
 * Classes are the sub-folders of root (symlinks followed), sorted by name; class i gets
 * target i. Within a class, torchvision walks the tree with os.walk(followlinks=True), sorts
 * the walked folders by their path, and takes each folder's files (anything that is not a
 * folder) sorted by name, keeping those whose lower-cased name ends with one of
 * IMG_EXTENSIONS. Sorting is by code point; strcmp on UTF-8 names gives the same order.
 * A class without any image is an error, as in torchvision.
 */
#include "imagefolder.h"

#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* os.walk with followlinks=True loops forever on a symlink cycle; we stop at this depth. */
#define MAX_DEPTH 64

typedef struct {
    char **items;
    size_t len, cap;
} str_list;

static void list_push(str_list *l, char *s)
{
    if (l->len == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->items = xrealloc(l->items, l->cap * sizeof *l->items);
    }
    l->items[l->len++] = s;
}

static void list_free(str_list *l)
{
    for (size_t i = 0; i < l->len; i++)
        free(l->items[i]);
    free(l->items);
    *l = (str_list){0};
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void list_sort(str_list *l)
{
    if (l->len > 1)
        qsort(l->items, l->len, sizeof *l->items, compare_strings);
}

int decode_has_image_extension(const char *name)
{
    static const char *const extensions[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                             ".pgm", ".tif",  ".tiff", ".webp"};
    size_t n = strlen(name);
    for (size_t i = 0; i < ARRAY_LEN(extensions); i++) {
        size_t e = strlen(extensions[i]);
        if (n >= e && !strcasecmp(name + n - e, extensions[i]))
            return 1;
    }
    return 0;
}

/* The entries of `dir` split into sub-folders and other files (names only, sorted). */
static int list_dir(const char *dir, str_list *folders, str_list *files, char **err)
{
    DIR *d = opendir(dir);
    if (!d)
        return report_failure(err, "cannot read folder %s: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char *full = path_join(dir, e->d_name);
        struct stat st;
        /* stat, not lstat: like os.scandir's is_dir(), a symlink to a folder is a folder. */
        bool is_dir = stat(full, &st) == 0 && S_ISDIR(st.st_mode);
        free(full);
        list_push(is_dir ? folders : files, xstrdup(e->d_name));
    }
    closedir(d);
    list_sort(folders);
    list_sort(files);
    return 0;
}

/* Every folder under `dir` (itself included), as os.walk(followlinks=True) visits them. */
static int walk_folders(const char *dir, int depth, str_list *out, char **err)
{
    list_push(out, xstrdup(dir));
    if (depth >= MAX_DEPTH)
        return 0;
    str_list folders = {0}, files = {0};
    int rc = list_dir(dir, &folders, &files, err);
    for (size_t i = 0; rc == 0 && i < folders.len; i++) {
        char *sub = path_join(dir, folders.items[i]);
        rc = walk_folders(sub, depth + 1, out, err);
        free(sub);
    }
    list_free(&folders);
    list_free(&files);
    return rc;
}

/* Append the images of one class to `out`; returns how many, or -1. */
static long scan_class(const char *class_dir, int64_t target, decode_imagefolder *out, size_t *cap, char **err)
{
    str_list walked = {0};
    if (walk_folders(class_dir, 0, &walked, err) != 0) {
        list_free(&walked);
        return -1;
    }
    list_sort(&walked); /* sorted(os.walk(...)): by folder path */
    long found = 0;
    for (size_t i = 0; i < walked.len; i++) {
        str_list folders = {0}, files = {0};
        if (list_dir(walked.items[i], &folders, &files, err) != 0) {
            list_free(&walked);
            return -1;
        }
        for (size_t k = 0; k < files.len; k++) {
            if (!decode_has_image_extension(files.items[k]))
                continue;
            if (out->count == *cap) {
                *cap = *cap ? 2 * *cap : 1024;
                out->paths = xrealloc(out->paths, *cap * sizeof *out->paths);
                out->targets = xrealloc(out->targets, *cap * sizeof *out->targets);
            }
            out->paths[out->count] = path_join(walked.items[i], files.items[k]);
            out->targets[out->count++] = target;
            found++;
        }
        list_free(&folders);
        list_free(&files);
    }
    list_free(&walked);
    return found;
}

int decode_imagefolder_scan(const char *root, decode_imagefolder *out, char **err)
{
    *out = (decode_imagefolder){0};
    str_list classes = {0}, files = {0};
    if (list_dir(root, &classes, &files, err) != 0)
        return -1;
    list_free(&files);
    if (classes.len == 0) {
        list_free(&classes);
        return report_failure(err, "no class folder in %s (disk_folder wants ROOT/CLASS/IMAGE)", root);
    }
    size_t cap = 0;
    for (size_t c = 0; c < classes.len; c++) {
        char *class_dir = path_join(root, classes.items[c]);
        long found = scan_class(class_dir, (int64_t)c, out, &cap, err);
        free(class_dir);
        if (found <= 0) {
            if (found == 0)
                report_failure(err, "class folder %s/%s holds no image (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp)",
                               root, classes.items[c]);
            out->classes = classes.items;
            out->n_classes = classes.len;
            decode_imagefolder_free(out);
            return -1;
        }
    }
    out->classes = classes.items;
    out->n_classes = classes.len;
    return 0;
}

void decode_imagefolder_free(decode_imagefolder *f)
{
    for (size_t i = 0; i < f->count; i++)
        free(f->paths[i]);
    for (size_t i = 0; i < f->n_classes; i++)
        free(f->classes[i]);
    free(f->paths);
    free(f->targets);
    free(f->classes);
    *f = (decode_imagefolder){0};
}
