/*
 * cfg_check.c — validation of a composed, inferred config, before anything runs.
 *
 * Composition already checked keys and types against defaults.yaml. This pass checks what
 * a schema of defaults cannot express: names (transforms, losses, collators, schedulers,
 * trunks, heads...) with a "did you mean", enumerations, lists whose lengths must agree,
 * transform parameters (crop sizes within MAX_CROP_SIDE), LR schedules (through lib/sched's
 * own checks), value ranges (selfsup's own SELFSUP.* keys and the augment worker count
 * included: what a run would otherwise find late), the data and weights files the run
 * will read, and keys that ask for what nothing implements yet (AMP on the cpu, activation checkpointing,
 * another train step: refused; SyncBN: a warning that it changes nothing on one trainer).
 *
 * Paths are resolved as VISSL resolves them: DATA_PATHS when given, otherwise the dataset
 * catalog (configs/dataset_catalog.json; the TEST split reads the "val" entry). A missing
 * file is an error when cfg_options.check_paths is set (validate, run) and a warning
 * otherwise (show).
 */
#include "cfg_internal.h"

#include "ring.h"
#include "util.h"

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    cfg_t *cfg;
    const cfg_options *opt;
    cfg_err *err;
    json_t *catalog; /* loaded on first use */
} checker;

static cfg_node *config_at(const checker *ck, const char *path)
{
    return cfg_path(cfg_map_get(ck->cfg->root, "config"), path);
}

static bool config_true(const checker *ck, const char *path)
{
    cfg_node *n = config_at(ck, path);
    return n && n->kind == CFG_BOOL && n->b;
}

/* ---- names and enumerations -------------------------------------------------------------- */

static bool check_in(checker *ck, const cfg_node *n, const char *path, const char *what,
                     const char *const *names, size_t count)
{
    if (!n || n->kind != CFG_STR) {
        cfg_fail(ck->err, n, path, "expected the name of a %s", what);
        return false;
    }
    for (size_t k = 0; k < count; k++)
        if (!strcmp(names[k], n->s))
            return true;
    const char *near = cfg_suggest(n->s, names, count);
    strbuf all = {0};
    for (size_t k = 0; !near && k < count && k < 12; k++)
        sb_printf(&all, "%s%s", k ? ", " : "", names[k]);
    if (near)
        cfg_fail(ck->err, n, path, "unknown %s '%s'; did you mean '%s'?", what, n->s, near);
    else
        cfg_fail(ck->err, n, path, "unknown %s '%s' (known: %s%s)", what, n->s, sb_str(&all),
                 count > 12 ? ", ..." : "");
    sb_free(&all);
    return false;
}

static bool check_name(checker *ck, const cfg_node *n, const char *path, const char *kind)
{
    size_t count;
    const char *const *names = cfg_known_names(kind, &count);
    char what[64];
    snprintf(what, sizeof what, "%s", kind);
    for (char *p = what; *p; p++)
        if (*p == '_')
            *p = ' ';
    return check_in(ck, n, path, what, names, count);
}

static bool check_enum(checker *ck, const char *path, const char *const *values, size_t count)
{
    char *full = xasprintf("config.%s", path);
    bool ok = check_in(ck, config_at(ck, path), full, cfg_path_leaf(path), values, count);
    free(full);
    return ok;
}

