/*
 * loss.c — VISSL's losses on the model engine (see loss.h).
 *
 * SimCLR (both variants): z = L2-normalise(output); S = z·zᵀ; the InfoNCE kernel reads S/T
 * with VISSL's precomputed masks (eng_info_nce) and writes dS; then dz = dS·z + dSᵀ·z (S is
 * z against itself: the linear layer's input and weight gradients) and the L2-normalisation's
 * backward gives d(output). Masks, for R local rows (world size 1):
 *   simclr_info_nce_loss, R = 2B: row r's positive is column (r + B) mod 2B, its negatives
 *     every column but r and that one;
 *   multicrop_simclr_info_nce_loss, R = B·C: row r's positives are (r + d·B) mod (B·C) for
 *     d = 1..C−1, its negatives every other column but r (local only, as VISSL: the own-rank
 *     block); Z = (C−1)·B·C. With C = 2 the two losses are the same (a test checks it).
 * Across W trainers, simclr_info_nce_loss reads every rank's z: Zall = gather_from_all(z)
 * (W·R rows, rank-major), S = z·Zallᵀ, the masks above shifted to the own block's columns
 * (rank·R) and the negatives every column of every rank but the two; backward, dz = dS·Zall
 * plus this rank's rows of Σ_ranks dSᵀ·z (VISSL's GatherLayer: the gathered rows' gradients
 * all-reduced, each rank keeping its own). Multi-crop SimCLR gathers too in VISSL, but its
 * masks give other ranks' columns neither role, so they add nothing to its value or gradient:
 * it computes on its own rows alone, the result VISSL's gives.
 * Cross-entropy and BCE run per output (each optionally L2-normalised first) and add up.
 * SwAV is in loss_swav.c, MoCo in loss_moco.c, NPID's and PIRL's NCE in loss_nce.c, DeepClusterV2
 * in loss_dc.c.
 */
#include "train/loss_internal.h"

#include "decode/dataset.h"
#include "log.h"
#include "train/momentum.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const NAMES[] = {
    [LOSS_CROSS_ENTROPY] = "CrossEntropyLoss",
    [LOSS_CE_MULTI_OUTPUT] = "cross_entropy_multiple_output_single_target",
    [LOSS_BCE_MULTI_OUTPUT] = "bce_logits_multiple_output_single_target",
    [LOSS_SIMCLR] = "simclr_info_nce_loss",
    [LOSS_MULTICROP_SIMCLR] = "multicrop_simclr_info_nce_loss",
    [LOSS_SWAV] = "swav_loss",
    [LOSS_MOCO] = "moco_loss",
    [LOSS_NCE] = "nce_loss_with_memory",
    [LOSS_SWAV_MOMENTUM] = "swav_momentum_loss",
    [LOSS_DEEPCLUSTER_V2] = "deepclusterv2_loss",
};

const char *loss_display_name(loss_name name) { return NAMES[name]; }

/* ---- config ------------------------------------------------------------------------------- */

static bool read_weight(const cfg_node *config, const char *key, loss_options *o, cfg_err *err)
{
    const cfg_node *w = cfg_get(config, key + strlen("config."));
    if (w->kind == CFG_NULL)
        return true;
    if (w->kind != CFG_LIST || w->len < 1 || w->len > LOSS_MAX_CLASS_WEIGHTS) {
        cfg_fail(err, w, key, "must be null or a list of 1 to %d class weights", LOSS_MAX_CLASS_WEIGHTS);
        return false;
    }
    for (size_t i = 0; i < w->len; i++) {
        if (!cfg_is_number(w->items[i])) {
            cfg_fail(err, w->items[i], key, "must be a list of numbers");
            return false;
        }
        o->weight[i] = (float)cfg_number(w->items[i]);
    }
    o->nweight = (int)w->len;
    return true;
}

/* LOSS.<name>.buffer_params of the SimCLR losses. */
static bool read_buffer_params(const cfg_node *config, const char *name, loss_options *o, cfg_err *err)
{
    char *key = xasprintf("config.LOSS.%s", name);
    const cfg_node *l = cfg_get(config, key + strlen("config."));
    o->temperature = cfg_float(l, "temperature");
    o->embedding_dim = cfg_int(l, "buffer_params.embedding_dim");
    o->effective_batch_size = cfg_int(l, "buffer_params.effective_batch_size");
    o->world_size = (int)cfg_int(l, "buffer_params.world_size");
    bool ok = o->world_size >= 1;
    if (!ok)
        cfg_fail(err, cfg_get(l, "buffer_params.world_size"), key, "world size %d: must be ≥ 1",
                 o->world_size);
    free(key);
    return ok;
}

