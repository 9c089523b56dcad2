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


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    relu()
    linear()
    l2norm()
    print(f"make_nn_fixtures: wrote {len(os.listdir(OUT))} files to {OUT} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
