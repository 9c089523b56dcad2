"""trunk_golden.py — what the trunk fixture generators share (make_resnet_fixtures.py,
make_regnet_fixtures.py, make_efficientnet_fixtures.py, make_alexnet_fixtures.py; the profiler's
row collection also serves make_complexity_fixtures.py).

No trunk fixture stores weights. Every parameter, BN running statistic, input image and upstream
gradient is set by one closed formula, the one nn/params.c's eng_params_init_formula (and
resnet_init_formula) computes on the C side: a Weyl sequence in float64, rounded to float32, so
both sides hold bit-identical values. Let u(i, k) = frac(i·ALPHA + k·BETA) for flat element index
i of tensor k:
  4-D conv weight (parameter k)  sqrt(6/fan_in)·(2u−1), fan_in = shape[1]·shape[2]·shape[3]
  1-D parameter named *weight    1 + 0.25·(2u−1)                 (BN weight)
  other 1-D parameter            0.1·(2u−1)                      (BN bias, conv bias)
  running_mean / running_var     (k = buffer index) 0.1·(2u−1) / 1 + 0.5·u
  input image x                  2·frac(i·X_ALPHA + phase·BETA) − 1, N × C × H × W
  upstream gradient r            2·frac(i·R_ALPHA) − 1, over the features
Parameters and buffers (num_batches_tracked left out) are numbered in order from 0
(set_formula; a generator may number a subset, or start the buffers later).

Then, per case: a float64 forward and backward of L = Σ feat·r on the model converted to double
after the float32 values were set (the exact answer to the float32 inputs and weights), summed
per BN layer (bn_stats) and per parameter (grad_summaries), and torch float32's own error on
those sums (grad_error, test_resnet.c's measure) as the tests' floor (grad_floor). oneDNN picks
its kernels, and with them the rounding, by instruction set; ONEDNN_MAX_CPU_ISA caps the choice
(a cap above the machine's is the machine's), and oneDNN reads it once, so fp32_runs runs the
float32 side in one child process per cap of ISAS (the generator's `--fp32` command line hands
it to fp32_child). A train forward's decisions (a ReLU's sign, a max-pool's winner) must not lie
inside float32's noise: decisions, band_margin and PhaseSearch measure and choose the input
phase that keeps them clear of it.

Model complexity: profile restates how ClassyVision's profiler (classy_vision/generic/
profiler.py, which VISSL's SSLModelComplexityHook runs) visits a model, one row per profiled
module call; the per-layer rules (make_complexity_fixtures.py's layer_flops, ...) are the
caller's. write_complexity writes a trunk's rows and their total.
"""
import math
import os
import pickle
import subprocess
import sys
import tempfile

import numpy as np
import torch
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("nn")
ALPHA, BETA = 0.7548776662466927, 0.5698402909980532
X_ALPHA, R_ALPHA = 0.6180339887498949, 0.3247179572447460
# oneDNN's instruction-set caps the float32 runs are made under (see the docstring).
ISAS = ("SSE41", "AVX", "AVX2", "AVX512_CORE")
# A parameter whose float64 Σg² is below ZERO_GRAD_SQ has a gradient that is zero but for float64
# roundoff (a bias whose shift a following train-mode BN cancels): the relative measure is
# meaningless there, so its grad_floor entry is instead torch float32's largest √Σg² (an absolute
# size). Each generator says where its trunks have such parameters.
ZERO_GRAD_SQ = 1e-20
# A large preset's input gradient is held to the tests' GRAD_TOL (1e-3) alone, with no floor: torch
# float32's own error on it (dx_floor), under every cap of ISAS, must be at most DX_FLOOR_MAX, a
# quarter of that (asserted where it is made), since the engine's own is of the same size.
DX_FLOOR_MAX = 2.5e-4


# ---------------------------------------------------------------------------------------------
# The formula.

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


def named_parameters(m):
    return list(m.named_parameters())


