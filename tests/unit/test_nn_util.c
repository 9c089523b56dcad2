/*
 * test_nn_util.c — the model-engine tests' shared helpers (see test_nn_util.h).
 */
#include "test_nn_util.h"

#include "config.h"

#include "test_util.h"
#include "torchsave.h"
#include "util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

model_options nnt_model_options(const char *yaml, const char *file_rel)
{
    cfg_t cfg = {0};
    cfg_err err;
    cr_assert(test_compose(&cfg, &err, yaml, file_rel), "config: %s", err.msg);
    model_options o;
    cr_assert(model_options_from_config(cfg_path(cfg.root, "config.MODEL"), &o, &err), "model: %s", err.msg);
    cfg_destroy(&cfg);
    return o;
}

eng_backend *nnt_open_cpu(void)
{
    char *err = NULL;
    eng_backend_options opt = {.threads = 2, .seed = 1234};
    eng_backend *be = eng_backend_open("cpu", &opt, &err);
    cr_assert(be, "%s", err);
    return be;
}

nnt_fixture nnt_load(eng_backend *be, const char *kase, const char *name)
{
    char *file = xasprintf("%s_%s.npy", kase, name);
    char *path = test_fixture("nn", file);
    nnt_fixture f;
    char *err = NULL;
    cr_assert_eq(npy_read(path, &f.a, &err), 0, "%s: %s", file, err);
    cr_assert_eq(f.a.dtype, NPY_F4, "%s is not float32", file);
    eng_shape s = {.ndim = f.a.ndim};
    for (int i = 0; i < f.a.ndim; i++)
        s.dim[i] = (int64_t)f.a.shape[i];
    f.t = eng_tensor_new(be, s);
    eng_upload(be, &f.t, f.a.data);
    free(path);
    free(file);
    return f;
}

void nnt_unload(eng_backend *be, nnt_fixture *f)
{
    eng_tensor_free(be, &f->t);
    npy_close(&f->a);
}

eng_tensor nnt_zeros_like(eng_backend *be, const eng_tensor *like)
{
    eng_tensor t = eng_tensor_new(be, like->shape);
    eng_zero(be, &t);
    return t;
}

double nnt_rel_error_host(const float *got, const float *want, size_t n)
{
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)got[i] - want[i]));
        scale = fmax(scale, fabs((double)want[i]));
    }
    return worst / (scale > 0 ? scale : 1.0);
}

float *nnt_download(eng_backend *be, const eng_tensor *t)
{
    float *h = xmalloc((size_t)eng_numel(&t->shape) * sizeof *h);
    eng_download(be, t, h);
    return h;
}

double nnt_rel_error(eng_backend *be, const eng_tensor *got, const nnt_fixture *want)
{
    cr_assert_eq((size_t)eng_numel(&got->shape), want->a.count);
    float *host = nnt_download(be, got);
    double e = nnt_rel_error_host(host, want->a.data, want->a.count);
    free(host);
    return e;
}

void nnt_fill_normal(float *p, int64_t n, unsigned seed)
{
    srand(seed);
    for (int64_t i = 0; i < n; i++) {
        double u1 = (rand() + 1.0) / (RAND_MAX + 2.0), u2 = (rand() + 1.0) / (RAND_MAX + 2.0);
        p[i] = (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
    }
}

eng_tensor nnt_host_tensor(eng_backend *be, eng_shape s, unsigned seed, float **host)
{
    eng_tensor t = eng_tensor_new(be, s);
    *host = xmalloc((size_t)eng_numel(&s) * sizeof(float));
    nnt_fill_normal(*host, eng_numel(&s), seed);
    eng_upload(be, &t, *host);
    return t;
}

double nnt_loss(eng_backend *be, const eng_tensor *y, const float *r)
{
    int64_t n = eng_numel(&y->shape);
    float *h = xmalloc((size_t)n * sizeof *h);
    eng_download(be, y, h);
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)h[i] * r[i];
    free(h);
    return s;
}

double nnt_fd_error(eng_backend *be, void (*forward)(eng_backend *, void *), void *arg, const eng_tensor *param,
                    float *host, const eng_tensor *grad, const eng_tensor *y, const float *r)
{
    int64_t n = eng_numel(&param->shape);
    float *g = xmalloc((size_t)n * sizeof *g);
    eng_download(be, grad, g);
    const float h = 1e-2f;
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float keep = host[i];
        host[i] = keep + h;
        eng_upload(be, param, host);
        forward(be, arg);
        double up = nnt_loss(be, y, r);
        host[i] = keep - h;
        eng_upload(be, param, host);
        forward(be, arg);
        double down = nnt_loss(be, y, r);
        host[i] = keep;
        double fd = (up - down) / (2.0 * h);
        worst = fmax(worst, fabs(fd - g[i]) / fmax(1.0, fabs(fd)));
    }
    eng_upload(be, param, host);
    free(g);
    return worst;
}

float *nnt_formula_fill(int64_t n, double alpha, int phase)
{
    float *h = xmalloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++) {
        double x = (double)i * alpha + (double)phase * 0.5698402909980532;
        h[i] = (float)(2.0 * (x - floor(x)) - 1.0);
    }
    return h;
}

float *nnt_buffer_sums(eng_backend *be, const eng_params *p, int *n)
{
    float *sums = xmalloc((size_t)(p->nentries ? p->nentries : 1) * sizeof *sums);
    *n = 0;
    for (int i = 0; i < p->nentries; i++) {
        const eng_entry *e = &p->entries[i];
        if (e->kind != ENG_BUFFER)
            continue;
        float *h = nnt_download(be, &e->value);
        double s = 0.0;
        for (int64_t j = 0; j < eng_numel(&e->value.shape); j++)
            s += h[j];
        sums[(*n)++] = (float)s;
        free(h);
    }
    return sums;
}

void nnt_write_torchvision_trunk(const char *model_yaml, const char *path)
{
    eng_backend *be = nnt_open_cpu();
    model_options o = nnt_model_options(model_yaml, NULL);
    char *err = NULL;
    model *m = model_new(be, &o, 0, &err);
    cr_assert_not_null(m, "%s", err);
    model_init_formula(be, m);
    ts_dict *root = ts_dict_new(true);
    const char *prefix = "trunk.base_model._feature_blocks.";
    int n = model_entry_count(m);
    float **host = xcalloc((size_t)n, sizeof *host);
    for (int i = 0; i < n; i++) {
        const eng_entry *e = model_entry_at(m, i);
        if (strncmp(e->name, prefix, strlen(prefix)) != 0)
            continue; /* defaults.yaml's head: not a torchvision tensor */
        size_t shape[NN_MAX_DIMS];
        for (int d = 0; d < e->value.shape.ndim; d++)
            shape[d] = (size_t)e->value.shape.dim[d];
        host[i] = nnt_download(be, &e->value);
        ts_dict_add_tensor(root, e->name + strlen(prefix), ST_F32, e->value.shape.ndim, shape, host[i]);
    }
    cr_assert_eq(ts_save(path, root, &err), 0, "%s", err);
    ts_dict_free(root);
    for (int i = 0; i < n; i++)
        free(host[i]);
    free(host);
    model_free(be, m);
    eng_backend_close(be);
}
