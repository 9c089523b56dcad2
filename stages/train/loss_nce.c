/*
 * loss_nce.c — VISSL's nce_loss_with_memory (NCELossWithMemory, NCEAverage and NCECriterion,
 * vissl/losses/nce_loss.py): NPID, NPID++ and PIRL's loss against a memory bank.
 *
 * The memory holds one row per training sample (num_train_samples × D; U(−s, s) with
 * s = 1/√(D/3), then L2-normalised with norm_init). For each model output k (PIRL has two) the
 * batch's embeddings e (L2-normalised with norm_embedding) are scored against K + 1 memory rows
 * each: their own sample's (the target: LABEL_TYPE sample_index) and K negatives drawn
 * uniformly over the memory, s[i, j] = memory[idx[i, j]] · e[i] (eng_bank_scores). Then, with
 * T and the momentum as VISSL keeps them (float32, in its `params` buffer):
 *   nce:           x = exp(s / T) / Z, Z = mean(x of the first batch) · N, fixed from then on
 *                  (stored in params: the checkpoint keeps it); NCECriterion with Pn = 1/N,
 *                  c = K·Pn + float32 eps: loss = −(Σ_i log(x_i0 / (x_i0 + c)) +
 *                  Σ_{i, j≥1} log(K·Pn / (x_ij + c))) / B;
 *   cross_entropy: CE(s / T, class 0), the mean over the batch (InfoNCE).
 * The loss is Σ_k loss_weights[k] · loss_k. Its value and d/ds are worked on the host in
 * double from the downloaded scores (B × (K + 1) floats; Z needs them there once anyway); the
 * gradient goes back through the bank (a constant of the step: VISSL's detached rows) into e.
 * After output k's backward, when update_mem_on_forward or k is update_mem_with_emb_index,
 * every rank's embeddings replace their samples' rows: memory[y] = normalize(memory[y]·m +
 * e·(1 − m)) (eng_ema's rounding, torch's mul_ then add_).
 *
 * The negatives. VISSL draws them with torch's generator through its AliasMethod (uniform:
 * every prob is 1, so a draw is torch.randint); selfsup draws each batch row's K from its own
 * counter-based stream, keyed by the loss's forward count and the row's place in the global
 * batch (rank · B + i), so the draws do not depend on how the batch is split over trainers
 * and a resumed run draws what the uninterrupted one did. (VISSL's ranks, seeded alike, draw
 * the same indices on every rank.) Several trainers: Z's batch mean is the mean of the ranks'
 * means, and the memory update gathers every rank's embeddings and targets, as VISSL's; the
 * memory starts the same on every rank (one seed), which VISSL's sync_memory makes sure of.
 * Rows whose target is ignore_index are refused, not dropped: NPID's targets are sample
 * indices, which are never −1.
 */
#include "train/loss_internal.h"

#include "rng.h"
#include "util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCE_STREAM 2 /* transform_pos of the negatives' streams (MoCo's shuffle is 1) */

struct nce_host {
    int64_t k1;            /* K + 1 scores per row */
    int64_t *idx;          /* B × (K + 1): each row's own sample, then its negatives */
    float *s, *ds;         /* the scores and their gradient on the host */
    eng_tensor scores, dscores;
    eng_tensor e_all, rows, rows_n; /* the memory update: every rank's e, their rows, normalised */
};

/* ---- config ------------------------------------------------------------------------------- */

static bool read_weights(const cfg_node *l, nce_options *n, cfg_err *err)
{
    const cfg_node *w = cfg_get(l, "loss_weights");
    bool ok = w->kind == CFG_LIST && w->len >= 1 && w->len <= LOSS_MAX_NCE_OUTPUTS;
    for (size_t i = 0; ok && i < w->len; i++)
        if ((ok = cfg_is_number(w->items[i])))
            n->loss_weights[i] = cfg_number(w->items[i]);
    if (!ok)
        cfg_fail(err, w, "config.LOSS.nce_loss_with_memory.loss_weights", "must be a list of 1 to %d numbers",
                 LOSS_MAX_NCE_OUTPUTS);
    n->nweights = ok ? (int)w->len : 0;
    return ok;
}

