/*
 * selfsup-svm — VISSL's linear SVM benchmarks on extracted features (tools/train_svm.py and
 * tools/train_svm_low_shot.py): the VOC07 protocol, or the low-shot one with --low-shot.
 *
 * Config mode (what `selfsup svm CONFIG` runs after extracting the features):
 *   selfsup-svm -c CONFIG [overrides…] [--features DIR] [--output DIR] [--layers a,b]
 *               [--threads N] [--low-shot]
 *   reads config.SVM; for each layer the train and test features merged from the rank files
 *   in DIR (default SVM_FEATURES_PATH, else CHECKPOINT.DIR, where selfsup-extract writes);
 *   layers: every layer with train feature files. Results in OUTPUT/LAYER/ (default
 *   CHECKPOINT.DIR), low-shot samples as OUTPUT/LAYER_sample{s}_k{k}.npy.
 *
 * Standalone mode, on explicit .npy files (SVM defaults of configs/defaults.yaml otherwise):
 *   selfsup-svm --train-features F --train-targets T --test-features F --test-targets T
 *               --output DIR [--costs 0.1,1,10] [--folds K] [--no-normalize] [--cls-list 0,3]
 *               [--max-iter N] [--force-retrain] [--threads N]
 *               [--low-shot [--low-shot-style voc|places] [--k-values 1,2,4] [--samples 1,2,3]
 *                [--seed N]]
 *   results directly in DIR; low-shot samples as DIR/features_sample{s}_k{k}.npy.
 *
 * Targets: N × C of 1 / 0 / −1 (VOC: −1 is "difficult": a negative in training, ignored at
 * test), or one column of class indices (selfsup's extension: one-vs-rest over max + 1
 * classes). Output files: see svm.h; svm_results.json (report.h) and a table on stdout.
 *
 * Exit status: 0 done, 1 bad data or a failed fit (the message names the file and row; a
 * class index past SVM_MAX_CLASSES, or targets that leave no class to give an AP, are bad
 * data, found before any fit), 2 a bad argument or config, or an output folder that cannot be
 * made, written or hold the results (found before any fit).
 */
#include "config.h"
#include "features.h"
#include "log.h"
#include "svm/report.h"
#include "svm/svm.h"
#include "train/checkpoint.h"
#include "util.h"
#include "version.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *config, *features_dir, *output, *layers;
    const char *train_x, *train_t, *test_x, *test_t;
    bool low_shot;
    int n_overrides;
    char **overrides;
    svm_opts opts;
} args;

static void usage(FILE *out)
{
    fputs("usage: selfsup-svm -c CONFIG [overrides...] [--features DIR] [--output DIR] [--layers a,b]\n"
          "       selfsup-svm --train-features F --train-targets T --test-features F --test-targets T\n"
          "                   --output DIR [options]\n"
          "\n"
          "VISSL's linear SVM benchmark (VOC07 protocol: per class, the cost chosen by k-fold CV AP,\n"
          "test AP of the chosen model), or its low-shot variant with --low-shot.\n"
          "\n"
          "config mode:\n"
          "  -c, --config FILE      VISSL config (its SVM keys); arguments after it are overrides\n"
          "  --features DIR         rank{R}_{split}_{layer}_*.npy files (default: SVM_FEATURES_PATH or\n"
          "                         CHECKPOINT.DIR)\n"
          "  --layers a,b           layers to evaluate (default: every layer with train features)\n"
          "  --output DIR           results, one folder per layer (default: CHECKPOINT.DIR)\n"
          "standalone mode:\n"
          "  --train-features F, --train-targets T, --test-features F, --test-targets T   .npy files\n"
          "  --output DIR           results\n"
          "  --costs 0.1,1,10       costs (default 0.1,0.01)\n"
          "  --folds K              cross-validation folds (default 3)\n"
          "  --no-normalize         do not L2-normalise the rows\n"
          "  --cls-list 0,3         classes to train (default all)\n"
          "  --max-iter N           solver iterations (default 2000)\n"
          "  --force-retrain        ignore existing model files\n"
          "  --low-shot-style S     voc | places (default voc)\n"
          "  --k-values 1,2,4       low-shot k values (default 1,2,4,8,16,32,64,96)\n"
          "  --samples 1,2,3        low-shot sample numbers (default 1,2,3,4,5)\n"
          "  --seed N               seed of the low-shot samples we draw (default 0)\n"
          "both:\n"
          "  --low-shot             the low-shot protocol instead of VOC07\n"
          "  --threads N            worker threads (default: every core)\n"
          "  -h, --help, --version\n"
          "\n"
          "exit status: 0 done, 1 bad data or a failed fit, 2 bad arguments or config\n",
          out);
}

