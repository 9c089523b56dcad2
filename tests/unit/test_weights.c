/*
 * test_weights.c — weights in and out of the model engine (nn/weights.c), torch.save files
 * written by lib/torchsave.c, and `selfsup convert`, against PyTorch.
 *
 * The references are made at test time: each test runs tests/golden/make_weights_fixtures.py
 * CASE into a fresh directory (a torchvision resnet50 saved in torch's zip and legacy formats,
 * a VISSL checkpoint with an mlp head, small hostile files, …), so nothing large is committed.
 * Forward parity is max |got − want| / max |want| ≤ 1e-4, as in test_resnet.c. Tests are
 * skipped only when /usr/bin/python3 cannot import torch and torchvision (make deps).
 * WEIGHTS_VERBOSE=1 prints every measured error.
 */
#include "heads.h"
#include "log.h"
#include "model.h"
#include "nn.h"
#include "npy.h"
#include "params.h"
#include "resnet.h"
#include "safetensors.h"
#include "torchfile.h"
#include "torchsave.h"
#include "util.h"
#include "weights.h"

#include "test_nn_util.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FWD_TOL 1e-4
#define SCRIPT "tests/golden/make_weights_fixtures.py"
#define TV_PREFIX "trunk._feature_blocks."

/* ---- fixtures and helpers ---------------------------------------------------------------------- */

static void run_script(const char *kase, const char *dir)
{
    char *script = test_path(SCRIPT), *out = NULL;
    char *cmd = xasprintf("/usr/bin/python3 '%s' %s '%s'", script, kase, dir);
    int rc = test_run(cmd, &out);
    cr_assert_eq(rc, 0, "%s failed (exit %d):\n%s", cmd, rc, out);
    free(out);
    free(cmd);
    free(script);
}

/* A fresh directory holding the fixture script's CASE. */
static char *fixtures(const char *kase)
{
    if (system("/usr/bin/python3 -c 'import torch, torchvision' >/dev/null 2>&1") != 0)
        cr_skip_test("/usr/bin/python3 cannot import torch and torchvision (make deps)");
    char *dir = test_make_tmpdir();
    run_script(kase, dir);
    return dir;
}

static char *in_dir(const char *dir, const char *name) { return path_join(dir, name); }

static npy_array load_npy(const char *dir, const char *name)
{
    char *path = in_dir(dir, name), *err = NULL;
    npy_array a;
    cr_assert_eq(npy_read(path, &a, &err), 0, "%s: %s", path, err);
    cr_assert_eq(a.dtype, NPY_F4, "%s", path);
    free(path);
    return a;
}

static void expect_close(eng_backend *be, const eng_tensor *got, const char *dir, const char *name, const char *what)
{
    npy_array want = load_npy(dir, name);
    cr_assert_eq((size_t)eng_numel(&got->shape), want.count, "%s: element count", what);
    float *h = nnt_download(be, got);
    double e = nnt_rel_error_host(h, want.data, want.count);
    if (getenv("WEIGHTS_VERBOSE"))
        fprintf(stderr, "weights: %-44s relative error %.3g\n", what, e);
    cr_expect_leq(e, FWD_TOL, "%s: relative error %g > %g", what, e, FWD_TOL);
    free(h);
    npy_close(&want);
}

static eng_tensor upload_npy(eng_backend *be, const char *dir, const char *name)
{
    npy_array a = load_npy(dir, name);
    cr_assert_eq(a.ndim, 4);
    eng_tensor t = eng_tensor_new(be, eng_shape4((int64_t)a.shape[0], (int64_t)a.shape[1], (int64_t)a.shape[2],
                                                 (int64_t)a.shape[3]));
    eng_upload(be, &t, a.data);
    npy_close(&a);
    return t;
}

/* A model's entries under full state-dict names (copies pointing at the same tensors). */
typedef struct {
    eng_entry *e;
    int n, cap;
} model_entries;

static void add_entries(model_entries *m, const eng_entry *src, const char *prefix)
{
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 64;
        m->e = xrealloc(m->e, (size_t)m->cap * sizeof *m->e);
    }
    m->e[m->n] = *src;
    m->e[m->n++].name = xasprintf("%s%s", prefix, src->name);
}

static void add_trunk(model_entries *m, const resnet *net)
{
    for (int i = 0; i < resnet_entry_count(net); i++)
        add_entries(m, resnet_entry_at(net, i), "trunk.");
}

static void add_head(model_entries *m, const head *h, int index)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "heads.%d.", index);
    for (int i = 0; i < head_entry_count(h); i++)
        add_entries(m, head_entry_at(h, i), prefix);
}

static void free_entries(model_entries *m)
{
    for (int i = 0; i < m->n; i++)
        free((char *)m->e[i].name);
    free(m->e);
    *m = (model_entries){0};
}

/* Every entry's values, concatenated, for before/after comparisons. */
static float *snapshot(eng_backend *be, const model_entries *m, size_t *total)
{
    size_t n = 0;
    for (int i = 0; i < m->n; i++)
        n += (size_t)eng_numel(&m->e[i].value.shape);
    float *all = xmalloc(n * sizeof *all), *at = all;
    for (int i = 0; i < m->n; i++) {
        eng_download(be, &m->e[i].value, at);
        at += eng_numel(&m->e[i].value.shape);
    }
    *total = n;
    return all;
}

static resnet *make_resnet(eng_backend *be, int depth, uint64_t seed)
{
    resnet_options o = resnet_defaults();
    o.depth = depth;
    char *err = NULL;
    resnet *net = resnet_new(be, &o, seed, &err);
    cr_assert(net, "%s", err);
    resnet_init(be, net, seed);
    return net;
}

/* VISSL's mlp [512, 256, 128] with BN and ReLU, as the fixture script builds it. */
static head *make_mlp(eng_backend *be, uint64_t seed)
{
    head_options o = head_defaults(HEAD_MLP);
    o.dims[0] = 512, o.dims[1] = 256, o.dims[2] = 128;
    o.ndims = 3;
    o.use_bn = o.use_relu = true;
    char *err = NULL;
    head *h = head_new(be, &o, seed, &err);
    cr_assert(h, "%s", err);
    return h;
}

static weights_init_options torchvision_options(const char *path)
{
    weights_init_options o = weights_init_defaults();
    o.params_file = path;
    o.state_dict_key_name = "";
    o.append_prefix = TV_PREFIX;
    return o;
}

/* ---- torchvision resnet50: zip and legacy files, eval forward parity ---------------------------- */

