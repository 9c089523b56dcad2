/*
 * loss_swav.c — VISSL's swav_loss (SwAVLoss / SwAVCriterion, vissl/losses/swav_loss.py) with its queue
 * and its two hooks.
 *
 * The model gives [emb (C·B × D), scores_h (C·B × K_h) for each prototype head h], crop-major:
 * rows c·B … c·B + B − 1 are crop c of the B images. For each head and each assignment crop
 * a ∈ crops_for_assign, the codes q = Sinkhorn-Knopp(exp(scores_a/ε)) (with the queue's
 * scores appended below, once the queue is on) are fixed targets, and every other crop p
 * predicts them:
 *   loss = mean_h mean_a [ 1/(C−1) Σ_{p≠a} −(1/B) Σ_rows Σ_k q_k log_softmax(scores_p/T)_k ].
 * The gradient reaches the scores only (the codes carry none, as under torch.no_grad): each
 * soft cross-entropy adds its share to the prediction crop's rows of d(scores_h). emb gets
 * no gradient from the loss; the head carries the scores' gradient back into it.
 *
 * The queue (VISSL's local_emb_queue, A × L × D, and local_queue<h>, A × L × K_h) holds the
 * last L embeddings of each assignment crop. It is on once num_iteration ≥ start_iter:
 * SwAVUpdateQueueScoresHook (loss_on_forward) then scores it with the current prototypes
 * before the loss, and the loss, after its value, shifts the queue down by B rows and puts
 * this batch's embeddings on top. L is a multiple of B (VISSL's inference makes it one), so
 * the shift is whole B-row blocks copied from the bottom up, none overlapping.
 *
 * Several trainers (VISSL's distributed_sinkhornknopp): Sinkhorn's max, total and prototype
 * sums run over every rank's rows (eng_sinkhorn's reducer, on the world's fp64 all-reduce),
 * and its sample marginal is 1/(W·(B + L)). Each rank keeps its own queue (VISSL's are local).
 */
#include "train/loss_internal.h"

#include "model.h"
#include "rng.h"
#include "train/inputs.h"
#include "train/momentum.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- config ------------------------------------------------------------------------------- */

/* LOSS.<the loss>: swav_loss or swav_momentum_loss. */
static const char *section(const loss_options *o)
{
    return o->name == LOSS_SWAV_MOMENTUM ? "swav_momentum_loss" : "swav_loss";
}

/* A list of integers at LOSS.<loss>.<key>, into out[max]. */
static bool read_ints(const cfg_node *config, const char *name, const char *key, int64_t *out, int max, int *n,
                      cfg_err *err)
{
    char *path = xasprintf("LOSS.%s.%s", name, key), *full = xasprintf("config.%s", path);
    const cfg_node *list = cfg_get(config, path);
    bool ok = list->kind == CFG_LIST && list->len >= 1 && list->len <= (size_t)max;
    for (size_t i = 0; ok && i < list->len; i++) {
        ok = list->items[i]->kind == CFG_INT;
        out[i] = ok ? (int64_t)cfg_number(list->items[i]) : 0;
    }
    if (ok)
        *n = (int)list->len;
    else
        cfg_fail(err, list, full, "must be a list of 1 to %d integers", max);
    free(path);
    free(full);
    return ok;
}

/* swav_momentum_loss's own keys (it has no temp_hard_assignment_iters). */
static void read_momentum(const cfg_node *l, loss_options *o)
{
    swav_options *s = &o->swav;
    if (o->name != LOSS_SWAV_MOMENTUM) {
        s->temp_hard_assignment_iters = cfg_int(l, "temp_hard_assignment_iters");
        return;
    }
    s->momentum = cfg_float(l, "momentum");
    s->momentum_eval_mode_iter_start = cfg_int(l, "momentum_eval_mode_iter_start");
}

