/*
 * loss_moco.c — VISSL's moco_loss (MoCoLoss, vissl/losses/moco_loss.py) with MoCoHook's momentum
 * encoder (vissl/hooks/moco_hooks.py): MoCo v2.
 *
 * The encoder (momentum.h) is a second model of the same options, built fresh (its BN running statistics
 * start at 0 and 1, as VISSL's build_model leaves them). At the first forward its parameters
 * become the model's; before every later forward they follow them, θk = m·θk + (1 − m)·θq
 * (eng_ema), in training and in test phases alike (VISSL's on_forward hook runs in both). Its
 * buffers are never copied from the model (VISSL's quirk: MoCo does not sync them), it always
 * runs in training mode (VISSL never switches it: batch statistics, running statistics
 * updated) and it takes no gradient.
 *
 * Each forward the encoder reads the batch's data_momentum.0 (moco_collator's second view);
 * its first output, L2-normalised, is the keys k (B × D). The loss on the model's output x:
 *   q = normalize(x);  logits = [q·k | q·queueᵀ] / T;  loss = CE(logits, class 0), the mean.
 * On the engine it is an InfoNCE over one product: the `bank` holds the Q queue rows with the
 * batch's keys below them, S = q·bankᵀ (B × (Q + B)); row i's positive is column Q + i, its
 * negatives the Q queue columns, the other keys neither. dq = dS·bank, then back through the
 * normalisation. Only then (the product read the old queue, as VISSL's cloned one) the keys of
 * every rank, gathered in rank order, replace queue rows [ptr, ptr + W·B), and ptr moves on by
 * W·B modulo Q (VISSL asserts Q % W·B == 0; the config check and the plan refuse it sooner).
 *
 * Several trainers: without SyncBN (shuffle_batch) the key batch is shuffled across the ranks
 * for the encoder's batch norm, as MoCo's _batch_shuffle_ddp: every rank's images are gathered,
 * a permutation of the W·B rows is drawn (the same on every rank: the counter-based generator
 * on SEED_VALUE and the loss's forward count, where VISSL broadcasts rank 0's torch.randperm),
 * rank r encodes rows perm[r·B … r·B + B − 1], and the keys are gathered and put back in order.
 *
 * Checkpoint entries: loss.queue (Q × D: VISSL's `queue` is its transpose, D × Q),
 * loss.queue_ptr (one float; Q < 2^24 keeps it exact) and loss.moco_encoder.<every name of the
 * model>. A resumed encoder follows the model at once: VISSL skips the moving average at the
 * first forward after a resume (its hook rebuilds the encoder from the checkpoint then), selfsup
 * does not, so a resumed run is the uninterrupted one bit for bit.
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

#define MOCO_MAX_QUEUE (1 << 24) /* queue_ptr is a float in the checkpoint */

typedef struct moco_state {
    eng_tensor bank;    /* (Q + cap) × D: the queue's rows, then the current batch's keys */
    int64_t cap;        /* key rows the bank has room for */
    int64_t ptr;        /* the next queue row to replace */
    eng_tensor ptr_t;   /* ptr as one float, for the checkpoint */
    int64_t nkeys;      /* keys of the last forward (rows Q … Q + nkeys − 1 of the bank) */
    eng_tensor all_x, all_k, own_k; /* shuffle: every rank's images and keys, this rank's shuffled keys */
} moco_state;

/* ---- config ------------------------------------------------------------------------------- */

/* The global batch: what one enqueue adds to the queue. */
static int64_t global_batch(const cfg_node *config)
{
    return cfg_int(config, "DATA.TRAIN.BATCHSIZE_PER_REPLICA") * cfg_int(config, "DISTRIBUTED.NUM_NODES") *
           cfg_int(config, "DISTRIBUTED.NUM_PROC_PER_NODE");
}