Test(weights, torchvision_resnet50_zip_and_legacy_forward_matches_torch, .timeout = 600)
{
    char *dir = fixtures("r50"), *err = NULL;
    eng_backend *be = nnt_open_cpu();
    resnet *net = make_resnet(be, 50, 1);
    model_entries m = {0};
    add_trunk(&m, net);
    eng_tensor x = upload_npy(be, dir, "x.npy");
    resnet_plan(be, net, &x.shape);
    const char *files[] = {"r50.pth", "r50_legacy.pth"};
    for (size_t f = 0; f < ARRAY_LEN(files); f++) {
        resnet_init(be, net, 100 + f); /* each file must overwrite every weight */
        char *path = in_dir(dir, files[f]);
        weights_init_options o = torchvision_options(path);
        cr_assert_eq(weights_load(be, m.e, m.n, &o, &err), 0, "%s: %s", files[f], err);
        const eng_tensor *feat = resnet_forward(be, net, &x, false);
        expect_close(be, feat, dir, "feat.npy", files[f]);
        free(path);
    }
    eng_tensor_free(be, &x);
    free_entries(&m);
    resnet_free(be, net);
    eng_backend_close(be);
    test_rm_dir(dir);
}

/* ---- a VISSL checkpoint: defaults, prefixes, SKIP_LAYERS, load_heads ------------------------- */

typedef struct {
    eng_backend *be;
    resnet *net;
    head *h;
    model_entries all, trunk_only;
    eng_tensor x;
    char *dir;
} vissl_model;

static void vissl_setup(vissl_model *v)
{
    v->dir = fixtures("vissl");
    v->be = nnt_open_cpu();
    v->net = make_resnet(v->be, 18, 1);
    v->h = make_mlp(v->be, 2);
    v->all = v->trunk_only = (model_entries){0};
    add_trunk(&v->all, v->net);
    add_head(&v->all, v->h, 0);
    add_trunk(&v->trunk_only, v->net);
    v->x = upload_npy(v->be, v->dir, "x.npy");
    resnet_plan(v->be, v->net, &v->x.shape);
    eng_shape feat = eng_shape2(v->x.shape.dim[0], 512);
    cr_assert_eq(head_plan(v->be, v->h, &feat, NULL), 0);
}

static void vissl_teardown(vissl_model *v)
{
    eng_tensor_free(v->be, &v->x);
    free_entries(&v->all);
    free_entries(&v->trunk_only);
    head_free(v->be, v->h);
    resnet_free(v->be, v->net);
    eng_backend_close(v->be);
    test_rm_dir(v->dir);
}

static void vissl_check_forward(vissl_model *v, bool with_head, const char *what)
{
    const eng_tensor *feat = resnet_forward(v->be, v->net, &v->x, false);
    char label[96];
    snprintf(label, sizeof label, "%s trunk", what);
    expect_close(v->be, feat, v->dir, "feat.npy", label);
    if (!with_head)
        return;
    snprintf(label, sizeof label, "%s head", what);
    expect_close(v->be, head_forward(v->be, v->h, feat, false), v->dir, "out.npy", label);
}

Test(weights, vissl_checkpoint_loads_with_defaults_and_matches_torch)
{
    vissl_model v;
    vissl_setup(&v);
    char *path = in_dir(v.dir, "vissl.torch"), *err = NULL;
    weights_init_options o = weights_init_defaults();
    o.params_file = path;
    cr_assert_eq(weights_load(v.be, v.all.e, v.all.n, &o, &err), 0, "%s", err);
    vissl_check_forward(&v, true, "vissl defaults");

    /* load_heads = false (eval without EVAL_TRUNK_AND_HEAD): heads keep their values. */
    resnet_init(v.be, v.net, 5);
    head_init(v.be, v.h, 6);
    model_entries heads = {0};
    add_head(&heads, v.h, 0);
    size_t n0, n1;
    float *before = snapshot(v.be, &heads, &n0);
    o.load_heads = false;
    cr_assert_eq(weights_load(v.be, v.all.e, v.all.n, &o, &err), 0, "%s", err);
    float *after = snapshot(v.be, &heads, &n1);
    cr_assert_eq(n0, n1);
    cr_expect_eq(memcmp(before, after, n0 * sizeof *before), 0, "load_heads=false changed the heads");
    vissl_check_forward(&v, false, "vissl load_heads=false");

    /* A feature extractor (eval mode) reads the pretraining trunk as trunk.base_model.…. */
    model_entries fe = {0};
    for (int i = 0; i < resnet_entry_count(v.net); i++)
        add_entries(&fe, resnet_entry_at(v.net, i), "trunk.base_model.");
    resnet_init(v.be, v.net, 7);
    o.feature_extractor = true;
    cr_assert_eq(weights_load(v.be, fe.e, fe.n, &o, &err), 0, "%s", err);
    vissl_check_forward(&v, false, "vissl feature extractor");
    free_entries(&fe);
    free(before);
    free(after);
    free_entries(&heads);
    free(path);
    vissl_teardown(&v);
}

/* ---- MODEL.WEIGHTS_INIT from a composed config ------------------------------------------------- */

/* config.MODEL of `yaml` built into a model, with its WEIGHTS_INIT (the config stays alive in
 * *cfg: the options point into it). */
static model *model_from_yaml(eng_backend *be, const char *yaml, cfg_t *cfg, model_weights_init *w)
{
    cfg_err cerr;
    cr_assert(test_compose(cfg, &cerr, yaml, NULL), "config: %s", cerr.msg);
    const cfg_node *mc = cfg_path(cfg->root, "config.MODEL");
    model_options o;
    cr_assert(model_options_from_config(mc, &o, &cerr), "model: %s", cerr.msg);
    cr_assert(model_weights_init_from_config(mc, &o, w, &cerr), "WEIGHTS_INIT: %s", cerr.msg);
    char *err = NULL;
    model *m = model_new(be, &o, 3, &err);
    cr_assert(m, "%s", err);
    return m;
}

/* Plan for x.npy, load, forward in eval mode; output 0 against `want`. */
static void load_and_check(eng_backend *be, model *m, const model_weights_init *w, const char *dir, const char *want,
                           const char *what)
{
    npy_array x = load_npy(dir, "x.npy");
    eng_shape in = eng_shape4((int64_t)x.shape[0], 3, (int64_t)x.shape[2], (int64_t)x.shape[3]);
    char *err = NULL;
    cr_assert_eq(model_plan(be, m, &in, 1, &err), 0, "%s", err);
    cr_assert_eq(model_load_weights(be, m, w, &err), 0, "%s: %s", what, err);
    model_upload_input(be, m, 0, x.data);
    model_forward(be, m, false);
    expect_close(be, model_output(m, 0), dir, want, what);
    npy_close(&x);
}

