/*
 * test_nn_util.h — what the model-engine tests share: PyTorch fixtures as backend tensors,
 * the relative error against them, and finite-difference gradient checks.
 */
#ifndef SELFSUP_TEST_NN_UTIL_H
#define SELFSUP_TEST_NN_UTIL_H

#include "model.h"
#include "nn.h"
#include "npy.h"
#include "test_hooks.h"

/* The cpu backend on 2 threads with a fixed dropout seed. */
eng_backend *nnt_open_cpu(void);
/* config.MODEL of YAML composed over defaults.yaml (file_rel: the file it pretends to be, or NULL). */
model_options nnt_model_options(const char *yaml, const char *file_rel);

/* A fixture (tests/golden/fixtures/nn/CASE_NAME.npy, float32) as a tensor on the backend,
 * with its host copy. */
typedef struct {
    eng_tensor t;
    npy_array a;
} nnt_fixture;

nnt_fixture nnt_load(eng_backend *be, const char *kase, const char *name);
void nnt_unload(eng_backend *be, nnt_fixture *f);

/* A zeroed tensor shaped like `like` (outputs, accumulated gradients). */
eng_tensor nnt_zeros_like(eng_backend *be, const eng_tensor *like);
/* max |got − want| / max |want| over the tensor. */
double nnt_rel_error(eng_backend *be, const eng_tensor *got, const nnt_fixture *want);
/* The same over two host arrays of n values. */
double nnt_rel_error_host(const float *got, const float *want, size_t n);
/* A tensor's values in a fresh host array (free it). */
float *nnt_download(eng_backend *be, const eng_tensor *t);

/* Standard normal values from a seed (Box-Muller: smooth, no exact zeros). */
void nnt_fill_normal(float *p, int64_t n, unsigned seed);
/* A tensor filled by nnt_fill_normal, and its host copy in *host (free it). */
eng_tensor nnt_host_tensor(eng_backend *be, eng_shape s, unsigned seed, float **host);
/* L = Σ y·r, summed in double. */
/* 2·frac(i·alpha + phase·β) − 1 for i < n in float64, rounded to float (β the Weyl sequence's, as
 * make_resnet_fixtures.py and make_regnet_fixtures.py fill inputs and upstream gradients). */
float *nnt_formula_fill(int64_t n, double alpha, int phase);
/* Σ of each buffer entry of p (BN running statistics), in entry order; *n their count. */
float *nnt_buffer_sums(eng_backend *be, const eng_params *p, int *n);
double nnt_loss(eng_backend *be, const eng_tensor *y, const float *r);

/* Every element of the analytic gradient `grad` of L = Σ y·r with respect to `param` (whose
 * host copy is `host`) against central differences with step 1e-2, `forward(be, arg)`
 * recomputing y. Returns the worst error relative to max(1, |fd|). */
double nnt_fd_error(eng_backend *be, void (*forward)(eng_backend *, void *), void *arg, const eng_tensor *param,
                    float *host, const eng_tensor *grad, const eng_tensor *y, const float *r);

/* The model of `model_yaml` set by model_init_formula, its trunk ("trunk.base_model._feature_blocks.*")
 * written to `path` as a torchvision state dict (torch.save's format), as a VISSL user loads
 * torchvision weights (APPEND_PREFIX). */
void nnt_write_torchvision_trunk(const char *model_yaml, const char *path);

#endif