/* "1,2,3" → ints; false on anything else. */
static bool parse_int_list(const char *s, int **out, size_t *n)
{
    free(*out);
    *out = xmalloc((strlen(s) + 1) * sizeof **out);
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || (*end && *end != ','))
            return false;
        (*out)[(*n)++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return *n > 0;
}

static bool parse_positive(const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 1 || v > 1 << 30)
        return false;
    *out = (int)v;
    return true;
}

/* One option with its value; returns false (after logging) on a bad value. */
static bool value_option(args *a, const char *opt, const char *v)
{
    svm_opts *o = &a->opts;
    char *err = NULL;
    bool ok = true;
    if (!strcmp(opt, "--features"))
        a->features_dir = v;
    else if (!strcmp(opt, "--output"))
        a->output = v;
    else if (!strcmp(opt, "--layers"))
        a->layers = v;
    else if (!strcmp(opt, "--train-features"))
        a->train_x = v;
    else if (!strcmp(opt, "--train-targets"))
        a->train_t = v;
    else if (!strcmp(opt, "--test-features"))
        a->test_x = v;
    else if (!strcmp(opt, "--test-targets"))
        a->test_t = v;
    else if (!strcmp(opt, "--costs"))
        ok = svm_opts_set_costs(o, v, &err) == 0;
    else if (!strcmp(opt, "--folds"))
        ok = parse_positive(v, &o->folds) && o->folds >= 2;
    else if (!strcmp(opt, "--max-iter"))
        ok = parse_positive(v, &o->max_iter);
    else if (!strcmp(opt, "--threads"))
        ok = parse_positive(v, &o->threads);
    else if (!strcmp(opt, "--cls-list"))
        ok = parse_int_list(v, &o->cls_list, &o->ncls_list);
    else if (!strcmp(opt, "--k-values"))
        ok = parse_int_list(v, &o->k_values, &o->nk);
    else if (!strcmp(opt, "--samples"))
        ok = parse_int_list(v, &o->sample_inds, &o->nsamples);
    else if (!strcmp(opt, "--seed"))
        o->seed = strtoull(v, NULL, 10);
    else if (!strcmp(opt, "--low-shot-style")) {
        ok = !strcmp(v, "voc") || !strcmp(v, "places");
        o->lowshot_style = !strcmp(v, "places") ? LOWSHOT_PLACES : LOWSHOT_VOC;
    } else if (!strcmp(opt, "-c") || !strcmp(opt, "--config"))
        a->config = v;
    else {
        log_error("unknown option '%s'; see selfsup-svm --help", opt);
        return false;
    }
    if (!ok)
        log_error("%s '%s': %s", opt, v, err ? err : "bad value; see selfsup-svm --help");
    free(err);
    return ok;
}

/* -1 to go on, else the exit status (help, version, usage error). */
static int parse_args(args *a, int argc, char **argv)
{
    a->overrides = xcalloc((size_t)argc + 1, sizeof *a->overrides);
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help"))
            return usage(stdout), 0;
        if (!strcmp(s, "--version"))
            return printf("selfsup-svm %s\n", SELFSUP_VERSION), 0;
        if (!strcmp(s, "--low-shot"))
            a->low_shot = true;
        else if (!strcmp(s, "--no-normalize"))
            a->opts.normalize = false;
        else if (!strcmp(s, "--force-retrain"))
            a->opts.force_retrain = true;
        else if (s[0] != '-')
            a->overrides[a->n_overrides++] = argv[i];
        else if (i + 1 >= argc) {
            log_error("option '%s' needs a value; see selfsup-svm --help", s);
            return EXIT_USAGE;
        } else if (!value_option(a, s, argv[++i]))
            return EXIT_USAGE;
    }
    bool standalone = a->train_x || a->train_t || a->test_x || a->test_t;
    if (standalone && a->config) {
        log_error("give either -c CONFIG or the four --train-/--test- files, not both");
        return EXIT_USAGE;
    }
    if (!standalone && !a->config) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (standalone && (!a->train_x || !a->train_t || !a->test_x || !a->test_t || !a->output)) {
        log_error("standalone mode needs --train-features, --train-targets, --test-features, --test-targets and "
                  "--output");
        return EXIT_USAGE;
    }
    if (standalone && a->n_overrides) {
        log_error("'%s': config overrides need -c CONFIG", a->overrides[0]);
        return EXIT_USAGE;
    }
    const char *files[] = {a->train_x, a->train_t, a->test_x, a->test_t};
    const char *names[] = {"--train-features", "--train-targets", "--test-features", "--test-targets"};
    for (size_t i = 0; standalone && i < ARRAY_LEN(files); i++) {
        char *why = NULL; /* a FIFO or a device would block or never end the read */
        if (path_exists(files[i]) && check_regular_file(files[i], SIZE_MAX, &why) != 0) {
            log_error("%s %s", names[i], why);
            free(why);
            return EXIT_USAGE;
        }
    }
    return -1;
}

