/*
 * cmd_dataset_voc.c — `selfsup dataset voc2007|voc2012 SRC DST`: the data files of VISSL's VOC
 * benchmarks, as VISSL's extra_scripts/create_voc_data_files.py writes them.
 *
 *   selfsup dataset voc2007 SRC DST [--separate-partitions] [--generate-json]
 *
 * SRC is a VOCdevkit year folder (ImageSets/Main, JPEGImages). The per-class lists
 * ImageSets/Main/<class>_<split>.txt ("<image id> <1|-1|0>" per line; the other files there,
 * like train.txt or <class>_<split>_<x>.txt, are not lists: VISSL keeps a file when its name has
 * exactly two parts around '_') make each split's
 *
 *   DST/<split>_images.npy   '<U' paths SRC/JPEGImages/<id>.jpg, image ids in sorted order
 *   DST/<split>_labels.npy   int32 N × classes: 1 present, 0 absent (VOC's -1), -1 ignored (VOC's
 *                            0, "difficult"), and -1 for a class whose list lacks the image
 *   DST/<split>_targets.json with --generate-json: {id: {class: label}}, as VISSL dumps it
 *
 * with the classes in sorted order of their list files. Splits: train (the trainval lists) and test;
 * a VOC2012 folder, which has no test lists, gives train from its train lists and test from its
 * val lists; --separate-partitions gives train, val and test from the lists of those names. A
 * line that is not two fields, or whose label is not a number, is logged and skipped as VISSL
 * skips it (after the image was seen, in the second case, so the image is kept with its -1s).
 * SRC is written into the paths as given, as VISSL writes it.
 *
 * DST/dataset_catalog.json gets the entry VISSL's VOC benchmarks read (DATASET_NAMES: [voc2007]):
 * "train" the train split's files, "val" the test split's, absolute paths.
 *
 * Exit codes: 0 written, 1 a folder or a list that cannot be read or written, or classes missing
 * from a split (VISSL's "Missing classes"), 2 usage errors.
 */
#include "cmd.h"
#include "dataset_files.h"

#include "log.h"
#include "npy.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* One split: its class lists (sorted) and what they say. */
typedef struct {
    const char *name;  /* "train", "val", "test" */
    strlist lists;     /* paths of <class>_<suffix>.txt, sorted */
    strlist ids;       /* image ids, sorted */
    int32_t *labels;   /* ids.n × lists.n */
} voc_split;

static void usage(FILE *f)
{
    fputs("usage: selfsup dataset voc2007|voc2012 SRC DST [--separate-partitions] [--generate-json]\n"
          "  SRC: a VOCdevkit year folder (ImageSets/Main, JPEGImages); writes DST/<split>_images.npy,\n"
          "  DST/<split>_labels.npy (1 present, 0 absent, -1 ignored), DST/dataset_catalog.json, as\n"
          "  VISSL's create_voc_data_files.py\n",
          f);
}

/* ---- the class lists --------------------------------------------------------------------------- */

/* Whether `name` is "<class>_<suffix>.txt" as VISSL keeps it: glob's "*_<suffix>.txt" (no
 * leading dot), then exactly two parts around '_'. */
static bool is_class_list(const char *name, const char *suffix)
{
    char *tail = xasprintf("_%s.txt", suffix);
    size_t n = strlen(name), t = strlen(tail);
    bool ok = name[0] != '.' && n > t && !strcmp(name + n - t, tail);
    free(tail);
    return ok && strchr(name, '_') == strrchr(name, '_');
}

/* The sorted paths of dir's class lists for `suffix`. */
static int find_lists(const char *dir, const char *suffix, strlist *out, char **err)
{
    DIR *d = opendir(dir);
    if (!d)
        return report_failure(err, "%s: %s (a VOC folder holds ImageSets/Main)", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)))
        if (is_class_list(e->d_name, suffix))
            strlist_push(out, path_join(dir, e->d_name));
    closedir(d);
    strlist_sort(out);
    return 0;
}

/* The class of a list: its file name up to the first '.', then up to the first '_'. */
static char *class_of(const char *list_path)
{
    const char *base = strrchr(list_path, '/') ? strrchr(list_path, '/') + 1 : list_path;
    size_t n = strcspn(base, ".");
    char *name = xasprintf("%.*s", (int)n, base);
    name[strcspn(name, "_")] = '\0';
    return name;
}

/* ---- reading the lists into labels ---------------------------------------------------------------- */

typedef struct {
    strlist ids;     /* in first-seen order */
    int32_t *labels; /* ids.n × classes */
    size_t classes;
} label_map;