Test(weights, weights_init_from_the_config_for_training_and_for_linear_eval)
{
    char *dir = fixtures("vissl"), *path = in_dir(dir, "vissl.torch");
    eng_backend *be = nnt_open_cpu();
    /* Pretraining: VISSL's checkpoint with every WEIGHTS_INIT default, heads included. */
    char *yaml = xasprintf("config:\n  MODEL:\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18}}}\n"
                           "    HEAD: {PARAMS: [[mlp, {dims: [512, 256, 128], use_bn: true, use_relu: true}]]}\n"
                           "    WEIGHTS_INIT: {PARAMS_FILE: '%s'}\n",
                           path);
    cfg_t cfg = {0};
    model_weights_init w;
    model *m = model_from_yaml(be, yaml, &cfg, &w);
    cr_expect(w.opt.load_heads && !w.opt.feature_extractor);
    cr_expect_eq(w.opt.n_skip_layers, 1);
    cr_expect_str_eq(w.skip[0], "num_batches_tracked");
    cr_expect_str_eq(w.opt.state_dict_key_name, "classy_state_dict");
    load_and_check(be, m, &w, dir, "out.npy", "config: pretraining model");
    model_free(be, m);
    cfg_destroy(&cfg);
    free(yaml);

    /* Linear evaluation: the frozen trunk reads the pretraining trunk as trunk.base_model.…
     * (the feature-extractor names), and heads are not loaded in eval mode. */
    yaml = xasprintf("config:\n  MODEL:\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18}}}\n"
                     "    FEATURE_EVAL_SETTINGS: {EVAL_MODE_ON: true, FREEZE_TRUNK_ONLY: true, "
                     "EXTRACT_TRUNK_FEATURES_ONLY: true, LINEAR_EVAL_FEAT_POOL_OPS_MAP: [[res5avg, [Identity, []]]]}\n"
                     "    WEIGHTS_INIT: {PARAMS_FILE: '%s', SKIP_LAYERS: [num_batches_tracked, nothing_matches]}\n",
                     path);
    cfg = (cfg_t){0};
    m = model_from_yaml(be, yaml, &cfg, &w);
    cr_expect(!w.opt.load_heads && w.opt.feature_extractor);
    cr_expect_eq(w.opt.n_skip_layers, 2);
    load_and_check(be, m, &w, dir, "feat.npy", "config: linear-eval feature extractor");
    model_free(be, m);
    cfg_destroy(&cfg);
    free(yaml);
    free(path);
    eng_backend_close(be);
    test_rm_dir(dir);
}

Test(weights, weights_init_from_the_config_refusals_and_no_file)
{
    eng_backend *be = nnt_open_cpu();
    cfg_t cfg = {0};
    cfg_err cerr;
    cr_assert(test_compose(&cfg, &cerr,
                           "config:\n  MODEL:\n    TRUNK: {NAME: resnet, TRUNK_PARAMS: {RESNETS: {DEPTH: 18}}}\n", NULL),
              "%s", cerr.msg);
    const cfg_node *mc = cfg_path(cfg.root, "config.MODEL");
    model_options o;
    cr_assert(model_options_from_config(mc, &o, &cerr), "%s", cerr.msg);
    model_weights_init w;
    cr_assert(model_weights_init_from_config(mc, &o, &w, &cerr), "%s", cerr.msg);
    char *err = NULL;
    model *m = model_new(be, &o, 3, &err);
    cr_assert(m, "%s", err);
    const eng_tensor *first = &model_entry_at(m, 0)->value;
    float *before = nnt_download(be, first);
    cr_expect_eq(model_load_weights(be, m, &w, &err), 0, "no PARAMS_FILE: nothing to load");
    float *after = nnt_download(be, first);
    cr_expect(memcmp(before, after, (size_t)eng_numel(&first->shape) * sizeof *after) == 0);
    free(before), free(after);
    model_free(be, m);
    cfg_destroy(&cfg);
    /* A SKIP_LAYERS entry that is not a string: refused with its line before anything runs. */
    cfg = (cfg_t){0};
    cr_expect(!test_compose(&cfg, &cerr,
                            "config:\n  MODEL:\n    WEIGHTS_INIT: {SKIP_LAYERS: [num_batches_tracked, {a: 1}]}\n", NULL));
    cr_expect(strstr(cerr.msg, "config.yaml:3") && strstr(cerr.msg, "SKIP_LAYERS.1: expected a string"), "%s",
              cerr.msg);
    cfg_destroy(&cfg);
    eng_backend_close(be);
}

Test(weights, skip_layers_leave_matching_entries_untouched)
{
    vissl_model v;
    vissl_setup(&v);
    char *path = in_dir(v.dir, "vissl.torch"), *err = NULL;
    size_t n0, n1;
    float *before = snapshot(v.be, &v.all, &n0);
    const char *skip[] = {"num_batches_tracked", "layer4", "clf.3"};
    weights_init_options o = weights_init_defaults();
    o.params_file = path;
    o.skip_layers = skip;
    o.n_skip_layers = (int)ARRAY_LEN(skip);
    cr_assert_eq(weights_load(v.be, v.all.e, v.all.n, &o, &err), 0, "%s", err);
    float *after = snapshot(v.be, &v.all, &n1);
    cr_assert_eq(n0, n1);
    size_t at = 0;
    int skipped = 0;
    for (int i = 0; i < v.all.n; i++) {
        size_t n = (size_t)eng_numel(&v.all.e[i].value.shape);
        bool skip_it = strstr(v.all.e[i].name, "layer4") || strstr(v.all.e[i].name, "clf.3");
        bool same = memcmp(before + at, after + at, n * sizeof *before) == 0;
        if (skip_it)
            skipped++;
        cr_expect(skip_it ? same : !same, "%s: %s", v.all.e[i].name, skip_it ? "changed though skipped" : "not loaded");
        at += n;
    }
    cr_expect_eq(skipped, 25 + 2, "resnet18's layer4 has 25 entries, the head's clf.3 2");
    free(before);
    free(after);
    free(path);
    vissl_teardown(&v);
}

Test(weights, remove_and_append_prefix_and_state_dict_key)
{
    vissl_model v;
    vissl_setup(&v);
    char *path = in_dir(v.dir, "prefixed.torch"), *err = NULL;
    weights_init_options o = weights_init_defaults();
    o.params_file = path;
    /* The default key is not in a plain checkpoint: the error names what is there. */
    cr_assert_eq(weights_load(v.be, v.trunk_only.e, v.trunk_only.n, &o, &err), -1);
    cr_expect(strstr(err, "no key 'classy_state_dict'") && strstr(err, "'state_dict', 'epoch'"), "%s", err);
    free(err);
    /* Without REMOVE_PREFIX the DDP prefix stays in the way. */
    o.state_dict_key_name = "state_dict";
    o.append_prefix = TV_PREFIX;
    cr_assert_eq(weights_load(v.be, v.trunk_only.e, v.trunk_only.n, &o, &err), -1);
    cr_expect(strstr(err, "trunk._feature_blocks.module.conv1.weight") && strstr(err, "missing from the file"), "%s",
              err);
    free(err);
    o.remove_prefix = "module.";
    cr_assert_eq(weights_load(v.be, v.trunk_only.e, v.trunk_only.n, &o, &err), 0, "%s", err);
    vissl_check_forward(&v, false, "REMOVE_PREFIX+APPEND_PREFIX");
    free(path);
    vissl_teardown(&v);
}