static const char *bad_value(const loss_options *o, const char *type, const char *sampling)
{
    const nce_options *n = &o->nce;
    return strcmp(type, "nce") && strcmp(type, "cross_entropy") ? "loss_type must be nce or cross_entropy"
           : strcmp(sampling, "random") && strcmp(sampling, "debug")
               ? "negative_sampling_params.type must be random or debug"
           : !(o->temperature > 0.0)                    ? "temperature must be > 0"
           : n->num_negatives < 1                       ? "negative_sampling_params.num_negatives must be ≥ 1"
           : o->embedding_dim < 1                       ? "memory_params.embedding_dim must be ≥ 1"
           : !(n->momentum >= 0.0 && n->momentum <= 1.0) ? "memory_params.momentum must be in [0, 1]"
           : !n->update_mem_on_forward && n->update_mem_with_emb_index < 0
               ? "update_mem_with_emb_index must name an output when memory_params.update_mem_on_forward is False"
               : NULL;
}

bool nce_options_from_config(const cfg_node *config, loss_options *o, cfg_err *err)
{
    const cfg_node *l = cfg_get(config, "LOSS.nce_loss_with_memory");
    nce_options *n = &o->nce;
    const char *type = cfg_str(l, "loss_type"), *sampling = cfg_str(l, "negative_sampling_params.type");
    n->cross_entropy = !strcmp(type, "cross_entropy");
    o->temperature = cfg_float(l, "temperature");
    o->embedding_dim = cfg_int(l, "memory_params.embedding_dim");
    n->norm_embedding = cfg_bool(l, "norm_embedding");
    n->norm_constant = cfg_float(l, "norm_constant");
    n->update_mem_with_emb_index = cfg_int(l, "update_mem_with_emb_index");
    n->num_negatives = cfg_int(l, "negative_sampling_params.num_negatives");
    n->momentum = cfg_float(l, "memory_params.momentum");
    n->norm_init = cfg_bool(l, "memory_params.norm_init");
    n->update_mem_on_forward = cfg_bool(l, "memory_params.update_mem_on_forward");
    n->ignore_index = cfg_int(l, "ignore_index");
    const char *bad = bad_value(o, type, sampling);
    if (bad) {
        cfg_fail(err, l, "config.LOSS.nce_loss_with_memory", "%s", bad);
        return false;
    }
    if (strcmp(cfg_str(config, "DATA.TRAIN.LABEL_TYPE"), "sample_index")) {
        cfg_fail(err, cfg_get(config, "DATA.TRAIN.LABEL_TYPE"), "config.DATA.TRAIN.LABEL_TYPE",
                 "is '%s', but nce_loss_with_memory keeps a memory row per sample and reads the sample index as "
                 "its target: set it to sample_index", cfg_str(config, "DATA.TRAIN.LABEL_TYPE"));
        return false;
    }
    return read_weights(l, n, err) &&
           loss_train_samples(config, l, "config.LOSS.nce_loss_with_memory.num_train_samples",
                              "the memory bank needs a row", 0, &n->memory_size, err);
}

/* ---- state -------------------------------------------------------------------------------- */

/* T and the momentum as VISSL reads them back from its float32 params buffer. */
static double as_float(double v) { return (double)(float)v; }

/* VISSL's params buffer [K, T, Z, momentum] (entry 1) from the state's values. */
static void upload_params(eng_backend *be, const loss_state *s)
{
    const nce_options *n = &s->o.nce;
    float p[4] = {(float)n->num_negatives, (float)s->o.temperature, (float)s->z, (float)n->momentum};
    eng_upload(be, &s->entries[1].value, p);
}

