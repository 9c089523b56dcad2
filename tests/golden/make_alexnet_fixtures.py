#!/usr/bin/python3
"""make_alexnet_fixtures.py — VISSL's five AlexNet trunks, for the C AlexNet trunks (nn/alexnet.c,
tests/unit/test_alexnet.c).

VISSL is not installed here, so its trunks are re-stated below from vissl/models/trunks/
alexnet_{bvlc,colorization,deepcluster,jigsaw,rotnet}.py (v0.1.5): the same nn.Sequential blocks
in a `_feature_blocks` nn.ModuleList and, for deepcluster, the `sobel` nn.Sequential (registered
first, as VISSL registers it), so state_dict() names and order are VISSL's
(`sobel.0.weight`, …, `_feature_blocks.0.0.weight`, `_feature_blocks.4.1.running_var`). Two
departures, both outside the modules: colorization's forward starts at the L channel (VISSL's
trunk does torch.split(x, [1, 2], dim=1)[0] first; selfsup's model.c does that split, so the C
trunk and these cases take N × 1 × H × W), and the features are written as N × (C·H·W).
VISSL's `Flatten()` in these trunks is model_helpers.Flatten with its default dim=-1, i.e.
torch.flatten(x, start_dim=-1): on a 4-D tensor that changes nothing, so VISSL's "flatten"
feature is N × C × H × W (the same numbers, in the same order, as N × (C·H·W)). It is re-stated
as it is (flops() = 0).

No weights are stored: every parameter, BN running statistic, input image and upstream gradient is
set by the closed formula of trunk_golden.py (make_resnet_fixtures.py's, the same constants;
set_formula numbers the tensors as below), a Weyl sequence computed in float64 and rounded to
float32. Let u(i, k) = frac(i·ALPHA + k·BETA) for flat element index i of tensor k:
  4-D conv weight (parameter k)  sqrt(6/fan_in)·(2u−1), fan_in = shape[1]·shape[2]·shape[3]
                                 (grouped convs: shape[1] is the group's input width)
  1-D parameter named *weight    1 + 0.25·(2u−1)                 (BN weight)
  other 1-D parameter            0.1·(2u−1)                      (conv bias, BN bias)
  running_mean / running_var     (k = buffer index) 0.1·(2u−1) / 1 + 0.5·u
  input image x                  2·frac(i·X_ALPHA + phase·BETA) − 1, N × C × H × W (C = 1 for
                                 colorization, else 3)
  upstream gradient r            2·frac(i·R_ALPHA) − 1, over the N·C·H·W flatten features
THE NUMBERING RULE (as nn/params.c's eng_params_init_formula numbers the C entries, which are
declared in VISSL's state-dict order, with deepcluster's four Sobel tensors as buffers):
  - parameters: k counts named_parameters() in order, SKIPPING `sobel.*` (in PyTorch they are
    requires_grad=False parameters, in C buffers), from 0;
  - buffers: k counts the C buffers in order, from 0: deepcluster's four Sobel tensors first
    (sobel.0.weight, sobel.0.bias, sobel.1.weight, sobel.1.bias take buffer numbers 0..3, but
    keep VISSL's fixed values: grayscale 1/3, Sobel kernels, zero biases; alexnet_init_formula
    skips their values, not their numbers), then named_buffers() in order (num_batches_tracked
    left out), so deepcluster's first running_mean is buffer 4; every other variant's is 0.

Files (tests/golden/fixtures/nn/alexnet_*):
  alexnet_cases.txt      "CASE variant=V n=N size=S params=P min_input=M" per case: the five
                         small cases (CASE = the variant's name) and the two large ones
                         (rotnet224, bvlc224); params is the trainable parameter count (Sobel's
                         24 left out), min_input the smallest square input whose every
                         MaxPool2d(3, 2) gets at least 3 × 3 (found by trying each size).
  alexnet_CASE_names.txt "name kind shape" per state-dict entry, kind param or buffer (Sobel's
                         buffer), num_batches_tracked left out, shape comma-separated.
For each small CASE (N = 2 images of S px, S in SIZES: bvlc 99, colorization 99, deepcluster 96,
jigsaw 56, rotnet 95, where pool5 is 2 × 2, so the flatten order over H, W and a last max-pool
with several windows are exercised; input phase from
alexnet_CASE_phase.npy), computed in float64 on the model converted to double after the float32
formula values were set (the exact answer to the float32 inputs and weights), stored as float32:
  alexnet_CASE_feat_eval.npy   N × (C·H·W) flatten features, eval mode
  alexnet_CASE_means_eval.npy  eval mode, for each feature conv1, pool1, conv2, pool2, conv3,
                               conv4, conv5, pool5 (block outputs, network order) the per-channel
                               mean over N, H, W, concatenated into one 1-D array
  alexnet_CASE_feat_train.npy  N × (C·H·W) features of one train-mode forward from the formula
                               state (after the eval forward, which changes nothing)
  alexnet_CASE_stats.npy       Σ of each C buffer after that train forward, in the C buffer
                               order above: deepcluster's four Sobel tensors first (unchanged:
                               1.0000001 = 3·fp32(1/3), 0, 0, 0), then per BN layer
                               Σ running_mean, Σ running_var (empty for bvlc: no buffers)
  alexnet_CASE_grads.npy       per parameter (the numbering above: Sobel's left out)
                               [Σ g, Σ g²] of L = Σ feat·r after that train forward
  alexnet_CASE_grad_floor.npy  per parameter, torch float32's own error on grads, the largest
                               under oneDNN's ISAS caps: max(|Σg − Σg*| / √Σg*², |Σg² − Σg*²| /
                               Σg*²) (test_resnet.c's measure). Except where Σg*² < ZERO_GRAD_SQ
                               = 1e-20: a conv bias followed by train-mode BN, whose gradient is
                               mathematically zero (BN removes any per-channel shift), left at
                               float64 roundoff in grads.npy: there the entry is torch float32's
                               largest √Σg², an absolute size to hold the engine's √Σg² to
  alexnet_CASE_dx.npy          the full gradient of L with respect to the input image x
                               (N × C × S × S; through the Sobel stage for deepcluster)
  alexnet_CASE_dx_floor.npy    [torch float32's largest max|dx32 − dx*| / max|dx*|] under ISAS
  alexnet_CASE_phase.npy       [phase]: the input phase (see MIN_BAND_MARGIN below)
Large cases (TAG rotnet224, bvlc224): alexnet_TAG_feat_eval.npy, the eval features (2 images of
  224 px, input phase 0, float64 from the float32 formula values: 2 × 9216 and 2 × 6400); and the
  input gradient of L = Σ feat·r after one train-mode forward of ONE image of 224 px (input phase
  0), computed in float64 as the small cases' dx. Its 1 × 3 × 224 × 224 values are too many to
  commit, so two summaries of it are, stored as float32:
  alexnet_TAG_dx_tiles.npy     1 × 3 × 56 × 56: its sums over the non-overlapping DX_TILE × DX_TILE
                               (4 × 4) tiles, summed in float64
  alexnet_TAG_dx_centre.npy    1 × 3 × 32 × 32: the gradient itself in the window of rows and
                               columns DX_CENTRE (96..127) at the image's centre, every channel
  (no phase is chosen: torch float32's own error on each, under every cap of ISAS, is asserted
  to be at most trunk_golden.DX_FLOOR_MAX, 2.5e-4; it is about 1e-6).

Model complexity (what VISSL's SSLModelComplexityHook reports for the trunk: ClassyVision's
profiler, classy_vision/generic/profiler.py, on one zero image in eval mode), one file per
variant, alexnet_VARIANT_complexity.txt, at VISSL's INPUT_SHAPE 224 × 224 (1 × 3 × 224 × 224; 1 × 1 ×
224 × 224 for colorization, whose torch.split is a function, not a module: no row). Each row
"name kind flops params activations", one per leaf-module call in call order (forward hooks;
every module is called once), then "total - FLOPS PARAMS ACTIVATIONS" (FLOPS -1 when any row's
is -1; PARAMS is count_params: EVERY parameter of the trunk, so deepcluster's includes Sobel's
4 + 20, which are requires_grad=False parameters in PyTorch). kind is conv, batchnorm, relu, lrn,
maxpool or flatten. The rules (multiply-adds; layer_flops and layer_activations imported from
make_complexity_fixtures.py, which restates the profiler):
  Conv2d              N·Cin·Cout·KH·KW·OH·OW/groups, OH = int((H + 2p − K)/s + 1); the bias is
                      not counted; the division by groups is asserted exact
  BatchNorm2d         2·numel(x)
  ReLU                numel(x)
  LocalResponseNorm   in none of the profiler's lists and without a flops method: it raises
                      NotImplementedError, written -1 (bvlc's and jigsaw's FLOPs are unknown,
                      VISSL logs that it skipped them)
  MaxPool2d           N·C·OH·OW·KH·KW, OH = 1 + int((H + 2p − K)/s)
  Flatten             0 (VISSL's Flatten defines flops() = 0)
Activations: numel of Conv2d outputs only. Params: the module's own (Sobel's convs: 3 + 1 and
18 + 2). Names are the modules' paths in the trunk: sobel.0, sobel.1, _feature_blocks.0.0 (conv1's
conv), _feature_blocks.1 (a bare MaxPool2d), _feature_blocks.1.0 / .1.1 (bvlc's LRN and pool,
jigsaw's pool and LRN), …, _feature_blocks.8 (flatten).

VISSL checkpoints are NOT committed (a trunk's formula weights are 9-15 MB of float32: 2.3 M
parameters for bvlc, colorization and jigsaw, 2.5 M for rotnet, 3.7 M for deepcluster): `make_alexnet_fixtures.py --checkpoint DIR` writes them at
test time into DIR (test_alexnet.c runs it, as test_weights.c runs make_weights_fixtures.py):
  alexnet_rotnet_vissl.torch       case rotnet's float32 formula weights as VISSL writes a
                                   checkpoint ({"classy_state_dict": {"base_model": {"model":
                                   {"trunk": state_dict, "heads": {}}}}}, num_batches_tracked
                                   included, torch.save's zip format): loaded through
                                   WEIGHTS_INIT it must reproduce alexnet_rotnet_feat_eval
  alexnet_deepcluster_vissl.torch  the same for deepcluster (its trunk state dict holds the four
                                   sobel.* tensors, as VISSL's does)
  alexnet_deepcluster_converted.torch
                                   deepcluster's weights as extra_scripts/
                                   convert_caffe2_to_vissl_alexnet.py writes a converted model:
                                   {"model_state_dict": {"_feature_blocks.…": tensor}}, the
                                   "sobel" tensors skipped (its _SKIP_LAYERS) and no
                                   num_batches_tracked; VISSL loads it with STATE_DICT_KEY_NAME
                                   model_state_dict and APPEND_PREFIX "trunk.", logging the model's
                                   sobel.* as "Not found" and keeping their fixed values

`make_alexnet_fixtures.py --search CASE LO HI` prints each phase's band margin (measured in this
process only) for LO..HI−1.

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_alexnet_fixtures.py
"""
import functools
import math
import os
import sys
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
# ClassyVision's profiler rules as make_complexity_fixtures.py restates them; importing it only
# defines things (and creates the same fixtures/nn folder).
from make_complexity_fixtures import layer_activations, layer_flops  # noqa: E402
# tests/golden/trunk_golden.py: the formula, the float64/float32 summaries, the float32 child
# runs and the phase search, the profiler's rows: what every trunk generator shares.
import trunk_golden  # noqa: E402
from trunk_golden import (DX_FLOOR_MAX, OUT, ZERO_GRAD_SQ, Flatten, PhaseSearch, decisions,  # noqa: E402
                          dx_floor, eval_features, fp32_runs, grad_floor, input_gradient, named_buffers, profile,
                          save_vissl_checkpoint, set_formula)