/* ---- a small model: dtypes, broken and hostile files ------------------------------------------ */

static const struct {
    const char *name;
    int ndim;
    int64_t dim[4];
    eng_entry_kind kind;
} SMALL[] = {
    {"trunk._feature_blocks.conv1.weight", 4, {4, 3, 3, 3}, ENG_PARAM},
    {"trunk._feature_blocks.bn1.weight", 1, {4}, ENG_PARAM},
    {"trunk._feature_blocks.bn1.bias", 1, {4}, ENG_PARAM},
    {"trunk._feature_blocks.bn1.running_mean", 1, {4}, ENG_BUFFER},
    {"trunk._feature_blocks.bn1.running_var", 1, {4}, ENG_BUFFER},
    {"heads.0.clf.0.weight", 2, {2, 4}, ENG_PARAM},
    {"heads.0.clf.0.bias", 1, {2}, ENG_PARAM},
};

typedef struct {
    eng_backend *be;
    eng_params p;
    char *dir;
} small_model;

static void small_setup(small_model *s)
{
    s->dir = fixtures("small");
    s->be = nnt_open_cpu();
    s->p = (eng_params){0};
    for (size_t k = 0; k < ARRAY_LEN(SMALL); k++) {
        eng_shape sh = {.ndim = SMALL[k].ndim};
        memcpy(sh.dim, SMALL[k].dim, sizeof sh.dim);
        eng_params_add(s->be, &s->p, SMALL[k].kind, sh, 0, "%s", SMALL[k].name);
    }
    eng_params_alloc(s->be, &s->p);
    for (int k = 0; k < s->p.nentries; k++)
        eng_zero(s->be, &s->p.entries[k].value);
}

static void small_teardown(small_model *s)
{
    eng_params_free(s->be, &s->p);
    eng_backend_close(s->be);
    test_rm_dir(s->dir);
}

/* Entry k holds k + 0.25·i (loaded) or zeros (untouched). */
static bool small_entry_is(small_model *s, int k, bool loaded)
{
    float *h = nnt_download(s->be, &s->p.entries[k].value);
    bool ok = true;
    for (int64_t i = 0; i < eng_numel(&s->p.entries[k].value.shape); i++)
        ok = ok && h[i] == (loaded ? (float)((double)k + 0.25 * (double)i) : 0.0f);
    free(h);
    return ok;
}

/* Load DIR/file with `o` (params_file set here); returns weights_load's result, *err kept. */
static int small_load(small_model *s, const char *file, weights_init_options o, char **err)
{
    char *path = in_dir(s->dir, file);
    o.params_file = path;
    int rc = weights_load(s->be, s->p.entries, s->p.nentries, &o, err);
    free(path);
    return rc;
}

static weights_init_options flat_options(void)
{
    weights_init_options o = weights_init_defaults();
    o.state_dict_key_name = "";
    return o;
}

/* The file is refused with a message containing `want` (and `also`, when not NULL), and the
 * model is left as it was. */
static void expect_refused(small_model *s, const char *file, weights_init_options o, const char *want,
                           const char *also)
{
    char *err = NULL;
    cr_assert_eq(small_load(s, file, o, &err), -1, "%s was accepted", file);
    cr_assert(err, "%s: no message", file);
    cr_expect(strstr(err, want), "%s: message lacks '%s': %s", file, want, err);
    cr_expect(!also || strstr(err, also), "%s: message lacks '%s': %s", file, also, err);
    for (int k = 0; k < s->p.nentries; k++)
        cr_expect(small_entry_is(s, k, false), "%s: %s changed by a refused load", file, s->p.entries[k].name);
    free(err);
}

Test(weights, small_model_loads_every_float_dtype)
{
    small_model s;
    small_setup(&s);
    char *err = NULL;
    const char *files[] = {"good.pth", "mixed_dtypes.pth"};
    for (size_t f = 0; f < ARRAY_LEN(files); f++) {
        for (int k = 0; k < s.p.nentries; k++)
            eng_zero(s.be, &s.p.entries[k].value);
        cr_assert_eq(small_load(&s, files[f], flat_options(), &err), 0, "%s: %s", files[f], err);
        for (int k = 0; k < s.p.nentries; k++)
            cr_expect(small_entry_is(&s, k, true), "%s: %s", files[f], s.p.entries[k].name);
    }
    /* load_heads = false and SKIP_LAYERS on the same file. */
    for (int k = 0; k < s.p.nentries; k++)
        eng_zero(s.be, &s.p.entries[k].value);
    weights_init_options o = flat_options();
    const char *skip[] = {"num_batches_tracked", "bn1.running"};
    o.load_heads = false;
    o.skip_layers = skip;
    o.n_skip_layers = 2;
    cr_assert_eq(small_load(&s, "good.pth", o, &err), 0, "%s", err);
    for (int k = 0; k < s.p.nentries; k++) {
        bool untouched = k == 3 || k == 4 || k >= 5;
        cr_expect(small_entry_is(&s, k, !untouched), "%s", s.p.entries[k].name);
    }
    small_teardown(&s);
}

