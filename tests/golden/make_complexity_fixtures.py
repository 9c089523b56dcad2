#!/usr/bin/python3
"""make_complexity_fixtures.py — VISSL's model-complexity numbers (tests/unit/test_complexity.c).

VISSL's SSLModelComplexityHook runs ClassyVision's profiler (classy_vision/generic/profiler.py:
compute_flops, compute_activations, count_params) over the model on one zero image of INPUT_SHAPE
[3, 224, 224] in eval mode. ClassyVision is not packaged in Debian, so its rules are restated
below (`layer_flops`, `layer_activations`) and applied, through forward hooks on every leaf
module, to torchvision's ResNet arranged as VISSL's trunk (_feature_blocks: conv1, bn1,
conv1_relu, maxpool, layer1..4, avgpool, flatten) and to plain-PyTorch copies of VISSL's heads
with VISSL's module names. One row per module CALL, in call order: torchvision's blocks call
their single ReLU module 2 or 3 times, and each call counts.

The rules: multiply-adds (not 2×); Conv2d N·Cin·Cout·KH·KW·OH·OW/groups with
OH = int((H + 2p − K)/s + 1); Linear N·(weight + bias elements); BatchNorm1d/2d 2·numel(x); ReLU,
Dropout numel(x); MaxPool2d N·C·OH·OW·KH·KW with OH = 1 + int((H + 2p − K)/s); AdaptiveAvgPool2d
N·C·OH·OW·(H − OH + 1)·(W − OW + 1); VISSL's Flatten 0 (its flops method); any other module
(LayerNorm2d, a GroupNorm subclass, included) raises NotImplementedError in the profiler, written
here as -1. Activations: numel of Conv outputs only. Parameters: the module's own.

Feature extractors (FeatureExtractorModel: EVAL_MODE_ON, FREEZE_TRUNK_ONLY and a
LINEAR_EVAL_FEAT_POOL_OPS_MAP). The pool-op rules, from the same _layer_flops (the version whose
list has BatchNorm1d and an Identity branch, as the rules above), the layer type being the
module's repr up to "(":
  - AvgPool2d and MaxPool2d share one rule: N·C·OH·OW·KH·KW with OH = 1 + int((H + 2·padding −
    KH)/stride), OW likewise with KW; padding and stride are read as plain ints (ceil_mode,
    count_include_pad and dilation are not looked at), so the count uses the floor size even
    where ceil_mode makes the real output larger;
  - AdaptiveAvgPool2d((OH, OW)): the rule above, NotImplementedError when OH > H or OW > W;
  - AdaptiveMaxPool2d: in no list and without a flops method: NotImplementedError (-1), so a map
    with it makes the model's FLOPs unknown (activations and parameters are still counted:
    VISSL's hook runs compute_activations and count_params on their own);
  - Identity (VISSL's model_helpers.Identity, repr "Identity()"): 0.
VISSL's FeatureExtractorModel (vissl/models/trunks/feature_extractor.py) holds the trunk as
`base_model` and the ops as the ModuleList `feature_pool_ops`; its forward runs the trunk with the
map's layer names as out_feat_keys, then op i on the i-th returned feature, then torch.flatten
(a function, not a module: no row) when SHOULD_FLATTEN_FEATS. get_trunk_forward_outputs runs the
feature blocks in order and stops after the deepest requested one (eval mapping conv1 →
conv1_relu, res1 → maxpool, res2..res5 → layer1..layer4, res5avg → avgpool, flatten →
flatten), returning the features in network order when the names are distinct. Each eval_mlp
head reads its own feature (BatchNorm2d channel_bn, torch.flatten, the MLP). Modules after the
deepest layer are never called, so they have no call row; but count_params counts every
parameter of the model, so every leaf module with parameters that the forward did not call gets
one more row, after the call rows, in module order: kind "uncalled", FLOPs 0, its parameters,
activations 0.

Files (tests/golden/fixtures/nn/complexity_CASE.txt): "name kind flops params activations" per
row, then "total total FLOPS PARAMS ACTIVATIONS" (FLOPS -1 when any row's is).
CASE: r50_224 (ResNet-50), r18ln_224 (ResNet-18, NORM LayerNorm), head_fc (mlp [2048, 1000]:
torchvision's fc), head_mlp (mlp [2048, 512, 128] with BN, ReLU, Dropout), head_swav (swav_head
[2048, 2048, 128] with BN, prototypes [3000, 100]), head_evalmlp (eval_mlp, 2048 channels, dims
[2048, 1000], input 1 × 2048 × 1 × 1). Heads take batch 1, as after the trunk in VISSL's hook.
Whole feature-extraction models on one 1 × 3 × 224 × 224 zero image (rows named from the model:
trunk.base_model._feature_blocks.…, trunk.feature_pool_ops.I, heads.I.…):
  fe_r50_evalmlp: ResNet-50 with the in1k linear benchmark's res3 and res4 entries
    (configs/benchmark/linear_image_classification/imagenet1k: res3 AvgPool2d [[13, 13], 5, 0]
    → 512×4×4, res4 AvgPool2d [[8, 8], 3, 0] → 1024×3×3), SHOULD_FLATTEN_FEATS False, eval_mlp
    heads {in_channels 512, dims [8192, 1000]} and {1024, [9216, 1000]}; layer4 is not called;
  fe_r50_ops: ResNet-50, SHOULD_FLATTEN_FEATS True, conv1 MaxPool2d [[10, 10], 10, 4] → 9216,
    res2 AdaptiveAvgPool2d [[2, 2]] → 1024, res4 AdaptiveMaxPool2d [1] → 1024 (FLOPs unknown),
    res5avg Identity → 2048, eval_mlp heads {9216, [9216, 10]}, {1024, [1024, 10]},
    {1024, [1024, 10]}, {2048, [2048, 10]}.

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_complexity_fixtures.py
"""
import collections
import os