bool loss_options_from_config(const cfg_node *config, loss_options *out, cfg_err *err)
{
    loss_options o = {.temperature = 1.0, .ignore_index = -1, .world_size = 1, .num_crops = 2};
    const char *name = cfg_str(config, "LOSS.name");
    int found = -1;
    for (int i = 0; i < (int)ARRAY_LEN(NAMES); i++)
        if (!strcmp(NAMES[i], name))
            found = i;
    if (found < 0) {
        cfg_fail(err, cfg_get(config, "LOSS.name"), "config.LOSS.name",
                 "'%s' is not run by this trainer yet (CrossEntropyLoss, cross_entropy_multiple_output_single_target, "
                 "bce_logits_multiple_output_single_target, simclr_info_nce_loss, multicrop_simclr_info_nce_loss, "
                 "swav_loss, swav_momentum_loss, moco_loss, nce_loss_with_memory, deepclusterv2_loss)",
                 name);
        return false;
    }
    o.name = (loss_name)found;
    bool ok = true;
    switch (o.name) {
    case LOSS_CROSS_ENTROPY: o.ignore_index = cfg_int(config, "LOSS.CrossEntropyLoss.ignore_index"); break;
    case LOSS_CE_MULTI_OUTPUT:
        o.ignore_index = cfg_int(config, "LOSS.cross_entropy_multiple_output_single_target.ignore_index");
        o.normalize_output = cfg_bool(config, "LOSS.cross_entropy_multiple_output_single_target.normalize_output");
        o.temperature = cfg_float(config, "LOSS.cross_entropy_multiple_output_single_target.temperature");
        ok = read_weight(config, "config.LOSS.cross_entropy_multiple_output_single_target.weight", &o, err);
        break;
    case LOSS_BCE_MULTI_OUTPUT:
        o.normalize_output = cfg_bool(config, "LOSS.bce_logits_multiple_output_single_target.normalize_output");
        break;
    case LOSS_SIMCLR: ok = read_buffer_params(config, name, &o, err); break;
    case LOSS_MULTICROP_SIMCLR:
        ok = read_buffer_params(config, name, &o, err);
        o.num_crops = (int)cfg_int(config, "LOSS.multicrop_simclr_info_nce_loss.num_crops");
        break;
    case LOSS_SWAV:
    case LOSS_SWAV_MOMENTUM: ok = swav_options_from_config(config, &o, err); break;
    case LOSS_MOCO: ok = moco_options_from_config(config, &o, err); break;
    case LOSS_NCE: ok = nce_options_from_config(config, &o, err); break;
    case LOSS_DEEPCLUSTER_V2: ok = dc_options_from_config(config, &o, err); break;
    }
    if (ok)
        *out = o;
    return ok;
}

bool loss_train_samples(const cfg_node *config, const cfg_node *node, const char *key, const char *what,
                        int64_t most, int64_t *out, cfg_err *err)
{
    int64_t n = cfg_int(node, "num_train_samples");
    const cfg_node *at = cfg_get(node, "num_train_samples");
    decode_dataset ds;
    char *why = NULL;
    int64_t length = decode_dataset_load(&ds, config, "TRAIN", NULL, &why) == 0 ? (int64_t)ds.length : -1;
    if (length >= 0)
        decode_dataset_free(&ds);
    bool ok = false;
    if (n < 1 && length < 0)
        cfg_fail(err, at, key, "is not set and the training set cannot be read to count it: %s",
                 why ? why : "no DATA.TRAIN");
    else if (n < 1 && length == 0)
        cfg_fail(err, at, key, "is not set and the training set is empty");
    else if (n < 1)
        n = length, ok = true;
    else if (length > n)
        cfg_fail(err, at, key, "%lld: %s for each of the %lld training samples", (long long)n, what, (long long)length);
    else
        ok = true;
    free(why);
    if (ok && most > 0 && n > most) {
        cfg_fail(err, at, key, "%lld: at most %lld samples (the checkpoint keeps sample indices as float32)",
                 (long long)n, (long long)most);
        ok = false;
    }
    *out = n;
    return ok;
}