bool swav_options_from_config(const cfg_node *config, loss_options *o, cfg_err *err)
{
    char *key = xasprintf("LOSS.%s", section(o));
    const cfg_node *l = cfg_get(config, key);
    free(key);
    swav_options *s = &o->swav;
    o->temperature = cfg_float(l, "temperature");
    o->embedding_dim = cfg_int(l, "embedding_dim");
    o->num_crops = (int)cfg_int(l, "num_crops");
    s->epsilon = cfg_float(l, "epsilon");
    s->num_iters = (int)cfg_int(l, "num_iters");
    s->queue_length = cfg_int(l, "queue.local_queue_length");
    s->queue_start_iter = cfg_int(l, "queue.start_iter");
    s->normalize_last_layer = cfg_bool(l, "normalize_last_layer");
    read_momentum(l, o);
    int64_t cfa[LOSS_MAX_CROPS];
    if (!read_ints(config, section(o), "crops_for_assign", cfa, LOSS_MAX_CROPS, &s->ncrops_for_assign, err) ||
        !read_ints(config, section(o), "num_prototypes", s->num_prototypes, LOSS_MAX_PROTOTYPES, &s->nheads, err))
        return false;
    const char *bad = o->num_crops < 2 || o->num_crops > LOSS_MAX_CROPS ? "num_crops must be 2 to 32"
                      : !(s->epsilon > 0.0)                               ? "epsilon must be > 0"
                      : !(o->temperature > 0.0)                           ? "temperature must be > 0"
                      : s->num_iters < 0                                  ? "num_iters must be ≥ 0"
                      : s->queue_length < 0                               ? "the queue's length must be ≥ 0"
                      : !(s->momentum >= 0.0 && s->momentum <= 1.0)       ? "momentum must be in [0, 1]"
                                                                          : NULL;
    for (int i = 0; !bad && i < s->ncrops_for_assign; i++) {
        if (cfa[i] < 0 || cfa[i] >= o->num_crops)
            bad = "crops_for_assign names a crop the batch does not have (0 to num_crops − 1)";
        s->crops_for_assign[i] = (int)cfa[i];
    }
    for (int h = 0; !bad && h < s->nheads; h++)
        if (s->num_prototypes[h] < 1)
            bad = "num_prototypes must be ≥ 1";
    if (bad) {
        char *full = xasprintf("config.LOSS.%s", section(o));
        cfg_fail(err, l, full, "%s", bad);
        free(full);
    }
    return !bad;
}

/* ---- state -------------------------------------------------------------------------------- */

static void add_entry(eng_backend *be, loss_state *s, const char *name, eng_shape shape, rng_stream *r, double half)
{
    eng_entry *e = loss_state_add_entry(s, name, ENG_BUFFER);
    e->value = eng_tensor_new(be, shape);
    size_t n = (size_t)eng_numel(&shape);
    float *v = xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)rng_uniform_range(r, -half, half);
    eng_upload(be, &e->value, v);
    free(v);
}

void swav_state_init(eng_backend *be, loss_state *s, uint64_t seed)
{
    const swav_options *o = &s->o.swav;
    if (o->queue_length == 0)
        return; /* VISSL registers the queues only when there is one */
    rng_stream r;
    rng_stream_init(&r, (rng_key){.seed = seed, .purpose = RNG_PURPOSE_DATASET});
    int64_t a = o->ncrops_for_assign, len = o->queue_length;
    char rank[24], name[96]; /* rank r > 0: its own queue's place in rank 0's checkpoint */
    loss_state_rank_prefix(s, rank);
    /* VISSL's SwAVLoss keeps them in its criterion; SwAVMomentumLoss on itself */
    const char *owner = s->o.name == LOSS_SWAV_MOMENTUM ? "" : "swav_criterion.";
    for (int h = 0; h < o->nheads; h++) {
        snprintf(name, sizeof name, "%sloss.%slocal_queue%d", rank, owner, h);
        add_entry(be, s, name, eng_shape3(a, len, o->num_prototypes[h]), &r, 1.0);
    }
    snprintf(name, sizeof name, "%sloss.%slocal_emb_queue", rank, owner);
    add_entry(be, s, name, eng_shape3(a, len, s->o.embedding_dim), &r,
              1.0 / sqrt((double)s->o.embedding_dim / 3.0));
    s->nowned = s->nentries;
}

