#!/usr/bin/python3
"""make_heads_fixtures.py — PyTorch's answers for VISSL's heads (tests/unit/test_heads.c).

VISSL's head modules (MLP, LinearEvalMLP, SwAVPrototypesHead) are rebuilt here in plain PyTorch
from VISSL 0.1.5's vissl/models/heads/, with the same module attribute names, so state-dict names
match nn/heads.c. No weights are stored: every parameter and running statistic is set by the
formula head_init_formula uses (u(i,k) = frac(i·ALPHA + k·BETA) in float64; Linear weight
sqrt(3/in)·(2u−1), 1-D weight 1+0.25(2u−1), bias 0.1(2u−1), running_mean 0.1(2u−1),
running_var 1+0.5u; parameters and buffers numbered separately from 0).

Per case (tests/golden/fixtures/nn/heads_CASE_*.npy): x; eval-mode outputs eval{i}; then on a
fresh copy one train forward: outputs train{i}, upstream gradients dout{i} (only for the outputs
whose gradient is given), the input gradient dx, all parameter gradients flattened in
named_parameters() order (grads) and all running statistics flattened in named_buffers() order
(stats, num_batches_tracked left out).

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_heads_fixtures.py
"""
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("nn")
ALPHA, BETA = 0.7548776662466927, 0.5698402909980532
EPS, MOMENTUM = 1e-5, 0.1
N = 6


class MLP(nn.Module):
    """VISSL's fixed MLP (after 0.1.5): last_dim moves on after every Linear, and
    skip_last_layer_relu_bn stops right after the last Linear."""

    def __init__(self, dims, use_bn=False, use_relu=False, use_dropout=False, use_bias=True,
                 skip_last_layer_relu_bn=False):
        super().__init__()
        layers = []
        last_dim = dims[0]
        for i, dim in enumerate(dims[1:]):
            layers.append(nn.Linear(last_dim, dim, bias=use_bias))
            if i == len(dims) - 2 and skip_last_layer_relu_bn:
                break
            if use_bn:
                layers.append(nn.BatchNorm1d(dim, eps=EPS, momentum=MOMENTUM))
            if use_relu:
                layers.append(nn.ReLU(inplace=True))
            if use_dropout:
                layers.append(nn.Dropout())
            last_dim = dim
        self.clf = nn.Sequential(*layers)

    def forward(self, x):
        return self.clf(x)


class LinearEvalMLP(nn.Module):
    def __init__(self, in_channels, dims, use_bn=False, use_relu=False):
        super().__init__()
        self.channel_bn = nn.BatchNorm2d(in_channels, eps=EPS, momentum=MOMENTUM)
        self.clf = MLP(dims, use_bn=use_bn, use_relu=use_relu)

    def forward(self, x):
        if x.ndim == 2:
            x = x.unsqueeze(2).unsqueeze(3)
        return self.clf(torch.flatten(self.channel_bn(x), start_dim=1))


class SwAVPrototypesHead(nn.Module):
    def __init__(self, dims, use_bn, num_clusters, use_bias=True, skip_last_bn=True, normalize_feats=True):
        super().__init__()
        layers = []
        last_dim = dims[0]
        for i, dim in enumerate(dims[1:]):
            layers.append(nn.Linear(last_dim, dim, bias=use_bias))
            if i == len(dims) - 2 and skip_last_bn:
                break
            if use_bn:
                layers.append(nn.BatchNorm1d(dim, eps=EPS, momentum=MOMENTUM))
            layers.append(nn.ReLU(inplace=True))
            last_dim = dim
        self.projection_head = nn.Sequential(*layers)
        self.normalize_feats = normalize_feats
        self.nmb_heads = len(num_clusters)
        for i, k in enumerate(num_clusters):
            self.add_module(f"prototypes{i}", nn.Linear(dims[-1], k, bias=False))

    def forward(self, x):
        x = self.projection_head(x)
        if self.normalize_feats:
            x = F.normalize(x, dim=1, p=2)
        return [x] + [getattr(self, f"prototypes{i}")(x) for i in range(self.nmb_heads)]