/* Whether test phases will read DATA.TEST (TEST_MODEL or TEST_ONLY, and test data described). */
static bool tests_run(const cfg_node *config)
{
    const cfg_node *sources = cfg_get(config, "DATA.TEST.DATA_SOURCES");
    return (cfg_bool(config, "TEST_MODEL") || cfg_bool(config, "TEST_ONLY")) && sources &&
           sources->kind == CFG_LIST && sources->len > 0;
}

/* The key view comes from moco_collator, in training and in the test phases that run. */
static bool check_collators(const cfg_node *config, cfg_err *err)
{
    static const char *const splits[] = {"TRAIN", "TEST"};
    for (int i = 0; i < 2; i++) {
        if (i == 1 && !tests_run(config))
            break;
        char *key = xasprintf("DATA.%s.COLLATE_FUNCTION", splits[i]), *full = xasprintf("config.%s", key);
        bool ok = !strcmp(cfg_str(config, key), "moco_collator");
        if (!ok)
            cfg_fail(err, cfg_get(config, key), full, "is '%s', but moco_loss reads the key view that moco_collator "
                     "puts in data_momentum: set it to moco_collator", cfg_str(config, key));
        free(key), free(full);
        if (!ok)
            return false;
    }
    return true;
}

bool moco_options_from_config(const cfg_node *config, loss_options *o, cfg_err *err)
{
    const cfg_node *l = cfg_get(config, "LOSS.moco_loss");
    moco_options *m = &o->moco;
    o->temperature = cfg_float(l, "temperature");
    o->embedding_dim = cfg_int(l, "embedding_dim");
    m->queue_size = cfg_int(l, "queue_size");
    m->momentum = cfg_float(l, "momentum");
    m->shuffle_batch = !cfg_bool(config, "MODEL.SYNC_BN_CONFIG.CONVERT_BN_TO_SYNC_BN");
    int64_t batch = global_batch(config);
    const char *bad = !(o->temperature > 0.0)                         ? "temperature must be > 0"
                      : o->embedding_dim < 1                          ? "embedding_dim must be ≥ 1"
                      : m->queue_size < 1 || m->queue_size >= MOCO_MAX_QUEUE ? "queue_size must be 1 to 2^24 − 1"
                      : !(m->momentum >= 0.0 && m->momentum <= 1.0)   ? "momentum must be in [0, 1]"
                                                                      : NULL;
    if (bad) {
        cfg_fail(err, l, "config.LOSS.moco_loss", "%s", bad);
        return false;
    }
    if (batch > 0 && m->queue_size % batch) {
        cfg_fail(err, cfg_get(l, "queue_size"), "config.LOSS.moco_loss.queue_size",
                 "%lld is not a multiple of the global batch, %lld (BATCHSIZE_PER_REPLICA × NUM_NODES × "
                 "NUM_PROC_PER_NODE): each step's keys replace a whole block of the queue",
                 (long long)m->queue_size, (long long)batch);
        return false;
    }
    return check_collators(config, err);
}

/* ---- state -------------------------------------------------------------------------------- */

/* VISSL's queue: randn(D, Q) with each key (a column there, a row here) L2-normalised. */
static void init_queue(eng_backend *be, moco_state *ms, const loss_state *s)
{
    int64_t q = s->o.moco.queue_size, d = s->o.embedding_dim;
    rng_stream r;
    rng_stream_init(&r, (rng_key){.seed = s->seed, .purpose = RNG_PURPOSE_DATASET, .sample_index = 1});
    float *v = xmalloc_large((size_t)(q * d) * sizeof *v);
    for (int64_t i = 0; i < q * d; i++)
        v[i] = (float)rng_normal(&r, 0.0, 1.0);
    loss_normalize_rows(v, q, d);
    eng_tensor queue = eng_rows(be, &ms->bank, 0, q);
    eng_upload(be, &queue, v);
    free(v);
}

static void add_view(loss_state *s, const char *prefix, const char *name, const eng_tensor *t)
{
    char *full = xasprintf("%s%s", prefix, name);
    loss_state_add_entry(s, full, ENG_BUFFER)->value = *t;
    free(full);
}

