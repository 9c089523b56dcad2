#!/usr/bin/python3
"""make_nn_fixtures.py — PyTorch's answers for the model engine's layers (tests/unit/test_nn.c).

For each layer: inputs drawn with a fixed seed, the forward output, an upstream gradient dy,
and the gradients PyTorch's autograd gives for it, as float32 .npy files in
tests/golden/fixtures/nn/ named CASE_TENSOR.npy. Shapes are small and odd on purpose (no
multiple of a vector width hides a tail bug).

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_nn_fixtures.py
"""
import os

import torch
import torch.nn.functional as F
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("nn")


def save(case, **tensors):
    for name, t in tensors.items():
        golden.save_f32(os.path.join(OUT, f"{case}_{name}.npy"), t)


def relu():
    x = torch.randn(3, 5, 7, 9, requires_grad=True)
    y = F.relu(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    save("relu", x=x, y=y, dy=dy, dx=x.grad)


def linear():
    x = torch.randn(7, 13, requires_grad=True)
    w = torch.randn(11, 13, requires_grad=True)
    b = torch.randn(11, requires_grad=True)
    y = F.linear(x, w, b)
    dy = torch.randn_like(y)
    y.backward(dy)
    save("linear", x=x, w=w, b=b, y=y, dy=dy, dx=x.grad, dw=w.grad, db=b.grad)


def l2norm():
    x = torch.randn(5, 33)
    x[2] = 0.0  # a zero row: the eps branch
    x[3] *= 1e-3
    x.requires_grad_(True)
    y = F.normalize(x, dim=1, eps=1e-12)
    dy = torch.randn_like(y)
    y.backward(dy)
    save("l2norm", x=x, y=y, dy=dy, dx=x.grad)


def with_extremes(x):
    """x with ±30 and ±100 in its first elements: e^{−x} near float's top (e^30 ≈ 1e13) and past
    it (e^100 is inf in float), where sigmoid and SiLU must give 0 or x, never NaN."""
    x.view(-1)[:6] = torch.tensor([30.0, -30.0, 100.0, -100.0, 0.0, -1.2785])  # SiLU's dx kink near -1.28
    return x


def sigmoid():
    x = with_extremes(torch.randn(3, 5, 7, 9) * 4).requires_grad_(True)
    y = torch.sigmoid(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    save("sigmoid", x=x, y=y, dy=dy, dx=x.grad)


def silu():
    x = with_extremes(torch.randn(3, 5, 7, 9) * 4).requires_grad_(True)
    y = F.silu(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    save("silu", x=x, y=y, dy=dy, dx=x.grad)


def channel_scale():
    """Squeeze-and-excitation's product x·s, s N×C×1×1 broadcast over the plane."""
    x = with_extremes(torch.randn(3, 5, 7, 9) * 4).requires_grad_(True)
    s = torch.sigmoid(torch.randn(3, 5, 1, 1) * 2).requires_grad_(True)
    y = x * s
    dy = torch.randn_like(y)
    y.backward(dy)
    save("channel_scale", x=x, s=s, y=y, dy=dy, dx=x.grad, ds=s.grad)


def lrn_case(case, shape, scale, size, alpha, beta, k):
    x = (torch.randn(*shape) * scale).requires_grad_(True)
    y = F.local_response_norm(x, size, alpha=alpha, beta=beta, k=k)
    dy = torch.randn_like(y)
    y.backward(dy)
    save(case, x=x, y=y, dy=dy, dx=x.grad)


def lrn():
    """LocalResponseNorm across channels. "lrn": AlexNet's (5, 1e-4, 0.75, 1) on inputs ×100, where
    the scale term k + α/5·Σx² is about 2 (far from 1, so x/s^β is not x), on 16 channels (oneDNN's
    JIT kernels, which keep a workspace, take a multiple of 8). "lrn_strong": (5, 0.5, 0.75, 2) on
    unit inputs and 7 channels (oneDNN's reference kernels), where the backward's cross-channel
    term is as large as its own term."""
    lrn_case("lrn", (2, 16, 5, 7), 100.0, 5, 1e-4, 0.75, 1.0)
    lrn_case("lrn_strong", (3, 7, 4, 5), 1.0, 5, 0.5, 0.75, 2.0)


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    relu()
    linear()
    l2norm()
    sigmoid()
    silu()
    channel_scale()
    lrn()
    print(f"make_nn_fixtures: wrote {len(os.listdir(OUT))} files to {OUT} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
