/*
 * selfsup-retrieval — VISSL's instance-retrieval benchmark (tools/instance_retrieval_test.py):
 * how well a trunk's activation maps find the same building again, on the revisited Oxford and
 * Paris datasets (roxford5k, rparis6k: mAP and mean precision at 1, 5, 10 for the Easy, Medium
 * and Hard protocols) or the classic ones (Oxford, Paris: mean AP as compute_ap.cpp scores it).
 *
 *   selfsup-retrieval -c CONFIG [overrides] [--output FILE] [--similarities FILE] [--threads N]
 *   selfsup retrieval CONFIG [overrides]           (the same, through the front door)
 *   selfsup retrieval CONFIG --check               (check the config, the model and its weights,
 *                                                    the datasets and that every image is there)
 *
 * config.IMG_RETRIEVAL says what to do:
 *   DATASET_PATH         the folder holding TRAIN_DATASET_NAME and EVAL_DATASET_NAME
 *   EVAL_DATASET_NAME    roxford5k | rparis6k | a classic dataset's folder (Oxford, Paris)
 *   TRAIN_DATASET_NAME   where the PCA whitening is learned: the same kinds, or "whitening"
 *                        with WHITEN_IMG_LIST (an image list, one path per line)
 *   FEATS_PROCESSING_TYPE  rmac | gem | l2_norm | "" (the map as it is)
 *   SPATIAL_LEVELS, GEM_POOL_POWER, N_PCA, SHOULD_TRAIN_PCA_OR_WHITENING (TRAIN_PCA_WHITENING),
 *   RESIZE_IMG (the longer side; -1 keeps the size), DEBUG_MODE (10 training, 20 database
 *   images, 50 queries), NUM_TRAINING_SAMPLES / NUM_QUERY_SAMPLES / NUM_DATABASE_SAMPLES
 *   (the first N; -1 all)
 * and config.MODEL the trunk and its weights (MODEL.WEIGHTS_INIT), LINEAR_EVAL_FEAT_POOL_OPS_MAP's
 * first entry the layer (["res5", ["Identity", []]] with SHOULD_FLATTEN_FEATS False for a map).
 * MACHINE.DEVICE picks the cpu or a GPU. The steps are the tool's: learn the PCA on the training
 * images' descriptors, describe the queries and the database, rank by dot product, score.
 * retrieval.h lists where selfsup parts from VISSL 0.1.5 (each where the tool fails).
 *
 * The results go to stdout and, as JSON, to --output (default CHECKPOINT.DIR/instance_retrieval.json);
 * --similarities writes the queries × database similarities as a float32 .npy.
 *
 * Exit status: 0 done, 1 a dataset or image that cannot be read, 2 a bad argument or config
 * (before any image is read).
 */
#include "atomic_file.h"
#include "config.h"
#include "log.h"
#include "model.h"
#include "npy.h"
#include "retrieval/retrieval.h"
#include "train/checkpoint.h"
#include "util.h"
#include "version.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: selfsup-retrieval -c CONFIG [overrides...] [--output FILE] [--similarities FILE] [--threads N]\n"
    "\n"
    "VISSL's instance-retrieval benchmark (config.IMG_RETRIEVAL): R-MAC or GeM descriptors of a\n"
    "trunk layer, PCA whitening learned on a training dataset, queries ranked against the\n"
    "database; revisited Oxford/Paris mAP (Easy, Medium, Hard) or classic Oxford/Paris mAP.\n"
    "\n"
    "  -c, --config FILE  VISSL config; later key=value arguments are overrides\n"
    "  --output FILE      JSON results (default: CHECKPOINT.DIR/instance_retrieval.json)\n"
    "  --similarities FILE  the queries × database similarities (float32 .npy)\n"
    "  --threads N        compute threads (default: every core)\n"
    "  --check            check everything a run reads (the config, the model and its weights, the\n"
    "                     datasets, that every image is there), print a summary, compute nothing\n"
    "  -h, --help, --version\n";

#define LOG_EVERY 100
#define RESULTS_BYTES ((uint64_t)1 << 20)

