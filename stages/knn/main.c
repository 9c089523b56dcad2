/*
 * selfsup-knn — VISSL's kNN benchmark (tools/nearest_neighbor_test.py) on extracted features.
 *
 *   selfsup-knn -c CONFIG [overrides] [--features DIR] [--layers a,b] [--threads N] [--output FILE]
 *   selfsup-knn --train-features F --train-targets T --test-features F --test-targets T
 *               [--sigma 0.1] [--topk 200] [--l2-norm] [--threads N] [--output FILE]
 *
 * Config mode reads config.NEAREST_NEIGHBOR (SIGMA, TOPK, L2_NORM_FEATS) and, for each layer,
 * the train and test features selfsup-extract wrote into CHECKPOINT.DIR (or --features DIR),
 * merged over ranks as VISSL's merge_features does. The layers are --layers, else every layer
 * with train feature files there. `selfsup knn CONFIG` runs the extraction first, then this.
 * Standalone mode takes explicit .npy files (features float32 or float64 N × D, targets
 * integer N or N × 1) and the parameters as options.
 *
 * For each layer it prints a row of a table (layer, N train, N test, k, σ, top-1, top-5,
 * time) and writes every row into a JSON file: --output, else in config mode
 * CHECKPOINT.DIR/nearest_neighbor.json. The kNN itself is knn.h; VISSL's differences are
 * listed there (no crash below 100 test images, TOPK clamped to N train, top-5 over fewer than
 * five classes).
 *
 * Exit status: 0 done, 1 the features could not be read or are unusable (the message names
 * the file and row), 2 a bad argument or config, or an output folder that cannot be made or
 * written (before any work).
 */
#include "config.h"
#include "features.h"
#include "knn/knn.h"
#include "knn/report.h"
#include "log.h"
#include "npy.h"
#include "train/checkpoint.h"
#include "util.h"
#include "version.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: selfsup-knn -c CONFIG [overrides...] [--features DIR] [--layers a,b] [options]\n"
    "       selfsup-knn --train-features F --train-targets T --test-features F --test-targets T\n"
    "                   [--sigma S] [--topk K] [--l2-norm] [options]\n"
    "\n"
    "VISSL's weighted kNN benchmark: each test row votes over its TOPK most similar train rows\n"
    "(dot product) with weights exp(sim / SIGMA); prints top-1 and top-5 per layer.\n"
    "\n"
    "config mode:\n"
    "  -c, --config FILE    VISSL config (NEAREST_NEIGHBOR, CHECKPOINT.DIR); later arguments\n"
    "                       of the form key=value are overrides\n"
    "  --features DIR       where the rank*_{train,test}_LAYER_*.npy files are\n"
    "                       (default: CHECKPOINT.DIR)\n"
    "  --layers a,b         layers to test (default: every layer with train features)\n"
    "standalone mode:\n"
    "  --train-features F, --train-targets T, --test-features F, --test-targets T\n"
    "  --sigma S            temperature (default 0.1)\n"
    "  --topk K             neighbours (default 200)\n"
    "  --l2-norm            L2-normalise train and test features\n"
    "  --predictions F      write the test rows' best classes (int64 N × min(5, classes)) to F\n"
    "both:\n"
    "  --output FILE        JSON results (default in config mode: CHECKPOINT.DIR/nearest_neighbor.json)\n"
    "  --threads N          threads (default: every core)\n"
    "  --block-test N, --block-train N\n"
    "                       rows per similarity tile (defaults 256 × 1024; results do not change)\n"
    "  -h, --help, --version\n";

typedef struct {
    const char *config, *features_dir, *layers, *output, *predictions;
    const char *train_features, *train_targets, *test_features, *test_targets;
    bool standalone_params; /* --sigma, --topk or --l2-norm given */
    knn_options knn;
    int n_overrides;
    char **overrides;
} knn_args;

/* A number option: false (after logging) when it is not one or below `min`. */
static bool parse_size(const char *opt, const char *text, long long min, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < min) {
        log_error("%s needs a whole number >= %lld, not '%s'", opt, min, text);
        return false;
    }
    *out = v;
    return true;
}

static bool parse_sigma(const char *text, double *out)
{
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || !(v > 0) || v > 1e30) {
        log_error("--sigma needs a positive number, not '%s'", text);
        return false;
    }
    *out = v;
    return true;
}

