#!/usr/bin/python3
"""check.py — `make golden`: regenerate every fixture and compare it with what is committed.

Each generator in GENERATORS runs, in that order, with SELFSUP_GOLDEN_OUT pointing at one
scratch folder (golden.py sends its files there instead of tests/golden/fixtures/). Then every
committed fixture is compared with its regenerated twin, and every one with MANIFEST (its
sha256, so a fixture edited by hand or regenerated without a note is named too).

Two files agree when their bytes are equal, or else by what they hold:
  - a float .npy: equal shape and dtype, and max |new - committed| <= ROUNDOFF * max |committed|:
    PyTorch's fp32 and float64 results move in the last bits with the CPU's vector width and
    thread count, which a fixture must not depend on (the tests allow far more);
  - a noise floor (*_floor.npy: PyTorch's own fp32 error against float64, measured on the
    machine that made the fixtures and used by the tests as part of a tolerance): finite and
    non-negative; it is a measurement of that machine's rounding, not a reference value, so the
    one measured here is printed beside the committed one (it moves by 10x and more between CPUs
    where a ReLU flips in fp32) but not held against it;
  - any other .npy: equal arrays;
  - a torch legacy-format .pt (its storage keys are memory addresses, torch.save's choice): the
    same objects from torch.load, or, for a file made to be refused, the same refusal and size.
Anything else must be byte-equal. A regenerated file that is not committed, or a committed one
no generator made, is a difference too.

Usage: tests/golden/check.py [--only NAME]... [--keep DIR] [--update-manifest] [BUILD]
  BUILD               the build folder with tests/selfsup-test-augtrace (default: build)
  --only NAME         run only generator NAME (make_NAME_fixtures.py or the file name) and
                      compare only what it made
  --keep DIR          regenerate into DIR and keep it (default: a temporary folder, removed)
  --update-manifest   after a run where nothing differs, rewrite MANIFEST from the committed
                      fixtures (run it after committing regenerated fixtures)
Exit 0 when everything agrees, 1 naming each difference, 2 on a usage error. The generators
run on Debian's reference BLAS whatever BLAS is installed (REFERENCE_BLAS below).
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import golden

# The generators, in the order they run (none reads another's output files; order is fixed so
# that the log reads the same each time). make_weights_fixtures.py is not here: the tests run it
# themselves, into their own temporary folders.
GENERATORS = (
    "make_sched_fixture.py", "make_npy_fixtures.py", "make_safetensors_fixture.py",
    "make_torchfile_fixtures.py", "make_decode_fixtures.py", "make_img_color_fixtures.py",
    "make_img_resample_fixtures.py", "make_lab_fixtures.py", "make_augment_fixtures.py",
    "make_collate_fixtures.py", "make_nn_fixtures.py", "make_nn_conv_fixtures.py",
    "make_nn_norm_fixtures.py", "make_nn_pool_fixtures.py", "make_heads_fixtures.py",
    "make_resnet_fixtures.py", "make_resnet_ln_fixtures.py", "make_regnet_fixtures.py",
    "make_efficientnet_fixtures.py", "make_alexnet_fixtures.py",
    "make_complexity_fixtures.py", "make_model_fixtures.py", "make_loss_fixtures.py", "make_optim_fixtures.py",
    "make_train_fixtures.py", "make_extract_fixtures.py", "make_knn_fixtures.py",
    "make_svm_fixtures.py", "make_svm_solver_fixtures.py", "make_ddp_fixtures.py", "make_buckets_fixtures.py",
    "make_clusterfit_fixtures.py", "make_jigsaw_fixtures.py", "make_voc_fixtures.py",
    "make_coco_fixtures.py", "make_imagenet_fixtures.py",
    "make_detectron2_fixtures.py", "make_inat_fixtures.py", "make_retrieval_fixtures.py",
    "make_classy_fixtures.py", "make_caffe2_fixtures.py",
)
# Debian's reference BLAS, which the fixtures were made with. numpy, scipy and PyTorch take
# libblas.so.3 from the alternatives system, so installing OpenBLAS (`make bench` does) would
# change their last bits, and with them the searches some generators make; check.py runs itself
# and the generators on the reference one whatever the alternatives say.
REFERENCE_BLAS = ("/usr/lib/x86_64-linux-gnu/blas", "/usr/lib/x86_64-linux-gnu/lapack")
ROUNDOFF = 1e-4
MANIFEST = os.path.join(golden.HERE, "MANIFEST")


def usage(msg):
    print(f"check.py: {msg}\n{__doc__.split('Usage:')[1].split('Exit')[0].rstrip()}", file=sys.stderr)
    sys.exit(2)


def parse(argv):
    opts = {"only": [], "keep": None, "update": False, "build": os.path.join(golden.ROOT, "build")}
    args = iter(argv)
    for a in args:
        if a in ("--only", "--keep"):
            v = next(args, None) or usage(f"{a} needs a value")
            opts["only"].append(v) if a == "--only" else opts.__setitem__("keep", v)
        elif a == "--update-manifest":
            opts["update"] = True
        elif a.startswith("-"):
            usage(f"unknown option {a}")
        else:
            opts["build"] = os.path.abspath(a)
    return opts


def pick(only):
    """The generators to run: all, or those --only names (make_NAME_fixtures.py or the file)."""
    if not only:
        return list(GENERATORS)
    forms = lambda n: {n, f"make_{n}_fixtures.py", f"make_{n}_fixture.py"}
    for n in only:
        if not forms(n) & set(GENERATORS):
            usage(f"unknown generator {n} (have: {' '.join(GENERATORS)})")
    return [g for g in GENERATORS if any(g in forms(n) for n in only)]


def files_under(root):
    """{relative path: (mtime_ns, size)} of every file under root."""
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            st = os.stat(p)
            out[os.path.relpath(p, root)] = (st.st_mtime_ns, st.st_size)
    return out


def regenerate(gens, out, build):
    """Run each generator into out; {relative path: generator} of what each one wrote."""
    made = {}
    env = dict(os.environ, SELFSUP_GOLDEN_OUT=out)
    for g in gens:
        before = files_under(out)
        start = time.monotonic()
        args = [sys.executable, os.path.join(golden.HERE, g)] + ([build] if g == "make_augment_fixtures.py" else [])
        r = subprocess.run(args, cwd=golden.ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        after = files_under(out)
        wrote = [p for p, v in after.items() if before.get(p) != v]
        print(f"  {g:34s} {time.monotonic() - start:6.1f} s  {len(wrote):4d} files", flush=True)
        if r.returncode != 0:
            print(r.stdout[-4000:], file=sys.stderr)
            raise SystemExit(f"check.py: {g} failed (exit {r.returncode})")
        made.update({p: g for p in wrote})
    return made


def compare_float(new, old, name):
    if np.array_equal(new, old, equal_nan=True):
        return None
    scale = float(np.max(np.abs(old))) if old.size else 0.0
    if name.endswith("_floor.npy"):
        got = float(np.max(new)) if new.size else 0.0
        ok = bool(np.all(np.isfinite(new)) and np.all(new >= 0))
        return (ok, f"a noise floor, measured again: largest {got:.3g} here, {scale:.3g} committed "
                    f"({got / scale if scale else float('inf'):.2g}x)")
    delta = float(np.max(np.abs(new.astype(np.float64) - old)))
    rel = delta / scale if scale > 0 else float("inf")
    return (rel <= ROUNDOFF, f"{'agrees' if rel <= ROUNDOFF else 'differs'}: max |diff| {delta:.3g} = {rel:.2g} of max |x|")


def compare_npy(new_path, old_path, name):
    new, old = np.load(new_path), np.load(old_path)
    if new.shape != old.shape or new.dtype != old.dtype:
        return (False, f"shape/dtype {new.shape} {new.dtype}, committed {old.shape} {old.dtype}")
    if new.dtype.kind in "fc":
        return compare_float(new, old, name)
    return None if np.array_equal(new, old) else (False, f"{int(np.sum(new != old))} elements differ")


def torch_load(path):
    import torch
    try:
        return ("ok", torch.load(path, map_location="cpu"))
    except Exception as e:  # a fixture made to be refused
        return ("refused", type(e).__name__)


def same_objects(a, b):
    import torch
    if torch.is_tensor(a) or torch.is_tensor(b):
        return torch.is_tensor(a) and torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same_objects(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same_objects, a, b))
    return a == b


def compare_legacy_pt(new_path, old_path):
    (how_new, new), (how_old, old) = torch_load(new_path), torch_load(old_path)
    if how_new != how_old:
        return (False, f"torch.load: {how_new}, committed {how_old}")
    if how_new == "refused":
        same = new == old and os.path.getsize(new_path) == os.path.getsize(old_path)
        return (same, f"agrees: refused by torch.load ({new}), as the committed one ({old})")
    same = same_objects(new, old)
    return (same, "agrees: torch.load reads the same objects" if same else "torch.load reads other objects")


def compare(rel, new_root):
    """None when identical, else (agrees, how)."""
    new_path, old_path = os.path.join(new_root, rel), os.path.join(golden.COMMITTED, rel)
    with open(new_path, "rb") as f, open(old_path, "rb") as g:
        if f.read() == g.read():
            return None
    if rel.endswith(".npy"):
        return compare_npy(new_path, old_path, os.path.basename(rel))
    if rel.endswith("_legacy.pt"):
        return compare_legacy_pt(new_path, old_path)
    return (False, "bytes differ")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read_manifest():
    """{relative path: (sha256, generator)} from MANIFEST ({} when there is none)."""
    if not os.path.exists(MANIFEST):
        return {}
    out = {}
    for line in open(MANIFEST):
        if line.strip() and not line.startswith("#"):
            digest, rel, gen = line.split()
            out[rel] = (digest, gen)
    return out


def write_manifest(made):
    with open(MANIFEST, "w") as f:
        f.write("# tests/golden/MANIFEST: every committed fixture (under tests/golden/fixtures/), its\n"
                "# sha256 and the generator that makes it. Written by tests/golden/check.py\n"
                "# --update-manifest after `make golden` regenerated and matched them all with:\n"
                f"# {golden.tool_versions()}\n")
        for rel in sorted(made):
            f.write(f"{sha256(os.path.join(golden.COMMITTED, rel))}  {rel}  {made[rel]}\n")
    print(f"wrote {os.path.relpath(MANIFEST, golden.ROOT)}: {len(made)} fixtures")


def check_manifest(committed, gens):
    """The committed fixtures whose sha256 is not MANIFEST's, or that it does not list."""
    manifest = read_manifest()
    bad = []
    for rel in sorted(committed):
        entry = manifest.get(rel)
        if entry is None:
            bad.append(f"{rel}: not in MANIFEST")
        elif entry[1] in gens and sha256(os.path.join(golden.COMMITTED, rel)) != entry[0]:
            bad.append(f"{rel}: sha256 is not MANIFEST's (changed without check.py --update-manifest)")
    return bad


