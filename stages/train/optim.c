/*
 * optim.c — VISSL's parameter groups and the optimizer step over them (see optim.h).
 *
 * optim_new sorts every entry into its group once; optim_step then lists, for each trainable
 * entry, its group's rate and decay (and, with LARC, its own gradient scale from the two
 * norms), and hands the whole list to the backend in one call (eng_sgd_step_many: one
 * parallel pass on the cpu, one kernel on a GPU). The optimizer state is one or two
 * allocations the size of the parameter allocation; an entry's state is the view at the same
 * offset as its value, so a checkpoint writes each state as one flat tensor.
 */
#include "train/optim.h"

#include "log.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct optim {
    optim_options o;
    const eng_entry *entries;
    int n;
    optim_group *group;
    int64_t *skip;      /* TEMP_FROZEN_PARAMS_ITER_MAP: steps entry i sits out (until − 1), or 0 */
    void *state[2];     /* SGD: momentum buffers; Adam: exp_avg, exp_avg_sq */
    eng_tensor *view[2]; /* entry i's part of each state buffer (made at the first step) */
    eng_sgd_item *sgd;   /* a step's updates, handed to the backend in one call */
    eng_adam_item *adam;
    const eng_tensor **norm_of; /* LARC: the tensors whose norms a step needs (value, grad per entry), */
    int *norm_at;               /* where each one's goes in sq, */
    double *norm_got;           /* what the backend returned, */
    double *sq;                 /* and the sums of squares by entry: 2i (value) and 2i + 1 (grad) */
    size_t state_bytes;
    int64_t steps;
};

optim_options optim_defaults(void)
{
    return (optim_options){.name = OPTIM_SGD, .weight_decay = 1e-4, .momentum = 0.9, .beta1 = 0.9, .beta2 = 0.999,
                           .eps = 1e-8, .larc_eps = 1e-8, .larc_trust = 1e-3, .regularize_bias = true,
                           .head_weight_decay = 1e-4};
}

/* ---- config ------------------------------------------------------------------------------- */

static bool read_betas(const cfg_node *config, optim_options *o, cfg_err *err)
{
    const cfg_node *b = cfg_get(config, "OPTIMIZER.betas");
    if (b->kind != CFG_LIST || b->len != 2 || !cfg_is_number(b->items[0]) || !cfg_is_number(b->items[1])) {
        cfg_fail(err, b, "config.OPTIMIZER.betas", "must be two numbers [beta1, beta2]");
        return false;
    }
    o->beta1 = cfg_number(b->items[0]);
    o->beta2 = cfg_number(b->items[1]);
    return true;
}

static bool read_non_trainable(const cfg_node *config, optim_options *o, cfg_err *err)
{
    const char *key = "config.MODEL.NON_TRAINABLE_PARAMS";
    const cfg_node *l = cfg_get(config, key + strlen("config."));
    if (l->kind != CFG_LIST || l->len > OPTIM_MAX_NON_TRAINABLE) {
        cfg_fail(err, l, key, "must be a list of at most %d parameter names", OPTIM_MAX_NON_TRAINABLE);
        return false;
    }
    for (size_t i = 0; i < l->len; i++) {
        if (l->items[i]->kind != CFG_STR) {
            cfg_fail(err, l->items[i], key, "must be a list of parameter names");
            return false;
        }
        o->non_trainable[i] = l->items[i]->s;
    }
    o->n_non_trainable = (int)l->len;
    return true;
}

static bool read_temp_frozen(const cfg_node *config, optim_options *o, cfg_err *err)
{
    const char *key = "config.MODEL.TEMP_FROZEN_PARAMS_ITER_MAP";
    const cfg_node *l = cfg_get(config, key + strlen("config."));
    if (!l || l->kind == CFG_NULL)
        return true;
    if (l->kind != CFG_LIST || l->len > OPTIM_MAX_TEMP_FROZEN) {
        cfg_fail(err, l, key, "must be a list of at most %d [parameter name, iteration] pairs", OPTIM_MAX_TEMP_FROZEN);
        return false;
    }
    for (size_t i = 0; i < l->len; i++) {
        const cfg_node *pair = l->items[i];
        if (pair->kind != CFG_LIST || pair->len != 2 || pair->items[0]->kind != CFG_STR ||
            pair->items[1]->kind != CFG_INT) {
            cfg_fail(err, pair, key, "must be a list of [parameter name, iteration] pairs");
            return false;
        }
        const char *name = pair->items[0]->s;
        /* VISSL names them as DDP's wrapped model does: module.heads.0… */
        o->temp_frozen[i].name = !strncmp(name, "module.", 7) ? name + 7 : name;
        o->temp_frozen[i].until = pair->items[1]->i;
    }
    o->n_temp_frozen = (int)l->len;
    return true;
}