/* The option taking a file or name value, or NULL. */
static const char **string_option(knn_args *a, const char *opt)
{
    static const char *names[] = {"-c", "--config", "--features", "--layers", "--output", "--predictions",
                                  "--train-features", "--train-targets", "--test-features", "--test-targets"};
    const char **slots[] = {&a->config, &a->config, &a->features_dir, &a->layers, &a->output, &a->predictions,
                            &a->train_features, &a->train_targets, &a->test_features, &a->test_targets};
    for (size_t i = 0; i < ARRAY_LEN(names); i++)
        if (!strcmp(opt, names[i]))
            return slots[i];
    return NULL;
}

/* Returns -1 to go on, else an exit status (help, version, usage error). */
static int parse_args(int argc, char **argv, knn_args *a)
{
    memset(a, 0, sizeof *a);
    a->knn = (knn_options){.sigma = 0.1, .topk = 200};
    a->overrides = xcalloc((size_t)argc + 1, sizeof *a->overrides);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        const char **slot = string_option(a, arg);
        long long n;
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help"))
            return fputs(usage_text, stdout), 0;
        if (!strcmp(arg, "--version"))
            return printf("selfsup-knn %s\n", SELFSUP_VERSION), 0;
        if (!strcmp(arg, "--l2-norm")) {
            a->knn.l2_norm = a->standalone_params = true;
            continue;
        }
        if (arg[0] != '-') { /* an override */
            a->overrides[a->n_overrides++] = argv[i];
            continue;
        }
        bool known = slot || !strcmp(arg, "--sigma") || !strcmp(arg, "--topk") || !strcmp(arg, "--threads") ||
                     !strcmp(arg, "--block-test") || !strcmp(arg, "--block-train");
        if (!known) {
            log_error("unknown option '%s'; see selfsup-knn --help", arg);
            return EXIT_USAGE;
        }
        if (!val) {
            log_error("%s needs a value; see selfsup-knn --help", arg);
            return EXIT_USAGE;
        }
        i++;
        if (slot)
            *slot = val;
        else if (!strcmp(arg, "--sigma")) {
            if (!parse_sigma(val, &a->knn.sigma))
                return EXIT_USAGE;
            a->standalone_params = true;
        } else if (!strcmp(arg, "--topk")) {
            if (!parse_size(arg, val, 1, &n))
                return EXIT_USAGE;
            a->knn.topk = n;
            a->standalone_params = true;
        } else if (!strcmp(arg, "--threads")) {
            if (!parse_size(arg, val, 0, &n) || n > 4096)
                return n > 4096 ? (log_error("--threads %lld: too many", n), EXIT_USAGE) : EXIT_USAGE;
            a->knn.threads = (int)n;
        } else {
            if (!parse_size(arg, val, 1, &n))
                return EXIT_USAGE;
            *(!strcmp(arg, "--block-test") ? &a->knn.block_test : &a->knn.block_train) = (size_t)n;
        }
    }
    return -1;
}

/* The two modes exclude each other; a mode needs all of its inputs. */
static int check_mode(const knn_args *a)
{
    const char *files[] = {a->train_features, a->train_targets, a->test_features, a->test_targets};
    const char *names[] = {"--train-features", "--train-targets", "--test-features", "--test-targets"};
    int given = 0;
    for (int i = 0; i < 4; i++)
        given += files[i] != NULL;
    if (a->config) {
        const char *bad = given ? "--train-/--test- files"
                          : a->standalone_params ? "--sigma/--topk/--l2-norm"
                          : a->predictions       ? "--predictions"
                                                 : NULL;
        if (bad) {
            log_error("%s belong to standalone mode; with -c set config.NEAREST_NEIGHBOR.SIGMA=…, "
                      "TOPK=…, L2_NORM_FEATS=… as overrides",
                      bad);
            return EXIT_USAGE;
        }
        return 0;
    }
    if (a->features_dir || a->layers || a->n_overrides) {
        log_error("%s needs a config (-c CONFIG)",
                  a->features_dir ? "--features" : a->layers ? "--layers" : "an override (key=value)");
        return EXIT_USAGE;
    }
    if (given == 0) {
        fputs(usage_text, stderr);
        return EXIT_USAGE;
    }
    for (int i = 0; i < 4; i++) {
        if (!files[i]) {
            log_error("standalone mode needs %s as well (see selfsup-knn --help)", names[i]);
            return EXIT_USAGE;
        }
        if (!path_exists(files[i])) {
            log_error("%s %s: no such file", names[i], files[i]);
            return EXIT_USAGE;
        }
        char *why = NULL; /* a FIFO or a device would block or never end the read */
        if (check_regular_file(files[i], SIZE_MAX, &why) != 0) {
            log_error("%s %s", names[i], why);
            free(why);
            return EXIT_USAGE;
        }
    }
    return 0;
}