def named_buffers(m):
    """m's buffers but num_batches_tracked, [(name, buffer)] in order."""
    return [(n, b) for n, b in m.named_buffers() if not n.endswith("num_batches_tracked")]


def set_formula(m, params=named_parameters, first_buffer=0):
    """Every parameter of params(m) ([(name, parameter)]; by default all of them) and every buffer
    of named_buffers(m) set by the formula, both numbered in order, the parameters from 0 and the
    buffers from first_buffer; m."""
    with torch.no_grad():
        for k, (name, p) in enumerate(params(m)):
            p.copy_(formula_param(name, tuple(p.shape), k))
        for k, (name, b) in enumerate(named_buffers(m), start=first_buffer):
            b.copy_(formula_buffer(name, tuple(b.shape), k))
    return m


def inputs(n, size, phase=0, channels=3):
    """The input image: n × channels × size × size, float32."""
    count = n * channels * size * size
    v = (2.0 * weyl(count, phase, X_ALPHA) - 1.0).astype(np.float32)
    return torch.from_numpy(v.reshape(n, channels, size, size))


def upstream(feat):
    """The upstream gradient r over feat (its shape, float32)."""
    return torch.from_numpy((2.0 * weyl(feat.numel(), 0, R_ALPHA) - 1.0).astype(np.float32).reshape(feat.shape))


# ---------------------------------------------------------------------------------------------
# Forward, backward and their summaries.

def eval_features(m, *args):
    """m(*args) in eval mode, without gradients."""
    m.eval()
    with torch.no_grad():
        return m(*args)


def train_step(m, x):
    """Train forward and backward of L = Σ feat·r (the parameters' .grad set, and x's where it
    requires one); the features."""
    m.train()
    feat = m(x)
    (feat * upstream(feat).to(feat.dtype)).sum().backward()
    return feat.detach()


def input_gradient(m, x):
    """The gradient of L = Σ feat·r with respect to x after one train forward of m (train_step on
    a copy of x that requires one; float64 when m and x are)."""
    x = x.clone().requires_grad_(True)
    train_step(m, x)
    return x.grad.detach()


def bn_stats(m):
    """Per BatchNorm2d (module order) [Σ running_mean, Σ running_var]."""
    return [[bn.running_mean.sum().item(), bn.running_var.sum().item()]
            for bn in m.modules() if isinstance(bn, torch.nn.BatchNorm2d)]


def grad_summaries(m, params=named_parameters):
    """Per parameter of params(m) [Σ g, Σ g²], in float64."""
    return [[p.grad.double().sum().item(), (p.grad.double() ** 2).sum().item()] for _, p in params(m)]


def dx_floor(exact, dxs):
    """torch float32's own error on an input gradient: the largest max|dx32 − dx*| / max|dx*| over
    dxs (one array per float32 run) against the float64 exact."""
    exact = golden.as_array(exact, np.float64)
    return max(float(np.abs(np.asarray(d, np.float64) - exact).max()) for d in dxs) / float(np.abs(exact).max())


def grad_error(got, want):
    """test_resnet.c's measure: |Σg − Σg*| / √Σg*² and |Σg² − Σg*²| / Σg*², the larger."""
    (s, s2), (rs, rs2) = got, want
    return 0.0 if rs2 == 0 else max(abs(s - rs) / np.sqrt(rs2), abs(s2 - rs2) / rs2)


def grad_floor(exact, grads, zero_sq=ZERO_GRAD_SQ):
    """Per parameter, torch float32's largest grad_error over grads (one list of summaries per
    float32 run) against the float64 summaries exact; where exact's Σg² is below zero_sq, its
    largest √Σg² instead (see ZERO_GRAD_SQ)."""
    return [max(np.sqrt(g[p][1]) for g in grads) if exact[p][1] < zero_sq
            else max(grad_error(g[p], exact[p]) for g in grads) for p in range(len(exact))]


