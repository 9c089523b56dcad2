/*
 * imagefolder.c — torchvision's ImageFolder(root) listing (datasets/folder.py, 0.14).
 *
 * Classes are the sub-folders of root (symlinks followed), sorted by name; class i gets
 * target i. Within a class, torchvision walks the tree with os.walk(followlinks=True), sorts
 * the walked folders by their path, and takes each folder's files (anything that is not a
 * folder) sorted by name, keeping those whose lower-cased name ends with one of
 * IMG_EXTENSIONS. Sorting is by code point; strcmp on UTF-8 names gives the same order.
 * A class without any image is an error, as in torchvision.
 *
 * One difference: within a class, each folder is walked once, known by device and inode.
 * os.walk(followlinks=True) walks a folder again for every symlink that reaches it, and
 * forever round a cycle (`ln -s . x` makes x/x/x/...; two such links double the walk at every
 * level). A folder that two links reach is listed under the first, in the walk's order.
 * The walk can be cancelled: a stage asked to stop must not finish a million-folder walk first.
 */
#include "imagefolder.h"

#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* Folders deeper than this below a class are not walked: the walk recurses once a level. */
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

/* ---- the walk: folders seen (by device and inode), and the cancel flag ---------------------- */

typedef struct {
    dev_t dev;
    ino_t ino;
    bool used;
} dir_id;

typedef struct {
    const atomic_bool *cancel; /* may be NULL */
    char **err;
    dir_id *seen; /* open addressing, at most half full */
    size_t n_seen, cap_seen;
} walker;

static size_t dir_hash(dev_t dev, ino_t ino, size_t cap)
{
    return (size_t)(((uint64_t)ino * 0x9E3779B97F4A7C15u) ^ (uint64_t)dev) & (cap - 1);
}

static void seen_insert(walker *w, dev_t dev, ino_t ino)
{
    size_t h = dir_hash(dev, ino, w->cap_seen);
    while (w->seen[h].used)
        h = (h + 1) & (w->cap_seen - 1);
    w->seen[h] = (dir_id){dev, ino, true};
    w->n_seen++;
}

static void seen_grow(walker *w)
{
    dir_id *old = w->seen;
    size_t old_cap = w->cap_seen;
    w->cap_seen = old_cap ? 2 * old_cap : 64;
    w->seen = xcalloc(w->cap_seen, sizeof *w->seen);
    w->n_seen = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].used)
            seen_insert(w, old[i].dev, old[i].ino);
    free(old);
}

/* True the first time a folder is met, false every time after. */
static bool first_visit(walker *w, const struct stat *st)
{
    if (2 * (w->n_seen + 1) > w->cap_seen)
        seen_grow(w);
    for (size_t h = dir_hash(st->st_dev, st->st_ino, w->cap_seen); w->seen[h].used; h = (h + 1) & (w->cap_seen - 1))
        if (w->seen[h].dev == st->st_dev && w->seen[h].ino == st->st_ino)
            return false;
    seen_insert(w, st->st_dev, st->st_ino);
    return true;
}

static void seen_clear(walker *w)
{
    if (w->seen)
        memset(w->seen, 0, w->cap_seen * sizeof *w->seen);
    w->n_seen = 0;
}

/* -1 with the message once the caller asked us to stop. */
static int check_cancel(const walker *w, const char *dir)
{
    if (w->cancel && atomic_load(w->cancel))
        return report_failure(w->err, "stopped while listing %s", dir);
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

/* Every folder under `dir` (itself included) as os.walk(followlinks=True) visits them, each
 * once. */
static int walk_folders(walker *w, const char *dir, int depth, str_list *out)
{
    struct stat st;
    if (check_cancel(w, dir) != 0)
        return -1;
    if (stat(dir, &st) != 0)
        return report_failure(w->err, "cannot read folder %s: %s", dir, strerror(errno));
    if (!first_visit(w, &st))
        return 0;
    list_push(out, xstrdup(dir));
    if (depth >= MAX_DEPTH)
        return 0;
    str_list folders = {0}, files = {0};
    int rc = list_dir(dir, &folders, &files, w->err);
    for (size_t i = 0; rc == 0 && i < folders.len; i++) {
        char *sub = path_join(dir, folders.items[i]);
        rc = walk_folders(w, sub, depth + 1, out);
        free(sub);
    }
    list_free(&folders);
    list_free(&files);
    return rc;
}

/* Append the images of folder `dir` to `out`; returns how many, or -1. */
static long add_images(walker *w, const char *dir, int64_t target, decode_imagefolder *out, size_t *cap)
{
    str_list folders = {0}, files = {0};
    if (check_cancel(w, dir) != 0 || list_dir(dir, &folders, &files, w->err) != 0)
        return -1;
    long found = 0;
    for (size_t k = 0; k < files.len; k++) {
        if (!decode_has_image_extension(files.items[k]))
            continue;
        if (out->count == *cap) {
            *cap = *cap ? 2 * *cap : 1024;
            out->paths = xrealloc(out->paths, *cap * sizeof *out->paths);
            out->targets = xrealloc(out->targets, *cap * sizeof *out->targets);
        }
        out->paths[out->count] = path_join(dir, files.items[k]);
        out->targets[out->count++] = target;
        found++;
    }
    list_free(&folders);
    list_free(&files);
    return found;
}

/* Append the images of one class to `out`; returns how many, or -1. */
static long scan_class(walker *w, const char *class_dir, int64_t target, decode_imagefolder *out, size_t *cap)
{
    str_list walked = {0};
    seen_clear(w); /* a folder linked from two classes belongs to both, as in torchvision */
    long found = walk_folders(w, class_dir, 0, &walked) != 0 ? -1 : 0;
    list_sort(&walked); /* sorted(os.walk(...)): by folder path */
    for (size_t i = 0; found >= 0 && i < walked.len; i++) {
        long more = add_images(w, walked.items[i], target, out, cap);
        found = more < 0 ? -1 : found + more;
    }
    list_free(&walked);
    return found;
}

int decode_imagefolder_scan(const char *root, decode_imagefolder *out, char **err)
{
    return decode_imagefolder_scan_cancellable(root, NULL, out, err);
}

int decode_imagefolder_scan_cancellable(const char *root, const atomic_bool *cancel, decode_imagefolder *out,
                                        char **err)
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
    walker w = {.cancel = cancel, .err = err};
    size_t cap = 0;
    long found = 1;
    for (size_t c = 0; found > 0 && c < classes.len; c++) {
        char *class_dir = path_join(root, classes.items[c]);
        found = scan_class(&w, class_dir, (int64_t)c, out, &cap);
        free(class_dir);
        if (found == 0)
            report_failure(err, "class folder %s/%s holds no image (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp)",
                           root, classes.items[c]);
    }
    free(w.seen);
    out->classes = classes.items;
    out->n_classes = classes.len;
    if (found <= 0)
        decode_imagefolder_free(out);
    return found > 0 ? 0 : -1;
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
