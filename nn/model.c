/*
 * model.c — VISSL's BaseSSLMultiInputOutputModel on the model engine (see model.h).
 *
 * How it is put together:
 *   - construction builds the trunk (trunk.h) and one head_list per "branch" (heads.c), then
 *     re-homes every tensor of every part into the model's three allocations (params.c), in
 *     state-dict order, under its full VISSL name;
 *   - planning splits the inputs into "streams" (one without MULTI_INPUT_HEAD_MAPPING, one
 *     per mapping entry) and each stream into "groups" (consecutive inputs of one shape).
 *     Every group runs through its own trunk view: a second trunk whose tensors are the
 *     master trunk's (eng_params_share), planned for the group's shape. So two resolutions
 *     share one set of weights and one gradient buffer, exactly as VISSL's one trunk module
 *     called twice, and backward needs no bookkeeping: gradients accumulate;
 *   - a stream's features are the trunk layers it reads (flatten, the pool-op map's layers,
 *     or the mapping's names), pooled where the map says so; with several groups they are
 *     concatenated along the batch in input order (eng_copy into slices);
 *   - branches are VISSL's heads_forward cases: head entry i reads feature i, or, with one
 *     feature and several entries, all entries run as one chain.
 * Backward walks the same structure in reverse: the heads write the gradient of the stream's
 * feature (dfeat), whose batch slices go back through the group's trunk views.
 */
#include "model.h"
#include "test_hooks.h"

#include "log.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Inputs of one shape that go through the trunk together. */
typedef struct {
    int first, n;           /* the inputs (model_input indices) */
    int64_t batch;          /* Σ N of those inputs */
    trunk *trunk;           /* a view of the master trunk, planned for this group */
    eng_tensor input;       /* batch × C × H × W, owned */
    eng_tensor pooled[MODEL_MAX_FEATURES]; /* pool-op outputs, owned (base NULL: none) */
    eng_tensor out[MODEL_MAX_FEATURES];    /* the group's features as the stream sees them */
} group;

/* Head entries run one after another on one feature. */
typedef struct {
    head_list chain;
    int first_entry, nentries; /* the MODEL.HEAD.PARAMS entries it covers */
    int feat;                  /* which stream feature it reads */
    bool flat_input;           /* an N × C × 1 × 1 feature seen as N × C (VISSL's squeeze) */
    eng_tensor in, din;        /* the feature as the chain takes it; din: view of dfeat */
} branch;

typedef struct {
    int first_input, ninputs;
    group groups[MODEL_MAX_INPUTS];
    int ngroups;
    int layer[MODEL_MAX_FEATURES]; /* trunk features */
    int pool_op[MODEL_MAX_FEATURES]; /* index into pool_ops, or -1 */
    int nfeat;
    eng_tensor feat[MODEL_MAX_FEATURES];  /* owned when ngroups > 1 (the concatenation) */
    eng_tensor dfeat[MODEL_MAX_FEATURES]; /* owned when the trunk learns */
    int first_branch, nbranches;
} stream;

struct model {
    model_options opt;
    eng_params params;   /* every tensor, full names, three allocations */
    trunk *trunk;        /* the master: its entries point into params */
    trunk **views;      /* more trunks sharing the master's tensors, one per extra group */
    int nviews;
    const eng_reducer *bn_across; /* SyncBN over the ranks (NULL: each rank's batch) */
    branch branches[MODEL_MAX_HEADS];
    int nbranches;
    /* planned */
    bool planned;
    eng_shape in_shape[MODEL_MAX_INPUTS];
    int ninputs;
    int input_stream[MODEL_MAX_INPUTS], input_group[MODEL_MAX_INPUTS];
    eng_tensor input_view[MODEL_MAX_INPUTS]; /* input i inside its group's batch */
    stream streams[MODEL_MAX_HEADS];
    int nstreams;
    const eng_tensor *outputs[MODEL_MAX_HEADS * (HEAD_MAX_PROTOTYPES + 1)];
    int output_head[MODEL_MAX_HEADS * (HEAD_MAX_PROTOTYPES + 1)];
    int output_input[MODEL_MAX_HEADS * (HEAD_MAX_PROTOTYPES + 1)];
    int noutputs;
    float *host_scratch; /* INPUT_TYPE conversions in model_upload_input */
};

model_options model_defaults(void)
{
    return (model_options){.trunk = trunk_defaults(), .head_params_multiplier = 1.0, .should_flatten_feats = true};
}

bool model_is_feature_extractor(const model_options *o)
{
    return o->eval_mode_on && o->freeze_trunk_only && o->npool_ops > 0;
}

bool model_trunk_frozen(const model_options *o)
{
    return o->eval_mode_on && (o->freeze_trunk_only || o->freeze_trunk_and_head);
}

bool model_heads_frozen(const model_options *o) { return o->eval_mode_on && o->freeze_trunk_and_head; }

/* EVAL_MODE_ON with EXTRACT_TRUNK_FEATURES_ONLY: the trunk's features are the outputs; the
 * heads exist (their tensors load and save) but do not run. */
static bool extract_only(const model_options *o) { return o->eval_mode_on && o->extract_trunk_features_only; }

/* ---- construction ------------------------------------------------------------------------- */

/* How many features a stream reads, before any input is seen: the pool-op layers of a feature
 * extractor, the mapping's names, or the trunk's last feature. */
