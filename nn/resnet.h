/*
 * resnet.h — VISSL's ResNet / ResNeXt trunk (vissl/models/trunks/resnext.py, `resnet`) on the model engine.
 *
 * The layout is torchvision's (ResNet v1.5: the stride sits on the 3×3 conv): stem conv1 7×7/2
 * + bn1 + ReLU + max pool 3/2/1, layer1..4 of Bottleneck blocks (depth 50/101/152/200) or
 * BasicBlocks (18/34), a 1×1 conv + BN downsample where a block changes shape, then adaptive
 * average pool and flatten. `small_stem` is this project's extension for 28–64 px data: a 3×3
 * stride-1 conv1 and no max pool (res1 is then the stem's ReLU output).
 *
 * Memory, as docs/ARCHITECTURE.md explains: all parameters live in one backend allocation, all their
 * gradients in another with the same layout, the BN running statistics in a third; every
 * tensor is a view at an offset and carries its VISSL name (`_feature_blocks.layer1.0.conv1.weight`),
 * in torchvision's state-dict order, so checkpoint code maps names 1:1 (num_batches_tracked is
 * not kept: VISSL's WEIGHTS_INIT skips it by default). With NORM LayerNorm each norm is
 * torchvision's layer built with norm_layer = LayerNorm2d (GroupNorm(1, C)): its entries are
 * weight and bias only, it has no running statistics (the buffer allocation is empty) and it
 * computes the same in training and evaluation. resnet_plan() plans every convolution and
 * allocates all activation memory for one input shape; forward and backward then allocate
 * nothing.
 *
 * Backward: gradients accumulate into the gradient buffer (the caller zeroes it once per step,
 * resnet_zero_grad); it needs the activations of a preceding training-mode forward.
 */
#ifndef SELFSUP_RESNET_H
#define SELFSUP_RESNET_H

#include "nn.h"
#include "params.h"

#include <stdbool.h>
#include <stdint.h>

/* MODEL.TRUNK.TRUNK_PARAMS.RESNETS.NORM: what follows every convolution. */
typedef enum {
    RESNET_NORM_BATCH, /* "BatchNorm": BatchNorm2d (weight, bias, running_mean, running_var) */
    RESNET_NORM_LAYER, /* "LayerNorm": VISSL's LayerNorm2d = GroupNorm(1, C) (weight, bias only) */
} resnet_norm;

typedef struct {
    int depth;               /* 18, 34 (BasicBlock), 50, 101, 152, 200 (Bottleneck) */
    int width_multiplier;    /* ≥ 1: planes 64w, 128w, 256w, 512w */
    int groups;              /* ResNeXt cardinality (Bottleneck only), 1 = ResNet */
    int width_per_group;     /* 64 = ResNet */
    bool zero_init_residual; /* torchvision's meaning; VISSL 0.1.5's key has no effect */
    int layer4_stride;       /* 2 (default) or 1 */
    bool small_stem;         /* 3×3 stride-1 conv1, no max pool (extension) */
    int in_channels;         /* 3 (rgb/bgr), 1 (lab) */
    resnet_norm norm;        /* BatchNorm (default) or LayerNorm: every norm of the trunk, stem,
                                blocks and downsamples alike, as VISSL passes norm_layer */
    int checkpoint_splits;   /* activation checkpointing: 0 off, else the blocks in this many
                                segments, only each segment's output kept for the backward (the
                                rest recomputed); the trunk's inner features are then not kept */
} resnet_options;

/* "BatchNorm" / "LayerNorm" (the config's spelling) → resnet_norm; -1 when unknown. */
int resnet_norm_by_name(const char *name);

/* VISSL's defaults: depth 50, w 1, groups 1, 64 per group, stride 2, rgb. */
resnet_options resnet_defaults(void);

/* One named tensor of the trunk (params.h). `grad` is set for parameters only. */
typedef eng_entry resnet_entry;
typedef eng_entry_kind resnet_kind;
#define RESNET_PARAM ENG_PARAM
#define RESNET_BUFFER ENG_BUFFER

