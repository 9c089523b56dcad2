#!/usr/bin/python3
"""make_regnet_fixtures.py — ClassyVision's RegNet, as VISSL's `regnet` trunk wraps it, for the C RegNet trunk.

ClassyVision is not installed here, so its RegNet is re-stated below from
classy_vision/models/{regnet,anynet,squeeze_and_excitation_layer}.py (the same module classes,
nesting and registration order, so state_dict() names and order are ClassyVision's), and VISSL's
wrapper (vissl/models/trunks/regnet.py) from its mapping into _feature_blocks: ("conv1",
model.stem), ("res2", trunk_output.block1), ("res3", block2), ..., ("avgpool",
AdaptiveAvgPool2d(1)), ("flatten", Flatten(1)). The stage widths come from
RegNetParams.get_expanded_params (numpy float64, np.round = round-half-even) followed by
_adjust_widths_groups_compatibilty (Python round(), also half-even), re-stated line for line.

No weights are stored: every parameter, BN running statistic, input image and upstream gradient is
set by the closed formula of trunk_golden.py (make_resnet_fixtures.py's, the same constants), a
Weyl sequence computed in float64 and rounded to float32. Let u(i, k) = frac(i·ALPHA + k·BETA)
for flat element index i of tensor k:
  4-D conv weight (parameter k)  sqrt(6/fan_in)·(2u−1), fan_in = shape[1]·shape[2]·shape[3]
                                 (grouped 3×3 convs: shape[1] is the group's input width; the
                                 SE convs are 4-D 1×1 convs too)
  1-D parameter named *weight    1 + 0.25·(2u−1)                 (BN weight)
  other 1-D parameter            0.1·(2u−1)                      (BN bias, SE conv bias)
  running_mean / running_var     (k = buffer index) 0.1·(2u−1) / 1 + 0.5·u
  input image x                  2·frac(i·X_ALPHA + phase·BETA) − 1, N × 3 × H × W
  upstream gradient r            2·frac(i·R_ALPHA) − 1, over the N × C features
Parameters are numbered in named_parameters() order, buffers in named_buffers() order
(num_batches_tracked left out), both from 0.

Files (tests/golden/fixtures/nn/regnet_*):
  regnet_presets.txt     "NAME widths depths group_widths bottleneck_multipliers", one line per
                         preset of regnet.py (ClassyVision's registry names, regnet_y_400mf ...
                         regnet_y_256gf, regnet_x_*, regnet_z_500mf, regnet_z_4gf) and per custom
                         set "custom:depth=D,w_0=W0,w_a=WA,w_m=WM,group_width=G[,bottleneck_multiplier=B]";
                         each list comma-separated, one entry per stage, as get_expanded_params
                         yields them after the compatibility adjustment (strides are all 2).
                         Multipliers are written as Python floats (1.0).
  regnet_presets_torchvision.txt
                         the same names, each "NAME same" where torchvision 0.14's
                         BlockParams.from_init_params (float32 torch arithmetic, _make_divisible
                         instead of _quantize_float) yields the same four lists, else
                         "NAME differs widths depths group_widths bottleneck_multipliers" with
                         torchvision's lists. A cross-check only: selfsup follows ClassyVision.
  regnet_cases.txt       "CASE key=value ..." per test case: every RegNetParams / from_config
                         option (depth w_0 w_a w_m group_width bottleneck_multiplier stem_type
                         stem_width block_type activation use_se se_ratio bn_epsilon
                         bn_momentum), then widths= depths= group_widths= bottleneck_multipliers=
                         (the stage lists) and n=, size= (the input), params= (parameter count).
  regnet_CASE_names.txt  "name kind shape" per state-dict entry (VISSL names, e.g.
                         _feature_blocks.res2.block1-0.f.b.0.weight), kind param or buffer,
                         num_batches_tracked left out, shape comma-separated.
For each test CASE (y, x_basic, z, vanilla; N = 4 images of 3 × 32 × 32, input phase from
regnet_CASE_phase.npy), computed in float64 on the model converted to double after the float32
formula values were set (the exact answer to the float32 inputs and weights), stored as float32:
  regnet_CASE_feat_eval.npy   N × C flatten features, eval mode
  regnet_CASE_means_eval.npy  eval mode, for each feature conv1, res2, res3, ... in network order
                              the per-channel mean over N, H, W of its output, concatenated into
                              one 1-D array: [conv1's stem_width means, res2's widths[0] means,
                              res3's widths[1] means, ...] (length stem_width + Σ widths)
  regnet_CASE_feat_train.npy  N × C flatten features of one train-mode forward from the formula
                              state (after the eval forward, which changes nothing)
  regnet_CASE_stats.npy       per BN layer (named_modules order, which is state-dict order)
                              [Σ running_mean, Σ running_var] after that train forward
  regnet_CASE_grads.npy       per parameter (named_parameters order) [Σ g, Σ g²] of
                              L = Σ feat·r after that train forward
  regnet_CASE_stem_grad.npy   the full gradient of _feature_blocks.conv1.stem.0.weight
  regnet_CASE_dx.npy          the full gradient of L with respect to the input x
  regnet_CASE_grad_floor.npy  per parameter, torch float32's own error on grads, the largest
                              under oneDNN's ISAS caps: max(|Σg − Σg*| / √Σg*², |Σg² − Σg*²| / Σg*²)
                              (test_resnet.c's measure). Except where Σg*² < ZERO_GRAD_SQ = 1e-20
                              (a gradient that is mathematically zero, left at float64 roundoff in
                              grads.npy: z's res2.block1-0 and res3.block2-0 f.final_bn.bias, see
                              ZERO_GRAD_SQ): there the entry is torch float32's largest √Σg², an
                              absolute size to hold the engine's √Σg² to instead
  regnet_CASE_phase.npy       [phase]: the input phase (see MIN_BAND_MARGIN below)
  regnet_y_vissl.pt           case y's float32 formula weights as a VISSL checkpoint
                              ({"classy_state_dict": {"base_model": {"model": {"trunk": state_dict,
                              "heads": {}}}}}, torch.save's zip format): the C side loads it through
                              WEIGHTS_INIT and must reproduce regnet_y_feat_eval
  regnet_y_torchvision.pth    the same weights in torchvision's RegNet (its regnet_* names, a
                              10-class fc), torch.save's state dict: `selfsup convert` turns it
                              into VISSL's names, which must give regnet_y_feat_eval too
  regnet_y_classy.pth         the same weights under ClassyVision's own RegNet names (stem.stem.*,
                              trunk_output.blockS.*), which `selfsup convert` maps as well
  regnet_y400_names.txt       names of the preset regnet_y_400mf (all options at their defaults)
  regnet_y400_feat_eval.npy   its 2 × 440 features, eval mode, torch float32, 2 images of 64 px,
                              input phase 0
  regnet_y400_dx.npy          its input gradient in training: the full gradient of L = Σ feat·r
                              with respect to the input, Y400_DX_IMAGES = 4 images of 64 px
                              (4 × 3 × 64 × 64), after one train-mode forward, computed in float64
                              as the cases' dx; torch float32's own error on it under every cap of
                              ISAS is asserted to be at most trunk_golden.DX_FLOOR_MAX (2.5e-4)
  regnet_y400_dx_phase.npy    [phase]: that input's phase (see Y400_DX_IMAGES below)
  regnet_y16_names.txt        the same for a large preset, regnet_y_16gf (VISSL's SwAV RegNet),
  regnet_y16_feat_eval.npy    its 1 × 3024 features for 1 image of 32 px

Model complexity (what VISSL's SSLModelComplexityHook reports for the trunk: ClassyVision's
profiler, classy_vision/generic/profiler.py, run on one zero image in eval mode). One file per
model, regnet_TAG_complexity.txt, TAG one of
  y400     regnet_y_400mf (all options at their defaults), input 1 × 3 × 224 × 224
  x400     regnet_x_400mf, input 1 × 3 × 224 × 224
  y, x_basic, z, vanilla   the test cases, input 1 × 3 × 32 × 32
Each row "name kind flops params activations", one per leaf-module CALL in call order (forward
hooks), then "total - FLOPS PARAMS ACTIVATIONS" (FLOPS -1 when any row's is -1; PARAMS is the
model's parameter count: every parameter module is called). kind is conv, batchnorm, relu,
silu, sigmoid, maxpool, avgpool or flatten. The rules (multiply-adds; layer_flops and
layer_activations are imported from make_complexity_fixtures.py, which restates the profiler):
  Conv2d              N·Cin·Cout·KH·KW·OH·OW/groups, OH = int((H + 2p − K)/s + 1); the bias
                      (SE convs) is not counted; the division by groups is asserted exact
  BatchNorm2d         2·numel(x)
  ReLU, Sigmoid       numel(x) (the profiler's non-linearity list is ReLU, ReLU6, Tanh, Sigmoid,
                      Softmax; make_complexity_fixtures.py's layer_flops lists only ReLU, which
                      is all ResNet needs, so Sigmoid is added here)
  SiLU                in no list: NotImplementedError, written -1 (regnet_z's FLOPs are unknown)
  MaxPool2d           N·C·OH·OW·KH·KW, OH = 1 + int((H + 2p − K)/s)
  AdaptiveAvgPool2d   (1, 1) output: N·C·H·W (the trunk's avgpool and the SE's)
  Flatten             0 (VISSL's Flatten(1) defines flops() = 0)
Activations: numel of Conv2d outputs only. Params: the module's own (SE convs: weight + bias).
The SE's `x * x_excited` and the blocks' residual `+` are tensor ops: no row.
Names are VISSL's module paths (_feature_blocks.conv1.stem.0, _feature_blocks.res2.block1-0.f.b.0,
..., _feature_blocks.avgpool, _feature_blocks.flatten), except for the activation: AnyNet builds
ONE activation module and shares it between the stem, every block and every SE, so its
named_modules() path is _feature_blocks.conv1.stem.2 whatever calls it. Each of its calls is
named instead by the place it is called from: the calling container's path plus the name the
module has among that container's children (stem.2; f.a.2, f.b.2, f.se.excitation.1 in bottleneck
blocks; f.a.2 in res_basic_block; a.2, b.2 in vanilla_block; `activation` for the block's own
call after the add, res_basic_block and res_bottleneck_block only). Every other row's name is
asserted to be the module's unique named_modules() path.
Running prints each model's totals and, for the two 400MF presets, the conv rows' sum plus a
C × 1000 fc head (which pycls's published figures include and the trunk lacks) beside pycls's.

The cases (CASES below; their stage lists are printed when this runs):
  y        simple_stem_in, res_bottleneck_block, relu, SE 0.25: depth 4, w_0 16, w_a 8, w_m 2,
           group_width 8, stem_width 16 -> widths 16,32 depths 1,3
  x_basic  res_stem_cifar, res_basic_block, relu, no SE: depth 4, w_0 8, w_a 8, w_m 2,
           group_width 8, stem_width 16 -> widths 8,16,32 depths 1,1,2
  z        res_stem_in (7×7 s2 + max-pool), res_bottleneck_linear_block, silu, SE 0.25,
           bottleneck_multiplier 4: depth 4, w_0 8, w_a 8, w_m 2, group_width 4, stem_width 16
           -> widths 8,16,32 depths 1,1,2 (res4 is 1 × 1 at 32 px)
  vanilla  simple_stem_in, vanilla_block, relu, no SE, bn_epsilon 1e-4, bn_momentum 0.05:
           depth 4, w_0 8, w_a 8, w_m 2, group_width 8, stem_width 16 -> widths 8,16,32 depths 1,1,2

`make_regnet_fixtures.py --search CASE LO HI` prints each phase's band margin (measured in this
process only) for LO..HI−1.

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_regnet_fixtures.py
"""
import functools
import math
import os
import sys
from collections import OrderedDict
from enum import Enum, auto
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
# ClassyVision's profiler rules (_layer_flops, _layer_activations) as make_complexity_fixtures.py
# restates them; importing it only defines things (and creates the same fixtures/nn folder).
from make_complexity_fixtures import layer_activations, layer_flops  # noqa: E402
import golden  # noqa: E402  (tests/golden/golden.py: kept_choice)
# tests/golden/trunk_golden.py: the formula, the float64/float32 summaries, the float32 child
# runs and the phase search, the profiler's rows: what every trunk generator shares.
import trunk_golden  # noqa: E402
from trunk_golden import (DX_FLOOR_MAX, OUT, PhaseSearch, bn_stats, call_site_names, decisions,  # noqa: E402
                          dx_floor, eval_features, fmt, fp32_runs, grad_summaries, input_gradient, inputs,
                          print_zero_grads, profile, save_train_fixtures, save_vissl_checkpoint, set_formula,
                          train_step)