def report(made, new_root, gens):
    """Compare what was made with what is committed; the problems, one line each."""
    every = set(files_under(golden.COMMITTED))
    committed = every if len(gens) == len(GENERATORS) else set(made) & every
    problems = [f"{rel}: made by {made[rel]} but not committed" for rel in sorted(set(made) - every)]
    problems += [f"{rel}: committed but no generator made it" for rel in sorted(committed - set(made))]
    identical = close = 0
    for rel in sorted(committed & set(made)):
        got = compare(rel, new_root)
        if got is None:
            identical += 1
        elif got[0]:
            close += 1
            print(f"  {rel}: {got[1]}")
        else:
            problems.append(f"{rel}: DIFFERS ({made[rel]}): {got[1]}")
    problems += check_manifest(committed, gens)
    print(f"{len(committed)} fixtures: {identical} identical, {close} agree within the rules above, "
          f"{len(problems)} problems")
    return problems


def pin_reference_blas():
    """Re-run this script with the reference BLAS first on LD_LIBRARY_PATH (the generators
    inherit it), unless it already is."""
    pinned = ":".join(d for d in REFERENCE_BLAS if os.path.isdir(d))
    old = os.environ.get("LD_LIBRARY_PATH", "")
    if pinned and not old.startswith(pinned):
        env = dict(os.environ, LD_LIBRARY_PATH=pinned + (":" + old if old else ""))
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env)


def main(argv):
    pin_reference_blas()
    opts = parse(argv)
    gens = pick(opts["only"])
    out = opts["keep"] or tempfile.mkdtemp(prefix="selfsup-golden.")
    os.makedirs(out, exist_ok=True)
    print(f"make golden: {len(gens)} generators into {out}\n  tools: {golden.tool_versions()}")
    try:
        made = regenerate(gens, out, opts["build"])
        problems = report(made, out, gens)
        for p in problems:
            print("  " + p)
        if opts["update"] and len(gens) < len(GENERATORS):
            usage("--update-manifest needs every generator (no --only)")
        if opts["update"] and not [p for p in problems if "MANIFEST" not in p]:
            write_manifest(made)
            problems = []
        return 1 if problems else 0
    finally:
        if not opts["keep"]:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
