#!/usr/bin/python3
"""make_model_fixtures.py — PyTorch's answers for VISSL's whole model (tests/unit/test_model.c).

VISSL's BaseSSLMultiInputOutputModel is rebuilt here in plain PyTorch from VISSL 0.1.5's vissl/models/:
a `trunk` whose tensors are `_feature_blocks.<torchvision name>` (wrapped as `base_model` in a
feature extractor), a `heads` ModuleList whose nested entries are nn.Sequential, VISSL's
multi-resolution forward (consecutive crops of one size concatenated, one trunk pass per size,
features concatenated, heads once), MULTI_INPUT_HEAD_MAPPING (input i → its features → head i)
and the feature extractor's pool ops (LINEAR_EVAL_FEAT_POOL_OPS_MAP, flattened).

No weights are stored: the trunk and each head are set by the closed formulas of
make_resnet_fixtures.py and make_heads_fixtures.py (the same ones resnet_init_formula and
head_init_formula use). Inputs: input i is 2·frac(j·X_ALPHA + (i+1)·BETA) − 1 over its flat
index j; the upstream gradient of output k is 2·frac(j·R_ALPHA + k·BETA) − 1.

Files per case (tests/golden/fixtures/nn/model_CASE_*):
  names.txt          "name kind shape" for every state-dict entry of the VISSL model
  out{k}.npy         output k (after a train-mode forward where the case trains, else eval)
  grads.npy          per parameter, in state-dict order: [Σ g, Σ g²] of L = Σ_k Σ out_k · r_k
  grad_floor.npy     per parameter, torch float32's own error on grads (test_model.c's measure)
  flip_floor.npy     per parameter, how far ReLU flips within float32 noise can move grads (flip_floor)
  phase.npy          [the input phase]
  stats.npy          per BN layer of the model: [Σ running_mean, Σ running_var] after the forward
Cases:
  swav_multires  ResNet-18 small stem, crops 2×(2×3×24²) then 2×(2×3×16²), swav_head with BN
                 and two prototype heads; train
  pirl_mapping   ResNet-18 small stem; "patches" (9×3×16², one image) → flatten → [mlp,
                 siamese_concat_view 9, mlp]; "images" (2×3×24²) → res5avg → mlp; train
  linear_eval    ResNet-18 small stem frozen as a feature extractor (res4 AvgPool2d, res5
                 AdaptiveMaxPool2d, SHOULD_FLATTEN_FEATS off), one eval_mlp per layer, trained on 4×3×32²; trunk in eval
  voc07_r50      ResNet-50, VISSL's VOC07 SVM pool map on 1×3×224², eval, trunk features only

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_model_fixtures.py
(`--flip-floor` writes only the flip_floor files, at the phases already saved.)
"""
import copy
import os
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_heads_fixtures as H  # noqa: E402
import make_resnet_fixtures as R  # noqa: E402
import trunk_golden as T  # noqa: E402  (the names-file writer shared with the trunk fixtures)
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("nn")
MIN_MARGIN = 1e-6
FLIP_FLOOR_ONLY = "--flip-floor" in sys.argv


class Trunk(nn.Module):
    """VISSL's ResNeXt trunk: torchvision's modules under _feature_blocks, features by name."""

    def __init__(self, depth, small_stem):
        super().__init__()
        tv = R.trunk(depth, small_stem)
        self._feature_blocks = nn.ModuleDict([
            ("conv1", tv.conv1), ("bn1", tv.bn1), ("conv1_relu", tv.relu), ("maxpool", tv.maxpool),
            ("layer1", tv.layer1), ("layer2", tv.layer2), ("layer3", tv.layer3), ("layer4", tv.layer4),
            ("avgpool", tv.avgpool), ("flatten", nn.Flatten(1))])

    ALIASES = {"conv1": "conv1_relu", "res1": "maxpool", "res2": "layer1", "res3": "layer2", "res4": "layer3",
               "res5": "layer4", "res5avg": "avgpool", "flatten": "flatten"}

    def forward(self, x, names=("flatten",)):
        want = {self.ALIASES[n] for n in names}
        seen = {}
        for name, block in self._feature_blocks.items():
            x = block(x)
            if name in want:
                seen[name] = x
        return [seen[self.ALIASES[n]] for n in names]