N_IMAGES, SIZE = 4, 32
# The input phase of each case. Train-mode BN over 4 images amplifies float32 rounding, and a
# decision that sits inside that noise is taken by the engine's accumulation order: a ReLU whose
# input is within its noise band of zero (the band: the largest |x32 − x64| over that ReLU call's
# input, torch float32 against float64), or a 3×3 max-pool window whose two largest inputs are
# within twice the band of its input. Either flip moves gradients far beyond the tests'
# tolerance. A case's margin is the smallest |x| / band over every ReLU input x (and gap /
# (2·band) over every max-pool window) in a train-mode forward, the band being the worst under
# each oneDNN cap of trunk_golden.ISAS; the phase is the one of 0..SEARCH_PHASES−1 with the largest
# margin in this process that keeps at least MIN_BAND_MARGIN under every cap (SEARCH below).
# golden.kept_choice keeps the committed phase (SELFSUP_GOLDEN_REPICK=1 searches again); the
# margin is asserted every run.
SEARCH_PHASES = 64
MIN_BAND_MARGIN = 2.0
# regnet_y_400mf's input gradient in training (regnet_y400_dx), the fixture's name Y400_DX. Its
# train-mode BN amplifies float32 rounding most in res5, 2 × 2 at 64 px: over 2 images (8 values a
# channel) torch float32's own error on the gradient is about 3e-4 of its largest value at the
# phases whose ReLUs are farthest from a flip, over Y400_DX_IMAGES = 4 images about 3e-5 to 1e-4.
# No phase of 0..SEARCH_PHASES−1 keeps MIN_BAND_MARGIN (the best keeps about 0.35, at res5's
# ReLUs, whose band is largest), and a ReLU flipped there moves the whole gradient by 1e-3 to
# 3e-2 (in torch under some cap, or in the engine where torch flips none: at 0.11 it did). So the
# phase is chosen in order of its band margin here, the first at which torch float32's input
# gradient under every cap of trunk_golden.ISAS is within trunk_golden.DX_FLOOR_MAX of float64's
# (choose_y400_phase). golden.kept_choice keeps the committed one; the floor is asserted every run.
Y400_DX, Y400_DX_IMAGES, Y400_DX_SIZE = "y400_dx", 4, 64
# A parameter whose float64 Σg² is below ZERO_GRAD_SQ (trunk_golden's) has a gradient that is zero
# but for float64 roundoff (every other one has Σg² ≥ 1): in z, the final_bn.bias of a stage's
# last block when the next block is a linear bottleneck without skip: its first op, a 1×1
# convolution followed by train-mode BN, cancels any per-channel shift of its input. The relative
# measure is meaningless there, so its grad_floor entry is instead torch float32's largest √Σg²
# (an absolute size).