N_IMAGES = 2
# Each small case's input size: the smallest at which pool5 is 2 × 2 (conv1's output at least
# 23 px: (S + 2·pad − 11)/stride + 1 ≥ 23), but deepcluster's 96 (at 95 no phase of
# 0..SEARCH_PHASES−1 keeps MIN_BAND_MARGIN under every cap of ISAS: the best, 5, keeps 1.43) and
# jigsaw's 56: 55 is a Fibonacci number, frac(55·X_ALPHA) ≈ 0.008, so each row of a 55 px input
# nearly repeats the row above and pool1's windows nearly tie (no phase of 0..127 gets past 1.14). At
# alexnet_min_input pool5 would be 1 × 1 and conv3-5 see 3 × 3 maps, every pixel on the border.
SIZES = OrderedDict([("bvlc", 99), ("colorization", 99), ("deepcluster", 96), ("jigsaw", 56), ("rotnet", 95)])
LARGE = OrderedDict([("rotnet224", ("rotnet", 224)), ("bvlc224", ("bvlc", 224))])
# The large cases' input gradient (one image): its DX_TILE × DX_TILE tile sums, and the full
# gradient in rows and columns DX_CENTRE (a 32 × 32 window at the centre of 224 px).
LARGE_DX_IMAGES, DX_TILE, DX_CENTRE = 1, 4, slice(96, 128)
COMPLEXITY_SIZE = 224
# The input phase of each case. Train-mode BN amplifies float32 rounding, and a decision that
# sits inside that noise is taken by the engine's accumulation order: a ReLU whose input is within
# its noise band of zero (the band: the largest |x32 − x64| over that ReLU call's input, torch
# float32 against float64), or a 3×3 max-pool window whose two largest inputs are within twice the
# band of its input. Either flip moves gradients far beyond the tests' tolerance. Max-pool windows
# whose largest input is exactly 0 are left out: every pool input here is ≥ 0 (a ReLU, then at
# most an LRN, which keeps signs, comes before every pool), so such a window is all ReLU zeros,
# and whichever of them takes the gradient passes it to a ReLU that stops it (through bvlc's LRN
# too: LRN's gradient at a zero output reaches only that output's own input). A case's margin is
# the smallest |x| / band over every ReLU input x (and gap / (2·band) over every other max-pool
# window) in a train-mode forward, the band being the worst under each oneDNN cap of
# trunk_golden.ISAS; the phase is the one of 0..SEARCH_PHASES−1 with the largest margin in this
# process that keeps at least MIN_BAND_MARGIN under every cap (SEARCH below).
# golden.kept_choice keeps the committed phase (SELFSUP_GOLDEN_REPICK=1 searches again); the
# margin is asserted every run.
SEARCH_PHASES = 256
MIN_BAND_MARGIN = 2.0
# Σg² below ZERO_GRAD_SQ (trunk_golden's, 1e-20): a gradient that is zero but for float64
# roundoff (a conv bias before train-mode BN); every other parameter's Σg² is far above it
# (asserted: ≥ NONZERO_GRAD_SQ).
NONZERO_GRAD_SQ = 1e-8

