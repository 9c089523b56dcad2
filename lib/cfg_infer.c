/*
 * cfg_infer.c — the values VISSL infers from other values, computed in this one place.
 *
 * Mirrors VISSL's infer_and_assert_hydra_config (vissl/utils/hydra_config.py), in
 * VISSL's order: losses (world size, effective batch sizes, crop counts, SwAV queue sizes,
 * forced collators), learning rates (auto-scaling for every scheduler kind, the linear
 * warm-up resolution that drops the warm-up on one node, lr_head and the head weight
 * decay), meter names for feature-extractor models, the dummy head DDP needs when only
 * trunk features are extracted on several processes, and LABEL_TYPE when no label source
 * is given. Values that need the dataset's size (memory banks) are inferred by
 * cfg_infer_dataset_size() once a data stage knows it.
 *
 * Every value written here is marked "<inferred>" so `config show` users can tell. The
 * optimizer's numbers are checked to be finite first: inference would scale an inf into
 * values of its own, and the error must name what the user wrote.
 */
#include "config.h"

#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char INFERRED[] = "<inferred>";

/* ---- small tree helpers ------------------------------------------------------------------ */

/* The node at `path` under the composed tree's `config` map, or NULL; the typed readers give
 * `fallback` (or "", false) for a missing node or one of another kind. */
static cfg_node *config_at(const cfg_t *cfg, const char *path)
{
    return cfg_path(cfg_map_get(cfg->root, "config"), path);
}

static int64_t config_int(const cfg_t *cfg, const char *path, int64_t fallback)
{
    cfg_node *n = config_at(cfg, path);
    return n && n->kind == CFG_INT ? n->i : fallback;
}

static const char *config_str(const cfg_t *cfg, const char *path)
{
    cfg_node *n = config_at(cfg, path);
    return n && n->kind == CFG_STR ? n->s : "";
}

static bool config_bool(const cfg_t *cfg, const char *path)
{
    cfg_node *n = config_at(cfg, path);
    return n && n->kind == CFG_BOOL && n->b;
}

/* Set `key` in the map `map` (no-op when `map` is not a map). */
static void put(cfg_node *map, const char *key, cfg_node *value)
{
    if (map && map->kind == CFG_MAP)
        cfg_map_set(map, key, value);
    else
        cfg_free(value);
}

static cfg_node *inferred_int(int64_t v)
{
    return cfg_new_int(v, INFERRED, 0);
}

static cfg_node *inferred_float(double v)
{
    return cfg_new_float(v, INFERRED, 0);
}

static int64_t world_size(const cfg_t *cfg)
{
    return config_int(cfg, "DISTRIBUTED.NUM_NODES", 1) * config_int(cfg, "DISTRIBUTED.NUM_PROC_PER_NODE", 1);
}

/* Python's round(x, ndigits): exact decimal rounding of the binary value, ties to even,
 * which is what glibc's printf does. */
static double py_round(double x, int ndigits)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%.*f", ndigits, x);
    return strtod(buf, NULL);
}

/* The checkpoint folder VISSL derives (CHECKPOINT.DIR, plus RUN_ID on several nodes). */
char *cfg_checkpoint_folder(const cfg_t *cfg)
{
    const char *dir = config_str(cfg, "CHECKPOINT.DIR");
    if (config_int(cfg, "DISTRIBUTED.NUM_NODES", 1) > 1 && config_bool(cfg, "CHECKPOINT.APPEND_DISTR_RUN_ID"))
        return path_join(dir, config_str(cfg, "DISTRIBUTED.RUN_ID"));
    return xstrdup(dir);
}

/* ---- losses ------------------------------------------------------------------------------ */

/* total_num_crops of the last transform that declares it (ImgPilToMultiCrop), or 0. */
static int64_t total_num_crops(const cfg_t *cfg)
{
    cfg_node *transforms = config_at(cfg, "DATA.TRAIN.TRANSFORMS");
    int64_t total = 0;
    for (size_t k = 0; transforms && transforms->kind == CFG_LIST && k < transforms->len; k++) {
        cfg_node *n = cfg_map_get(transforms->items[k], "total_num_crops");
        if (n && n->kind == CFG_INT)
            total = n->i;
    }
    return total;
}