typedef struct {
    const char *config, *output, *similarities;
    int threads;
    bool check;
    int n_overrides;
    char **overrides;
} retr_args;

typedef struct {
    const char *root, *train_name, *eval_name, *whiten_list, *type_name;
    retr_feats type;
    int resize, levels, n_pca;
    double gem_p;
    bool train_pca;
    long long n_train, n_query, n_db; /* -1: all */
} retr_options;

/* Returns -1 to go on, else an exit status. */
static int parse_args(int argc, char **argv, retr_args *a)
{
    memset(a, 0, sizeof *a);
    a->overrides = xcalloc((size_t)argc + 1, sizeof *a->overrides);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help"))
            return fputs(usage_text, stdout), 0;
        if (!strcmp(arg, "--version"))
            return printf("selfsup-retrieval %s\n", SELFSUP_VERSION), 0;
        if (!strcmp(arg, "--check")) {
            a->check = true;
            continue;
        }
        if (arg[0] != '-') {
            a->overrides[a->n_overrides++] = argv[i];
            continue;
        }
        bool known = !strcmp(arg, "-c") || !strcmp(arg, "--config") || !strcmp(arg, "--output") ||
                     !strcmp(arg, "--similarities") || !strcmp(arg, "--threads");
        if (!known || !val) {
            log_error(known ? "%s needs a value; see selfsup-retrieval --help"
                            : "unknown option '%s'; see selfsup-retrieval --help",
                      arg);
            return EXIT_USAGE;
        }
        i++;
        char *end;
        if (!strcmp(arg, "--threads")) {
            long n = strtol(val, &end, 10);
            if (*end || end == val || n < 0 || n > 4096)
                return log_error("--threads needs a number 0..4096, not '%s'", val), EXIT_USAGE;
            a->threads = (int)n;
        } else
            *(!strcmp(arg, "--output")         ? &a->output
              : !strcmp(arg, "--similarities") ? &a->similarities
                                               : &a->config) = val;
    }
    if (!a->config)
        return fputs(usage_text, stderr), EXIT_USAGE;
    return -1;
}

/* ---- config ---------------------------------------------------------------------------------- */

static bool fail_at(const cfg_node *c, const char *key, const char *why)
{
    cfg_err err;
    char *path = xasprintf("config.IMG_RETRIEVAL.%s", key);
    cfg_fail(&err, cfg_path(c, path + strlen("config.")), path, "%s", why);
    log_error("%s", err.msg);
    free(path);
    return false;
}

static bool read_type(const cfg_node *c, retr_options *o)
{
    static const char *const names[] = {"", "rmac", "gem", "l2_norm"};
    static const retr_feats kinds[] = {RETR_FEATS_RAW, RETR_FEATS_RMAC, RETR_FEATS_GEM, RETR_FEATS_L2};
    o->type_name = cfg_str(c, "IMG_RETRIEVAL.FEATS_PROCESSING_TYPE");
    for (size_t i = 0; o->type_name && i < ARRAY_LEN(names); i++)
        if (!strcmp(o->type_name, names[i]))
            return o->type = kinds[i], true;
    return fail_at(c, "FEATS_PROCESSING_TYPE", "must be rmac, gem, l2_norm or \"\"");
}

/* A sample limit: DEBUG_MODE's, else NUM_*_SAMPLES (-1 all). */
static bool read_limit(const cfg_node *c, const char *key, bool debug, long long debug_n, long long *out)
{
    char *path = xasprintf("IMG_RETRIEVAL.%s", key);
    const cfg_node *n = cfg_path(c, path);
    free(path);
    *out = debug ? debug_n : n && n->kind == CFG_INT ? n->i : -1;
    if (n && (n->kind != CFG_INT || n->i < -1 || n->i == 0))
        return fail_at(c, key, "must be -1 (all) or a count >= 1");
    return true;
}