class FeatureExtractor(nn.Module):
    def __init__(self, trunk, pool_ops, flatten):
        super().__init__()
        self.base_model = trunk
        self.pool_ops = pool_ops  # [(name, module)]
        self.flatten = flatten    # SHOULD_FLATTEN_FEATS

    def forward(self, x):
        feats = self.base_model(x, [n for n, _ in self.pool_ops])
        feats = [op(f) for f, (_, op) in zip(feats, self.pool_ops)]
        return [torch.flatten(f, start_dim=1) for f in feats] if self.flatten else feats


def heads_modules(spec):
    """MODEL.HEAD.PARAMS → ModuleList; a nested entry becomes nn.Sequential (formula per head)."""
    def one(name, kw):
        if name == "mlp":
            m = H.MLP(**kw)
        elif name == "eval_mlp":
            m = H.LinearEvalMLP(**kw)
        elif name == "swav_head":
            m = H.SwAVPrototypesHead(**kw)
        else:
            return SiameseConcatView(**kw)
        return H.formula_set(m)
    out = nn.ModuleList()
    for entry in spec:
        if isinstance(entry[0], list):
            out.append(nn.Sequential(*[one(n, kw) for n, kw in entry]))
        else:
            out.append(one(*entry))
    return out


class SiameseConcatView(nn.Module):
    def __init__(self, num_towers):
        super().__init__()
        self.num_towers = num_towers

    def forward(self, x):
        return x.view(x.shape[0] // self.num_towers, -1)


class Model(nn.Module):
    def __init__(self, trunk, heads):
        super().__init__()
        self.trunk = trunk
        self.heads = heads


def run_head(head, x):
    if isinstance(head, nn.Sequential):
        for h in head:
            x = h(x)
            x = x[0] if isinstance(x, list) and h is not head[-1] else x
        return x
    if x.ndim == 4 and not isinstance(head, H.LinearEvalMLP):
        x = torch.squeeze(x)  # VISSL's MLP squeezes its input
    return head(x)


def flat_outputs(outs):
    flat = []
    for o in outs:
        flat.extend(o if isinstance(o, list) else [o])
    return flat


def inputs(shapes, phase=0, dtype=torch.float32):
    out = []
    for i, s in enumerate(shapes):
        n = int(np.prod(s))
        v = 2.0 * R.weyl(n, i + 1 + phase, R.X_ALPHA) - 1.0
        out.append(torch.from_numpy(v.astype(np.float32).reshape(s)).to(dtype))
    return out


def upstream(k, shape):
    v = 2.0 * R.weyl(int(np.prod(shape)), k, R.R_ALPHA) - 1.0
    return torch.from_numpy(v.astype(np.float32).reshape(shape))


def save(kase, name, arr):
    golden.save_f32(os.path.join(OUT, f"model_{kase}_{name}.npy"), arr)


def relu_margin(model, run):
    """The smallest |input| of any ReLU in the case's forward (a flip there breaks gradients)."""
    seen = []
    hooks = [m.register_forward_pre_hook(lambda mod, i: seen.append(i[0].abs().min().item()))
             for m in model.modules() if isinstance(m, nn.ReLU)]
    with torch.no_grad():
        run()
    for h in hooks:
        h.remove()
    return min(seen) if seen else 1.0


def fp32_error(model, make_run, phase):
    """PyTorch's own fp32 gradient error against float64 for this input phase: the largest
    grad_error over parameters whose gradient is not ~0 (a Linear bias before a train-mode BN
    has an exactly-zero gradient, so its fp32 noise has no scale to be relative to)."""
    _, g32 = step(copy.deepcopy(model), make_run(phase), True)
    _, g64 = step(copy.deepcopy(model).double(), make_run(phase, torch.float64), True)
    top = max(np.sqrt(b[1]) for b in g64)
    return max(grad_error(a, b) for a, b in zip(g32, g64) if np.sqrt(b[1]) > 1e-6 * top)


def pick_phase(kase, model, make_run, trunk_trains):
    """The input phase (of 16) on which PyTorch's fp32 gradients are closest to float64's.
    Train-mode BN over a few values lifts fp32 noise at ReLU inputs to ~1e-4, so in any fp32
    engine some ReLUs flip and move the gradients; this picks the input where that matters
    least. Saved as model_CASE_phase.npy for the C side."""
    if not trunk_trains:  # a frozen trunk sends no gradient through its ReLUs
        return 0
    best = min((fp32_error(model, make_run, phase), phase) for phase in range(16))
    print(f"{kase}: phase {best[1]}, PyTorch fp32 gradient error {best[0]:.3g}")
    return best[1]


def relu_inputs(model, run, train):
    """Every ReLU call's input (float64 copies), in call order, in the case's forward."""
    seen = []
    hooks = [m.register_forward_pre_hook(lambda mod, i: seen.append(i[0].detach().double().clone()))
             for m in model.modules() if isinstance(m, nn.ReLU)]
    model.train(train)
    with torch.no_grad():
        run(model)
    for h in hooks:
        h.remove()
    return seen


def flipped_grads(model64, run, train, call, index):
    """Gradient sums with ReLU call `call`'s input at `index` moved to the other side of zero
    (the same magnitude, so only that ReLU's decision changes)."""
    m = copy.deepcopy(model64)
    calls = [0]

    def flip(mod, i):
        calls[0] += 1
        if calls[0] - 1 == call:
            moved = torch.zeros_like(i[0])
            moved[index] = -2 * i[0][index].item()
            return (i[0] + moved,)
    for r in m.modules():
        if isinstance(r, nn.ReLU):
            r.register_forward_pre_hook(flip)
    return step(m, run, train)[1]


def flip_floor(model, make_run, phase, train):
    """Per parameter, the summed grad_error that flipping, one at a time, each ReLU whose float64
    input lies within its noise band moves the float64 gradients by; the band is the largest
    |x32 − x64| over that ReLU call's input (torch float32 on this machine). Train-mode BN over a
    few values lifts that noise to ~1e-4, a float32 engine's accumulation order decides those
    ReLUs, and one flip moves gradients by up to ~5e-2 (flips add up about linearly). On
    pirl_mapping's input selfsup flipped two (float64 inputs 3.3e-7 and 4.0e-7, 1/20 of their
    band) and torch float32 here did the same, both missing layer1.1.conv1's gradient by 6.6e-3."""
    model64 = copy.deepcopy(model).double()
    exact = relu_inputs(model64, make_run(phase, torch.float64), train)
    rounded = relu_inputs(copy.deepcopy(model), make_run(phase), train)
    base = step(copy.deepcopy(model64), make_run(phase, torch.float64), train)[1]
    floor = np.zeros(len(base))
    for call, (a, b) in enumerate(zip(exact, rounded)):
        for index in (a.abs() < (a - b).abs().max()).nonzero().tolist():
            got = flipped_grads(model64, make_run(phase, torch.float64), train, call, tuple(index))
            floor += [grad_error(g, w) for g, w in zip(got, base)]
    return floor


def step(model, run, train):
    model.train(train)
    outs = run(model)
    loss = sum((o * upstream(k, o.shape).to(o.dtype)).sum() for k, o in enumerate(outs))
    if train:
        loss.backward()
    grads = [[p.grad.sum().item(), (p.grad ** 2).sum().item()] if p.grad is not None else [0.0, 0.0]
             for p in model.parameters()]
    return outs, grads


def grad_error(got, want):
    """test_model.c's measure: |Σg − Σg*| / ‖g*‖ and |Σg² − Σg*²| / Σg*², the larger."""
    (s, s2), (rs, rs2) = got, want
    return 0.0 if rs2 == 0 else max(abs(s - rs) / np.sqrt(rs2), abs(s2 - rs2) / rs2)


def finish(kase, model, make_run, train, trunk_trains=True):
    """Forward (and backward when training): outputs, gradient sums, BN statistics. The
    references are computed in float64 (the exact answer to fp32 inputs and weights); torch's
    own fp32 error against them is saved per parameter (grad_floor): train-mode BN over a few
    values lifts fp32 noise at ReLU inputs to ~1e-4, so a few ReLUs flip in any fp32 engine
    and gradients move by more than 1e-3. Which ones flip depends on the engine's rounding
    (pick_phase's choice keeps torch's own flips few here, not another engine's), so what flips
    within the noise can move is saved too (flip_floor). test_model.c: FLOOR_FACTOR ×
    max(1e-3, grad_floor) + flip_floor."""
    if FLIP_FLOOR_ONLY:
        if train:
            phase = int(np.load(os.path.join(OUT, f"model_{kase}_phase.npy"))[0])
            save(kase, "flip_floor", flip_floor(model, make_run, phase, train))
        return
    phase = golden.kept_choice("nn", f"model_{kase}_phase.npy",
                               lambda: pick_phase(kase, model, make_run, train and trunk_trains))
    save(kase, "phase", [phase])
    model32 = copy.deepcopy(model)
    model64 = copy.deepcopy(model).double()
    outs32, grads32 = step(model, make_run(phase), train)
    outs, grads = step(model64, make_run(phase, torch.float64), train)
    model = model64
    for k, o in enumerate(outs):
        save(kase, f"out{k}", o)
    if train:
        save(kase, "grads", grads)
        save(kase, "grad_floor", [grad_error(a, b) for a, b in zip(grads32, grads)])
        save(kase, "flip_floor", flip_floor(model32, make_run, phase, train))
    save(kase, "stats", [[m.running_mean.sum().item(), m.running_var.sum().item()]
                         for m in model.modules() if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d))])
    T.save_names("model", kase, model)