# ---------------------------------------------------------------------------------------------
# VISSL's trunks, re-stated (vissl/models/trunks/alexnet_*.py, v0.1.5; model_helpers.Flatten is
# trunk_golden's).


def _lrn():
    return nn.LocalResponseNorm(size=5, alpha=0.0001, beta=0.75)


def _pool():
    return nn.MaxPool2d(kernel_size=3, stride=2)


class AlexNet(nn.Module):
    """The forward every variant shares (get_trunk_forward_outputs_module_list with the default
    out_feat_keys: every block in order, the last one's output returned)."""

    def forward(self, x, means=None):
        """The flatten features; with a list `means`, each of conv1 … pool5's per-channel mean over
        N, H, W appended to it."""
        if hasattr(self, "sobel"):
            x = self.sobel(x)
        for i, block in enumerate(self._feature_blocks):
            x = block(x)
            if means is not None and i < 8:
                means.append(x.mean(dim=(0, 2, 3)))
        return x


class AlexNetBvlc(AlexNet):
    def __init__(self):
        super().__init__()
        conv1_relu = nn.Sequential(nn.Conv2d(3, 96, kernel_size=11, stride=4, padding=0), nn.ReLU(inplace=True))
        lrn_pool1 = nn.Sequential(_lrn(), _pool())
        conv2_relu = nn.Sequential(nn.Conv2d(96, 256, kernel_size=5, padding=2, groups=2), nn.ReLU(inplace=True))
        lrn_pool2 = nn.Sequential(_lrn(), _pool())
        conv3_relu = nn.Sequential(nn.Conv2d(256, 384, kernel_size=3, padding=1), nn.ReLU(inplace=True))
        conv4_relu = nn.Sequential(nn.Conv2d(384, 384, kernel_size=3, padding=1, groups=2), nn.ReLU(inplace=True))
        conv5_relu = nn.Sequential(nn.Conv2d(384, 256, kernel_size=3, padding=1, groups=2), nn.ReLU(inplace=True))
        self._feature_blocks = nn.ModuleList([conv1_relu, lrn_pool1, conv2_relu, lrn_pool2, conv3_relu,
                                              conv4_relu, conv5_relu, _pool(), Flatten()])


