/*
 * config.h — VISSL's YAML configuration, composed, inferred and validated the VISSL way.
 *
 * A config is a tree of nodes (maps, lists, scalars) where every node remembers the file
 * and line that set it, so any error can point at its source. Composition follows VISSL:
 *
 *     configs/defaults.yaml  <-  the user's config file  <-  command-line overrides
 *
 * defaults.yaml is also the schema: a key that is not in it is unknown (unless its parent
 * map is open, written `{}` in defaults.yaml), and a value must have the type of the
 * default. After composition, cfg_infer() fills in the values VISSL infers (world size,
 * effective batch sizes, LR auto-scaling, crop counts, queue sizes, label type, meter
 * names) and cfg_check() validates names, list lengths, schedulers and paths.
 *
 * Errors never abort: every function that can fail returns false and fills a cfg_err,
 * whose text names the file, line and key path and, where it can, suggests the nearest
 * valid key or name. Callers exit with code 2 on such errors.
 */
#ifndef SELFSUP_CONFIG_H
#define SELFSUP_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the tree ---------------------------------------------------------------------------- */

typedef enum { CFG_NULL, CFG_BOOL, CFG_INT, CFG_FLOAT, CFG_STR, CFG_LIST, CFG_MAP } cfg_kind;

typedef struct cfg_node cfg_node;
struct cfg_node {
    cfg_kind kind;
    const char *file; /* interned; who set this value ("<command line>", "<inferred>") */
    int line;         /* 1-based line in `file`, 0 when not from a file */
    int stamp;        /* composition order: 0 = defaults.yaml, then rising with each file
                         and override that set it (later wins where VISSL moved a key) */
    bool b;
    int64_t i;
    double f;
    char *s;          /* CFG_STR */
    size_t len, cap;  /* number of items (LIST) or entries (MAP) */
    char **keys;      /* MAP keys, in insertion order */
    cfg_node **items; /* LIST items or MAP values */
};

typedef struct {
    char msg[2048];
} cfg_err;

cfg_node *cfg_new(cfg_kind kind, const char *file, int line);
cfg_node *cfg_new_str(const char *s, const char *file, int line);
cfg_node *cfg_new_int(int64_t v, const char *file, int line);
cfg_node *cfg_new_float(double v, const char *file, int line);
cfg_node *cfg_new_bool(bool v, const char *file, int line);
cfg_node *cfg_copy(const cfg_node *n);
void cfg_free(cfg_node *n);
const char *cfg_intern(const char *s);
const char *cfg_kind_name(cfg_kind kind);

/* Map and list editing. cfg_map_set takes ownership of `value`, replacing any old one. */
cfg_node *cfg_map_get(const cfg_node *map, const char *key);
void cfg_map_set(cfg_node *map, const char *key, cfg_node *value);
bool cfg_map_del(cfg_node *map, const char *key);
void cfg_list_push(cfg_node *list, cfg_node *item);
void cfg_list_del(cfg_node *list, size_t index);

/* Lookup by dotted path: "config.OPTIMIZER.param_schedulers.lr.values.1" (list items by
 * index, `a.0` or `a[0]`). Returns NULL when any step is missing. */
cfg_node *cfg_path(const cfg_node *root, const char *path);
/* The last step of a dotted path ("c" for "a.b.c"), and everything before it ("a.b", or ""
 * for a one-step path; malloc'd). */
const char *cfg_path_leaf(const char *path);
char *cfg_path_parent(const char *path);
bool cfg_is_number(const cfg_node *n);
/* Same kinds, values, keys (in order) and items; positions are ignored; NaN equals NaN. */
bool cfg_equal(const cfg_node *a, const cfg_node *b);
double cfg_number(const cfg_node *n); /* INT or FLOAT as double */

/* Typed access for the stages. They abort with a clear message when the key is missing or
 * of another type: after cfg_check() that is a programming error, not a user error. */
int64_t cfg_int(const cfg_node *root, const char *path);
double cfg_float(const cfg_node *root, const char *path);
bool cfg_bool(const cfg_node *root, const char *path);
const char *cfg_str(const cfg_node *root, const char *path);
cfg_node *cfg_get(const cfg_node *root, const char *path);

/* ---- text in and out --------------------------------------------------------------------- */

/* Parse YAML text into a tree. `file` names the source in errors and in node positions. */
cfg_node *cfg_parse_yaml(const char *text, size_t len, const char *file, cfg_err *err);
cfg_node *cfg_load_yaml_file(const char *path, cfg_err *err);