Test(weights, broken_files_are_refused_with_clear_messages)
{
    small_model s;
    small_setup(&s);
    weights_init_options flat = flat_options();
    expect_refused(&s, "wrong_shape.pth", flat, "shape mismatches (1)",
                   "trunk._feature_blocks.conv1.weight is [4, 3, 5, 5] in the file, [4, 3, 3, 3] in the model");
    expect_refused(&s, "int64.pth", flat, "not floating point", "trunk._feature_blocks.conv1.weight is I64");
    expect_refused(&s, "missing.pth", flat, "trunk tensors of the model missing from the file (2)",
                   "trunk._feature_blocks.bn1.bias, trunk._feature_blocks.bn1.running_var");
    /* an unexpected trunk key is an error; the unexpected head key only a warning */
    char *err = NULL;
    cr_assert_eq(small_load(&s, "unexpected.pth", flat, &err), -1);
    cr_expect(strstr(err, "trunk keys in the file that the model does not have (1): "
                          "trunk._feature_blocks.layer9.conv.weight"), "%s", err);
    cr_expect(!strstr(err, "clf.9"), "a head key is only a warning: %s", err);
    free(err);
    expect_refused(&s, "torchvision.pth", flat, "not compatible with VISSL",
                   "APPEND_PREFIX 'trunk._feature_blocks.'");
    expect_refused(&s, "good.pth", weights_init_defaults(), "no key 'classy_state_dict'", "STATE_DICT_KEY_NAME");
    expect_refused(&s, "truncated.pth", flat, "truncated.pth", "truncated or damaged zip archive");
    expect_refused(&s, "no_such_file.pth", flat, "no_such_file.pth", "No such file");
    weights_init_options fe = flat;
    fe.feature_extractor = true;
    expect_refused(&s, "good.pth", fe, "trunk.base_model._feature_blocks.", NULL);
    /* With APPEND_PREFIX the torchvision file loads; heads missing from it are a warning. */
    weights_init_options tv = torchvision_options(NULL);
    cr_assert_eq(small_load(&s, "torchvision.pth", tv, &err), 0, "%s", err);
    for (int k = 0; k < s.p.nentries; k++)
        cr_expect(small_entry_is(&s, k, k < 5), "%s", s.p.entries[k].name);
    small_teardown(&s);
}

Test(weights, hostile_pickle_is_refused_by_name_and_never_runs)
{
    small_model s;
    small_setup(&s);
    char *marker = in_dir(s.dir, "pwned");
    weights_init_options o = flat_options();
    expect_refused(&s, "evil.pth", o, "'posix.system' is not allowed", NULL);
    o.state_dict_key_name = "state_dict";
    expect_refused(&s, "evil.pth", o, "'posix.system' is not allowed", NULL);
    cr_expect(!path_exists(marker), "the pickle's os.system ran: %s exists", marker);
    free(marker);
    small_teardown(&s);
}

Test(weights, safetensors_round_trip_and_content_detection)
{
    small_model s;
    small_setup(&s);
    char *err = NULL;
    cr_assert_eq(small_load(&s, "mixed_dtypes.pth", flat_options(), &err), 0, "%s", err);
    /* Saved under a .pth name: the reader goes by content, not extension. */
    char *path = in_dir(s.dir, "saved.pth");
    st_meta meta[] = {{"format", "pt"}};
    cr_assert_eq(weights_save_safetensors(s.be, s.p.entries, s.p.nentries, path, meta, 1, &err), 0, "%s", err);
    st_file *sf;
    cr_assert_eq(st_open(path, &sf, &err), 0, "%s", err);
    cr_expect_eq(st_count(sf), ARRAY_LEN(SMALL));
    const st_tensor *t = st_find(sf, "trunk._feature_blocks.bn1.running_var");
    cr_assert(t && t->dtype == ST_F32 && t->ndim == 1 && t->shape[0] == 4);
    cr_expect_eq(((const float *)t->data)[3], 4.75f);
    cr_expect_str_eq(st_meta_get(sf, "format"), "pt");
    st_close(sf);
    for (int k = 0; k < s.p.nentries; k++)
        eng_zero(s.be, &s.p.entries[k].value);
    /* STATE_DICT_KEY_NAME's default works on selfsup's own (flat) safetensors files. */
    weights_init_options o = weights_init_defaults();
    o.params_file = path;
    cr_assert_eq(weights_load(s.be, s.p.entries, s.p.nentries, &o, &err), 0, "%s", err);
    for (int k = 0; k < s.p.nentries; k++)
        cr_expect(small_entry_is(&s, k, true), "%s", s.p.entries[k].name);
    free(path);
    small_teardown(&s);
}

/* ---- export: safetensors and torch.save read by PyTorch ------------------------------------------ */

/* The entries as one flat OrderedDict in torch.save's format; host copies in *bufs. */
static void save_torch(eng_backend *be, const model_entries *m, const char *path, float ***bufs)
{
    ts_dict *d = ts_dict_new(true);
    size_t shapes[NN_MAX_DIMS * 1024];
    cr_assert_leq(m->n, 1024);
    *bufs = xcalloc((size_t)m->n, sizeof **bufs);
    for (int i = 0; i < m->n; i++) {
        const eng_shape *s = &m->e[i].value.shape;
        for (int k = 0; k < s->ndim; k++)
            shapes[i * NN_MAX_DIMS + k] = (size_t)s->dim[k];
        (*bufs)[i] = nnt_download(be, &m->e[i].value);
        ts_dict_add_tensor(d, m->e[i].name, ST_F32, s->ndim, &shapes[i * NN_MAX_DIMS], (*bufs)[i]);
    }
    char *err = NULL;
    cr_assert_eq(ts_save(path, d, &err), 0, "%s", err);
    ts_dict_free(d);
}

Test(weights, export_is_read_by_pytorch_with_the_same_forward)
{
    char *dir = fixtures("export"), *err = NULL;
    eng_backend *be = nnt_open_cpu();
    resnet *net = make_resnet(be, 18, 1);
    resnet_init_formula(be, net);
    head *h = make_mlp(be, 2);
    head_init_formula(be, h);
    model_entries m = {0};
    add_trunk(&m, net);
    add_head(&m, h, 0);
    char *st_path = in_dir(dir, "model.safetensors"), *pt_path = in_dir(dir, "model.torch");
    cr_assert_eq(weights_save_safetensors(be, m.e, m.n, st_path, NULL, 0, &err), 0, "%s", err);
    float **bufs;
    save_torch(be, &m, pt_path, &bufs);
    run_script("export-check", dir);

    eng_tensor x = upload_npy(be, dir, "x.npy");
    resnet_plan(be, net, &x.shape);
    eng_shape fs = eng_shape2(x.shape.dim[0], 512);
    cr_assert_eq(head_plan(be, h, &fs, NULL), 0);
    const eng_tensor *feat = resnet_forward(be, net, &x, false);
    expect_close(be, feat, dir, "feat_torch.npy", "export trunk");
    expect_close(be, head_forward(be, h, feat, false), dir, "out_torch.npy", "export head");

    /* Both files load back bit-exactly: torchsave through our own torchfile reader. */
    const char *files[] = {pt_path, st_path};
    for (size_t f = 0; f < ARRAY_LEN(files); f++) {
        resnet_init(be, net, 9);
        head_init(be, h, 9);
        weights_init_options o = weights_init_defaults();
        o.params_file = files[f];
        o.state_dict_key_name = f == 0 ? "" : "classy_state_dict";
        cr_assert_eq(weights_load(be, m.e, m.n, &o, &err), 0, "%s", err);
        for (int i = 0; i < m.n; i++) {
            float *now = nnt_download(be, &m.e[i].value);
            cr_expect_eq(memcmp(now, bufs[i], (size_t)eng_numel(&m.e[i].value.shape) * sizeof(float)), 0,
                         "%s: %s differs after the round trip", files[f], m.e[i].name);
            free(now);
        }
    }
    for (int i = 0; i < m.n; i++)
        free(bufs[i]);
    free(bufs);
    eng_tensor_free(be, &x);
    free(st_path);
    free(pt_path);
    free_entries(&m);
    head_free(be, h);
    resnet_free(be, net);
    eng_backend_close(be);
    test_rm_dir(dir);
}

