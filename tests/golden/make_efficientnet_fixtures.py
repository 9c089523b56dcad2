#!/usr/bin/python3
"""make_efficientnet_fixtures.py — ClassyVision's EfficientNet, as VISSL's `efficientnet` trunk
wraps it, for the C EfficientNet trunk (tests/unit/test_efficientnet.c).

ClassyVision is not installed here, so its EfficientNet is re-stated below from
classy_vision/models/efficientnet.py (BLOCK_PARAMS, MODEL_PARAMS, scale_width, scale_depth,
calculate_output_image_size, Conv2dSamePadding, MBConvBlock, EfficientNet: the same module
classes, nesting and registration order, so state_dict() names and order are ClassyVision's), and
VISSL's wrapper (vissl/models/trunks/efficientnet.py, v0.1.5) from its mapping into
_feature_blocks: ("conv1", Sequential(conv_stem, bn0, Wrap(swish))), ("block0", the first
MBConvBlock) ... ("block{B-1}", the last), ("conv_final", Sequential(conv_head, bn1,
Wrap(swish))), ("avgpool", avg_pooling), ("flatten", Flatten(1)) and, only when the model has one
(dropout_rate > 0), ("dropout", nn.Dropout). The wrapper's forward gives block i (counted from 0
after the stem) drop-connect rate drop_connect_rate·i/B, as ClassyVision's own forward does.

One difference from VISSL, on purpose: VISSL's trunk has no `dropout` feature when the model's
dropout_rate is 0 (ClassyVision then sets model.dropout = None). No VISSL config can ask for that
(MODEL_PARAMS' eight presets all have dropout_rate ≥ 0.2, and VISSL takes nothing but
model_version), so selfsup's efficientnet.h always has the feature, the identity at rate 0. The
cases below with dropout_rate 0 (tiny, odd: deterministic training, test-only options) give its
values as flatten's; their complexity rows, which re-state what the profiler sees, have no
dropout row, as VISSL's module has none.

No weights are stored: every parameter, BN running statistic, input image and upstream gradient is
set by the closed formula of trunk_golden.py (make_resnet_fixtures.py's, the same constants; and
nn/params.c's eng_params_init_formula on the C side), a Weyl sequence computed in float64 and
rounded to float32. Let u(i, k) = frac(i·ALPHA + k·BETA) for flat element index i of tensor k:
  4-D conv weight (parameter k)  sqrt(6/fan_in)·(2u−1), fan_in = shape[1]·shape[2]·shape[3]
                                 (the depthwise convs: k·k; the SE convs are 4-D 1×1 convs)
  1-D parameter named *weight    1 + 0.25·(2u−1)                 (BN weight)
  other 1-D parameter            0.1·(2u−1)                      (BN bias, SE conv bias)
  running_mean / running_var     (k = buffer index) 0.1·(2u−1) / 1 + 0.5·u
  input image x                  2·frac(i·X_ALPHA) − 1, N × 3 × H × W (phase 0)
  upstream gradient r            2·frac(i·R_ALPHA) − 1, over the N × C last feature
Parameters are numbered in named_parameters() order, buffers in named_buffers() order
(num_batches_tracked left out), both from 0.

No input phase is chosen (no efficientnet_CASE_phase.npy): swish, sigmoid, zero padding,
convolution and BN are all smooth, there is no ReLU or max-pool whose decision float32 rounding
could flip, so every input is as good as another and the input is phase 0.

Files (tests/golden/fixtures/nn/efficientnet_*):
  efficientnet_presets.txt   one line per parameter set: ClassyVision's MODEL_PARAMS B0 ... B7 (each
                             with efficientnet_bN's other arguments: width_divisor 8, min_width
                             None) and a few custom sets (custom_*, below), each
                             "NAME key=value ...": width_coefficient depth_coefficient resolution
                             dropout_rate width_divisor min_width (0: None), then what
                             EfficientNet.__init__ builds from them: stem= (scale_width(32)),
                             head= (scale_width(1280)), inputs= outputs= repeats= (per
                             BLOCK_PARAMS stage: scaled input_filters, output_filters,
                             scale_depth(num_repeat); comma-separated), blocks= (B, MBConv blocks)
                             and params= (the trunk's parameter count: the model's less its fc).
  efficientnet_cases.txt     "CASE key=value ..." per case: width_coefficient depth_coefficient
                             resolution dropout_rate bn_momentum bn_epsilon width_divisor
                             min_width drop_connect_rate use_se (EfficientNet's arguments, the
                             first four its EfficientNetParams), n= size= (the input N × 3 × size
                             × size), blocks= (B) and params= (the trunk's parameter count).
  efficientnet_CASE_names.txt  "name kind shape" per state-dict entry (VISSL names, e.g.
                             _feature_blocks.block3.depthwise_conv.weight), kind param or buffer,
                             num_batches_tracked left out, shape comma-separated.
For the training cases (tiny, odd; dropout_rate and drop_connect_rate 0, so the train forward is
deterministic), computed in float64 on the model converted to double after the float32 formula
values were set (the exact answer to the float32 inputs and weights), stored as float32:
  efficientnet_CASE_feat_eval.npy   N × C last feature (flatten; dropout, where the C trunk has
                                    it, is the identity here), eval mode
  efficientnet_CASE_means_eval.npy  eval mode, for each feature conv1, block0, ..., block{B-1},
                                    conv_final in network order the per-channel mean over N, H, W
                                    of its output, concatenated into one 1-D array
  efficientnet_CASE_feat_train.npy  N × C last feature of one train-mode forward from the formula
                                    state (after the eval forward, which changes nothing)
  efficientnet_CASE_stats.npy       per BN layer (named_modules order, which is state-dict order)
                                    [Σ running_mean, Σ running_var] after that train forward
  efficientnet_CASE_grads.npy       per parameter (named_parameters order) [Σ g, Σ g²] of
                                    L = Σ feat·r after that train forward
  efficientnet_CASE_stem_grad.npy   the full gradient of _feature_blocks.conv1.0.weight
  efficientnet_CASE_dx.npy          the full gradient of L with respect to the input x
  efficientnet_CASE_grad_floor.npy  per parameter, torch float32's own error on grads, the
                                    largest under oneDNN's ISAS caps: max(|Σg − Σg*| / √Σg*²,
                                    |Σg² − Σg*²| / Σg*²) (test_resnet.c's measure). Except where
                                    Σg*² < ZERO_GRAD_SQ = 1e-20 (a gradient that is mathematically
                                    zero, see ZERO_GRAD_SQ): there the entry is torch float32's
                                    largest √Σg², an absolute size to hold the engine's √Σg² to
  efficientnet_tiny_vissl.torch     case tiny's float32 formula weights as a VISSL checkpoint
                                    ({"classy_state_dict": {"base_model": {"model": {"trunk":
                                    state_dict, "heads": {}}}}}, num_batches_tracked included,
                                    torch.save's zip format): loaded through WEIGHTS_INIT's rules it
                                    must reproduce efficientnet_tiny_feat_eval
For the preset case b0 (MODEL_PARAMS["B0"] with efficientnet_b0's arguments, 2 images of 224 px):
  efficientnet_b0_names.txt, efficientnet_b0_feat_eval.npy (2 × 1280, float64 reference, eval mode)
  efficientnet_b0_dx.npy     B0's input gradient in training (B0_TRAIN below: efficientnet_b0's
                             arguments but drop_connect_rate 0 and dropout_rate 0, so that no
                             random mask enters, and resolution 64, the size ClassyVision's
                             Conv2dSamePadding then asserts), 4 images of 64 px (input phase 0):
                             the full gradient of L = Σ feat·r with respect to the input
                             (4 × 3 × 64 × 64) after one train-mode forward, computed in float64
                             as the training cases' dx; torch float32's own error on it under
                             every cap of ISAS is asserted to be at most trunk_golden.DX_FLOOR_MAX
                             (2.5e-4)

Model complexity (what VISSL's SSLModelComplexityHook reports for the trunk: ClassyVision's
profiler, classy_vision/generic/profiler.py, on one zero image in eval mode). One file per case,
efficientnet_CASE_complexity.txt (tiny at 32 px, odd at 35 px, b0 at 224 px; N = 1). Each row
"name kind flops params activations", one per profiled module CALL in call order, then
"total - FLOPS PARAMS ACTIVATIONS" (FLOPS -1 when any row's is -1; PARAMS is the model's
parameter count: every parameter module is called). The profiler patches every module that is
a leaf OR has the method it computes (flops / activations), which here adds Conv2dSamePadding:
it is a leaf when it needs no padding, and otherwise holds its nn.ZeroPad2d as the child
`same_padding` and is profiled all the same. The rules (multiply-adds), by the layer type, which
the profiler reads from repr() (the class name: "Conv2dSamePadding", not "Conv2d"):
  Conv2dSamePadding   its own flops(): N·Cin·Cout·KH·KW·out_h·out_w/groups with out_h =
                      ceil(H/stride) fixed at construction (Python true division; asserted to be
                      an integer); the SE convs' bias is not counted. Activations: its own
                      activations(): numel(out). Kind conv.
  ZeroPad2d           in no list, no flops(): NotImplementedError, written -1 (so every
                      EfficientNet's FLOPs are unknown: the stem alone pads); called inside its
                      convolution, so its row comes just before that convolution's. Kind zeropad.
  BatchNorm2d         2·numel(x). Kind batchnorm.
  Wrap(swish)         VISSL's Wrap (repr "Wrap()"): in no list, no flops(): -1. Kind swish. The
                      MBConv blocks' own swish and sigmoid are functions (torch.sigmoid): no row.
  AdaptiveAvgPool2d   (1, 1) output: N·C·H·W (the trunk's avgpool and each block's se_avgpool,
                      called only when the block has squeeze-excitation). Kind avgpool.
  Flatten             VISSL's Flatten.flops() = 0. Kind flatten.
  Dropout             numel(x) (only where dropout_rate > 0: b0). Kind dropout.
Activations: numel of the convolutions' outputs only. Params: the module's own (SE convs: weight
+ bias). The SE's `sigmoid(x) * x` and the blocks' residual `+` are tensor ops: no row.
Names are VISSL's module paths (_feature_blocks.conv1.0.same_padding, _feature_blocks.conv1.0,
_feature_blocks.block3.expand_conv, _feature_blocks.block3.depthwise_conv.same_padding, ...,
_feature_blocks.avgpool, _feature_blocks.flatten, _feature_blocks.dropout), except for the
activation: VISSL builds ONE Wrap(swish) module and puts it in both conv1 and conv_final (its
named_modules() path is `activation`, the attribute the wrapper sets first); each of its calls is
named by the place it is called from: _feature_blocks.conv1.2 and _feature_blocks.conv_final.2.

The cases (CASES below):
  tiny   width 0.25, depth 0.34 (repeats ceil(0.34·r): 1,1,1,2,2,2,1, B = 10), resolution 32,
         dropout 0, drop_connect 0, SE, bn_momentum 0.1 (so that one step moves the running
         statistics by more than rounding), bn_epsilon 1e-3; N = 2 images of 32 px. Every stride-2
         same padding at 32 px is asymmetric (the odd pixel bottom/right); stage 1 keeps 8
         channels at stride 1 and expand ratio 1, so block0 has the skip without an expansion.
  odd    the same widths and depths, resolution 35, no SE, bn_momentum 0.01, bn_epsilon 1e-5;
         N = 2 images of 35 px: 35 → 18 → 18 → 9 → 5 → 3 → 3 → 2 → 2 (input, stem, the seven
         stages); every padding symmetric but that of block1's stride-2 3×3 (18 px: 0 top/left, 1
         bottom/right), where 32 px makes every stride-2 one asymmetric and 33 px none.
  b0     MODEL_PARAMS["B0"] with efficientnet_b0's arguments (bn_momentum 0.01, bn_epsilon 1e-3,
         width_divisor 8, min_width None, drop_connect_rate 0.2, use_se), 2 images of 224 px,
         eval only (torch's float64 at 224 px); in training (efficientnet_b0_dx) B0_TRAIN: the
         same at 64 px (resolution 64) without drop-connect and dropout, 4 images.
Custom parameter sets in efficientnet_presets.txt (CUSTOM below): the two test cases' own; width
and depth coefficients 0 (scale_width / scale_depth return their argument unchanged: B0's
widths); a divisor of 16 with min_width 24 (the floor and the 10 % rule both acting); a width
coefficient whose rounding goes up by the 10 % rule (0.35).

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_efficientnet_fixtures.py
"""
import functools
import math
import os
import sys
from collections import OrderedDict
from typing import NamedTuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
# tests/golden/trunk_golden.py: the formula, the float64/float32 summaries, the float32 child
# runs, the profiler's rows: what every trunk generator shares.
import trunk_golden  # noqa: E402
from trunk_golden import (DX_FLOOR_MAX, OUT, ZERO_GRAD_SQ, Flatten, bn_stats, call_site_names,  # noqa: E402
                          dx_floor, eval_features, fmt, fp32_runs, grad_summaries, input_gradient, inputs,
                          is_leaf, print_zero_grads, profile, save_train_fixtures, save_vissl_checkpoint,
                          set_formula, train_step)