/* VISSL's feature names, in network order. */
typedef enum {
    RESNET_CONV1,   /* after the stem's ReLU (conv1_relu) */
    RESNET_RES1,    /* after the max pool */
    RESNET_RES2,    /* layer1 ... */
    RESNET_RES3,
    RESNET_RES4,
    RESNET_RES5,    /* ... layer4 */
    RESNET_RES5AVG, /* N × C × 1 × 1 */
    RESNET_FLATTEN, /* N × C */
    RESNET_NFEATURES
} resnet_feature_id;

typedef struct resnet resnet;

/* Build the trunk and allocate its parameters (initialised by resnet_init). NULL with *err for
 * an unsupported option. */
resnet *resnet_new(eng_backend *be, const resnet_options *opt, uint64_t seed, char **err);
void resnet_free(eng_backend *be, resnet *net);

/* VISSL's initialisation: PyTorch's defaults (conv kaiming_uniform a=√5, i.e. U(±1/√fan_in);
 * BN weight 1, bias 0, running mean 0, var 1), drawn from rng (RNG_PURPOSE_MODEL_INIT, `seed`,
 * sample index = parameter number). zero_init_residual zeroes each block's last BN weight. */
void resnet_init(eng_backend *be, resnet *net, uint64_t seed);

/* All named tensors in state-dict order (parameters and buffers interleaved). */
int resnet_entry_count(const resnet *net);
const resnet_entry *resnet_entry_at(const resnet *net, int i);
/* The whole buffers (one 1-D view each), e.g. for one all-reduce or one optimizer pass. */
eng_tensor resnet_params(const resnet *net);
eng_tensor resnet_grads(const resnet *net);
eng_tensor resnet_buffers(const resnet *net);
int64_t resnet_param_count(const resnet *net);
/* The options the trunk was built with (complexity.c derives the layer geometry from them). */
const resnet_options *resnet_get_options(const resnet *net);
/* Channels of the pooled feature: 2048·w (Bottleneck) or 512·w (BasicBlock). */
int64_t resnet_out_dim(const resnet *net);

/* Plan every conv and allocate all activations and their gradients for input N × C × H × W.
 * Calling it again with the same shape does nothing; another shape replans. */
void resnet_plan(eng_backend *be, resnet *net, const eng_shape *input);
/* The planned activation memory: activations, their gradients and the arenas (0 unplanned). */
size_t resnet_activation_bytes(const resnet *net);

/* Forward over x (the planned shape). train: batch statistics and a running-stat update
 * (momentum 0.1, eps 1e-5); else the running statistics. Returns the N × C flatten feature
 * (valid until the next forward). */
const eng_tensor *resnet_forward(eng_backend *be, resnet *net, const eng_tensor *x, bool train);
/* An intermediate output of the last forward, by VISSL feature name. After an evaluation
 * forward it may be in the backend's native layout (nn.h: eng_download reads it, most layers
 * do not) unless it was exposed. */
const eng_tensor *resnet_feature(const resnet *net, resnet_feature_id f);
/* The caller will read feature f with any layer: every forward leaves it in the logical
 * layout. (Evaluation keeps unexposed intermediate activations in the backend's native
 * layout, so a trunk runs without converting between its convolutions.) */
void resnet_expose(resnet *net, resnet_feature_id f);
/* SyncBN: every batch norm of the trunk trains over the ranks of `across` (nn.h; NULL: this
 * rank's batch alone, the default). */
void resnet_set_batchnorm_reducer(resnet *net, const eng_reducer *across);
/* Map "conv1", "res1", ..., "res5avg", "flatten" to the enum; -1 when unknown. */
int resnet_feature_by_name(const char *name);

/* Backward of the last (training) forward from dfeat (N × C, the flatten feature's gradient):
 * parameter gradients accumulate into the gradient buffer. */
void resnet_backward(eng_backend *be, resnet *net, const eng_tensor *dfeat);
/* The same, telling `ready` (NULL: no one) after each block which gradients are final. */
void resnet_backward_watched(eng_backend *be, resnet *net, const eng_tensor *dfeat, const eng_grads_ready *ready);
void resnet_zero_grad(eng_backend *be, resnet *net);

/* The trunk's named-tensor table, for a model that re-homes its tensors into one allocation
 * or shares them with a second trunk (params.h: eng_params_rehome, eng_params_share). After
 * that the trunk's own whole-buffer views (resnet_params, resnet_grads, resnet_buffers,
 * resnet_zero_grad) are empty: use the model's. */
eng_params *resnet_param_table(resnet *net);

#endif