static void set_collator(cfg_t *cfg, const char *name)
{
    put(config_at(cfg, "DATA.TRAIN"), "COLLATE_FUNCTION", cfg_new_str(name, INFERRED, 0));
}

static void infer_num_crops(cfg_t *cfg, cfg_node *loss)
{
    int64_t total = total_num_crops(cfg);
    if (total)
        put(loss, "num_crops", inferred_int(total));
}

static void infer_queue(cfg_t *cfg, cfg_node *loss)
{
    cfg_node *queue = cfg_map_get(loss, "queue");
    cfg_node *len = cfg_map_get(queue, "queue_length");
    if (!len || len->kind != CFG_INT)
        return;
    int64_t w = world_size(cfg);
    int64_t global_batch = config_int(cfg, "DATA.TRAIN.BATCHSIZE_PER_REPLICA", 1) * w;
    int64_t q = global_batch > 0 ? len->i - len->i % global_batch : len->i;
    put(queue, "queue_length", inferred_int(q));
    put(queue, "local_queue_length", inferred_int(w > 0 ? q / w : q));
}

/* swav_loss / swav_momentum_loss: one swav_head gives the prototypes and embedding size. */
static bool infer_swav_head(cfg_t *cfg, cfg_node *loss, const char *loss_name, cfg_err *err)
{
    cfg_node *params = config_at(cfg, "MODEL.HEAD.PARAMS");
    cfg_node *head = params && params->kind == CFG_LIST && params->len == 1 ? params->items[0] : NULL;
    cfg_node *name = head && head->kind == CFG_LIST && head->len == 2 ? head->items[0] : NULL;
    if (!name || name->kind != CFG_STR || (strcmp(name->s, "swav_head") && strcmp(name->s, "swav_head_fsdp"))) {
        cfg_fail(err, params, "config.MODEL.HEAD.PARAMS",
                 "%s needs exactly one head, a swav_head: [[\"swav_head\", {dims: [...], num_clusters: [...]}]]",
                 loss_name);
        return false;
    }
    cfg_node *kwargs = head->items[1];
    cfg_node *clusters = cfg_map_get(kwargs, "num_clusters");
    cfg_node *dims = cfg_map_get(kwargs, "dims");
    const char *missing = !dims || dims->kind != CFG_LIST || !dims->len ? "dims"
                          : !clusters || clusters->kind != CFG_LIST   ? "num_clusters"
                                                                        : NULL;
    if (missing) {
        const char *near = kwargs->kind == CFG_MAP
                               ? cfg_suggest(missing, (const char *const *)kwargs->keys, kwargs->len)
                               : NULL;
        cfg_fail(err, head, "config.MODEL.HEAD.PARAMS.0", "swav_head needs '%s' (a list)%s%s%s", missing,
                 near ? "; found '" : "", near ? near : "", near ? "', which VISSL does not read" : "");
        return false;
    }
    put(loss, "num_prototypes", cfg_copy(clusters));
    put(loss, "embedding_dim", cfg_copy(dims->items[dims->len - 1]));
    infer_num_crops(cfg, loss);
    return true;
}