static bool read_numbers(const cfg_node *c, retr_options *o)
{
    const cfg_node *p = cfg_path(c, "IMG_RETRIEVAL.GEM_POOL_POWER");
    o->resize = (int)cfg_int(c, "IMG_RETRIEVAL.RESIZE_IMG");
    o->levels = (int)cfg_int(c, "IMG_RETRIEVAL.SPATIAL_LEVELS");
    o->n_pca = (int)cfg_int(c, "IMG_RETRIEVAL.N_PCA");
    o->gem_p = p && cfg_is_number(p) ? cfg_number(p) : NAN;
    if (o->resize < 1 && o->resize != -1 && o->resize != -2)
        return fail_at(c, "RESIZE_IMG", "must be a size >= 1, or -1 (keep the size) or -2 (1024 above 124 px)");
    if (o->levels < 1 || o->levels > 8)
        return fail_at(c, "SPATIAL_LEVELS", "must be 1..8");
    if (!(o->gem_p > 0))
        return fail_at(c, "GEM_POOL_POWER", "must be a positive number (inf: max pooling)");
    return true;
}

static bool read_datasets(const cfg_node *c, retr_options *o)
{
    o->root = cfg_str(c, "IMG_RETRIEVAL.DATASET_PATH");
    o->train_name = cfg_str(c, "IMG_RETRIEVAL.TRAIN_DATASET_NAME");
    o->eval_name = cfg_str(c, "IMG_RETRIEVAL.EVAL_DATASET_NAME");
    o->whiten_list = cfg_str(c, "IMG_RETRIEVAL.WHITEN_IMG_LIST");
    if (!o->root || !*o->root || !path_is_dir(o->root))
        return fail_at(c, "DATASET_PATH", "must be the folder holding the datasets");
    if (!o->eval_name || !strcmp(o->eval_name, "instre") || !strcmp(o->eval_name, "whitening"))
        return fail_at(c, "EVAL_DATASET_NAME", "must be roxford5k, rparis6k or a classic Oxford/Paris folder "
                                               "(INSTRE's gnd_instre.mat is a MATLAB file selfsup does not read)");
    char *eval_dir = path_join(o->root, o->eval_name);
    bool ok = path_is_dir(eval_dir);
    free(eval_dir);
    if (!ok)
        return fail_at(c, "EVAL_DATASET_NAME", "names no folder under DATASET_PATH");
    bool pca = o->train_pca && (o->type == RETR_FEATS_RMAC || o->type == RETR_FEATS_GEM);
    if (pca && (!o->train_name || !strcmp(o->train_name, "instre")))
        return fail_at(c, "TRAIN_DATASET_NAME", "must be roxford5k, rparis6k, whitening or a classic folder");
    char *train_dir = pca ? path_join(o->root, o->train_name) : NULL;
    ok = !pca || path_is_dir(train_dir);
    free(train_dir);
    if (!ok)
        return fail_at(c, "TRAIN_DATASET_NAME", "names no folder under DATASET_PATH (the PCA is learned there)");
    if (pca && !strcmp(o->train_name, "whitening") && (!o->whiten_list || !path_exists(o->whiten_list)))
        return fail_at(c, "WHITEN_IMG_LIST", "must name the whitening images' list file");
    return true;
}

static int read_options(const cfg_node *c, retr_options *o)
{
    memset(o, 0, sizeof *o);
    o->train_pca = cfg_bool(c, "IMG_RETRIEVAL.SHOULD_TRAIN_PCA_OR_WHITENING");
    bool debug = cfg_bool(c, "IMG_RETRIEVAL.DEBUG_MODE");
    bool ok = read_type(c, o) && read_numbers(c, o) && read_datasets(c, o) &&
              read_limit(c, "NUM_TRAINING_SAMPLES", debug, 10, &o->n_train) &&
              read_limit(c, "NUM_QUERY_SAMPLES", debug, 50, &o->n_query) &&
              read_limit(c, "NUM_DATABASE_SAMPLES", debug, 20, &o->n_db);
    return ok ? 0 : EXIT_USAGE;
}

/* ---- running --------------------------------------------------------------------------------- */

/* The descriptors of a list of images, one row each (all of one width), or NULL with *err. */
typedef struct {
    float *rows;
    size_t n;
    int width;
} descriptors;

