#!/usr/bin/python3
"""trunk_bench.py — PyTorch's side of bench/trunks.sh: the same trunk, the same work.

ResNets are torchvision's resnetD; RegNets torchvision's regnet_* (the same network as
ClassyVision's where their widths agree, which they do for the presets benchmarked: see
tests/golden/fixtures/nn/regnet_presets_torchvision.txt), without the classifier.
AlexNets are VISSL's rotnet and bvlc trunks, written out here (torchvision's alexnet is neither).
EfficientNets are torchvision's efficientnet_bN features + pooling + dropout: ClassyVision's
network but for the padding (symmetric (k − 1)/2 where ClassyVision pads TensorFlow's "same",
one pixel more at the bottom/right of its stride-2 convs: the same work within a pixel row) and
for stochastic depth in place of drop-connect (the same per-sample rule, linear in depth).

train = forward in train mode + backward of (features · 0) (no optimizer step, as on the
selfsup side); infer = forward in eval mode under no_grad. Prints
"torch_bench MODE images_per_second", each the median of --reps runs after a warm-up.
"""
import argparse
import statistics
import time

import torch
import torchvision
from torch import nn


def alexnet(variant):
    """VISSL's alexnet_rotnet or alexnet_bvlc (torchvision's alexnet is neither), to flatten."""
    def conv(i, o, k, s, p, groups=1, bn=True):
        return [nn.Conv2d(i, o, k, s, p, groups=groups), *([nn.BatchNorm2d(o)] if bn else []), nn.ReLU(inplace=True)]
    pool = nn.MaxPool2d(3, 2)
    if variant == "rotnet":
        layers = (conv(3, 64, 11, 4, 2) + [pool] + conv(64, 192, 5, 1, 2) + [pool] + conv(192, 384, 3, 1, 1) +
                  conv(384, 256, 3, 1, 1) + conv(256, 256, 3, 1, 1) + [pool])
    elif variant == "bvlc":
        lrn = nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75)
        layers = (conv(3, 96, 11, 4, 0, bn=False) + [lrn, pool] + conv(96, 256, 5, 1, 2, 2, False) + [lrn, pool] +
                  conv(256, 384, 3, 1, 1, bn=False) + conv(384, 384, 3, 1, 1, 2, False) +
                  conv(384, 256, 3, 1, 1, 2, False) + [pool])
    else:
        raise SystemExit(f"trunk_bench.py: no AlexNet {variant} here (rotnet, bvlc)")
    return nn.Sequential(*layers, nn.Flatten())


def trunk(depth, small_stem, regnet, efficientnet=None, alexnet_variant=None):
    if alexnet_variant:
        return alexnet(alexnet_variant)
    if efficientnet:
        net = getattr(torchvision.models, f"efficientnet_{efficientnet.lower()}")()
        net.classifier = torch.nn.Sequential(net.classifier[0])  # the dropout, not the fc
        return net
    if regnet:
        net = getattr(torchvision.models, regnet.replace(".", "_"))()
        net.fc = torch.nn.Identity()
        return net
    net = getattr(torchvision.models, f"resnet{depth}")()
    if small_stem:
        net.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        net.maxpool = torch.nn.Identity()
    net.fc = torch.nn.Identity()
    return net


def timed(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--depth", type=int, default=50)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--small-stem", action="store_true")
    ap.add_argument("--regnet", default=None)
    ap.add_argument("--efficientnet", default=None)
    ap.add_argument("--alexnet", default=None)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    net = trunk(a.depth, a.small_stem, a.regnet, a.efficientnet, a.alexnet)
    x = torch.rand(a.batch, 3, a.size, a.size) * 2 - 1

    def train():
        net.train()
        net.zero_grad(set_to_none=False)
        (net(x) * 0).sum().backward()

    def infer():
        net.eval()
        with torch.no_grad():
            net(x)

    print(f"torch_bench train {a.batch / timed(train, a.reps):.3f}")
    print(f"torch_bench infer {a.batch / timed(infer, a.reps):.3f}")


if __name__ == "__main__":
    main()
