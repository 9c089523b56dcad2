#!/usr/bin/python3
"""knn_bench.py — the torch side of bench/knn.sh: VISSL's kNN benchmark on the CPU.

  knn_bench.py gen --dir D --train N --test M --dim W --classes C [--seed S]
      writes D/{train,test}_{features,targets}.npy: Gaussian clusters, one per class, float32
      features and int64 N×1 targets (the same files both sides read)
  knn_bench.py run --dir D [--sigma 0.1] [--topk 200] [--l2-norm] [--threads T[,T...]]
      runs tools/nearest_neighbor_test.py's computation (VISSL 0.1.5, restated in tests/golden/make_knn_fixtures.py; on the
      CPU instead of CUDA) on those files once per thread count (default: every core, then 1,
      because on a loaded machine torch's every-core run can be the slower one), writes the
      first five predictions of every test row to D/torch_predictions.npy and prints
      "knn_bench SECONDS TOP1 TOP5 THREADS" for the fastest run (seconds: the kNN from arrays
      in memory to top-1/top-5)
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

# VISSL's nearest_neighbor_test restated once, in the fixture generator the tests read (its
# three guards change nothing at the bench's sizes: 100+ test rows, k < N, 5+ classes).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
from make_knn_fixtures import vissl_knn  # noqa: E402


def generate(args):
    rng = np.random.default_rng(args.seed)
    centers = rng.standard_normal((args.classes, args.dim)).astype(np.float32)
    for split, n in (("train", args.train), ("test", args.test)):
        labels = rng.integers(0, args.classes, size=n)
        # Noise grows with the width so that every size is about as hard (top-1 ~ 70 %).
        noise = 3.0 * (args.dim / 128) ** 0.25
        x = centers[labels] + noise * rng.standard_normal((n, args.dim), dtype=np.float32)
        np.save(os.path.join(args.dir, f"{split}_features.npy"), x.astype(np.float32))
        np.save(os.path.join(args.dir, f"{split}_targets.npy"), labels.astype(np.int64).reshape(n, 1))


def run(args):
    load = lambda name: np.load(os.path.join(args.dir, name))
    train_f, train_l = load("train_features.npy"), load("train_targets.npy")
    test_f, test_l = load("test_features.npy"), load("test_targets.npy")
    counts = [int(t) for t in args.threads.split(",")] if args.threads else sorted({os.cpu_count(), 1}, reverse=True)
    best = None
    for threads in counts:
        torch.set_num_threads(threads)
        start = time.perf_counter()
        top1, top5, pred = vissl_knn(train_f, train_l, test_f, test_l, args.sigma, args.topk, args.l2_norm, check_ties=False)
        seconds = time.perf_counter() - start
        print(f"# torch on {threads} threads: {seconds:.4f} s", flush=True)
        if best is None or seconds < best[0]:
            best = (seconds, top1, top5, threads)
    np.save(os.path.join(args.dir, "torch_predictions.npy"), pred.astype(np.int64))
    print("knn_bench %.4f %r %r %d" % best)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("--dir", required=True)
    g.add_argument("--train", type=int, required=True)
    g.add_argument("--test", type=int, required=True)
    g.add_argument("--dim", type=int, required=True)
    g.add_argument("--classes", type=int, default=100)
    g.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("run")
    r.add_argument("--dir", required=True)
    r.add_argument("--sigma", type=float, default=0.1)
    r.add_argument("--topk", type=int, default=200)
    r.add_argument("--l2-norm", action="store_true")
    r.add_argument("--threads", default="")
    args = p.parse_args()
    generate(args) if args.cmd == "gen" else run(args)


if __name__ == "__main__":
    main()