/* ---- planning ----------------------------------------------------------------------------- */

static bool is_simclr(const loss *l) { return l->o.name == LOSS_SIMCLR || l->o.name == LOSS_MULTICROP_SIMCLR; }
static bool is_swav(const loss_options *o) { return o->name == LOSS_SWAV || o->name == LOSS_SWAV_MOMENTUM; }

/* The 0/1 masks of loss.c's top comment, for R rows in groups of `per` (B) against `cols`
 * columns whose own block starts at `own` (rank·R; 0 and R for one trainer). */
static void make_masks(eng_backend *be, loss *l, int64_t r, int64_t per, int64_t cols, int64_t own)
{
    float *pos = xcalloc((size_t)(r * cols), sizeof *pos), *neg = xmalloc((size_t)(r * cols) * sizeof *neg);
    int64_t crops = r / per;
    for (int64_t i = 0; i < r; i++) {
        for (int64_t j = 0; j < cols; j++)
            neg[i * cols + j] = j != own + i;
        for (int64_t d = 1; d < crops; d++) {
            int64_t j = own + (i + d * per) % r;
            pos[i * cols + j] = 1.0f;
            neg[i * cols + j] = 0.0f;
        }
    }
    l->pos = eng_tensor_new(be, eng_shape2(r, cols));
    l->neg = eng_tensor_new(be, eng_shape2(r, cols));
    eng_upload(be, &l->pos, pos);
    eng_upload(be, &l->neg, neg);
    free(pos);
    free(neg);
}

/* The run's trainers (NULL: one; a stateless loss planned without a state is on its own). */
static dist *world_of(const loss *l) { return l->st ? l->st->world : NULL; }

/* simclr_info_nce_loss among several trainers: it reads every rank's embeddings. */
static bool gathers(const loss *l) { return l->o.name == LOSS_SIMCLR && dist_world(world_of(l)) > 1; }

static int plan_simclr(eng_backend *be, loss *l, char **err)
{
    const loss_options *o = &l->o;
    int world = dist_world(world_of(l));
    if (o->world_size != world)
        return report_failure(err, "%s: buffer_params.world_size is %d, but the run has %d trainer%s",
                              NAMES[o->name], o->world_size, world, world == 1 ? "" : "s");
    if (l->n != 1 || l->shape[0].ndim != 2)
        return report_failure(err, "%s: takes one output of rows × embedding (the model has %d)",
                              NAMES[o->name], l->n);
    int64_t r = l->shape[0].dim[0], d = l->shape[0].dim[1];
    if (d != o->embedding_dim)
        return report_failure(err, "%s: the head gives %lld-wide embeddings, buffer_params.embedding_dim is %lld",
                              NAMES[o->name], (long long)d, (long long)o->embedding_dim);
    int64_t crops = o->name == LOSS_SIMCLR ? 2 : o->num_crops;
    int64_t rows = o->name == LOSS_SIMCLR ? o->effective_batch_size / o->world_size
                                          : o->effective_batch_size / o->world_size * crops;
    if (crops < 2 || r % crops || r != rows)
        return report_failure(err,
                              "%s: %lld rows do not match %lld crops of the configured batch (effective_batch_size "
                              "%lld, world size %d)",
                              NAMES[o->name], (long long)r, (long long)crops, (long long)o->effective_batch_size,
                              o->world_size);
    l->z = eng_tensor_new(be, l->shape[0]);
    l->dz = eng_tensor_new(be, l->shape[0]);
    int64_t cols = gathers(l) ? r * world : r;
    if (gathers(l)) {
        l->zall = eng_tensor_new(be, eng_shape2(cols, d));
        l->dzall = eng_tensor_new(be, eng_shape2(cols, d));
    }
    l->sim = eng_tensor_new(be, eng_shape2(r, cols));
    l->dsim = eng_tensor_new(be, eng_shape2(r, cols));
    make_masks(be, l, r, r / crops, cols, gathers(l) ? r * dist_rank(world_of(l)) : 0);
    return 0;
}