# ---------------------------------------------------------------------------------------------
# ClassyVision's anynet.py / regnet.py / squeeze_and_excitation_layer.py, re-stated (init_weights
# is left out: the formula overwrites every parameter and buffer).

RELU_IN_PLACE = True


class BlockType(Enum):
    VANILLA_BLOCK = auto()
    RES_BASIC_BLOCK = auto()
    RES_BOTTLENECK_BLOCK = auto()
    RES_BOTTLENECK_LINEAR_BLOCK = auto()


class StemType(Enum):
    RES_STEM_CIFAR = auto()
    RES_STEM_IN = auto()
    SIMPLE_STEM_IN = auto()


class ActivationType(Enum):
    RELU = auto()
    SILU = auto()


class SqueezeAndExcitationLayer(nn.Module):
    def __init__(self, in_planes, reduction_ratio: Optional[int] = 16,
                 reduced_planes: Optional[int] = None, activation: Optional[nn.Module] = None):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        assert bool(reduction_ratio) != bool(reduced_planes)
        if activation is None:
            activation = nn.ReLU()
        reduced_planes = in_planes // reduction_ratio if reduced_planes is None else reduced_planes
        self.excitation = nn.Sequential(
            nn.Conv2d(in_planes, reduced_planes, kernel_size=1, stride=1, bias=True),
            activation,
            nn.Conv2d(reduced_planes, in_planes, kernel_size=1, stride=1, bias=True),
            nn.Sigmoid(),
        )

    def forward(self, x):
        x_squeezed = self.avgpool(x)
        x_excited = self.excitation(x_squeezed)
        return x * x_excited