/* The row of `id`, made (all -1) when new. The class lists share one order, so line k of a list
 * is usually row k: that one is tried first. */
static size_t id_index(label_map *m, const char *id, size_t hint)
{
    if (hint < m->ids.n && !strcmp(m->ids.v[hint], id))
        return hint;
    for (size_t i = 0; i < m->ids.n; i++)
        if (!strcmp(m->ids.v[i], id))
            return i;
    strlist_push(&m->ids, xstrdup(id));
    m->labels = xrealloc(m->labels, m->ids.n * m->classes * sizeof *m->labels);
    for (size_t c = 0; c < m->classes; c++)
        m->labels[(m->ids.n - 1) * m->classes + c] = -1;
    return m->ids.n - 1;
}

/* VOC's 1 / -1 / 0 as a train target: 1, 0, -1. */
static int32_t target_of(long voc) { return voc == -1 ? 0 : voc == 0 ? -1 : (int32_t)voc; }

/* One line "<id> <label>" of class c's list, as VISSL's try block reads it. */
static void read_line(label_map *m, size_t c, char *line, size_t line_no, const char *path)
{
    char *save = NULL, *id = strtok_r(line, " \t\r\n\v\f", &save), *label = strtok_r(NULL, " \t\r\n\v\f", &save);
    if (!id || !label || strtok_r(NULL, " \t\r\n\v\f", &save)) {
        log_info("voc: skipping a line of %s that is not \"<id> <label>\"", path);
        return;
    }
    size_t i = id_index(m, id, line_no);
    char *end;
    errno = 0;
    long v = strtol(label, &end, 10);
    if (*end || errno || v < INT32_MIN || v > INT32_MAX) {
        log_info("voc: skipping label '%s' of %s in %s", label, id, path);
        return;
    }
    m->labels[i * m->classes + c] = target_of(v);
}