int moco_attach(eng_backend *be, loss_state *s, const model *m, char **err)
{
    moco_state *ms = s->moco = xcalloc(1, sizeof *ms);
    int64_t q = s->o.moco.queue_size;
    ms->bank = eng_tensor_new(be, eng_shape2(q, s->o.embedding_dim));
    ms->ptr_t = eng_tensor_new(be, eng_shape2(1, 1));
    eng_zero(be, &ms->ptr_t);
    init_queue(be, ms, s);
    char rank[24], *prefix;
    loss_state_rank_prefix(s, rank);
    prefix = xasprintf("%sloss.", rank);
    eng_tensor queue = eng_rows(be, &ms->bank, 0, q);
    add_view(s, prefix, "queue", &queue);
    add_view(s, prefix, "queue_ptr", &ms->ptr_t);
    free(prefix);
    prefix = xasprintf("%sloss.moco_encoder.", rank);
    s->momentum = momentum_new(be, m, s->seed, false, s, prefix, err);
    free(prefix);
    return s->momentum ? 0 : -1;
}

int moco_loaded(eng_backend *be, loss_state *s, char **err)
{
    moco_state *ms = s->moco;
    float ptr;
    eng_download(be, &ms->ptr_t, &ptr);
    if (!(ptr >= 0.0f && ptr < (float)s->o.moco.queue_size && ptr == floorf(ptr)))
        return report_failure(err, "the checkpoint's loss.queue_ptr (%g) is not a row of the queue of %lld",
                              (double)ptr, (long long)s->o.moco.queue_size);
    ms->ptr = (int64_t)ptr; /* the encoder: loss_state_loaded */
    return 0;
}

static void free_if(eng_backend *be, eng_tensor *t)
{
    if (t->base)
        eng_tensor_free(be, t);
}

void moco_state_free(eng_backend *be, loss_state *s)
{
    moco_state *ms = s->moco;
    eng_tensor *own[] = {&ms->bank, &ms->ptr_t, &ms->all_x, &ms->all_k, &ms->own_k};
    for (size_t i = 0; i < ARRAY_LEN(own); i++)
        free_if(be, own[i]);
    free(ms);
    s->moco = NULL;
}

/* t as a fresh tensor of `shape`, unless it already is one. */
static void ensure(eng_backend *be, eng_tensor *t, eng_shape shape)
{
    if (t->base && eng_shape_equal(&t->shape, &shape))
        return;
    free_if(be, t);
    *t = eng_tensor_new(be, shape);
}

/* Room below the queue for `rows` keys; the queue's entry follows the bank when it moves. */
static void grow_bank(eng_backend *be, loss_state *s, int64_t rows)
{
    moco_state *ms = s->moco;
    if (rows <= ms->cap)
        return;
    int64_t q = s->o.moco.queue_size;
    eng_tensor bigger = eng_tensor_new(be, eng_shape2(q + rows, s->o.embedding_dim));
    eng_tensor old_queue = eng_rows(be, &ms->bank, 0, q), new_queue = eng_rows(be, &bigger, 0, q);
    eng_copy(be, &old_queue, &new_queue);
    eng_tensor_free(be, &ms->bank);
    ms->bank = bigger;
    ms->cap = rows;
    s->entries[0].value = new_queue;
}

/* ---- the hook: the encoder follows the model, then encodes the key view ------------------------ */

/* Rows of `from` picked by idx[0..n) into rows 0..n−1 of `to`. */
static void pick_rows(eng_backend *be, const eng_tensor *from, const eng_tensor *to, const size_t *idx, int64_t n)
{
    for (int64_t j = 0; j < n; j++) {
        eng_tensor src = eng_rows(be, from, (int64_t)idx[j], 1), dst = eng_rows(be, to, j, 1);
        eng_copy(be, &src, &dst);
    }
}