class AlexNetColorization(AlexNet):
    """Without the trunk's torch.split: the input is already the L channel."""

    def __init__(self):
        super().__init__()
        self._feature_blocks = nn.ModuleList([
            nn.Sequential(nn.Conv2d(1, 96, kernel_size=11, stride=4, padding=0), nn.BatchNorm2d(96), nn.ReLU(inplace=True)),
            _pool(),
            nn.Sequential(nn.Conv2d(96, 256, kernel_size=5, padding=2, groups=2), nn.BatchNorm2d(256), nn.ReLU(inplace=True)),
            _pool(),
            nn.Sequential(nn.Conv2d(256, 384, kernel_size=3, stride=1, padding=1), nn.BatchNorm2d(384), nn.ReLU(inplace=True)),
            nn.Sequential(nn.Conv2d(384, 384, kernel_size=3, stride=1, padding=1, groups=2), nn.BatchNorm2d(384),
                          nn.ReLU(inplace=True)),
            nn.Sequential(nn.Conv2d(384, 256, kernel_size=3, stride=1, padding=1, groups=2), nn.BatchNorm2d(256),
                          nn.ReLU(inplace=True)),
            _pool(),
            Flatten(),
        ])


class AlexNetDeepCluster(AlexNet):
    def __init__(self):
        super().__init__()
        grayscale = nn.Conv2d(3, 1, kernel_size=1, stride=1, padding=0)
        grayscale.weight.data.fill_(1.0 / 3.0)
        grayscale.bias.data.zero_()
        sobel_filter = nn.Conv2d(1, 2, kernel_size=3, stride=1, padding=1)
        sobel_filter.weight.data[0, 0].copy_(torch.FloatTensor([[1, 0, -1], [2, 0, -2], [1, 0, -1]]))
        sobel_filter.weight.data[1, 0].copy_(torch.FloatTensor([[1, 2, 1], [0, 0, 0], [-1, -2, -1]]))
        sobel_filter.bias.data.zero_()
        self.sobel = nn.Sequential(grayscale, sobel_filter)
        for p in self.sobel.parameters():
            p.requires_grad = False
        self._feature_blocks = nn.ModuleList([
            nn.Sequential(nn.Conv2d(2, 96, kernel_size=11, stride=4, padding=2), nn.BatchNorm2d(96), nn.ReLU(inplace=True)),
            _pool(),
            nn.Sequential(nn.Conv2d(96, 256, kernel_size=5, stride=1, padding=2), nn.BatchNorm2d(256), nn.ReLU(inplace=True)),
            _pool(),
            nn.Sequential(nn.Conv2d(256, 384, kernel_size=3, stride=1, padding=1), nn.BatchNorm2d(384), nn.ReLU(inplace=True)),
            nn.Sequential(nn.Conv2d(384, 384, kernel_size=3, stride=1, padding=1), nn.BatchNorm2d(384), nn.ReLU(inplace=True)),
            nn.Sequential(nn.Conv2d(384, 256, kernel_size=3, stride=1, padding=1), nn.BatchNorm2d(256), nn.ReLU(inplace=True)),
            _pool(),
            Flatten(),
        ])