# The float32 runs are made under each oneDNN cap of trunk_golden.ISAS. A parameter whose float64
# Σg² is below ZERO_GRAD_SQ (trunk_golden's) has a gradient that is zero but for float64
# roundoff (every other one has Σg² far above): a bias whose shift reaches the loss only through
# a 1×1 convolution followed by train-mode BN, which cancels any per-channel shift of its input:
# the bn2.bias of a block whose output goes into the next block's expand_conv (or the head's
# conv_head) and nowhere else, or also into skip blocks whose outputs do the same. The relative
# measure is meaningless there, so its grad_floor entry is instead torch float32's largest √Σg²
# (an absolute size).

# ---------------------------------------------------------------------------------------------
# ClassyVision's efficientnet.py, re-stated (init_weights is kept for the b0 complexity/shape
# models only; the formula overwrites every parameter and buffer of the others).


class BlockParams(NamedTuple):
    num_repeat: int
    kernel_size: int
    stride: int
    expand_ratio: float
    input_filters: int
    output_filters: int
    se_ratio: float
    id_skip: bool


class EfficientNetParams(NamedTuple):
    width_coefficient: float
    depth_coefficient: float
    resolution: int
    dropout_rate: float


BLOCK_PARAMS = [
    BlockParams(1, 3, 1, 1, 32, 16, 0.25, True),
    BlockParams(2, 3, 2, 6, 16, 24, 0.25, True),
    BlockParams(2, 5, 2, 6, 24, 40, 0.25, True),
    BlockParams(3, 3, 2, 6, 40, 80, 0.25, True),
    BlockParams(3, 5, 1, 6, 80, 112, 0.25, True),
    BlockParams(4, 5, 2, 6, 112, 192, 0.25, True),
    BlockParams(1, 3, 1, 6, 192, 320, 0.25, True),
]