/* ---- one layer ------------------------------------------------------------------------------ */

typedef struct {
    const args *a;
    const char *layer;
    const char *outdir;     /* the layer's result folder */
    const char *sample_dir; /* where {layer}_sample{s}_k{k}.npy live */
    const char *what[2];    /* the train and test targets, for messages: "train targets (FILE)" */
    json_t *json;           /* layer name → results */
} layer_run;

/* An output folder made, tried and measured (`need` bytes free) before the work it is for,
 * so that it is not found unusable after the fits. `what` names the option or key that chose
 * it, `where` its config node (may be NULL). */
static int check_output(const char *dir, const char *what, const cfg_node *where, uint64_t need)
{
    cfg_err e;
    bool ok = ckpt_output_dir_usable(dir, need, what, where, &e);
    if (!ok)
        log_error("%s", e.msg);
    return ok ? 0 : EXIT_USAGE;
}

#define NPY_FILE_OVERHEAD 128 /* an .npy header, at most */

/* Bytes a layer's results take, about: a float64 model (dim + 1 values) and an AP file per
 * class and cost (per sample and k too in low-shot, with the samples' n × C targets). */
static uint64_t layer_output_bytes(const svm_opts *o, const svm_data *tr, bool low_shot)
{
    uint64_t per_fit = (uint64_t)(tr->dim + 1) * sizeof(double) + 2 * NPY_FILE_OVERHEAD;
    size_t ncls = o->ncls_list ? o->ncls_list : tr->C;
    if (!low_shot)
        return (uint64_t)ncls * o->ncosts * per_fit + 3 * ((uint64_t)ncls * o->ncosts * 8 + NPY_FILE_OVERHEAD);
    uint64_t per_sample = (uint64_t)tr->C * o->ncosts * per_fit + (uint64_t)tr->n * tr->C * sizeof(int32_t);
    return (uint64_t)o->nk * o->nsamples * per_sample;
}

/* The checks that need the data but come before any fit: room for the results, and (VOC07)
 * a class that can give an AP. */
static int check_before_fits(const layer_run *l, const svm_data *tr, const svm_data *te, char **err)
{
    const svm_opts *o = &l->a->opts;
    char *what = xasprintf("layer %s: the results' folder", l->layer);
    int rc = check_output(l->outdir, what, NULL, layer_output_bytes(o, tr, l->a->low_shot));
    free(what);
    if (rc == 0 && !l->a->low_shot && svm_check_positives(o, tr, te, l->what, err) != 0)
        rc = EXIT_RUNTIME;
    return rc;
}

/* The protocol on one layer's data: 0, or EXIT_RUNTIME with *err. */
static int run_protocol(const layer_run *l, const svm_data *tr, const svm_data *te, char **err)
{
    const svm_opts *o = &l->a->opts;
    int rc;
    if (!l->a->low_shot) {
        svm_result r;
        if ((rc = svm_voc07(o, tr, te, l->outdir, &r, err)) == 0) {
            svm_print_result(stdout, l->layer, &r);
            json_object_set_new(l->json, l->layer, svm_result_json(o, &r));
        }
        svm_result_free(&r);
    } else {
        svm_lowshot_result r;
        if ((rc = svm_lowshot(o, tr, te, l->sample_dir, l->layer, l->outdir, &r, err)) == 0) {
            svm_print_lowshot(stdout, l->layer, o, &r);
            json_object_set_new(l->json, l->layer, svm_lowshot_json(o, &r));
        }
        svm_lowshot_result_free(&r);
    }
    return rc ? EXIT_RUNTIME : 0;
}

static int evaluate(const layer_run *l, feat_set *train, feat_set *test)
{
    svm_data tr, te;
    char *err = NULL;
    int rc = svm_data_from_features(train, test, l->a->opts.normalize, l->what, &tr, &te, &err) ? EXIT_RUNTIME : 0;
    if (rc == 0)
        rc = check_before_fits(l, &tr, &te, &err);
    if (rc == 0)
        rc = run_protocol(l, &tr, &te, &err);
    if (rc && err)
        log_error("layer %s: %s", l->layer, err);
    free(err);
    svm_data_free(&tr);
    svm_data_free(&te);
    return rc;
}

static int write_json(const char *outdir, json_t *json)
{
    char *path = path_join(outdir, "svm_results.json");
    char *err = NULL;
    int rc = make_dirs(outdir, 0777, &err) == 0 && json_dump_file(json, path, JSON_INDENT(2) | JSON_REAL_PRECISION(15)) == 0 ? 0 : EXIT_RUNTIME;
    if (rc)
        log_error("cannot write %s%s%s", path, err ? ": " : "", err ? err : "");
    free(err);
    free(path);
    return rc;
}