void nce_state_init(eng_backend *be, loss_state *s)
{
    const nce_options *n = &s->o.nce;
    int64_t rows = n->memory_size, d = s->o.embedding_dim;
    double half = 1.0 / sqrt((double)d / 3.0);
    rng_stream r;
    rng_stream_init(&r, (rng_key){.seed = s->seed, .purpose = RNG_PURPOSE_DATASET, .sample_index = 2});
    float *v = xmalloc_large((size_t)(rows * d) * sizeof *v);
    for (int64_t i = 0; i < rows * d; i++)
        v[i] = (float)rng_uniform_range(&r, -half, half);
    if (n->norm_init)
        loss_normalize_rows(v, rows, d);
    char rank[24], name[96];
    loss_state_rank_prefix(s, rank);
    snprintf(name, sizeof name, "%sloss.nce_average.memory", rank);
    eng_entry *memory = loss_state_add_entry(s, name, ENG_BUFFER);
    memory->value = eng_tensor_new(be, eng_shape2(rows, d));
    eng_upload(be, &memory->value, v);
    free(v);
    snprintf(name, sizeof name, "%sloss.nce_average.params", rank);
    eng_entry *params = loss_state_add_entry(s, name, ENG_BUFFER);
    params->value = eng_tensor_new(be, eng_shape2(1, 4));
    s->z = as_float(n->norm_constant);
    upload_params(be, s);
    s->nowned = s->nentries;
}

int nce_loaded(eng_backend *be, loss_state *s, char **err)
{
    float p[4];
    eng_download(be, &s->entries[1].value, p);
    if (!(p[2] > 0.0f) && !(p[2] < 0.0f))
        return report_failure(err, "the checkpoint's loss.nce_average.params holds Z = %g", (double)p[2]);
    s->z = p[2];
    return 0;
}

/* ---- planning ----------------------------------------------------------------------------- */

int nce_plan(eng_backend *be, loss *l, char **err)
{
    const nce_options *n = &l->o.nce;
    if (!l->st || l->st->nentries < 2)
        return report_failure(err, "nce_loss_with_memory: planned without its memory bank");
    if (l->n > n->nweights)
        return report_failure(err, "nce_loss_with_memory: the model has %d outputs but loss_weights only %d", l->n,
                              n->nweights);
    int64_t b = l->shape[0].dim[0], d = l->o.embedding_dim, k1 = n->num_negatives + 1;
    for (int k = 0; k < l->n; k++) {
        if (l->shape[k].ndim != 2 || l->shape[k].dim[1] != d || l->shape[k].dim[0] != b)
            return report_failure(err, "nce_loss_with_memory: output %d is not %lld × %lld (the batch × "
                                       "memory_params.embedding_dim)", k, (long long)b, (long long)d);
        if (n->norm_embedding) {
            l->normed[k] = eng_tensor_new(be, l->shape[k]);
            l->dnormed[k] = eng_tensor_new(be, l->shape[k]);
        }
    }
    struct nce_host *h = l->nce = xcalloc(1, sizeof *h);
    int64_t all = b * dist_world(l->st->world);
    h->k1 = k1;
    h->idx = xmalloc((size_t)(b * k1) * sizeof *h->idx);
    h->s = xmalloc((size_t)(b * k1) * sizeof *h->s);
    h->ds = xmalloc((size_t)(b * k1) * sizeof *h->ds);
    h->scores = eng_tensor_new(be, eng_shape2(b, k1));
    h->dscores = eng_tensor_new(be, eng_shape2(b, k1));
    h->e_all = eng_tensor_new(be, eng_shape2(all, d));
    h->rows = eng_tensor_new(be, eng_shape2(all, d));
    h->rows_n = eng_tensor_new(be, eng_shape2(all, d));
    return 0;
}

void nce_free(eng_backend *be, loss *l)
{
    struct nce_host *h = l->nce;
    if (!h)
        return;
    eng_tensor *own[] = {&h->scores, &h->dscores, &h->e_all, &h->rows, &h->rows_n};
    for (size_t i = 0; i < ARRAY_LEN(own); i++)
        eng_tensor_free(be, own[i]);
    free(h->idx), free(h->s), free(h->ds);
    free(h);
    l->nce = NULL;
}

