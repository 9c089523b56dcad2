/*
 * dataset.c — DATA.<split> of the config to a dataset: VISSL's get_data_files,
 * DiskImageDataset, SyntheticImageDataset and GenericSSLDataset's label logic.
 *
 * Paths (VISSL's get_data_files): len(DATASET_NAMES) must equal len(DATA_SOURCES); a
 * synthetic source has no path; otherwise DATA_PATHS[i] when DATA_PATHS is given, else the
 * catalog's entry [name]["train" | "val"][0]. Labels: LABEL_PATHS[i] when given and present
 * on disk, else the catalog's [1] when present. DATA_LIMIT > 0 keeps the first N images of
 * every source. LABEL_TYPE standard reads one label per label source (or a row of M labels
 * when a disk_filelist label .npy is 2-D [N, M], like VOC07's matrix; all label sources must
 * then have that width); sample_index (forced when LABEL_SOURCES is empty) labels every
 * source with the sample index; zero with 0.
 * With COPY_TO_LOCAL_DISK the folder or file list is first copied to COPY_DESTINATION_DIR
 * (localcopy.c) and read from there. Every problem here is reported before the stage writes
 * anything, and the stage exits 2 (a failed copy included).
 */
#include "dataset.h"

#include "filelist.h"
#include "imagefolder.h"
#include "localcopy.h"
#include "util.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const cfg_node *split_cfg; /* the DATA.<split> map */
    const char *split_key;     /* "DATA.TRAIN" */
    const char *catalog_split; /* "train" or "val" */
    const char *catalog_path;
    json_t *catalog;           /* loaded on first use */
    decode_imagefolder *folders; /* per data source, for disk_folder labels to reuse */
    const atomic_bool *cancel;   /* the folder walks give up once it turns true (may be NULL) */
} loader;

static const cfg_node *list_at(const loader *ld, const char *key, size_t *len)
{
    const cfg_node *n = cfg_map_get(ld->split_cfg, key);
    *len = n && n->kind == CFG_LIST ? n->len : 0;
    return n;
}

/* Item i of a list of strings, or NULL. */
static const char *string_at(const loader *ld, const char *key, size_t i)
{
    size_t len;
    const cfg_node *n = list_at(ld, key, &len);
    return i < len && n->items[i]->kind == CFG_STR ? n->items[i]->s : NULL;
}

static const char *string_key(const loader *ld, const char *key, const char *fallback)
{
    const cfg_node *n = cfg_map_get(ld->split_cfg, key);
    return n && n->kind == CFG_STR ? n->s : fallback;
}

static int64_t int_key(const loader *ld, const char *key, int64_t fallback)
{
    const cfg_node *n = cfg_map_get(ld->split_cfg, key);
    return n && n->kind == CFG_INT ? n->i : fallback;
}

/* catalog[name][split][which] as a string, or NULL; *known says whether the name exists. */
static const char *catalog_entry(loader *ld, const char *name, int which, bool *known)
{
    if (!ld->catalog) {
        json_error_t jerr;
        char *why = NULL; /* a catalog that is not a regular file is no catalog (not a wait on a FIFO) */
        bool readable = ld->catalog_path && check_regular_file(ld->catalog_path, (size_t)1 << 30, &why) == 0;
        free(why);
        ld->catalog = readable ? json_load_file(ld->catalog_path, 0, &jerr) : NULL;
        if (!ld->catalog)
            ld->catalog = json_object(); /* no catalog: every name is unknown */
    }
    json_t *entry = name ? json_object_get(ld->catalog, name) : NULL;
    *known = entry != NULL;
    json_t *files = json_object_get(entry, ld->catalog_split);
    json_t *item = json_is_array(files) ? json_array_get(files, (size_t)which) : NULL;
    return json_is_string(item) ? json_string_value(item) : NULL;
}

static int data_path_of(loader *ld, size_t i, const char **path, char **err)
{
    size_t n_paths;
    list_at(ld, "DATA_PATHS", &n_paths);
    if (n_paths > 0) {
        if (!(*path = string_at(ld, "DATA_PATHS", i)))
            return report_failure(err, "config.%s.DATA_PATHS has %zu entries, but source %zu needs one", ld->split_key,
                                  n_paths, i);
        return 0;
    }
    const char *name = string_at(ld, "DATASET_NAMES", i);
    bool known;
    *path = catalog_entry(ld, name, 0, &known);
    if (!known)
        return report_failure(err, "config.%s.DATASET_NAMES.%zu: dataset '%s' is not in %s and DATA_PATHS is empty",
                              ld->split_key, i, name ? name : "?", ld->catalog_path ? ld->catalog_path : "the catalog");
    if (!*path)
        return report_failure(err, "config.%s.DATASET_NAMES.%zu: the catalog has no '%s' path for '%s'", ld->split_key, i,
                              ld->catalog_split, name);
    return 0;
}

