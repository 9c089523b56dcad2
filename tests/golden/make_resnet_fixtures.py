#!/usr/bin/python3
"""make_resnet_fixtures.py — torchvision's answers for the ResNet trunk (tests/unit/test_resnet.c).

No weights are stored: every parameter, BN running statistic, input image and upstream gradient is
set by the same closed formula the C side uses (resnet_init_formula in nn/resnet.c and
test_resnet.c), a Weyl sequence computed in float64 and rounded to float32, so both sides hold
bit-identical values. Let u(i, k) = frac(i·ALPHA + k·BETA) for flat element index i of tensor k:
  conv weight (parameter k)   sqrt(6/fan_in)·(2u−1)         (He-like variance 2/fan_in)
  BN weight / bias            1 + 0.25·(2u−1) / 0.1·(2u−1)
  running_mean / running_var  (k = buffer index) 0.1·(2u−1) / 1 + 0.5·u
  input image x               2·frac(i·X_ALPHA + phase·BETA) − 1 (phase GRAD_PHASE for r18_64, else 0)
  upstream gradient r         2·frac(i·R_ALPHA) − 1
Parameters are numbered in named_parameters() order, buffers in named_buffers() order
(num_batches_tracked left out), both from 0.

Files (tests/golden/fixtures/nn/resnet_*):
  resnet_{r18,r50,r18s}_names.txt   "name kind shape" per state-dict entry (VISSL names)
  resnet_CASE_feat_{eval,train}.npy  N × C pooled features (flatten)
  resnet_CASE_res4_{eval,train}.npy  N × C per-channel mean of res4 (layer3's output)
  resnet_CASE_stats.npy              per BN layer [Σ running_mean, Σ running_var] after one train forward
  resnet_r18_64_grads.npy            per parameter [Σ g, Σ g²] of L = Σ feat·r after one train forward
  resnet_r18_64_conv1_grad.npy       the full conv1 weight gradient
CASE: r50 (ResNet-50, 224 px, eval only), r18 (224 px), r18_64 (64 px), r18s_64 (small stem, 64 px).

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_resnet_fixtures.py
"""
import os

import numpy as np
import torch
import torchvision

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "nn")
ALPHA, BETA = 0.7548776662466927, 0.5698402909980532
X_ALPHA, R_ALPHA = 0.6180339887498949, 0.3247179572447460
# The gradient case's input phase, chosen (of 60) for the largest distance of any ReLU input
# from zero (2.2e-5): a ReLU whose input sits near 1e-5 flips under fp32 rounding noise
# (train-mode BN on 2 images carries it to ~1e-5 in the features, for torch fp32 vs fp64 too),
# and one flip moved conv1's weight gradient by 2.5e-3 (measured with phase 0, margin 1.3e-5).
GRAD_PHASE = 12
MIN_MARGIN = 2e-5
PREFIX = "_feature_blocks."


def weyl(n, k, alpha=ALPHA):
    i = np.arange(n, dtype=np.float64)
    return np.mod(i * alpha + k * BETA, 1.0)


def formula_param(name, shape, k):
    n = int(np.prod(shape))
    u = weyl(n, k)
    if len(shape) == 4:
        fan_in = shape[1] * shape[2] * shape[3]
        v = np.sqrt(6.0 / fan_in) * (2.0 * u - 1.0)
    elif name.endswith("weight"):
        v = 1.0 + 0.25 * (2.0 * u - 1.0)
    else:
        v = 0.1 * (2.0 * u - 1.0)
    return torch.from_numpy(v.astype(np.float32).reshape(shape))


def formula_buffer(name, shape, k):
    u = weyl(int(np.prod(shape)), k)
    v = 0.1 * (2.0 * u - 1.0) if name.endswith("running_mean") else 1.0 + 0.5 * u
    return torch.from_numpy(v.astype(np.float32).reshape(shape))