/* Print a tree as YAML (block style, scalar lists in flow style). Returns a malloc'd string. */
char *cfg_to_yaml(const cfg_node *root);

/* Parse one Hydra override value ("[1, 2]", "{a: 1}", "'x'", "1e-5", "null", ...). */
cfg_node *cfg_parse_override_value(const char *text, cfg_err *err);

/* ---- composition ------------------------------------------------------------------------- */

typedef struct {
    const char *configs_dir;  /* where defaults.yaml, dataset_catalog.json and groups live */
    bool check_paths;         /* data and weights files must exist (validate, run) */
} cfg_options;

typedef struct {
    cfg_node *root;     /* {VERSION, engine_name, config: {...}} */
    cfg_node *defaults; /* the schema: defaults.yaml as loaded */
    char *configs_dir;
    char **warnings;    /* non-fatal findings (e.g. missing data paths when not checking) */
    int stamp;          /* the last composition stamp given out */
    size_t n_warnings;
} cfg_t;

/* The configs directory: $SELFSUP_CONFIGS, else <exe>/../configs, else
 * <exe>/../share/selfsup/configs. Returns a malloc'd path or NULL. */
char *cfg_find_configs_dir(void);

/* Resolve a config argument: an existing file path, or a VISSL name such as
 * "pretrain/simclr/simclr_8node_resnet" looked up under the configs directory. */
char *cfg_resolve_config_file(const char *configs_dir, const char *arg);

/* Compose defaults <- file <- overrides, infer, check. `file` may be NULL (defaults only,
 * or chosen by a `config=NAME` override). Returns false with err filled on any error. */
bool cfg_compose(cfg_t *cfg, const cfg_options *opt, const char *file, int n_overrides,
                 char *const *overrides, cfg_err *err);
/* cfg_compose of the config a command line names (`arg`: a file, or a VISSL name resolved by
 * cfg_resolve_config_file; NULL: none) over the configs directory cfg_find_configs_dir finds.
 * What every stage and evaluator does with its -c argument. */
bool cfg_compose_arg(cfg_t *cfg, bool check_paths, const char *arg, int n_overrides, char *const *overrides,
                     cfg_err *err);
void cfg_destroy(cfg_t *cfg);

/* Steps of cfg_compose, exposed for tests. */
bool cfg_merge_file(cfg_t *cfg, const cfg_node *file_root, const char *file, cfg_err *err);
bool cfg_apply_override(cfg_t *cfg, const char *override, int index, cfg_err *err);
bool cfg_infer(cfg_t *cfg, cfg_err *err);
bool cfg_check(cfg_t *cfg, const cfg_options *opt, cfg_err *err);
void cfg_warn(cfg_t *cfg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Inferred values that need more than the config: the dataset's size sizes the memory
 * banks (NPID/PIRL memory, DeepClusterV2's per-process memory, which it returns). */
int64_t cfg_infer_dataset_size(cfg_t *cfg, int64_t num_train_samples);
/* CHECKPOINT.DIR, plus DISTRIBUTED.RUN_ID on several nodes with APPEND_DISTR_RUN_ID. */
char *cfg_checkpoint_folder(const cfg_t *cfg);
/* EVAL_MODE_ON and FREEZE_TRUNK_ONLY with a non-empty LINEAR_EVAL_FEAT_POOL_OPS_MAP. */
bool cfg_is_feature_extractor_model(const cfg_t *cfg);

/* Build and check (sched_prepare) the scheduler of a param_schedulers node, e.g.
 * config.OPTIMIZER.param_schedulers.lr. `out` is always initialised; sched_free it. */
struct sched;
bool cfg_build_scheduler(const cfg_node *node, const char *path, int64_t num_epochs, struct sched *out,
                         cfg_err *err);

/* Names VISSL knows, by kind: "transform", "loss", "collator", "scheduler", "trunk",
 * "head", "optimizer", "data_source", "meter", "engine". NULL for an unknown kind. */
const char *const *cfg_known_names(const char *kind, size_t *count);

/* Suggest the closest of `candidates` to `word` ("did you mean"), or NULL if none is close. */
const char *cfg_suggest(const char *word, const char *const *candidates, size_t n);

/* Fill err: "FILE:LINE: KEY: message". `node` may be NULL (no position). */
void cfg_fail(cfg_err *err, const cfg_node *node, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
