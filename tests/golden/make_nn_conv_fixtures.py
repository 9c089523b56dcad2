#!/usr/bin/python3
"""make_nn_conv_fixtures.py — PyTorch's answers for convolution and batch norm
(tests/unit/test_nn_conv.c).

Each conv case saves its input x, weight w (and bias b), the output y, an upstream gradient dy,
and autograd's dx, dw (db) as float32 .npy files in tests/golden/fixtures/nn/ named
conv_CASE_TENSOR.npy, plus conv_CASE_geom.npy: [stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
groups] as float32, and for the asymmetric ("same") cases conv_same_* two more entries, pad_extra_h and
pad_extra_w. Batch norm cases save x, gamma, beta, running stats before (rm0, rv0) and
after (rm1, rv1) one training step, y, dy and dx, dgamma, dbeta (bn_CASE_TENSOR.npy); the eval
case saves x, gamma, beta, rm, rv, y. Shapes are small and odd on purpose.

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_nn_conv_fixtures.py
"""
import os

import torch
import torch.nn.functional as F
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("nn")


def save(case, **tensors):
    for name, t in tensors.items():
        golden.save_f32(os.path.join(OUT, f"{case}_{name}.npy"), t)


def conv(case, x_shape, w_shape, stride, pad, dil, groups, bias):
    x = torch.randn(*x_shape, requires_grad=True)
    w = torch.randn(*w_shape, requires_grad=True)
    b = torch.randn(w_shape[0], requires_grad=True) if bias else None
    y = F.conv2d(x, w, b, stride=stride, padding=pad, dilation=dil, groups=groups)
    dy = torch.randn_like(y)
    y.backward(dy)
    geom = [stride, stride, pad, pad, dil, dil, groups]
    extra = dict(b=b, db=b.grad) if bias else {}
    save(f"conv_{case}", x=x, w=w, y=y, dy=dy, dx=x.grad, dw=w.grad, geom=geom, **extra)


def conv_same(case, x_shape, w_shape, stride, pads, groups):
    """TensorFlow's "same" padding as ClassyVision's Conv2dSamePadding computes it: F.pad by
    pads = (left, right, top, bottom), then an unpadded convolution; autograd's dx is the gradient
    of the unpadded x. The engine's geometry: pad = (top, left), pad_extra = (bottom − top,
    right − left)."""
    left, right, top, bottom = pads
    x = torch.randn(*x_shape, requires_grad=True)
    w = torch.randn(*w_shape, requires_grad=True)
    y = F.conv2d(F.pad(x, (left, right, top, bottom)), w, stride=stride, groups=groups)
    dy = torch.randn_like(y)
    y.backward(dy)
    geom = [stride, stride, top, left, 1, 1, groups, bottom - top, right - left]
    save(f"conv_same_{case}", x=x, w=w, y=y, dy=dy, dx=x.grad, dw=w.grad, geom=geom)


def bn_train(case, x_shape):
    c = x_shape[1]
    bn = torch.nn.BatchNorm2d(c) if len(x_shape) == 4 else torch.nn.BatchNorm1d(c)
    with torch.no_grad():
        bn.weight.copy_(torch.rand(c) + 0.5)
        bn.bias.copy_(torch.randn(c))
        bn.running_mean.copy_(torch.randn(c))
        bn.running_var.copy_(torch.rand(c) + 0.5)
    rm0, rv0 = bn.running_mean.clone(), bn.running_var.clone()
    x = (torch.randn(*x_shape) * 2.0 + 0.7).requires_grad_(True)
    bn.train()
    y = bn(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    save(f"bn_{case}", x=x, gamma=bn.weight, beta=bn.bias, rm0=rm0, rv0=rv0, rm1=bn.running_mean,
         rv1=bn.running_var, y=y, dy=dy, dx=x.grad, dgamma=bn.weight.grad, dbeta=bn.bias.grad)


def bn_eval():
    c = 5
    bn = torch.nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.weight.copy_(torch.rand(c) + 0.5)
        bn.bias.copy_(torch.randn(c))
        bn.running_mean.copy_(torch.randn(c))
        bn.running_var.copy_(torch.rand(c) + 0.5)
    bn.eval()
    x = torch.randn(3, c, 4, 7)
    y = bn(x)
    save("bn_eval", x=x, gamma=bn.weight, beta=bn.bias, rm=bn.running_mean, rv=bn.running_var, y=y)


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(1)
    conv("3x3", (2, 5, 9, 11), (7, 5, 3, 3), 1, 1, 1, 1, True)
    conv("stem", (2, 3, 23, 19), (8, 3, 7, 7), 2, 3, 1, 1, False)
    conv("down", (2, 6, 9, 7), (10, 6, 1, 1), 2, 0, 1, 1, False)
    conv("down_even", (2, 6, 8, 10), (10, 6, 1, 1), 2, 0, 1, 1, False)  # ResNet's 56 -> 28: the stride drops a column
    conv("group", (2, 8, 7, 9), (12, 2, 3, 3), 1, 1, 1, 4, True)
    conv("dil", (2, 4, 11, 10), (6, 4, 3, 3), 1, 2, 2, 1, True)
    bn_train("train4d", (3, 5, 4, 7))
    bn_train("train2d", (6, 9))
    bn_eval()
    # One output pixel (res5 of 32 px images): the cpu backend's matrix-product path (conv_gemm.c).
    conv("point3x3", (5, 16, 1, 1), (12, 16, 3, 3), 1, 1, 1, 1, False)  # every tap but the centre in the padding
    conv("point_s2", (5, 8, 2, 2), (12, 8, 3, 3), 2, 1, 1, 1, False)  # res5's first conv: 2 x 2 -> 1 x 1
    conv("point_down", (5, 8, 2, 2), (12, 8, 1, 1), 2, 0, 1, 1, False)  # its shortcut: reads pixel (0, 0) only
    conv("point_dil", (3, 4, 3, 3), (6, 4, 3, 3), 1, 1, 2, 1, False)  # dilated: the corners and centre of 3 x 3
    conv("point_bias", (3, 4, 1, 1), (6, 4, 3, 3), 1, 1, 1, 1, True)  # a bias keeps oneDNN's path
    # TensorFlow's "same" padding (EfficientNet): the odd total's extra zero goes below and right.
    conv_same("s2", (2, 4, 8, 8), (6, 4, 3, 3), 2, (0, 1, 0, 1), 1)  # 3x3/2 on 8x8: 0 above, 1 below
    conv_same("dw5_s2", (2, 6, 8, 8), (6, 1, 5, 5), 2, (1, 2, 1, 2), 6)  # depthwise 5x5/2: 1 above, 2 below
    conv_same("sym", (2, 4, 8, 8), (5, 4, 3, 3), 1, (1, 1, 1, 1), 1)  # 3x3/1: symmetric, for contrast
    conv_same("rect", (2, 4, 8, 7), (6, 4, 3, 3), 2, (1, 1, 0, 1), 1)  # rows 0/1, columns 1/1: h and w apart
    conv_same("point_s2", (3, 4, 2, 2), (5, 4, 3, 3), 2, (0, 1, 0, 1), 1)  # 2x2 -> 1x1: the cpu's product path
    # The cpu's batch norm walks planes of at most 64 values in blocks of 16 channels (train4d and
    # train2d above take that path in one partial block): three blocks, the last partial, and a
    # plane of 99 values, which goes channel by channel.
    bn_train("train4d_blocks", (4, 37, 3, 3))
    bn_train("train4d_large", (3, 6, 9, 11))
    print(f"make_nn_conv_fixtures: wrote to {OUT} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