MODEL_PARAMS = OrderedDict([
    ("B0", EfficientNetParams(1.0, 1.0, 224, 0.2)),
    ("B1", EfficientNetParams(1.0, 1.1, 240, 0.2)),
    ("B2", EfficientNetParams(1.1, 1.2, 260, 0.3)),
    ("B3", EfficientNetParams(1.2, 1.4, 300, 0.3)),
    ("B4", EfficientNetParams(1.4, 1.8, 380, 0.4)),
    ("B5", EfficientNetParams(1.6, 2.2, 456, 0.4)),
    ("B6", EfficientNetParams(1.8, 2.6, 528, 0.5)),
    ("B7", EfficientNetParams(2.0, 3.1, 600, 0.5)),
])


def swish(x):
    return x * torch.sigmoid(x)


def drop_connect(inputs, is_training, drop_connect_rate):
    if not is_training:
        return inputs
    keep_prob = 1 - drop_connect_rate
    batch_size = inputs.shape[0]
    random_tensor = keep_prob
    random_tensor += torch.rand([batch_size, 1, 1, 1], dtype=inputs.dtype, device=inputs.device)
    binary_tensor = torch.floor(random_tensor)
    return (inputs / keep_prob) * binary_tensor


def scale_width(num_filters, width_coefficient, width_divisor, min_width):
    if not width_coefficient:
        return num_filters
    num_filters *= width_coefficient
    min_width = min_width or width_divisor
    new_filters = max(min_width, (int(num_filters + width_divisor / 2) // width_divisor) * width_divisor)
    if new_filters < 0.9 * num_filters:  # do not round down by more than 10 %
        new_filters += width_divisor
    return int(new_filters)


def scale_depth(num_repeats, depth_coefficient):
    if not depth_coefficient:
        return num_repeats
    return int(math.ceil(depth_coefficient * num_repeats))


def calculate_output_image_size(input_image_size, stride):
    image_height, image_width = input_image_size
    return int(math.ceil(image_height / stride)), int(math.ceil(image_width / stride))


class Conv2dSamePadding(nn.Conv2d):
    def __init__(self, image_size, in_channels, out_channels, kernel_size, **kernel_wargs):
        super().__init__(in_channels, out_channels, kernel_size, **kernel_wargs)
        image_h, image_w = image_size
        kernel_h, kernel_w = self.weight.size()[-2:]
        stride_h, stride_w = self.stride
        dilation_h, dilation_w = self.dilation
        out_h, out_w = math.ceil(image_h / stride_h), math.ceil(image_w / stride_w)
        pad_h = max((out_h - 1) * self.stride[0] + (kernel_h - 1) * dilation_h + 1 - image_h, 0)
        pad_w = max((out_w - 1) * self.stride[1] + (kernel_w - 1) * dilation_w + 1 - image_w, 0)
        self.out_h = out_h
        self.out_w = out_w
        self.same_padding = None
        if pad_h > 0 or pad_w > 0:
            self.same_padding = nn.ZeroPad2d((pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2))
        self.image_size = image_size

    def forward(self, x):
        input_image_size = x.shape[-2:]
        assert input_image_size == self.image_size, \
            f"Input shape mismatch, got: {input_image_size}, expected: {self.image_size}"
        if self.same_padding is not None:
            x = self.same_padding(x)
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def flops(self, x):
        batchsize_per_replica = x.size()[0]
        return (batchsize_per_replica * self.in_channels * self.out_channels * self.kernel_size[0]
                * self.kernel_size[1] * self.out_h * self.out_w / self.groups)

    def activations(self, x, out):
        return out.numel()


class MBConvBlock(nn.Module):
    def __init__(self, image_size, input_filters, output_filters, expand_ratio, kernel_size, stride,
                 se_ratio, id_skip, use_se, bn_momentum, bn_epsilon):
        assert se_ratio is None or (0 < se_ratio <= 1)
        super().__init__()
        self.bn_momentum = bn_momentum
        self.bn_epsilon = bn_epsilon
        self.has_se = use_se and se_ratio is not None
        self.se_avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.id_skip = id_skip
        self.expand_ratio = expand_ratio
        self.stride = stride
        self.input_filters = input_filters
        self.output_filters = output_filters
        self.relu_fn = swish
        self.depth = 0
        expanded_filters = input_filters * expand_ratio
        if expand_ratio != 1:
            self.expand_conv = Conv2dSamePadding(image_size=image_size, in_channels=input_filters,
                                                 out_channels=expanded_filters, kernel_size=1, stride=1, bias=False)
            self.bn0 = nn.BatchNorm2d(num_features=expanded_filters, momentum=self.bn_momentum, eps=self.bn_epsilon)
            self.depth += 1
        self.depthwise_conv = Conv2dSamePadding(image_size=image_size, in_channels=expanded_filters,
                                                out_channels=expanded_filters, groups=expanded_filters,
                                                kernel_size=kernel_size, stride=stride, bias=False)
        self.bn1 = nn.BatchNorm2d(num_features=expanded_filters, momentum=self.bn_momentum, eps=self.bn_epsilon)
        self.depth += 1
        image_size = calculate_output_image_size(image_size, stride)
        if self.has_se:
            num_reduced_filters = max(1, int(input_filters * se_ratio))
            self.se_reduce = Conv2dSamePadding(image_size=(1, 1), in_channels=expanded_filters,
                                               out_channels=num_reduced_filters, kernel_size=1, stride=1, bias=True)
            self.se_expand = Conv2dSamePadding(image_size=(1, 1), in_channels=num_reduced_filters,
                                               out_channels=expanded_filters, kernel_size=1, stride=1, bias=True)
            self.depth += 2
        self.project_conv = Conv2dSamePadding(image_size=image_size, in_channels=expanded_filters,
                                              out_channels=output_filters, kernel_size=1, stride=1, bias=False)
        self.bn2 = nn.BatchNorm2d(num_features=output_filters, momentum=self.bn_momentum, eps=self.bn_epsilon)
        self.depth += 1

    def forward(self, inputs, drop_connect_rate=None):
        if self.expand_ratio != 1:
            x = self.relu_fn(self.bn0(self.expand_conv(inputs)))
        else:
            x = inputs
        x = self.relu_fn(self.bn1(self.depthwise_conv(x)))
        if self.has_se:
            x_squeezed = self.se_avgpool(x)
            x_expanded = self.se_expand(self.relu_fn(self.se_reduce(x_squeezed)))
            x = torch.sigmoid(x_expanded) * x
        x = self.bn2(self.project_conv(x))
        if self.id_skip:
            if self.stride == 1 and self.input_filters == self.output_filters:
                if drop_connect_rate:
                    x = drop_connect(x, self.training, drop_connect_rate)
                x = x + inputs
        return x


class EfficientNet(nn.Module):
    """ClassyVision's EfficientNet.__init__ (ClassyModel's bookkeeping left out: VISSL keeps only
    the modules it maps into _feature_blocks)."""

    def __init__(self, num_classes, model_params, bn_momentum, bn_epsilon, width_divisor, min_width,
                 drop_connect_rate, use_se):
        super().__init__()
        self.num_classes = num_classes
        self.image_resolution = model_params.resolution
        self.relu_fn = swish
        width_coefficient = model_params.width_coefficient
        depth_coefficient = model_params.depth_coefficient
        self.drop_connect_rate = drop_connect_rate
        in_channels = 3
        image_size = (self.image_resolution, self.image_resolution)
        out_channels = scale_width(32, width_coefficient, width_divisor, min_width)
        self.conv_stem = Conv2dSamePadding(image_size=image_size, in_channels=in_channels,
                                           out_channels=out_channels, kernel_size=3, stride=2, bias=False)
        self.bn0 = nn.BatchNorm2d(num_features=out_channels, momentum=bn_momentum, eps=bn_epsilon)
        image_size = calculate_output_image_size(image_size, 2)
        blocks = OrderedDict()
        for block_idx, block_params in enumerate(BLOCK_PARAMS):
            assert block_params.num_repeat > 0, "num_repeat has to be > 0"
            block_params = block_params._replace(
                input_filters=scale_width(block_params.input_filters, width_coefficient, width_divisor, min_width),
                output_filters=scale_width(block_params.output_filters, width_coefficient, width_divisor, min_width),
                num_repeat=scale_depth(block_params.num_repeat, depth_coefficient))
            blocks[f"block{block_idx}-0"] = MBConvBlock(
                image_size, block_params.input_filters, block_params.output_filters, block_params.expand_ratio,
                block_params.kernel_size, block_params.stride, block_params.se_ratio, block_params.id_skip,
                use_se, bn_momentum, bn_epsilon)
            image_size = calculate_output_image_size(image_size, block_params.stride)
            if block_params.num_repeat > 1:
                block_params = block_params._replace(input_filters=block_params.output_filters, stride=1)
            for i in range(1, block_params.num_repeat):
                blocks[f"block{block_idx}-{i}"] = MBConvBlock(
                    image_size, block_params.input_filters, block_params.output_filters, block_params.expand_ratio,
                    block_params.kernel_size, block_params.stride, block_params.se_ratio, block_params.id_skip,
                    use_se, bn_momentum, bn_epsilon)
        self.blocks = nn.Sequential(blocks)
        in_channels = block_params.output_filters
        out_channels = scale_width(1280, width_coefficient, width_divisor, min_width)
        self.conv_head = Conv2dSamePadding(image_size=image_size, in_channels=in_channels,
                                           out_channels=out_channels, kernel_size=1, stride=1, bias=False)
        self.bn1 = nn.BatchNorm2d(num_features=out_channels, momentum=bn_momentum, eps=bn_epsilon)
        self.trunk_output = nn.Identity()
        self.avg_pooling = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(out_channels, num_classes)
        self.dropout = nn.Dropout(p=model_params.dropout_rate) if model_params.dropout_rate > 0 else None


# ---------------------------------------------------------------------------------------------
# VISSL's wrapper (vissl/models/trunks/efficientnet.py, model_helpers.Wrap; model_helpers.Flatten
# is trunk_golden's).


class Wrap(nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, x):
        return self.function(x)


class Trunk(nn.Module):
    """VISSL's EfficientNet trunk: the same attributes in the same order (dropout and activation
    are registered before _feature_blocks, as VISSL's __init__ sets them)."""

    def __init__(self, model):
        super().__init__()
        self.drop_connect_rate = model.drop_connect_rate
        self.num_blocks = len(model.blocks)
        self.dropout = model.dropout
        self.activation = Wrap(model.relu_fn)
        blocks = [["conv1", nn.Sequential(model.conv_stem, model.bn0, self.activation)]]
        blocks.extend([[f"block{i}", v] for i, v in enumerate(model.blocks.children())])
        blocks.extend([["conv_final", nn.Sequential(model.conv_head, model.bn1, self.activation)],
                       ["avgpool", model.avg_pooling], ["flatten", Flatten(1)]])
        if model.dropout:
            blocks.append(["dropout", model.dropout])
        self._feature_blocks = nn.ModuleDict(blocks)
        self.all_feat_names = list(self._feature_blocks.keys())

    def forward(self, x, out=None):
        """VISSL's forward without out_feat_keys: the last feature. With a dict `out`, every
        feature by name."""
        blocks = iter(self._feature_blocks.named_children())
        name, block = next(blocks)
        feat = block(x)
        if out is not None:
            out[name] = feat
        for i, (name, block) in enumerate(blocks):
            if "block" in name:
                rate = self.drop_connect_rate
                if self.drop_connect_rate:
                    rate *= float(i) / self.num_blocks
                feat = block(feat, drop_connect_rate=rate)
            else:
                feat = block(feat)
            if out is not None:
                out[name] = feat
        return feat


# ---------------------------------------------------------------------------------------------
# Cases and parameter sets.

OPTION_KEYS = ("width_coefficient", "depth_coefficient", "resolution", "dropout_rate", "bn_momentum",
               "bn_epsilon", "width_divisor", "min_width", "drop_connect_rate", "use_se")
B_DEFAULTS = dict(bn_momentum=0.01, bn_epsilon=1e-3, width_divisor=8, min_width=0, drop_connect_rate=0.2,
                  use_se=True)  # efficientnet_bN's arguments (min_width None written 0)


def preset(name):
    p = MODEL_PARAMS[name]
    return dict(B_DEFAULTS, width_coefficient=p.width_coefficient, depth_coefficient=p.depth_coefficient,
                resolution=p.resolution, dropout_rate=p.dropout_rate)


TINY = dict(width_coefficient=0.25, depth_coefficient=0.34, resolution=32, dropout_rate=0.0, bn_momentum=0.1,
            bn_epsilon=1e-3, width_divisor=8, min_width=0, drop_connect_rate=0.0, use_se=True)
CASES = OrderedDict([
    ("tiny", dict(TINY, n=2, size=32)),
    ("odd", dict(TINY, resolution=35, bn_momentum=0.01, bn_epsilon=1e-5, use_se=False, n=2, size=35)),
    ("b0", dict(preset("B0"), n=2, size=224)),
])
TRAIN_CASES = ("tiny", "odd")
# B0 in training, for its input gradient (efficientnet_b0_dx): efficientnet_b0's arguments with the
# random drop-connect and dropout masks off, at 64 px (ClassyVision fixes every same padding from
# `resolution` at construction and asserts the input has that size). 4 images: the last stages are
# 2 × 2 at 64 px, and their train-mode BN over 2 images (8 values a channel) amplifies float32
# rounding to about 1e-3 of the gradient's largest value in torch itself; over 4, about 1e-4 or less.
B0_TRAIN = dict(preset("B0"), resolution=64, drop_connect_rate=0.0, dropout_rate=0.0, n=4, size=64)
B0_DX = "b0_dx"  # its float32 runs' name, and its fixture's
CUSTOM = OrderedDict([
    ("custom_tiny", dict(TINY)),
    ("custom_odd", dict(CASES["odd"])),
    ("custom_zero", dict(preset("B0"), width_coefficient=0.0, depth_coefficient=0.0)),
    ("custom_div16", dict(preset("B3"), width_divisor=16, min_width=24)),
    ("custom_w035", dict(preset("B0"), width_coefficient=0.35, depth_coefficient=0.5, resolution=64)),
])


def make_model(config):
    """ClassyVision's EfficientNet(...) as VISSL builds it (num_classes 1000, unused)."""
    params = EfficientNetParams(config["width_coefficient"], config["depth_coefficient"], config["resolution"],
                                config["dropout_rate"])
    return EfficientNet(num_classes=1000, model_params=params, bn_momentum=config["bn_momentum"],
                        bn_epsilon=config["bn_epsilon"], width_divisor=config["width_divisor"],
                        min_width=config["min_width"] or None, drop_connect_rate=config["drop_connect_rate"],
                        use_se=config["use_se"])


def build(config):
    """VISSL's trunk around ClassyVision's EfficientNet, every value set by the formula (float32)."""
    return set_formula(Trunk(make_model(config)))


def stage_lists(config):
    """(stem, head, inputs, outputs, repeats) as EfficientNet.__init__ computes them."""
    sw = lambda n: scale_width(n, config["width_coefficient"], config["width_divisor"], config["min_width"] or None)
    return (sw(32), sw(1280), [sw(b.input_filters) for b in BLOCK_PARAMS], [sw(b.output_filters) for b in BLOCK_PARAMS],
            [scale_depth(b.num_repeat, config["depth_coefficient"]) for b in BLOCK_PARAMS])


def trunk_params(config):
    """The trunk's parameter count, from a built ClassyVision model (its fc left out)."""
    model = make_model(config)
    n = sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in model.fc.parameters())
    assert n == sum(p.numel() for p in Trunk(model).parameters())
    return n, len(model.blocks)


def option_text(config):
    return " ".join(f"{k}={config[k]}" for k in OPTION_KEYS)


save = functools.partial(trunk_golden.save_f32, "efficientnet")
save_names = functools.partial(trunk_golden.save_names, "efficientnet")


def write_presets():
    sets = [(name, preset(name)) for name in MODEL_PARAMS] + list(CUSTOM.items())
    with open(os.path.join(OUT, "efficientnet_presets.txt"), "w") as f:
        for name, config in sets:
            stem, head, ins, outs, reps = stage_lists(config)
            params, blocks = trunk_params(config)
            assert blocks == sum(reps)
            keys = ("width_coefficient", "depth_coefficient", "resolution", "dropout_rate", "width_divisor", "min_width")
            line = (f"{name} {' '.join(f'{k}={config[k]}' for k in keys)} stem={stem} head={head} inputs={fmt(ins)} "
                    f"outputs={fmt(outs)} repeats={fmt(reps)} blocks={blocks} params={params}")
            f.write(line + "\n")
            print(line)


def write_cases():
    with open(os.path.join(OUT, "efficientnet_cases.txt"), "w") as f:
        for case, config in CASES.items():
            params, blocks = trunk_params(config)
            f.write(f"{case} {option_text(config)} n={config['n']} size={config['size']} blocks={blocks} "
                    f"params={params}\n")


# ---------------------------------------------------------------------------------------------
# Forward, backward and torch float32's own error.


def case_input(case, dtype=torch.float32):
    c = CASES[case]
    return inputs(c["n"], c["size"]).to(dtype)


def fp32_measure(case, phase):
    """In a child process (trunk_golden.fp32_runs): torch float32's gradient summaries; for B0_DX,
    its input gradient (phase is always 0: no phase is chosen)."""
    if case == B0_DX:
        return input_gradient(build(B0_TRAIN), b0_train_input()).numpy()
    m = build(CASES[case])
    train_step(m, case_input(case))
    return np.array(grad_summaries(m))


def feature_means(feats):
    """Per-channel means over N, H, W of conv1, block0, ..., conv_final, concatenated."""
    return torch.cat([t.mean(dim=(0, 2, 3)) for name, t in feats.items()
                      if name == "conv1" or name.startswith("block") or name == "conv_final"])


def grad_case(case, runs):
    """Every per-case fixture, in float64; torch float32's worst gradient error under the caps of
    ISAS as the floor."""
    config = CASES[case]
    assert config["dropout_rate"] == 0 and config["drop_connect_rate"] == 0, "a deterministic train forward"
    m = build(config)
    save_names(case, m)
    m = m.double()
    x = case_input(case, torch.float64)
    feats = OrderedDict()
    save(f"{case}_feat_eval", eval_features(m, x, feats))
    save(f"{case}_means_eval", feature_means(feats))
    x.requires_grad_(True)
    exact, floor = save_train_fixtures(save, case, m, x, runs, "stem", m._feature_blocks.conv1[0].weight)
    save(f"{case}_dx", x.grad)
    small = min(s2 for _, s2 in exact if s2 >= ZERO_GRAD_SQ)
    print(f"{case}: {sum(p.numel() for p in m.parameters())} parameters, {len(bn_stats(m))} BN layers, "
          f"features {[(n, tuple(t.shape[1:])) for n, t in feats.items()]}; grad floor max "
          f"{max(f for f, (_, s2) in zip(floor, exact) if s2 >= ZERO_GRAD_SQ):.3g}; smallest nonzero Σg² {small:.3g}")
    print_zero_grads(case, [n for n, _ in m.named_parameters()], exact, floor)


def b0_train_input():
    return inputs(B0_TRAIN["n"], B0_TRAIN["size"])


def save_b0_dx(runs):
    """efficientnet_b0_dx: B0_TRAIN's float64 input gradient; torch float32's own error on it
    (runs: its float32 input gradients) asserted to be at most DX_FLOOR_MAX."""
    exact = input_gradient(build(B0_TRAIN).double(), b0_train_input().double())
    floor = dx_floor(exact, runs)
    assert floor <= DX_FLOOR_MAX, f"{B0_DX}: torch float32's own error {floor:.3g}"
    save(B0_DX, exact)
    print(f"{B0_DX}: B0 without drop-connect or dropout, input gradient {tuple(exact.shape)}; torch float32's "
          f"own error {floor:.3g} under every cap (at most {DX_FLOOR_MAX})")


def write_checkpoint(case):
    """CASE's formula weights as a VISSL checkpoint."""
    save_vissl_checkpoint(os.path.join(OUT, f"efficientnet_{case}_vissl.torch"), build(CASES[case]).state_dict())


# ---------------------------------------------------------------------------------------------
# Model complexity: ClassyVision's profiler over the trunk, one row per profiled module call.

COMPLEXITY_KINDS = {"Conv2dSamePadding": "conv", "ZeroPad2d": "zeropad", "BatchNorm2d": "batchnorm",
                    "Wrap": "swish", "AdaptiveAvgPool2d": "avgpool", "Flatten": "flatten", "Dropout": "dropout"}


def profiler_flops(mod, x):
    """The profiler's _layer_flops for the trunk's module types (-1: NotImplementedError)."""
    kind = type(mod).__name__
    if kind == "Conv2dSamePadding":
        f = mod.flops(x)  # its own method: the repr is not "Conv2d"
        assert f == int(f)
        return int(f)
    if kind == "BatchNorm2d":
        return 2 * x.numel()
    if kind == "AdaptiveAvgPool2d":
        assert tuple(mod.output_size) == (1, 1)
        return x.shape[0] * x.shape[1] * x.shape[2] * x.shape[3]
    if kind == "Dropout":
        return x.numel()
    if kind == "Flatten":
        return mod.flops(x)
    return -1  # ZeroPad2d, Wrap: in no list, without a flops method


def profiler_activations(mod, out):
    return mod.activations(None, out) if hasattr(mod, "activations") else 0


def write_complexity():
    for case, config in CASES.items():
        m = Trunk(make_model(config))  # shapes only: the values do not matter
        size = config["size"]
        # every module that is a leaf or has a flops method (modify_forward's rule), reported when
        # its forward returns; the shared activation gets one name per call site
        rows = profile(m, torch.zeros(1, 3, size, size), COMPLEXITY_KINDS, profiler_flops, profiler_activations,
                       named=call_site_names(m), profiled=lambda mod: is_leaf(mod) or hasattr(mod, "flops"))
        path = os.path.join(OUT, f"efficientnet_{case}_complexity.txt")
        flops, params, acts = trunk_golden.write_complexity(path, m, rows)
        known = sum(r[2] for r in rows if r[2] >= 0)
        conv = sum(r[2] for r in rows if r[1] == "conv")
        print(f"{case} (1 x 3 x {size} x {size}): {len(rows)} rows, FLOPs {flops} (the rows the profiler can "
              f"count: {known}, convolutions {conv}), {params} parameters, {acts} activations")


def main():
    if trunk_golden.fp32_main(sys.argv, fp32_measure):
        return
    trunk_golden.start()
    write_presets()
    write_cases()
    runs = fp32_runs(__file__, dict.fromkeys(TRAIN_CASES + (B0_DX,), 0))
    for case in TRAIN_CASES:
        grad_case(case, runs[case])
    write_checkpoint("tiny")
    m = build(CASES["b0"])
    save_names("b0", m)
    params = sum(p.numel() for p in m.parameters())
    assert params == 4007548, params  # EfficientNet-B0's 5,288,548 less its 1280 × 1000 fc's 1,281,000
    save("b0_feat_eval", eval_features(m.double(), case_input("b0", torch.float64)))
    save_b0_dx(runs[B0_DX])
    write_complexity()
    print(f"make_efficientnet_fixtures: wrote to {OUT} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