/* Queue i (assignment crop i) of state tensor e, as an L × width matrix. */
static eng_tensor queue_of(eng_backend *be, const eng_entry *e, int64_t i)
{
    eng_tensor v = eng_rows(be, &e->value, i, 1);
    return eng_reshape(&v, eng_shape2(e->value.shape.dim[1], e->value.shape.dim[2]));
}

/* ---- planning ----------------------------------------------------------------------------- */

int swav_plan(eng_backend *be, loss *l, char **err)
{
    const swav_options *o = &l->o.swav;
    if (l->n != 1 + o->nheads)
        return report_failure(err, "swav_loss: the swav_head gives %d outputs; the loss wants the embedding and %d "
                                   "prototype scores (return_embeddings must stay true)", l->n, o->nheads);
    int64_t rows = l->shape[0].dim[0], crops = l->o.num_crops;
    if (l->shape[0].ndim != 2 || l->shape[0].dim[1] != l->o.embedding_dim)
        return report_failure(err, "swav_loss: the embedding is not rows × %lld (embedding_dim)",
                              (long long)l->o.embedding_dim);
    for (int h = 0; h < o->nheads; h++)
        if (l->shape[1 + h].ndim != 2 || l->shape[1 + h].dim[0] != rows ||
            l->shape[1 + h].dim[1] != o->num_prototypes[h])
            return report_failure(err, "swav_loss: output %d is not %lld × %lld prototype scores", 1 + h,
                                  (long long)rows, (long long)o->num_prototypes[h]);
    if (rows % crops)
        return report_failure(err, "swav_loss: %lld rows are not %lld crops of one batch", (long long)rows,
                              (long long)crops);
    l->per_crop = rows / crops;
    if (o->queue_length % l->per_crop)
        return report_failure(err, "swav_loss: the queue's %lld rows are not a whole number of %lld-image batches",
                              (long long)o->queue_length, (long long)l->per_crop);
    if (l->o.name == LOSS_SWAV_MOMENTUM && o->queue_length && o->ncrops_for_assign * l->per_crop < crops)
        return report_failure(err, "swav_momentum_loss: its queue takes %lld × %d / %lld embeddings a step: none",
                              (long long)l->per_crop, o->ncrops_for_assign, (long long)crops);
    for (int h = 0; h < o->nheads; h++)
        l->codes[h] = eng_tensor_new(be, eng_shape2(l->per_crop, o->num_prototypes[h]));
    return 0;
}

/* ---- computing ---------------------------------------------------------------------------- */

/* VISSL's use_queue: there is a queue and num_iteration has reached start_iter. */
static bool queue_on(const loss_state *s)
{
    return s->o.swav.queue_length > 0 && s->iterations >= s->o.swav.queue_start_iter;
}

/* eng_sinkhorn's sums over the ranks, through the run's world (dist.h). */
typedef struct {
    dist *world;
    char **err;
} ranks_ctx;

static int reduce_over_ranks(void *ctx, double *v, size_t n, bool max)
{
    ranks_ctx *c = ctx;
    return dist_reduce(c->world, v, n, max, c->err);
}

/* The scores assignment crop i's codes come from: the model's own crop (swav_loss), or the
 * momentum encoder's i-th crop (swav_momentum_loss: it ran on the assignment crops alone). */
static eng_tensor code_scores(eng_backend *be, const loss *l, int h, int i, const eng_tensor *scores)
{
    int64_t b = l->per_crop;
    if (l->o.name != LOSS_SWAV_MOMENTUM)
        return eng_rows(be, scores, l->o.swav.crops_for_assign[i] * b, b);
    return eng_rows(be, model_output(momentum_model(l->st->momentum), 1 + h), i * b, b);
}

/* VISSL's SwAVCriterion for head h: the mean over assignment crops of the swapped predictions,
 * added to *total. -1 with *err when the sums over the ranks failed. */