import torch
import torch.nn as nn
import torchvision
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)
import trunk_golden  # noqa: E402  (tests/golden/trunk_golden.py: the profiler's rows, shared with the trunk generators)
from trunk_golden import Flatten  # noqa: E402  (VISSL's, which defines flops() = 0)

OUT = golden.out_dir("nn")


class LayerNorm2d(nn.GroupNorm):
    """VISSL's LayerNorm2d: GroupNorm(1, C)."""

    def __init__(self, num_channels, eps=1e-5, affine=True):
        super().__init__(num_groups=1, num_channels=num_channels, eps=eps, affine=affine)


KINDS = {"Conv2d": "conv", "BatchNorm1d": "batchnorm", "BatchNorm2d": "batchnorm", "LayerNorm2d": "layernorm",
         "ReLU": "relu", "MaxPool2d": "maxpool", "AdaptiveAvgPool2d": "avgpool", "Flatten": "flatten",
         "Linear": "linear", "Dropout": "dropout", "AvgPool2d": "avgpool", "AdaptiveMaxPool2d": "maxpool",
         "Identity": "identity"}


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def layer_flops(layer, x):
    kind = type(layer).__name__
    n = x.shape[0]
    if kind == "Conv2d":
        oh = int((x.shape[2] + 2 * layer.padding[0] - layer.kernel_size[0]) / layer.stride[0] + 1)
        ow = int((x.shape[3] + 2 * layer.padding[1] - layer.kernel_size[1]) / layer.stride[1] + 1)
        total = n * layer.in_channels * layer.out_channels * layer.kernel_size[0] * layer.kernel_size[1] * oh * ow
        assert total % layer.groups == 0
        return total // layer.groups
    if kind in ("ReLU", "Dropout"):
        return x.numel()
    if kind in ("MaxPool2d", "AvgPool2d"):
        k = pair(layer.kernel_size)
        assert isinstance(layer.stride, int) and isinstance(layer.padding, int), "the profiler reads ints"
        oh = 1 + int((x.shape[2] + 2 * layer.padding - k[0]) / layer.stride)
        ow = 1 + int((x.shape[3] + 2 * layer.padding - k[1]) / layer.stride)
        return n * x.shape[1] * oh * ow * k[0] * k[1]
    if kind == "AdaptiveAvgPool2d":
        oh, ow = pair(layer.output_size)
        if oh > x.shape[2] or ow > x.shape[3]:
            return -1  # NotImplementedError
        return n * x.shape[1] * oh * ow * (x.shape[2] - oh + 1) * (x.shape[3] - ow + 1)
    if kind == "Identity":
        return 0
    if kind == "Linear":
        return n * (layer.weight.numel() + (layer.bias.numel() if layer.bias is not None else 0))
    if kind in ("BatchNorm1d", "BatchNorm2d"):
        return 2 * x.numel()
    if hasattr(layer, "flops"):
        return layer.flops(x)
    return -1  # the profiler raises NotImplementedError