static int run_standalone(args *a)
{
    feat_set train = {0}, test = {0};
    char *err = NULL;
    if (check_output(a->output, "--output", NULL, 0))
        return EXIT_USAGE;
    json_t *json = json_object();
    int rc = 0;
    if (feat_load(a->train_x, a->train_t, NULL, &train, &err) || feat_load(a->test_x, a->test_t, NULL, &test, &err)) {
        log_error("%s", err);
        rc = EXIT_RUNTIME;
    } else {
        char *tr = xasprintf("train targets (%s)", a->train_t), *te = xasprintf("test targets (%s)", a->test_t);
        layer_run l = {.a = a, .layer = "features", .outdir = a->output, .sample_dir = a->output, .what = {tr, te},
                       .json = json};
        rc = evaluate(&l, &train, &test);
        free(tr);
        free(te);
    }
    if (rc == 0)
        rc = write_json(a->output, json);
    free(err);
    feat_free(&train);
    feat_free(&test);
    json_decref(json);
    return rc;
}

/* ---- config mode ---------------------------------------------------------------------------- */

static int compose(args *a, cfg_t *cfg)
{
    cfg_err err;
    if (!cfg_compose_arg(cfg, false, a->config, a->n_overrides, a->overrides, &err)) {
        log_error("%s", err.msg);
        return EXIT_USAGE;
    }
    const cfg_node *c = cfg_map_get(cfg->root, "config");
    char *why = NULL;
    svm_opts from_cfg;
    svm_opts_default(&from_cfg);
    from_cfg.threads = a->opts.threads;
    if (svm_opts_from_config(cfg_map_get(c, "SVM"), &from_cfg, &why)) {
        log_error("%s", why);
        free(why);
        svm_opts_free(&from_cfg);
        return EXIT_USAGE;
    }
    from_cfg.seed = (uint64_t)cfg_int(c, "SEED_VALUE");
    svm_opts_free(&a->opts);
    a->opts = from_cfg;
    return 0;
}

static int run_layers(args *a, const char *features, const char *output)
{
    int n = 0, rc = 0;
    char **layers = a->layers ? str_split(a->layers, ',', &n) : feat_layers(features, "train", &n);
    if (n == 0) {
        log_error("no train feature files (rank0_train_LAYER_features.npy) in %s; run selfsup-extract first or "
                  "give --features DIR", features);
        rc = EXIT_RUNTIME;
    }
    json_t *json = json_object();
    for (int i = 0; i < n && rc == 0; i++) {
        feat_set train = {0}, test = {0};
        char *err = NULL;
        if (feat_merge(features, "train", layers[i], &train, &err) ||
            feat_merge(features, "test", layers[i], &test, &err)) {
            log_error("layer %s: %s", layers[i], err);
            rc = EXIT_RUNTIME;
        } else {
            char *outdir = path_join(output, layers[i]);
            char *tr = xasprintf("train targets (%s/rank*_train_%s_targets.npy)", features, layers[i]),
                 *te = xasprintf("test targets (%s/rank*_test_%s_targets.npy)", features, layers[i]);
            layer_run l = {.a = a, .layer = layers[i], .outdir = outdir, .sample_dir = output, .what = {tr, te},
                           .json = json};
            rc = evaluate(&l, &train, &test);
            free(outdir);
            free(tr);
            free(te);
        }
        free(err);
        feat_free(&train);
        feat_free(&test);
    }
    if (rc == 0)
        rc = write_json(output, json);
    for (int i = 0; i < n; i++)
        free(layers[i]);
    free(layers);
    json_decref(json);
    return rc;
}

static int run_config(args *a)
{
    cfg_t cfg = {0};
    int rc = compose(a, &cfg);
    if (rc == 0) {
        const cfg_node *c = cfg_map_get(cfg.root, "config");
        char *ckpt = cfg_checkpoint_folder(&cfg);
        const char *feat_path = cfg_str(c, "SVM_FEATURES_PATH");
        const char *features = a->features_dir ? a->features_dir : *feat_path ? feat_path : ckpt;
        rc = check_output(a->output ? a->output : ckpt, a->output ? "--output" : "config.CHECKPOINT.DIR",
                          a->output ? NULL : cfg_path(c, "CHECKPOINT.DIR"), 0);
        if (rc == 0)
            rc = run_layers(a, features, a->output ? a->output : ckpt);
        free(ckpt);
    }
    cfg_destroy(&cfg);
    return rc;
}

int main(int argc, char **argv)
{
    log_init("svm");
    args a = {0};
    svm_opts_default(&a.opts);
    int rc = parse_args(&a, argc, argv);
    if (rc < 0)
        rc = a.config ? run_config(&a) : run_standalone(&a);
    svm_opts_free(&a.opts);
    free(a.overrides);
    return rc;
}