/* ---- config mode -------------------------------------------------------------------------- */

typedef struct {
    cfg_t cfg;
    bool have_cfg;
    char *dir;      /* where the features are */
    char *json_out; /* where the results go */
    char **layers;
    int n_layers;
} config_mode;

static int compose(const knn_args *a, config_mode *m)
{
    cfg_err err;
    bool ok = cfg_compose_arg(&m->cfg, false, a->config, a->n_overrides, a->overrides, &err);
    m->have_cfg = true;
    if (!ok) {
        log_error("%s", err.msg);
        return EXIT_USAGE;
    }
    return 0;
}

/* config.NEAREST_NEIGHBOR into options, refusing values VISSL would trip on. */
static int read_nearest_neighbor(const cfg_node *c, knn_options *o)
{
    const cfg_node *sigma = cfg_path(c, "NEAREST_NEIGHBOR.SIGMA"), *topk = cfg_path(c, "NEAREST_NEIGHBOR.TOPK");
    cfg_err err;
    if (!sigma || !cfg_is_number(sigma) || !(cfg_number(sigma) > 0)) {
        cfg_fail(&err, sigma, "config.NEAREST_NEIGHBOR.SIGMA", "must be a positive number (the default is 0.1)");
        log_error("%s", err.msg);
        return EXIT_USAGE;
    }
    if (!topk || topk->kind != CFG_INT || topk->i < 1) {
        cfg_fail(&err, topk, "config.NEAREST_NEIGHBOR.TOPK", "must be a whole number >= 1 (the default is 200)");
        log_error("%s", err.msg);
        return EXIT_USAGE;
    }
    o->sigma = cfg_number(sigma);
    o->topk = topk->i;
    o->l2_norm = cfg_bool(c, "NEAREST_NEIGHBOR.L2_NORM_FEATS");
    return 0;
}

/* The results file takes a few hundred bytes a layer: this much free space is plenty. */
#define RESULTS_BYTES ((uint64_t)64 << 10)

/* The folder of an output file, made and tried before any work, so that a results file
 * that cannot be written is found now and not after every layer's search. `what` names
 * the option or key that chose the file, `where` its node in the config (may be NULL). */
static int check_output(const char *file, const char *what, const cfg_node *where, uint64_t need)
{
    return ckpt_output_file_usable(file, need, what, where) ? 0 : EXIT_USAGE;
}

static int prepare_config_mode(knn_args *a, config_mode *m)
{
    int rc = compose(a, m);
    if (rc)
        return rc;
    const cfg_node *c = cfg_map_get(m->cfg.root, "config");
    if ((rc = read_nearest_neighbor(c, &a->knn)))
        return rc;
    char *ckpt = cfg_checkpoint_folder(&m->cfg);
    m->dir = xstrdup(a->features_dir ? a->features_dir : ckpt);
    m->json_out = a->output ? xstrdup(a->output) : path_join(ckpt, "nearest_neighbor.json");
    free(ckpt);
    if ((rc = check_output(m->json_out, a->output ? "--output" : "config.CHECKPOINT.DIR",
                           a->output ? NULL : cfg_path(c, "CHECKPOINT.DIR"), RESULTS_BYTES)))
        return rc;
    if (a->layers) {
        m->layers = str_split(a->layers, ',', &m->n_layers);
        if (!m->n_layers) {
            log_error("--layers '%s' names no layer", a->layers);
            return EXIT_USAGE;
        }
        return 0;
    }
    m->layers = feat_layers(m->dir, "train", &m->n_layers);
    if (!m->n_layers) {
        log_error("no train features (rank0_train_LAYER_features.npy) in %s; extract them first "
                  "(selfsup knn CONFIG runs selfsup-extract, then this) or point --features at them",
                  m->dir);
        return EXIT_RUNTIME;
    }
    return 0;
}

static void free_config_mode(config_mode *m)
{
    if (m->have_cfg)
        cfg_destroy(&m->cfg);
    for (int i = 0; i < m->n_layers; i++)
        free(m->layers[i]);
    free(m->layers);
    free(m->dir);
    free(m->json_out);
}

/* ---- running ------------------------------------------------------------------------------ */