static int describe_one(retr_describer *d, const pca_model *pca, const char *path, const float *roi, bool no_resize,
                        int resize, descriptors *out, char **err)
{
    if (retr_forward_file(d, path, resize, no_resize, roi, err) != 0)
        return -1;
    int width = 0;
    float *v = retr_descriptor(d, pca, &width);
    if (out->n && width != out->width) {
        free(v);
        return report_failure(err, "%s: a descriptor of %d values where the others have %d (flattened maps of "
                                   "images of different sizes: use rmac or gem)",
                              path, width, out->width);
    }
    out->width = width;
    out->rows = xrealloc(out->rows, (out->n + 1) * (size_t)width * sizeof *out->rows);
    memcpy(out->rows + out->n++ * (size_t)width, v, (size_t)width * sizeof *v);
    free(v);
    return 0;
}

static int describe_all(retr_describer *d, const pca_model *pca, char *const *paths, float (*roi)[4], size_t n,
                        const char *what, int resize, descriptors *out)
{
    char *err = NULL;
    for (size_t i = 0; i < n; i++) {
        if (i % LOG_EVERY == 0)
            log_info("%s: image %zu of %zu", what, i, n);
        if (describe_one(d, pca, paths[i], roi ? roi[i] : NULL, false, resize, out, &err) != 0) {
            log_error("%s: %s", what, err);
            free(err);
            return -1;
        }
    }
    return 0;
}

/* The training images' rows into the PCA, then the fit. */
static int learn_pca(retr_describer *d, const retr_dataset *train, int resize, int n_pca, pca_model *pca)
{
    char *err = NULL;
    bool whiten = train->kind == RETR_WHITENING;
    for (size_t i = 0; i < train->n_images; i++) {
        if (i % LOG_EVERY == 0)
            log_info("PCA training (%s): image %zu of %zu", train->name, i, train->n_images);
        if (retr_forward_file(d, train->images[i], resize, whiten, NULL, &err) != 0) {
            log_error("PCA training: %s", err);
            free(err);
            return -1;
        }
        int n, width;
        float *rows = retr_training_rows(d, &n, &width);
        if (i == 0)
            pca_init(pca, width);
        for (int k = 0; k < n; k++)
            pca_add(pca, rows + (size_t)k * width);
        free(rows);
    }
    if (pca_fit(pca, n_pca, &err) != 0) {
        log_error("PCA training: %s", err);
        free(err);
        return -1;
    }
    if (pca->rows < pca->out)
        log_warn("PCA: %lld training rows for %d components: the components past the data's rank whiten noise",
                 (long long)pca->rows, pca->out);
    log_info("PCA: %d of %d components from %lld rows keep %.2f %% of the energy (%d eigenvalues raised to max·1e-5)",
             pca->out, pca->dim, (long long)pca->rows, 100 * pca->energy, pca->clamped);
    return 0;
}

/* sim = Q·Dᵀ, nq × ndb. */
static float *similarities(const descriptors *q, const descriptors *db)
{
    float *sim = xmalloc((q->n * db->n + 1) * sizeof *sim);
    if (q->n && db->n)
        retr_sgemm('N', 'T', (int64_t)q->n, (int64_t)db->n, q->width, q->rows, q->width, db->rows, db->width, sim,
                   (int64_t)db->n);
    return sim;
}

/* ---- scoring --------------------------------------------------------------------------------- */

/* One protocol of the revisited datasets: which lists are positives and which junk. */
static const struct {
    const char *name, *key;
    bool easy_ok, hard_ok, easy_junk, hard_junk;
} PROTOCOLS[3] = {
    {"E", "easy", true, false, false, true},
    {"M", "medium", true, true, false, false},
    {"H", "hard", false, true, true, false},
};

static int64_t *concat(const int64_t *a, size_t na, const int64_t *b, size_t nb, size_t *n)
{
    int64_t *out = xmalloc((na + nb + 1) * sizeof *out);
    if (na)
        memcpy(out, a, na * sizeof *a);
    if (nb)
        memcpy(out + na, b, nb * sizeof *b);
    *n = na + nb;
    return out;
}