class AlexNetJigsaw(AlexNet):
    def __init__(self):
        super().__init__()
        self._feature_blocks = nn.ModuleList([
            nn.Sequential(nn.Conv2d(3, 96, kernel_size=11, stride=2, padding=0), nn.ReLU(inplace=True)),
            nn.Sequential(_pool(), _lrn()),
            nn.Sequential(nn.Conv2d(96, 256, kernel_size=5, padding=2, groups=2), nn.ReLU(inplace=True)),
            nn.Sequential(_pool(), _lrn()),
            nn.Sequential(nn.Conv2d(256, 384, kernel_size=3, padding=1), nn.BatchNorm2d(384), nn.ReLU(inplace=True)),
            nn.Sequential(nn.Conv2d(384, 384, kernel_size=3, padding=1, groups=2), nn.BatchNorm2d(384), nn.ReLU(inplace=True)),
            nn.Sequential(nn.Conv2d(384, 256, kernel_size=3, padding=1, groups=2), nn.BatchNorm2d(256), nn.ReLU(inplace=True)),
            _pool(),
            Flatten(),
        ])


class AlexNetRotNet(AlexNet):
    def __init__(self):
        super().__init__()
        self._feature_blocks = nn.ModuleList([
            nn.Sequential(nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2), nn.BatchNorm2d(64), nn.ReLU(inplace=True)),
            _pool(),
            nn.Sequential(nn.Conv2d(64, 192, kernel_size=5, padding=2), nn.BatchNorm2d(192), nn.ReLU(inplace=True)),
            _pool(),
            nn.Sequential(nn.Conv2d(192, 384, kernel_size=3, padding=1), nn.BatchNorm2d(384), nn.ReLU(inplace=True)),
            nn.Sequential(nn.Conv2d(384, 256, kernel_size=3, padding=1), nn.BatchNorm2d(256), nn.ReLU(inplace=True)),
            nn.Sequential(nn.Conv2d(256, 256, kernel_size=3, padding=1), nn.BatchNorm2d(256), nn.ReLU(inplace=True)),
            _pool(),
            Flatten(),
        ])


