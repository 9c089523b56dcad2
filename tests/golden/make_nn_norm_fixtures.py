#!/usr/bin/python3
"""make_nn_norm_fixtures.py — PyTorch's answers for layer norm and the eval-mode batch-norm
backward (tests/unit/test_nn_norm.c).

Layer norm is VISSL's LayerNorm2d(C, eps=1e-5, affine=True), i.e. torch.nn.GroupNorm(1, C). Each
case ln_CASE saves x, gamma, beta, y, an upstream gradient dy and autograd's dx, dgamma, dbeta;
ln_noaffine (GroupNorm affine=False) saves x, y, dy, dx only. The eval-mode batch-norm case
bn_evalbw saves x, gamma, beta, rm, rv, y and autograd's dx, dgamma, dbeta for BatchNorm2d in
eval mode (normalised with the running statistics). All float32 .npy in
tests/golden/fixtures/nn/. Shapes are small and odd on purpose; x carries an offset and a scale
so the statistics matter.

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_nn_norm_fixtures.py
"""
import os

import torch
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("nn")


def save(case, **tensors):
    for name, t in tensors.items():
        golden.save_f32(os.path.join(OUT, f"{case}_{name}.npy"), t)


def layernorm(case, x_shape, affine=True):
    c = x_shape[1]
    ln = torch.nn.GroupNorm(1, c, eps=1e-5, affine=affine)
    if affine:
        with torch.no_grad():
            ln.weight.copy_(torch.rand(c) + 0.5)
            ln.bias.copy_(torch.randn(c))
    x = (torch.randn(*x_shape) * 1.7 + 0.6).requires_grad_(True)
    y = ln(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    if affine:
        save(f"ln_{case}", x=x, gamma=ln.weight, beta=ln.bias, y=y, dy=dy, dx=x.grad, dgamma=ln.weight.grad,
             dbeta=ln.bias.grad)
    else:
        save(f"ln_{case}", x=x, y=y, dy=dy, dx=x.grad)


def bn_eval_backward():
    c = 4
    bn = torch.nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.weight.copy_(torch.rand(c) + 0.5)
        bn.bias.copy_(torch.randn(c))
        bn.running_mean.copy_(torch.randn(c))
        bn.running_var.copy_(torch.rand(c) + 0.5)
    bn.eval()
    x = (torch.randn(3, c, 5, 3) * 2.0 + 0.3).requires_grad_(True)
    y = bn(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    save("bn_evalbw", x=x, gamma=bn.weight, beta=bn.bias, rm=bn.running_mean, rv=bn.running_var, y=y, dy=dy,
         dx=x.grad, dgamma=bn.weight.grad, dbeta=bn.bias.grad)


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(5)
    layernorm("4d", (3, 5, 4, 7))
    layernorm("2d", (4, 9))
    layernorm("wide", (2, 33, 5, 3))
    layernorm("noaffine", (2, 3, 5, 5), affine=False)
    bn_eval_backward()
    print(f"make_nn_norm_fixtures: wrote to {OUT} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