static int stream_feature_count(const model_options *o, int s)
{
    if (o->nmapping)
        return o->mapping[s].nfeat;
    return model_is_feature_extractor(o) ? o->npool_ops : 1;
}

/* VISSL's heads_forward cases, decided once: which entries form which branch. */
static int make_branches(eng_backend *be, model *m, uint64_t seed, char **err)
{
    const model_options *o = &m->opt;
    int nstreams = o->nmapping ? o->nmapping : 1;
    for (int s = 0; s < nstreams; s++) {
        int nfeat = stream_feature_count(o, s);
        int first = o->nmapping ? s : 0, nentries = o->nmapping ? 1 : o->nheads;
        if (nentries == 0)
            continue; /* the trunk's features are the outputs (see model_plan) */
        bool chained = nentries > 1 && nfeat == 1 && !extract_only(o);
        if (!chained && nfeat != nentries && !extract_only(o))
            return report_failure(err, "model: %d head%s for %d trunk feature%s: VISSL runs head i on feature i, or "
                                "several heads one after another on one feature",
                           nentries, nentries == 1 ? "" : "s", nfeat, nfeat == 1 ? "" : "s");
        for (int b = 0; b < (chained ? 1 : nentries); b++) {
            branch *br = &m->branches[m->nbranches];
            head_options chain[MODEL_MAX_HEADS * MODEL_MAX_CHAIN];
            int n = 0;
            int lo = first + b, hi = chained ? first + nentries : lo + 1;
            for (int e = lo; e < hi; e++)
                for (int j = 0; j < o->heads[e].n; j++)
                    chain[n++] = o->heads[e].chain[j];
            if (head_list_new(be, &br->chain, chain, n, seed + 1000u * (uint64_t)(lo + 1), err) != 0)
                return -1;
            br->first_entry = lo, br->nentries = hi - lo, br->feat = chained || b >= nfeat ? 0 : b;
            m->nbranches++;
        }
    }
    return 0;
}

/* The full state-dict name prefix of head `k` of a branch's chain: "heads.I." or "heads.I.J.". */
static void head_prefix(const model_options *o, const branch *br, int k, char *out, size_t len)
{
    int e = br->first_entry;
    while (k >= o->heads[e].n)
        k -= o->heads[e++].n;
    if (o->heads[e].nested)
        snprintf(out, len, "heads.%d.%d.", e, k);
    else
        snprintf(out, len, "heads.%d.", e);
}

static void add_part(eng_backend *be, eng_params *into, const eng_params *part, const char *prefix)
{
    for (int i = 0; i < part->nentries; i++) {
        const eng_entry *e = &part->entries[i];
        int k = eng_params_add(be, into, e->kind, e->value.shape, e->fan_in, "%s%s", prefix, e->name);
        into->entries[k].fixed = e->fixed;
    }
}

/* One allocation per kind for the whole model (docs/ARCHITECTURE.md): declare every entry in state-dict
 * order under its full name, allocate, then move each part's tensors in. */
static void rehome(eng_backend *be, model *m)
{
    const char *trunk_prefix = model_is_feature_extractor(&m->opt) ? "trunk.base_model." : "trunk.";
    eng_params *tp = trunk_param_table(m->trunk);
    add_part(be, &m->params, tp, trunk_prefix);
    char prefix[64];
    for (int b = 0; b < m->nbranches; b++)
        for (int k = 0; k < m->branches[b].chain.n; k++) {
            head_prefix(&m->opt, &m->branches[b], k, prefix, sizeof prefix);
            add_part(be, &m->params, head_param_table(m->branches[b].chain.heads[k]), prefix);
        }
    eng_params_alloc(be, &m->params);
    int at = 0;
    at = eng_params_rehome(be, tp, &m->params, at);
    for (int b = 0; b < m->nbranches; b++)
        for (int k = 0; k < m->branches[b].chain.n; k++)
            at = eng_params_rehome(be, head_param_table(m->branches[b].chain.heads[k]), &m->params, at);
    eng_params_zero_grad(be, &m->params);
}

/* MODEL.HEAD.PARAMS_MULTIPLIER: VISSL's MLP scales its Linear weights and biases at init. */
static void scale_mlp_params(eng_backend *be, model *m)
{
    double mult = m->opt.head_params_multiplier;
    if (mult == 1.0)
        return;
    float *host = eng_params_host_scratch(&m->params);
    for (int b = 0; b < m->nbranches; b++)
        for (int k = 0; k < m->branches[b].chain.n; k++) {
            head *h = m->branches[b].chain.heads[k];
            head_type t = head_opts(h)->type;
            if (t != HEAD_MLP && t != HEAD_EVAL_MLP)
                continue;
            for (int i = 0; i < head_entry_count(h); i++) {
                const eng_entry *e = head_entry_at(h, i);
                if (e->kind != ENG_PARAM || e->fan_in == 0) /* BN affine: not a Linear's */
                    continue;
                int64_t n = eng_numel(&e->value.shape);
                eng_download(be, &e->value, host);
                for (int64_t j = 0; j < n; j++)
                    host[j] = (float)(host[j] * mult);
                eng_upload(be, &e->value, host);
            }
        }
    free(host);
}