TRUNKS = OrderedDict([("bvlc", AlexNetBvlc), ("colorization", AlexNetColorization),
                      ("deepcluster", AlexNetDeepCluster), ("jigsaw", AlexNetJigsaw), ("rotnet", AlexNetRotNet)])


def in_channels(variant):
    return 1 if variant == "colorization" else 3


def is_sobel(name):
    return name.startswith("sobel.")


def build(variant):
    """VISSL's trunk, every value but Sobel's set by the formula (float32), numbered by the rule
    of the docstring."""
    m = TRUNKS[variant]()
    first = sum(1 for n, _ in m.named_parameters() if is_sobel(n))  # Sobel's buffer numbers
    return set_formula(m, trainable, first)


def trainable(m):
    """The parameters the C side has as ENG_PARAM, in order: named_parameters() less Sobel's."""
    return [(n, p) for n, p in m.named_parameters() if not is_sobel(n)]


def inputs(variant, n, size, phase=0):
    return trunk_golden.inputs(n, size, phase, in_channels(variant))


def min_input(variant):
    """The smallest square size every MaxPool2d(3, 2) fits (each pool's input at least 3 × 3)."""
    m = TRUNKS[variant]()
    m.eval()
    for size in range(11, 400):
        try:
            with torch.no_grad():
                m(torch.zeros(1, in_channels(variant), size, size))
            return size
        except RuntimeError:
            continue
    raise SystemExit(f"{variant}: no size below 400 fits")


def flat(feat):
    return feat.reshape(feat.shape[0], -1)


save = functools.partial(trunk_golden.save_f32, "alexnet")
# names.txt in the C entry order: Sobel's four (buffers) first, then the state dict.
save_names = functools.partial(trunk_golden.save_names, "alexnet", params=trainable)


def buffer_sums(m):
    """Σ of each C buffer, in the C order (Sobel's tensors, then the running statistics)."""
    out = [t.sum().item() for n, t in m.named_parameters() if is_sobel(n)]
    return out + [b.sum().item() for _, b in named_buffers(m)]


def grad_summaries(m):
    return trunk_golden.grad_summaries(m, trainable)


def train_step(m, x):
    """Train forward and backward of L = Σ feat·r (the parameters' .grad set); the features and
    the input's gradient."""
    x = x.clone().requires_grad_(True)
    feat = trunk_golden.train_step(m, x)
    return feat, x.grad.detach()


def maxpool_gap(a):
    """The smallest gap between the largest and second-largest input of any 3×3 stride-2
    unpadded window of a (N × C × H × W, every value ≥ 0), windows whose largest is 0 left out
    (see the phase comment above)."""
    assert float(a.min()) >= 0.0
    n, c = a.shape[:2]
    cols = F.unfold(a, 3, stride=2).view(n, c, 9, -1)
    top = cols.topk(2, dim=2).values
    gap = top[:, :, 0] - top[:, :, 1]
    gap = torch.where(top[:, :, 0] > 0, gap, torch.full_like(gap, math.inf))
    return gap.min().item()