def layer_activations(layer, out):
    return out.numel() if isinstance(layer, nn.Conv2d) else 0


def profile(model, x):
    """A row per leaf-module call (named by the module's path), then the uncalled rows."""
    rows = trunk_golden.profile(model, x, KINDS, layer_flops, layer_activations)
    called = {r[0] for r in rows}
    for name, m in model.named_modules():  # count_params: every parameter, called or not
        own = sum(p.numel() for p in m.parameters(recurse=False))
        if next(m.children(), None) is None and own and name not in called:
            rows.append((name, "uncalled", 0, own, 0))
    return rows


class Trunk(nn.Module):
    def __init__(self, tv):
        super().__init__()
        self._feature_blocks = nn.ModuleDict(collections.OrderedDict(
            conv1=tv.conv1, bn1=tv.bn1, conv1_relu=tv.relu, maxpool=tv.maxpool, layer1=tv.layer1,
            layer2=tv.layer2, layer3=tv.layer3, layer4=tv.layer4, avgpool=tv.avgpool, flatten=Flatten(1)))

    def forward(self, x):
        for m in self._feature_blocks.values():
            x = m(x)
        return x


class Identity(nn.Module):
    """VISSL's model_helpers.Identity (repr "Identity()")."""

    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        return x


POOL_OPS = {"AdaptiveAvgPool2d": nn.AdaptiveAvgPool2d, "AdaptiveMaxPool2d": nn.AdaptiveMaxPool2d,
            "AvgPool2d": nn.AvgPool2d, "MaxPool2d": nn.MaxPool2d, "Identity": Identity}
EVAL_MAPPING = {"conv1_relu": "conv1", "maxpool": "res1", "layer1": "res2", "layer2": "res3", "layer3": "res4",
                "layer4": "res5", "avgpool": "res5avg", "flatten": "flatten"}


class BaseTrunk(Trunk):
    """VISSL's ResNeXt forward with out_feat_keys: get_trunk_forward_outputs stops after the
    deepest requested feature and returns the features in network order (distinct names)."""

    def forward(self, x, keys):
        assert len(set(keys)) == len(keys)
        out = []
        for name, m in self._feature_blocks.items():
            x = m(x)
            if EVAL_MAPPING.get(name) in keys:
                out.append(x)
            if len(out) == len(keys):
                break
        return out


class FeatureExtractor(nn.Module):
    """VISSL's FeatureExtractorModel: base_model, then feature_pool_ops[i] on the i-th feature."""

    def __init__(self, tv, pool_map, flatten):
        super().__init__()
        self.base_model = BaseTrunk(tv)
        self.feature_pool_ops = nn.ModuleList([POOL_OPS[op](*args) for _, (op, args) in pool_map])
        self.keys, self.flatten = [k for k, _ in pool_map], flatten

    def forward(self, x):
        feats = self.base_model(x, self.keys)
        out = []
        for feat, op in zip(feats, self.feature_pool_ops):
            feat = op(feat)
            out.append(torch.flatten(feat, start_dim=1) if self.flatten else feat)
        return out


class FeatureExtractorModel(nn.Module):
    """The whole model: trunk (the feature extractor), then head i on feature i."""

    def __init__(self, pool_map, flatten, heads):
        super().__init__()
        self.trunk = FeatureExtractor(torchvision.models.resnet50(), pool_map, flatten)
        self.heads = nn.ModuleList(heads)

    def forward(self, x):
        return [h(f) for h, f in zip(self.heads, self.trunk(x))]


def mlp_layers(dims, use_bn=False, use_relu=False, use_dropout=False):
    layers, last = [], dims[0]
    for dim in dims[1:]:
        layers.append(nn.Linear(last, dim))
        if use_bn:
            layers.append(nn.BatchNorm1d(dim))
        if use_relu:
            layers.append(nn.ReLU(inplace=True))
            last = dim
        if use_dropout:
            layers.append(nn.Dropout())
    return nn.Sequential(*layers)


