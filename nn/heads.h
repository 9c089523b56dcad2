/*
 * heads.h — VISSL's model heads (VISSL 0.1.5's vissl/models/heads/) on the model engine.
 *
 * One `head` type covers VISSL's registry names mlp, eval_mlp, siamese_concat_view and
 * swav_head. Internally every head is a short list of layers (Linear, BatchNorm, ReLU, Dropout,
 * L2-normalise) over N × F activations, each reading the output of an earlier layer or the
 * head's input, so swav's prototypes can all read the embedding.
 *
 * Memory follows resnet.h: all parameters live in one backend allocation, their gradients in
 * another with the same layout, BN running statistics in a third, packed in PyTorch's
 * state-dict order; each tensor is a named entry whose name is VISSL's module path relative to
 * the head (prepend "heads.I." for a model's state dict):
 *   mlp                 clf.{i}.weight / .bias (BN: + running_mean, running_var); i counts
 *                       nn.Sequential slots, ReLU and Dropout included (clf.0 Linear, clf.1 BN, …)
 *   eval_mlp            channel_bn.{weight,bias,running_mean,running_var}, then clf.clf.{i}.*
 *   swav_head           projection_head.{i}.*, prototypes{j}.weight (no bias)
 *   siamese_concat_view no entries
 * num_batches_tracked is not kept (VISSL's WEIGHTS_INIT skips it by default).
 *
 * head_plan() allocates every activation for one input shape; forward/backward then allocate
 * nothing. Backward follows nn.h: parameter gradients and dx ACCUMULATE, dx NULL = skip.
 * Deliberate differences from VISSL: MLP's torch.squeeze is not applied (an N = 1 batch stays
 * 1 × F), and a single-element input list is simply the input.
 */
#ifndef SELFSUP_HEADS_H
#define SELFSUP_HEADS_H

#include "nn.h"
#include "params.h"

#include <stdbool.h>
#include <stdint.h>

#define HEAD_MAX_DIMS 16
#define HEAD_MAX_PROTOTYPES 16
#define HEAD_BN_EPS 1e-5      /* HEAD.BATCHNORM_EPS's default */
#define HEAD_BN_MOMENTUM 0.1  /* HEAD.BATCHNORM_MOMENTUM's default */
#define HEAD_DROPOUT_P 0.5f   /* nn.Dropout() */

typedef enum { HEAD_MLP, HEAD_EVAL_MLP, HEAD_SIAMESE_CONCAT_VIEW, HEAD_SWAV } head_type;

typedef struct {
    head_type type;
    int64_t dims[HEAD_MAX_DIMS]; /* mlp, eval_mlp, swav_head */
    int ndims;
    bool use_bn, use_relu, use_dropout; /* use_relu/use_dropout: mlp and eval_mlp */
    bool skip_last_layer_relu_bn;       /* mlp: the last Linear stands alone (default false) */
    bool use_bias;                      /* mlp, swav_head (VISSL default true) */
    int64_t in_channels;                /* eval_mlp */
    int num_towers;                     /* siamese_concat_view */
    int64_t num_clusters[HEAD_MAX_PROTOTYPES]; /* swav_head */
    int nclusters;
    bool return_embeddings, skip_last_bn, normalize_feats; /* swav_head (VISSL defaults: true) */
    double bn_eps, bn_momentum;         /* every BatchNorm's: HEAD.BATCHNORM_EPS, HEAD.BATCHNORM_MOMENTUM */
} head_options;

/* VISSL's defaults for a type: use_bias, return_embeddings, skip_last_bn, normalize_feats on; BN
 * eps 1e-5 and momentum 0.1. */
head_options head_defaults(head_type type);
/* "mlp", "eval_mlp", "siamese_concat_view", "swav_head" → type; -1 when unknown. */
int head_type_by_name(const char *name);

/* One named tensor of a head (params.h). `grad` is set for parameters only. */
typedef eng_entry head_entry;
typedef eng_entry_kind head_kind;
#define HEAD_PARAM ENG_PARAM
#define HEAD_BUFFER ENG_BUFFER

typedef struct head head;

/* Build a head and initialise it (head_init). NULL with *err for impossible options.
 * mlp is VISSL's fixed MLP (vissl/models/heads/mlp.py): every Linear reads the previous one's width,
 * ReLU or not (0.1.5 moved last_dim on only with use_relu, which broke any >2-element dims
 * without ReLU), and skip_last_layer_relu_bn leaves the BN/ReLU/Dropout off after the last
 * Linear. Its default here is false, where later VISSL's is true: the 0.1.5 configs this
 * project reads (e.g. SimCLR's ["mlp", {dims: [2048, 2048], use_relu: true}]) mean the ReLU
 * to be there. */