model *model_new(eng_backend *be, const model_options *o, uint64_t seed, char **err)
{
    if (o->nmapping && o->nmapping != o->nheads) {
        report_failure(err, "model: MULTI_INPUT_HEAD_MAPPING has %d entries for %d heads", o->nmapping, o->nheads);
        return NULL;
    }
    model *m = xcalloc(1, sizeof *m);
    m->opt = *o;
    if (model_trunk_frozen(o) || extract_only(o)) /* no backward to save memory for; features kept */
        m->opt.trunk.resnet.checkpoint_splits = m->opt.trunk.regnet.checkpoint_splits = 0;
    m->trunk = trunk_new(be, &m->opt.trunk, seed, err);
    if (!m->trunk || make_branches(be, m, seed, err) != 0) {
        model_free(be, m);
        return NULL;
    }
    rehome(be, m);
    scale_mlp_params(be, m);
    return m;
}

void model_init_formula(eng_backend *be, model *m)
{
    trunk_init_formula(be, m->trunk);
    for (int b = 0; b < m->nbranches; b++)
        for (int k = 0; k < m->branches[b].chain.n; k++)
            head_init_formula(be, m->branches[b].chain.heads[k]);
}

static void unplan(eng_backend *be, model *m)
{
    for (int s = 0; s < m->nstreams; s++) {
        stream *st = &m->streams[s];
        for (int g = 0; g < st->ngroups; g++) {
            eng_tensor_free(be, &st->groups[g].input);
            for (int f = 0; f < st->nfeat; f++)
                if (st->groups[g].pooled[f].base)
                    eng_tensor_free(be, &st->groups[g].pooled[f]);
        }
        for (int f = 0; f < st->nfeat; f++) {
            if (st->ngroups > 1)
                eng_tensor_free(be, &st->feat[f]);
            if (st->dfeat[f].base)
                eng_tensor_free(be, &st->dfeat[f]);
        }
    }
    memset(m->streams, 0, sizeof m->streams);
    m->nstreams = 0;
    free(m->host_scratch);
    m->host_scratch = NULL;
    m->planned = false;
}

void model_free(eng_backend *be, model *m)
{
    if (!m)
        return;
    unplan(be, m);
    for (int b = 0; b < m->nbranches; b++)
        head_list_free(be, &m->branches[b].chain);
    for (int v = 0; v < m->nviews; v++)
        trunk_free(be, m->views[v]);
    free(m->views);
    trunk_free(be, m->trunk);
    eng_params_free(be, &m->params);
    free(m);
}

const model_options *model_opts(const model *m) { return &m->opt; }
int model_load_weights(eng_backend *be, model *m, const model_weights_init *w, char **err)
{
    if (!w->opt.params_file || !w->opt.params_file[0])
        return 0; /* VISSL: no PARAMS_FILE, the run starts from its initialisation */
    weights_init_options o = w->opt;
    o.skip_layers = w->skip;
    return weights_load(be, m->params.entries, m->params.nentries, &o, err);
}

void model_set_batchnorm_reducer(model *m, const eng_reducer *across)
{
    m->bn_across = across;
    trunk_set_batchnorm_reducer(m->trunk, across);
    for (int v = 0; v < m->nviews; v++)
        trunk_set_batchnorm_reducer(m->views[v], across);
    for (int b = 0; b < m->nbranches; b++)
        head_list_set_batchnorm_reducer(&m->branches[b].chain, across);
}

void model_set_train_step(model *m, uint64_t step)
{
    trunk_set_train_step(m->trunk, step, 0);
    for (int v = 0; v < m->nviews; v++)
        trunk_set_train_step(m->views[v], step, (uint64_t)v + 1);
    for (int b = 0; b < m->nbranches; b++)
        for (int i = 0; i < m->branches[b].chain.n; i++)
            head_set_step(m->branches[b].chain.heads[i], step);
}

int model_entry_count(const model *m) { return m->params.nentries; }
const eng_entry *model_entry_at(const model *m, int i) { return &m->params.entries[i]; }
eng_tensor model_params(const model *m) { return eng_params_values(&m->params); }
eng_tensor model_grads(const model *m) { return eng_params_grads(&m->params); }
eng_tensor model_buffers(const model *m) { return eng_params_buffers(&m->params); }
int64_t model_param_count(const model *m) { return eng_params_count(&m->params); }
void model_zero_grad(eng_backend *be, model *m) { eng_params_zero_grad(be, &m->params); }
trunk *model_trunk(const model *m) { return m->trunk; }
int model_head_entry_count(const model *m) { return m->opt.nheads; }

/* ---- planning ------------------------------------------------------------------------------- */

/* Rows [n0, n0 + n) of a tensor. Every backend keeps the batch outermost (nn.h), so a slice is
 * one sample's bytes times n0 further on. */
static eng_tensor batch_slice(eng_backend *be, const eng_tensor *t, int64_t n0, int64_t n)
{
    eng_shape one = t->shape;
    one.dim[0] = 1;
    eng_tensor v = *t;
    v.shape.dim[0] = n;
    v.offset += (size_t)n0 * eng_bytes(be, &one);
    return v;
}

/* The trunk that group number `k` (over all streams) runs on: the master for the first,
 * views sharing its tensors for the others, made on first need and kept. */
static trunk *trunk_for_group(eng_backend *be, model *m, int k)
{
    if (k == 0)
        return m->trunk;
    while (m->nviews < k) {
        char *err = NULL;
        trunk *v = trunk_new(be, &m->opt.trunk, 0, &err);
        if (!v)
            die(EXIT_RUNTIME, "model: a second trunk with the same options failed: %s", err);
        eng_params_share(be, trunk_param_table(v), trunk_param_table(m->trunk));
        trunk_set_batchnorm_reducer(v, m->bn_across);
        m->views = xrealloc(m->views, (size_t)(m->nviews + 1) * sizeof *m->views);
        m->views[m->nviews++] = v;
    }
    return m->views[k - 1];
}