static void protocol_gnd(const retr_dataset *d, size_t q, int p, retr_gnd *g)
{
    const int64_t *none = NULL;
    g->ok = concat(PROTOCOLS[p].easy_ok ? d->easy[q] : none, PROTOCOLS[p].easy_ok ? d->n_easy[q] : 0,
                   PROTOCOLS[p].hard_ok ? d->hard[q] : none, PROTOCOLS[p].hard_ok ? d->n_hard[q] : 0, &g->n_ok);
    size_t n_extra = PROTOCOLS[p].easy_junk ? d->n_easy[q] : PROTOCOLS[p].hard_junk ? d->n_hard[q] : 0;
    const int64_t *extra = PROTOCOLS[p].easy_junk ? d->easy[q] : PROTOCOLS[p].hard_junk ? d->hard[q] : none;
    g->junk = concat(d->junk[q], d->n_junk[q], extra, n_extra, &g->n_junk);
}

static json_t *score_revisited(const retr_dataset *d, const int64_t *ranks, size_t nq, size_t ndb)
{
    json_t *doc = json_object(), *map = json_object(), *mpk = json_object(), *ks = json_array();
    retr_gnd *g = xcalloc(nq + 1, sizeof *g);
    for (int j = 0; j < RETR_KAPPAS; j++)
        json_array_append_new(ks, json_integer(retr_kappas[j]));
    json_object_set_new(mpk, "k", ks);
    for (int p = 0; p < 3; p++) {
        for (size_t q = 0; q < nq; q++)
            protocol_gnd(d, q, p, &g[q]);
        double m, pk[RETR_KAPPAS];
        retr_compute_map(ranks, nq, ndb, g, &m, pk, NULL);
        printf(">> %s: %s mAP %.2f, mP@k[1 5 10] %.2f %.2f %.2f\n", d->name, PROTOCOLS[p].key, 100 * m, 100 * pk[0],
               100 * pk[1], 100 * pk[2]);
        json_object_set_new(map, PROTOCOLS[p].key, json_real(m));
        json_t *row = json_array();
        for (int j = 0; j < RETR_KAPPAS; j++)
            json_array_append_new(row, json_real(pk[j]));
        json_object_set_new(mpk, PROTOCOLS[p].key, row);
        for (size_t q = 0; q < nq; q++) {
            free((void *)g[q].ok);
            free((void *)g[q].junk);
        }
    }
    free(g);
    json_object_set_new(doc, "mAP", map);
    json_object_set_new(doc, "mP@k", mpk);
    return doc;
}

static json_t *score_classic(const retr_dataset *d, const int64_t *ranks, size_t nq, size_t ndb)
{
    json_t *doc = json_object(), *aps = json_object();
    double sum = 0;
    for (size_t q = 0; q < nq; q++) {
        double ap = retr_oxford_ap(ranks + q * ndb, ndb, d->positive[q], d->cjunk[q], d->n_positive[q]);
        printf("%s: %.2f\n", d->qnames[q], 100 * ap);
        json_object_set_new(aps, d->qnames[q], json_real(ap));
        sum += ap;
    }
    double mean = nq ? sum / (double)nq : NAN;
    printf("%s: mean AP %.2f over %zu queries\n", d->name, 100 * mean, nq);
    json_object_set_new(doc, "mAP", json_real(mean));
    json_object_set_new(doc, "ap", aps);
    return doc;
}

/* ---- the run --------------------------------------------------------------------------------- */

typedef struct {
    cfg_t cfg;
    bool have_cfg;
    const cfg_node *c;
    retr_options o;
    char *json_out;
    retr_dataset train, eval;
    bool have_train, have_eval;
    retr_describer d;
    pca_model pca;
    bool have_pca;
} retr_run;

static bool wants_pca(const retr_options *o)
{
    return o->train_pca && (o->type == RETR_FEATS_RMAC || o->type == RETR_FEATS_GEM);
}

