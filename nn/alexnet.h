/*
 * alexnet.h — VISSL's five AlexNet trunks (vissl/models/trunks/alexnet_*.py) on the model engine:
 * the networks of the classic self-supervised benchmarks and of the Caffe2 models VISSL converts.
 *
 * Each is nine feature blocks, VISSL's `_feature_blocks` ModuleList, named conv1, pool1, conv2,
 * pool2, conv3, conv4, conv5, pool5, flatten. A conv block is Conv2d (with bias) → [BatchNorm2d]
 * → ReLU; a pool block is MaxPool2d(3, 2) with, for two variants, a LocalResponseNorm(5, 1e-4,
 * 0.75) before (bvlc) or after (jigsaw) it. What differs:
 *
 *   variant        input          conv1            widths (conv1 … conv5)   BN      groups  LRN
 *   bvlc           RGB            11×11 /4 pad 0   96 256 384 384 256        no      2       before pool
 *   colorization   L of LAB (1)   11×11 /4 pad 0   96 256 384 384 256        yes     2       no
 *   deepcluster    Sobel (3 → 2)  11×11 /4 pad 2   96 256 384 384 256        yes     1       no
 *   jigsaw         RGB            11×11 /2 pad 0   96 256 384 384 256        conv3-5 2       after pool
 *   rotnet         RGB            11×11 /4 pad 2   64 192 384 256 256        yes     1       no
 *
 * `groups` is conv2, conv4 and conv5's (conv3 is never grouped). DeepCluster's Sobel stage (a
 * fixed 1×1 grayscale convolution, then the two fixed 3×3 Sobel filters, both with bias) runs
 * before conv1; its weights are the trunk's `sobel.0.*` and `sobel.1.*` entries, kept as buffers
 * (they never learn, as VISSL's requires_grad=False) and set by alexnet_new, not by any init.
 * Colorization's model input is already the L channel (model.c takes channel 0 of the LAB image,
 * VISSL's torch.split(x, [1, 2], dim=1)[0]).
 *
 * The feature `pool5` is N × C × H × W and `flatten` the same numbers as N × (C·H·W): how wide
 * depends on the input size (6400 for bvlc at 224 px, 9216 at 227 px and for rotnet at 224 px). The smallest
 * input that every pool fits is alexnet_min_input; alexnet_plan refuses a smaller one.
 *
 * State-dict names are VISSL's, `_feature_blocks.<block>.<layer>.<tensor>`, e.g.
 * `_feature_blocks.0.0.weight` (conv1), `_feature_blocks.4.1.running_var` (conv3's BN) — the
 * names `extra_scripts/convert_caffe2_to_vissl_alexnet.py` writes for the Caffe2, DeepCluster and
 * RotNet models. Memory, planning and the backward's conventions are resnet.h's.
 */
#ifndef SELFSUP_ALEXNET_H
#define SELFSUP_ALEXNET_H

#include "nn.h"
#include "params.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    ALEXNET_BVLC,
    ALEXNET_COLORIZATION,
    ALEXNET_DEEPCLUSTER,
    ALEXNET_JIGSAW,
    ALEXNET_ROTNET,
} alexnet_variant;

enum { ALEXNET_NFEATURES = 9 };

/* The table above: each variant's five convolutions and where its LRNs sit. */
typedef struct {
    int64_t out, k, stride, pad, groups;
    bool bn;
} alexnet_conv;

typedef enum { ALEXNET_LRN_NONE, ALEXNET_LRN_BEFORE_POOL, ALEXNET_LRN_AFTER_POOL } alexnet_lrn;

typedef struct {
    const char *name;  /* MODEL.TRUNK.NAME */
    int64_t in;        /* the channels the trunk reads */
    bool sobel;        /* DeepCluster's fixed grayscale + Sobel stage before conv1 */
    alexnet_lrn lrn;   /* in pool1 and pool2 */
    alexnet_conv conv[5];
} alexnet_spec;

const alexnet_spec *alexnet_spec_of(alexnet_variant v);
/* Which conv (0 … 4) feature block b (0 … 7) is, or -1 for a pool block. */
int alexnet_block_conv(int b);

/* "alexnet_bvlc" … "alexnet_rotnet" (MODEL.TRUNK.NAME) → the variant; -1 when none. */
int alexnet_variant_by_name(const char *trunk_name);
const char *alexnet_variant_name(alexnet_variant v);
/* The channels the trunk reads: 1 for colorization (L), 3 otherwise. */
int64_t alexnet_in_channels(alexnet_variant v);
/* The smallest square input whose every pooling window fits. */
int64_t alexnet_min_input(alexnet_variant v);

/* Features 0 … 8 in network order: conv1, pool1, conv2, pool2, conv3, conv4, conv5, pool5, flatten. */
int alexnet_feature_by_name(const char *name);
const char *alexnet_feature_name(int f);

typedef struct alexnet alexnet;

/* Build and initialise as PyTorch initialises VISSL's modules (alexnet_init). */
alexnet *alexnet_new(eng_backend *be, alexnet_variant v, uint64_t seed);
void alexnet_free(eng_backend *be, alexnet *net);
/* PyTorch's defaults, which VISSL's AlexNets keep: conv weights and biases U(±1/√fan_in)
 * (kaiming_uniform with a = √5), BN weight 1, bias 0, running mean 0, var 1; Sobel's fixed values.
 * Drawn from rng (RNG_PURPOSE_MODEL_INIT, seed, sample index = parameter number). */
void alexnet_init(eng_backend *be, alexnet *net, uint64_t seed);
/* The test formula (params.h) on every entry but Sobel's, which keep their fixed values. */
void alexnet_init_formula(eng_backend *be, alexnet *net);

alexnet_variant alexnet_get_variant(const alexnet *net);
eng_params *alexnet_param_table(alexnet *net);
/* flatten's width at the planned input (0 before alexnet_plan). */
int64_t alexnet_out_dim(const alexnet *net);
/* 0, or -1 with *err when the input is not N × in_channels × H × W with H, W ≥ alexnet_min_input. */
int alexnet_check_input(alexnet_variant v, const eng_shape *input, char **err);

/* As resnet_plan / resnet_forward / resnet_feature / resnet_backward. alexnet_plan aborts on an
 * input alexnet_check_input refuses (check it first). */
void alexnet_plan(eng_backend *be, alexnet *net, const eng_shape *input);
size_t alexnet_activation_bytes(const alexnet *net);
const eng_tensor *alexnet_forward(eng_backend *be, alexnet *net, const eng_tensor *x, bool train);
const eng_tensor *alexnet_feature(const alexnet *net, int f);
/* The gradient of flatten (or of pool5: the same numbers). */
void alexnet_backward(eng_backend *be, alexnet *net, const eng_tensor *dfeat);
/* Whether the backward also computes the gradient of the trunk's input (through Sobel's fixed
 * filters for DeepCluster): off by default, as training has no use for it; set before planning.
 * alexnet_input_grad: that gradient after alexnet_backward (NULL when off). */
void alexnet_set_input_grad(eng_backend *be, alexnet *net, bool on);
const eng_tensor *alexnet_input_grad(const alexnet *net);
void alexnet_set_batchnorm_reducer(alexnet *net, const eng_reducer *across);

#endif