static int64_t channels_after_input_type(const model *m) { return m->opt.input_type == MODEL_INPUT_LAB ? 1 : 3; }

/* Split a stream's inputs into groups of one shape (VISSL compares the last dimension; the
 * whole C × H × W is compared here, which is the same for real crop lists and safe for any). */
static void plan_groups(eng_backend *be, model *m, stream *st, int *trunk_index)
{
    int i = st->first_input, end = st->first_input + st->ninputs;
    while (i < end) {
        group *g = &st->groups[st->ngroups];
        g->first = i;
        g->n = 0;
        g->batch = 0;
        do {
            g->batch += m->in_shape[i].dim[0];
            m->input_stream[i] = (int)(st - m->streams);
            m->input_group[i] = st->ngroups;
            g->n++, i++;
        } while (i < end && !m->opt.single_pass_every_crop && m->in_shape[i].dim[1] == m->in_shape[g->first].dim[1] &&
                 m->in_shape[i].dim[2] == m->in_shape[g->first].dim[2] &&
                 m->in_shape[i].dim[3] == m->in_shape[g->first].dim[3]);
        const eng_shape *s = &m->in_shape[g->first];
        g->input = eng_tensor_new(be, eng_shape4(g->batch, channels_after_input_type(m), s->dim[2], s->dim[3]));
        for (int k = g->first, n0 = 0; k < g->first + g->n; n0 += (int)m->in_shape[k].dim[0], k++)
            m->input_view[k] = batch_slice(be, &g->input, n0, m->in_shape[k].dim[0]);
        g->trunk = trunk_for_group(be, m, (*trunk_index)++);
        trunk_plan(be, g->trunk, &g->input.shape);
        st->ngroups++;
    }
}

static eng_shape flat2(const eng_shape *s)
{
    int64_t f = 1;
    for (int d = 1; d < s->ndim; d++)
        f *= s->dim[d];
    return eng_shape2(s->dim[0], f);
}

/* A group's feature f: the trunk tensor, pooled by its op and flattened where asked. */
static int plan_group_feature(eng_backend *be, model *m, stream *st, group *g, int f, char **err)
{
    trunk_expose(g->trunk, st->layer[f]);
    const eng_tensor *t = trunk_feature(g->trunk, st->layer[f]);
    int p = st->pool_op[f];
    if (p < 0) {
        g->out[f] = *t;
        return 0;
    }
    const model_pool_op *op = &m->opt.pool_ops[p];
    const eng_shape *x = &t->shape;
    eng_shape y;
    switch (op->kind) {
    case MODEL_POOL_IDENTITY: y = *x; break;
    case MODEL_POOL_AVG:
    case MODEL_POOL_MAX:
        if (x->ndim != 4 || x->dim[2] + 2 * op->pool.pad[0] < op->pool.kernel[0] ||
            x->dim[3] + 2 * op->pool.pad[1] < op->pool.kernel[1])
            return report_failure(err, "model: pool op %d (kernel %lldx%lld) does not fit its %lldx%lld feature map", p,
                           (long long)op->pool.kernel[0], (long long)op->pool.kernel[1],
                           (long long)(x->ndim == 4 ? x->dim[2] : 1), (long long)(x->ndim == 4 ? x->dim[3] : 1));
        y = eng_pool_output_shape(x, &op->pool);
        break;
    default:
        if (x->ndim != 4)
            return report_failure(err, "model: an adaptive pool needs a N x C x H x W feature");
        y = eng_shape4(x->dim[0], x->dim[1], op->out_hw[0], op->out_hw[1]);
    }
    g->pooled[f] = op->kind == MODEL_POOL_IDENTITY ? (eng_tensor){0} : eng_tensor_new(be, y);
    const eng_tensor *src = op->kind == MODEL_POOL_IDENTITY ? t : &g->pooled[f];
    g->out[f] = m->opt.should_flatten_feats ? eng_reshape(src, flat2(&src->shape)) : *src;
    return 0;
}

/* The stream's features: the group's own, or their concatenation over groups. */
static void plan_stream_features(eng_backend *be, model *m, stream *st)
{
    bool learns = !model_trunk_frozen(&m->opt) && !extract_only(&m->opt);
    for (int f = 0; f < st->nfeat; f++) {
        if (st->ngroups == 1) {
            st->feat[f] = st->groups[0].out[f];
        } else {
            eng_shape s = st->groups[0].out[f].shape;
            s.dim[0] = 0;
            for (int g = 0; g < st->ngroups; g++)
                s.dim[0] += st->groups[g].out[f].shape.dim[0];
            st->feat[f] = eng_tensor_new(be, s);
        }
        if (learns)
            st->dfeat[f] = eng_tensor_new(be, st->feat[f].shape);
    }
}

/* A trainable trunk passes gradients from its last feature only (flatten, or res5avg which is
 * the same numbers); VISSL trains intermediate-layer heads on frozen trunks only. */