bool optim_options_from_config(const cfg_node *config, optim_options *out, cfg_err *err)
{
    optim_options o = optim_defaults();
    const char *name = cfg_str(config, "OPTIMIZER.name");
    if (!strcmp(name, "sgd"))
        o.name = OPTIM_SGD;
    else if (!strcmp(name, "adam"))
        o.name = OPTIM_ADAM;
    else if (!strcmp(name, "adamw"))
        o.name = OPTIM_ADAMW;
    else {
        cfg_fail(err, cfg_get(config, "OPTIMIZER.name"), "config.OPTIMIZER.name",
                 "'%s' is not run by this trainer (sgd, adam, adamw)", name);
        return false;
    }
    o.weight_decay = cfg_float(config, "OPTIMIZER.weight_decay");
    o.momentum = cfg_float(config, "OPTIMIZER.momentum");
    o.nesterov = cfg_bool(config, "OPTIMIZER.nesterov");
    o.use_larc = cfg_bool(config, "OPTIMIZER.use_larc");
    o.larc_clip = cfg_bool(config, "OPTIMIZER.larc_config.clip");
    o.larc_eps = cfg_float(config, "OPTIMIZER.larc_config.eps");
    o.larc_trust = cfg_float(config, "OPTIMIZER.larc_config.trust_coefficient");
    o.regularize_bn = cfg_bool(config, "OPTIMIZER.regularize_bn");
    o.regularize_bias = cfg_bool(config, "OPTIMIZER.regularize_bias");
    o.head_weight_decay = cfg_bool(config, "OPTIMIZER.head_optimizer_params.use_different_wd")
                              ? cfg_float(config, "OPTIMIZER.head_optimizer_params.weight_decay")
                              : o.weight_decay;
    if (o.use_larc && o.name != OPTIM_SGD) {
        cfg_fail(err, cfg_get(config, "OPTIMIZER.use_larc"), "config.OPTIMIZER.use_larc",
                 "LARC wraps SGD only (VISSL's LARC is Apex's, for SGD)");
        return false;
    }
    if (!read_betas(config, &o, err) || !read_non_trainable(config, &o, err) || !read_temp_frozen(config, &o, err))
        return false;
    *out = o;
    return true;
}

/* ---- groups ------------------------------------------------------------------------------- */

/* The entry named module + "." + leaf, or -1. */
static int find_entry(const eng_entry *e, int n, const char *module, size_t len, const char *leaf)
{
    for (int i = 0; i < n; i++)
        if (!strncmp(e[i].name, module, len) && e[i].name[len] == '.' && !strcmp(e[i].name + len + 1, leaf))
            return i;
    return -1;
}

typedef enum { MOD_CONV_LINEAR, MOD_BATCHNORM, MOD_OTHER } module_kind;

static module_kind kind_of(const eng_entry *e, int n, const char *module, size_t len)
{
    if (find_entry(e, n, module, len, "running_mean") >= 0)
        return MOD_BATCHNORM;
    int w = find_entry(e, n, module, len, "weight");
    return w >= 0 && e[w].value.shape.ndim >= 2 ? MOD_CONV_LINEAR : MOD_OTHER;
}

static bool is_non_trainable(const optim_options *o, const char *name)
{
    for (int i = 0; i < o->n_non_trainable; i++)
        if (!strcmp(o->non_trainable[i], name))
            return true;
    return false;
}

/* VISSL 0.1.5's rules for one parameter (optim.h). */
static optim_group group_of(const eng_entry *e, int n, int i, const optim_options *o)
{
    const char *name = e[i].name, *dot = strrchr(name, '.');
    if (!dot)
        return OPTIM_REMAINING;
    size_t len = (size_t)(dot - name);
    bool bias = !strcmp(dot + 1, "bias");
    char *module = xstrndup(name, len);
    bool head = strstr(module, "head") != NULL;
    free(module);
    bool reg;
    switch (kind_of(e, n, name, len)) {
    case MOD_CONV_LINEAR: reg = !bias || !head || o->regularize_bias; break;
    case MOD_BATCHNORM: reg = o->regularize_bn && (!bias || o->regularize_bias); break;
    default: return OPTIM_REMAINING;
    }
    return head ? (reg ? OPTIM_HEAD_REG : OPTIM_HEAD_UNREG) : (reg ? OPTIM_TRUNK_REG : OPTIM_TRUNK_UNREG);
}