def print_zero_grads(case, names, exact, floor):
    """A line per parameter (names, in exact's order) whose gradient is zero (see ZERO_GRAD_SQ)."""
    for p, (name, (_, s2)) in enumerate(zip(names, exact)):
        if s2 < ZERO_GRAD_SQ:
            print(f"{case}: {name}'s gradient is zero (float64 Σg² {s2:.3g}); "
                  f"torch float32's √Σg² is at most {floor[p]:.3g}")


# ---------------------------------------------------------------------------------------------
# torch float32 under each oneDNN cap, and the decisions its rounding must not flip.

def fp32_child(path, specs, measure):
    """In a child process of fp32_runs: {CASE: measure(CASE, PHASE)} for each "CASE:PHASE" of
    specs, pickled to path."""
    out = {}
    for spec in specs:
        case, phase = spec.split(":")
        out[case] = measure(case, int(phase))
    with open(path, "wb") as f:
        pickle.dump(out, f)


def fp32_runs(script, phases):
    """{case: [measure(case, phase) under each cap of ISAS]} for phases ({case: phase}): `script
    --fp32 PATH CASE:PHASE ...` run once per cap, in a child process, whose main calls fp32_child
    with its own measure (torch float32's results, as numpy arrays)."""
    runs = {case: [] for case in phases}
    with tempfile.TemporaryDirectory() as tmp:
        for isa in ISAS:
            path = os.path.join(tmp, f"{isa}.pickle")
            args = [sys.executable, os.path.abspath(script), "--fp32", path] + [f"{c}:{p}" for c, p in phases.items()]
            subprocess.run(args, env=dict(os.environ, ONEDNN_MAX_CPU_ISA=isa), check=True)
            with open(path, "rb") as f:
                got = pickle.load(f)
            for case in phases:
                runs[case].append(got[case])
    return runs


def fp32_main(argv, measure):
    """Run fp32_child when argv is fp32_runs' child command line; whether it was."""
    if len(argv) >= 3 and argv[1] == "--fp32":
        fp32_child(argv[2], argv[3:], measure)
        return True
    return False


def decisions(m, x):
    """[(kind, input)] of every ReLU and max-pool call in a train-mode forward, in call order
    (copies; a module used in several places fires once per use)."""
    seen = []
    hooks = []
    for mod in m.modules():
        kind = "relu" if isinstance(mod, torch.nn.ReLU) else "maxpool" if isinstance(mod, torch.nn.MaxPool2d) else None
        if kind:
            hooks.append(mod.register_forward_pre_hook(
                lambda mod, i, kind=kind: seen.append((kind, i[0].detach().clone()))))
    m.train()
    with torch.no_grad():
        m(x)
    for h in hooks:
        h.remove()
    return seen


def band_margin(exact, runs, gap=None):
    """The smallest distance / band over every decision of the float64 run `exact` ([(kind,
    tensor)]), the band being that call's largest |x32 − x64| in any float32 run of `runs` (each a
    list of arrays, in the same order): |x| / band for a ReLU input, gap(x) / (2·band) for a
    max-pool input (gap: the smallest gap between a window's largest and second-largest input,
    by the generator's pooling). Also the per-kind minima {kind: margin}."""
    per_kind = {}
    for k, (kind, a) in enumerate(exact):
        band = max(float(np.abs(r[k].astype(np.float64) - a.numpy()).max()) for r in runs)
        dist = float(a.abs().min()) if kind == "relu" else gap(a) / 2.0
        margin = math.inf if band == 0 else dist / band
        per_kind[kind] = min(per_kind.get(kind, math.inf), margin)
    return min(per_kind.values(), default=math.inf), per_kind