static bool infer_losses(cfg_t *cfg, cfg_err *err)
{
    const char *name = config_str(cfg, "LOSS.name");
    cfg_node *loss = config_at(cfg, "LOSS") ? cfg_map_get(config_at(cfg, "LOSS"), name) : NULL;
    int64_t w = world_size(cfg);
    int64_t batch = config_int(cfg, "DATA.TRAIN.BATCHSIZE_PER_REPLICA", 1);

    /* VISSL tests a substring here, so multicrop_simclr_info_nce_loss passes through too. */
    if (strstr(name, "simclr_info_nce_loss") && loss) {
        cfg_node *buffer = cfg_map_get(loss, "buffer_params");
        put(buffer, "world_size", inferred_int(w));
        put(buffer, "effective_batch_size", inferred_int(2 * batch * w));
    }
    if (!strcmp(name, "bce_logits_multiple_output_single_target") && loss)
        put(loss, "world_size", inferred_int(w));
    if (!strcmp(name, "multicrop_simclr_info_nce_loss") && loss) {
        put(cfg_map_get(loss, "buffer_params"), "effective_batch_size", inferred_int(batch * w));
        infer_num_crops(cfg, loss);
        set_collator(cfg, "multicrop_collator");
    }
    if (!strcmp(name, "deepclusterv2_loss") && loss) {
        put(loss, "DROP_LAST", cfg_copy(config_at(cfg, "DATA.TRAIN.DROP_LAST")));
        put(loss, "BATCHSIZE_PER_REPLICA", inferred_int(batch));
        infer_num_crops(cfg, loss);
        set_collator(cfg, "multicrop_collator");
    }
    if (!strcmp(name, "swav_loss") && loss) {
        if (!infer_swav_head(cfg, loss, name, err))
            return false;
        const char *collator = config_str(cfg, "DATA.TRAIN.COLLATE_FUNCTION");
        if (strcmp(collator, "multicrop_collator") && strcmp(collator, "multicrop_mixup_collator") &&
            strcmp(collator, "cutmixup_collator")) {
            cfg_fail(err, config_at(cfg, "DATA.TRAIN.COLLATE_FUNCTION"), "config.DATA.TRAIN.COLLATE_FUNCTION",
                     "swav_loss needs multicrop_collator or multicrop_mixup_collator, not '%s'", collator);
            return false;
        }
        char *folder = cfg_checkpoint_folder(cfg);
        put(loss, "output_dir", cfg_new_str(folder, INFERRED, 0));
        free(folder);
        infer_queue(cfg, loss);
    }
    if (!strcmp(name, "swav_momentum_loss") && loss) {
        if (!infer_swav_head(cfg, loss, name, err))
            return false;
        set_collator(cfg, "multicrop_collator");
        infer_queue(cfg, loss);
    }
    if (!strcmp(name, "dino_loss") && loss) { /* newer than 0.1.5, kept for published configs */
        cfg_node *clusters = config_at(cfg, "MODEL.HEAD.PARAMS.0.1.num_clusters.0");
        if (clusters)
            put(loss, "output_dim", cfg_copy(clusters));
        infer_num_crops(cfg, loss);
        set_collator(cfg, "multicrop_collator");
    }
    return true;
}

/* ---- learning rates ---------------------------------------------------------------------- */

/* Every float at or under node n (whose key is `path`) finite. An LR of inf or NaN (an
 * override "...lr.base_value=inf", or 1e999 in a file) makes every weight NaN at the first
 * step; it is refused before the inference below scales and copies it, so that the message
 * points at the value the user wrote, not at an inferred one. */
static bool all_finite(const cfg_node *n, const char *path, cfg_err *err)
{
    if (n->kind == CFG_FLOAT && !isfinite(n->f)) {
        cfg_fail(err, n, path, "must be a finite number, not %s", isnan(n->f) ? "nan" : n->f > 0 ? "inf" : "-inf");
        return false;
    }
    bool ok = true;
    for (size_t k = 0; ok && (n->kind == CFG_MAP || n->kind == CFG_LIST) && k < n->len; k++) {
        char *child = n->kind == CFG_MAP ? xasprintf("%s.%s", path, n->keys[k]) : xasprintf("%s.%zu", path, k);
        ok = all_finite(n->items[k], child, err);
        free(child);
    }
    return ok;
}

static double num_or(const cfg_node *map, const char *key, double fallback)
{
    cfg_node *n = cfg_map_get(map, key);
    return cfg_is_number(n) ? cfg_number(n) : fallback;
}

static const char *name_of(const cfg_node *sched)
{
    cfg_node *n = cfg_map_get(sched, "name");
    return n && n->kind == CFG_STR ? n->s : "";
}

/* resolve_linear_schedule: a warm-up starts from the per-node batch's LR, and on one node
 * (where start == end after scaling) it is dropped; a lone survivor becomes the schedule. */