/* REMOVE_IMG_PATH_PREFIX / NEW_IMG_PATH_PREFIX (newer VISSL): move a file list elsewhere. */
static void replace_prefixes(loader *ld, decode_source *src)
{
    const char *old = string_key(ld, "REMOVE_IMG_PATH_PREFIX", ""), *new = string_key(ld, "NEW_IMG_PATH_PREFIX", "");
    size_t n = strlen(old);
    if (!n)
        return;
    for (size_t k = 0; k < src->count; k++) {
        if (strncmp(src->paths[k], old, n))
            continue;
        char *moved = xasprintf("%s%s", new, src->paths[k] + n);
        free(src->paths[k]);
        src->paths[k] = moved;
    }
}

/* COPY_TO_LOCAL_DISK: read the data from a copy on this node's disk (localcopy.c), made
 * once per node; data_path keeps naming the original (labels match on it). */
static int copy_to_local_disk(loader *ld, const char *path, char **local, char **err)
{
    const cfg_node *copy = cfg_map_get(ld->split_cfg, "COPY_TO_LOCAL_DISK");
    *local = NULL;
    if (!copy || copy->kind != CFG_BOOL || !copy->b)
        return 0;
    char why[512];
    *local = local_copy(path, string_key(ld, "COPY_DESTINATION_DIR", ""), 0, why, sizeof why);
    if (!*local) {
        report_failure(err, "config.%s.COPY_TO_LOCAL_DISK: %s", ld->split_key, why);
        return DECODE_DATASET_RUNTIME_ERROR;
    }
    return 0;
}

/* Keep the first `limit` paths (DATA_LIMIT). */
static void apply_limit(decode_source *src, int64_t limit)
{
    if (limit <= 0 || (size_t)limit >= src->count)
        return;
    for (size_t k = (size_t)limit; src->paths && k < src->count; k++)
        free(src->paths[k]);
    src->count = (size_t)limit;
}

static int load_source(loader *ld, size_t i, decode_source *src, char **err)
{
    const char *kind = string_at(ld, "DATA_SOURCES", i);
    int64_t limit = int_key(ld, "DATA_LIMIT", -1);
    if (kind && !strcmp(kind, "synthetic")) {
        *src = (decode_source){.kind = DECODE_SOURCE_SYNTHETIC, .data_path = xstrdup(""),
                               .count = limit > 0 ? (size_t)limit : DECODE_SYNTHETIC_LENGTH};
        return 0;
    }
    const char *path;
    if (data_path_of(ld, i, &path, err) != 0)
        return -1;
    char *local = NULL;
    int copied = copy_to_local_disk(ld, path, &local, err);
    if (copied != 0)
        return copied;
    const char *read_from = local ? local : path;
    int rc = 0;
    if (kind && !strcmp(kind, "disk_folder")) {
        *src = (decode_source){.kind = DECODE_SOURCE_FOLDER, .data_path = xstrdup(path)};
        rc = decode_imagefolder_scan_cancellable(read_from, ld->cancel, &ld->folders[i], err);
        /* The source borrows the listing's paths; the listing keeps ownership. */
        src->paths = ld->folders[i].paths;
        src->count = ld->folders[i].count;
    } else if (kind && !strcmp(kind, "disk_filelist")) {
        *src = (decode_source){.kind = DECODE_SOURCE_FILELIST, .data_path = xstrdup(path)};
        rc = decode_filelist_read(read_from, &src->paths, &src->count, err);
        if (rc == 0)
            replace_prefixes(ld, src);
    } else {
        rc = report_failure(err, "config.%s.DATA_SOURCES.%zu: unknown data source '%s' (disk_folder, disk_filelist, synthetic)",
                            ld->split_key, i, kind ? kind : "?");
    }
    free(local);
    if (rc != 0)
        return -1;
    if (src->kind == DECODE_SOURCE_FILELIST)
        apply_limit(src, limit);
    else if (limit > 0 && (size_t)limit < src->count)
        src->count = (size_t)limit; /* the listing frees every path later */
    return 0;
}