static int check_trainable_features(const model *m, const stream *st, char **err)
{
    if (model_trunk_frozen(&m->opt) || extract_only(&m->opt))
        return 0;
    if (st->nfeat != 1)
        return report_failure(err, "model: a trunk that trains passes gradients from one feature; %d are read", st->nfeat);
    for (int f = 0; f < st->nfeat; f++)
        if (!trunk_feature_is_last(&m->opt.trunk, st->layer[f]) || st->pool_op[f] >= 0)
            return report_failure(err, "model: a trunk that trains passes gradients from its last feature (flatten, or "
                                       "res5avg / avgpool); "
                                "heads on other layers need FEATURE_EVAL_SETTINGS with a frozen trunk");
    return 0;
}

/* What the first head of a chain takes, checked before heads.c would abort on it. */
static int check_head_input(const head_options *h, const eng_shape *s, int b, char **err)
{
    int64_t n = s->dim[0], f = eng_numel(s) / (n ? n : 1);
    switch (h->type) {
    case HEAD_EVAL_MLP: {
        int64_t c = s->ndim == 4 ? s->dim[1] : f;
        if (c != h->in_channels || (h->ndims > 0 && h->dims[0] != f))
            return report_failure(err, "model: head %d (eval_mlp, in_channels %lld, dims[0] %lld) gets a feature of %lld channels "
                                "and %lld values per sample",
                           b, (long long)h->in_channels, (long long)(h->ndims ? h->dims[0] : 0), (long long)c, (long long)f);
        return 0;
    }
    case HEAD_SIAMESE_CONCAT_VIEW:
        if (n % h->num_towers)
            return report_failure(err, "model: head %d (siamese_concat_view) gets %lld rows, not a multiple of num_towers %d", b,
                           (long long)n, h->num_towers);
        return 0;
    default:
        if (s->ndim != 2 || (h->ndims > 0 && h->dims[0] != f))
            return report_failure(err, "model: head %d (%s) takes %lld features per sample (dims[0]) but the trunk gives %s%lld",
                           b, h->type == HEAD_MLP ? "mlp" : "swav_head", (long long)(h->ndims ? h->dims[0] : 0),
                           s->ndim == 2 ? "" : "a feature map of ", (long long)f);
        return 0;
    }
}

static int plan_branches(eng_backend *be, model *m, stream *st, char **err)
{
    for (int b = st->first_branch; b < st->first_branch + st->nbranches; b++) {
        branch *br = &m->branches[b];
        const eng_tensor *x = &st->feat[br->feat];
        const head_options *h0 = head_opts(br->chain.heads[0]);
        br->flat_input = h0->type != HEAD_EVAL_MLP && x->shape.ndim == 4 && x->shape.dim[2] == 1 && x->shape.dim[3] == 1;
        br->in = br->flat_input ? eng_reshape(x, flat2(&x->shape)) : *x;
        const eng_tensor *dx = &st->dfeat[br->feat];
        br->din = !dx->base ? (eng_tensor){0} : br->flat_input ? eng_reshape(dx, flat2(&dx->shape)) : *dx;
        if (check_head_input(h0, &br->in.shape, br->first_entry, err) != 0)
            return -1;
        int failed = 0;
        char *why = NULL;
        if (head_list_plan(be, &br->chain, &br->in.shape, &failed, &why) != 0) {
            report_failure(err, "model: head %d: %s", br->first_entry + failed, why);
            free(why);
            return -1;
        }
        for (int k = 0; k < head_list_output_count(&br->chain); k++) {
            m->outputs[m->noutputs] = head_list_output(&br->chain, k);
            m->output_head[m->noutputs] = br->first_entry;
            m->output_input[m->noutputs++] = st->first_input;
        }
    }
    if (!st->nbranches)
        for (int f = 0; f < st->nfeat; f++) {
            m->outputs[m->noutputs] = &st->feat[f];
            m->output_head[m->noutputs] = -1;
            m->output_input[m->noutputs++] = st->first_input;
        }
    return 0;
}

/* The streams' layers and their branches (fixed by the options). */
static void define_streams(model *m)
{
    const model_options *o = &m->opt;
    m->nstreams = o->nmapping ? o->nmapping : 1;
    int b = 0;
    for (int s = 0; s < m->nstreams; s++) {
        stream *st = &m->streams[s];
        st->first_input = o->nmapping ? s : 0;
        st->ninputs = o->nmapping ? 1 : m->ninputs;
        st->nfeat = stream_feature_count(o, s);
        for (int f = 0; f < st->nfeat; f++) {
            st->pool_op[f] = -1;
            st->layer[f] = trunk_feature_count(&o->trunk) - 1; /* flatten */
            if (o->nmapping)
                st->layer[f] = o->mapping[s].feat[f];
            else if (model_is_feature_extractor(o)) {
                st->layer[f] = o->pool_ops[f].layer;
                st->pool_op[f] = f;
            }
        }
        st->first_branch = b;
        while (b < m->nbranches && (!o->nmapping || m->branches[b].first_entry == s))
            b++;
        st->nbranches = extract_only(o) ? 0 : b - st->first_branch;
    }
}

static int check_inputs(const model *m, const eng_shape *in, int n, char **err)
{
    if (n < 1 || n > MODEL_MAX_INPUTS)
        return report_failure(err, "model: %d inputs (1 to %d)", n, MODEL_MAX_INPUTS);
    if (m->opt.nmapping && n != m->opt.nmapping)
        return report_failure(err, "model: MULTI_INPUT_HEAD_MAPPING names %d inputs, the batch has %d", m->opt.nmapping, n);
    for (int i = 0; i < n; i++) {
        if (in[i].ndim != 4 || in[i].dim[0] < 1 || in[i].dim[1] != 3 || in[i].dim[2] < 1 || in[i].dim[3] < 1)
            return report_failure(err, "model: input %d must be N x 3 x H x W (RGB)", i);
        eng_shape t = eng_shape4(in[i].dim[0], channels_after_input_type(m), in[i].dim[2], in[i].dim[3]);
        if (trunk_check_input(&m->opt.trunk, &t, err) != 0)
            return -1;
    }
    return 0;
}