#define ENUM(ck, path, ...)                                                            \
    check_enum(ck, path, (const char *const[]){__VA_ARGS__},                           \
               sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

static bool check_int_in(checker *ck, const char *path, const int64_t *allowed, size_t count)
{
    cfg_node *n = config_at(ck, path);
    for (size_t k = 0; n && k < count; k++)
        if (n->kind == CFG_INT && n->i == allowed[k])
            return true;
    strbuf all = {0};
    for (size_t k = 0; k < count; k++)
        sb_printf(&all, "%s%lld", k ? ", " : "", (long long)allowed[k]);
    char *full = xasprintf("config.%s", path);
    cfg_fail(ck->err, n, full, "must be one of %s", sb_str(&all));
    free(full);
    sb_free(&all);
    return false;
}

static bool check_min(checker *ck, const char *path, double min)
{
    cfg_node *n = config_at(ck, path);
    if (!cfg_is_number(n) || cfg_number(n) >= min)
        return true;
    char *full = xasprintf("config.%s", path);
    cfg_fail(ck->err, n, full, "must be >= %g", min);
    free(full);
    return false;
}

/* A number within [lo, hi], finite; `rule` says so in the message ("must be ..."). */
static bool check_range(checker *ck, const char *path, double lo, double hi, const char *rule)
{
    cfg_node *n = config_at(ck, path);
    if (!cfg_is_number(n))
        return true; /* composition checked the type */
    double v = cfg_number(n);
    if (isfinite(v) && v >= lo && v <= hi)
        return true;
    char *full = xasprintf("config.%s", path);
    cfg_fail(ck->err, n, full, "%s, not %.15g", rule, v);
    free(full);
    return false;
}

/* ---- transforms -------------------------------------------------------------------------- */

static size_t list_len(const cfg_node *n)
{
    return n && n->kind == CFG_LIST ? n->len : 0;
}

static bool check_multicrop(checker *ck, const cfg_node *t, const char *path)
{
    cfg_node *total = cfg_map_get(t, "total_num_crops"), *num = cfg_map_get(t, "num_crops");
    cfg_node *sizes = cfg_map_get(t, "size_crops"), *scales = cfg_map_get(t, "crop_scales");
    if (!total || !num || !sizes || !scales) {
        cfg_fail(ck->err, t, path, "ImgPilToMultiCrop needs total_num_crops, num_crops, size_crops and crop_scales");
        return false;
    }
    if (list_len(num) != list_len(sizes) || list_len(num) != list_len(scales) || !list_len(num)) {
        cfg_fail(ck->err, t, path, "ImgPilToMultiCrop: num_crops, size_crops and crop_scales must be "
                 "lists of the same length (got %zu, %zu, %zu)", list_len(num), list_len(sizes), list_len(scales));
        return false;
    }
    int64_t sum = 0;
    for (size_t k = 0; k < num->len; k++)
        sum += num->items[k]->kind == CFG_INT ? num->items[k]->i : 0;
    if (total->kind != CFG_INT || sum != total->i) {
        cfg_fail(ck->err, total, path, "ImgPilToMultiCrop: total_num_crops must equal sum(num_crops) = %lld",
                 (long long)sum);
        return false;
    }
    for (size_t k = 0; k < scales->len; k++)
        if (list_len(scales->items[k]) != 2) {
            cfg_fail(ck->err, scales->items[k], path, "ImgPilToMultiCrop: crop_scales[%zu] must be [min, max]", k);
            return false;
        }
    return true;
}

static bool check_pair(checker *ck, const cfg_node *t, const char *key, const char *path, const char *tname)
{
    cfg_node *v = cfg_map_get(t, key);
    if (!v || list_len(v) == 2)
        return true;
    cfg_fail(ck->err, v, path, "%s: '%s' must be a list of two numbers", tname, key);
    return false;
}

/* The largest side, in pixels, a transform may crop or resize to: far above any SSL recipe
 * (224, 160, 96, Jigsaw's 255) and a photo's size, and a bound on what one sample costs (a
 * 8192² RGB crop is 192 MiB of a ring slot). selfsup-augment applies the same bound
 * (stages/augment/transforms.c), so validation refuses what a run would. */
#define MAX_CROP_SIDE 8192

/* One size parameter: whole numbers of pixels, alone or in a list ([h, w], size_crops). */
static bool check_side(checker *ck, const cfg_node *v, const char *path, const char *tname, const char *key)
{
    bool ok = v->kind == CFG_INT || v->kind == CFG_NULL || (v->kind == CFG_LIST && v->len > 0);
    for (size_t k = 0; ok && v->kind == CFG_LIST && k < v->len; k++)
        ok = v->items[k]->kind == CFG_INT && v->items[k]->i >= 1 && v->items[k]->i <= MAX_CROP_SIDE;
    ok = ok && (v->kind != CFG_INT || (v->i >= 1 && v->i <= MAX_CROP_SIDE));
    if (!ok)
        cfg_fail(ck->err, v, path, "%s: '%s' must be whole numbers of pixels from 1 to %d", tname, key, MAX_CROP_SIDE);
    return ok;
}

static bool check_crop_sides(checker *ck, const cfg_node *t, const char *path, const char *tname)
{
    static const char *const keys[] = {"size", "size_crops", "crop_size_image", "crop_size_patches", "max_size"};
    for (size_t k = 0; k < ARRAY_LEN(keys); k++) {
        const cfg_node *v = cfg_map_get(t, keys[k]);
        if (v && !check_side(ck, v, path, tname, keys[k]))
            return false;
    }
    return true;
}

static bool check_transform(checker *ck, const cfg_node *t, const char *path)
{
    if (!t || t->kind != CFG_MAP || !cfg_map_get(t, "name")) {
        cfg_fail(ck->err, t, path, "each transform must be a map with a 'name', e.g. {name: RandomHorizontalFlip, p: 0.5}");
        return false;
    }
    cfg_node *name = cfg_map_get(t, "name");
    char *name_path = xasprintf("%s.name", path);
    bool ok = check_name(ck, name, name_path, "transform");
    free(name_path);
    if (!ok)
        return false;
    size_t n_params;
    const char *const *params = cfg_transform_params(name->s, &n_params);
    for (size_t k = 0; params && k < t->len; k++) {
        const char *key = t->keys[k];
        bool known = cfg_is_transform_common_key(key);
        for (size_t j = 0; !known && j < n_params; j++)
            known = !strcmp(params[j], key);
        if (known)
            continue;
        const char *near = cfg_suggest(key, params, n_params);
        cfg_fail(ck->err, t->items[k], path, "%s has no parameter '%s'%s%s%s", name->s, key,
                 near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
        return false;
    }
    if (!check_crop_sides(ck, t, path, name->s))
        return false;
    if (!strcmp(name->s, "ImgPilToMultiCrop"))
        return check_multicrop(ck, t, path);
    if (!strcmp(name->s, "Normalize")) {
        cfg_node *mean = cfg_map_get(t, "mean"), *std = cfg_map_get(t, "std");
        if (list_len(mean) != list_len(std) || !list_len(mean)) {
            cfg_fail(ck->err, t, path, "Normalize: mean and std must be lists of the same length (one per channel)");
            return false;
        }
    }
    if (!strcmp(name->s, "RandomResizedCrop") || !strcmp(name->s, "RandomErasing"))
        return check_pair(ck, t, "scale", path, name->s) && check_pair(ck, t, "ratio", path, name->s);
    if (!strcmp(name->s, "ImgPilToPatchesAndImage"))
        return check_pair(ck, t, "crop_scale_image", path, name->s) &&
               check_pair(ck, t, "crop_scale_patches", path, name->s);
    return true;
}

static bool check_transforms(checker *ck, const char *split)
{
    char *path = xasprintf("%s.TRANSFORMS", split);
    cfg_node *list = config_at(ck, path);
    bool ok = true;
    for (size_t k = 0; ok && k < list_len(list); k++) {
        char *item = xasprintf("config.%s.%zu", path, k);
        ok = check_transform(ck, list->items[k], item);
        free(item);
    }
    free(path);
    return ok;
}

/* ---- data sources and paths -------------------------------------------------------------- */

static json_t *catalog(checker *ck)
{
    if (ck->catalog)
        return ck->catalog;
    char *path = path_join(ck->cfg->configs_dir, "dataset_catalog.json");
    json_error_t jerr;
    ck->catalog = json_load_file(path, 0, &jerr);
    if (!ck->catalog)
        ck->catalog = json_object(); /* no catalog: every name is unknown */
    free(path);
    return ck->catalog;
}

/* Something a run could not use (a missing file, a URL, a placeholder address): an error
 * when paths are checked (validate, run), a warning otherwise (show). */
static bool report_unusable(checker *ck, const cfg_node *where, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool report_unusable(checker *ck, const cfg_node *where, const char *path, const char *fmt, ...)
{
    strbuf sb = {0};
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&sb, fmt, ap);
    va_end(ap);
    if (ck->opt->check_paths)
        cfg_fail(ck->err, where, path, "%s", sb_str(&sb));
    else
        cfg_warn(ck->cfg, "%s: %s", path, sb_str(&sb));
    sb_free(&sb);
    return !ck->opt->check_paths;
}

/* The catalog's dataset name closest to `name`, or NULL. */
static const char *catalog_suggest(checker *ck, const char *name)
{
    const char *names[512];
    size_t n = 0;
    const char *key;
    json_t *value;
    json_object_foreach(catalog(ck), key, value)
    {
        if (n < ARRAY_LEN(names))
            names[n++] = key;
    }
    return cfg_suggest(name, names, n);
}

/* The data path of source `i`: DATA_PATHS[i], else the catalog's [split][0]. */
static bool resolve_data_path(checker *ck, const char *split, size_t i, const char **out, const cfg_node **where)
{
    char *paths_key = xasprintf("%s.DATA_PATHS", split);
    char *names_key = xasprintf("%s.DATASET_NAMES", split);
    cfg_node *paths = config_at(ck, paths_key), *names = config_at(ck, names_key);
    bool ok = true;
    *out = NULL;
    if (list_len(paths) > i && paths->items[i]->kind == CFG_STR) {
        *out = paths->items[i]->s;
        *where = paths->items[i];
    } else if (list_len(names) > i && names->items[i]->kind == CFG_STR) {
        const char *name = names->items[i]->s;
        *where = names->items[i];
        json_t *entry = json_object_get(catalog(ck), name);
        json_t *files = json_object_get(entry, strcmp(split, "DATA.TRAIN") ? "val" : "train");
        if (!entry) {
            const char *near = catalog_suggest(ck, name);
            char *full = xasprintf("config.%s.%zu", names_key, i);
            ok = report_unusable(ck, *where, full, "dataset '%s' is not in dataset_catalog.json and DATA_PATHS is empty%s%s%s",
                                 name, near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
            *out = "";
            free(full);
        } else if (json_is_array(files) && json_is_string(json_array_get(files, 0))) {
            *out = json_string_value(json_array_get(files, 0));
        }
    }
    free(paths_key);
    free(names_key);
    return ok;
}

static bool check_split_paths(checker *ck, const char *split)
{
    char *sources_key = xasprintf("%s.DATA_SOURCES", split);
    cfg_node *sources = config_at(ck, sources_key);
    bool ok = true;
    for (size_t i = 0; ok && i < list_len(sources); i++) {
        const char *source = sources->items[i]->kind == CFG_STR ? sources->items[i]->s : "";
        if (strcmp(source, "disk_folder") && strcmp(source, "disk_filelist"))
            continue;
        const char *path = NULL;
        const cfg_node *where = sources->items[i];
        if (!(ok = resolve_data_path(ck, split, i, &path, &where)))
            break;
        if (path && !*path)
            continue; /* an unknown dataset, already reported as a warning */
        char *key = xasprintf("config.%s.DATA_PATHS.%zu", split, i);
        if (!path) {
            cfg_fail(ck->err, where, key, "no data path: set DATA_PATHS or add the dataset to dataset_catalog.json");
            ok = false;
        } else if (!strcmp(source, "disk_folder") ? !path_is_dir(path) : !path_exists(path)) {
            ok = report_unusable(ck, where, key, "%s '%s' does not exist",
                                 !strcmp(source, "disk_folder") ? "data folder" : "file list", path);
        }
        free(key);
    }
    free(sources_key);
    return ok;
}

static bool check_split(checker *ck, const char *split)
{
    char *key;
    cfg_node *sources = config_at(ck, (key = xasprintf("%s.DATA_SOURCES", split)));
    free(key);
    cfg_node *names = config_at(ck, (key = xasprintf("%s.DATASET_NAMES", split)));
    free(key);
    for (size_t k = 0; k < list_len(sources); k++) {
        char *path = xasprintf("config.%s.DATA_SOURCES.%zu", split, k);
        bool ok = check_name(ck, sources->items[k], path, "data_source");
        free(path);
        if (!ok)
            return false;
    }
    if (list_len(sources) && list_len(names) != list_len(sources)) {
        char *path = xasprintf("config.%s.DATASET_NAMES", split);
        cfg_fail(ck->err, names, path, "has %zu entries but DATA_SOURCES has %zu: give one dataset name per source",
                 list_len(names), list_len(sources));
        free(path);
        return false;
    }
    static const char *const per_source[] = {"DATA_PATHS", "LABEL_SOURCES", "LABEL_PATHS"};
    for (size_t k = 0; k < ARRAY_LEN(per_source); k++) {
        char *path = xasprintf("%s.%s", split, per_source[k]);
        cfg_node *n = config_at(ck, path);
        bool bad = list_len(n) && list_len(n) != list_len(sources);
        if (bad) {
            char *full = xasprintf("config.%s", path);
            cfg_fail(ck->err, n, full, "has %zu entries but DATA_SOURCES has %zu", list_len(n), list_len(sources));
            free(full);
        }
        free(path);
        if (bad)
            return false;
    }
    char *collator = xasprintf("%s.COLLATE_FUNCTION", split);
    char *full = xasprintf("config.%s", collator);
    bool ok = check_name(ck, config_at(ck, collator), full, "collator");
    free(collator);
    free(full);
    char *label_type = xasprintf("%s.LABEL_TYPE", split);
    char *batch = xasprintf("%s.BATCHSIZE_PER_REPLICA", split);
    ok = ok && ENUM(ck, label_type, "standard", "sample_index", "zero") && check_min(ck, batch, 1) &&
         check_transforms(ck, split) && check_split_paths(ck, split);
    free(label_type);
    free(batch);
    return ok;
}

/* Augment workers are processes that each attach to two rings ("decoded", "augmented"), and
 * a ring holds RING_MAX_PROCS processes: the workers, the decoder or the collator, and the
 * orchestrator watching it. More would fork them all and then fail one by one. */
#define MAX_WORKERS (RING_MAX_PROCS - 2)

/* Splits the run reads: TRAIN unless TEST_ONLY, TEST when TEST_MODEL (VISSL's rule). */
static bool check_data(checker *ck)
{
    char *rule = xasprintf("must be from 0 to %d: each augment worker is a process on two rings of %d processes, "
                           "the decoder or collator and the orchestrator included",
                           MAX_WORKERS, RING_MAX_PROCS);
    bool ok = check_range(ck, "DATA.NUM_DATALOADER_WORKERS", 0, MAX_WORKERS, rule);
    free(rule);
    if (!ok)
        return false;
    if (!config_true(ck, "TEST_ONLY") && !check_split(ck, "DATA.TRAIN"))
        return false;
    if (config_true(ck, "TEST_MODEL") && !check_split(ck, "DATA.TEST"))
        return false;
    return true;
}

/* ---- model, loss, optimizer, the rest ---------------------------------------------------- */

static bool check_head_entry(checker *ck, const cfg_node *entry, const char *path)
{
    if (entry->kind == CFG_LIST && entry->len == 2 && entry->items[0]->kind == CFG_STR) {
        char *name_path = xasprintf("%s.0", path);
        bool ok = check_name(ck, entry->items[0], name_path, "head");
        free(name_path);
        if (ok && entry->items[1]->kind != CFG_MAP) {
            cfg_fail(ck->err, entry->items[1], path, "head '%s' needs a map of arguments as its second item",
                     entry->items[0]->s);
            return false;
        }
        return ok;
    }
    /* a chain: a list of [name, kwargs] pairs applied in sequence */
    for (size_t k = 0; entry->kind == CFG_LIST && entry->len && k < entry->len; k++) {
        const cfg_node *part = entry->items[k];
        if (part->kind != CFG_LIST || part->len != 2 || part->items[0]->kind != CFG_STR) {
            cfg_fail(ck->err, part, path, "a head is [name, {arguments}] or a list of such pairs");
            return false;
        }
        char *part_path = xasprintf("%s.%zu", path, k);
        bool ok = check_head_entry(ck, part, part_path);
        free(part_path);
        if (!ok)
            return false;
    }
    if (entry->kind != CFG_LIST || !entry->len) {
        cfg_fail(ck->err, entry, path, "a head is [name, {arguments}] or a list of such pairs");
        return false;
    }
    return true;
}

static bool check_model(checker *ck)
{
    cfg_node *trunk = config_at(ck, "MODEL.TRUNK.NAME");
    if (!check_name(ck, trunk, "config.MODEL.TRUNK.NAME", "trunk"))
        return false;
    if (!strcmp(trunk->s, "resnet")) {
        static const int64_t depths[] = {18, 34, 50, 101, 152, 200}, strides[] = {1, 2};
        if (!check_int_in(ck, "MODEL.TRUNK.TRUNK_PARAMS.RESNETS.DEPTH", depths, ARRAY_LEN(depths)) ||
            !check_int_in(ck, "MODEL.TRUNK.TRUNK_PARAMS.RESNETS.LAYER4_STRIDE", strides, ARRAY_LEN(strides)) ||
            !ENUM(ck, "MODEL.TRUNK.TRUNK_PARAMS.RESNETS.NORM", "BatchNorm", "LayerNorm") ||
            !check_min(ck, "MODEL.TRUNK.TRUNK_PARAMS.RESNETS.WIDTH_MULTIPLIER", 1) ||
            !check_min(ck, "MODEL.TRUNK.TRUNK_PARAMS.RESNETS.GROUPS", 1))
            return false;
    }
    if (!ENUM(ck, "MODEL.INPUT_TYPE", "rgb", "bgr", "lab"))
        return false;
    cfg_node *heads = config_at(ck, "MODEL.HEAD.PARAMS");
    for (size_t k = 0; k < list_len(heads); k++) {
        char *path = xasprintf("config.MODEL.HEAD.PARAMS.%zu", k);
        bool ok = check_head_entry(ck, heads->items[k], path);
        free(path);
        if (!ok)
            return false;
    }
    return true;
}

static bool check_loss_and_meters(checker *ck)
{
    cfg_node *loss = config_at(ck, "LOSS.name");
    if (!check_name(ck, loss, "config.LOSS.name", "loss"))
        return false;
    cfg_node *meter = config_at(ck, "METERS.name");
    if (meter && meter->kind == CFG_STR && *meter->s) {
        cfg_node *meters = config_at(ck, "METERS");
        const char *names[64];
        size_t n = 0;
        for (size_t k = 0; k < meters->len && n < ARRAY_LEN(names); k++)
            if (meters->items[k]->kind == CFG_MAP)
                names[n++] = meters->keys[k];
        if (!check_in(ck, meter, "config.METERS.name", "meter", names, n))
            return false;
    }
    return true;
}

static bool check_optimizer(checker *ck)
{
    if (!check_name(ck, config_at(ck, "OPTIMIZER.name"), "config.OPTIMIZER.name", "optimizer") ||
        !check_min(ck, "OPTIMIZER.num_epochs", 1))
        return false;
    cfg_node *epochs = config_at(ck, "OPTIMIZER.num_epochs");
    int64_t num_epochs = epochs && epochs->kind == CFG_INT ? epochs->i : 1;
    static const char *const which[] = {"lr", "lr_head"};
    for (size_t k = 0; k < ARRAY_LEN(which); k++) {
        char *path = xasprintf("config.OPTIMIZER.param_schedulers.%s", which[k]);
        bool ok = cfg_check_scheduler(cfg_path(ck->cfg->root, path), path, num_epochs, ck->err);
        free(path);
        if (!ok)
            return false;
    }
    return true;
}

static bool check_runtime(checker *ck)
{
    size_t n;
    const char *const *engines = cfg_known_names("engine", &n);
    if (!check_in(ck, cfg_map_get(ck->cfg->root, "engine_name"), "engine_name", "engine", engines, n))
        return false;
    return ENUM(ck, "MACHINE.DEVICE", "gpu", "cpu") && ENUM(ck, "DISTRIBUTED.BACKEND", "nccl", "gloo") &&
           ENUM(ck, "DISTRIBUTED.INIT_METHOD", "tcp", "env", "file") &&
           check_min(ck, "DISTRIBUTED.NUM_NODES", 1) && check_min(ck, "DISTRIBUTED.NUM_PROC_PER_NODE", 1) &&
           check_range(ck, "DATA.DDP_BUCKET_CAP_MB", 0, 1e9,
                       "must be a number of MiB >= 0 (the gradient all-reduce's bucket size; 0: a bucket per tensor)") &&
           ENUM(ck, "CHECKPOINT.BACKEND", "disk") && check_min(ck, "CHECKPOINT.CHECKPOINT_FREQUENCY", 1) &&
           check_min(ck, "CHECKPOINT.LATEST_CHECKPOINT_RESUME_FILE_NUM", 1) &&
           ENUM(ck, "MODEL.AMP_PARAMS.AMP_TYPE", "apex", "pytorch") &&
           ENUM(ck, "MODEL.SYNC_BN_CONFIG.SYNC_BN_TYPE", "apex", "pytorch");
}

/* The largest ring depth a ring takes (shm/ring.c's MAX_SLOTS); it needs two slots. */
#define MAX_RING_DEPTH (1 << 20)

/* selfsup's own keys (SELFSUP.*), which a run reads long after validation: a heartbeat
 * timeout of 0 would turn hang detection off, a ring depth of 0 fail at ring creation. */
static bool check_selfsup(checker *ck)
{
    return check_range(ck, "SELFSUP.CONTROL.HEARTBEAT_TIMEOUT_S", DBL_TRUE_MIN, DBL_MAX,
                        "must be a number of seconds > 0 (stages send a heartbeat each second; 0 or less would "
                        "turn hang detection off)") &&
           check_range(ck, "SELFSUP.RING.DEPTH", 2, MAX_RING_DEPTH, "must be from 2 to 1048576 slots") &&
           check_range(ck, "SELFSUP.RING.SLOT_BYTES", 0, DBL_MAX, "must be 0 (sized from the batch) or a number of "
                                                                  "bytes") &&
           check_range(ck, "SELFSUP.MAX_INVALID_IMAGES_SHARE", 0, 1,
                       "must be a share from 0 to 1 (1: invalid images are only reported)") &&
           check_range(ck, "SELFSUP.FARM.HOST_TIMEOUT_S", DBL_TRUE_MIN, DBL_MAX,
                       "must be a number of seconds > 0 (a farm host silent this long is lost)") &&
           check_range(ck, "SELFSUP.FARM.DATA_PORT", 1, 65535, "must be a tcp port, 1 to 65535") &&
           check_range(ck, "SELFSUP.FARM.LEASE_PORT", 1, 65535, "must be a tcp port, 1 to 65535") &&
           check_range(ck, "SELFSUP.FARM.NODES", 0, 4096, "must be 0 (no farm) to 4096 nodes") &&
           check_range(ck, "SELFSUP.FARM.WORKERS", 0, 4096, "must be 0 (DATA.NUM_DATALOADER_WORKERS) to 4096") &&
           check_range(ck, "SELFSUP.FARM.LEASE_SAMPLES", 0, DBL_MAX, "must be 0 (4 batches) or a number of samples") &&
           check_range(ck, "SELFSUP.FARM.WINDOW_SAMPLES", 0, DBL_MAX, "must be 0 (8 leases) or a number of samples") &&
           check_range(ck, "SELFSUP.FARM.SLURM.CPUS_PER_NODE", 0, 4096,
                       "must be 0 (the trainer nodes' count) to 4096 CPUs") &&
           check_range(ck, "SELFSUP.FARM.SLURM.MEM_GB", 0, 1e9, "must be a number of GB >= 0 (0: SLURM.MEM_GB)");
}

/* The SLURM keys `selfsup slurm` writes into the batch script. */
static bool check_slurm(checker *ck)
{
    return check_range(ck, "SLURM.TIME_HOURS", 0, 1e6, "must be a number of hours >= 0") &&
           check_range(ck, "SLURM.TIME_MINUTES", 0, 59, "must be 0 to 59 minutes (hours go in TIME_HOURS)") &&
           check_range(ck, "SLURM.MEM_GB", 0, 1e9, "must be a number of GB >= 0 (0: sbatch's default)") &&
           check_range(ck, "SLURM.NUM_CPU_PER_PROC", 1, 4096, "must be 1 to 4096 CPUs") &&
           check_range(ck, "SLURM.PORT_ID", 1, 65535, "must be a tcp port, 1 to 65535");
}

/* The control endpoint: "" (ipc in the private run directory), ipc://PATH or tcp://HOST:PORT
 * (always CURVE); other transports, and abstract ipc names, would let other users in. Key
 * files are checked where they are loaded, on the node that uses them. */
static bool check_selfsup_endpoint(checker *ck)
{
    cfg_node *ep = config_at(ck, "SELFSUP.CONTROL.ENDPOINT");
    if (!ep || ep->kind != CFG_STR || !*ep->s || (!strncmp(ep->s, "ipc://", 6) && ep->s[6] != '@') ||
        !strncmp(ep->s, "tcp://", 6))
        return true;
    cfg_fail(ck->err, ep, "config.SELFSUP.CONTROL.ENDPOINT",
             "'%s': expected \"\" (ipc in the run directory), ipc://PATH or tcp://HOST:PORT", ep->s);
    return false;
}

/* Several nodes meet over tcp at RUN_ID, which must then be "HOST:PORT" (VISSL's recipes
 * ship a placeholder there). Like a missing file: an error for validate, a warning for show.
 * In a Slurm job "auto" is fine: `selfsup run --role auto` makes it the job's first node and
 * SLURM.PORT_ID, as VISSL's Slurm launch does (cmd_run.c checks the result). */
static bool check_rendezvous(checker *ck)
{
    cfg_node *nodes = config_at(ck, "DISTRIBUTED.NUM_NODES"),
             *method = config_at(ck, "DISTRIBUTED.INIT_METHOD");
    cfg_node *run_id = config_at(ck, "DISTRIBUTED.RUN_ID");
    if (!nodes || nodes->kind != CFG_INT || nodes->i <= 1 || !method || method->kind != CFG_STR ||
        strcmp(method->s, "tcp") || !run_id || run_id->kind != CFG_STR)
        return true;
    if (!strcmp(run_id->s, "auto") && getenv("SLURM_JOB_ID"))
        return true;
    const char *colon = strrchr(run_id->s, ':');
    if (colon && colon > run_id->s && strspn(colon + 1, "0123456789") == strlen(colon + 1) && colon[1])
        return true;
    return report_unusable(ck, run_id, "config.DISTRIBUTED.RUN_ID",
                           "'%s' must be HOST:PORT of the first node when NUM_NODES > 1 with INIT_METHOD tcp (in a "
                           "Slurm job, selfsup run --role auto sets it)",
                           run_id->s);
}

static bool check_weights(checker *ck)
{
    cfg_node *file = config_at(ck, "MODEL.WEIGHTS_INIT.PARAMS_FILE");
    if (!file || file->kind != CFG_STR || !*file->s || path_exists(file->s))
        return true;
    if (strstr(file->s, "://"))
        return report_unusable(ck, file, "config.MODEL.WEIGHTS_INIT.PARAMS_FILE",
                               "'%s' is a URL; selfsup reads weights from local files only: download it and give its path",
                               file->s);
    return report_unusable(ck, file, "config.MODEL.WEIGHTS_INIT.PARAMS_FILE", "weights file '%s' does not exist", file->s);
}

/* ---- features no stage implements yet ------------------------------------------------------ */

/* Keys that ask for something no stage does yet. Left alone they would be silently ignored, and
 * a run would not be the run its config describes, so they are refused where the config is to
 * be run (validate, run and every stage: report_unusable's rule) and only warned about by
 * `show`, which VISSL's own recipes (SwAV's and DeepClusterV2's set USE_AMP) must still pass. */
static bool check_unimplemented(checker *ck)
{
    /* VISSL's only train step; its name is what its registry looks up, ours is fixed. */
    cfg_node *step = config_at(ck, "TRAINER.TRAIN_STEP_NAME");
    if (step && step->kind == CFG_STR && strcmp(step->s, "standard_train_step"))
        return report_unusable(ck, step, "config.TRAINER.TRAIN_STEP_NAME",
                               "'%s': train steps other than standard_train_step are not implemented yet", step->s);
    return true;
}

/* Mixed precision is the GPU's (its convolutions in bf16 on the tensor cores, nn.h's
 * eng_precision); the cpu computes in fp32, and a run that asked for AMP there would not be
 * the run its config describes. Refused like the keys above, so `show` only warns. */
static bool check_amp(checker *ck)
{
    const cfg_node *device = config_at(ck, "MACHINE.DEVICE");
    bool on_gpu = !device || device->kind != CFG_STR || strcmp(device->s, "cpu") != 0;
    return !config_true(ck, "MODEL.AMP_PARAMS.USE_AMP") || on_gpu ||
           report_unusable(ck, config_at(ck, "MODEL.AMP_PARAMS.USE_AMP"), "config.MODEL.AMP_PARAMS.USE_AMP",
                           "mixed precision runs on the GPU (MACHINE.DEVICE: gpu); the cpu trains in fp32: set "
                           "USE_AMP: False");
}

/* An integer key's value, or `otherwise` when it is not an integer. */
static int64_t config_int_or(const checker *ck, const char *path, int64_t otherwise)
{
    const cfg_node *n = config_at(ck, path);
    return n && n->kind == CFG_INT ? n->i : otherwise;
}

/* SyncBN only differs from BatchNorm across processes: VISSL's recipes turn it on routinely,
 * so on one trainer it is accepted with a word that it changes nothing there. */
static void warn_sync_bn(checker *ck)
{
    int64_t world =
        config_int_or(ck, "DISTRIBUTED.NUM_NODES", 1) * config_int_or(ck, "DISTRIBUTED.NUM_PROC_PER_NODE", 1);
    if (world == 1 && config_true(ck, "MODEL.SYNC_BN_CONFIG.CONVERT_BN_TO_SYNC_BN"))
        cfg_warn(ck->cfg,
                 "config.MODEL.SYNC_BN_CONFIG.CONVERT_BN_TO_SYNC_BN: has no effect on one trainer (world "
                 "size 1), where SyncBN is plain BatchNorm");
}

bool cfg_check(cfg_t *cfg, const cfg_options *opt, cfg_err *err)
{
    checker ck = {cfg, opt, err, NULL};
    bool ok = check_runtime(&ck) && check_model(&ck) && check_loss_and_meters(&ck) && check_optimizer(&ck) &&
              check_data(&ck) && check_weights(&ck) && check_rendezvous(&ck) && check_selfsup(&ck) &&
              check_slurm(&ck) && check_selfsup_endpoint(&ck) && check_unimplemented(&ck) && check_amp(&ck);
    if (ok)
        warn_sync_bn(&ck);
    json_decref(ck.catalog);
    return ok;
}