class BasicTransform(nn.Sequential):
    def __init__(self, width_in, width_out, stride, bn_epsilon, bn_momentum, activation):
        super().__init__()
        self.a = nn.Sequential(
            nn.Conv2d(width_in, width_out, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(width_out, eps=bn_epsilon, momentum=bn_momentum),
            activation,
            nn.Conv2d(width_out, width_out, 3, stride=1, padding=1, bias=False),
        )
        self.final_bn = nn.BatchNorm2d(width_out, eps=bn_epsilon, momentum=bn_momentum)
        self.depth = 2


class ResStemCifar(nn.Sequential):
    def __init__(self, width_in, width_out, bn_epsilon, bn_momentum, activation):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(width_in, width_out, 3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(width_out, eps=bn_epsilon, momentum=bn_momentum),
            activation,
        )
        self.depth = 2


class ResStemIN(nn.Sequential):
    def __init__(self, width_in, width_out, bn_epsilon, bn_momentum, activation):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(width_in, width_out, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(width_out, eps=bn_epsilon, momentum=bn_momentum),
            activation,
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        self.depth = 3


class SimpleStemIN(nn.Sequential):
    def __init__(self, width_in, width_out, bn_epsilon, bn_momentum, activation):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(width_in, width_out, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(width_out, eps=bn_epsilon, momentum=bn_momentum),
            activation,
        )
        self.depth = 2


class VanillaBlock(nn.Sequential):
    def __init__(self, width_in, width_out, stride, bn_epsilon, bn_momentum, activation, *args, **kwargs):
        super().__init__()
        self.a = nn.Sequential(
            nn.Conv2d(width_in, width_out, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(width_out, eps=bn_epsilon, momentum=bn_momentum),
            activation,
        )
        self.b = nn.Sequential(
            nn.Conv2d(width_out, width_out, 3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(width_out, eps=bn_epsilon, momentum=bn_momentum),
            activation,
        )
        self.depth = 2


class ResBasicBlock(nn.Module):
    def __init__(self, width_in, width_out, stride, bn_epsilon, bn_momentum, activation, *args, **kwargs):
        super().__init__()
        self.proj_block = (width_in != width_out) or (stride != 1)
        if self.proj_block:
            self.proj = nn.Conv2d(width_in, width_out, 1, stride=stride, padding=0, bias=False)
            self.bn = nn.BatchNorm2d(width_out, eps=bn_epsilon, momentum=bn_momentum)
        self.f = BasicTransform(width_in, width_out, stride, bn_epsilon, bn_momentum, activation)
        self.activation = activation
        self.depth = self.f.depth

    def forward(self, x):
        if self.proj_block:
            x = self.bn(self.proj(x)) + self.f(x)
        else:
            x = x + self.f(x)
        return self.activation(x)


class BottleneckTransform(nn.Sequential):
    def __init__(self, width_in, width_out, stride, bn_epsilon, bn_momentum, activation,
                 group_width, bottleneck_multiplier, se_ratio):
        super().__init__()
        w_b = int(round(width_out * bottleneck_multiplier))
        g = w_b // group_width
        self.a = nn.Sequential(
            nn.Conv2d(width_in, w_b, 1, stride=1, padding=0, bias=False),
            nn.BatchNorm2d(w_b, eps=bn_epsilon, momentum=bn_momentum),
            activation,
        )
        self.b = nn.Sequential(
            nn.Conv2d(w_b, w_b, 3, stride=stride, padding=1, groups=g, bias=False),
            nn.BatchNorm2d(w_b, eps=bn_epsilon, momentum=bn_momentum),
            activation,
        )
        if se_ratio:
            # The SE reduction ratio is defined with respect to the beginning of the block
            width_se_out = int(round(se_ratio * width_in))
            self.se = SqueezeAndExcitationLayer(in_planes=w_b, reduction_ratio=None,
                                                reduced_planes=width_se_out, activation=activation)
        self.c = nn.Conv2d(w_b, width_out, 1, stride=1, padding=0, bias=False)
        self.final_bn = nn.BatchNorm2d(width_out, eps=bn_epsilon, momentum=bn_momentum)
        self.depth = 3 if not se_ratio else 4


class ResBottleneckBlock(nn.Module):
    def __init__(self, width_in, width_out, stride, bn_epsilon, bn_momentum, activation,
                 group_width=1, bottleneck_multiplier=1.0, se_ratio=None):
        super().__init__()
        self.proj_block = (width_in != width_out) or (stride != 1)
        if self.proj_block:
            self.proj = nn.Conv2d(width_in, width_out, 1, stride=stride, padding=0, bias=False)
            self.bn = nn.BatchNorm2d(width_out, eps=bn_epsilon, momentum=bn_momentum)
        self.f = BottleneckTransform(width_in, width_out, stride, bn_epsilon, bn_momentum, activation,
                                     group_width, bottleneck_multiplier, se_ratio)
        self.activation = activation
        self.depth = self.f.depth

    def forward(self, x, *args):
        if self.proj_block:
            x = self.bn(self.proj(x)) + self.f(x)
        else:
            x = x + self.f(x)
        return self.activation(x)


class ResBottleneckLinearBlock(nn.Module):
    def __init__(self, width_in, width_out, stride, bn_epsilon, bn_momentum, activation,
                 group_width=1, bottleneck_multiplier=4.0, se_ratio=None):
        super().__init__()
        self.has_skip = (width_in == width_out) and (stride == 1)
        self.f = BottleneckTransform(width_in, width_out, stride, bn_epsilon, bn_momentum, activation,
                                     group_width, bottleneck_multiplier, se_ratio)
        self.depth = self.f.depth

    def forward(self, x):
        return x + self.f(x) if self.has_skip else self.f(x)


class AnyStage(nn.Sequential):
    def __init__(self, width_in, width_out, stride, depth, block_constructor, activation,
                 group_width, bottleneck_multiplier, params, stage_index=0):
        super().__init__()
        self.stage_depth = 0
        for i in range(depth):
            block = block_constructor(
                width_in if i == 0 else width_out, width_out, stride if i == 0 else 1,
                params.bn_epsilon, params.bn_momentum, activation, group_width,
                bottleneck_multiplier, params.se_ratio)
            self.stage_depth += block.depth
            self.add_module(f"block{stage_index}-{i}", block)


def _quantize_float(f, q):
    """Converts a float to closest non-zero int divisible by q."""
    return int(round(f / q) * q)


def _adjust_widths_groups_compatibilty(stage_widths, bottleneck_ratios, group_widths):
    widths = [int(w * b) for w, b in zip(stage_widths, bottleneck_ratios)]
    groud_widths_min = [min(g, w_bot) for g, w_bot in zip(group_widths, widths)]
    ws_bot = [_quantize_float(w_bot, g) for w_bot, g in zip(widths, groud_widths_min)]
    stage_widths = [int(w_bot / b) for w_bot, b in zip(ws_bot, bottleneck_ratios)]
    return stage_widths, groud_widths_min


class RegNetParams:
    def __init__(self, depth, w_0, w_a, w_m, group_width, bottleneck_multiplier=1.0,
                 stem_type=StemType.SIMPLE_STEM_IN, stem_width=32,
                 block_type=BlockType.RES_BOTTLENECK_BLOCK, activation=ActivationType.RELU,
                 use_se=True, se_ratio=0.25, bn_epsilon=1e-05, bn_momentum=0.1):
        assert w_a >= 0 and w_0 > 0 and w_m > 1 and w_0 % 8 == 0, "Invalid RegNet settings"
        self.depth = depth
        self.w_0 = w_0
        self.w_a = w_a
        self.w_m = w_m
        self.group_width = group_width
        self.bottleneck_multiplier = bottleneck_multiplier
        self.stem_type = stem_type
        self.block_type = block_type
        self.activation = activation
        self.stem_width = stem_width
        self.use_se = use_se
        self.se_ratio = se_ratio if use_se else None
        self.bn_epsilon = bn_epsilon
        self.bn_momentum = bn_momentum
        self.relu_in_place = RELU_IN_PLACE

    def get_expanded_params(self):
        QUANT = 8
        STRIDE = 2
        widths_cont = np.arange(self.depth) * self.w_a + self.w_0
        block_capacity = np.round(np.log(widths_cont / self.w_0) / np.log(self.w_m))
        block_widths = np.round(np.divide(self.w_0 * np.power(self.w_m, block_capacity), QUANT)) * QUANT
        num_stages = len(np.unique(block_widths))
        block_widths = block_widths.astype(int).tolist()
        split_helper = zip(block_widths + [0], [0] + block_widths, block_widths + [0], [0] + block_widths)
        splits = [w != wp or r != rp for w, wp, r, rp in split_helper]
        stage_widths = [w for w, t in zip(block_widths, splits[:-1]) if t]
        stage_depths = np.diff([d for d, t in enumerate(splits) if t]).tolist()
        strides = [STRIDE] * num_stages
        bottleneck_multipliers = [self.bottleneck_multiplier] * num_stages
        group_widths = [self.group_width] * num_stages
        stage_widths, group_widths = _adjust_widths_groups_compatibilty(
            stage_widths, bottleneck_multipliers, group_widths)
        return zip(stage_widths, strides, stage_depths, group_widths, bottleneck_multipliers)


class RegNet(nn.Module):
    """AnyNet's __init__ and forward (ClassyModel's bookkeeping left out: VISSL keeps only stem
    and trunk_output)."""

    def __init__(self, params):
        super().__init__()
        activation = {ActivationType.RELU: nn.ReLU(params.relu_in_place),
                      ActivationType.SILU: nn.SiLU()}[params.activation]
        self.stem = {StemType.RES_STEM_CIFAR: ResStemCifar, StemType.RES_STEM_IN: ResStemIN,
                     StemType.SIMPLE_STEM_IN: SimpleStemIN}[params.stem_type](
            3, params.stem_width, params.bn_epsilon, params.bn_momentum, activation)
        block_fun = {BlockType.VANILLA_BLOCK: VanillaBlock, BlockType.RES_BASIC_BLOCK: ResBasicBlock,
                     BlockType.RES_BOTTLENECK_BLOCK: ResBottleneckBlock,
                     BlockType.RES_BOTTLENECK_LINEAR_BLOCK: ResBottleneckLinearBlock}[params.block_type]
        current_width = params.stem_width
        self.trunk_depth = 0
        blocks = []
        for i, (width_out, stride, depth, group_width, bottleneck_multiplier) in enumerate(params.get_expanded_params()):
            blocks.append((f"block{i+1}", AnyStage(current_width, width_out, stride, depth, block_fun,
                                                   activation, group_width, bottleneck_multiplier,
                                                   params, stage_index=i + 1)))
            self.trunk_depth += blocks[-1][1].stage_depth
            current_width = width_out
        self.trunk_output = nn.Sequential(OrderedDict(blocks))

    def forward(self, x):
        return self.trunk_output(self.stem(x))


def params_from_config(config):
    """RegNet.from_config's RegNetParams."""
    return RegNetParams(
        depth=config["depth"], w_0=config["w_0"], w_a=config["w_a"], w_m=config["w_m"],
        group_width=config["group_width"],
        bottleneck_multiplier=config.get("bottleneck_multiplier", 1.0),
        stem_type=StemType[config.get("stem_type", "simple_stem_in").upper()],
        stem_width=config.get("stem_width", 32),
        block_type=BlockType[config.get("block_type", "res_bottleneck_block").upper()],
        activation=ActivationType[config.get("activation", "relu").upper()],
        use_se=config.get("use_se", True), se_ratio=config.get("se_ratio", 0.25),
        bn_epsilon=config.get("bn_epsilon", 1e-05), bn_momentum=config.get("bn_momentum", 0.1))


# regnet.py's registered presets: RegNetParams(...) of each (every other option at its default).
_Z = dict(bottleneck_multiplier=4.0, block_type="res_bottleneck_linear_block", activation="silu")
PRESETS = OrderedDict([
    ("regnet_y_400mf", dict(depth=16, w_0=48, w_a=27.89, w_m=2.09, group_width=8)),
    ("regnet_y_800mf", dict(depth=14, w_0=56, w_a=38.84, w_m=2.4, group_width=16)),
    ("regnet_y_1.6gf", dict(depth=27, w_0=48, w_a=20.71, w_m=2.65, group_width=24)),
    ("regnet_y_3.2gf", dict(depth=21, w_0=80, w_a=42.63, w_m=2.66, group_width=24)),
    ("regnet_y_8gf", dict(depth=17, w_0=192, w_a=76.82, w_m=2.19, group_width=56)),
    ("regnet_y_16gf", dict(depth=18, w_0=200, w_a=106.23, w_m=2.48, group_width=112)),
    ("regnet_y_32gf", dict(depth=20, w_0=232, w_a=115.89, w_m=2.53, group_width=232)),
    ("regnet_x_400mf", dict(depth=22, w_0=24, w_a=24.48, w_m=2.54, group_width=16, use_se=False)),
    ("regnet_x_800mf", dict(depth=16, w_0=56, w_a=35.73, w_m=2.28, group_width=16, use_se=False)),
    ("regnet_x_1.6gf", dict(depth=18, w_0=80, w_a=34.01, w_m=2.25, group_width=24, use_se=False)),
    ("regnet_x_3.2gf", dict(depth=25, w_0=88, w_a=26.31, w_m=2.25, group_width=48, use_se=False)),
    ("regnet_x_8gf", dict(depth=23, w_0=80, w_a=49.56, w_m=2.88, group_width=120, use_se=False)),
    ("regnet_x_16gf", dict(depth=22, w_0=216, w_a=55.59, w_m=2.1, group_width=128, use_se=False)),
    ("regnet_x_32gf", dict(depth=23, w_0=320, w_a=69.86, w_m=2.0, group_width=168, use_se=False)),
    ("regnet_z_500mf", dict(depth=21, w_0=16, w_a=10.7, w_m=2.51, group_width=4, **_Z)),
    ("regnet_z_4gf", dict(depth=28, w_0=48, w_a=14.5, w_m=2.226, group_width=8, **_Z)),
    ("regnet_y_64gf", dict(depth=20, w_0=368, w_a=102.79, w_m=2.05, group_width=496)),
    ("regnet_y_128gf", dict(depth=27, w_0=456, w_a=160.83, w_m=2.52, group_width=264)),
    ("regnet_y_256gf", dict(depth=27, w_0=640, w_a=124.47, w_m=2.04, group_width=848)),
])
# Custom parameter sets for regnet_presets.txt: VISSL's docs' RegNet-256GF; a bottleneck
# multiplier of 2 and one of 0.25 (int() truncation, widths/b); group widths larger than a
# stage's bottleneck width (the group width drops to it); round-half-even in _quantize_float
# (40/16 = 2.5 -> 32; 24/16 = 1.5 -> 32); w_a = 0 (one stage); pycls's RegNetX-200MF and
# RegNetY-600MF; and the four test cases' own settings.
CUSTOM = (
    "custom:depth=27,w_0=640,w_a=230.83,w_m=2.53,group_width=373",
    "custom:depth=16,w_0=48,w_a=27.89,w_m=2.09,group_width=8,bottleneck_multiplier=2.0",
    "custom:depth=12,w_0=32,w_a=24.0,w_m=2.5,group_width=16,bottleneck_multiplier=0.25",
    "custom:depth=4,w_0=16,w_a=8.0,w_m=2.0,group_width=64",
    "custom:depth=8,w_0=24,w_a=12.0,w_m=1.67,group_width=48",
    "custom:depth=6,w_0=24,w_a=8.0,w_m=1.67,group_width=16",
    "custom:depth=3,w_0=32,w_a=0.0,w_m=2.0,group_width=8",
    "custom:depth=13,w_0=24,w_a=36.44,w_m=2.49,group_width=8",
    "custom:depth=15,w_0=48,w_a=32.54,w_m=2.32,group_width=16",
    "custom:depth=4,w_0=8,w_a=8.0,w_m=2.0,group_width=4,bottleneck_multiplier=4.0",
)

# The test cases: from_config dictionaries.
CASES = OrderedDict([
    ("y", dict(depth=4, w_0=16, w_a=8.0, w_m=2.0, group_width=8, stem_width=16,
               stem_type="simple_stem_in", block_type="res_bottleneck_block", use_se=True, se_ratio=0.25)),
    ("x_basic", dict(depth=4, w_0=8, w_a=8.0, w_m=2.0, group_width=8, stem_width=16,
                     stem_type="res_stem_cifar", block_type="res_basic_block", use_se=False)),
    ("z", dict(depth=4, w_0=8, w_a=8.0, w_m=2.0, group_width=4, bottleneck_multiplier=4.0, stem_width=16,
               stem_type="res_stem_in", block_type="res_bottleneck_linear_block", activation="silu",
               use_se=True, se_ratio=0.25)),
    ("vanilla", dict(depth=4, w_0=8, w_a=8.0, w_m=2.0, group_width=8, stem_width=16,
                     stem_type="simple_stem_in", block_type="vanilla_block", use_se=False,
                     bn_epsilon=1e-4, bn_momentum=0.05)),
])
OPTION_DEFAULTS = OrderedDict([
    ("depth", None), ("w_0", None), ("w_a", None), ("w_m", None), ("group_width", None),
    ("bottleneck_multiplier", 1.0), ("stem_type", "simple_stem_in"), ("stem_width", 32),
    ("block_type", "res_bottleneck_block"), ("activation", "relu"), ("use_se", True),
    ("se_ratio", 0.25), ("bn_epsilon", 1e-05), ("bn_momentum", 0.1),
])


# ---------------------------------------------------------------------------------------------
# VISSL's trunk wrapper and the formula.

class Trunk(nn.Module):
    """vissl/models/trunks/regnet.py's RegNet: the stem and stages as _feature_blocks."""

    def __init__(self, model):
        super().__init__()
        blocks = [("conv1", model.stem)]
        for k, v in model.trunk_output.named_children():
            assert k.startswith("block"), f"Unexpected layer name {k}"
            blocks.append((f"res{len(blocks) + 1}", v))
        blocks.append(("avgpool", nn.AdaptiveAvgPool2d((1, 1))))
        blocks.append(("flatten", nn.Flatten(1)))
        self._feature_blocks = nn.ModuleDict(blocks)

    def forward(self, x, means=None):
        """The flatten features; with a list `means`, each of conv1, res2, ...'s per-channel mean
        over N, H, W appended to it."""
        for name, block in self._feature_blocks.items():
            x = block(x)
            if means is not None and (name == "conv1" or name.startswith("res")):
                means.append(x.mean(dim=(0, 2, 3)))
        return x


def build(config):
    """VISSL's trunk around RegNet.from_config(config), every value set by the formula (float32)."""
    return set_formula(Trunk(RegNet(params_from_config(config))))


def stage_lists(config):
    """(widths, depths, group_widths, bottleneck_multipliers) as get_expanded_params yields them."""
    rows = list(params_from_config(config).get_expanded_params())
    return [r[0] for r in rows], [r[2] for r in rows], [r[3] for r in rows], [r[4] for r in rows]


def torchvision_lists(config):
    bp = torchvision.models.regnet.BlockParams.from_init_params(
        config["depth"], config["w_0"], config["w_a"], config["w_m"], config["group_width"],
        config.get("bottleneck_multiplier", 1.0))
    return list(bp.widths), list(bp.depths), list(bp.group_widths), list(bp.bottleneck_multipliers)


save = functools.partial(trunk_golden.save_f32, "regnet")
save_names = functools.partial(trunk_golden.save_names, "regnet")


def maxpool_gap(a):
    """The smallest gap between the largest and second-largest input of any 3×3 stride-2 pad-1
    window of a (N × C × H × W)."""
    n, c = a.shape[:2]
    cols = F.unfold(F.pad(a, (1, 1, 1, 1), value=-math.inf), 3, stride=2).view(n, c, 9, -1)
    top = cols.topk(2, dim=2).values
    return (top[:, :, 0] - top[:, :, 1]).min().item()


def fp32_measure(case, phase):
    """In a child process (trunk_golden.fp32_runs): torch float32's decision inputs and gradient
    summaries; for Y400_DX, its input gradient."""
    if case == Y400_DX:
        return {"dx": input_gradient(y400(), y400_input(phase)).numpy()}
    x = inputs(N_IMAGES, SIZE, phase)
    out = {"decisions": [a.numpy() for _, a in decisions(build(CASES[case]), x)]}
    m = build(CASES[case])
    train_step(m, x)
    out["grads"] = np.array(grad_summaries(m))
    return out


SEARCH = PhaseSearch(__file__, lambda case: build(CASES[case]), lambda case, phase: inputs(N_IMAGES, SIZE, phase),
                     maxpool_gap, SEARCH_PHASES, MIN_BAND_MARGIN)
# Only its band margins are used (choose_y400_phase): no phase reaches MIN_BAND_MARGIN.
Y400_SEARCH = PhaseSearch(__file__, lambda case: y400(), lambda case, phase: y400_input(phase), maxpool_gap,
                          SEARCH_PHASES, MIN_BAND_MARGIN)


def grad_case(case, phase, runs):
    """Every per-case fixture, in float64; torch float32's worst gradient error under the caps of
    ISAS as the floor."""
    margin, per_kind = SEARCH.checked(case, phase, runs)
    m = build(CASES[case])
    save_names(case, m)
    m = m.double()
    x = inputs(N_IMAGES, SIZE, phase).double()
    means = []
    save(f"{case}_feat_eval", eval_features(m, x, means))
    save(f"{case}_means_eval", torch.cat(means))
    x.requires_grad_(True)
    exact, floor = save_train_fixtures(save, case, m, x, [r["grads"] for r in runs], "stem",
                                       m._feature_blocks.conv1.stem[0].weight)
    save(f"{case}_dx", x.grad)
    save(f"{case}_phase", [phase])
    kinds = ", ".join(f"{k} {v:.2f}" for k, v in sorted(per_kind.items()))
    print(f"{case}: phase {phase}, every decision at least {margin:.2f}x its float32 noise away "
          f"({kinds}); grad floor max {max(floor):.3g}; {sum(p.numel() for p in m.parameters())} parameters; "
          f"features {[tuple(t.shape) for t in means]} channels, {len(bn_stats(m))} BN layers")
    print_zero_grads(case, [n for n, _ in m.named_parameters()], exact, floor)


# torchvision's module paths inside a RegNet block against ClassyVision's (VISSL's).
TV_BLOCK_NAMES = (("proj.0.", "proj."), ("proj.1.", "bn."), ("f.se.fc1.", "f.se.excitation.0."),
                  ("f.se.fc2.", "f.se.excitation.2."), ("f.c.0.", "f.c."), ("f.c.1.", "f.final_bn."))


def vissl_name_of_torchvision(name):
    """torchvision's regnet_* state-dict name → VISSL's trunk name (without "trunk.")."""
    if name.startswith("stem."):
        return "_feature_blocks.conv1." + name
    _, stage, block, rest = name.split(".", 3)
    for tv, classy in TV_BLOCK_NAMES:
        if rest.startswith(tv):
            rest = classy + rest[len(tv):]
    return f"_feature_blocks.res{int(stage[len('block'):]) + 1}.{block}.{rest}"


def y400():
    """regnet_y_400mf with the formula's values (float32)."""
    return build(PRESETS["regnet_y_400mf"])


def y400_input(phase):
    return inputs(Y400_DX_IMAGES, Y400_DX_SIZE, phase)


def y400_dx(phase):
    """(the float64 input gradient, torch float32's own error on it under every cap of ISAS)."""
    exact = input_gradient(y400().double(), y400_input(phase).double())
    runs = fp32_runs(__file__, {Y400_DX: phase})[Y400_DX]
    return exact, dx_floor(exact, [r["dx"] for r in runs])


def choose_y400_phase():
    """The phase of 0..SEARCH_PHASES−1 with the largest band margin here whose input gradient
    torch float32 gets within DX_FLOOR_MAX under every cap of ISAS (see Y400_DX_IMAGES)."""
    margins = Y400_SEARCH.margins(Y400_DX, range(SEARCH_PHASES))
    for phase in sorted(margins, key=lambda p: (-margins[p], p)):
        floor = y400_dx(phase)[1]
        print(f"{Y400_DX}: phase {phase}: band margin {margins[phase]:.2f} here, input gradient's float32 "
              f"error {floor:.3g} under every cap")
        if floor <= DX_FLOOR_MAX:
            return phase
    raise SystemExit(f"{Y400_DX}: no phase of 0..{SEARCH_PHASES - 1} keeps the input gradient's float32 error "
                     f"within {DX_FLOOR_MAX}")


def save_y400_dx():
    """regnet_y400_dx and regnet_y400_dx_phase (the committed phase, else chosen)."""
    phase = golden.kept_choice("nn", f"regnet_{Y400_DX}_phase.npy", choose_y400_phase)
    exact, floor = y400_dx(phase)
    assert floor <= DX_FLOOR_MAX, f"{Y400_DX}: torch float32's own error {floor:.3g} at phase {phase}"
    save(Y400_DX, exact)
    save(f"{Y400_DX}_phase", [phase])
    print(f"{Y400_DX}: {tuple(exact.shape)} at phase {phase}, torch float32's own error {floor:.3g} under every "
          f"cap (at most {DX_FLOOR_MAX})")


def write_torchvision(case):
    """CASE's formula weights in torchvision's RegNet (torchvision.models.regnet.RegNet with the
    case's parameters and a 10-class fc), its state dict as torch.save writes it: what `selfsup
    convert` must turn into VISSL's names. Asserts torchvision builds the same network (the same
    features from the same weights) first."""
    config = CASES[case]
    ours = build(config)
    tv = torchvision.models.regnet
    params = tv.BlockParams.from_init_params(depth=config["depth"], w_0=config["w_0"], w_a=config["w_a"],
                                             w_m=config["w_m"], group_width=config["group_width"],
                                             se_ratio=config["se_ratio"] if config.get("use_se", True) else None)
    m = tv.RegNet(params, num_classes=10, stem_width=config["stem_width"])
    mine = ours.state_dict()
    with torch.no_grad():
        for name, t in m.state_dict().items():
            if name.startswith("fc."):
                t.zero_()  # not a trunk tensor (convert drops it); zero, so the file repeats
            else:
                t.copy_(mine[vissl_name_of_torchvision(name)])
    m.eval()
    x = inputs(2, SIZE)
    with torch.no_grad():
        assert torch.equal(torch.flatten(m.avgpool(m.trunk_output(m.stem(x))), 1), eval_features(ours, x)), case
    torch.save(m.state_dict(), os.path.join(OUT, f"regnet_{case}_torchvision.pth"))


def write_classy(case):
    """CASE's formula weights in ClassyVision's own RegNet (its state dict: stem.stem.*,
    trunk_output.blockS.*), as a ClassyVision checkpoint's model holds them."""
    mine = build(CASES[case]).state_dict()
    m = RegNet(params_from_config(CASES[case]))
    with torch.no_grad():
        for name, t in m.state_dict().items():
            if name.startswith("stem.stem."):
                t.copy_(mine["_feature_blocks.conv1.stem." + name[len("stem.stem."):]])
            else:
                _, stage, rest = name.split(".", 2)
                t.copy_(mine[f"_feature_blocks.res{int(stage[len('block'):]) + 1}.{rest}"])
    torch.save(m.state_dict(), os.path.join(OUT, f"regnet_{case}_classy.pth"))


def write_checkpoint(case):
    """CASE's formula weights as a VISSL checkpoint."""
    save_vissl_checkpoint(os.path.join(OUT, f"regnet_{case}_vissl.pt"), build(CASES[case]).state_dict())


def shapes(m, size):
    """Each feature's (C, H, W) for one image of `size` px."""
    out = []
    x = torch.zeros(1, 3, size, size)
    m.eval()
    with torch.no_grad():
        for name, block in m._feature_blocks.items():
            x = block(x.clone()) if name != "flatten" else x
            if name == "conv1" or name.startswith("res"):
                out.append((name, tuple(x.shape[1:])))
    return out


def write_presets():
    sets = [(name, dict(cfg)) for name, cfg in PRESETS.items()]
    for name in CUSTOM:
        cfg = {}
        for kv in name.split(":", 1)[1].split(","):
            k, v = kv.split("=")
            cfg[k] = int(v) if k in ("depth", "w_0", "group_width") else float(v)
        sets.append((name, cfg))
    agree = []
    with open(os.path.join(OUT, "regnet_presets.txt"), "w") as f, \
            open(os.path.join(OUT, "regnet_presets_torchvision.txt"), "w") as g:
        for name, cfg in sets:
            ours = stage_lists(cfg)
            f.write(f"{name} {' '.join(fmt(l) for l in ours)}\n")
            tv = torchvision_lists(cfg)
            same = [list(map(int, ours[0])), ours[1], ours[2], [float(b) for b in ours[3]]] == \
                   [tv[0], tv[1], tv[2], [float(b) for b in tv[3]]]
            g.write(f"{name} same\n" if same else f"{name} differs {' '.join(fmt(l) for l in tv)}\n")
            agree.append(same)
            print(f"{name}: {' '.join(fmt(l) for l in ours)}" + ("" if same else f"  (torchvision: {' '.join(fmt(l) for l in tv)})"))
    print(f"torchvision 0.14 agrees on {sum(agree)} of {len(agree)} parameter sets")


def write_cases():
    with open(os.path.join(OUT, "regnet_cases.txt"), "w") as f:
        for case, config in CASES.items():
            opts = [f"{k}={config.get(k, d)}" for k, d in OPTION_DEFAULTS.items()]
            widths, depths, gws, bms = stage_lists(config)
            params = sum(p.numel() for p in build(config).parameters())
            f.write(f"{case} {' '.join(opts)} widths={fmt(widths)} depths={fmt(depths)} "
                    f"group_widths={fmt(gws)} bottleneck_multipliers={fmt(bms)} n={N_IMAGES} size={SIZE} "
                    f"params={params}\n")


# ---------------------------------------------------------------------------------------------
# Model complexity: ClassyVision's profiler over the trunk, one row per leaf-module call.

COMPLEXITY_KINDS = {"Conv2d": "conv", "BatchNorm2d": "batchnorm", "ReLU": "relu", "SiLU": "silu",
                    "Sigmoid": "sigmoid", "MaxPool2d": "maxpool", "AdaptiveAvgPool2d": "avgpool",
                    "Flatten": "flatten"}
COMPLEXITY_MODELS = OrderedDict([("y400", ("regnet_y_400mf", 224)), ("x400", ("regnet_x_400mf", 224))] +
                                [(case, (case, SIZE)) for case in CASES])

# pycls's MODEL_ZOO figures (with the fc head), printed beside ours.
PUBLISHED = {"regnet_y_400mf": "0.4 GF, 4.3 M parameters, 3.9 M activations",
             "regnet_x_400mf": "0.4 GF, 5.2 M parameters, 3.1 M activations"}


def complexity_flops(mod, x):
    """The profiler's _layer_flops for the trunk's module types (-1: NotImplementedError)."""
    kind = type(mod).__name__
    if kind == "Sigmoid":
        return x.numel()  # "ReLU", "ReLU6", "Tanh", "Sigmoid", "Softmax": x.numel()
    if kind == "SiLU":
        return -1  # in no list and without a flops method
    if kind == "Flatten":
        return 0  # VISSL's Flatten.flops (nn.Flatten stands in for it in Trunk)
    return layer_flops(mod, x)


def write_complexity():
    """regnet_TAG_complexity.txt per COMPLEXITY_MODELS entry; the 400MF totals beside pycls's."""
    for tag, (name, size) in COMPLEXITY_MODELS.items():
        config = PRESETS[name] if name in PRESETS else CASES[name]
        m = Trunk(RegNet(params_from_config(config)))  # shapes only: the values do not matter
        # one row per leaf-module call; the shared activation gets one name per call site
        rows = profile(m, torch.zeros(1, 3, size, size), COMPLEXITY_KINDS, complexity_flops, layer_activations,
                       named=call_site_names(m))
        flops, params, acts = trunk_golden.write_complexity(os.path.join(OUT, f"regnet_{tag}_complexity.txt"), m, rows)
        print(f"{tag} ({name}, 1 x 3 x {size} x {size}): {len(rows)} rows, {flops} multiply-adds, "
              f"{params} parameters, {acts} activations")
        if size == 224:
            conv = sum(r[2] for r in rows if r[1] == "conv")
            width = stage_lists(config)[0][-1]  # the trunk's output features
            fc = width * 1000
            print(f"  {name}: conv rows only {conv / 1e9:.3f} G; with a {width} x 1000 fc head "
                  f"(pycls counts it) {(conv + fc) / 1e9:.3f} G multiply-adds, "
                  f"{(params + fc + 1000) / 1e6:.2f} M parameters, {(acts + 1000) / 1e6:.2f} M activations "
                  f"(pycls: {PUBLISHED[name]})")


def main():
    if trunk_golden.fp32_main(sys.argv, fp32_measure) or SEARCH.search_main(sys.argv):
        return
    trunk_golden.start()
    write_presets()
    for case, config in CASES.items():
        widths, depths, gws, bms = stage_lists(config)
        feats = shapes(build(config), SIZE)
        assert len(widths) >= 2 and all(min(s[1:]) >= 1 for _, s in feats), (case, feats)
        print(f"{case}: widths {fmt(widths)} depths {fmt(depths)} group_widths {fmt(gws)} "
              f"bottleneck_multipliers {fmt(bms)}; at {SIZE} px {feats}")
    phases = SEARCH.kept("regnet", CASES)
    write_cases()
    runs = fp32_runs(__file__, phases)
    for case in CASES:
        grad_case(case, phases[case], runs[case])
    write_checkpoint("y")
    write_torchvision("y")
    write_classy("y")
    m = build(PRESETS["regnet_y_400mf"])
    save_names("y400", m)
    save("y400_feat_eval", eval_features(m, inputs(2, 64)))
    save_y400_dx()
    m = build(PRESETS["regnet_y_16gf"])  # a large preset: VISSL's SwAV RegNet, 80M parameters
    save_names("y16", m)
    save("y16_feat_eval", eval_features(m, inputs(1, 32)))
    write_complexity()
    print(f"make_regnet_fixtures: wrote to {OUT} (torch {torch.__version__}, torchvision {torchvision.__version__})")


if __name__ == "__main__":
    main()
