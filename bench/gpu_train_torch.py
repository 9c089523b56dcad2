#!/usr/bin/env python3
"""gpu_train_torch.py — the PyTorch side of the GPU training benchmark: one SimCLR training
step of a ResNet-50 at 224 px, the VISSL recipe (configs/pretrain/simclr/simclr_8node_resnet.yaml)
on one card, timed in three ways.

What one step is (all on the device, nothing read from disk):
  * input: 128 images per step (--batch), two views each, so 256 crops [2B, 3, S, S] in
    simclr_collator's view-major order (all first views, then all second views). They are random
    uint8 pixels made once and kept on the device, with HWC strides (what a decoder / pinned loader hands
    over); the step converts them to float and normalises them with ImageNet's mean/std on the
    device (VISSL does ToTensor + Normalize in its loader). So the step is measured, not loading
    or augmentation.
  * trunk: torchvision's ResNet-50 without its fc (VISSL's `resnet` trunk, depth 50: the res5
    average pool, 2048-d). Plain BatchNorm2d (VISSL's recipe converts to apex SyncBN across its
    8 GPUs; on one card that is BatchNorm).
  * head: VISSL's SimCLR head, MODEL.HEAD.PARAMS = [["mlp", {"dims": [2048, 2048], "use_relu":
    True}], ["mlp", {"dims": [2048, 128]}]] run one after the other: Linear 2048->2048, ReLU,
    Linear 2048->128 (VISSL's MLP: no BN, no dropout, bias on, PyTorch's default init). The
    torch.squeeze in VISSL's MLP.forward is a no-op for a batch > 1 and is left out.
  * loss: VISSL's simclr_info_nce_loss (SimclrInfoNCECriterion) on one process, temperature
    0.1: z = L2-normalise(out); S = exp(z z^T / T) (no max-subtraction, as VISSL); for row r the
    positive is the same image's other view, the negatives are every other column except the
    row itself and its positive (masks precomputed once, as VISSL's precompute_pos_neg_mask);
    loss = -mean_r log(pos_r / (pos_r + sum neg_r)). It is always computed in fp32 (autocast off
    around it), also in the bf16 modes.
  * optimiser: SGD momentum 0.9, nesterov off, lr 0.3 (fixed; the recipe's per-step schedule is
    left out), weight decay 1e-6 on every parameter (the recipe has regularize_bn and
    regularize_bias True, so VISSL's parameter groups all carry 1e-6), wrapped in apex's LARC
    (trust_coefficient 0.001, clip False, eps 1e-8) as VISSL uses it. Apex's LARC.step, per
    parameter p with gradient g: pn = ||p||, gn = ||g||; if pn != 0 and gn != 0:
    a = trust * pn / (gn + pn * wd + eps), g = (g + wd * p) * a; otherwise g is left alone
    (and gets no weight decay); then the inner SGD steps with weight_decay 0:
    buf = 0.9 * buf + g (buf = g on the first step), p -= lr * buf. Apex tests `pn != 0` in
    Python, which costs a host sync per parameter; here the same arithmetic is done with
    torch.where on the device (same numbers, no sync), with the norms from torch._foreach_norm.
    Gradients are set to None after each step (zero_grad(set_to_none=True)).

Modes (--modes, comma separated):
  eager32       eager, fp32, channels_last, cudnn.benchmark off. TF32 is OFF for convolutions
                and matmuls by default (--tf32 on allows it), so this is real fp32 and its MFU is
                taken against the card's fp32 (non-tensor-core) peak.
  eager_bf16    eager, torch.autocast(bfloat16) around trunk + head, channels_last,
                cudnn.benchmark on. MFU against the dense bf16 tensor-core peak.
  compile_bf16  the eager_bf16 step with the forward + loss under torch.compile (default mode;
                --compile-mode) and the LARC/SGD update compiled too. The warm-up steps (at least
                2) take the compilation; if it raises or takes longer than --compile-timeout
                seconds (240), the mode is reported as "compile: failed/skipped: reason" and the
                run goes on. If only the update fails to compile, it runs eagerly and that is said.

Each mode runs in its own child process (this script again), so cudnn/TF32 settings, compile
caches and allocator state do not leak from one mode into the next, peak memory is per mode, and a
compilation that will not stop can be killed (--in-process runs them all in this process). TF32
is set only in eager32; the bf16 modes keep PyTorch's defaults for what stays fp32 there (the loss).

Timing: each mode builds a fresh model (same seed), runs --warmup steps (10), then
torch.cuda.synchronize(), a CUDA event, --steps steps (30) each closed by an event,
torch.cuda.synchronize(). ms/step = total event time / steps (the median per-step time is
printed too); images/s = batch / (ms/step / 1000) (images = pairs; crops/s is twice that).
Peak memory = torch.cuda.max_memory_allocated over the mode (statistics reset at its start).

Model FLOP utilisation:
  FLOP/step = 3 (fwd + bwd = 3 x fwd) x 2 (FLOP per multiply-add) x crops/step
              x (4.09e9 x (S/224)^2 [ResNet-50 trunk MACs at S px; 4.09 G at 224]
                 + 2048*2048 + 2048*128 [head MACs])
  = 3 x 2 x 256 x 4.0945e9 = 6.29 TFLOP per step at the defaults (8.19 GFLOP per crop forward).
  MFU = FLOP/step / (s/step) / peak. Peaks (dense, per card, from the card name given by
  torch.cuda.get_device_name): H100/H200 SXM: bf16 989.4, TF32 494.7, fp32 66.9 TFLOP/s;
  H100 PCIe: 756 / 378 / 51.2; H100/H200 NVL: 835 / 418 / 60; A100: 312 / 156 / 19.5.
  --peak-tflops overrides the peak used for every mode. The loss and the optimiser are not
  counted.

Run (GPU, about 2-3 minutes on an H100 with the defaults, most of it compilation):
    python bench/gpu_train_torch.py [--json results.json]
    python bench/gpu_train_torch.py --modes eager32,eager_bf16      # skip torch.compile
CPU smoke test (works with torch 1.13, which has no torch.compile):
    /usr/bin/python3 bench/gpu_train_torch.py --device cpu --batch 2 --steps 1 --warmup 0 \
        --modes eager32 --size 64
"""
import argparse
import gc
import json
import math
import os
import platform
import signal
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