def swav_multires():
    trunk = Trunk(18, True)
    heads = heads_modules([["swav_head", {"dims": [512, 64, 32], "use_bn": True, "num_clusters": [20, 10]}]])
    model = Model(trunk, heads)
    def make_run(phase, dtype=torch.float32):
        crops = inputs([(2, 3, 24, 24)] * 2 + [(2, 3, 16, 16)] * 2, phase, dtype)

        def run(m):
            feats = [m.trunk(torch.cat(crops[0:2]))[0], m.trunk(torch.cat(crops[2:4]))[0]]
            return flat_outputs([run_head(m.heads[0], torch.cat(feats))])
        return run
    finish("swav_multires", model, make_run, True)


def pirl_mapping():
    trunk = Trunk(18, True)
    heads = heads_modules([
        [["mlp", {"dims": [512, 32]}], ["siamese_concat_view", {"num_towers": 9}], ["mlp", {"dims": [288, 16]}]],
        ["mlp", {"dims": [512, 16]}],
    ])
    model = Model(trunk, heads)
    def make_run(phase, dtype=torch.float32):
        patches, images = inputs([(9, 3, 16, 16), (2, 3, 24, 24)], phase, dtype)

        def run(m):
            a = run_head(m.heads[0], m.trunk(patches, ["flatten"])[0])
            b = run_head(m.heads[1], m.trunk(images, ["res5avg"])[0])
            return [a, b]
        return run
    finish("pirl_mapping", model, make_run, True)