static void resolve_linear_warmup(cfg_t *cfg, cfg_node *sched)
{
    cfg_node *children = cfg_map_get(sched, "schedulers");
    cfg_node *auto_scaling = cfg_map_get(sched, "auto_lr_scaling");
    double per_node_batch = (double)(config_int(cfg, "DATA.TRAIN.BATCHSIZE_PER_REPLICA", 1) *
                                     config_int(cfg, "DISTRIBUTED.NUM_PROC_PER_NODE", 1));
    double start = num_or(auto_scaling, "base_value", 0.1) * (per_node_batch / num_or(auto_scaling, "base_lr_batch_size", 256));
    long remove = -1;
    for (size_t k = 0; children && k < children->len; k++) {
        cfg_node *child = children->items[k];
        if (strcmp(name_of(child), "linear"))
            continue;
        put(child, "start_value", inferred_float(start));
        if (config_int(cfg, "DISTRIBUTED.NUM_NODES", 1) == 1 && start <= num_or(child, "end_value", 0.0))
            remove = (long)k;
    }
    if (remove >= 0)
        cfg_list_del(children, (size_t)remove);
    if (children && children->len == 1) {
        cfg_node *only = children->items[0];
        for (size_t k = 0; k < only->len; k++)
            cfg_map_set(sched, only->keys[k], cfg_copy(only->items[k]));
    }
}