MODES = ("eager32", "eager_bf16", "compile_bf16")
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # the recipe's Normalize
RN50_MACS_224 = 4.09e9  # torchvision's ResNet-50 "GFLOPS" (multiply-adds) at 224 px
HEAD_MACS = 2048 * 2048 + 2048 * 128
# Dense peaks in TFLOP/s: (name substring, bf16, tf32, fp32). The first match wins.
PEAKS = [
    ("h200 nvl", 835.0, 418.0, 60.0),
    ("h100 nvl", 835.0, 418.0, 60.0),
    ("h100 pcie", 756.0, 378.0, 51.2),
    ("h200", 989.4, 494.7, 66.9),
    ("h100", 989.4, 494.7, 66.9),  # SXM ("NVIDIA H100 80GB HBM3")
    ("a100", 312.0, 156.0, 19.5),
]


# ---------------------------------------------------------------------------- model (VISSL)
class MLP(nn.Module):
    """VISSL's `mlp` head (use_bn False, use_dropout False, use_bias True)."""

    def __init__(self, dims, use_relu=False):
        super().__init__()
        layers = []
        for i in range(len(dims) - 1):
            layers.append(nn.Linear(dims[i], dims[i + 1]))
            if use_relu:
                layers.append(nn.ReLU(inplace=True))
        self.clf = nn.Sequential(*layers)

    def forward(self, x):
        return self.clf(x)


class SimCLRModel(nn.Module):
    """VISSL's BaseSSLMultiInputOutputModel for the recipe: resnet-50 trunk, then the heads in turn."""

    def __init__(self):
        super().__init__()
        trunk = torchvision.models.resnet50()
        trunk.fc = nn.Identity()  # res5 avgpool, flattened: 2048-d
        self.trunk = trunk
        self.heads = nn.ModuleList([MLP([2048, 2048], use_relu=True), MLP([2048, 128])])

    def forward(self, x):
        x = self.trunk(x)
        for h in self.heads:
            x = h(x)
        return x


def simclr_masks(batch, device):
    """VISSL's precompute_pos_neg_mask on one process: rows [view0 of img 0..B-1, view1 of img 0..B-1]."""
    r = 2 * batch
    idx = torch.arange(r, device=device)
    pos = torch.zeros(r, r, device=device)
    pos[idx, (idx + batch) % r] = 1.0
    neg = 1.0 - pos - torch.eye(r, device=device)
    return pos, neg


