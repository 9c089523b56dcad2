#!/usr/bin/python3
"""make_nn_pool_fixtures.py — PyTorch's answers for the pooling layers (tests/unit/test_nn_pool.c).

Each case saves, as float32 .npy in tests/golden/fixtures/nn/, pool_CASE_{x,y,dy,dx}.npy: a
fixed-seed input, PyTorch's forward output, an upstream gradient and autograd's input
gradient. Fixed (non-adaptive) pools also save pool_CASE_desc.npy =
[kh, kw, sh, sw, ph, pw, ceil_mode, count_include_pad] so the C test reads the geometry from
here rather than repeating it. The case name's prefix says the layer: max_, avg_, amax_
(AdaptiveMaxPool2d), aavg_ (AdaptiveAvgPool2d); adaptive output sizes are y's shape.

pool_shapes_table.npy holds rows [in, kernel, stride, pad, ceil_mode, out] with `out` taken
from PyTorch's own output, to check eng_pool_output_shape's ceil_mode rule.

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_nn_pool_fixtures.py
"""
import os

import numpy as np
import torch
import torch.nn as nn
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("nn")


def save(case, **tensors):
    for name, t in tensors.items():
        golden.save_f32(os.path.join(OUT, f"pool_{case}_{name}.npy"), t)


def pair(v):
    return list(v) if isinstance(v, (list, tuple)) else [v, v]


def run(case, layer, x, desc=None):
    x = x.clone().requires_grad_(True)
    y = layer(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    save(case, x=x, y=y, dy=dy, dx=x.grad)
    if desc is not None:
        save(case, desc=desc)


def fixed(case, cls, x, kernel, stride, pad, ceil_mode=False, count_include_pad=True):
    kw = dict(kernel_size=kernel, stride=stride, padding=pad, ceil_mode=ceil_mode)
    if cls is nn.AvgPool2d:
        kw["count_include_pad"] = count_include_pad
    desc = pair(kernel) + pair(stride) + pair(pad) + [int(ceil_mode), int(count_include_pad)]
    run(case, cls(**kw), x, desc)


def max_pools():
    # ResNet's stem on an odd map
    fixed("max_stem", nn.MaxPool2d, torch.randn(2, 3, 11, 9), 3, 2, 1)
    # ceil_mode: the last window hangs past the input (and, in H, into the padding)
    fixed("max_ceil", nn.MaxPool2d, torch.randn(1, 2, 8, 10), 3, 2, 0, ceil_mode=True)
    fixed("max_ceil_pad", nn.MaxPool2d, torch.randn(2, 2, 10, 7), (3, 2), 2, 1, ceil_mode=True)
    # ties: small integers repeat inside overlapping windows; the first maximum takes the gradient
    fixed("max_tie", nn.MaxPool2d, torch.randint(0, 3, (2, 2, 7, 6)).float(), 3, 1, 1)
    fixed("max_tie_flat", nn.MaxPool2d, torch.ones(1, 1, 5, 5), 2, 2, 1, ceil_mode=True)


def avg_pools():
    x = torch.randn(2, 3, 9, 11)
    fixed("avg_incl", nn.AvgPool2d, x, 3, 2, 1, count_include_pad=True)
    fixed("avg_excl", nn.AvgPool2d, x, 3, 2, 1, count_include_pad=False)
    x = torch.randn(1, 2, 10, 8)
    fixed("avg_ceil_incl", nn.AvgPool2d, x, 3, 2, 1, ceil_mode=True, count_include_pad=True)
    fixed("avg_ceil_excl", nn.AvgPool2d, x, 3, 2, 1, ceil_mode=True, count_include_pad=False)
    fixed("avg_ceil_nopad", nn.AvgPool2d, torch.randn(1, 2, 8, 9), 3, 2, 0, ceil_mode=True)
    # VISSL's LINEAR_EVAL_FEAT_POOL_OPS_MAP: AvgPool2d([[k, k], [s, s], [p, p]])
    fixed("avg_vissl_res4", nn.AvgPool2d, torch.randn(2, 4, 13, 13), 6, 6, 0)
    fixed("avg_vissl_res5", nn.AvgPool2d, torch.randn(2, 4, 7, 7), 6, 1, 0)
    fixed("avg_vissl_conv1", nn.AvgPool2d, torch.randn(1, 3, 23, 23), 10, 10, 4)


def adaptive_pools():
    for name, x in (("7x7", torch.randn(2, 3, 7, 7)), ("10x7", torch.randn(2, 3, 10, 7))):
        run(f"aavg2_{name}", nn.AdaptiveAvgPool2d((2, 2)), x)
        run(f"aavg1_{name}", nn.AdaptiveAvgPool2d((1, 1)), x)
        run(f"amax3_{name}", nn.AdaptiveMaxPool2d((3, 3)), x)
    run("amax3_tie", nn.AdaptiveMaxPool2d((3, 3)), torch.randint(0, 2, (1, 2, 10, 7)).float())


def shapes():
    rows = []
    for n in (1, 2, 5, 6, 7, 8, 13, 14, 56, 112, 224):
        for k, s, p in ((1, 1, 0), (2, 2, 0), (2, 2, 1), (3, 2, 1), (3, 2, 0), (3, 3, 1), (6, 6, 0),
                        (6, 1, 0), (10, 10, 4), (16, 8, 0), (5, 3, 2)):
            for ceil in (False, True):
                if n + 2 * p < k:
                    continue
                y = nn.MaxPool2d(k, s, p, ceil_mode=ceil)(torch.zeros(1, 1, n, k))
                rows.append([n, k, s, p, int(ceil), y.shape[2]])
    golden.save_array(os.path.join(OUT, "pool_shapes_table.npy"), np.asarray(rows, np.float32))


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    max_pools()
    avg_pools()
    adaptive_pools()
    shapes()
    count = sum(f.startswith("pool_") for f in os.listdir(OUT))
    print(f"make_nn_pool_fixtures: {count} pool_*.npy files in {OUT} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