static int read_list(label_map *m, size_t c, const char *path, char **err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return report_failure(err, "%s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    for (size_t k = 0; getline(&line, &cap, f) > 0; k++)
        read_line(m, c, line, k, path);
    free(line);
    fclose(f);
    return 0;
}

static int cmp_row(const void *a, const void *b, void *ids) { return strcmp(((char **)ids)[*(const size_t *)a], ((char **)ids)[*(const size_t *)b]); }

/* The split's ids, sorted, with their label rows. */
static int read_split(voc_split *s, char **err)
{
    label_map m = {.classes = s->lists.n};
    for (size_t c = 0; c < s->lists.n; c++)
        if (read_list(&m, c, s->lists.v[c], err) != 0) {
            strlist_free(&m.ids), free(m.labels);
            return -1;
        }
    size_t *order = xmalloc((m.ids.n ? m.ids.n : 1) * sizeof *order);
    for (size_t i = 0; i < m.ids.n; i++)
        order[i] = i;
    qsort_r(order, m.ids.n, sizeof *order, cmp_row, m.ids.v);
    s->labels = xmalloc((m.ids.n ? m.ids.n : 1) * m.classes * sizeof *s->labels);
    for (size_t i = 0; i < m.ids.n; i++) {
        strlist_push(&s->ids, xstrdup(m.ids.v[order[i]]));
        memcpy(s->labels + i * m.classes, m.labels + order[i] * m.classes, m.classes * sizeof *s->labels);
    }
    free(order), free(m.labels);
    strlist_free(&m.ids);
    return 0;
}

/* ---- writing ------------------------------------------------------------------------------------- */

/* {id: {class: label}}, as Python's json.dump writes a dict (", " and ": " separators). */
static int write_targets_json(const char *path, const voc_split *s, char **err)
{
    strbuf b = {0};
    sb_putc(&b, '{');
    for (size_t i = 0; i < s->ids.n; i++) {
        char *id = py_json_string(s->ids.v[i]);
        sb_printf(&b, "%s%s: {", i ? ", " : "", id);
        for (size_t c = 0; c < s->lists.n; c++) {
            char *cls = class_of(s->lists.v[c]), *key = py_json_string(cls);
            sb_printf(&b, "%s%s: %d", c ? ", " : "", key, (int)s->labels[i * s->lists.n + c]);
            free(cls), free(key);
        }
        sb_putc(&b, '}');
        free(id);
    }
    sb_putc(&b, '}');
    int rc = write_text_atomic(path, b.s, err);
    sb_free(&b);
    return rc;
}

static int write_split(const char *src, const char *dst, const voc_split *s, bool json, char **err)
{
    char **paths = xmalloc((s->ids.n ? s->ids.n : 1) * sizeof *paths);
    for (size_t i = 0; i < s->ids.n; i++)
        paths[i] = xasprintf("%s/JPEGImages/%s.jpg", src, s->ids.v[i]);
    char *images = xasprintf("%s/%s_images.npy", dst, s->name), *labels = xasprintf("%s/%s_labels.npy", dst, s->name);
    size_t shape[2] = {s->ids.n, s->lists.n};
    int rc = write_unicode_npy(images, paths, s->ids.n, err);
    if (rc == 0)
        rc = npy_write(labels, NPY_I4, 2, shape, s->labels, err);
    if (rc == 0 && json) {
        char *targets = xasprintf("%s/%s_targets.json", dst, s->name);
        rc = write_targets_json(targets, s, err);
        free(targets);
    }
    if (rc == 0)
        log_info("voc: %s: %zu images, %zu classes -> %s, %s", s->name, s->ids.n, s->lists.n, images, labels);
    for (size_t i = 0; i < s->ids.n; i++)
        free(paths[i]);
    free(paths), free(images), free(labels);
    return rc;
}

/* ---- the command ----------------------------------------------------------------------------------- */

/* The class lists of each split (VISSL's get_data_files); -1 with *err when classes are missing. */
static int find_split_lists(const char *main_dir, bool separate, voc_split *splits, int n, char **err)
{
    strlist test = {0}, train = {0}, val = {0};
    int rc = find_lists(main_dir, "test", &test, err);
    if (rc == 0 && separate)
        rc = find_lists(main_dir, "train", &train, err) || find_lists(main_dir, "val", &val, err) ? -1 : 0;
    else if (rc == 0 && (rc = find_lists(main_dir, "trainval", &train, err)) == 0 && test.n == 0) {
        strlist_free(&train); /* VOC2012: trainval, train and val, no test */
        rc = find_lists(main_dir, "train", &train, err) || find_lists(main_dir, "val", &test, err) ? -1 : 0;
    }
    if (rc == 0 && (train.n != test.n || (separate && train.n != val.n) || train.n == 0))
        rc = report_failure(err, "%s: missing classes: %zu train, %zu test%s lists", main_dir, train.n, test.n,
                            separate ? " and val" : "");
    for (int k = 0; rc == 0 && k < n; k++) {
        strlist *from = !strcmp(splits[k].name, "train") ? &train : !strcmp(splits[k].name, "val") ? &val : &test;
        splits[k].lists = *from;
        *from = (strlist){0};
    }
    strlist_free(&test), strlist_free(&train), strlist_free(&val);
    return rc;
}

typedef struct {
    const char *name, *src, *dst;
    bool separate, json;
} voc_args;

static int parse_args(int argc, char **argv, voc_args *a)
{
    static const char *const FLAGS[] = {"--separate-partitions", "--generate-json"};
    bool on[2] = {false, false};
    *a = (voc_args){.name = argv[0]};
    int rc = parse_src_dst(argc, argv, FLAGS, on, 2, &a->src, &a->dst, usage);
    a->separate = on[0], a->json = on[1];
    return rc;
}

static int run_voc(const voc_args *a, char **err)
{
    voc_split splits[3] = {{.name = "train"}, {.name = "test"}, {.name = "val"}};
    int n = a->separate ? 3 : 2;
    char *main_dir = xasprintf("%s/ImageSets/Main", a->src);
    int rc = make_dirs(a->dst, 0777, err);
    if (rc == 0)
        rc = find_split_lists(main_dir, a->separate, splits, n, err);
    for (int k = 0; rc == 0 && k < n; k++)
        rc = read_split(&splits[k], err) || write_split(a->src, a->dst, &splits[k], a->json, err) ? -1 : 0;
    if (rc == 0)
        rc = write_filelist_catalog(a->dst, a->name, "train", "test", err);
    for (int k = 0; k < 3; k++) {
        strlist_free(&splits[k].lists), strlist_free(&splits[k].ids);
        free(splits[k].labels);
    }
    free(main_dir);
    return rc;
}

int cmd_dataset_voc(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    voc_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;
    char *err = NULL;
    if (run_voc(&a, &err) != 0) {
        log_error("%s", err);
        free(err);
        return EXIT_RUNTIME;
    }
    printf("%s: %s written from %s (catalog entry '%s')\n", a.dst, a.separate ? "train, val and test" : "train and test",
           a.src, a.name);
    return 0;
}