static int criterion(eng_backend *be, loss *l, int h, const eng_tensor *scores, bool use_queue, double *total,
                     char **err)
{
    const swav_options *o = &l->o.swav;
    int64_t b = l->per_crop, crops = l->o.num_crops;
    bool hard = l->st->iterations < o->temp_hard_assignment_iters;
    /* Each soft cross-entropy is a sum over b rows, and is averaged over rows, over the C − 1
     * predictions, over the assignment crops and over the heads. */
    double g = 1.0 / ((double)b * (double)(crops - 1) * o->ncrops_for_assign * o->nheads);
    const eng_tensor *dscores = &l->dout[1 + h];
    ranks_ctx ctx = {l->st->world, err};
    eng_reducer ranks = {reduce_over_ranks, &ctx, dist_world(l->st->world)};
    for (int i = 0; i < o->ncrops_for_assign; i++) {
        int a = o->crops_for_assign[i];
        eng_tensor s = code_scores(be, l, h, i, scores), queue;
        if (use_queue)
            queue = queue_of(be, &l->st->entries[h], i);
        if (eng_sinkhorn(be, &s, use_queue ? &queue : NULL, o->epsilon, o->num_iters, hard, &l->codes[h],
                         ranks.world > 1 ? &ranks : NULL) != 0)
            return -1;
        for (int64_t p = 0; p < crops; p++) {
            if (p == a)
                continue;
            eng_tensor x = eng_rows(be, scores, p * b, b), dx = eng_rows(be, dscores, p * b, b);
            *total +=
                eng_soft_cross_entropy(be, &x, (float)(1.0 / l->o.temperature), &l->codes[h], g, &dx) * g;
        }
    }
    return 0;
}

/* q[n:] = q[:-n]: blocks of at most n rows copied from the bottom up, none overlapping. */
static void shift_down(eng_backend *be, const eng_tensor *q, int64_t n)
{
    for (int64_t end = q->shape.dim[0]; end > n;) {
        int64_t start = end - n > n ? end - n : n;
        eng_tensor from = eng_rows(be, q, start - n, end - start), to = eng_rows(be, q, start, end - start);
        eng_copy(be, &from, &to);
        end = start;
    }
}

/* update_emb_queue: each assignment crop's queue moves down n rows and takes the n embeddings at
 * rows `first(i)` on top. swav_loss: the batch, from the model's crop a. swav_momentum_loss, as
 * VISSL writes it: n is the encoder's rows over num_crops (the batch only when every crop is an
 * assignment crop), from its rows i·n. */
static void push_embeddings(eng_backend *be, loss *l, const eng_tensor *emb)
{
    const eng_entry *e = &l->st->entries[l->o.swav.nheads];
    bool momentum = l->o.name == LOSS_SWAV_MOMENTUM;
    if (momentum)
        emb = model_output(momentum_model(l->st->momentum), 0);
    int64_t n = momentum ? emb->shape.dim[0] / l->o.num_crops : l->per_crop;
    for (int i = 0; i < l->o.swav.ncrops_for_assign; i++) {
        eng_tensor q = queue_of(be, e, i);
        shift_down(be, &q, n);
        eng_tensor top = eng_rows(be, &q, 0, n),
                   mine = eng_rows(be, emb, (momentum ? i : l->o.swav.crops_for_assign[i]) * n, n);
        eng_copy(be, &mine, &top);
    }
}

int swav_compute(eng_backend *be, loss *l, const eng_tensor *const *outputs, double *value, char **err)
{
    loss_state *st = l->st;
    const swav_options *o = &l->o.swav;
    bool use_queue = queue_on(st); /* read before this forward is counted */
    double total = 0.0;
    eng_zero(be, &l->dout[0]);
    for (int h = 0; h < o->nheads; h++) {
        eng_zero(be, &l->dout[1 + h]);
        if (criterion(be, l, h, outputs[1 + h], use_queue, &total, err) != 0)
            return -1;
    }
    st->iterations++;
    if (use_queue)
        push_embeddings(be, l, outputs[0]);
    *value = total;
    return 0;
}

/* ---- hooks -------------------------------------------------------------------------------- */

/* heads.0.prototypes<h>.weight of the model. */
static int prototypes(const model *m, int h, const eng_tensor **w, char **err)
{
    char name[64];
    snprintf(name, sizeof name, "heads.0.prototypes%d.weight", h);
    for (int i = 0; i < model_entry_count(m); i++)
        if (!strcmp(model_entry_at(m, i)->name, name)) {
            *w = &model_entry_at(m, i)->value;
            return 0;
        }
    return report_failure(err, "swav_loss: the model has no %s (is the head a swav_head?)", name);
}

