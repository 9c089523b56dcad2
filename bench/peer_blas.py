#!/usr/bin/python3
"""peer_blas.py — which BLAS the Python (reference) side of a benchmark runs on.

  peer_blas.py MODULE...     imports the modules (numpy, torch, sklearn, faiss, ...) the way a
                             benchmark does, then prints one line, e.g.
      BLAS (numpy torch): OpenBLAS 0.3.21 (.../openblas-pthread/libblas.so.3), 2 threads;
      LAPACK: OpenBLAS (...)
  (and "libblas.so.3 alternative: PATH" when that is not the library loaded)

How it knows: after the imports, every shared object mapped into this process
(/proc/self/maps) whose name looks like a BLAS or LAPACK (libblas, libopenblas, liblapack,
libmkl, libblis, libatlas) is resolved to its real path and named by that path (Debian's
reference BLAS lives in .../blas/, OpenBLAS in .../openblas-*/). threadpoolctl, when
installed, adds the version and thread count it can see. Debian's libblas.so.3 is a
system-wide alternative, so a benchmark process that imports the same modules loads the same
library. Importable: describe(modules) returns the line, set_blas_threads(n) caps OpenBLAS.
"""
import ctypes
import importlib
import os
import re
import sys

ALTERNATIVE = "/etc/alternatives/libblas.so.3-x86_64-linux-gnu"
_BLASLIKE = re.compile(r"lib(open)?blas|liblapack|libmkl|libblis|libatlas|libflexiblas")


def mapped_libraries():
    """Real paths of the BLAS/LAPACK-like shared objects mapped into this process, in map order."""
    seen = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split(None, 5)[-1].strip() if line.count(" ") >= 5 else ""
            if path.startswith("/") and _BLASLIKE.search(os.path.basename(path)):
                real = os.path.realpath(path)
                if real not in seen:
                    seen.append(real)
    return seen


def kind_of(path):
    """A library's name from its path: Debian keeps each implementation in its own folder."""
    p = path.lower()
    for needle, name in (("openblas", "OpenBLAS"), ("mkl", "MKL"), ("blis", "BLIS"), ("atlas", "ATLAS"),
                         ("flexiblas", "FlexiBLAS")):
        if needle in p:
            return name
    if "/blas/" in p or "/lapack/" in p:
        return "reference BLAS (netlib)" if "blas" in os.path.basename(p) else "reference LAPACK (netlib)"
    return "unknown"


def threadpool_details():
    """{filepath: 'VERSION THREADING (ARCH), N threads'} for the BLAS libraries threadpoolctl
    recognises (on Linux only those named libopenblas*, libmkl_rt*, libblis*)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return {}
    out = {}
    for lib in threadpool_info():
        if lib.get("user_api") == "blas":
            what = " ".join(str(lib[k]) for k in ("version", "threading_layer") if lib.get(k))
            arch = f" ({lib['architecture']})" if lib.get("architecture") else ""
            out[os.path.realpath(lib["filepath"])] = f"{what}{arch}, {lib['num_threads']} threads"
    return out


def openblas_threads(path):
    """OpenBLAS's own thread count, asked through the library itself (no threadpoolctl needed)."""
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        return int(lib.openblas_get_num_threads())
    except (OSError, AttributeError):
        return None


def set_blas_threads(n):
    """Cap every loaded OpenBLAS at n threads (torch.set_num_threads and OpenMP do not reach it)."""
    for path in mapped_libraries():
        try:
            ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL).openblas_set_num_threads(int(n))
        except (OSError, AttributeError):
            pass


def describe_kind(kind, paths, details):
    """'KIND DETAILS (path + path)' for the loaded libraries of one implementation (Debian's
    OpenBLAS libblas.so.3 is a shim over libopenblas.so.0: both are mapped)."""
    extra = next((details[p] for p in paths if p in details), None)
    if extra is None and kind == "OpenBLAS":
        threads = next((t for t in map(openblas_threads, paths) if t), None)
        extra = f"{threads} threads" if threads else None
    return f"{kind}{' ' + extra if extra else ''} ({' + '.join(paths)})"


def describe(modules):
    for m in modules:
        importlib.import_module(m)
    libs = mapped_libraries()
    details = threadpool_details()
    line = f"BLAS ({' '.join(modules)}): "
    groups = {}
    for p in libs:
        if "lapack" not in os.path.basename(p):
            groups.setdefault(kind_of(p), []).append(p)
    line += "; ".join(describe_kind(k, ps, details) for k, ps in groups.items()) if groups else "none loaded"
    lapack = [p for p in libs if "lapack" in os.path.basename(p)]
    if lapack:
        line += "; LAPACK: " + "; ".join(f"{kind_of(p)} ({p})" for p in lapack)
    if os.path.exists(ALTERNATIVE) and os.path.realpath(ALTERNATIVE) not in libs:
        line += f"; libblas.so.3 alternative: {os.path.realpath(ALTERNATIVE)}"
    return line


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 else 2)
    print(describe(sys.argv[1:]))


if __name__ == "__main__":
    main()