def fp32_measure(case, phase):
    """In a child process (trunk_golden.fp32_runs): torch float32's decision inputs, gradient
    summaries and input gradient; for a LARGE tag, its input gradient's summaries (phase 0)."""
    if case in LARGE:
        variant, size = LARGE[case]
        dx = input_gradient(build(variant), inputs(variant, LARGE_DX_IMAGES, size))
        return [t.numpy() for t in dx_summaries(dx)]
    x = inputs(case, N_IMAGES, SIZES[case], phase)
    out = {"decisions": [a.numpy() for _, a in decisions(build(case), x)]}
    m = build(case)
    _, dx = train_step(m, x)
    out["grads"] = np.array(grad_summaries(m))
    out["dx"] = dx.numpy()
    return out


SEARCH = PhaseSearch(__file__, build, lambda case, phase: inputs(case, N_IMAGES, SIZES[case], phase),
                     maxpool_gap, SEARCH_PHASES, MIN_BAND_MARGIN)


def grad_case(case, phase, runs):
    """Every per-case fixture, in float64; torch float32's worst gradient error under the caps of
    ISAS as the floor."""
    margin, per_kind = SEARCH.checked(case, phase, runs)
    m = build(case)
    save_names(case, m)
    m = m.double()
    x = inputs(case, N_IMAGES, SIZES[case], phase).double()
    means = []
    save(f"{case}_feat_eval", flat(eval_features(m, x, means)))
    save(f"{case}_means_eval", torch.cat(means))
    feat, dx = train_step(m, x)
    save(f"{case}_feat_train", flat(feat))
    save(f"{case}_stats", buffer_sums(m))
    exact = grad_summaries(m)
    save(f"{case}_grads", exact)
    save(f"{case}_dx", dx)
    names = [n for n, _ in trainable(m)]
    for name, (_, s2) in zip(names, exact):
        assert s2 < ZERO_GRAD_SQ or s2 >= NONZERO_GRAD_SQ, f"{case}: {name}: Σg² {s2:.3g} is neither zero nor clear of it"
    floor = grad_floor(exact, [r["grads"] for r in runs])
    save(f"{case}_grad_floor", floor)
    dx64 = dx.numpy()
    dx_floor = max(float(np.abs(r["dx"].astype(np.float64) - dx64).max()) / float(np.abs(dx64).max()) for r in runs)
    save(f"{case}_dx_floor", [dx_floor])
    save(f"{case}_phase", [phase])
    zero = [name for name, (_, s2) in zip(names, exact) if s2 < ZERO_GRAD_SQ]
    kinds = ", ".join(f"{k} {v:.2f}" for k, v in sorted(per_kind.items()))
    print(f"{case}: {SIZES[case]} px, phase {phase}, every decision at least {margin:.2f}x its float32 noise away "
          f"({kinds}); grad floor max {max(floor):.3g}, dx floor {dx_floor:.3g}; "
          f"{sum(p.numel() for _, p in trainable(m))} parameters; features {tuple(feat.shape)}; "
          f"zero gradients (conv biases before BN): {len(zero)}")


