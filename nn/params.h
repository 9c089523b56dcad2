/*
 * params.h — a model's named tensors: parameters, their gradients and buffers (BN running
 * stats), each kind packed into ONE backend allocation.
 *
 * A model (resnet.c, heads.c) declares its tensors in state-dict order with eng_params_add,
 * which only reserves a byte range; eng_params_alloc then makes the three allocations and
 * points every entry at its range. One allocation per kind is the engine's rule (docs/ARCHITECTURE.md): one
 * all-reduce over the gradients, one optimizer pass over the parameters, one checkpoint write.
 * The names are VISSL's, so checkpoint import and export map entries 1:1.
 */
#ifndef SELFSUP_NN_PARAMS_H
#define SELFSUP_NN_PARAMS_H

#include "nn.h"
#include "rng.h"

typedef enum { ENG_PARAM, ENG_BUFFER } eng_entry_kind;

typedef struct {
    const char *name;    /* owned */
    eng_entry_kind kind;
    eng_tensor value;
    eng_tensor grad;     /* parameters only (base NULL for buffers) */
    int64_t fan_in;      /* what the model's default init needs (0 when unused) */
    bool fixed;          /* a buffer the architecture sets, never learned (DeepCluster's Sobel
                            filters): a weights file may leave it out (weights.h) */
} eng_entry;

typedef struct {
    eng_entry *entries;
    int nentries, cap;
    void *param_base, *grad_base, *buf_base; /* NULL while empty */
    size_t param_bytes, buf_bytes;
} eng_params;

/* What a backward says of its gradients as it goes: ready(ctx, first) tells that the gradients
 * of entries [first, the table's end) will not be written again by this backward, with first
 * decreasing from call to call. DDP's bucketed all-reduce (the trainer) starts on a bucket as
 * soon as its gradients are final, while the backward goes on with earlier layers. */
typedef struct {
    void (*ready)(void *ctx, int first);
    void *ctx;
} eng_grads_ready;

/* Tell r (NULL: no one) that entries [first, end) are final. */
static inline void eng_grads_tell(const eng_grads_ready *r, int first)
{
    if (r)
        r->ready(r->ctx, first);
}

/* Reserve a tensor named by fmt; returns its entry index. */
int eng_params_add(eng_backend *be, eng_params *p, eng_entry_kind kind, eng_shape s, int64_t fan_in,
                   const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Make the allocations and point the entries at them. */
void eng_params_alloc(eng_backend *be, eng_params *p);
void eng_params_free(eng_backend *be, eng_params *p);

/* The whole allocations as 1-D views (0 elements and base NULL when empty). */
eng_tensor eng_params_values(const eng_params *p);
eng_tensor eng_params_grads(const eng_params *p);
eng_tensor eng_params_buffers(const eng_params *p);
int64_t eng_params_count(const eng_params *p);
void eng_params_zero_grad(eng_backend *be, eng_params *p);

/* Move `part`'s tensors into `into`, whose entries first, first+1, … were declared (same
 * kinds and shapes, in order) and allocated: the values are copied, part's entries then point
 * into into's allocations, and part's own allocations are freed (it keeps its names and no
 * memory of its own). Returns first + part's entry count. This is how a model gathers its
 * trunk's and heads' tensors into one allocation per kind. */
int eng_params_rehome(eng_backend *be, eng_params *part, const eng_params *into, int first);
/* Point every entry of `view` at the same entry of `master` (same names and shapes) and free
 * view's allocations: two modules, one set of weights and gradients. */
void eng_params_share(eng_backend *be, eng_params *view, const eng_params *master);

/* One entry's initial values into h (its element count), drawn from r if at all. */
typedef void (*eng_init_values_fn)(const eng_entry *e, rng_stream *r, float *h);
/* Every entry set by fn, uploaded. Entry i draws from its own stream (RNG_PURPOSE_MODEL_INIT,
 * seed, sample index = the number of parameters before it), so a model's initial values do not
 * depend on how its entries are drawn or on which were drawn at all. */
void eng_params_init_with(eng_backend *be, eng_params *p, uint64_t seed, eng_init_values_fn fn);

/* A host buffer big enough for the largest entry (for initialisation; free it). */
float *eng_params_host_scratch(const eng_params *p);
bool eng_name_ends_with(const char *name, const char *tail);

/* frac(i·α + k·β) with α, β the plastic-number constants: the test formulas that set weights
 * identically in C and in the tests/golden scripts (same float64 operations, so both sides
 * round to the same float32). i = element, k = tensor number. */
double eng_params_weyl(int64_t i, int k);
/* Every entry set by the convolutional trunks' test formula on that sequence (documented in
 * tests/golden/make_resnet_fixtures.py): conv weights √(6/fan_in)·(2u−1), 1-D ".weight"
 * 1 + 0.25·(2u−1), other 1-D parameters 0.1·(2u−1), running means 0.1·(2u−1), running variances
 * 1 + 0.5·u; parameters and buffers numbered separately, in entry order. */
void eng_params_init_formula(eng_backend *be, eng_params *p);

#endif