/* local_queue<h>[i] = prototypes_h(local_emb_queue[i]), with m's prototypes. */
static int score_queue(eng_backend *be, loss_state *s, const model *m, char **err)
{
    const swav_options *o = &s->o.swav;
    const eng_entry *emb = &s->entries[o->nheads];
    for (int h = 0; h < o->nheads; h++) {
        const eng_tensor *w;
        if (prototypes(m, h, &w, err) != 0)
            return -1;
        for (int i = 0; i < o->ncrops_for_assign; i++) {
            eng_tensor x = queue_of(be, emb, i), y = queue_of(be, &s->entries[h], i);
            eng_linear_forward(be, &x, w, NULL, &y);
        }
    }
    return 0;
}

/* SwAVUpdateQueueScoresHook.on_forward: the queue's scores from the current prototypes. */
int swav_on_forward(eng_backend *be, loss_state *s, model *m, char **err)
{
    return queue_on(s) ? score_queue(be, s, m, err) : 0;
}

/* Every prototype (a row of the weight) of m to unit length. */
static int normalize_prototypes(eng_backend *be, const loss_state *s, const model *m, char **err)
{
    for (int h = 0; h < s->o.swav.nheads; h++) {
        const eng_tensor *w;
        if (prototypes(m, h, &w, err) != 0)
            return -1;
        eng_l2norm_forward(be, w, w);
    }
    return 0;
}

/* NormalizePrototypesHook.on_update (SwAVMomentumNormalizePrototypesHook: the encoder's too). */
int swav_on_update(eng_backend *be, loss_state *s, model *m, char **err)
{
    if (!s->o.swav.normalize_last_layer)
        return 0;
    if (normalize_prototypes(be, s, m, err) != 0)
        return -1;
    return s->momentum ? normalize_prototypes(be, s, momentum_model(s->momentum), err) : 0;
}

/* ---- swav_momentum_loss: the momentum network (SwAVMomentumHook) ------------------------------- */

int swav_momentum_attach(eng_backend *be, loss_state *s, const model *m, char **err)
{
    char rank[24];
    loss_state_rank_prefix(s, rank);
    char *prefix = xasprintf("%sloss.momentum_encoder.", rank);
    s->momentum = momentum_new(be, m, s->seed, true, s, prefix, err);
    free(prefix);
    if (s->momentum)
        momentum_join_world(s->momentum, s->world); /* VISSL's convert_sync_batchnorm and DDP wrapper */
    return s->momentum ? 0 : -1;
}

/* The encoder follows the model, runs on the assignment crops (in eval mode from
 * momentum_eval_mode_iter_start), and scores the queue with its own prototypes. */
int swav_momentum_on_forward(eng_backend *be, loss_state *s, model *m, const rec_view *batch, char **err)
{
    const swav_options *o = &s->o.swav;
    momentum_follow(be, s->momentum, m, o->momentum);
    int all[MODEL_MAX_INPUTS], idx[LOSS_MAX_CROPS];
    eng_shape shapes[MODEL_MAX_INPUTS], picked[LOSS_MAX_CROPS];
    int n = batch_input_shapes(batch, all, shapes, err);
    if (n < 0)
        return -1;
    for (int i = 0; i < o->ncrops_for_assign; i++) {
        int a = o->crops_for_assign[i];
        if (a >= n)
            return report_failure(err, "swav_momentum_loss: crops_for_assign names crop %d of a batch of %d", a, n);
        idx[i] = all[a];
        picked[i] = shapes[a];
    }
    model *enc = momentum_model(s->momentum);
    if (momentum_load(be, s->momentum, batch, idx, picked, o->ncrops_for_assign, err) != 0)
        return -1;
    model_forward(be, enc, s->iterations < o->momentum_eval_mode_iter_start);
    if (momentum_world_check(s->momentum, err) != 0)
        return -1;
    return queue_on(s) ? score_queue(be, s, enc, err) : 0;
}