def simclr_info_nce(out, pos_mask, neg_mask, temperature):
    """VISSL's SimclrInfoNCECriterion.forward, world size 1."""
    z = F.normalize(out, dim=1, p=2)
    sim = torch.exp(torch.mm(z, z.t()) / temperature)
    pos = torch.sum(sim * pos_mask, 1)
    neg = torch.sum(sim * neg_mask, 1)
    return -torch.mean(torch.log(pos / (pos + neg)))


# ---------------------------------------------------------------------------- LARC + SGD (apex)
def _norms(ts):
    if hasattr(torch, "_foreach_norm"):
        return torch.stack(torch._foreach_norm(ts))
    return torch.stack([t.norm() for t in ts])


def larc_sgd_step(params, grads, bufs, lr, momentum, weight_decay, trust, eps):
    """apex.parallel.LARC (clip False) around torch.optim.SGD(momentum, dampening 0, nesterov False,
    weight_decay 0), without apex's per-parameter host syncs. Updates grads, bufs and params in place."""
    with torch.no_grad():
        pn, gn = _norms(params), _norms(grads)
        ok = (pn != 0) & (gn != 0)
        a = trust * pn / (gn + pn * weight_decay + eps)
        scale = torch.where(ok, a, torch.ones_like(a))
        wd = torch.where(ok, torch.full_like(a, weight_decay), torch.zeros_like(a))
        for g, p, s, w in zip(grads, params, scale.unbind(0), wd.unbind(0)):
            g.add_(p * w).mul_(s)  # apex: g += wd * p; g *= a   (w = 0, s = 1 when skipped)
        # SGD: buf = momentum * buf + g (buf starts at 0, so buf = g on step 1); p -= lr * buf
        torch._foreach_mul_(bufs, momentum)
        torch._foreach_add_(bufs, grads)
        torch._foreach_add_(params, bufs, alpha=-lr)