static int plan_per_output(eng_backend *be, loss *l, char **err)
{
    if (l->o.name == LOSS_CROSS_ENTROPY && l->n != 1)
        return report_failure(err, "CrossEntropyLoss: takes one output (the model has %d; "
                                   "cross_entropy_multiple_output_single_target takes several)", l->n);
    for (int k = 0; k < l->n; k++) {
        if (l->shape[k].ndim != 2)
            return report_failure(err, "%s: output %d must be rows × classes", NAMES[l->o.name], k);
        if (l->o.nweight && l->o.nweight != l->shape[k].dim[1])
            return report_failure(err, "%s: %d class weights for output %d of %lld classes", NAMES[l->o.name],
                                  l->o.nweight, k, (long long)l->shape[k].dim[1]);
        if (l->o.normalize_output) {
            l->normed[k] = eng_tensor_new(be, l->shape[k]);
            l->dnormed[k] = eng_tensor_new(be, l->shape[k]);
        }
    }
    return 0;
}

loss *loss_new(eng_backend *be, const loss_options *o, loss_state *st, const eng_shape *outputs, int n, char **err)
{
    if (n < 1 || n > LOSS_MAX_OUTPUTS) {
        report_failure(err, "%s: %d model outputs (1 to %d)", NAMES[o->name], n, LOSS_MAX_OUTPUTS);
        return NULL;
    }
    loss *l = xcalloc(1, sizeof *l);
    l->o = *o;
    l->st = st;
    l->n = n;
    for (int k = 0; k < n; k++) {
        l->shape[k] = outputs[k];
        l->dout[k] = eng_tensor_new(be, outputs[k]);
    }
    int rc = is_simclr(l)               ? plan_simclr(be, l, err)
             : is_swav(o)               ? swav_plan(be, l, err)
             : o->name == LOSS_MOCO     ? moco_plan(be, l, err)
             : o->name == LOSS_NCE      ? nce_plan(be, l, err)
             : o->name == LOSS_DEEPCLUSTER_V2 ? dc_plan(be, l, err)
                                        : plan_per_output(be, l, err);
    if (rc != 0) {
        loss_free(be, l);
        return NULL;
    }
    return l;
}

void loss_free(eng_backend *be, loss *l)
{
    if (!l)
        return;
    eng_tensor *own[] = {&l->z, &l->dz, &l->sim, &l->dsim, &l->pos, &l->neg, &l->zall, &l->dzall};
    for (size_t i = 0; i < ARRAY_LEN(own); i++)
        if (own[i]->base)
            eng_tensor_free(be, own[i]);
    for (int k = 0; k < l->n; k++) {
        eng_tensor_free(be, &l->dout[k]);
        if (l->normed[k].base) {
            eng_tensor_free(be, &l->normed[k]);
            eng_tensor_free(be, &l->dnormed[k]);
        }
    }
    for (int h = 0; h < LOSS_MAX_PROTOTYPES; h++)
        if (l->codes[h].base)
            eng_tensor_free(be, &l->codes[h]);
    nce_free(be, l);
    dc_free(be, l);
    free(l);
}

const eng_tensor *loss_grad(const loss *l, int k) { return &l->dout[k]; }

/* ---- state and hooks ---------------------------------------------------------------------- */

loss_state *loss_state_new(eng_backend *be, const loss_options *o, uint64_t seed, dist *world)
{
    loss_state *s = xcalloc(1, sizeof *s);
    s->o = *o;
    s->seed = seed;
    s->world = world;
    if (is_swav(o))
        swav_state_init(be, s, seed);
    if (o->name == LOSS_NCE)
        nce_state_init(be, s);
    if (o->name == LOSS_DEEPCLUSTER_V2)
        dc_state_init(be, s);
    return s;
}

int loss_state_attach(eng_backend *be, loss_state *s, const struct model *m, char **err)
{
    if (s->o.name == LOSS_SWAV_MOMENTUM)
        return swav_momentum_attach(be, s, m, err);
    return s->o.name == LOSS_MOCO ? moco_attach(be, s, m, err) : 0;
}

int loss_state_loaded(eng_backend *be, loss_state *s, char **err)
{
    if (s->momentum)
        momentum_loaded(s->momentum);
    if (s->o.name == LOSS_DEEPCLUSTER_V2)
        return dc_loaded(be, s, err);
    return s->o.name == LOSS_MOCO ? moco_loaded(be, s, err) : s->o.name == LOSS_NCE ? nce_loaded(be, s, err) : 0;
}

eng_entry *loss_state_add_entry(loss_state *s, const char *name, eng_entry_kind kind)
{
    if (s->nentries == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        s->entries = xrealloc(s->entries, (size_t)s->cap * sizeof *s->entries);
    }
    eng_entry *e = &s->entries[s->nentries++];
    *e = (eng_entry){.name = xstrdup(name), .kind = kind};
    return e;
}