optim *optim_new(eng_backend *be, const eng_entry *entries, int n, const eng_tensor *params, const bool *trainable,
                 const optim_options *o, char **err)
{
    for (int i = 0; i < n; i++)
        if (entries[i].kind == ENG_PARAM && entries[i].value.base != params->base) {
            report_failure(err, "optimizer: %s is not in the model's parameter allocation", entries[i].name);
            return NULL;
        }
    optim *opt = xcalloc(1, sizeof *opt);
    opt->o = *o;
    opt->entries = entries;
    opt->n = n;
    opt->group = xcalloc((size_t)n, sizeof *opt->group);
    opt->skip = xcalloc((size_t)n, sizeof *opt->skip);
    for (int i = 0; i < n; i++) {
        bool update = entries[i].kind == ENG_PARAM && (!trainable || trainable[i]) &&
                      !is_non_trainable(o, entries[i].name);
        opt->group[i] = update ? group_of(entries, n, i, o) : OPTIM_NOT_UPDATED;
    }
    for (int k = 0; k < o->n_temp_frozen; k++) {
        int i = 0;
        while (i < n && (entries[i].kind != ENG_PARAM || strcmp(entries[i].name, o->temp_frozen[k].name)))
            i++;
        if (i == n) {
            report_failure(err, "MODEL.TEMP_FROZEN_PARAMS_ITER_MAP: the model has no parameter named %s",
                           o->temp_frozen[k].name);
            optim_free(be, opt);
            return NULL;
        }
        opt->skip[i] = o->temp_frozen[k].until > 1 ? o->temp_frozen[k].until - 1 : 0;
    }
    opt->state_bytes = params->offset + eng_bytes(be, &params->shape);
    int nstate = o->name == OPTIM_SGD ? (o->momentum != 0.0 ? 1 : 0) : 2;
    for (int k = 0; k < nstate; k++) {
        opt->state[k] = eng_alloc(be, opt->state_bytes);
        eng_tensor whole = {.shape = params->shape, .base = opt->state[k], .offset = params->offset};
        eng_zero(be, &whole); /* Adam's moments start at zero */
    }
    return opt;
}

void optim_free(eng_backend *be, optim *opt)
{
    if (!opt)
        return;
    for (int k = 0; k < 2; k++)
        if (opt->state[k])
            eng_free(be, opt->state[k]);
    free(opt->group);
    free(opt->skip);
    free(opt->view[0]), free(opt->view[1]);
    free(opt->sgd), free(opt->adam);
    free(opt->norm_of), free(opt->norm_at), free(opt->norm_got), free(opt->sq);
    free(opt);
}

optim_group optim_group_of(const optim *opt, int i) { return opt->group[i]; }
int64_t optim_step_count(const optim *opt) { return opt->steps; }
size_t optim_state_bytes(const optim *opt) { return (opt->state[0] ? opt->state_bytes : 0) + (opt->state[1] ? opt->state_bytes : 0); }
void optim_set_step_count(optim *opt, int64_t steps) { opt->steps = steps; }

/* ---- the step ------------------------------------------------------------------------------ */

static double group_lr(optim_group g, double lr, double lr_head)
{
    return g == OPTIM_HEAD_REG || g == OPTIM_HEAD_UNREG ? lr_head : lr;
}

static double group_wd(const optim_options *o, optim_group g)
{
    switch (g) {
    case OPTIM_TRUNK_REG:
    case OPTIM_REMAINING: return o->weight_decay;
    case OPTIM_HEAD_REG: return o->head_weight_decay;
    default: return 0.0;
    }
}

/* Entry i's view of state k: the same offset as its value. */
static eng_tensor state_view(const optim *opt, int k, int i)
{
    const eng_tensor *v = &opt->entries[i].value;
    return (eng_tensor){.shape = v->shape, .base = opt->state[k], .offset = v->offset};
}

int optim_state_entries(const optim *opt, eng_entry **out)
{
    static const char *const SGD_NAMES[] = {"momentum_buffer"}, *const ADAM_NAMES[] = {"exp_avg", "exp_avg_sq"};
    const char *const *kinds = opt->o.name == OPTIM_SGD ? SGD_NAMES : ADAM_NAMES;
    int nkinds = opt->state[1] ? 2 : opt->state[0] ? 1 : 0, n = 0;
    eng_entry *e = xcalloc((size_t)(opt->n * nkinds + 1), sizeof *e);
    for (int k = 0; k < nkinds; k++)
        for (int i = 0; i < opt->n; i++)
            if (opt->group[i] != OPTIM_NOT_UPDATED)
                e[n++] = (eng_entry){.name = xasprintf("optimizer.%s.%s", kinds[k], opt->entries[i].name),
                                     .kind = ENG_BUFFER,
                                     .value = state_view(opt, k, i)};
    *out = e;
    return n;
}

void optim_state_entries_free(eng_entry *entries, int n)
{
    for (int i = 0; i < n; i++)
        free((char *)entries[i].name);
    free(entries);
}

/* Apex LARC: the gradient scale and the decay it applies itself (0 and 1: leave it alone),
 * from the entry's Σp² and Σg² (sq). */