def dx_summaries(dx):
    """(tile sums, centre window) of an N × C × H × W input gradient (float64 sums)."""
    n, c, h, w = dx.shape
    tiles = dx.double().reshape(n, c, h // DX_TILE, DX_TILE, w // DX_TILE, DX_TILE).sum(dim=(3, 5))
    return tiles, dx[:, :, DX_CENTRE, DX_CENTRE]


def large_dx_case(tag, runs):
    """alexnet_TAG_dx_tiles and alexnet_TAG_dx_centre; torch float32's own error on each (runs: its
    float32 summaries, one pair per cap) asserted to be at most DX_FLOOR_MAX."""
    variant, size = LARGE[tag]
    assert size % DX_TILE == 0
    exact = dx_summaries(input_gradient(build(variant).double(), inputs(variant, LARGE_DX_IMAGES, size).double()))
    errors = []
    for k, (name, want) in enumerate(zip(("dx_tiles", "dx_centre"), exact)):
        floor = dx_floor(want, [r[k] for r in runs])
        assert floor <= DX_FLOOR_MAX, f"{tag} {name}: torch float32's own error {floor:.3g}"
        save(f"{tag}_{name}", want)
        errors.append(f"{name} {tuple(want.shape)} {floor:.3g}")
    print(f"{tag}: input gradient of {LARGE_DX_IMAGES} image(s); torch float32's own error under every cap: "
          f"{', '.join(errors)}")


def write_cases():
    with open(os.path.join(OUT, "alexnet_cases.txt"), "w") as f:
        rows = [(case, case, SIZES[case]) for case in SIZES] + [(tag, v, s) for tag, (v, s) in LARGE.items()]
        for tag, variant, size in rows:
            params = sum(p.numel() for _, p in trainable(TRUNKS[variant]()))
            f.write(f"{tag} variant={variant} n={N_IMAGES} size={size} params={params} "
                    f"min_input={min_input(variant)}\n")


# ---------------------------------------------------------------------------------------------
# Model complexity: ClassyVision's profiler over the trunk, one row per leaf-module call.

COMPLEXITY_KINDS = {"Conv2d": "conv", "BatchNorm2d": "batchnorm", "ReLU": "relu", "LocalResponseNorm": "lrn",
                    "MaxPool2d": "maxpool", "Flatten": "flatten"}


def complexity_flops(mod, x):
    """The profiler's _layer_flops for the trunk's module types (-1: NotImplementedError)."""
    kind = type(mod).__name__
    if kind == "LocalResponseNorm":
        return -1  # in no list and without a flops method
    if kind == "Flatten":
        return mod.flops(x)  # VISSL's Flatten: 0
    return layer_flops(mod, x)


def write_complexity():
    for variant in TRUNKS:
        m = TRUNKS[variant]()  # shapes only: the values do not matter
        # one row per leaf-module call, named by the module's path
        rows = profile(m, torch.zeros(1, in_channels(variant), COMPLEXITY_SIZE, COMPLEXITY_SIZE), COMPLEXITY_KINDS,
                       complexity_flops, layer_activations)
        path = os.path.join(OUT, f"alexnet_{variant}_complexity.txt")
        flops, params, acts = trunk_golden.write_complexity(path, m, rows)  # params: count_params, Sobel's included
        conv = sum(r[2] for r in rows if r[1] == "conv")
        print(f"complexity {variant} (1 x {in_channels(variant)} x {COMPLEXITY_SIZE}^2): {len(rows)} rows, "
              f"{flops} multiply-adds (conv rows {conv}), {params} parameters, {acts} activations")


# ---------------------------------------------------------------------------------------------
# VISSL checkpoints, written at test time.

def write_checkpoints(out):
    """The three files of the docstring into `out`."""
    os.makedirs(out, exist_ok=True)
    for variant in ("rotnet", "deepcluster"):
        save_vissl_checkpoint(os.path.join(out, f"alexnet_{variant}_vissl.torch"), build(variant).state_dict())
    skip = ["_momentum", "sobel", "classifier", "top_layer", "pred", "fc", "data"]  # the converter's _SKIP_LAYERS
    converted = OrderedDict((k, v.clone()) for k, v in build("deepcluster").state_dict().items()
                            if not any(s in k for s in skip) and not k.endswith("num_batches_tracked"))
    torch.save({"model_state_dict": converted}, os.path.join(out, "alexnet_deepcluster_converted.torch"))


def main():
    if trunk_golden.fp32_main(sys.argv, fp32_measure) or SEARCH.search_main(sys.argv):
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--checkpoint":
        return write_checkpoints(sys.argv[2])
    trunk_golden.start()
    for case, size in SIZES.items():
        shape = tuple(build(case).eval()(inputs(case, 1, size)).shape)
        assert shape[2:] == (2, 2), (case, size, shape)
        print(f"{case}: min_input {min_input(case)}, {size} px -> pool5 {shape[1:]}")
    phases = SEARCH.kept("alexnet", SIZES)
    write_cases()
    runs = fp32_runs(__file__, dict(phases, **dict.fromkeys(LARGE, 0)))
    for case in SIZES:
        grad_case(case, phases[case], runs[case])
    for tag, (variant, size) in LARGE.items():
        feat = flat(eval_features(build(variant).double(), inputs(variant, N_IMAGES, size).double()))
        save(f"{tag}_feat_eval", feat)
        print(f"{tag}: features {tuple(feat.shape)}")
        large_dx_case(tag, runs[tag])
    write_complexity()
    print(f"make_alexnet_fixtures: wrote to {OUT} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