head *head_new(eng_backend *be, const head_options *opt, uint64_t seed, char **err);
void head_free(eng_backend *be, head *h);

/* PyTorch's defaults: Linear weight and bias U(±1/√in_features) (kaiming_uniform a=√5), drawn
 * from rng (RNG_PURPOSE_MODEL_INIT, seed, sample index = parameter number); BN weight 1, bias 0,
 * running mean 0, var 1. */
void head_init(eng_backend *be, head *h, uint64_t seed);
/* Test hook: the closed formula of tests/golden/make_heads_fixtures.py (Weyl sequence u(i,k) as
 * in resnet_init_formula; linear weight √(3/in)·(2u−1), 1-D ".weight" 1+0.25(2u−1), ".bias"
 * 0.1(2u−1), running_mean 0.1(2u−1), running_var 1+0.5u; k numbers parameters and buffers
 * separately). */
void head_init_formula(eng_backend *be, head *h);

int head_entry_count(const head *h);
const head_entry *head_entry_at(const head *h, int i);
eng_tensor head_params(const head *h);  /* the whole buffers as 1-D views (0 elements: base NULL) */
eng_tensor head_grads(const head *h);
eng_tensor head_buffers(const head *h);
int64_t head_param_count(const head *h);
void head_zero_grad(eng_backend *be, head *h);
/* The options the head was built with. */
const head_options *head_opts(const head *h);
/* The head's named-tensor table (see resnet_param_table: the same re-homing rules). */
eng_params *head_param_table(head *h);

/* Allocate activations for input `in` (N × F; eval_mlp also N × C × H × W). Same shape again does
 * nothing. Returns 0, or -1 with *err for a shape the head cannot take (features that are not
 * its in_features, rows that are not whole towers); nothing is then planned. */
int head_plan(eng_backend *be, head *h, const eng_shape *in, char **err);
/* Shape of output 0 for an input shape (after head_plan on it). */
eng_shape head_output_shape(const head *h);

/* Forward over x (the planned shape). train: batch statistics, running-stat update, dropout
 * with a fresh mask (the head's step counter advances). Returns output 0. */
const eng_tensor *head_forward(eng_backend *be, head *h, const eng_tensor *x, bool train);
/* mlp / eval_mlp / siamese: 1 output; swav: [emb if return_embeddings], scores_0, …. */
int head_output_count(const head *h);
const eng_tensor *head_output(const head *h, int i);
/* Backward of the last training forward. dout[i] is output i's gradient (dout itself or any
 * element NULL = zero); dx (NULL: skip) and parameter gradients accumulate. */
void head_backward(eng_backend *be, head *h, const eng_tensor *const *dout, const eng_tensor *dx);
/* The dropout counter (training forwards so far): set it to resume a run bit-exactly. */
uint64_t head_step(const head *h);
void head_set_step(head *h, uint64_t step);
/* SyncBN: the head's batch norms train over the ranks of `across` (nn.h; NULL: this rank's batch). */
void head_set_batchnorm_reducer(head *h, const eng_reducer *across);

/* ---- sequential head lists (VISSL runs MODEL.HEAD.PARAMS in order) ----------------------- */

/* Each head feeds output 0 to the next; the list's outputs are the last head's. */
typedef struct {
    head **heads;
    int n;
    eng_tensor *grads; /* gradient of each link between heads (n − 1), planned */
    bool planned;
} head_list;

/* Build heads opts[0..n-1] (seed + i each). Returns 0, or -1 with *err (nothing kept). */
int head_list_new(eng_backend *be, head_list *l, const head_options *opts, int n, uint64_t seed, char **err);
void head_list_free(eng_backend *be, head_list *l);
/* head_plan along the list: 0, or -1 with *err and the index of the head that refused its
 * input in *failed. */
int head_list_plan(eng_backend *be, head_list *l, const eng_shape *in, int *failed, char **err);
const eng_tensor *head_list_forward(eng_backend *be, head_list *l, const eng_tensor *x, bool train);
int head_list_output_count(const head_list *l);
const eng_tensor *head_list_output(const head_list *l, int i);
void head_list_backward(eng_backend *be, head_list *l, const eng_tensor *const *dout, const eng_tensor *dx);
void head_list_zero_grad(eng_backend *be, head_list *l);
void head_list_set_batchnorm_reducer(head_list *l, const eng_reducer *across);

#endif