def trunk(depth, small_stem=False):
    m = getattr(torchvision.models, f"resnet{depth}")()
    m.fc = torch.nn.Identity()
    if small_stem:
        m.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        m.maxpool = torch.nn.Identity()
    with torch.no_grad():
        for k, (name, p) in enumerate(m.named_parameters()):
            p.copy_(formula_param(name, tuple(p.shape), k))
        bufs = [(n, b) for n, b in m.named_buffers() if not n.endswith("num_batches_tracked")]
        for k, (name, b) in enumerate(bufs):
            b.copy_(formula_buffer(name, tuple(b.shape), k))
    return m


def inputs(n, size, phase=0):
    count = n * 3 * size * size
    return torch.from_numpy((2.0 * weyl(count, phase, X_ALPHA) - 1.0).astype(np.float32).reshape(n, 3, size, size))


def save(name, arr):
    np.save(os.path.join(OUT, f"resnet_{name}.npy"), np.ascontiguousarray(np.asarray(arr, dtype=np.float32)))


def save_names(tag, m):
    with open(os.path.join(OUT, f"resnet_{tag}_names.txt"), "w") as f:
        params = dict(m.named_parameters())
        for name, t in m.state_dict().items():
            if name.endswith("num_batches_tracked"):
                continue
            kind = "param" if name in params else "buffer"
            f.write(f"{PREFIX}{name} {kind} {','.join(str(d) for d in t.shape)}\n")


def forward(m, x, train):
    """Pooled features and res4's per-channel mean."""
    seen = {}
    hook = m.layer3.register_forward_hook(lambda mod, i, o: seen.__setitem__("res4", o))
    m.train(train)
    feat = m(x)
    hook.remove()
    return feat, seen["res4"].mean(dim=(2, 3))


def bn_stats(m):
    return [[bn.running_mean.sum().item(), bn.running_var.sum().item()]
            for bn in m.modules() if isinstance(bn, torch.nn.BatchNorm2d)]


def relu_margin(m, x):
    """The smallest |input| of any ReLU in a train-mode forward."""
    seen = []
    hooks = [mod.register_forward_pre_hook(lambda mod, i: seen.append(i[0].abs().min().item()))
             for mod in m.modules() if isinstance(mod, torch.nn.ReLU)]
    m.train()
    with torch.no_grad():
        m(x)
    for h in hooks:
        h.remove()
    return min(seen)


def case(tag, depth, size, small_stem=False, train=True, grads=False):
    m = trunk(depth, small_stem)
    x = inputs(2, size, GRAD_PHASE if grads else 0)
    if grads:
        margin = relu_margin(trunk(depth, small_stem), x)
        assert margin >= MIN_MARGIN, f"{tag}: a ReLU input is {margin:.3g} from zero: gradients would be fragile"
    with torch.no_grad():
        feat, res4 = forward(m, x, False)
    save(f"{tag}_feat_eval", feat)
    save(f"{tag}_res4_eval", res4)
    if not train:
        return
    feat, res4 = forward(m, x, True)
    save(f"{tag}_feat_train", feat.detach())
    save(f"{tag}_res4_train", res4.detach())
    save(f"{tag}_stats", bn_stats(m))
    if grads:
        n = feat.numel()
        r = torch.from_numpy((2.0 * weyl(n, 0, R_ALPHA) - 1.0).astype(np.float32).reshape(feat.shape))
        (feat * r).sum().backward()
        save(f"{tag}_grads", [[p.grad.double().sum().item(), (p.grad.double() ** 2).sum().item()]
                              for p in m.parameters()])
        save(f"{tag}_conv1_grad", m.conv1.weight.grad)


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    save_names("r18", trunk(18))
    save_names("r50", trunk(50))
    save_names("r18s", trunk(18, True))
    case("r50", 50, 224, train=False)
    case("r18", 18, 224)
    case("r18_64", 18, 64, grads=True)
    case("r18s_64", 18, 64, small_stem=True)
    print(f"make_resnet_fixtures: wrote to {OUT} (torch {torch.__version__}, torchvision {torchvision.__version__})")


if __name__ == "__main__":
    main()
