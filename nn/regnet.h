/*
 * regnet.h — VISSL's `regnet` trunk (vissl/models/trunks/regnet.py) on the model engine: ClassyVision's
 * RegNet / AnyNet (classy_vision/models/regnet.py, anynet.py), as VISSL wraps it.
 *
 * A RegNet is a stem and stages of identical blocks. Its widths come from four numbers: block j
 * of `depth` has the continuous width w_0 + j·w_a, which is snapped to w_0·w_m^k (k rounded) and
 * quantised to a multiple of 8; consecutive blocks of one width form a stage, every stage
 * starts with stride 2, and each stage's bottleneck width is made divisible by its group width.
 * regnet_expand does that arithmetic exactly as ClassyVision does (numpy float64, round half to
 * even), so a config's parameters give ClassyVision's network and its state-dict names.
 *
 * The blocks: ResBottleneckBlock (RegNetX/Y; 1×1 → grouped 3×3 → [squeeze-excitation] → 1×1,
 * projection shortcut where the shape changes, activation after the add), ResBasicBlock,
 * VanillaBlock, and ResBottleneckLinearBlock (RegNetZ: no activation after the add, a shortcut
 * only where the shape is kept). The stems: simple_stem_in (3×3/2), res_stem_in (7×7/2 + max
 * pool), res_stem_cifar (3×3/1). Activation ReLU or SiLU everywhere, SE's hidden layer included.
 *
 * VISSL's feature names (the trunk's _feature_blocks): conv1 (the stem), res2 … res{S+1} (stage
 * 1 … S, one name per ClassyVision `blockK`), avgpool (N × C × 1 × 1), flatten (N × C). State-dict
 * names are VISSL's, e.g. `_feature_blocks.conv1.stem.0.weight`,
 * `_feature_blocks.res2.block1-0.f.se.excitation.0.bias`. Memory, planning and the backward's
 * conventions are resnet.h's (unit.h's bricks and planner).
 */
#ifndef SELFSUP_REGNET_H
#define SELFSUP_REGNET_H

#include "nn.h"
#include "params.h"
#include "unit.h"

#include <stdbool.h>
#include <stdint.h>

enum { REGNET_MAX_STAGES = 12 };

typedef enum { REGNET_STEM_RES_CIFAR, REGNET_STEM_RES_IN, REGNET_STEM_SIMPLE_IN } regnet_stem;
typedef enum {
    REGNET_VANILLA_BLOCK,
    REGNET_RES_BASIC_BLOCK,
    REGNET_RES_BOTTLENECK_BLOCK,
    REGNET_RES_BOTTLENECK_LINEAR_BLOCK,
} regnet_block;

/* ClassyVision's RegNetParams (from_config's keys and defaults). */
typedef struct {
    int depth;
    int w_0;
    double w_a, w_m;
    int group_width;
    double bottleneck_multiplier; /* 1.0 */
    regnet_stem stem_type;        /* simple_stem_in */
    int stem_width;               /* 32 */
    regnet_block block_type;      /* res_bottleneck_block */
    unit_act activation;          /* relu (or silu) */
    bool use_se;                  /* true */
    double se_ratio;              /* 0.25 */
    double bn_epsilon, bn_momentum; /* 1e-5, 0.1 */
    int checkpoint_splits;        /* activation checkpointing, as resnet_options' */
} regnet_options;

/* The stages get_expanded_params yields: width, depth, group width, bottleneck multiplier. */
typedef struct {
    int n;
    int64_t width[REGNET_MAX_STAGES], depth[REGNET_MAX_STAGES], group_width[REGNET_MAX_STAGES];
    double bottleneck[REGNET_MAX_STAGES];
} regnet_stages;

/* RegNetParams' defaults; depth, w_0, w_a, w_m and group_width are 0 (to be given). */
regnet_options regnet_defaults(void);
/* A ClassyVision preset ("regnet_y_400mf" … "regnet_y_256gf", "regnet_x_*", "regnet_z_*") into *o
 * (on top of regnet_defaults); -1 when there is none of that name. */
int regnet_preset(const char *name, regnet_options *o);
/* The presets' names, NULL-terminated (for messages). */
const char *const *regnet_preset_names(void);
/* "simple_stem_in" … / "res_bottleneck_block" … / "relu" | "silu" (any case, as ClassyVision's
 * .upper()) → the enum; -1 when unknown. */
int regnet_stem_by_name(const char *name);
int regnet_block_by_name(const char *name);
int regnet_activation_by_name(const char *name);

/* The stages of o. 0, or -1 with *err for parameters RegNetParams refuses (w_a < 0, w_0 ≤ 0 or
 * not a multiple of 8, w_m ≤ 1, depth < 1, group_width < 1) or more than REGNET_MAX_STAGES. */
int regnet_expand(const regnet_options *o, regnet_stages *st, char **err);

/* Features: 0 conv1, 1 … S res2 … res{S+1}, S + 1 avgpool, S + 2 flatten (network order). */
int regnet_feature_count(const regnet_stages *st);
int regnet_feature_by_name(const regnet_stages *st, const char *name);
/* The name of feature f ("res3"), into buf. */
const char *regnet_feature_name(const regnet_stages *st, int f, char *buf, size_t len);

typedef struct regnet regnet;

/* Build the trunk, initialised as ClassyVision's init_weights (regnet_init). NULL with *err for
 * impossible options. */
regnet *regnet_new(eng_backend *be, const regnet_options *o, uint64_t seed, char **err);
void regnet_free(eng_backend *be, regnet *net);
/* ClassyVision's init_weights: conv weights N(0, √(2/fan_out)), fan_out = k·k·out channels; BN
 * weight 1, bias 0; SE's biases keep PyTorch's default U(±1/√fan_in); running mean 0, var 1.
 * Drawn from rng (RNG_PURPOSE_MODEL_INIT, seed, sample index = parameter number). */
void regnet_init(eng_backend *be, regnet *net, uint64_t seed);

eng_params *regnet_param_table(regnet *net);
const regnet_options *regnet_get_options(const regnet *net);
const regnet_stages *regnet_get_stages(const regnet *net);
int64_t regnet_out_dim(const regnet *net);

/* As resnet_plan / resnet_forward / resnet_feature / resnet_backward. */
void regnet_plan(eng_backend *be, regnet *net, const eng_shape *input);
size_t regnet_activation_bytes(const regnet *net);
const eng_tensor *regnet_forward(eng_backend *be, regnet *net, const eng_tensor *x, bool train);
const eng_tensor *regnet_feature(const regnet *net, int f);
/* The caller will read feature f with any layer: every forward leaves it logical. (Evaluation
 * keeps the other activations in the backend's native layout, as resnet_expose says.) */
void regnet_expose(regnet *net, int f);
void regnet_backward(eng_backend *be, regnet *net, const eng_tensor *dfeat);
void regnet_backward_watched(eng_backend *be, regnet *net, const eng_tensor *dfeat, const eng_grads_ready *ready);
/* Whether the backward also computes the gradient of the trunk's input: off by default, as
 * training has no use for it; set before planning. regnet_input_grad: that gradient after
 * regnet_backward (NULL when off). */
void regnet_set_input_grad(eng_backend *be, regnet *net, bool on);
const eng_tensor *regnet_input_grad(const regnet *net);
void regnet_set_batchnorm_reducer(regnet *net, const eng_reducer *across);

#endif
