#!/usr/bin/python3
"""npy_readback.py — check .npy files written by selfsup's npy_write with real numpy.

Usage: /usr/bin/python3 tests/golden/npy_readback.py DIR

DIR holds the .npy files and a manifest.txt with one line per file:
    NAME DTYPE [DIM ...]        e.g. "f4_2x3.npy f4 2 3", "scalar.npy f8" for a 0-d array
Each file must load with numpy.load(allow_pickle=False), have that dtype (little-endian) and
shape, hold the formula values of make_npy_fixtures.pattern, and be byte-identical to what
numpy.save writes for the same array. Prints one line per problem; exit status 0 when every
file passes, 1 otherwise (2 for a usage error).
"""
import io
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_npy_fixtures import pattern  # noqa: E402  (shared formula)


def check(path, dtype, shape):
    """Return a list of problems with one file."""
    with open(path, "rb") as f:
        ours = f.read()
    try:
        arr = np.load(io.BytesIO(ours), allow_pickle=False)
    except Exception as e:  # numpy raises several types for bad files
        return [f"numpy cannot load it: {e}"]
    want = pattern(dtype, shape)
    problems = []
    if arr.dtype != want.dtype:
        problems.append(f"dtype {arr.dtype.str}, expected {want.dtype.str}")
    if arr.shape != want.shape:
        problems.append(f"shape {arr.shape}, expected {want.shape}")
    if not problems and not np.array_equal(arr, want):
        problems.append("values differ from the pattern")
    ref = io.BytesIO()
    np.save(ref, want, allow_pickle=False)
    if ours != ref.getvalue():
        problems.append("bytes differ from numpy.save of the same array")
    return problems


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    d = argv[1]
    failures = 0
    count = 0
    with open(os.path.join(d, "manifest.txt")) as manifest:
        for line in manifest:
            fields = line.split()
            if not fields:
                continue
            name, dtype, dims = fields[0], fields[1], tuple(int(x) for x in fields[2:])
            count += 1
            for problem in check(os.path.join(d, name), dtype, dims):
                print(f"{name}: {problem}")
                failures += 1
    if count == 0:
        print(f"{d}: manifest lists no files")
        return 1
    print(f"npy_readback: {count} files, {failures} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