class MLP(nn.Module):
    def __init__(self, dims, **kw):
        super().__init__()
        self.clf = mlp_layers(dims, **kw)

    def forward(self, x):
        return self.clf(x.reshape(x.shape[0], -1))


class EvalMLP(nn.Module):
    def __init__(self, channels, dims):
        super().__init__()
        self.channel_bn = nn.BatchNorm2d(channels)
        self.clf = MLP(dims)

    def forward(self, x):
        if x.ndim == 2:  # VISSL unsqueezes N × C to N × C × 1 × 1
            x = x.unsqueeze(2).unsqueeze(3)
        return self.clf(torch.flatten(self.channel_bn(x), start_dim=1))


class SwAV(nn.Module):
    def __init__(self, dims, clusters):
        super().__init__()
        layers = []
        for i in range(1, len(dims)):
            layers.append(nn.Linear(dims[i - 1], dims[i]))
            if i == len(dims) - 1:
                break  # skip_last_bn
            layers += [nn.BatchNorm1d(dims[i]), nn.ReLU(inplace=True)]
        self.projection_head = nn.Sequential(*layers)
        for j, k in enumerate(clusters):
            self.add_module(f"prototypes{j}", nn.Linear(dims[-1], k, bias=False))
        self.nmb = len(clusters)

    def forward(self, x):
        emb = nn.functional.normalize(self.projection_head(x), dim=1, p=2)
        return [emb] + [getattr(self, f"prototypes{j}")(emb) for j in range(self.nmb)]


def write(case, rows):
    flops = -1 if any(r[2] < 0 for r in rows) else sum(r[2] for r in rows)
    total = ("total", "total", flops, sum(r[3] for r in rows), sum(r[4] for r in rows))
    with open(os.path.join(OUT, f"complexity_{case}.txt"), "w") as f:
        for r in rows + [total]:
            f.write(" ".join(str(v) for v in r) + "\n")
    return total


def main():
    os.makedirs(OUT, exist_ok=True)
    image = torch.zeros(1, 3, 224, 224)
    r50 = Trunk(torchvision.models.resnet50())
    t = write("r50_224", profile(r50, image))
    print(f"r50_224: {t[2]} multiply-adds, {t[3]} parameters, {t[4]} activations")
    t = write("r18ln_224", profile(Trunk(torchvision.models.resnet18(norm_layer=LayerNorm2d)), image))
    print(f"r18ln_224: flops {t[2]}, {t[3]} parameters")
    feat = torch.zeros(1, 2048)
    write("head_fc", profile(MLP([2048, 1000]), feat))
    write("head_mlp", profile(MLP([2048, 512, 128], use_bn=True, use_relu=True, use_dropout=True), feat))
    write("head_swav", profile(SwAV([2048, 2048, 128], [3000, 100]), feat))
    write("head_evalmlp", profile(EvalMLP(2048, [2048, 1000]), torch.zeros(1, 2048, 1, 1)))
    fe = FeatureExtractorModel([["res3", ["AvgPool2d", [[13, 13], 5, 0]]], ["res4", ["AvgPool2d", [[8, 8], 3, 0]]]],
                               False, [EvalMLP(512, [8192, 1000]), EvalMLP(1024, [9216, 1000])])
    t = write("fe_r50_evalmlp", profile(fe, image))
    print(f"fe_r50_evalmlp: {t[2]} multiply-adds, {t[3]} parameters, {t[4]} activations")
    fe = FeatureExtractorModel([["conv1", ["MaxPool2d", [[10, 10], 10, 4]]], ["res2", ["AdaptiveAvgPool2d", [[2, 2]]]],
                                ["res4", ["AdaptiveMaxPool2d", [1]]], ["res5avg", ["Identity", []]]],
                               True, [EvalMLP(9216, [9216, 10]), EvalMLP(1024, [1024, 10]), EvalMLP(1024, [1024, 10]),
                                      EvalMLP(2048, [2048, 10])])
    t = write("fe_r50_ops", profile(fe, image))
    print(f"fe_r50_ops: flops {t[2]}, {t[3]} parameters, {t[4]} activations")
    print(f"make_complexity_fixtures: wrote to {OUT} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