void loss_normalize_rows(float *v, int64_t rows, int64_t d)
{
    for (int64_t i = 0; i < rows; i++) {
        double norm = 0.0;
        for (int64_t j = 0; j < d; j++)
            norm += (double)v[i * d + j] * v[i * d + j];
        for (int64_t j = 0; j < d; j++)
            v[i * d + j] = (float)(v[i * d + j] / fmax(sqrt(norm), 1e-12));
    }
}

void loss_state_rank_prefix(const loss_state *s, char out[24])
{
    out[0] = '\0';
    if (dist_rank(s->world) > 0)
        snprintf(out, 24, "rank%d.", dist_rank(s->world));
}

void loss_state_free(eng_backend *be, loss_state *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->nentries; i++) {
        if (i < s->nowned)
            eng_tensor_free(be, &s->entries[i].value);
        free((char *)s->entries[i].name);
    }
    if (s->moco)
        moco_state_free(be, s);
    momentum_free(be, s->momentum);
    dc_state_free(s);
    free(s->entries);
    free(s);
}

int loss_state_entries(const loss_state *s, const eng_entry **entries)
{
    *entries = s->entries;
    return s->nentries;
}

int loss_state_rank_entries(const loss_state *s, const eng_entry **entries)
{
    *entries = s->entries;
    return s->nentries - s->nshared;
}

int64_t loss_state_iterations(const loss_state *s) { return s->iterations; }
void loss_state_set_iterations(loss_state *s, int64_t n) { s->iterations = n; }

int loss_on_forward(eng_backend *be, loss_state *s, struct model *m, const rec_view *batch, char **err)
{
    if (s->o.name == LOSS_MOCO)
        return moco_on_forward(be, s, m, batch, err);
    if (s->o.name == LOSS_SWAV_MOMENTUM)
        return swav_momentum_on_forward(be, s, m, batch, err);
    return s->o.name == LOSS_SWAV ? swav_on_forward(be, s, m, err) : 0;
}

int loss_on_update(eng_backend *be, loss_state *s, struct model *m, char **err)
{
    return is_swav(&s->o) ? swav_on_update(be, s, m, err) : 0;
}

int loss_on_phase_start(eng_backend *be, loss_state *s, int64_t epoch, char **err)
{
    return s->dc ? dc_on_phase_start(be, s, epoch, err) : 0;
}

void loss_state_resume_at(loss_state *s, int64_t batch_in_epoch)
{
    if (s->dc)
        dc_resume_at(s, batch_in_epoch);
}

int loss_memory_crops(const loss_state *s, const int **crops)
{
    *crops = NULL;
    return s->dc ? dc_memory_crops(s, crops) : 0;
}

int loss_memory_fill(eng_backend *be, loss_state *s, int bank, const eng_tensor *out, char **err)
{
    return dc_memory_fill(be, s, bank, out, err);
}

void loss_memory_advance(eng_backend *be, loss_state *s, const int64_t *samples, int64_t b)
{
    dc_memory_advance(be, s, samples, b);
}

/* ---- computing ---------------------------------------------------------------------------- */

/* S = z·Zallᵀ over every rank's embeddings, and dz from both of z's roles (loss.c's top). */
static int simclr_gathered(eng_backend *be, loss *l, double *value, char **err)
{
    dist *world = world_of(l);
    if (dist_all_gather(world, be, &l->z, &l->zall, err) != 0)
        return -1;
    eng_linear_forward(be, &l->z, &l->zall, NULL, &l->sim);
    *value = eng_info_nce(be, &l->sim, (float)(1.0 / l->o.temperature), &l->pos, &l->neg, &l->dsim);
    eng_zero(be, &l->dz);
    eng_zero(be, &l->dzall);
    eng_linear_backward(be, &l->z, &l->zall, &l->dsim, &l->dz, &l->dzall, NULL);
    if (dist_sum(world, be, &l->dzall, err) != 0)
        return -1;
    int64_t r = l->z.shape.dim[0];
    eng_tensor mine = eng_rows(be, &l->dzall, r * dist_rank(world), r);
    eng_add_backward(be, &mine, &l->dz, NULL);
    return 0;
}