int model_plan(eng_backend *be, model *m, const eng_shape *inputs, int n, char **err)
{
    if (m->planned && n == m->ninputs) {
        bool same = true;
        for (int i = 0; i < n; i++)
            same = same && eng_shape_equal(&inputs[i], &m->in_shape[i]);
        if (same)
            return 0;
    }
    if (check_inputs(m, inputs, n, err) != 0)
        return -1;
    unplan(be, m);
    m->ninputs = n;
    memcpy(m->in_shape, inputs, (size_t)n * sizeof *inputs);
    define_streams(m);
    m->noutputs = 0;
    int trunk_index = 0;
    size_t most = 0;
    for (int s = 0; s < m->nstreams; s++) {
        stream *st = &m->streams[s];
        if (check_trainable_features(m, st, err) != 0)
            goto fail;
        plan_groups(be, m, st, &trunk_index);
        for (int g = 0; g < st->ngroups; g++)
            for (int f = 0; f < st->nfeat; f++)
                if (plan_group_feature(be, m, st, &st->groups[g], f, err) != 0)
                    goto fail;
        plan_stream_features(be, m, st);
        if (plan_branches(be, m, st, err) != 0)
            goto fail;
    }
    for (int i = 0; i < n; i++) {
        size_t k = (size_t)eng_numel(&inputs[i]);
        most = k > most ? k : most;
    }
    m->host_scratch = xmalloc(most * sizeof(float));
    m->planned = true;
    return 0;
fail:
    unplan(be, m);
    return -1;
}

eng_tensor model_input(const model *m, int i)
{
    if (!m->planned || i < 0 || i >= m->ninputs)
        invariant_failed("model: input %d of a model planned for %d", i, m->planned ? m->ninputs : 0);
    return m->input_view[i];
}

void model_upload_input(eng_backend *be, model *m, int i, const float *rgb)
{
    eng_tensor dst = model_input(m, i);
    const eng_shape *s = &m->in_shape[i];
    size_t plane = (size_t)(s->dim[2] * s->dim[3]);
    if (m->opt.input_type == MODEL_INPUT_RGB) {
        eng_upload(be, &dst, rgb);
        return;
    }
    float *out = m->host_scratch;
    for (int64_t n = 0; n < s->dim[0]; n++) {
        const float *src = rgb + (size_t)n * 3 * plane;
        if (m->opt.input_type == MODEL_INPUT_BGR) /* model_input[:, [2, 1, 0]] */
            for (int c = 0; c < 3; c++)
                memcpy(out + ((size_t)n * 3 + (size_t)c) * plane, src + (size_t)(2 - c) * plane, plane * sizeof *out);
        else /* lab: torch.split(x, [1, 2], dim=1)[0] */
            memcpy(out + (size_t)n * plane, src, plane * sizeof *out);
    }
    eng_upload(be, &dst, out);
}

void model_upload_images(eng_backend *be, model *m, int i, const uint8_t *rgb, const float norm[9])
{
    static const int RGB[3] = {0, 1, 2}, BGR[3] = {2, 1, 0};
    eng_tensor dst = model_input(m, i); /* lab: torch.split(x, [1, 2], dim=1)[0], the first channel */
    eng_upload_images(be, &dst, rgb, 3, m->opt.input_type == MODEL_INPUT_BGR ? BGR : RGB, norm);
}

/* ---- forward and backward ------------------------------------------------------------------ */

static void pool_forward(eng_backend *be, const model_pool_op *op, const eng_tensor *x, const eng_tensor *y)
{
    switch (op->kind) {
    case MODEL_POOL_AVG: eng_avgpool_forward(be, &op->pool, x, y); break;
    case MODEL_POOL_MAX: eng_maxpool_forward(be, &op->pool, x, y); break;
    case MODEL_POOL_ADAPTIVE_AVG: eng_adaptive_avgpool_forward(be, x, y); break;
    case MODEL_POOL_ADAPTIVE_MAX: eng_adaptive_maxpool_forward(be, x, y); break;
    case MODEL_POOL_IDENTITY: break;
    }
}

static void stream_forward(eng_backend *be, model *m, stream *st, bool train)
{
    bool trunk_train = train && !model_trunk_frozen(&m->opt);
    int64_t row = 0;
    for (int g = 0; g < st->ngroups; g++) {
        group *gr = &st->groups[g];
        trunk_forward(be, gr->trunk, &gr->input, trunk_train);
        for (int f = 0; f < st->nfeat; f++) {
            if (st->pool_op[f] >= 0)
                pool_forward(be, &m->opt.pool_ops[st->pool_op[f]], trunk_feature(gr->trunk, st->layer[f]),
                             &gr->pooled[f]);
            if (st->ngroups > 1) {
                eng_tensor dst = batch_slice(be, &st->feat[f], row, gr->out[f].shape.dim[0]);
                eng_copy(be, &gr->out[f], &dst);
            }
        }
        row += gr->batch;
    }
    bool heads_train = train && !model_heads_frozen(&m->opt);
    for (int b = st->first_branch; b < st->first_branch + st->nbranches; b++)
        head_list_forward(be, &m->branches[b].chain, &m->branches[b].in, heads_train);
}