static int prepare(const retr_args *a, retr_run *r)
{
    cfg_err err;
    bool composed = cfg_compose_arg(&r->cfg, false, a->config, a->n_overrides, a->overrides, &err);
    r->have_cfg = true;
    if (!composed)
        return log_error("%s", err.msg), EXIT_USAGE;
    r->c = cfg_map_get(r->cfg.root, "config");
    int rc = read_options(r->c, &r->o);
    if (rc)
        return rc;
    char *ckpt = cfg_checkpoint_folder(&r->cfg);
    r->json_out = a->output ? xstrdup(a->output) : path_join(ckpt, "instance_retrieval.json");
    free(ckpt);
    /* made and tried before any image is read */
    bool ok = ckpt_output_file_usable(r->json_out, RESULTS_BYTES, a->output ? "--output" : "config.CHECKPOINT.DIR",
                                      a->output ? NULL : cfg_path(r->c, "CHECKPOINT.DIR"));
    return ok && (!a->similarities || ckpt_output_file_usable(a->similarities, 0, "--similarities", NULL)) ? 0
                                                                                                          : EXIT_USAGE;
}

static int load_datasets(retr_run *r)
{
    char *err = NULL;
    const retr_options *o = &r->o;
    if (retr_dataset_load(o->root, o->eval_name, NULL, &r->eval, &err) != 0)
        return log_error("%s", err), free(err), EXIT_RUNTIME;
    r->have_eval = true;
    retr_dataset_limit(&r->eval, o->n_db, o->n_query);
    log_info("%s: %zu database images, %zu queries", o->eval_name, r->eval.n_images, r->eval.n_queries);
    if (!wants_pca(o)) {
        if (o->train_pca)
            log_info("FEATS_PROCESSING_TYPE \"%s\": no PCA is learned (VISSL learns one and never applies it)",
                     o->type_name);
        return 0;
    }
    if (retr_dataset_load(o->root, o->train_name, o->whiten_list, &r->train, &err) != 0)
        return log_error("%s", err), free(err), EXIT_RUNTIME;
    r->have_train = true;
    retr_dataset_limit(&r->train, o->n_train, -1);
    if (!r->train.n_images)
        return log_error("%s: no training images for the PCA", o->train_name), EXIT_RUNTIME;
    return 0;
}

/* The first of n paths that cannot be read, or NULL. */
static const char *unreadable(char *const *paths, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (access(paths[i], R_OK) != 0)
            return paths[i];
    return NULL;
}

/* --check: what a run would read is there (the config, model and datasets are loaded already). */
static int check_only(const retr_args *a, const retr_run *r)
{
    const retr_dataset *sets[2] = {&r->eval, &r->train};
    for (int k = 0; k < (r->have_train ? 2 : 1); k++) {
        const char *bad = unreadable(sets[k]->images, sets[k]->n_images);
        if (!bad)
            bad = unreadable(sets[k]->queries, sets[k]->n_queries);
        if (bad)
            return log_error("%s: cannot read %s: %s", sets[k]->name, bad, strerror(errno)), EXIT_RUNTIME;
    }
    char pca[160] = "no PCA";
    if (r->have_train)
        snprintf(pca, sizeof pca, "PCA learned on %s's %zu images", r->o.train_name, r->train.n_images);
    printf("%s: OK (%s descriptors; %s: %zu database images, %zu queries; %s)\n", a->config,
           r->o.type_name[0] ? r->o.type_name : "map", r->o.eval_name, r->eval.n_images, r->eval.n_queries, pca);
    return 0;
}

static int build_model(const retr_args *a, retr_run *r)
{
    cfg_err err;
    if (!model_build_from_config(r->c, a->threads, 0, (eng_backend **)&r->d.be, (model **)&r->d.m, &err))
        return log_error("%s", err.msg), EXIT_USAGE;
    r->d.type = r->o.type;
    r->d.levels = r->o.levels;
    r->d.gem_p = r->o.gem_p;
    return 0;
}

