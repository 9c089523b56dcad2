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

Files (tests/golden/fixtures/nn/complexity_CASE.txt): "name kind flops params activations" per
row, then "total total FLOPS PARAMS ACTIVATIONS" (FLOPS -1 when any row's is).
CASE: r50_224 (ResNet-50), r18ln_224 (ResNet-18, NORM LayerNorm), head_fc (mlp [2048, 1000]:
torchvision's fc), head_mlp (mlp [2048, 512, 128] with BN, ReLU, Dropout), head_swav (swav_head
[2048, 2048, 128] with BN, prototypes [3000, 100]), head_evalmlp (eval_mlp, 2048 channels, dims
[2048, 1000], input 1 × 2048 × 1 × 1). Heads take batch 1, as after the trunk in VISSL's hook.

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_complexity_fixtures.py
"""
import collections
import os

import torch
import torch.nn as nn
import torchvision

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "nn")


class Flatten(nn.Module):
    """VISSL's Flatten(dim=1), which defines flops() = 0."""

    def forward(self, x):
        return torch.flatten(x, start_dim=1)

    def flops(self, x):
        return 0


class LayerNorm2d(nn.GroupNorm):
    """VISSL's LayerNorm2d: GroupNorm(1, C)."""

    def __init__(self, num_channels, eps=1e-5, affine=True):
        super().__init__(num_groups=1, num_channels=num_channels, eps=eps, affine=affine)


KINDS = {"Conv2d": "conv", "BatchNorm1d": "batchnorm", "BatchNorm2d": "batchnorm", "LayerNorm2d": "layernorm",
         "ReLU": "relu", "MaxPool2d": "maxpool", "AdaptiveAvgPool2d": "avgpool", "Flatten": "flatten",
         "Linear": "linear", "Dropout": "dropout"}


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
    if kind == "MaxPool2d":
        k, s, p = pair(layer.kernel_size), pair(layer.stride), pair(layer.padding)
        oh = 1 + int((x.shape[2] + 2 * p[0] - k[0]) / s[0])
        ow = 1 + int((x.shape[3] + 2 * p[1] - k[1]) / s[1])
        return n * x.shape[1] * oh * ow * k[0] * k[1]
    if kind == "AdaptiveAvgPool2d":
        oh, ow = pair(layer.output_size)
        return n * x.shape[1] * oh * ow * (x.shape[2] - oh + 1) * (x.shape[3] - ow + 1)
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
    rows = []
    names = {m: name for name, m in model.named_modules()}
    hooks = []
    for m in model.modules():
        if next(m.children(), None) is None:
            hooks.append(m.register_forward_hook(lambda mod, inp, out: rows.append(
                (names[mod], KINDS[type(mod).__name__], layer_flops(mod, inp[0]),
                 sum(p.numel() for p in mod.parameters(recurse=False)), layer_activations(mod, out)))))
    model.eval()
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return rows


class Trunk(nn.Module):
    def __init__(self, tv):
        super().__init__()
        self._feature_blocks = nn.ModuleDict(collections.OrderedDict(
            conv1=tv.conv1, bn1=tv.bn1, conv1_relu=tv.relu, maxpool=tv.maxpool, layer1=tv.layer1,
            layer2=tv.layer2, layer3=tv.layer3, layer4=tv.layer4, avgpool=tv.avgpool, flatten=Flatten()))

    def forward(self, x):
        for m in self._feature_blocks.values():
            x = m(x)
        return x


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
    print(f"make_complexity_fixtures: wrote to {OUT} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