void model_forward(eng_backend *be, model *m, bool train)
{
    if (!m->planned)
        invariant_failed("model: forward before model_plan");
    for (int s = 0; s < m->nstreams; s++)
        stream_forward(be, m, &m->streams[s], train);
}

int model_output_count(const model *m) { return m->noutputs; }
const eng_tensor *model_output(const model *m, int k) { return m->outputs[k]; }
int model_output_head(const model *m, int k) { return m->output_head[k]; }
int model_output_input(const model *m, int k) { return m->output_input[k]; }

/* ready: NULL, or (the model's last stream) who is told which gradients are final: every
 * head's once this stream's heads are done (the heads' entries come after the trunk's, and
 * earlier streams' heads are done already), then the trunk's as its last group's backward goes
 * (the groups share the trunk's gradients, which earlier groups only add to). */
static void stream_backward(eng_backend *be, model *m, stream *st, const eng_tensor *const *dout, int *k,
                            const eng_grads_ready *ready)
{
    bool trunk_learns = !model_trunk_frozen(&m->opt);
    for (int f = 0; f < st->nfeat && trunk_learns; f++)
        eng_zero(be, &st->dfeat[f]);
    for (int b = st->first_branch; b < st->first_branch + st->nbranches; b++) {
        branch *br = &m->branches[b];
        head_list_backward(be, &br->chain, dout ? dout + *k : NULL, trunk_learns ? &br->din : NULL);
        *k += head_list_output_count(&br->chain);
    }
    eng_grads_tell(ready, trunk_learns ? trunk_param_table(m->trunk)->nentries : 0);
    if (!trunk_learns)
        return;
    int64_t row = 0;
    for (int g = 0; g < st->ngroups; g++) {
        group *gr = &st->groups[g];
        eng_tensor d = batch_slice(be, &st->dfeat[0], row, gr->batch);
        eng_tensor dflat = eng_reshape(&d, flat2(&d.shape));
        trunk_backward_watched(be, gr->trunk, &dflat, g == st->ngroups - 1 ? ready : NULL);
        row += gr->batch;
    }
}

void model_backward(eng_backend *be, model *m, const eng_tensor *const *dout) { model_backward_watched(be, m, dout, NULL); }

void model_backward_watched(eng_backend *be, model *m, const eng_tensor *const *dout, const eng_grads_ready *ready)
{
    if (!m->planned)
        invariant_failed("model: backward before model_plan");
    if (model_heads_frozen(&m->opt)) { /* FREEZE_TRUNK_AND_HEAD: nothing learns */
        eng_grads_tell(ready, 0);
        return;
    }
    int k = 0;
    for (int s = 0; s < m->nstreams; s++) {
        if (!m->streams[s].nbranches)
            invariant_failed("model: backward through a model without heads");
        stream_backward(be, m, &m->streams[s], dout, &k, s == m->nstreams - 1 ? ready : NULL);
    }
}

/* ---- complexity ------------------------------------------------------------------------------ */

/* rows[*n..] += the head's rows, renamed "<prefix><name>". */
static void append_head_rows(eng_layer_cost **rows, int *n, eng_layer_cost *h, int hn, const char *prefix)
{
    *rows = xrealloc(*rows, (size_t)(*n + hn) * sizeof **rows);
    for (int i = 0; i < hn; i++) {
        (*rows)[*n + i] = h[i];
        (*rows)[*n + i].name = xasprintf("%s%s", prefix, h[i].name);
        free((char *)h[i].name);
    }
    *n += hn;
    free(h);
}

/* The pool ops' rows (trunk.feature_pool_ops.I) and the features they hand the heads. VISSL's
 * FeatureExtractorModel applies op i to the i-th feature the trunk returns, and the trunk returns
 * distinct names in network order (get_trunk_forward_outputs), duplicates in the map's order. */