/* The permutation of the world's key rows for this forward, and its inverse. */
static void shuffle_order(const loss_state *s, size_t n, size_t *perm, size_t *inverse)
{
    rng_stream r;
    rng_stream_init(&r, (rng_key){.seed = s->seed, .purpose = RNG_PURPOSE_TRAIN,
                                  .sample_index = (uint64_t)s->iterations & 0xffffffffu, .transform_pos = 1});
    rng_permutation(&r, n, perm);
    for (size_t i = 0; i < n; i++)
        inverse[perm[i]] = i;
}

/* The encoder's forward on the key view, over the world's shuffled batch (MoCo's BN shuffle):
 * its output, L2-normalised, into `keys` (this rank's rows, in their own order). */
static int shuffled_keys(eng_backend *be, loss_state *s, const eng_tensor *keys, char **err)
{
    moco_state *ms = s->moco;
    model *encoder = momentum_model(s->momentum);
    int w = dist_world(s->world), r = dist_rank(s->world);
    eng_tensor x = model_input(encoder, 0);
    int64_t b = x.shape.dim[0];
    eng_shape xs = x.shape;
    xs.dim[0] = b * w;
    ensure(be, &ms->all_x, xs);
    if (dist_all_gather(s->world, be, &x, &ms->all_x, err) != 0)
        return -1;
    size_t *perm = xmalloc((size_t)(b * w) * sizeof *perm), *inverse = xmalloc((size_t)(b * w) * sizeof *inverse);
    shuffle_order(s, (size_t)(b * w), perm, inverse);
    pick_rows(be, &ms->all_x, &x, perm + r * b, b);
    model_forward(be, encoder, true);
    const eng_tensor *out = model_output(encoder, 0);
    ensure(be, &ms->own_k, out->shape);
    ensure(be, &ms->all_k, eng_shape2(b * w, out->shape.dim[1]));
    eng_l2norm_forward(be, out, &ms->own_k);
    int rc = dist_all_gather(s->world, be, &ms->own_k, &ms->all_k, err);
    if (rc == 0)
        pick_rows(be, &ms->all_k, keys, inverse + r * b, b);
    free(perm), free(inverse);
    return rc;
}

int moco_on_forward(eng_backend *be, loss_state *s, model *m, const rec_view *batch, char **err)
{
    moco_state *ms = s->moco;
    momentum_follow(be, s->momentum, m, s->o.moco.momentum);
    int idx[MODEL_MAX_INPUTS];
    eng_shape shapes[MODEL_MAX_INPUTS];
    int n = batch_input_shapes_of(batch, "data_momentum", idx, shapes, err);
    if (n < 0)
        return -1;
    if (n != 1)
        return report_failure(err, "moco_loss: the batch has %d key views; moco_collator gives one", n);
    if (momentum_load(be, s->momentum, batch, idx, shapes, 1, err) != 0)
        return -1;
    int64_t rows = shapes[0].dim[0];
    grow_bank(be, s, rows);
    eng_tensor keys = eng_rows(be, &ms->bank, s->o.moco.queue_size, rows);
    s->iterations++;
    ms->nkeys = rows;
    if (dist_world(s->world) > 1 && s->o.moco.shuffle_batch)
        return shuffled_keys(be, s, &keys, err);
    model_forward(be, momentum_model(s->momentum), true);
    const eng_tensor *out = model_output(momentum_model(s->momentum), 0);
    if (!eng_shape_equal(&out->shape, &keys.shape))
        return report_failure(err, "moco_loss: the encoder's first output is not %lld × %lld (embedding_dim)",
                              (long long)rows, (long long)s->o.embedding_dim);
    eng_l2norm_forward(be, out, &keys);
    return 0;
}

/* ---- the loss ----------------------------------------------------------------------------- */