/* ---- computing ---------------------------------------------------------------------------- */

/* Row i's own sample, then its K negatives from the stream of (forward, global row, output). */
static void draw(const loss *l, int k, const int64_t *y, int64_t b)
{
    struct nce_host *h = l->nce;
    int64_t first = (int64_t)dist_rank(l->st->world) * b, n = l->o.nce.memory_size;
    for (int64_t i = 0; i < b; i++) {
        rng_stream r;
        rng_stream_init(&r, (rng_key){.seed = l->st->seed, .purpose = RNG_PURPOSE_TRAIN,
                                      .epoch = (uint32_t)(first + i),
                                      .sample_index = (uint64_t)l->st->iterations & 0xffffffffu,
                                      .transform_pos = (uint32_t)(NCE_STREAM + k)});
        h->idx[i * h->k1] = y[i];
        for (int64_t j = 1; j < h->k1; j++)
            h->idx[i * h->k1 + j] = rng_randint(&r, 0, n);
    }
}

/* NCECriterion on x = exp(s/T)/Z, times w; d(w·loss)/ds into ds. */
static double nce_criterion(const struct nce_host *h, int64_t b, double t, double z, double n_mem, double w,
                            float *ds)
{
    double kpn = (double)(h->k1 - 1) * (1.0 / n_mem), c = kpn + (double)FLT_EPSILON, total = 0.0;
    for (int64_t i = 0; i < b; i++)
        for (int64_t j = 0; j < h->k1; j++) {
            double x = exp((double)h->s[i * h->k1 + j] / t) / z, g;
            if (j == 0)
                total += log(x / (x + c)), g = -c / ((x + c) * t);
            else
                total += log(kpn / (x + c)), g = x / ((x + c) * t);
            ds[i * h->k1 + j] = (float)(w * g / (double)b);
        }
    return -w * total / (double)b;
}

/* CrossEntropyLoss(s/T, class 0), the batch mean, times w; its gradient into ds. */
static double ce_criterion(const struct nce_host *h, int64_t b, double t, double w, float *ds)
{
    double total = 0.0;
    for (int64_t i = 0; i < b; i++) {
        const float *row = h->s + i * h->k1;
        double top = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < h->k1; j++)
            top = fmax(top, row[j] / t);
        for (int64_t j = 0; j < h->k1; j++)
            sum += exp(row[j] / t - top);
        total += top + log(sum) - row[0] / t;
        for (int64_t j = 0; j < h->k1; j++)
            ds[i * h->k1 + j] = (float)(w * (exp(row[j] / t - top) / sum - (j == 0)) / (t * (double)b));
    }
    return w * total / (double)b;
}

/* VISSL's compute_partition_function: Z = mean(exp(s/T)) · N over the first batch (every rank's
 * mean, averaged), rounded to the float32 its params buffer keeps. */
static int set_z(eng_backend *be, loss *l, int64_t b, double t, char **err)
{
    struct nce_host *h = l->nce;
    double mean = 0.0;
    for (int64_t i = 0; i < b * h->k1; i++)
        mean += exp((double)h->s[i] / t);
    mean /= (double)(b * h->k1);
    if (dist_world(l->st->world) > 1 && dist_mean(l->st->world, &mean, err) != 0)
        return -1;
    l->st->z = as_float(mean * (double)l->o.nce.memory_size);
    upload_params(be, l->st);
    return 0;
}