static json_t *results_doc(const retr_run *r, size_t nq, size_t ndb, json_t *scores)
{
    json_t *doc = json_object();
    json_object_set_new(doc, "benchmark", json_string("instance_retrieval"));
    json_object_set_new(doc, "eval_dataset", json_string(r->o.eval_name));
    json_object_set_new(doc, "feats_processing_type", json_string(r->o.type_name));
    json_object_set_new(doc, "queries", json_integer((json_int_t)nq));
    json_object_set_new(doc, "database", json_integer((json_int_t)ndb));
    json_t *pca = json_null();
    if (r->have_pca) {
        pca = json_object();
        json_object_set_new(pca, "train_dataset", json_string(r->o.train_name));
        json_object_set_new(pca, "components", json_integer(r->pca.out));
        json_object_set_new(pca, "rows", json_integer(r->pca.rows));
        json_object_set_new(pca, "energy", json_real(r->pca.energy));
    }
    json_object_set_new(doc, "pca", pca);
    json_object_update(doc, scores);
    json_decref(scores);
    return doc;
}

static int write_similarities(const char *path, const float *sim, size_t nq, size_t ndb)
{
    size_t shape[2] = {nq, ndb};
    char *err = NULL;
    int rc = npy_write(path, NPY_F4, 2, shape, sim, &err);
    if (rc)
        log_error("--similarities: %s", err);
    free(err);
    return rc;
}

static int evaluate(const retr_args *a, retr_run *r)
{
    descriptors q = {0}, db = {0};
    const retr_dataset *e = &r->eval;
    const pca_model *pca = r->have_pca ? &r->pca : NULL;
    bool crop = e->kind == RETR_CLASSIC; /* VISSL 0.1.5 computes the revisited crop and drops it */
    int rc = describe_all(&r->d, pca, e->queries, crop ? e->roi : NULL, e->n_queries, "queries", r->o.resize, &q);
    if (rc == 0)
        rc = describe_all(&r->d, pca, e->images, NULL, e->n_images, "database", r->o.resize, &db);
    if (rc == 0) {
        float *sim = similarities(&q, &db);
        int64_t *ranks = xmalloc((q.n * db.n + 1) * sizeof *ranks);
        retr_rank(sim, q.n, db.n, ranks);
        if (a->similarities)
            rc = write_similarities(a->similarities, sim, q.n, db.n);
        json_t *scores = e->kind == RETR_REVISITED ? score_revisited(e, ranks, q.n, db.n)
                                                   : score_classic(e, ranks, q.n, db.n);
        json_t *doc = results_doc(r, q.n, db.n, scores);
        char *err = NULL;
        if (rc == 0 && (rc = json_write_file(doc, r->json_out, &err)) != 0)
            log_error("%s", err);
        free(err);
        json_decref(doc);
        free(ranks);
        free(sim);
    }
    free(q.rows);
    free(db.rows);
    return rc ? EXIT_RUNTIME : 0;
}

static void free_run(retr_run *r)
{
    if (r->d.m)
        model_free(r->d.be, r->d.m);
    if (r->d.be)
        eng_backend_close(r->d.be);
    retr_describer_free(&r->d);
    if (r->have_pca)
        pca_free(&r->pca);
    if (r->have_train)
        retr_dataset_free(&r->train);
    if (r->have_eval)
        retr_dataset_free(&r->eval);
    free(r->json_out);
    if (r->have_cfg)
        cfg_destroy(&r->cfg);
}

/* The benchmark itself: the PCA learned when the descriptors take one, then the scores. */
static int learn_and_evaluate(const retr_args *a, retr_run *r)
{
    if (wants_pca(&r->o)) {
        r->have_pca = true;
        if (learn_pca(&r->d, &r->train, r->o.resize, r->o.n_pca, &r->pca))
            return EXIT_RUNTIME;
    }
    return evaluate(a, r);
}

int main(int argc, char **argv)
{
    log_init("retrieval");
    retr_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) {
        free(a.overrides);
        return rc;
    }
    retr_run r = {0};
    rc = prepare(&a, &r);
    if (rc == 0) /* before any dataset file or image: a bad model or weights file is a config error */
        rc = build_model(&a, &r);
    if (rc == 0)
        rc = load_datasets(&r);
    if (rc == 0)
        rc = a.check ? check_only(&a, &r) : learn_and_evaluate(&a, &r);
    free_run(&r);
    free(a.overrides);
    return rc;
}
