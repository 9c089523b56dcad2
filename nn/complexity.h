/*
 * complexity.h — FLOPs, parameters and activations per layer, as VISSL's model-complexity hook
 * reports them (MODEL.MODEL_COMPLEXITY.COMPUTE_COMPLEXITY, INPUT_SHAPE [3, 224, 224]).
 *
 * VISSL's SSLModelComplexityHook calls ClassyVision's profiler (classy_vision/generic/profiler.py:
 * compute_flops, compute_activations, count_params) on the whole model with ONE zero image in
 * eval mode. Its rules, followed here exactly:
 *   - a row per CALL of a leaf module, in forward order (torchvision's Bottleneck calls its one
 *     ReLU module three times, so it counts three times); the residual add and functional ops
 *     (swav's L2 normalisation) are not modules and count nothing;
 *   - FLOPs are multiply-adds, not 2×: Conv2d N·Cin·Cout·KH·KW·OH·OW/groups with
 *     OH = int((H + 2·pad − K)/stride + 1); Linear N·(weights + biases); BatchNorm1d/2d
 *     2·numel(input); ReLU and Dropout numel(input); MaxPool2d/AvgPool2d
 *     N·C·OH·OW·KH·KW with OH = 1 + int((H + 2·pad − K)/stride); AdaptiveAvgPool2d
 *     N·C·OH·OW·(H − OH + 1)·(W − OW + 1) (NotImplementedError when OH > H or OW > W);
 *     VISSL's Flatten and Identity 0; torch.flatten is a function (no row);
 *   - activations count only convolution outputs (numel);
 *   - parameters are every parameter of the model (count_params), called or not: a module the
 *     forward never calls (a feature extractor's trunk after its deepest pooled layer, the heads
 *     of EXTRACT_TRUNK_FEATURES_ONLY) gets a row of kind "uncalled" with 0 FLOPs.
 * Layers the profiler cannot count make it raise NotImplementedError, and VISSL then logs that
 * the FLOPs were skipped: LayerNorm2d (a GroupNorm subclass not in its list),
 * siamese_concat_view and AdaptiveMaxPool2d (a feature extractor's pool op). Their rows carry ENG_COST_UNKNOWN FLOPs, and so does the total.
 *
 * Everything is computed from the layer geometry (options, parameter shapes, input shape); no
 * network runs. Names are VISSL's module paths: "_feature_blocks.layer1.0.conv1" for the trunk,
 * relative to the head for heads ("clf.0"; prepend "heads.I." for a model).
 */
#ifndef SELFSUP_NN_COMPLEXITY_H
#define SELFSUP_NN_COMPLEXITY_H

#include "heads.h"
#include "nn.h"
#include "resnet.h"
#include "trunk.h"

#include <stdint.h>

#define ENG_COST_UNKNOWN (-1) /* FLOPs the profiler cannot count (VISSL skips them) */

typedef struct {
    const char *name; /* owned (freed by eng_costs_free) */
    const char *kind; /* static: "conv", "batchnorm", "layernorm", "relu", "maxpool", "avgpool",
                         "flatten", "linear", "dropout", "siamese_concat_view", "identity",
                         "uncalled" */
    int64_t flops, params, activations;
} eng_layer_cost;

/* The trunk's rows for an input N × C × H × W (VISSL's hook: N = 1, 3 × 224 × 224). Returns 0,
 * or -1 with *err when the input cannot pass (too small, wrong channels). */
int resnet_costs(const resnet *net, const eng_shape *input, eng_layer_cost **out, int *n, char **err);
/* The trunk as VISSL's get_trunk_forward_outputs runs it for a feature extractor: the blocks up to
 * and including feature `last` (the deepest requested), row names prefixed with `prefix` (NULL:
 * none); feat[0..last] (may be NULL) receive the feature shapes. */
int resnet_costs_upto(const resnet *net, const eng_shape *input, const char *prefix, resnet_feature_id last,
                      eng_shape *feat, eng_layer_cost **out, int *n, char **err);
/* The same for a RegNet (ClassyVision's module names and call order; SiLU, in none of the
 * profiler's lists, has unknown FLOPs; Sigmoid counts numel(x)), features numbered as regnet.h's. */
int regnet_costs_upto(const regnet *net, const eng_shape *input, const char *prefix, int last, eng_shape *feat,
                      eng_layer_cost **out, int *n, char **err);
/* The same for an AlexNet (VISSL's _feature_blocks; LocalResponseNorm, in none of the profiler's
 * lists, has unknown FLOPs; DeepCluster's Sobel convolutions count their fixed parameters). */
int alexnet_costs_upto(const alexnet *net, const eng_shape *input, const char *prefix, int last, eng_shape *feat,
                       eng_layer_cost **out, int *n, char **err);
/* The same for an EfficientNet (Conv2dSamePadding's own flops(); VISSL's Wrap(swish) modules have
 * unknown FLOPs; swish, sigmoid and drop-connect inside the blocks are functions: no rows). */
int efficientnet_costs_upto(const efficientnet *net, const eng_shape *input, const char *prefix, int last,
                            eng_shape *feat, eng_layer_cost **out, int *n, char **err);
/* Whichever trunk t is. */
int trunk_costs_upto(const trunk *t, const eng_shape *input, const char *prefix, int last, eng_shape *feat,
                     eng_layer_cost **out, int *n, char **err);
/* AvgPool2d / MaxPool2d on x (N × C × H × W): N·C·OH·OW·KH·KW, OH = 1 + int((H + 2p − KH)/s) (the
 * profiler's floor size whatever ceil_mode; stride 0 means the kernel, PyTorch's default). */
int64_t eng_pool_flops(const eng_pool_desc *d, const eng_shape *x);
/* AdaptiveAvgPool2d(out_hw) on x: N·C·OH·OW·(H − OH + 1)·(W − OW + 1), or ENG_COST_UNKNOWN when
 * the output is larger than the input (the profiler's NotImplementedError). */
int64_t eng_adaptive_avgpool_flops(const int64_t out_hw[2], const eng_shape *x);
/* A head's rows for its input (N × F, or N × C × H × W for eval_mlp). Returns 0 or -1 with *err. */
int head_costs(const head *h, const eng_shape *in, eng_layer_cost **out, int *n, char **err);

/* Sums (name "total", kind "total"); FLOPs are ENG_COST_UNKNOWN when any row's are. */
eng_layer_cost eng_costs_total(const eng_layer_cost *rows, int n);
void eng_costs_free(eng_layer_cost *rows, int n);

#endif