/* Load train and test of one layer (config mode: merged ranks; standalone: the files). */
static int load_layer(const knn_args *a, const config_mode *m, const char *layer, feat_set *train, feat_set *test)
{
    char *err = NULL;
    int rc = m ? feat_merge(m->dir, "train", layer, train, &err)
               : feat_load(a->train_features, a->train_targets, NULL, train, &err);
    if (!rc)
        rc = m ? feat_merge(m->dir, "test", layer, test, &err)
               : feat_load(a->test_features, a->test_targets, NULL, test, &err);
    if (rc) {
        log_error("layer %s: %s", layer, err ? err : "cannot read the features");
        free(err);
        feat_free(train);
        return -1;
    }
    return 0;
}

static int write_predictions(const char *path, const knn_result *r)
{
    int64_t *p = xmalloc(r->n_test * (size_t)r->npred * sizeof *p);
    for (size_t i = 0; i < r->n_test; i++)
        memcpy(p + i * (size_t)r->npred, r->predictions + i * KNN_TOP5, (size_t)r->npred * sizeof *p);
    size_t shape[2] = {r->n_test, (size_t)r->npred};
    char *err = NULL;
    int rc = npy_write(path, NPY_I8, 2, shape, p, &err);
    if (rc) {
        log_error("--predictions: %s", err);
        free(err);
    }
    free(p);
    return rc;
}

static int run_layer(const knn_args *a, const config_mode *m, const char *layer, knn_report *rep)
{
    feat_set train = {0}, test = {0};
    if (load_layer(a, m, layer, &train, &test))
        return -1;
    if (a->knn.topk > (int64_t)train.n)
        log_warn("layer %s: TOPK %lld is more than the %zu train rows; using k = %zu (VISSL's topk would "
                 "fail here)",
                 layer, (long long)a->knn.topk, train.n, train.n);
    knn_result r;
    char *err = NULL;
    int rc = knn_run(&train, &test, &a->knn, &r, &err);
    if (rc) {
        log_error("layer %s: %s", layer, err);
        free(err);
    } else {
        if (r.num_classes < KNN_TOP5)
            log_warn("layer %s: only %lld classes; top-5 counts the first %d predictions", layer,
                     (long long)r.num_classes, r.npred);
        if (r.overflow_rows)
            log_warn("layer %s: exp(sim / SIGMA) overflowed float32 for %zu test rows (VISSL scores them NaN); "
                     "they were ranked with exp((sim - max sim) / SIGMA). L2_NORM_FEATS avoids this",
                     layer, r.overflow_rows);
        knn_report_add(rep, layer, &a->knn, &r);
        knn_report_print_row(stdout, layer, &a->knn, &r);
        if (a->predictions)
            rc = write_predictions(a->predictions, &r);
        knn_result_free(&r);
    }
    feat_free(&train);
    feat_free(&test);
    return rc;
}

/* The standalone run's layer name: the train features file's name, without .npy. */
static char *standalone_layer_name(const char *path)
{
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    size_t len = strlen(base);
    return xstrndup(base, len > 4 && !strcmp(base + len - 4, ".npy") ? len - 4 : len);
}

int main(int argc, char **argv)
{
    log_init("knn");
    knn_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) { /* help, version or a usage error */
        free(a.overrides);
        return rc;
    }
    config_mode m = {0};
    rc = check_mode(&a);
    if (rc == 0 && a.config)
        rc = prepare_config_mode(&a, &m);
    if (rc == 0 && !a.config && a.output)
        rc = check_output(a.output, "--output", NULL, RESULTS_BYTES);
    if (rc == 0 && a.predictions) /* a few bytes a test row: the folder only */
        rc = check_output(a.predictions, "--predictions", NULL, 0);
    if (rc) {
        free_config_mode(&m);
        free(a.overrides);
        return rc;
    }

    knn_report rep;
    knn_report_init(&rep);
    knn_report_print_header(stdout);
    int failed = 0;
    if (a.config) {
        for (int i = 0; i < m.n_layers; i++)
            failed |= run_layer(&a, &m, m.layers[i], &rep) != 0;
    } else {
        char *layer = standalone_layer_name(a.train_features);
        failed = run_layer(&a, NULL, layer, &rep) != 0;
        free(layer);
    }
    const char *json_out = a.config ? m.json_out : a.output;
    if (json_out && rep.n_rows && knn_report_write_json(&rep, json_out))
        failed = 1;
    knn_report_free(&rep);
    free_config_mode(&m);
    free(a.overrides);
    return failed ? EXIT_RUNTIME : 0;
}
