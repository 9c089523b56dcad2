/*
 * params.c — a model's named tensors in three packed allocations (see params.h).
 */
#include "params.h"

#include "log.h"
#include "util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int eng_params_add(eng_backend *be, eng_params *p, eng_entry_kind kind, eng_shape s, int64_t fan_in,
                   const char *fmt, ...)
{
    if (p->nentries == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->entries = xrealloc(p->entries, (size_t)p->cap * sizeof *p->entries);
    }
    va_list ap;
    va_start(ap, fmt);
    strbuf name = {0};
    sb_vprintf(&name, fmt, ap);
    va_end(ap);
    /* Packed (no padding), so each whole allocation is one 1-D view. */
    size_t *bump = kind == ENG_PARAM ? &p->param_bytes : &p->buf_bytes;
    eng_tensor t = {.shape = s, .base = NULL, .offset = *bump};
    *bump += eng_bytes(be, &s);
    p->entries[p->nentries] =
        (eng_entry){.name = name.s ? name.s : xstrdup(""), .kind = kind, .value = t, .grad = t, .fan_in = fan_in};
    return p->nentries++;
}

void eng_params_alloc(eng_backend *be, eng_params *p)
{
    p->param_base = p->param_bytes ? eng_alloc(be, p->param_bytes) : NULL;
    p->grad_base = p->param_bytes ? eng_alloc(be, p->param_bytes) : NULL;
    p->buf_base = p->buf_bytes ? eng_alloc(be, p->buf_bytes) : NULL;
    for (int i = 0; i < p->nentries; i++) {
        eng_entry *e = &p->entries[i];
        e->value.base = e->kind == ENG_PARAM ? p->param_base : p->buf_base;
        e->grad.base = e->kind == ENG_PARAM ? p->grad_base : NULL;
    }
}

static void free_allocations(eng_backend *be, eng_params *p);

void eng_params_free(eng_backend *be, eng_params *p)
{
    free_allocations(be, p);
    for (int i = 0; i < p->nentries; i++)
        free((char *)p->entries[i].name);
    free(p->entries);
    memset(p, 0, sizeof *p);
}

static void free_allocations(eng_backend *be, eng_params *p)
{
    void *bases[] = {p->param_base, p->grad_base, p->buf_base};
    for (size_t i = 0; i < ARRAY_LEN(bases); i++)
        if (bases[i])
            eng_free(be, bases[i]);
    p->param_base = p->grad_base = p->buf_base = NULL;
    p->param_bytes = p->buf_bytes = 0;
}

static void check_same(const eng_entry *a, const eng_entry *b, const char *what)
{
    if (a->kind != b->kind || !eng_shape_equal(&a->value.shape, &b->value.shape))
        invariant_failed("%s: %s and %s differ in kind or shape", what, a->name, b->name);
}

int eng_params_rehome(eng_backend *be, eng_params *part, const eng_params *into, int first)
{
    if (first < 0 || first + part->nentries > into->nentries)
        invariant_failed("eng_params_rehome: entries %d.. are not declared", first);
    float *host = eng_params_host_scratch(part);
    for (int i = 0; i < part->nentries; i++) {
        eng_entry *e = &part->entries[i];
        const eng_entry *to = &into->entries[first + i];
        check_same(e, to, "eng_params_rehome");
        eng_download(be, &e->value, host);
        eng_upload(be, &to->value, host);
        e->value = to->value;
        e->grad = to->grad;
    }
    free(host);
    free_allocations(be, part);
    return first + part->nentries;
}

void eng_params_share(eng_backend *be, eng_params *view, const eng_params *master)
{
    if (view->nentries != master->nentries)
        invariant_failed("eng_params_share: %d entries against %d", view->nentries, master->nentries);
    for (int i = 0; i < view->nentries; i++) {
        check_same(&view->entries[i], &master->entries[i], "eng_params_share");
        view->entries[i].value = master->entries[i].value;
        view->entries[i].grad = master->entries[i].grad;
    }
    free_allocations(be, view);
}

static eng_tensor whole(void *base, size_t bytes)
{
    return (eng_tensor){.shape = {.ndim = 1, .dim = {(int64_t)(bytes / sizeof(float))}}, .base = base};
}

eng_tensor eng_params_values(const eng_params *p) { return whole(p->param_base, p->param_bytes); }
eng_tensor eng_params_grads(const eng_params *p) { return whole(p->grad_base, p->param_bytes); }
eng_tensor eng_params_buffers(const eng_params *p) { return whole(p->buf_base, p->buf_bytes); }
int64_t eng_params_count(const eng_params *p) { return (int64_t)(p->param_bytes / sizeof(float)); }

void eng_params_zero_grad(eng_backend *be, eng_params *p)
{
    if (!p->param_bytes)
        return;
    eng_tensor g = eng_params_grads(p);
    eng_zero(be, &g);
}

float *eng_params_host_scratch(const eng_params *p)
{
    int64_t most = 1;
    for (int i = 0; i < p->nentries; i++) {
        int64_t n = eng_numel(&p->entries[i].value.shape);
        most = n > most ? n : most;
    }
    return xmalloc((size_t)most * sizeof(float));
}

void eng_params_init_with(eng_backend *be, eng_params *p, uint64_t seed, eng_init_values_fn fn)
{
    float *h = eng_params_host_scratch(p);
    int param = 0;
    for (int i = 0; i < p->nentries; i++) {
        const eng_entry *e = &p->entries[i];
        rng_stream r;
        rng_stream_init(&r, (rng_key){.seed = seed, .purpose = RNG_PURPOSE_MODEL_INIT, .sample_index = (uint64_t)param});
        fn(e, &r, h);
        param += e->kind == ENG_PARAM;
        eng_upload(be, &e->value, h);
    }
    free(h);
}

bool eng_name_ends_with(const char *name, const char *tail)
{
    size_t n = strlen(name), m = strlen(tail);
    return n >= m && strcmp(name + n - m, tail) == 0;
}

double eng_params_weyl(int64_t i, int k)
{
    double x = (double)i * 0.7548776662466927 + (double)k * 0.5698402909980532;
    return x - floor(x);
}

/* The formula of tests/golden/make_resnet_fixtures.py on the Weyl sequence. */
static double formula_value(const eng_entry *e, int64_t i, int k)
{
    double u = eng_params_weyl(i, k);
    const eng_shape *s = &e->value.shape;
    if (e->kind == ENG_BUFFER)
        return eng_name_ends_with(e->name, "running_mean") ? 0.1 * (2.0 * u - 1.0) : 1.0 + 0.5 * u;
    if (s->ndim == 4)
        return sqrt(6.0 / (double)(s->dim[1] * s->dim[2] * s->dim[3])) * (2.0 * u - 1.0);
    return eng_name_ends_with(e->name, ".weight") ? 1.0 + 0.25 * (2.0 * u - 1.0) : 0.1 * (2.0 * u - 1.0);
}

void eng_params_init_formula(eng_backend *be, eng_params *p)
{
    float *h = eng_params_host_scratch(p);
    int counter[2] = {0, 0}; /* parameters and buffers are numbered separately */
    for (int i = 0; i < p->nentries; i++) {
        eng_entry *e = &p->entries[i];
        int k = counter[e->kind]++;
        int64_t n = eng_numel(&e->value.shape);
        for (int64_t j = 0; j < n; j++)
            h[j] = (float)formula_value(e, j, k);
        eng_upload(be, &e->value, h);
    }
    free(h);
}
