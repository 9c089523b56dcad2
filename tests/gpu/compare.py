#!/usr/bin/env python3
"""tests/gpu/compare.py — the runbook's judge: two runs' losses or checkpoints, side by side.

  compare.py losses LOG_A LOG_B --rtol R [--iters I,J] [--noise LOG_C [--factor F]]
      two trainers' losses per step (stdout.json or log lines), or at the steps listed
  compare.py weights CKPT_A CKPT_B --rtol R [--opt-rtol R2] [--noise CKPT_C [--factor F]]
      every tensor of two checkpoints (safetensors files): the model's against R, the
      optimizer state's against R2
  compare.py same CKPT_A CKPT_B
      every tensor bitwise equal
  compare.py features DIR_A DIR_B --rtol R
      selfsup-extract's outputs: every *_features.npy against R, *_targets/_inds.npy equal

A checkpoint is a safetensors file (stages/train/checkpoint.h); every tensor in it is compared
by its name, and a tensor's error is max|a − b| / max(max|b|, 1e-6): relative to the tensor's
scale, so weights near zero do not blow the ratio up.

--noise names a third run of B's kind that differs from B only by fp32 rounding (the cpu with
another instruction set: other summation orders). Training amplifies rounding (a ReLU input
within noise of zero flips either way), so how far apart two correct fp32 engines end up is
measured, not assumed: the tolerance becomes the larger of R and F (default 10) times C's
error against B. Prints a line per comparison; exits 1 when over the tolerance, 2 when the
inputs differ in their keys or steps.
"""
import json
import re
import sys

import numpy as np

DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1", "I8": "i1", "BOOL": "?"}


def load(path):
    """{name: float64 array} of a safetensors file."""
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        buf = raw[8 + n + a : 8 + n + b]
        if t["dtype"] == "BF16":
            arr = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(buf, DTYPES[t["dtype"]])
        out[name] = arr.astype(np.float64)
    return out


def losses(path):
    """{iteration: loss} from a trainer's stdout.json (full precision) or its log lines."""
    found = {}
    for line in open(path, errors="replace"):
        if line.startswith("{"):
            d = json.loads(line)
            found[int(d["iter"])] = float(d["loss"])
            continue
        m = re.search(r"iter: (\d+);.*?loss: ([-+0-9.eEnaif]+);", line)
        if m:
            found[int(m.group(1))] = float(m.group(2))
    return found


def worst(pairs):
    """(name, error) of the largest relative error over (name, a, b) triples."""
    best = ("", 0.0)
    for name, a, b in pairs:
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        scale = max(float(np.abs(b).max()) if b.size else 0.0, 1e-6)
        diff = float(np.abs(a - b).max()) if a.size else 0.0
        err = diff / scale if diff == diff else float("inf")
        if err > best[1] or not best[0]:
            best = (name, err)
    return best


def option(argv, name, default=None):
    return argv[argv.index(name) + 1] if name in argv else default


def tolerance(rtol, argv, noise_err):
    """rtol, or --factor times the noise run's own error where that is larger."""
    factor = float(option(argv, "--factor", "10"))
    return max(rtol, factor * noise_err) if noise_err is not None else rtol


def verdict(what, err, where, tol, noise):
    extra = f"; the noise run's {noise:.3g}" if noise is not None else ""
    print(f"{what}: max rel {err:.3g} in {where} (tolerance {tol:.3g}{extra})")
    return err <= tol


def compare_losses(a_path, b_path, rtol, argv):
    runs = [losses(a_path), losses(b_path)] + ([losses(option(argv, "--noise"))] if "--noise" in argv else [])
    if "--iters" in argv:  # only these steps (e.g. the first one after a resume)
        keep = {int(k) for k in option(argv, "--iters").split(",")}
        runs = [{k: v for k, v in r.items() if k in keep} for r in runs]
    a, b = runs[0], runs[1]
    if not a or any(r.keys() != a.keys() for r in runs):
        print(f"losses: the logs have different steps: {[sorted(r) for r in runs]}")
        return 2
    name, err = worst((f"iter {k}", a[k], b[k]) for k in sorted(a))
    noise = worst((f"iter {k}", runs[2][k], b[k]) for k in sorted(a))[1] if len(runs) > 2 else None
    print("losses a/b: " + ", ".join(f"{a[k]:.7g}/{b[k]:.7g}" for k in sorted(a)))
    return 0 if verdict(f"losses over {len(a)} steps", err, name, tolerance(rtol, argv, noise), noise) else 1


def compare_weights(a, b, rtol, argv):
    """The model's tensors and the optimizer state's, each group against its tolerance."""
    c = load(option(argv, "--noise")) if "--noise" in argv else None
    ok = True
    for group, tol in (("model", rtol), ("optimizer", float(option(argv, "--opt-rtol", rtol)))):
        keys = [k for k in a if k.startswith("optimizer.") == (group == "optimizer")]
        if not keys:
            continue
        name, err = worst((k, a[k], b[k]) for k in keys)
        noise = worst((k, c[k], b[k]) for k in keys)[1] if c is not None else None
        ok = verdict(f"{group} ({len(keys)} tensors)", err, name, tolerance(tol, argv, noise), noise) and ok
    return 0 if ok else 1


def compare_features(a_dir, b_dir, rtol):
    import glob
    import os

    names = sorted(os.path.basename(f) for f in glob.glob(os.path.join(a_dir, "*.npy")))
    if not names or names != sorted(os.path.basename(f) for f in glob.glob(os.path.join(b_dir, "*.npy"))):
        print(f"features: the folders hold different files: {names}")
        return 2
    ok = True
    for name in names:
        a, b = np.load(os.path.join(a_dir, name)), np.load(os.path.join(b_dir, name))
        if a.shape != b.shape:
            print(f"{name}: shapes {a.shape} and {b.shape}")
            ok = False
        elif name.endswith("_features.npy"):
            ok = verdict(f"{name} {a.shape}", worst([(name, a, b)])[1], "it", rtol, None) and ok
        elif not np.array_equal(a, b):
            print(f"{name}: differs")
            ok = False
    return 0 if ok else 1


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    mode, a_path, b_path = argv[0], argv[1], argv[2]
    rtol = float(option(argv, "--rtol", "0"))
    if mode == "losses":
        return compare_losses(a_path, b_path, rtol, argv)
    if mode == "features":
        return compare_features(a_path, b_path, rtol)
    a, b = load(a_path), load(b_path)
    if a.keys() != b.keys():
        print(f"{mode}: the checkpoints hold different tensors: {sorted(a.keys() ^ b.keys())[:5]}")
        return 2
    if mode == "same":
        differ = [k for k in a if not (a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes())]
        first = f"; first differing: {differ[0]}" if differ else ""
        print(f"bitwise: {len(a) - len(differ)} of {len(a)} tensors equal{first}")
        return 0 if not differ else 1
    return compare_weights(a, b, rtol, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