class PhaseSearch:
    """The input phase of a generator's cases: the one of 0..search_phases−1 with the largest band
    margin in this process that keeps at least min_margin under every cap of ISAS. model(case)
    builds the case's float32 formula model, image(case, phase) its float32 input, gap is
    band_margin's; script's fp32_child measure must return a dict with the float32 decision
    inputs ([array]) under "decisions"."""

    def __init__(self, script, model, image, gap, search_phases, min_margin):
        self.script, self.model, self.image, self.gap = script, model, image, gap
        self.search_phases, self.min_margin = search_phases, min_margin

    def exact(self, case, phase):
        """The float64 run's decisions."""
        return decisions(self.model(case).double(), self.image(case, phase).double())

    def margins(self, case, phases):
        """{phase: margin} measured in this process (its own ISA only)."""
        m64, m32 = self.model(case).double(), self.model(case)
        out = {}
        for phase in phases:
            x = self.image(case, phase)
            exact = decisions(m64, x.double())
            out[phase] = band_margin(exact, [[a.numpy() for _, a in decisions(m32, x)]], self.gap)[0]
        return out

    def under_caps(self, case, phase, runs):
        """(margin, {kind: margin}) under runs, fp32_runs' list for the case."""
        return band_margin(self.exact(case, phase), [r["decisions"] for r in runs], self.gap)

    def choose(self, case):
        margins = self.margins(case, range(self.search_phases))
        for phase in sorted(margins, key=lambda p: (-margins[p], p)):
            if margins[phase] < self.min_margin:
                break
            runs = fp32_runs(self.script, {case: phase})[case]
            margin = self.under_caps(case, phase, runs)[0]
            print(f"{case}: phase {phase}: margin {margins[phase]:.2f} here, {margin:.2f} under every cap")
            if margin >= self.min_margin:
                return phase
        raise SystemExit(f"{case}: no phase of 0..{self.search_phases - 1} keeps every decision "
                         f"{self.min_margin}x its float32 noise away")

    def kept(self, stem, cases):
        """{case: phase}: the committed STEM_CASE_phase.npy's (golden.kept_choice), else chosen."""
        return {case: golden.kept_choice("nn", f"{stem}_{case}_phase.npy", lambda c=case: self.choose(c))
                for case in cases}

    def checked(self, case, phase, runs):
        """under_caps, asserted to keep min_margin."""
        margin, per_kind = self.under_caps(case, phase, runs)
        assert margin >= self.min_margin, f"{case}: a decision lies {margin:.2f}x its float32 noise from zero"
        return margin, per_kind

    def search_main(self, argv):
        """`--search CASE LO HI`: print each phase's margin here; whether argv was that."""
        if len(argv) != 5 or argv[1] != "--search":
            return False
        for phase, margin in self.margins(argv[2], range(int(argv[3]), int(argv[4]))).items():
            print(f"phase {phase}: margin {margin:.2f}")
        return True


# ---------------------------------------------------------------------------------------------
# Files.

def save_train_fixtures(save, tag, m, x, grads, stem, stem_weight, zero_sq=ZERO_GRAD_SQ):
    """One float64 train step of m on x (after its eval fixtures) and the fixtures it gives, by
    save(NAME, array): TAG_feat_train (the features), TAG_stats (bn_stats), TAG_grads
    (grad_summaries), TAG_STEM_grad (stem_weight's full gradient) and TAG_grad_floor (grad_floor
    against grads, the float32 runs' summaries); (the float64 summaries, the floor)."""
    save(f"{tag}_feat_train", train_step(m, x))
    save(f"{tag}_stats", bn_stats(m))
    exact = grad_summaries(m)
    save(f"{tag}_grads", exact)
    save(f"{tag}_{stem}_grad", stem_weight.grad)
    floor = grad_floor(exact, grads, zero_sq)
    save(f"{tag}_grad_floor", floor)
    return exact, floor


def save_f32(stem, name, arr):
    """arr as fixtures/nn/STEM_NAME.npy, float32."""
    golden.save_f32(os.path.join(OUT, f"{stem}_{name}.npy"), arr)


def save_names(stem, tag, m, params=named_parameters, prefix=""):
    """fixtures/nn/STEM_TAG_names.txt: "name kind shape" per state-dict entry (prefix + name; kind
    param for params(m)'s, else buffer; shape comma-separated), num_batches_tracked left out."""
    with open(os.path.join(OUT, f"{stem}_{tag}_names.txt"), "w") as f:
        own = dict(params(m))
        for name, t in m.state_dict().items():
            if name.endswith("num_batches_tracked"):
                continue
            kind = "param" if name in own else "buffer"
            f.write(f"{prefix}{name} {kind} {','.join(str(d) for d in t.shape)}\n")