/* LABEL_PATHS[j] when given and present, else the catalog's label path when present. */
static const char *label_path_of(loader *ld, size_t j)
{
    const char *given = string_at(ld, "LABEL_PATHS", j);
    if (given && path_exists(given))
        return given;
    bool known;
    const char *from_catalog = catalog_entry(ld, string_at(ld, "DATASET_NAMES", j), 1, &known);
    return from_catalog && path_exists(from_catalog) ? from_catalog : NULL;
}

static int load_labels(loader *ld, decode_dataset *ds, size_t j, decode_label_source *out, char **err)
{
    const char *kind = string_at(ld, "LABEL_SOURCES", j);
    const char *path = label_path_of(ld, j);
    if (!path)
        return report_failure(err, "config.%s.LABEL_SOURCES.%zu: no label file: set LABEL_PATHS or add one to the catalog",
                              ld->split_key, j);
    if (kind && !strcmp(kind, "disk_filelist"))
        return decode_labels_read_rows(path, &out->values, &out->count, &out->width, err);
    if (!kind || strcmp(kind, "disk_folder"))
        return report_failure(err, "config.%s.LABEL_SOURCES.%zu: unknown label source '%s' (disk_folder, disk_filelist)",
                              ld->split_key, j, kind ? kind : "?");
    decode_imagefolder scanned = {0};
    const decode_imagefolder *f = &scanned;
    if (j < ds->n_sources && ds->sources[j].kind == DECODE_SOURCE_FOLDER && !strcmp(ds->sources[j].data_path, path))
        f = &ld->folders[j]; /* the usual case: labels from the image folder itself */
    else if (decode_imagefolder_scan_cancellable(path, ld->cancel, &scanned, err) != 0)
        return -1;
    out->count = f->count;
    out->width = 1;
    out->values = xmalloc((f->count ? f->count : 1) * sizeof *out->values);
    memcpy(out->values, f->targets, f->count * sizeof *out->values);
    decode_imagefolder_free(&scanned);
    return 0;
}

static int check_lengths(const loader *ld, const decode_dataset *ds, char **err)
{
    for (size_t i = 1; i < ds->n_sources; i++)
        if (ds->sources[i].count < ds->length)
            return report_failure(err, "config.%s.DATA_SOURCES.%zu: %zu images, fewer than source 0's %zu", ld->split_key, i,
                                  ds->sources[i].count, ds->length);
    for (size_t j = 0; j < ds->n_label_sources; j++)
        if (ds->label_sources[j].count < ds->length)
            return report_failure(err, "config.%s.LABEL_SOURCES.%zu: %zu labels for %zu images", ld->split_key, j,
                                  ds->label_sources[j].count, ds->length);
    return 0;
}

static int load_all(loader *ld, decode_dataset *ds, char **err)
{
    size_t n_sources, n_names, n_labels;
    list_at(ld, "DATA_SOURCES", &n_sources);
    list_at(ld, "DATASET_NAMES", &n_names);
    list_at(ld, "LABEL_SOURCES", &n_labels);
    if (n_sources == 0)
        return report_failure(err, "config.%s.DATA_SOURCES is empty: nothing to read", ld->split_key);
    if (n_names != n_sources)
        return report_failure(err, "config.%s: DATASET_NAMES has %zu entries and DATA_SOURCES %zu; they must match",
                              ld->split_key, n_names, n_sources);
    int rc;
    ld->folders = xcalloc(n_sources, sizeof *ld->folders);
    ds->sources = xcalloc(n_sources, sizeof *ds->sources);
    for (; ds->n_sources < n_sources; ds->n_sources++)
        if ((rc = load_source(ld, ds->n_sources, &ds->sources[ds->n_sources], err)) != 0) {
            ds->n_sources++; /* free what it holds too */
            return rc;
        }
    ds->length = ds->sources[0].count;
    const char *type = string_key(ld, "LABEL_TYPE", "standard");
    ds->label_type = !strcmp(type, "zero") ? DECODE_LABEL_ZERO
                     : n_labels == 0 || !strcmp(type, "sample_index") ? DECODE_LABEL_SAMPLE_INDEX
                                                                      : DECODE_LABEL_STANDARD;
    if (ds->label_type == DECODE_LABEL_STANDARD) {
        ds->label_sources = xcalloc(n_labels, sizeof *ds->label_sources);
        for (; ds->n_label_sources < n_labels; ds->n_label_sources++)
            if (load_labels(ld, ds, ds->n_label_sources, &ds->label_sources[ds->n_label_sources], err) != 0)
                return -1;
        for (size_t j = 1; j < ds->n_label_sources; j++)
            if (ds->label_sources[j].width != ds->label_sources[0].width) {
                const char *p0 = label_path_of(ld, 0), *pj = label_path_of(ld, j);
                return report_failure(err,
                                      "config.%s.LABEL_SOURCES: label source %zu (%s) has %zu labels per sample but "
                                      "label source 0 (%s) has %zu; all label sources must have the same width",
                                      ld->split_key, j, pj ? pj : "?", ds->label_sources[j].width, p0 ? p0 : "?",
                                      ds->label_sources[0].width);
            }
    }
    return check_lengths(ld, ds, err);
}