/* memory[y] = normalize(memory[y]·m + e·(1 − m)) for every rank's rows. */
static int update_memory(eng_backend *be, loss *l, const eng_tensor *e, const int64_t *y, int64_t b, char **err)
{
    struct nce_host *h = l->nce;
    const eng_tensor *memory = &l->st->entries[0].value;
    int64_t *ys = NULL, n = b;
    if (dist_world(l->st->world) > 1) {
        if (dist_all_gather(l->st->world, be, e, &h->e_all, err) != 0 ||
            dist_gather_rows(l->st->world, y, sizeof *y, b, (void **)&ys, &n, err) != 0)
            return -1;
    } else {
        eng_copy(be, e, &h->e_all);
        ys = xmalloc((size_t)b * sizeof *ys);
        memcpy(ys, y, (size_t)b * sizeof *ys);
    }
    for (int64_t r = 0; r < n; r++) {
        eng_tensor from = eng_rows(be, memory, ys[r], 1), to = eng_rows(be, &h->rows, r, 1);
        eng_copy(be, &from, &to);
    }
    eng_ema(be, as_float(l->o.nce.momentum), &h->e_all, &h->rows);
    eng_l2norm_forward(be, &h->rows, &h->rows_n);
    for (int64_t r = 0; r < n; r++) {
        eng_tensor from = eng_rows(be, &h->rows_n, r, 1), to = eng_rows(be, memory, ys[r], 1);
        eng_copy(be, &from, &to);
    }
    free(ys);
    return 0;
}

static int check_targets(const loss *l, const loss_batch *bt, int64_t b, char **err)
{
    if (!bt->label || bt->batch != b || bt->label_cols != 1)
        return report_failure(err, "nce_loss_with_memory: the batch has no sample index per image (label.0 of "
                                   "LABEL_TYPE sample_index)");
    for (int64_t i = 0; i < b; i++)
        if (bt->label[i] < 0 || bt->label[i] >= l->o.nce.memory_size)
            return report_failure(err, "nce_loss_with_memory: image %lld's target %lld is not a row of the memory "
                                       "bank of %lld (num_train_samples)%s", (long long)i, (long long)bt->label[i],
                                  (long long)l->o.nce.memory_size,
                                  bt->label[i] == l->o.nce.ignore_index ? "; ignored rows are not supported" : "");
    return 0;
}

/* Output k's term: scores, loss and gradient, the backward into d(output k), the update. */
static int one_output(eng_backend *be, loss *l, int k, const eng_tensor *out, const loss_batch *bt, double *value,
                      char **err)
{
    const nce_options *n = &l->o.nce;
    struct nce_host *h = l->nce;
    int64_t b = l->shape[k].dim[0];
    double t = as_float(l->o.temperature);
    const eng_tensor *e = out, *memory = &l->st->entries[0].value;
    if (n->norm_embedding)
        eng_l2norm_forward(be, out, e = &l->normed[k]);
    draw(l, k, bt->label, b);
    eng_bank_scores_forward(be, memory, h->idx, e, &h->scores);
    eng_download(be, &h->scores, h->s);
    if (!n->cross_entropy && l->st->z < 0.0 && set_z(be, l, b, t, err) != 0)
        return -1;
    *value += n->cross_entropy
                  ? ce_criterion(h, b, t, n->loss_weights[k], h->ds)
                  : nce_criterion(h, b, t, l->st->z, (double)n->memory_size, n->loss_weights[k], h->ds);
    eng_upload(be, &h->dscores, h->ds);
    const eng_tensor *de = n->norm_embedding ? &l->dnormed[k] : &l->dout[k];
    eng_zero(be, de);
    eng_bank_scores_backward(be, memory, h->idx, &h->dscores, de);
    if (n->norm_embedding) {
        eng_zero(be, &l->dout[k]);
        eng_l2norm_backward(be, out, de, &l->dout[k]);
    }
    bool update = n->update_mem_on_forward || n->update_mem_with_emb_index == k;
    return update ? update_memory(be, l, e, bt->label, b, err) : 0;
}

int nce_compute(eng_backend *be, loss *l, const eng_tensor *const *outputs, const loss_batch *b, double *value,
                char **err)
{
    if (check_targets(l, b, l->shape[0].dim[0], err) != 0)
        return -1;
    *value = 0.0;
    for (int k = 0; k < l->n; k++)
        if (one_output(be, l, k, outputs[k], b, value, err) != 0)
            return -1;
    l->st->iterations++;
    return 0;
}
