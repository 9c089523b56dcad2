"""golden.py — what every fixture generator in tests/golden/ shares.

A generator writes its fixtures under out_dir(SUB): tests/golden/fixtures/SUB normally, or
$SELFSUP_GOLDEN_OUT/SUB when tests/golden/check.py (`make golden`) regenerates everything into a
scratch folder to compare with what is committed. Arrays go through save_array / save_f32 (one
way to turn a tensor, list or array into an .npy file), zip entries get a fixed time (a fixture's
bytes must not depend on the day it was made), and a choice a generator makes by searching (the
input phase whose fp32 rounding is farthest from a ReLU's kink, say) is kept_choice: the committed
one is reused, because the search itself lands on roundoff and another machine may pick another,
equally valid, phase. SELFSUP_GOLDEN_REPICK=1 searches again.
"""
import importlib
import os
import platform

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
COMMITTED = os.path.join(HERE, "fixtures")
OUT_ROOT = os.environ.get("SELFSUP_GOLDEN_OUT") or COMMITTED

# zipfile's date_time for every entry a generator writes itself (the earliest zip can hold).
ZIP_TIME = (1980, 1, 1, 0, 0, 0)

# The tools whose versions a fixture depends on, as MANIFEST records them.
TOOLS = ("numpy", "torch", "torchvision", "PIL", "sklearn", "cv2", "scipy")


def out_dir(sub):
    """The folder a generator writes SUB's fixtures into (created)."""
    d = os.path.join(OUT_ROOT, sub)
    os.makedirs(d, exist_ok=True)
    return d


def as_array(x, dtype=None):
    """A tensor (detached, on the cpu), list or array as a C-ordered numpy array (a 0-d one
    stays 0-d, which np.ascontiguousarray would make 1-d)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype, order="C")


def save_array(path, x, dtype=None):
    """x as an .npy file at path (no pickles: the C side reads plain arrays only)."""
    np.save(path, as_array(x, dtype), allow_pickle=False)


def save_f32(path, x):
    """x as a float32 .npy file: what the engine's fixtures hold."""
    save_array(path, x, np.float32)


def zip_entry(name):
    """A zipfile.ZipInfo for an entry a generator writes, stamped with ZIP_TIME."""
    import zipfile
    return zipfile.ZipInfo(name, date_time=ZIP_TIME)


def kept_choice(sub, name, choose):
    """The committed choice in fixtures/SUB/NAME (a one-element .npy) unless
    SELFSUP_GOLDEN_REPICK is set or there is none yet; else choose()."""
    path = os.path.join(COMMITTED, sub, name)
    if os.environ.get("SELFSUP_GOLDEN_REPICK") or not os.path.exists(path):
        return choose()
    kept = int(np.load(path)[0])
    print(f"{sub}/{name}: keeping the committed choice {kept}")
    return kept


def loaded_blas():
    """The BLAS this process loaded (numpy's and torch's libblas.so.3): 'reference' (Debian's
    libblas3) or the folder Debian keeps another in ('openblas-pthread')."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "libblas.so" in line}
    kinds = {os.path.basename(os.path.dirname(os.path.realpath(p))) for p in paths}
    return ",".join(sorted("reference" if k == "blas" else k for k in kinds)) or "none"


def tool_versions():
    """'python X numpy Y ... blas B': the versions of the tools that are installed here."""
    out = ["python " + platform.python_version()]
    for mod in TOOLS:
        try:
            out.append(f"{mod} {importlib.import_module(mod).__version__}")
        except ImportError:
            out.append(f"{mod} missing")
    return " ".join(out + ["blas " + loaded_blas()])