static void larc(const optim_options *o, const double sq[2], double lr, float *wd, float *scale)
{
    float pn = (float)sqrt(sq[0]), gn = (float)sqrt(sq[1]);
    if (pn == 0.0f || gn == 0.0f) {
        *wd = 0.0f, *scale = 1.0f;
        return;
    }
    float a = (float)o->larc_trust * pn / (gn + pn * *wd + (float)o->larc_eps);
    if (o->larc_clip)
        a = fminf(a / (float)lr, 1.0f);
    *scale = a;
}

static eng_sgd_item sgd_item(const optim *opt, int i, double lr)
{
    const optim_options *o = &opt->o;
    const eng_entry *e = &opt->entries[i];
    eng_sgd_args a = {.lr = (float)lr, .weight_decay = (float)group_wd(o, opt->group[i]), .momentum = (float)o->momentum,
                      .grad_scale = 1.0f, .nesterov = o->nesterov, .first = opt->steps == opt->skip[i]};
    if (o->use_larc)
        larc(o, &opt->sq[2 * i], lr, &a.weight_decay, &a.grad_scale);
    return (eng_sgd_item){.a = a, .p = &e->value, .g = &e->grad, .buf = opt->state[0] ? &opt->view[0][i] : NULL};
}

static eng_adam_item adam_item(const optim *opt, int i, double lr)
{
    const optim_options *o = &opt->o;
    eng_adam_args a = {.lr = lr, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps,
                       .weight_decay = group_wd(o, opt->group[i]), .decoupled = o->name == OPTIM_ADAMW,
                       .step = opt->steps + 1 - opt->skip[i]};
    return (eng_adam_item){.a = a, .p = &opt->entries[i].value, .g = &opt->entries[i].grad, .m = &opt->view[0][i],
                           .v = &opt->view[1][i]};
}

/* The state views and item arrays, once. */
static void prepare_items(optim *opt)
{
    for (int k = 0; k < 2; k++)
        if (opt->state[k]) {
            opt->view[k] = xcalloc((size_t)opt->n, sizeof *opt->view[k]);
            for (int i = 0; i < opt->n; i++)
                if (opt->group[i] != OPTIM_NOT_UPDATED)
                    opt->view[k][i] = state_view(opt, k, i);
        }
    opt->sgd = xcalloc((size_t)opt->n + 1, sizeof *opt->sgd);
    opt->adam = xcalloc((size_t)opt->n + 1, sizeof *opt->adam);
    opt->norm_of = xcalloc(2 * (size_t)opt->n + 1, sizeof *opt->norm_of);
    opt->norm_at = xcalloc(2 * (size_t)opt->n + 1, sizeof *opt->norm_at);
    opt->norm_got = xcalloc(2 * (size_t)opt->n + 1, sizeof *opt->norm_got);
    opt->sq = xcalloc(2 * (size_t)opt->n + 1, sizeof *opt->sq);
}

static bool updated_now(const optim *opt, int i)
{
    return opt->group[i] != OPTIM_NOT_UPDATED && opt->steps >= opt->skip[i]; /* iteration ≥ until */
}

/* LARC's norms of every tensor this step updates (and of its gradient), in one backend call:
 * on a GPU one wait per step, not two per tensor. sq[2i], sq[2i + 1] for entry i. */
static void larc_norms(eng_backend *be, optim *opt)
{
    int m = 0;
    for (int i = 0; i < opt->n; i++)
        if (updated_now(opt, i)) {
            opt->norm_at[m] = 2 * i, opt->norm_of[m++] = &opt->entries[i].value;
            opt->norm_at[m] = 2 * i + 1, opt->norm_of[m++] = &opt->entries[i].grad;
        }
    eng_sum_squares_many(be, opt->norm_of, m, opt->norm_got);
    for (int k = 0; k < m; k++)
        opt->sq[opt->norm_at[k]] = opt->norm_got[k];
}

void optim_step(eng_backend *be, optim *opt, double lr, double lr_head)
{
    if (!opt->sgd)
        prepare_items(opt);
    if (opt->o.use_larc)
        larc_norms(be, opt);
    int m = 0;
    for (int i = 0; i < opt->n; i++) {
        if (!updated_now(opt, i))
            continue;
        double r = group_lr(opt->group[i], lr, lr_head);
        if (opt->o.name == OPTIM_SGD)
            opt->sgd[m++] = sgd_item(opt, i, r);
        else
            opt->adam[m++] = adam_item(opt, i, r);
    }
    /* every tensor's update in one backend call */
    if (opt->o.name == OPTIM_SGD)
        eng_sgd_step_many(be, opt->sgd, m);
    else
        eng_adam_step_many(be, opt->adam, m);
    opt->steps++;
}