static int simclr(eng_backend *be, loss *l, const eng_tensor *out, double *value, char **err)
{
    eng_l2norm_forward(be, out, &l->z);
    if (gathers(l)) {
        if (simclr_gathered(be, l, value, err) != 0)
            return -1;
    } else {
        eng_linear_forward(be, &l->z, &l->z, NULL, &l->sim);
        *value = eng_info_nce(be, &l->sim, (float)(1.0 / l->o.temperature), &l->pos, &l->neg, &l->dsim);
        eng_zero(be, &l->dz);
        eng_linear_backward(be, &l->z, &l->z, &l->dsim, &l->dz, &l->dz, NULL);
    }
    eng_zero(be, &l->dout[0]);
    eng_l2norm_backward(be, out, &l->dz, &l->dout[0]);
    return 0;
}

/* Output k as the loss reads it: itself, or L2-normalised (normalize_output). */
static const eng_tensor *input_of(eng_backend *be, loss *l, int k, const eng_tensor *out)
{
    if (!l->o.normalize_output)
        return out;
    eng_l2norm_forward(be, out, &l->normed[k]);
    return &l->normed[k];
}

/* The gradient written for the loss's input, carried back through the normalisation. */
static void finish_grad(eng_backend *be, loss *l, int k, const eng_tensor *out)
{
    if (!l->o.normalize_output)
        return;
    eng_zero(be, &l->dout[k]);
    eng_l2norm_backward(be, out, &l->dnormed[k], &l->dout[k]);
}

static int check_labels(const loss *l, const loss_batch *b, int64_t rows, int64_t cols, char **err)
{
    if (b->batch != rows || !b->label)
        return report_failure(err, "%s: %lld labels for %lld output rows", NAMES[l->o.name], (long long)b->batch,
                              (long long)rows);
    if (l->o.name == LOSS_BCE_MULTI_OUTPUT) {
        if (b->label_cols != cols)
            return report_failure(err, "%s: labels of %d columns for %lld classes", NAMES[l->o.name], b->label_cols,
                                  (long long)cols);
        return 0;
    }
    for (int64_t i = 0; i < rows; i++) /* VISSL asserts target.max() < C */
        if (b->label[i] != l->o.ignore_index && (b->label[i] < 0 || b->label[i] >= cols))
            return report_failure(err, "%s: label %lld of sample %lld is not one of the %lld classes",
                                  NAMES[l->o.name], (long long)b->label[i], (long long)i, (long long)cols);
    return 0;
}

static int per_output(eng_backend *be, loss *l, const eng_tensor *const *outputs, const loss_batch *b, double *value,
                      char **err)
{
    double total = 0.0;
    for (int k = 0; k < l->n; k++) {
        if (check_labels(l, b, l->shape[k].dim[0], l->shape[k].dim[1], err) != 0)
            return -1;
        const eng_tensor *x = input_of(be, l, k, outputs[k]);
        const eng_tensor *dx = l->o.normalize_output ? &l->dnormed[k] : &l->dout[k];
        if (l->o.name == LOSS_BCE_MULTI_OUTPUT)
            total += eng_bce_logits(be, x, b->label, dx);
        else
            total += eng_cross_entropy(be, x, (float)(1.0 / l->o.temperature), b->label,
                                       l->o.nweight ? l->o.weight : NULL, l->o.ignore_index, dx);
        finish_grad(be, l, k, outputs[k]);
    }
    *value = total;
    return 0;
}

int loss_compute(eng_backend *be, loss *l, const eng_tensor *const *outputs, const loss_batch *b, double *value,
                 char **err)
{
    for (int k = 0; k < l->n; k++)
        if (!eng_shape_equal(&outputs[k]->shape, &l->shape[k]))
            return report_failure(err, "%s: output %d is not the shape the loss was planned for", NAMES[l->o.name],
                                  k);
    if (is_simclr(l))
        return simclr(be, l, outputs[0], value, err);
    if (is_swav(&l->o))
        return swav_compute(be, l, outputs, value, err);
    if (l->o.name == LOSS_MOCO)
        return moco_compute(be, l, outputs, value, err);
    if (l->o.name == LOSS_NCE)
        return nce_compute(be, l, outputs, b, value, err);
    if (l->o.name == LOSS_DEEPCLUSTER_V2)
        return dc_compute(be, l, outputs[0], b, value, err);
    return per_output(be, l, outputs, b, value, err);
}