# ---------------------------------------------------------------------------- helpers
def set_tf32(enabled):
    """TF32 for convolutions and matmuls, through the API this torch has (2.9+ has fp32_precision)."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    mm = getattr(torch.backends.cuda, "matmul", None)
    if conv is not None and hasattr(conv, "fp32_precision") and hasattr(mm, "fp32_precision"):
        conv.fp32_precision = "tf32" if enabled else "ieee"
        mm.fp32_precision = "tf32" if enabled else "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = enabled
        torch.backends.cuda.matmul.allow_tf32 = enabled


def device_name(dev):
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return "cpu: " + line.split(":", 1)[1].strip() + f" ({os.cpu_count()} cpus)"
    except OSError:
        pass
    return "cpu: " + (platform.processor() or platform.machine())


def card_peaks(name):
    low = name.lower()
    for key, bf16, tf32, fp32 in PEAKS:
        if key in low:
            return {"bf16": bf16, "tf32": tf32, "fp32": fp32}
    return None


class CompileTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise CompileTimeout("compile took longer than the time limit")


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


# ---------------------------------------------------------------------------- one mode
def run_mode(mode, a, dev, flop_per_step, peaks):
    compiled = mode.startswith("compile")
    bf16 = mode.endswith("bf16")
    res = {"mode": mode}
    if compiled and not hasattr(torch, "compile"):
        return dict(res, status="skipped: torch %s has no torch.compile" % torch.__version__)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = mode != "eager32"
        if mode == "eager32":
            # Only here: torch 2.9-2.11's inductor reads the legacy TF32 getters, which raise once the new
            # fp32_precision API was used in the process, so the bf16 modes leave the defaults alone.
            set_tf32(a.tf32 == "on")
    precision = "bf16" if bf16 else ("tf32" if (a.tf32 == "on" and dev.type == "cuda") else "fp32")

    torch.manual_seed(a.seed)
    model = SimCLRModel().to(dev).to(memory_format=torch.channels_last).train()
    params = [p for p in model.parameters() if p.requires_grad]
    bufs = [torch.zeros_like(p) for p in params]
    pos_mask, neg_mask = simclr_masks(a.batch, dev)
    mean = torch.tensor(MEAN, device=dev).view(1, 3, 1, 1) * 255.0
    std = torch.tensor(STD, device=dev).view(1, 3, 1, 1) * 255.0
    # Two different input batches, uint8 with HWC strides (channels_last once permuted), view-major.
    g = torch.Generator(device="cpu").manual_seed(a.seed)
    inputs = [torch.randint(0, 256, (2 * a.batch, a.size, a.size, 3), dtype=torch.uint8, generator=g)
              .to(dev).permute(0, 3, 1, 2) for _ in range(2)]
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)

    def forward_loss(x_u8):
        x = (x_u8.float() - mean) / std  # keeps the channels_last strides
        if bf16:
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                out = model(x)
            with torch.autocast(device_type=dev.type, enabled=False):
                return simclr_info_nce(out.float(), pos_mask, neg_mask, a.temperature)
        return simclr_info_nce(model(x), pos_mask, neg_mask, a.temperature)

    def update(ps, gs, bs):
        larc_sgd_step(ps, gs, bs, a.lr, 0.9, a.weight_decay, 0.001, 1e-8)

    fwd, upd = forward_loss, update
    notes = []
    if compiled:
        fwd = torch.compile(forward_loss, mode=a.compile_mode)
        upd = torch.compile(update, mode=a.compile_mode)

    def step(x):
        nonlocal upd
        loss = fwd(x)
        loss.backward()
        grads = [p.grad for p in params]
        try:
            upd(params, grads, bufs)
        except CompileTimeout:
            raise
        except Exception as e:  # the compiled update failed: run it eagerly from now on
            if upd is update:
                raise
            notes.append("update not compiled (%s: %s); it runs eagerly" % (type(e).__name__, str(e)[:200]))
            upd = update
            upd(params, grads, bufs)
        for p in params:
            p.grad = None
        return loss

    warmup = max(a.warmup, 2) if compiled else a.warmup
    if warmup != a.warmup:
        notes.append("warm-up raised to %d steps so compilation stays out of the timed steps" % warmup)
    t0 = time.perf_counter()
    first_s = None
    old = None
    if compiled:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(int(a.compile_timeout))
    try:
        for i in range(warmup):
            loss = step(inputs[i % 2])
            if i == 0:
                loss.item()  # waits for the first step: holds the compilation
                first_s = time.perf_counter() - t0
        sync(dev)
    except Exception as e:  # CompileTimeout, or a compile/backend error
        if not compiled:
            raise
        why = "took more than %d s" % a.compile_timeout if isinstance(e, CompileTimeout) else \
            "%s: %s" % (type(e).__name__, " ".join(str(e).split())[:300])
        return dict(res, status=("skipped: " if isinstance(e, CompileTimeout) else "failed: ") + why)
    finally:
        if compiled:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
    warmup_s = time.perf_counter() - t0

    # timed steps
    times_ms = []
    if dev.type == "cuda":
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(a.steps + 1)]
        sync(dev)
        ev[0].record()
        for i in range(a.steps):
            loss = step(inputs[i % 2])
            ev[i + 1].record()
        sync(dev)
        total_ms = ev[0].elapsed_time(ev[-1])
        times_ms = [ev[i].elapsed_time(ev[i + 1]) for i in range(a.steps)]
        peak_mb = torch.cuda.max_memory_allocated(dev) / 2 ** 20
    else:
        t = time.perf_counter()
        for i in range(a.steps):
            t1 = time.perf_counter()
            loss = step(inputs[i % 2])
            times_ms.append((time.perf_counter() - t1) * 1e3)
        total_ms = (time.perf_counter() - t) * 1e3
        try:
            import resource
            peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # process max RSS
        except ImportError:
            peak_mb = None
    loss_v = float(loss.item())
    ms = total_ms / a.steps
    tflops = flop_per_step / (ms / 1e3) / 1e12
    peak = a.peak_tflops if a.peak_tflops else (peaks[precision] if peaks else None)
    res.update(
        status="ok",
        images_per_s=a.batch / (ms / 1e3),
        crops_per_s=2 * a.batch / (ms / 1e3),
        ms_per_step=ms,
        ms_per_step_median=statistics.median(times_ms),
        ms_per_step_min=min(times_ms),
        ms_per_step_max=max(times_ms),
        tflops=tflops,
        precision=precision,
        peak_tflops=peak,
        mfu=(tflops / peak) if peak else None,
        peak_mem_mb=peak_mb,
        peak_mem_kind="cuda max_memory_allocated" if dev.type == "cuda" else "process max RSS",
        warmup_steps=warmup,
        warmup_s=warmup_s,
        first_step_s=first_s,
        loss=loss_v,
        loss_finite=math.isfinite(loss_v),
        notes=notes,
    )
    if compiled:
        res["compile_s"] = first_s
    return res


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    ap.add_argument("--batch", type=int, default=128, help="images per step; 2 views each (default 128)")
    ap.add_argument("--size", type=int, default=224, help="crop size in px (default 224)")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per mode (default 30)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (default 10)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma list of %s" % ", ".join(MODES))
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON")
    ap.add_argument("--lr", type=float, default=0.3)
    ap.add_argument("--weight-decay", type=float, default=1e-6)
    ap.add_argument("--temperature", type=float, default=0.1)
    ap.add_argument("--tf32", choices=("off", "on"), default="off",
                    help="TF32 for fp32 convs/matmuls in eager32 (default off: true fp32)")
    ap.add_argument("--compile-mode", default="default", help="torch.compile mode (default 'default')")
    ap.add_argument("--compile-timeout", type=int, default=240, help="seconds allowed for compiling (240)")
    ap.add_argument("--peak-tflops", type=float, help="use this peak (TFLOP/s) for the MFU of every mode")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--in-process", action="store_true",
                    help="run the modes in this process instead of one child process each (then cudnn/TF32 "
                         "settings, compile caches and the allocator carry over from one mode to the next)")
    ap.add_argument("--child-json", help=argparse.SUPPRESS)  # internal: run one mode, write its result here
    a = ap.parse_args(argv)
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        ap.error("unknown mode(s) %s; choose from %s" % (",".join(bad), ",".join(MODES)))
    if a.batch < 1 or a.steps < 1 or a.warmup < 0 or a.size < 32:
        ap.error("need --batch >= 1, --steps >= 1, --warmup >= 0, --size >= 32")
    a.mode_list = modes
    return a


def one_line(e):
    return "%s: %s" % (type(e).__name__, " ".join(str(e).split())[:300])


def run_child(mode, a):
    """Runs one mode in a fresh process (this script with --child-json) and returns its result."""
    import subprocess
    import tempfile
    fd, out = tempfile.mkstemp(prefix="gpu_train_torch.", suffix=".json")
    os.close(fd)
    err = out[:-5] + ".stderr"
    cmd = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:] + ["--modes", mode, "--child-json", out]
    limit = a.compile_timeout + 300 if mode.startswith("compile") else 900
    try:
        with open(err, "w") as ef:
            proc = subprocess.Popen(cmd, stdout=ef, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the child and its compile workers
                proc.wait()
                return {"mode": mode, "status": "skipped: killed after %d s (compile did not stop)" % limit}
        try:
            with open(out) as f:
                r = json.load(f)
        except (OSError, ValueError):
            r = None
        if r is None:
            with open(err, errors="replace") as f:
                tail = [l.rstrip() for l in f.read().splitlines() if l.strip()][-15:]
            for l in tail:
                print("#   %s child: %s" % (mode, l))
            r = {"mode": mode, "status": "failed: child exited with %d: %s" % (rc, tail[-1] if tail else "no output")}
        return r
    finally:
        for f in (out, err):
            try:
                os.remove(f)
            except OSError:
                pass


def main():
    a = parse_args()
    dev = torch.device(a.device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", 0)  # set_device and the memory queries want an index
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_train_torch: CUDA is not available here; use --device cpu for a smoke test")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    name = device_name(dev)
    peaks = card_peaks(name) if dev.type == "cuda" else None
    crops = 2 * a.batch
    macs = RN50_MACS_224 * (a.size / 224.0) ** 2 + HEAD_MACS
    flop_per_step = 3 * 2 * crops * macs

    if a.child_json:  # one mode, result to a file for the parent
        try:
            r = run_mode(a.mode_list[0], a, dev, flop_per_step, peaks)
        except Exception as e:
            r = {"mode": a.mode_list[0], "status": "failed: " + one_line(e)}
        with open(a.child_json, "w") as f:
            json.dump(r, f)
        return 0

    cudnn_v = torch.backends.cudnn.version() if dev.type == "cuda" else None
    print("# device: %s | torch %s | torchvision %s | cudnn %s" % (name, torch.__version__, torchvision.__version__, cudnn_v))
    print("# SimCLR step: ResNet-50 + mlp 2048-2048(ReLU)-128, info-NCE T=%g, LARC-SGD lr %g mom 0.9 wd %g; "
          "%d images x 2 views = %d crops of %d px per step; %d warm-up + %d timed steps per mode, %s"
          % (a.temperature, a.lr, a.weight_decay, a.batch, crops, a.size, a.warmup, a.steps,
             "all in this process" if a.in_process else "each mode in its own process"))
    print("# FLOP/step = 3 (fwd+bwd) x 2 (FLOP/MAC) x %d crops x (4.09e9 x (%d/224)^2 + %d head) MAC = %.3f TFLOP"
          % (crops, a.size, HEAD_MACS, flop_per_step / 1e12))
    if peaks:
        print("# peaks (TFLOP/s, dense): bf16 %.1f, tf32 %.1f, fp32 %.1f%s"
              % (peaks["bf16"], peaks["tf32"], peaks["fp32"], " (overridden: %g)" % a.peak_tflops if a.peak_tflops else ""))
    elif a.peak_tflops:
        print("# peak (TFLOP/s): %g (--peak-tflops)" % a.peak_tflops)
    else:
        print("# peaks: unknown for this device; MFU not reported (use --peak-tflops)")
    if dev.type == "cuda":
        print("# eager32: TF32 %s, cudnn.benchmark off; eager_bf16/compile_bf16: autocast bf16, cudnn.benchmark on; "
              "all channels_last" % a.tf32)
    sys.stdout.flush()

    results = {}
    for mode in a.mode_list:
        t = time.perf_counter()
        if a.in_process:
            try:
                r = run_mode(mode, a, dev, flop_per_step, peaks)
            except Exception as e:  # report it, go on with the next mode
                r = {"mode": mode, "status": "failed: " + one_line(e)}
            gc.collect()
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            if mode.startswith("compile") and hasattr(torch, "_dynamo"):
                torch._dynamo.reset()
        else:
            r = run_child(mode, a)
        r["mode_wall_s"] = time.perf_counter() - t
        results[mode] = r
        if r["status"] != "ok":
            label = "compile" if mode.startswith("compile") else mode
            print("%s: %s" % (label, r["status"]))
        else:
            mfu = ("MFU %5.1f%% of %.1f TFLOP/s (%s)" % (100 * r["mfu"], r["peak_tflops"], r["precision"])
                   if r["mfu"] is not None else "MFU n/a (%s)" % r["precision"])
            mem = "%.0f MB" % r["peak_mem_mb"] if r["peak_mem_mb"] is not None else "n/a"
            print("%-12s %8.1f images/s (%8.1f crops/s)  %8.2f ms/step (median %.2f, min %.2f, max %.2f)  "
                  "peak mem %s (%s)  %.1f TFLOP/s  %s  loss %.4f  warm-up %.1f s"
                  % (mode, r["images_per_s"], r["crops_per_s"], r["ms_per_step"], r["ms_per_step_median"],
                     r["ms_per_step_min"], r["ms_per_step_max"], mem, r["peak_mem_kind"], r["tflops"], mfu,
                     r["loss"], r["warmup_s"]))
            if r.get("compile_s") is not None:
                print("#   %s: first step (compilation) %.1f s" % (mode, r["compile_s"]))
            for n in r["notes"]:
                print("#   %s: %s" % (mode, n))
            if not r["loss_finite"]:
                print("#   %s: WARNING: the loss is not finite" % mode)
        sys.stdout.flush()

    if a.json:
        doc = {
            "device": name,
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "cudnn": cudnn_v,
            "config": {"batch_images": a.batch, "crops_per_step": crops, "size": a.size, "steps": a.steps,
                       "warmup": a.warmup, "lr": a.lr, "weight_decay": a.weight_decay,
                       "temperature": a.temperature, "tf32_eager32": a.tf32, "compile_mode": a.compile_mode,
                       "isolated_processes": not a.in_process},
            "flop_per_step": flop_per_step,
            "flop_formula": "3 * 2 * crops * (4.09e9 * (size/224)^2 + 2048*2048 + 2048*128)",
            "peaks_tflops": peaks,
            "modes": results,
        }
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
        print("# wrote %s" % a.json)
    # non-zero only when an eager mode failed (a compile failure is a reported result)
    return 0 if all(r["status"] == "ok" or r["mode"].startswith("compile") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