Test(weights, torchsave_writes_what_torchfile_reads)
{
    /* Nested dicts, every storage dtype, a scalar and an empty tensor; no Python needed. */
    char *dir = test_make_tmpdir(), *path = in_dir(dir, "t.torch"), *err = NULL;
    float f[6] = {1, 2, 3, 4, 5, 6};
    int64_t l[2] = {7, -((int64_t)1 << 40)};
    uint16_t half[2] = {0x3c00, 0xc000}; /* 1, -2 */
    size_t s23[] = {2, 3}, s2[] = {2}, s0[] = {0};
    ts_dict *root = ts_dict_new(false);
    ts_dict *sd = ts_dict_add_dict(ts_dict_add_dict(root, "outer", false), "sd", true);
    ts_dict_add_tensor(sd, "w", ST_F32, 2, s23, f);
    ts_dict_add_tensor(sd, "n", ST_I64, 1, s2, l);
    ts_dict_add_tensor(sd, "h", ST_F16, 1, s2, half);
    ts_dict_add_tensor(sd, "scalar", ST_F32, 0, NULL, f + 5);
    ts_dict_add_tensor(sd, "empty", ST_F32, 1, s0, NULL);
    cr_assert_eq(ts_save(path, root, &err), 0, "%s", err);
    ts_dict_add_tensor(sd, "w", ST_F32, 2, s23, f);
    cr_expect_eq(ts_save(path, root, &err), -1);
    cr_expect(strstr(err, "'w' appears twice"), "%s", err);
    free(err);
    ts_dict_free(root);
    root = ts_dict_new(true);
    uint16_t u[2] = {1, 2};
    ts_dict_add_tensor(root, "u", ST_U16, 1, s2, u);
    cr_expect_eq(ts_save(path, root, &err), -1);
    cr_expect(strstr(err, "'u' has dtype U16, which torch has no storage for"), "%s", err);
    free(err);
    ts_dict_free(root);

    torchfile *tf;
    cr_assert_eq(torchfile_open(path, &tf, &err), 0, "%s", err);
    const tf_value *w = tf_lookup(torchfile_root(tf), "outer.sd.w");
    cr_assert(w && w->kind == TF_TENSOR);
    cr_expect(w->u.tensor->dtype == ST_F32 && w->u.tensor->ndim == 2 && w->u.tensor->shape[1] == 3);
    cr_expect_eq(memcmp(w->u.tensor->data, f, sizeof f), 0);
    const tf_value *n = tf_lookup(torchfile_root(tf), "outer.sd.n");
    cr_assert(n && n->kind == TF_TENSOR && n->u.tensor->dtype == ST_I64);
    cr_expect_eq(memcmp(n->u.tensor->data, l, sizeof l), 0);
    const tf_value *sc = tf_lookup(torchfile_root(tf), "outer.sd.scalar");
    cr_assert(sc && sc->kind == TF_TENSOR && sc->u.tensor->ndim == 0 && sc->u.tensor->numel == 1);
    cr_expect_eq(*(const float *)sc->u.tensor->data, 6.0f);
    const tf_value *e = tf_lookup(torchfile_root(tf), "outer.sd.empty");
    cr_assert(e && e->kind == TF_TENSOR && e->u.tensor->numel == 0);
    torchfile_close(tf);

    /* torch agrees, when it is installed (make deps). */
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0) {
        char *out = NULL;
        char *cmd = xasprintf("/usr/bin/python3 -c \"import torch,sys; d=torch.load(sys.argv[1])['outer']['sd']; "
                              "print(type(d).__name__, d['w'].tolist(), d['n'].tolist(), d['h'].dtype, d['h'].tolist(), "
                              "d['scalar'].item(), tuple(d['empty'].shape))\" '%s'",
                              path);
        cr_assert_eq(test_run(cmd, &out), 0, "%s", out);
        cr_expect(strstr(out, "OrderedDict [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]] [7, -1099511627776] torch.float16 "
                              "[1.0, -2.0] 6.0 (0,)"),
                  "%s", out);
        free(out);
        free(cmd);
    }
    free(path);
    test_rm_dir(dir);
}

/* ---- selfsup convert ---------------------------------------------------------------------------- */

static int convert(const char *args, char **out)
{
    char *bin = test_build_path("selfsup");
    cr_assert(path_exists(bin), "%s is not built", bin);
    char *cmd = xasprintf("'%s' convert %s", bin, args);
    int rc = test_run(cmd, out);
    free(cmd);
    free(bin);
    return rc;
}

Test(weights, convert_torchvision_to_vissl_and_back_is_exact, .timeout = 300)
{
    char *dir = fixtures("convert"), *out = NULL, *err = NULL;
    char *args = xasprintf("'%s/tv.pth' '%s/mid.safetensors'", dir, dir);
    cr_assert_eq(convert(args, &out), 0, "%s", out);
    cr_expect(strstr(out, "dropped 2 tensors (fc.weight, fc.bias)"), "%s", out);
    free(out);
    free(args);
    args = xasprintf("'%s/mid.safetensors' '%s/back.torch' --to torchvision", dir, dir);
    cr_assert_eq(convert(args, &out), 0, "%s", out);
    free(out);
    free(args);
    run_script("convert-check", dir);

    /* The VISSL outputs load with WEIGHTS_INIT's defaults: safetensors and a VISSL checkpoint. */
    args = xasprintf("'%s/tv.pth' '%s/vissl.pth' --to vissl --format torch", dir, dir);
    cr_assert_eq(convert(args, &out), 0, "%s", out);
    free(out);
    free(args);
    eng_backend *be = nnt_open_cpu();
    resnet *net = make_resnet(be, 18, 1);
    model_entries m = {0};
    add_trunk(&m, net);
    const char *files[] = {"mid.safetensors", "vissl.pth"};
    for (size_t f = 0; f < ARRAY_LEN(files); f++) {
        char *path = in_dir(dir, files[f]);
        weights_init_options o = weights_init_defaults();
        o.params_file = path;
        cr_expect_eq(weights_load(be, m.e, m.n, &o, &err), 0, "%s: %s", files[f], err);
        free(path);
    }
    free_entries(&m);
    resnet_free(be, net);
    eng_backend_close(be);
    test_rm_dir(dir);
}