static int pool_op_costs(const model *m, const eng_shape *trunk_feat, eng_layer_cost **rows, int *n,
                         eng_shape *feat, char **err)
{
    const model_options *o = &m->opt;
    int order[MODEL_MAX_FEATURES];
    bool distinct = true;
    for (int i = 0; i < o->npool_ops; i++) {
        order[i] = o->pool_ops[i].layer;
        for (int j = 0; j < i; j++)
            distinct = distinct && order[j] != order[i];
    }
    for (int i = 1; distinct && i < o->npool_ops; i++) /* insertion sort: network order */
        for (int j = i; j > 0 && order[j - 1] > order[j]; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    *rows = xrealloc(*rows, (size_t)(*n + o->npool_ops) * sizeof **rows);
    for (int i = 0; i < o->npool_ops; i++) {
        const model_pool_op *op = &o->pool_ops[i];
        const eng_shape *x = &trunk_feat[order[i]];
        eng_layer_cost r = {.name = xasprintf("trunk.feature_pool_ops.%d", i)};
        eng_shape y = *x;
        if (op->kind != MODEL_POOL_IDENTITY && x->ndim != 4) {
            free((char *)r.name);
            return report_failure(err, "complexity: pool op %d needs a N × C × H × W feature", i);
        }
        switch (op->kind) {
        case MODEL_POOL_IDENTITY: r.kind = "identity"; break; /* the profiler's Identity rule: 0 */
        case MODEL_POOL_AVG:
        case MODEL_POOL_MAX:
            if (x->dim[2] + 2 * op->pool.pad[0] < op->pool.kernel[0] ||
                x->dim[3] + 2 * op->pool.pad[1] < op->pool.kernel[1]) {
                free((char *)r.name);
                return report_failure(err, "complexity: pool op %d (kernel %lldx%lld) does not fit its %lldx%lld "
                                           "feature map", i, (long long)op->pool.kernel[0],
                                      (long long)op->pool.kernel[1], (long long)x->dim[2], (long long)x->dim[3]);
            }
            r.kind = op->kind == MODEL_POOL_AVG ? "avgpool" : "maxpool";
            r.flops = eng_pool_flops(&op->pool, x);
            y = eng_pool_output_shape(x, &op->pool);
            break;
        case MODEL_POOL_ADAPTIVE_AVG:
            r.kind = "avgpool";
            r.flops = eng_adaptive_avgpool_flops(op->out_hw, x);
            y = eng_shape4(x->dim[0], x->dim[1], op->out_hw[0], op->out_hw[1]);
            break;
        case MODEL_POOL_ADAPTIVE_MAX: /* in no list of the profiler: NotImplementedError */
            r.kind = "maxpool";
            r.flops = ENG_COST_UNKNOWN;
            y = eng_shape4(x->dim[0], x->dim[1], op->out_hw[0], op->out_hw[1]);
            break;
        }
        (*rows)[(*n)++] = r;
        feat[i] = o->should_flatten_feats && y.ndim > 2 ? eng_shape2(y.dim[0], eng_numel(&y) / y.dim[0]) : y;
    }
    return 0;
}

/* count_params counts every parameter of the model: each module with parameters that the
 * forward did not call gets a row of kind "uncalled" (0 FLOPs), in state-dict order. */
static void append_uncalled_rows(const model *m, eng_layer_cost **rows, int *n)
{
    int called = *n;
    for (int i = 0; i < model_entry_count(m); i++) {
        const eng_entry *e = model_entry_at(m, i);
        if (e->kind != ENG_PARAM)
            continue;
        const char *dot = strrchr(e->name, '.');
        int len = dot ? (int)(dot - e->name) : (int)strlen(e->name), r = 0; /* the module's name */
        while (r < *n && !((int)strlen((*rows)[r].name) == len && !strncmp((*rows)[r].name, e->name, (size_t)len)))
            r++;
        if (r < called)
            continue;
        if (r == *n) {
            *rows = xrealloc(*rows, (size_t)(*n + 1) * sizeof **rows);
            (*rows)[(*n)++] = (eng_layer_cost){.name = xasprintf("%.*s", len, e->name), .kind = "uncalled"};
        }
        (*rows)[r].params += eng_numel(&e->value.shape);
    }
}

int model_costs(const model *m, const eng_shape *input, eng_layer_cost **rows, int *n, char **err)
{
    const model_options *o = &m->opt;
    bool fe = model_is_feature_extractor(o);
    eng_shape trunk_feat[TRUNK_MAX_FEATURES], feat[MODEL_MAX_FEATURES];
    *rows = NULL, *n = 0;
    if (fe && o->nmapping > 0)
        return report_failure(err, "complexity: a feature extractor with MULTI_INPUT_HEAD_MAPPING is not counted");
    if (fe) {
        int last = 0;
        for (int i = 0; i < o->npool_ops; i++)
            if (o->pool_ops[i].layer > last)
                last = o->pool_ops[i].layer;
        if (trunk_costs_upto(m->trunk, input, "trunk.base_model.", last, trunk_feat, rows, n, err) != 0)
            return -1;
        if (pool_op_costs(m, trunk_feat, rows, n, feat, err) != 0) {
            eng_costs_free(*rows, *n);
            return -1;
        }
    } else if (trunk_costs_upto(m->trunk, input, "trunk.", trunk_feature_count(&o->trunk) - 1, trunk_feat, rows, n,
                                err) != 0) {
        return -1;
    }
    eng_shape flat = fe ? (eng_shape){0} : trunk_feat[trunk_feature_count(&o->trunk) - 1];
    for (int b = 0; b < m->nbranches && !extract_only(o); b++) {
        const head_list *l = &m->branches[b].chain;
        eng_shape x = fe ? feat[m->branches[b].feat] : flat;
        int entry = m->branches[b].first_entry, j = 0; /* head i is entry's j-th */
        for (int i = 0; i < l->n; i++, j++) {
            if (j == o->heads[entry].n)
                entry++, j = 0;
            const head_options *ho = head_opts(l->heads[i]);
            if (i > 0 && head_opts(l->heads[i - 1])->type == HEAD_SWAV) {
                eng_costs_free(*rows, *n);
                return report_failure(err, "complexity: a head after a swav_head is not counted yet");
            }
            eng_layer_cost *h;
            int hn;
            if (head_costs(l->heads[i], &x, &h, &hn, err) != 0) {
                eng_costs_free(*rows, *n);
                return -1;
            }
            char prefix[48];
            if (o->heads[entry].nested)
                snprintf(prefix, sizeof prefix, "heads.%d.%d.", entry, j);
            else
                snprintf(prefix, sizeof prefix, "heads.%d.", entry);
            append_head_rows(rows, n, h, hn, prefix);
            if (ho->ndims > 0)
                x = eng_shape2(input->dim[0], ho->dims[ho->ndims - 1]);
        }
    }
    append_uncalled_rows(m, rows, n);
    return 0;
}