def weyl(n, k):
    i = np.arange(n, dtype=np.float64)
    return np.mod(i * ALPHA + k * BETA, 1.0)


def formula_set(m):
    """A head list (nn.Sequential of heads) numbers each head's tensors from 0, as C does."""
    if isinstance(m, nn.Sequential):
        for head in m:
            formula_set(head)
        return m
    with torch.no_grad():
        for k, (name, p) in enumerate(m.named_parameters()):
            u = weyl(p.numel(), k)
            if p.ndim == 2:
                v = np.sqrt(3.0 / p.shape[1]) * (2 * u - 1)
            elif name.endswith("weight"):
                v = 1.0 + 0.25 * (2 * u - 1)
            else:
                v = 0.1 * (2 * u - 1)
            p.copy_(torch.from_numpy(v.astype(np.float32).reshape(p.shape)))
        bufs = [(n, b) for n, b in m.named_buffers() if not n.endswith("num_batches_tracked")]
        for k, (name, b) in enumerate(bufs):
            u = weyl(b.numel(), k)
            v = 0.1 * (2 * u - 1) if name.endswith("running_mean") else 1.0 + 0.5 * u
            b.copy_(torch.from_numpy(v.astype(np.float32).reshape(b.shape)))
    return m


def save(kase, name, arr):
    golden.save_f32(os.path.join(OUT, f"heads_{kase}_{name}.npy"), arr)


def as_list(y):
    return y if isinstance(y, list) else [y]


def case(kase, make, xshape, grad_outputs=None, seed=0):
    g = torch.Generator().manual_seed(1000 + seed)
    x = torch.randn(*xshape, generator=g)
    save(kase, "x", x)
    m = formula_set(make())
    m.eval()
    with torch.no_grad():
        for i, y in enumerate(as_list(m(x))):
            save(kase, f"eval{i}", y)
    m = formula_set(make())
    m.train()
    xg = x.clone().requires_grad_(True)
    ys = as_list(m(xg))
    loss = 0
    for i, y in enumerate(ys):
        save(kase, f"train{i}", y)
        if grad_outputs is None or i in grad_outputs:
            r = torch.randn(*y.shape, generator=g)
            save(kase, f"dout{i}", r)
            loss = loss + (y * r).sum()
    loss.backward()
    save(kase, "dx", xg.grad)
    save(kase, "grads", torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in m.parameters()]))
    bufs = [b.reshape(-1) for n, b in m.named_buffers() if not n.endswith("num_batches_tracked")]
    save(kase, "stats", torch.cat(bufs) if bufs else torch.zeros(0))
    with open(os.path.join(OUT, f"heads_{kase}_names.txt"), "w") as f:
        params = dict(m.named_parameters())
        for name, t in m.state_dict().items():
            if not name.endswith("num_batches_tracked"):
                kind = "param" if name in params else "buffer"
                f.write(f"{name} {kind} {','.join(str(d) for d in t.shape)}\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    case("mlp", lambda: MLP([16, 16, 8], use_bn=True, use_relu=True), (N, 16), seed=1)
    # No ReLU and a hidden width unlike dims[0]: the second Linear is Linear(32, 8) (VISSL
    # 0.1.5 built Linear(16, 8) there and failed on the first batch).
    case("norelu", lambda: MLP([16, 32, 8], use_bn=True, use_bias=False), (N, 16), seed=2)
    case("skip", lambda: MLP([16, 32, 8], use_bn=True, use_relu=True, skip_last_layer_relu_bn=True), (N, 16), seed=7)
    case("evalmlp", lambda: LinearEvalMLP(16, [64, 10], use_bn=True), (N, 16, 2, 2), seed=3)
    case("evalmlp2d", lambda: LinearEvalMLP(16, [16, 10]), (N, 16), seed=4)
    case("swav", lambda: SwAVPrototypesHead([16, 16, 8], True, [10, 7]), (N, 16), grad_outputs={0, 2}, seed=5)
    case("simclr", lambda: nn.Sequential(MLP([16, 16], use_relu=True), MLP([16, 8])), (N, 16), seed=6)
    print(f"make_heads_fixtures: wrote to {OUT} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