/* `got` (a dict of tensors) holds the names of `names_file` (one a line), in that order, each
 * with the bytes `want_of` gives for it (name prefixed with `want_prefix`) in `want` (a dict). */
static void expect_named_tensors(const tf_value *got, const char *names_file, const tf_value *want,
                                 const char *want_prefix)
{
    cr_assert(got && got->kind == TF_DICT && want && want->kind == TF_DICT, "no tensor dict");
    size_t len = 0, k = 0;
    char *names = read_whole_file(names_file, &len), *save = NULL;
    cr_assert(names, "%s", names_file);
    for (char *line = strtok_r(names, "\n", &save); line; line = strtok_r(NULL, "\n", &save), k++) {
        cr_assert_lt(k, got->u.dict.n, "fewer tensors than VISSL's script writes");
        const tf_value *key = got->u.dict.keys[k], *val = got->u.dict.vals[k];
        char *wname = xasprintf("%s%s", want_prefix, line);
        const tf_value *w = tf_dict_get(want, wname);
        cr_expect(key->kind == TF_STR && !strcmp(key->u.str.s, line), "tensor %zu: '%s', the script's '%s'", k,
                  key->kind == TF_STR ? key->u.str.s : "?", line);
        cr_assert(w && val->kind == TF_TENSOR && w->kind == TF_TENSOR, "%s", wname);
        cr_expect(val->u.tensor->dtype == w->u.tensor->dtype && val->u.tensor->nbytes == w->u.tensor->nbytes &&
                      !memcmp(val->u.tensor->data, w->u.tensor->data, w->u.tensor->nbytes),
                  "%s: values differ", line);
        free(wname);
    }
    cr_expect_eq(k, got->u.dict.n, "%zu names, %zu tensors", k, got->u.dict.n);
    free(names);
}

/* Convert fixture IN (under tests/golden/fixtures/KIND) to DIR/OUT with `to` (and any options
 * after it), expecting `log` in the output; the written file, opened. */
static torchfile *convert_kind(const char *kind, const char *in, const char *dir, const char *out_name,
                               const char *to, const char *log)
{
    char *rel = xasprintf("tests/golden/fixtures/%s", kind), *fix = test_path(rel), *out = NULL, *err = NULL;
    free(rel);
    char *args = xasprintf("'%s/%s' '%s/%s' --to %s", fix, in, dir, out_name, to);
    cr_assert_eq(convert(args, &out), 0, "%s", out);
    cr_expect(strstr(out, log), "expected '%s' in:\n%s", log, out);
    char *path = in_dir(dir, out_name);
    torchfile *f;
    cr_assert_eq(torchfile_open(path, &f, &err), 0, "%s", err);
    free(path), free(args), free(out), free(fix);
    return f;
}

static torchfile *convert_fixture(const char *in, const char *dir, const char *out_name, const char *to,
                                  const char *log)
{
    return convert_kind("convert", in, dir, out_name, to, log);
}

static torchfile *open_kind(const char *kind, const char *name, char **path)
{
    char *rel = xasprintf("tests/golden/fixtures/%s", kind), *fix = test_path(rel), *err = NULL;
    free(rel);
    *path = in_dir(fix, name);
    torchfile *f;
    cr_assert_eq(torchfile_open(*path, &f, &err), 0, "%s", err);
    free(fix);
    return f;
}

static torchfile *open_fixture(const char *name, char **path)
{
    return open_kind("convert", name, path);
}

/* --to detectron2 is VISSL's convert_vissl_to_detectron2.py: on make_detectron2_fixtures.py's
 * VISSL checkpoint (a ResNet-50 trunk's names, a head), the script's output, read back here: the
 * same "model" names in the same order (tests/golden/fixtures/convert/d2_rn50_names.txt), each
 * tensor's bytes (the values round-trip), "matching_heuristics" True, the head left out. */
Test(weights, convert_to_detectron2_is_vissls_script, .timeout = 60)
{
    char *dir = test_make_tmpdir(), *out = NULL, *want_path, *names_path;
    torchfile *got = convert_fixture("vissl_rn50.torch", dir, "d2.pkl", "detectron2",
                                     "265 trunk tensors; left out: 53 skipped");
    torchfile *want = open_fixture("d2_rn50.torch", &want_path);
    const tf_value *root = torchfile_root(got), *mh = tf_dict_get(root, "matching_heuristics");
    cr_expect(mh && mh->kind == TF_BOOL && mh->u.b, "matching_heuristics is not True");
    char *fix = test_path("tests/golden/fixtures/convert");
    names_path = in_dir(fix, "d2_rn50_names.txt");
    free(fix);
    expect_named_tensors(tf_dict_get(root, "model"), names_path, tf_dict_get(torchfile_root(want), "model"), "");
    torchfile_close(got), torchfile_close(want);
    free(want_path), free(names_path);
    char *args = xasprintf("'%s/x' '%s/y.safetensors' --to detectron2", dir, dir);
    cr_expect_eq(convert(args, &out), 2, "%s", out);
    cr_expect(strstr(out, "no safetensors"), "%s", out);
    free(out), free(args);
    test_rm_dir(dir);
}

/* --to classy_vision is VISSL's convert_vissl_to_classy_vision.py (make_classy_fixtures.py): the
 * trunk's names as ClassyVision's ResNet-50 names them, in file order, under classy_state_dict's
 * trunk, with the fixture's bytes; no heads. And a ClassyVision checkpoint read back to VISSL is
 * convert_classy_vision_to_vissl_resnet.py's: its names, the original VISSL tensors' bytes. */
Test(weights, convert_to_and_from_classy_vision_is_vissls_scripts, .timeout = 60)
{
    char *dir = test_make_tmpdir(), *want_path, *vissl_path, *names_path, *back_names_path;
    torchfile *got = convert_fixture("vissl_rn50.torch", dir, "classy.torch", "classy_vision",
                                     "a ResNet-50 trunk, 318 tensors; 2 left out");
    torchfile *want = open_fixture("classy_rn50.torch", &want_path);
    const tf_value *classy_model = tf_lookup(torchfile_root(got), "classy_state_dict.base_model.model");
    cr_assert(classy_model, "no classy_state_dict.base_model.model");
    cr_expect_null(tf_dict_get(classy_model, "heads"), "VISSL's script writes no heads without --include_heads");
    char *fix = test_path("tests/golden/fixtures/convert");
    names_path = in_dir(fix, "classy_rn50_names.txt");
    back_names_path = in_dir(fix, "classy_to_vissl_names.txt");
    expect_named_tensors(tf_dict_get(classy_model, "trunk"), names_path,
                         tf_lookup(torchfile_root(want), "classy_state_dict.base_model.model.trunk"), "");
    torchfile *back = convert_fixture("classy_rn50.torch", dir, "back.torch", "vissl", "fc, clf and num_batches_tracked");
    torchfile *vissl = open_fixture("vissl_rn50.torch", &vissl_path);
    expect_named_tensors(tf_lookup(torchfile_root(back), "classy_state_dict.base_model.model.trunk"),
                         back_names_path, tf_lookup(torchfile_root(vissl), "classy_state_dict.base_model.model.trunk"),
                         "");
    torchfile_close(got), torchfile_close(want), torchfile_close(back), torchfile_close(vissl);
    free(want_path), free(vissl_path), free(names_path), free(back_names_path), free(fix);
    test_rm_dir(dir);
}