int decode_dataset_load(decode_dataset *ds, const cfg_node *config, const char *split, const char *catalog_path,
                        char **err)
{
    return decode_dataset_load_cancellable(ds, config, split, catalog_path, NULL, err);
}

int decode_dataset_load_cancellable(decode_dataset *ds, const cfg_node *config, const char *split,
                                    const char *catalog_path, const atomic_bool *cancel, char **err)
{
    *ds = (decode_dataset){.split = !strcmp(split, "TEST") ? "TEST" : "TRAIN"};
    bool test = !strcmp(ds->split, "TEST");
    loader ld = {.split_key = test ? "DATA.TEST" : "DATA.TRAIN", .catalog_split = test ? "val" : "train",
                 .catalog_path = catalog_path, .cancel = cancel};
    ld.split_cfg = cfg_path(config, ld.split_key);
    char *found_catalog = NULL;
    if (!catalog_path) {
        char *dir = cfg_find_configs_dir();
        ld.catalog_path = found_catalog = dir ? path_join(dir, "dataset_catalog.json") : NULL;
        free(dir);
    }
    int rc = ld.split_cfg ? 0 : report_failure(err, "config.%s is missing", ld.split_key);
    if (rc == 0) {
        ds->gray_size = (int)int_key(&ld, "DEFAULT_GRAY_IMG_SIZE", 224);
        rc = load_all(&ld, ds, err);
    }
    /* Folder sources borrowed their listing's paths: hand them over, drop the rest. */
    for (size_t i = 0; i < ds->n_sources && ld.folders; i++) {
        if (ds->sources[i].kind != DECODE_SOURCE_FOLDER)
            continue;
        for (size_t k = ds->sources[i].count; k < ld.folders[i].count; k++)
            free(ld.folders[i].paths[k]);
        ld.folders[i].count = 0;
        ld.folders[i].paths = NULL;
        decode_imagefolder_free(&ld.folders[i]);
    }
    free(ld.folders);
    json_decref(ld.catalog);
    free(found_catalog);
    if (rc != 0)
        decode_dataset_free(ds);
    return rc != 0 && cancel && atomic_load(cancel) ? DECODE_DATASET_CANCELLED : rc;
}

void decode_dataset_free(decode_dataset *ds)
{
    for (size_t i = 0; i < ds->n_sources; i++) {
        decode_source *s = &ds->sources[i];
        decode_filelist_free(s->paths, s->count);
        free(s->data_path);
    }
    for (size_t j = 0; j < ds->n_label_sources; j++)
        free(ds->label_sources[j].values);
    free(ds->sources);
    free(ds->label_sources);
    *ds = (decode_dataset){0};
}

size_t decode_dataset_label_count(const decode_dataset *ds)
{
    return ds->label_type == DECODE_LABEL_STANDARD ? ds->n_label_sources : ds->n_sources;
}

size_t decode_dataset_label_width(const decode_dataset *ds)
{
    return ds->label_type == DECODE_LABEL_STANDARD && ds->n_label_sources > 0 && ds->label_sources[0].width > 0
               ? ds->label_sources[0].width
               : 1;
}

void decode_dataset_labels(const decode_dataset *ds, size_t idx, int64_t *labels)
{
    size_t n = decode_dataset_label_count(ds);
    if (ds->label_type == DECODE_LABEL_STANDARD) {
        size_t m = decode_dataset_label_width(ds);
        for (size_t j = 0; j < n; j++)
            memcpy(labels + j * m, ds->label_sources[j].values + idx * m, m * sizeof *labels);
        return;
    }
    for (size_t j = 0; j < n; j++)
        labels[j] = ds->label_type == DECODE_LABEL_ZERO ? 0 : (int64_t)idx;
}
