#!/usr/bin/python3
"""make_optim_fixtures.py — torch.optim's answers for VISSL's optimizer (tests/unit/test_optim.c).

A small model with VISSL's module names is built from real torch modules: a trunk conv, a
trunk BatchNorm, a trunk Linear with a bias (VISSL 0.1.5 regularises trunk biases always), a
trunk GroupNorm(1, C) (VISSL's LayerNorm2d, which its rules leave in the "remaining" group), a
head Linear, a head BatchNorm and a bias-free prototypes Linear. The parameter groups are made
by VISSL 0.1.5's get_optimizer_param_groups, rewritten here from vissl/utils/optimizer_utils.py
over named_modules() and the module TYPES; LARC is NVIDIA Apex's LARC.step, from Apex's
formula. Then STEPS updates from fixed gradients with per-step learning rates (lr, lr_head).

Per case (tests/golden/fixtures/optim/CASE_*.npy, float32 unless noted):
  init      every parameter, flattened and concatenated in named_parameters() order
  grad{k}   the gradients of step k, same layout (one parameter's gradient is zero at step 2:
            LARC's zero-norm rule)
  lrs       float64 [STEPS, 2]: lr and lr_head per step
  groups    float32 [P]: the group of each parameter (0 trunk reg, 1 trunk unreg, 2 head reg,
            3 head unreg, 4 remaining, -1 not trained)
  final     the parameters after the last step
test_optim.c declares the same parameters (names and shapes, in this order); --names prints
them, to compare.

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_optim_fixtures.py
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("optim")
STEPS = 5
BN_TYPES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)
LIN_TYPES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


class Trunk(nn.Module):
    def __init__(self):
        super().__init__()
        self._feature_blocks = nn.ModuleDict({
            "conv1": nn.Conv2d(3, 4, 3, bias=False),
            "bn1": nn.BatchNorm2d(4),
            "proj": nn.Linear(4, 5),
            "ln": nn.GroupNorm(1, 5),
        })


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.clf = nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6))
        self.prototypes0 = nn.Linear(6, 3, bias=False)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = Trunk()
        self.heads = nn.ModuleList([Head()])


def vissl_groups(model, regularize_bn, regularize_bias, non_trainable):
    """VISSL 0.1.5 get_optimizer_param_groups: returns, per parameter, its group."""
    group = {}
    for name, module in model.named_modules():
        own = {n: p for n, p in module.named_parameters(recurse=False)}
        if not own:
            continue
        head = "head" in name
        for pname, p in own.items():
            full = f"{name}.{pname}"
            if isinstance(module, LIN_TYPES):
                reg = pname == "weight" or (not head) or regularize_bias
            elif isinstance(module, BN_TYPES):
                reg = regularize_bn and (pname == "weight" or regularize_bias)
            else:
                group[full] = 4
                continue
            group[full] = (2 if head else 0) + (0 if reg else 1)
    for full in non_trainable:
        group[full] = -1
    return group


def larc_step(groups, trust, eps, clip):
    """Apex LARC.step's gradient rewrite; the inner optimizer then runs with weight_decay 0."""
    saved = []
    with torch.no_grad():
        for g in groups:
            wd = g.get("weight_decay", 0)
            saved.append(wd)
            g["weight_decay"] = 0
            for p in g["params"]:
                if p.grad is None:
                    continue
                pn, gn = torch.norm(p.data), torch.norm(p.grad.data)
                if pn != 0 and gn != 0:
                    a = trust * pn / (gn + pn * wd + eps)
                    if clip:
                        a = min(a / g["lr"], 1)
                    p.grad.data += wd * p.data
                    p.grad.data *= a
    return saved


CASES = {
    # name: optimizer, its kwargs, LARC (None or (trust, eps, clip)), regularize_bn, regularize_bias, non-trainable
    "sgd_larc": ("sgd", dict(momentum=0.9, nesterov=False), (1e-3, 1e-8, False), False, False, []),
    "sgd_nesterov_larc_clip": ("sgd", dict(momentum=0.9, nesterov=True), (0.02, 1e-8, True), True, True,
                               ["heads.0.prototypes0.weight"]),
    "sgd_plain": ("sgd", dict(momentum=0.0, nesterov=False), None, True, False, []),
    "adam": ("adam", dict(betas=(0.9, 0.999), eps=1e-8), None, False, True, []),
    "adamw": ("adamw", dict(betas=(0.8, 0.99), eps=1e-8), None, True, True, []),
}
WD, HEAD_WD = 0.05, 0.02


def flat(tensors):
    return np.concatenate([t.detach().numpy().ravel() for t in tensors]).astype(np.float32)


def run_case(name):
    opt_name, kwargs, larc, reg_bn, reg_bias, frozen = CASES[name]
    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    model = Model()
    params = list(model.named_parameters())
    with torch.no_grad():
        for _, p in params:
            p.copy_(torch.randn(p.shape, generator=gen))
    group_of = vissl_groups(model, reg_bn, reg_bias, frozen)
    lrs = np.array([[0.1, 0.3], [0.2, 0.1], [0.15, 0.25], [0.05, 0.05], [0.3, 0.2]], dtype=np.float64)
    wds = [WD, 0.0, HEAD_WD, 0.0, WD]
    groups = []
    for g in range(5):
        members = [p for n, p in params if group_of[n] == g]
        if members:
            groups.append({"params": members, "gi": g, "weight_decay": wds[g]})
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[opt_name]
    opt = cls(groups, lr=0.1, **kwargs)
    init = flat(p for _, p in params)
    grads = []
    for k in range(STEPS):
        for g in opt.param_groups:
            g["lr"] = lrs[k][1] if g["gi"] in (2, 3) else lrs[k][0]
        step_grads = []
        for n, p in params:
            gr = torch.randn(p.shape, generator=gen)
            if k == 2 and n == "trunk._feature_blocks.proj.bias":
                gr.zero_()
            p.grad = None if group_of[n] == -1 else gr.clone()
            step_grads.append(gr)
        grads.append(flat(step_grads))
        saved = larc_step(opt.param_groups, *larc) if larc else None
        opt.step()
        if saved:
            for g, wd in zip(opt.param_groups, saved):
                g["weight_decay"] = wd
    out = lambda n, a: golden.save_array(os.path.join(OUT, f"{name}_{n}.npy"), a)
    out("init", init)
    for k, gr in enumerate(grads):
        out(f"grad{k}", gr)
    out("lrs", lrs)
    out("groups", np.array([group_of[n] for n, _ in params], dtype=np.float32))
    out("final", flat(p for _, p in params))


def main():
    if "--names" in sys.argv:
        for n, p in Model().named_parameters():
            print(n, tuple(p.shape))
        return
    os.makedirs(OUT, exist_ok=True)
    for name in CASES:
        run_case(name)


if __name__ == "__main__":
    main()