/* --include-heads with the script's head flags: the trunk as above, and the head under
 * heads.block3-2.default_head as convert_heads_to_classy_model names it (BN included, the
 * num_batches_tracked of the head's BN not asked for). */
Test(weights, convert_to_classy_vision_with_heads_is_vissls_script, .timeout = 60)
{
    char *dir = test_make_tmpdir(), *want_path;
    torchfile *got = convert_fixture("vissl_rn50_heads.torch", dir, "classy.torch",
                                     "classy_vision --include-heads --num-fc-layers 2 --use-bn-head --use-bias-head-fc "
                                     "--output-head-prefix proj",
                                     "8 head tensors under heads.block3-2.default_head");
    torchfile *want = open_fixture("classy_rn50_heads.torch", &want_path);
    char *fix = test_path("tests/golden/fixtures/convert");
    char *trunk_names = in_dir(fix, "classy_rn50_names.txt"), *head_names = in_dir(fix, "classy_rn50_heads_names.txt");
    const char *head_key = "classy_state_dict.base_model.model.heads.block3-2.default_head";
    expect_named_tensors(tf_lookup(torchfile_root(got), "classy_state_dict.base_model.model.trunk"), trunk_names,
                         tf_lookup(torchfile_root(want), "classy_state_dict.base_model.model.trunk"), "");
    expect_named_tensors(tf_lookup(torchfile_root(got), head_key), head_names, tf_lookup(torchfile_root(want), head_key), "");
    torchfile_close(got), torchfile_close(want);
    /* a head the flags ask for but IN lacks: the script's KeyError, as an error naming it */
    char *out = NULL, *args = xasprintf("'%s/vissl_rn50_heads.torch' '%s/x.torch' --to classy_vision --include-heads "
                                        "--num-fc-layers 3", fix, dir);
    cr_expect_eq(convert(args, &out), 1, "%s", out);
    cr_expect(strstr(out, "needs 'heads.2.clf.0.weight'"), "%s", out);
    free(out), free(args), free(want_path), free(fix), free(trunk_names), free(head_names);
    test_rm_dir(dir);
}

/* One Caffe2 case of make_caffe2_fixtures.py: IN converted with `args`, against the script's
 * state dict (WANT.torch, top level or under `want_key`) and its names (WANT_names.txt). */
static void expect_caffe2(const char *in, const char *args, const char *want, const char *want_key, const char *log)
{
    char *dir = test_make_tmpdir(), *want_path, *names_path = NULL;
    bool vissl = strstr(args, "vissl") != NULL;
    torchfile *got = convert_kind("caffe2", in, dir, "out.torch", args, log);
    char *wname = xasprintf("%s.torch", want);
    torchfile *ref = open_kind("caffe2", wname, &want_path);
    char *rel = xasprintf("tests/golden/fixtures/caffe2/%s_names.txt", want);
    names_path = test_path(rel);
    const tf_value *root = torchfile_root(got);
    expect_named_tensors(vissl ? tf_lookup(root, "classy_state_dict.base_model.model.trunk") : root, names_path,
                         want_key ? tf_dict_get(torchfile_root(ref), want_key) : torchfile_root(ref), "");
    torchfile_close(got), torchfile_close(ref);
    free(wname), free(want_path), free(rel), free(names_path);
    test_rm_dir(dir);
}

/* --from caffe2-resnet / caffe2-alexnet are VISSL's two Caffe2 converters: pickles written as
 * Python 2 and Python 3 write them (numpy arrays and scalars, latin-1 byte strings), the
 * script's names in its order and the blobs' bytes, conv1_w's channels reversed by --bgr2rgb,
 * the first tower kept by --jigsaw (and the script's own quirk: names holding s1…s8, which
 * res3…res5 do, are dropped). */
Test(weights, convert_from_caffe2_is_vissls_scripts, .timeout = 60)
{
    expect_caffe2("resnet_py2.pkl", "torchvision --from caffe2-resnet", "resnet_out", NULL,
                  "265 blobs renamed as VISSL's convert_caffe2_to_torchvision_resnet.py");
    expect_caffe2("resnet_py3.pkl", "torchvision --from caffe2-resnet", "resnet_out", NULL, "3 it skips left out");
    expect_caffe2("resnet_jigsaw_py3.pkl", "torchvision --from caffe2-resnet --jigsaw --bgr2rgb",
                  "resnet_jigsaw_bgr_out", NULL, "BGR to RGB");
    expect_caffe2("alexnet_py3.pkl", "vissl --from caffe2-alexnet --jigsaw", "alexnet_jigsaw_out", "model_state_dict",
                  "30 blobs renamed as VISSL's convert_caffe2_to_vissl_alexnet.py");
}

Test(weights, convert_usage_and_runtime_errors)
{
    char *out = NULL, *dir = test_make_tmpdir();
    cr_expect_eq(convert("--help", &out), 0);
    cr_expect(strstr(out, "usage: selfsup convert IN OUT"), "%s", out);
    free(out);
    cr_expect_eq(convert("", &out), 2, "%s", out);
    free(out);
    cr_expect_eq(convert("a.pth b.safetensors --to caffe2", &out), 2, "%s", out);
    cr_expect(strstr(out, "--to 'caffe2'"), "%s", out);
    free(out);
    cr_expect_eq(convert("a.pth b.bin", &out), 2, "%s", out);
    cr_expect(strstr(out, "cannot tell OUT's format"), "%s", out);
    free(out);
    char *args = xasprintf("'%s/none.pth' '%s/out.safetensors'", dir, dir);
    cr_expect_eq(convert(args, &out), 1, "%s", out);
    cr_expect(strstr(out, "none.pth: No such file"), "%s", out);
    free(out);
    free(args);
    char *bin = test_build_path("selfsup");
    char *cmd = xasprintf("'%s' --help", bin);
    cr_expect_eq(test_run(cmd, &out), 0);
    cr_expect(strstr(out, "convert IN OUT"), "selfsup --help does not list convert: %s", out);
    free(out);
    free(cmd);
    free(bin);
    test_rm_dir(dir);
}