def linear_eval():
    pool = [("res4", nn.AvgPool2d([4, 4], 4, 0)), ("res5", nn.AdaptiveMaxPool2d([2, 2]))]
    trunk = FeatureExtractor(Trunk(18, True), pool, False)  # VISSL's linear configs: no flatten
    heads = heads_modules([["eval_mlp", {"in_channels": 256, "dims": [1024, 10]}],
                           ["eval_mlp", {"in_channels": 512, "dims": [2048, 10]}]])
    for p in trunk.parameters():
        p.requires_grad_(False)
    model = Model(trunk, heads)
    def make_run(phase, dtype=torch.float32):
        (x,) = inputs([(4, 3, 32, 32)], phase, dtype)

        def run(m):
            m.trunk.eval()  # VISSL keeps a feature extractor's trunk in eval mode
            feats = m.trunk(x)
            return [run_head(h, f) for h, f in zip(m.heads, feats)]
        return run
    finish("linear_eval", model, make_run, True, trunk_trains=False)


def voc07_r50():
    pool = [("conv1", nn.AvgPool2d([10, 10], 10, 4)), ("res2", nn.AvgPool2d([16, 16], 8, 0)),
            ("res3", nn.AvgPool2d([13, 13], 5, 0)), ("res4", nn.AvgPool2d([8, 8], 3, 0)),
            ("res5", nn.AvgPool2d([6, 6], 1, 0))]
    model = Model(FeatureExtractor(Trunk(50, False), pool, True), nn.ModuleList())
    (x,) = inputs([(1, 3, 224, 224)])
    with torch.no_grad():
        finish("voc07_r50", model, lambda phase, dtype=torch.float32: lambda m: m.trunk(x.to(dtype)), False)


def main():
    os.makedirs(OUT, exist_ok=True)
    swav_multires()
    pirl_mapping()
    linear_eval()
    voc07_r50()


if __name__ == "__main__":
    main()