/* get_scaled_lr_scheduler: rewrite one scheduler dict for the scaled LR. */
static bool scale_scheduler(cfg_t *cfg, cfg_node *sched, double lr, const char *path, cfg_err *err)
{
    const char *name = name_of(sched);
    if (strstr(name, "cosine")) {
        double start = num_or(sched, "start_value", 0.1), end = num_or(sched, "end_value", 0.0);
        double decay = end / start;
        put(sched, "start_value", inferred_float(lr));
        put(sched, "end_value", inferred_float(lr * decay));
    } else if (!strcmp(name, "multistep") || !strcmp(name, "step")) {
        cfg_node *values = cfg_map_get(sched, "values");
        if (!values || values->kind != CFG_LIST || !values->len || !cfg_is_number(values->items[0])) {
            cfg_fail(err, sched, path, "%s needs a non-empty list of 'values' to scale", name);
            return false;
        }
        double gamma = 1.0;
        if (values->len > 1 && cfg_is_number(values->items[1]))
            gamma = py_round(cfg_number(values->items[1]) / cfg_number(values->items[0]), 6);
        cfg_node *scaled = cfg_new(CFG_LIST, INFERRED, 0);
        for (size_t k = 0; k < values->len; k++)
            cfg_list_push(scaled, inferred_float(py_round(lr * pow(gamma, (double)k), 8)));
        put(sched, "values", scaled);
    } else if (!strcmp(name, "step_with_fixed_gamma")) {
        put(sched, "base_value", inferred_float(lr));
    } else if (!strcmp(name, "composite")) {
        cfg_node *children = cfg_map_get(sched, "schedulers");
        bool has_linear = false;
        for (size_t k = 0; children && children->kind == CFG_LIST && k < children->len; k++) {
            has_linear |= !strcmp(name_of(children->items[k]), "linear");
            char *child_path = xasprintf("%s.schedulers.%zu", path, k);
            bool ok = scale_scheduler(cfg, children->items[k], lr, child_path, err);
            free(child_path);
            if (!ok)
                return false;
        }
        if (has_linear)
            resolve_linear_warmup(cfg, sched);
    } else if (!strcmp(name, "linear")) {
        put(sched, "end_value", inferred_float(lr));
    } else if (!strcmp(name, "inverse_sqrt")) {
        put(sched, "start_value", inferred_float(lr));
    } else if (!strcmp(name, "constant")) {
        put(sched, "value", inferred_float(lr));
    } else {
        size_t n;
        const char *const *known = cfg_known_names("scheduler", &n);
        const char *near = cfg_suggest(name, known, n);
        cfg_fail(err, cfg_map_get(sched, "name"), path, "unknown scheduler '%s'%s%s%s", name,
                 near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
        return false;
    }
    return true;
}

static bool auto_scale(cfg_t *cfg, const char *which, cfg_err *err)
{
    char *path = xasprintf("OPTIMIZER.param_schedulers.%s", which);
    cfg_node *sched = config_at(cfg, path);
    cfg_node *scaling = cfg_map_get(sched, "auto_lr_scaling");
    bool ok = true;
    cfg_node *on = cfg_map_get(scaling, "auto_scale");
    if (on && on->kind == CFG_BOOL && on->b) {
        double batch = (double)(config_int(cfg, "DATA.TRAIN.BATCHSIZE_PER_REPLICA", 1) * world_size(cfg));
        double factor = batch / num_or(scaling, "base_lr_batch_size", 256);
        cfg_node *type = cfg_map_get(scaling, "scaling_type"); /* newer than 0.1.5 */
        if (type && type->kind == CFG_STR && !strcmp(type->s, "sqrt"))
            factor = sqrt(factor);
        else if (type && type->kind == CFG_STR && strcmp(type->s, "linear")) {
            cfg_fail(err, type, "config.OPTIMIZER.param_schedulers.lr.auto_lr_scaling.scaling_type",
                     "must be 'linear' or 'sqrt', not '%s'", type->s);
            free(path);
            return false;
        }
        char *full = xasprintf("config.%s", path);
        ok = scale_scheduler(cfg, sched, num_or(scaling, "base_value", 0.1) * factor, full, err);
        free(full);
    }
    free(path);
    return ok;
}

static bool infer_learning_rate(cfg_t *cfg, cfg_err *err)
{
    if (!auto_scale(cfg, "lr", err))
        return false;
    cfg_node *schedulers = config_at(cfg, "OPTIMIZER.param_schedulers");
    if (!config_bool(cfg, "OPTIMIZER.head_optimizer_params.use_different_lr")) {
        put(schedulers, "lr_head", cfg_copy(cfg_map_get(schedulers, "lr")));
    } else if (!auto_scale(cfg, "lr_head", err)) {
        return false;
    }
    cfg_node *head = config_at(cfg, "OPTIMIZER.head_optimizer_params");
    if (!config_bool(cfg, "OPTIMIZER.head_optimizer_params.use_different_wd")) {
        put(head, "weight_decay", cfg_copy(config_at(cfg, "OPTIMIZER.weight_decay")));
    } else if (num_or(head, "weight_decay", 0.0) < 0.0) {
        cfg_fail(err, cfg_map_get(head, "weight_decay"), "config.OPTIMIZER.head_optimizer_params.weight_decay",
                 "the head weight decay must be >= 0");
        return false;
    }
    return true;
}

/* ---- meters, heads, labels --------------------------------------------------------------- */

bool cfg_is_feature_extractor_model(const cfg_t *cfg)
{
    cfg_node *map = config_at(cfg, "MODEL.FEATURE_EVAL_SETTINGS.LINEAR_EVAL_FEAT_POOL_OPS_MAP");
    return config_bool(cfg, "MODEL.FEATURE_EVAL_SETTINGS.EVAL_MODE_ON") &&
           config_bool(cfg, "MODEL.FEATURE_EVAL_SETTINGS.FREEZE_TRUNK_ONLY") && map && map->kind == CFG_LIST && map->len > 0;
}

static void infer_meter(cfg_t *cfg, const char *meter)
{
    static const char *const list_meters[] = {"accuracy_list_meter", "mean_ap_list_meter",
                                              "precision_at_k_list_meter", "recall_at_k_list_meter"};
    bool is_list_meter = false;
    for (size_t k = 0; k < ARRAY_LEN(list_meters); k++)
        is_list_meter |= !strcmp(meter, list_meters[k]);
    cfg_node *settings = cfg_map_get(config_at(cfg, "METERS"), meter);
    if (!is_list_meter || !settings || !cfg_is_feature_extractor_model(cfg))
        return;
    cfg_node *map = config_at(cfg, "MODEL.FEATURE_EVAL_SETTINGS.LINEAR_EVAL_FEAT_POOL_OPS_MAP");
    cfg_node *names = cfg_new(CFG_LIST, INFERRED, 0);
    for (size_t k = 0; k < map->len; k++) {
        cfg_node *entry = map->items[k];
        if (entry->kind == CFG_LIST && entry->len && entry->items[0]->kind == CFG_STR)
            cfg_list_push(names, cfg_new_str(entry->items[0]->s, INFERRED, 0));
    }
    put(settings, "num_meters", inferred_int((int64_t)map->len));
    put(settings, "meter_names", names);
}

static void infer_meters(cfg_t *cfg)
{
    const char *name = config_str(cfg, "METERS.name");
    cfg_node *names = config_at(cfg, "METERS.names"); /* newer VISSL: a list of meters */
    if (*name && names && names->kind == CFG_LIST) {
        bool present = false;
        for (size_t k = 0; k < names->len; k++)
            present |= names->items[k]->kind == CFG_STR && !strcmp(names->items[k]->s, name);
        if (!present)
            cfg_list_push(names, cfg_new_str(name, INFERRED, 0));
    }
    if (*name)
        infer_meter(cfg, name);
    for (size_t k = 0; names && names->kind == CFG_LIST && k < names->len; k++)
        if (names->items[k]->kind == CFG_STR && strcmp(names->items[k]->s, name))
            infer_meter(cfg, names->items[k]->s);
}

/* DDP needs a parameter with a gradient: extraction of trunk features only, on several
 * processes, with no head gets VISSL's dummy mlp head. */
static void infer_dummy_head(cfg_t *cfg)
{
    cfg_node *params = config_at(cfg, "MODEL.HEAD.PARAMS");
    if (!config_bool(cfg, "MODEL.FEATURE_EVAL_SETTINGS.EVAL_MODE_ON") ||
        !config_bool(cfg, "MODEL.FEATURE_EVAL_SETTINGS.FREEZE_TRUNK_ONLY") ||
        !config_bool(cfg, "MODEL.FEATURE_EVAL_SETTINGS.EXTRACT_TRUNK_FEATURES_ONLY") || world_size(cfg) <= 1 ||
        !params || params->kind != CFG_LIST || params->len > 0)
        return;
    cfg_err err;
    cfg_node *dummy = cfg_parse_override_value("[mlp, {dims: [2048, 1000]}]", &err);
    dummy->file = cfg_intern(INFERRED);
    cfg_list_push(params, dummy);
}

static void infer_label_type(cfg_t *cfg)
{
    static const char *const splits[] = {"DATA.TRAIN", "DATA.TEST"};
    for (size_t k = 0; k < ARRAY_LEN(splits); k++) {
        char *sources_path = xasprintf("%s.LABEL_SOURCES", splits[k]);
        char *type_path = xasprintf("%s.LABEL_TYPE", splits[k]);
        cfg_node *sources = config_at(cfg, sources_path);
        bool none = !sources || (sources->kind == CFG_LIST && sources->len == 0);
        if (none && strcmp(config_str(cfg, type_path), "zero"))
            put(config_at(cfg, splits[k]), "LABEL_TYPE", cfg_new_str("sample_index", INFERRED, 0));
        free(sources_path);
        free(type_path);
    }
}

/* ---- keys VISSL moved after 0.1.5 ------------------------------------------------------- */

/* Each pair is one setting in two VISSL versions: (newer place, 0.1.5 place). Stages read the
 * 0.1.5 place; a config may use either. */
static const char *const MOVED_KEYS[][2] = {
    {"MODEL.TRUNK.RESNETS", "MODEL.TRUNK.TRUNK_PARAMS.RESNETS"},
    {"MODEL.TRUNK.REGNET", "MODEL.TRUNK.TRUNK_PARAMS.REGNET"},
    {"MODEL.TRUNK.EFFICIENT_NETS", "MODEL.TRUNK.TRUNK_PARAMS.EFFICIENT_NETS"},
    {"MODEL.TRUNK.VISION_TRANSFORMERS", "MODEL.TRUNK.TRUNK_PARAMS.VISION_TRANSFORMERS"},
    {"MODEL.TRUNK.CONVIT", "MODEL.TRUNK.TRUNK_PARAMS.CONVIT"},
    {"HOOKS.TENSORBOARD_SETUP", "TENSORBOARD_SETUP"},
    {"HOOKS.MODEL_COMPLEXITY", "MODEL.MODEL_COMPLEXITY"},
    {"HOOKS.PERF_STATS.MONITOR_PERF_STATS", "MONITOR_PERF_STATS"},
    {"HOOKS.PERF_STATS.PERF_STAT_FREQUENCY", "PERF_STAT_FREQUENCY"},
    {"HOOKS.PERF_STATS.ROLLING_BTIME_FREQ", "ROLLING_BTIME_FREQ"},
    {"CLUSTERFIT.NUM_ITER", "CLUSTERFIT.N_ITER"},
    {"IMG_RETRIEVAL.TRAIN_PCA_WHITENING", "IMG_RETRIEVAL.SHOULD_TRAIN_PCA_OR_WHITENING"},
};

/* The latest composition step that set anything at or below `n` (0: all defaults). */
static int latest_stamp(const cfg_node *n)
{
    if (!n)
        return 0;
    int latest = n->kind == CFG_MAP ? 0 : n->stamp;
    for (size_t k = 0; k < n->len; k++) {
        int s = latest_stamp(n->items[k]);
        if (s > latest)
            latest = s;
    }
    return latest;
}

/* Make map entries a[key_a] and b[key_b] agree, key by key inside maps: what the config set
 * on one side is copied to the other, and where both sides were set, the later step wins,
 * as it would if the setting had one name. */
static void reconcile(cfg_node *a, const char *key_a, cfg_node *b, const char *key_b)
{
    cfg_node *va = cfg_map_get(a, key_a), *vb = cfg_map_get(b, key_b);
    if (va && vb && va->kind == CFG_MAP && vb->kind == CFG_MAP) {
        for (int side = 0; side < 2; side++) {
            cfg_node *from = side ? vb : va;
            for (size_t k = 0; k < from->len; k++) {
                char *key = xstrdup(from->keys[k]); /* the maps may change under us */
                reconcile(va, key, vb, key);
                free(key);
            }
        }
        return;
    }
    int sa = latest_stamp(va), sb = latest_stamp(vb);
    if (sa > sb)
        put(b, key_b, cfg_copy(va));
    else if (sb > sa)
        put(a, key_a, cfg_copy(vb));
}

static void infer_moved_keys(cfg_t *cfg)
{
    cfg_node *config = cfg_map_get(cfg->root, "config");
    for (size_t k = 0; k < ARRAY_LEN(MOVED_KEYS); k++) {
        const char *newer = MOVED_KEYS[k][0], *older = MOVED_KEYS[k][1];
        char *parent_a = cfg_path_parent(newer), *parent_b = cfg_path_parent(older);
        cfg_node *a = *parent_a ? cfg_path(config, parent_a) : config;
        cfg_node *b = *parent_b ? cfg_path(config, parent_b) : config;
        if (a && b)
            reconcile(a, cfg_path_leaf(newer), b, cfg_path_leaf(older));
        free(parent_a);
        free(parent_b);
    }
}

bool cfg_infer(cfg_t *cfg, cfg_err *err)
{
    infer_moved_keys(cfg);
    cfg_node *optimizer = config_at(cfg, "OPTIMIZER");
    if (optimizer && !all_finite(optimizer, "config.OPTIMIZER", err))
        return false;
    if (!infer_losses(cfg, err) || !infer_learning_rate(cfg, err))
        return false;
    infer_meters(cfg);
    infer_dummy_head(cfg);
    infer_label_type(cfg);
    return true;
}

/* Memory banks sized by the training set: NPID/PIRL's memory holds one row per training
 * sample; DeepClusterV2 keeps ceil(N / world) rows per process (a whole number of batches
 * when DROP_LAST). Returns DeepClusterV2's per-process size, or 0 when not applicable. */
int64_t cfg_infer_dataset_size(cfg_t *cfg, int64_t num_train_samples)
{
    cfg_node *nce = config_at(cfg, "LOSS.nce_loss_with_memory");
    if (nce) {
        put(nce, "num_train_samples", inferred_int(num_train_samples));
        put(cfg_map_get(nce, "memory_params"), "memory_size", inferred_int(num_train_samples));
    }
    cfg_node *dc = config_at(cfg, "LOSS.deepclusterv2_loss");
    if (!dc)
        return 0;
    put(dc, "num_train_samples", inferred_int(num_train_samples));
    int64_t w = world_size(cfg), b = config_int(cfg, "DATA.TRAIN.BATCHSIZE_PER_REPLICA", 1);
    int64_t rows = (num_train_samples + w - 1) / w;
    if (config_bool(cfg, "DATA.TRAIN.DROP_LAST") && b > 0)
        rows -= rows % b;
    return rows;
}
