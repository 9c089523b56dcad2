/*
 * efficientnet.h — VISSL's `efficientnet` trunk (vissl/models/trunks/efficientnet.py) on the model
 * engine: ClassyVision's EfficientNet (classy_vision/models/efficientnet.py) as VISSL wraps it.
 *
 * An EfficientNet is a stem (3×3/2 conv, BN, swish), seven stages of MBConv blocks and a head
 * (1×1 conv to 1280·width, BN, swish), then average pooling and dropout. An MBConv block is an
 * optional 1×1 expansion (conv, BN, swish; when expand_ratio ≠ 1), a depthwise k×k conv (BN,
 * swish), squeeze-excitation (pool, 1×1 conv with bias, swish, 1×1 conv with bias, sigmoid,
 * scale), a 1×1 projection (conv, BN, no activation), and — where stride is 1 and the width is
 * kept — drop-connect and the skip add. Widths scale by width_coefficient, rounded to a multiple
 * of width_divisor (never down by more than 10 %); repeats by ceil(depth_coefficient · r).
 * Every convolution pads as TensorFlow's "same" (ClassyVision's Conv2dSamePadding): the
 * padding that gives ceil(size / stride) outputs, the odd pixel at the bottom/right. ClassyVision
 * fixes it from the model's `resolution` and asserts every input has that size; selfsup works it
 * out from the input it is planned for, so at `resolution` both agree and other sizes (multi-crop's
 * small crops) also run.
 *
 * Drop-connect keeps a sample's residual branch with probability 1 − rate·i/blocks (block i,
 * ClassyVision's linear rule) and scales it by 1/keep; dropout (p = the preset's dropout_rate)
 * acts on the pooled features. Both only in training, with the engine's counter-based dropout
 * masks (eng_dropout), keyed by the backend's seed, the train step and the trunk's view number
 * (efficientnet_set_step) — not PyTorch's generator, so masks differ from VISSL's while their
 * law is the same, and a resumed run draws the same ones.
 *
 * VISSL's feature names: conv1 (the stem), block0 … block{B−1} (each MBConv block, B = 16 for
 * B0 … 55 for B7), conv_final (the head), avgpool (N × C × 1 × 1), flatten (N × C), dropout
 * (N × C: what a head reads by default). State-dict names are VISSL's,
 * `_feature_blocks.conv1.0.weight` (conv_stem), `_feature_blocks.conv1.1.running_mean` (bn0),
 * `_feature_blocks.block3.depthwise_conv.weight`, `_feature_blocks.block3.se_reduce.bias`,
 * `_feature_blocks.conv_final.0.weight` (conv_head), `_feature_blocks.conv_final.1.weight` (bn1).
 * Memory, planning and the backward's conventions are resnet.h's (unit.h's planner).
 */
#ifndef SELFSUP_EFFICIENTNET_H
#define SELFSUP_EFFICIENTNET_H

#include "nn.h"
#include "params.h"

#include <stdbool.h>
#include <stdint.h>

enum { EFFICIENTNET_MAX_BLOCKS = 64 };

/* ClassyVision's EfficientNet(...) arguments: a preset's EfficientNetParams (model_version
 * B0 … B7) and the keys VISSL passes through TRUNK_PARAMS.EFFICIENT_NETS. */
typedef struct {
    double width_coefficient, depth_coefficient; /* EfficientNetParams */
    int resolution;
    double dropout_rate;
    double bn_momentum, bn_epsilon; /* 0.01, 1e-3 (ClassyVision's efficientnet_bN) */
    int width_divisor;              /* 8 */
    int min_width;                  /* 0: None (= width_divisor) */
    double drop_connect_rate;       /* 0.2 */
    bool use_se;                    /* true */
} efficientnet_options;

/* ClassyVision's efficientnet_bN keyword values, with B0's EfficientNetParams. */
efficientnet_options efficientnet_defaults(void);
/* EfficientNetParams of model_version "B0" … "B7" into *o; -1 when there is none of that name. */
int efficientnet_preset(const char *version, efficientnet_options *o);
/* ClassyVision's scale_width / scale_depth. */
int64_t efficientnet_scale_width(int64_t filters, const efficientnet_options *o);
int64_t efficientnet_scale_depth(int64_t repeats, const efficientnet_options *o);
/* How many MBConv blocks o builds (B). */
int efficientnet_block_count(const efficientnet_options *o);
/* Block b's expand ratio and stride. */
void efficientnet_block_geometry(const efficientnet_options *o, int b, int64_t *expand, int64_t *stride);
/* 0, or -1 with *err for options ClassyVision refuses or that make no network. */
int efficientnet_check(const efficientnet_options *o, char **err);

/* Features: 0 conv1, 1 … B block0 … block{B−1}, B + 1 conv_final, B + 2 avgpool, B + 3 flatten,
 * B + 4 dropout. */
int efficientnet_feature_count(const efficientnet_options *o);
int efficientnet_feature_by_name(const efficientnet_options *o, const char *name);
const char *efficientnet_feature_name(const efficientnet_options *o, int f, char *buf, size_t len);

typedef struct efficientnet efficientnet;

/* Build and initialise as ClassyVision's init_weights (efficientnet_init). NULL with *err for
 * options efficientnet_check refuses. */
efficientnet *efficientnet_new(eng_backend *be, const efficientnet_options *o, uint64_t seed, char **err);
void efficientnet_free(eng_backend *be, efficientnet *net);
/* ClassyVision's init_weights: conv weights N(0, √(2/fan_out)), fan_out = k·k·out channels, conv
 * biases 0, BN weight 1, bias 0; running mean 0, var 1. Drawn from rng (RNG_PURPOSE_MODEL_INIT,
 * seed, sample index = parameter number). */
void efficientnet_init(eng_backend *be, efficientnet *net, uint64_t seed);

eng_params *efficientnet_param_table(efficientnet *net);
const efficientnet_options *efficientnet_get_options(const efficientnet *net);
int64_t efficientnet_out_dim(const efficientnet *net);

/* As resnet_plan / resnet_forward / resnet_feature / resnet_backward; the backward takes the
 * gradient of the last feature (dropout). */
void efficientnet_plan(eng_backend *be, efficientnet *net, const eng_shape *input);
size_t efficientnet_activation_bytes(const efficientnet *net);
const eng_tensor *efficientnet_forward(eng_backend *be, efficientnet *net, const eng_tensor *x, bool train);
const eng_tensor *efficientnet_feature(const efficientnet *net, int f);
/* The caller will read feature f with any layer: every forward leaves it logical. (Evaluation
 * keeps the other activations in the backend's native layout, as resnet_expose says.) */
void efficientnet_expose(efficientnet *net, int f);
void efficientnet_backward(eng_backend *be, efficientnet *net, const eng_tensor *dfeat);
/* Whether the backward also computes the gradient of the trunk's input: off by default, as
 * training has no use for it; set before planning. efficientnet_input_grad: that gradient after
 * efficientnet_backward (NULL when off). */
void efficientnet_set_input_grad(eng_backend *be, efficientnet *net, bool on);
const eng_tensor *efficientnet_input_grad(const efficientnet *net);
void efficientnet_set_batchnorm_reducer(efficientnet *net, const eng_reducer *across);
/* The train step and the trunk's view number (the model's trunks of one network, one per crop
 * shape), which key the dropout masks (0, 0 until set). */
void efficientnet_set_step(efficientnet *net, uint64_t step, uint64_t view);

#endif
