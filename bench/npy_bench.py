#!/usr/bin/python3
"""npy_bench.py -- the numpy side of bench/npy_bench.c: the same files, the same work.

For each size (ROWSxCOLS[:DTYPE] or ROWS[:DTYPE]) it times, with CLOCK_MONOTONIC, one
discarded warm-up and then --reps repetitions (median reported) of:

  write_stream  np.save(path, arr): plain np.save, no fsync
  write         np.save into a temp file object + flush + os.fsync + os.replace + fsync of the
                directory: the same durability as selfsup's npy_write (atomic_file)
  read          np.load(path) + arr.sum(dtype=np.float64) + del
  mmap          np.load(path, mmap_mode='r') + arr.sum(dtype=np.float64) + del

numpy's sum with dtype=float64 casts float32 to float64 in buffered blocks and adds them with
its pairwise summation (8-way unrolled); selfsup adds with 8 double accumulators. The data are
(i % 4096) [/ 4096 for floats], so both sums are exact and must be equal; this is checked.
Files are in the page cache when read back; caches are not dropped on either side.

Output, one line per measurement:  numpy_bench <op> <rows>x<cols> <dtype> <seconds> <GB/s>
and lines starting with '#' for notes, the individual times and the checksums.
Exit status: 0 success, 1 I/O or checksum failure, 2 usage error.
"""
import argparse
import os
import re
import shutil
import sys
import tempfile
import time

import numpy as np

DEFAULT_SIZES = ["10000x2048:f4", "50000x2048:f4", "1000000x1:i8"]
DTYPES = {"f4": np.float32, "f8": np.float64, "i4": np.int32, "i8": np.int64}
PATTERN = 4096
MAX_REPS = 100


def parse_size(arg):
    m = re.fullmatch(r"(\d+)(?:x(\d+))?(?::(f4|f8|i4|i8))?", arg)
    if not m:
        raise argparse.ArgumentTypeError(
            f"bad size '{arg}': expected ROWSxCOLS[:DTYPE] or ROWS[:DTYPE] with DTYPE one of "
            "f4 f8 i4 i8, e.g. 50000x2048:f4")
    rows, cols, dt = m.group(1), m.group(2), m.group(3) or "f4"
    shape = (int(rows), int(cols)) if cols is not None else (int(rows),)
    label = f"{rows}x{cols}" if cols is not None else rows
    return label, shape, dt


def make_data(shape, dt):
    dtype = DTYPES[dt]
    base = np.arange(PATTERN, dtype=dtype)
    if dt.startswith("f"):
        base /= PATTERN
    n = int(np.prod(shape, dtype=np.int64))
    return np.resize(base, n).reshape(shape)


def now():
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def fsync_dir(path):
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def op_write(path, arr):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        np.save(f, arr)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path)
    return None


def op_write_stream(path, arr):
    np.save(path, arr)
    return None


def op_read(path, _arr):
    a = np.load(path)
    s = float(a.sum(dtype=np.float64))
    del a
    return s


def op_mmap(path, _arr):
    a = np.load(path, mmap_mode="r")
    s = float(a.sum(dtype=np.float64))
    del a
    return s


def measure(name, op, path, arr, label, dt, reps, expect):
    times = []
    for _ in range(reps + 1):
        t0 = now()
        s = op(path, arr)
        times.append(now() - t0)
        if s is not None and s != expect:
            print(f"numpy_bench: {name} {path}: checksum {s!r}, expected {expect!r}",
                  file=sys.stderr)
            sys.exit(1)
    print(f"# times {name} {label} {dt}: (warm-up {times[0]:.6f}) "
          + " ".join(f"{t:.6f}" for t in times[1:]))
    m = sorted(times[1:])
    med = m[reps // 2] if reps % 2 else 0.5 * (m[reps // 2 - 1] + m[reps // 2])
    print(f"numpy_bench {name} {label} {dt} {med:.6f} {arr.nbytes / 1e9 / med:.3f}",
          flush=True)


def bench_one(label, shape, dt, directory, reps, keep):
    arr = make_data(shape, dt)
    expect = float(arr.sum(dtype=np.float64))
    path = os.path.join(directory, f"numpy_{label}_{dt}.npy")
    print(f"# sum {label} {dt} {expect:.17g}")
    measure("write_stream", op_write_stream, path, arr, label, dt, reps, expect)
    os.sync()  # untimed: no background writeback during what follows (selfsup does the same)
    measure("write", op_write, path, arr, label, dt, reps, expect)
    os.sync()
    measure("read", op_read, path, arr, label, dt, reps, expect)
    measure("mmap", op_mmap, path, arr, label, dt, reps, expect)
    if not keep:
        os.unlink(path)


def main():
    ap = argparse.ArgumentParser(
        prog="npy_bench.py",
        description="Time numpy's np.save / np.load / np.load(mmap_mode='r') on the sizes "
                    "bench/npy_bench.c uses; bench/run.sh compares the two.",
        epilog="Default sizes: " + " ".join(DEFAULT_SIZES) + ". Files are read back from the "
               "page cache; caches are not dropped.")
    ap.add_argument("sizes", nargs="*", type=parse_size, metavar="SIZE",
                    help="ROWSxCOLS[:DTYPE] or ROWS[:DTYPE], DTYPE one of f4 f8 i4 i8")
    ap.add_argument("--dir", help="write the files in DIR (default: a new temp dir, removed "
                                  "at the end); use the same DIR as the selfsup side")
    ap.add_argument("--reps", type=int, default=5,
                    help="measured repetitions after the warm-up (default 5)")
    ap.add_argument("--keep", action="store_true",
                    help="leave the files (numpy_<size>_<dtype>.npy) in DIR")
    ap.add_argument("--version", action="version", version=f"npy_bench.py numpy {np.__version__}")
    args = ap.parse_args()
    if not 1 <= args.reps <= MAX_REPS:
        ap.error(f"--reps must be in 1..{MAX_REPS}")
    sizes = args.sizes or [parse_size(s) for s in DEFAULT_SIZES]
    own = None
    directory = args.dir
    if directory is None:
        own = directory = tempfile.mkdtemp(prefix="npy_bench.")
    elif not os.path.isdir(directory):
        ap.error(f"--dir {directory} is not a directory; create it first")
    print(f"# numpy_bench numpy {np.__version__}: dir {directory}, 1 warm-up + {args.reps} "
          "reps, median; CLOCK_MONOTONIC")
    try:
        for label, shape, dt in sizes:
            bench_one(label, shape, dt, directory, args.reps, args.keep)
    except OSError as e:
        print(f"numpy_bench: {e}", file=sys.stderr)
        return 1
    finally:
        if own and not args.keep:
            shutil.rmtree(own, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