def save_vissl_checkpoint(path, trunk):
    """A trunk's state dict as VISSL writes a checkpoint (classy_state_dict → base_model → model →
    trunk, num_batches_tracked included), torch.save's zip format."""
    torch.save({"classy_state_dict": {"base_model": {"model": {"trunk": trunk, "heads": {}}}}}, path)


def fmt(xs):
    return ",".join(str(x) for x in xs)


def start():
    """What a generator does before writing: the output folder, every core for torch."""
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))


# ---------------------------------------------------------------------------------------------
# Model complexity.

class Flatten(torch.nn.Module):
    """vissl/models/model_helpers.py's Flatten: torch.flatten from `dim` (default -1); the profiler
    takes its flops() = 0."""

    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, feat):
        return torch.flatten(feat, start_dim=self.dim)

    def flops(self, x):
        return 0


def is_leaf(mod):
    return next(mod.children(), None) is None


def own_params(mod):
    return sum(p.numel() for p in mod.parameters(recurse=False))


def profile(m, x, kinds, flops, activations, named=None, profiled=is_leaf):
    """[(name, kind, flops, params, activations)] per call of a profiled module (default: every
    leaf) in m(x), eval mode, in the order the calls return: kinds[the class name], flops(module,
    its input), its own parameter count, activations(module, its output). named(module, caller)
    names a call (caller: the innermost module running around it); by default a call is named
    by the module's named_modules() path."""
    names = {mod: name for name, mod in m.named_modules()}
    stack, rows, hooks = [], [], []

    def enter(mod, inp):
        stack.append(mod)

    def leave(mod, inp, out):
        assert stack.pop() is mod
        if profiled(mod):
            name = named(mod, stack[-1] if stack else None) if named else names[mod]
            rows.append((name, kinds[type(mod).__name__], flops(mod, inp[0]), own_params(mod), activations(mod, out)))

    for mod in names:
        hooks += [mod.register_forward_pre_hook(enter), mod.register_forward_hook(leave)]
    eval_features(m, x)
    for h in hooks:
        h.remove()
    assert not stack
    return rows


def call_site_names(m):
    """profile's `named` for a VISSL trunk m whose one activation module sits in several places:
    a call is named by its caller's path plus the module's name among the caller's children (a
    module the trunk's own forward calls is a _feature_blocks entry: the ModuleDict never runs
    itself), asserted to be one of the module's paths, its only one where it has one."""
    names = {mod: name for name, mod in m.named_modules()}
    paths = {}
    for name, mod in m.named_modules(remove_duplicate=False):
        paths.setdefault(mod, set()).add(name)

    def named(mod, caller):
        parent = caller if caller is not m else m._feature_blocks
        keys = [k for k, c in parent._modules.items() if c is mod]
        assert len(keys) == 1, keys
        name = ".".join(p for p in (names[parent], keys[0]) if p)
        assert name in paths[mod] and (len(paths[mod]) > 1 or name == names[mod]), (name, paths[mod])
        return name
    return named


def write_complexity(path, m, rows):
    """profile's rows to path, then "total - FLOPS PARAMS ACTIVATIONS" (FLOPS -1 when any row's is
    -1; PARAMS the model's parameter count, asserted to be the rows': every parameter's module was
    called); (flops, params, activations)."""
    params = sum(p.numel() for p in m.parameters())
    assert sum(r[3] for r in rows) == params  # every parameter's module was called
    flops = -1 if any(r[2] < 0 for r in rows) else sum(r[2] for r in rows)
    acts = sum(r[4] for r in rows)
    with open(path, "w") as f:
        for r in rows + [("total", "-", flops, params, acts)]:
            f.write(" ".join(str(v) for v in r) + "\n")
    return flops, params, acts