int moco_plan(eng_backend *be, loss *l, char **err)
{
    int64_t q = l->o.moco.queue_size, d = l->o.embedding_dim, world = dist_world(l->st ? l->st->world : NULL);
    if (!l->st || !l->st->moco)
        return report_failure(err, "moco_loss: planned without its state's encoder (loss_state_attach)");
    if (l->n != 1 || l->shape[0].ndim != 2 || l->shape[0].dim[1] != d)
        return report_failure(err, "moco_loss: takes one output of rows × %lld (embedding_dim); the model gives %d",
                              (long long)d, l->n);
    int64_t b = l->shape[0].dim[0];
    if (q % (b * world))
        return report_failure(err, "moco_loss: the queue of %lld keys is not a multiple of the %lld keys a step "
                                   "adds (%lld per trainer × %lld)", (long long)q, (long long)(b * world),
                              (long long)b, (long long)world);
    float *pos = xcalloc((size_t)(b * (q + b)), sizeof *pos), *neg = xcalloc((size_t)(b * (q + b)), sizeof *neg);
    for (int64_t i = 0; i < b; i++) {
        for (int64_t j = 0; j < q; j++)
            neg[i * (q + b) + j] = 1.0f;
        pos[i * (q + b) + q + i] = 1.0f;
    }
    l->pos = eng_tensor_new(be, eng_shape2(b, q + b));
    l->neg = eng_tensor_new(be, eng_shape2(b, q + b));
    eng_upload(be, &l->pos, pos);
    eng_upload(be, &l->neg, neg);
    free(pos), free(neg);
    l->sim = eng_tensor_new(be, eng_shape2(b, q + b));
    l->dsim = eng_tensor_new(be, eng_shape2(b, q + b));
    l->z = eng_tensor_new(be, l->shape[0]);
    l->dz = eng_tensor_new(be, l->shape[0]);
    if (world > 1)
        l->zall = eng_tensor_new(be, eng_shape2(b * world, d));
    return 0;
}

/* The keys of every rank replace the oldest block of the queue. */
static int enqueue(eng_backend *be, loss *l, char **err)
{
    loss_state *s = l->st;
    moco_state *ms = s->moco;
    int64_t q = s->o.moco.queue_size, b = ms->nkeys;
    eng_tensor keys = eng_rows(be, &ms->bank, q, b);
    const eng_tensor *added = &keys;
    if (dist_world(s->world) > 1) {
        if (dist_all_gather(s->world, be, &keys, &l->zall, err) != 0)
            return -1;
        added = &l->zall;
    }
    int64_t n = added->shape.dim[0];
    eng_tensor block = eng_rows(be, &ms->bank, ms->ptr, n);
    eng_copy(be, added, &block);
    ms->ptr = (ms->ptr + n) % q;
    float ptr = (float)ms->ptr;
    eng_upload(be, &ms->ptr_t, &ptr);
    return 0;
}

int moco_compute(eng_backend *be, loss *l, const eng_tensor *const *outputs, double *value, char **err)
{
    moco_state *ms = l->st->moco;
    int64_t q = l->o.moco.queue_size, b = l->shape[0].dim[0];
    if (ms->nkeys != b)
        return report_failure(err, "moco_loss: %lld keys for %lld queries (the hook's batch is not the loss's)",
                              (long long)ms->nkeys, (long long)b);
    eng_tensor bank = eng_rows(be, &ms->bank, 0, q + b);
    eng_l2norm_forward(be, outputs[0], &l->z);
    eng_linear_forward(be, &l->z, &bank, NULL, &l->sim);
    *value = eng_info_nce(be, &l->sim, (float)(1.0 / l->o.temperature), &l->pos, &l->neg, &l->dsim);
    eng_zero(be, &l->dz);
    eng_linear_backward(be, &l->z, &bank, &l->dsim, &l->dz, NULL, NULL);
    eng_zero(be, &l->dout[0]);
    eng_l2norm_backward(be, outputs[0], &l->dz, &l->dout[0]);
    return enqueue(be, l, err);
}
