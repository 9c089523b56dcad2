#!/usr/bin/python3
"""knn_bench.py — the reference side of bench/knn.sh: VISSL's kNN benchmark on the CPU, in torch
and with FAISS.

  knn_bench.py gen --dir D --train N --test M --dim W --classes C [--seed S]
      writes D/{train,test}_{features,targets}.npy: Gaussian clusters, one per class, float32
      features and int64 N×1 targets (the same files both sides read)
  knn_bench.py run --dir D [--sigma 0.1] [--topk 200] [--l2-norm] [--threads T[,T...]]
                   [--peers torch,faiss]
      torch: tools/nearest_neighbor_test.py's computation (VISSL 0.1.5, restated in
      tests/golden/make_knn_fixtures.py; on the CPU instead of CUDA): torch.mm of the test
      chunks against all train features, topk, VISSL's one-hot weighted vote.
      faiss: the same benchmark the way a FAISS user writes it: the features L2-normalised as
      VISSL does, faiss.IndexFlatIP (exact inner-product search: BLAS sgemm plus FAISS's
      top-k heaps, OpenMP threads), top-k, then VISSL's vote (weights exp(similarity / sigma)
      summed per class, classes ranked by that sum) with numpy's bincount.
      Each peer runs once per thread count (default: every core, then 1, because on a loaded
      machine the every-core run can be the slower one; OpenBLAS is capped to the same count),
      writes the first five predictions of every test row to D/{torch,faiss}_predictions.npy
      and prints "knn_bench SECONDS TOP1 TOP5 THREADS" (torch) and "faiss_bench SECONDS TOP1
      TOP5 THREADS" for its fastest run (seconds: the kNN from arrays in memory to top-1/top-5),
      "# faiss: not installed ..." when faiss cannot be imported, and a "# blas ..." line
      (bench/peer_blas.py: the BLAS this process loaded).
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_blas  # noqa: E402


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


def load_split(d):
    load = lambda name: np.load(os.path.join(d, name))  # noqa: E731
    return (load("train_features.npy"), load("train_targets.npy"),
            load("test_features.npy"), load("test_targets.npy"))


def faiss_knn(train_f, train_l, test_f, test_l, sigma, topk, l2_norm):
    """The kNN benchmark with FAISS: exact top-k by inner product, VISSL's weighted vote.
    Returns (top1, top5, predictions) like vissl_knn."""
    import faiss

    if l2_norm:  # VISSL's nn.functional.normalize(p=2): x / max(||x||, 1e-12)
        train_f = train_f / np.maximum(np.linalg.norm(train_f, axis=1, keepdims=True), 1e-12)
        test_f = test_f / np.maximum(np.linalg.norm(test_f, axis=1, keepdims=True), 1e-12)
    index = faiss.IndexFlatIP(train_f.shape[1])
    index.add(np.ascontiguousarray(train_f, dtype=np.float32))
    k = min(topk, train_f.shape[0])
    sims, idx = index.search(np.ascontiguousarray(test_f, dtype=np.float32), k)
    return weighted_vote(sims, idx, train_l.reshape(-1), test_l.reshape(-1), sigma)


def weighted_vote(sims, idx, train_l, test_l, sigma):
    """VISSL's vote: each neighbour adds exp(similarity / sigma) (float32, as torch computes it)
    to its class; bincount sums in double where torch sums in float32; classes ranked by the
    sums (ties: the lower class first); top-1 / top-5 in percent."""
    n, k = idx.shape
    classes = int(train_l.max()) + 1
    weights = np.exp(sims / np.float32(sigma), dtype=np.float32)
    cells = (np.arange(n)[:, None] * classes + train_l[idx]).ravel()
    probs = np.bincount(cells, weights=weights.ravel(), minlength=n * classes).reshape(n, classes)
    npred = min(5, classes)
    pred = np.argsort(-probs, axis=1, kind="stable")[:, :npred]
    correct = pred == test_l[:, None]
    return 100.0 * correct[:, 0].sum() / n, 100.0 * correct.sum() / n, pred


def time_peer(name, knn, data, args, counts):
    """Runs knn once per thread count; returns (seconds, top1, top5, threads) of the fastest run
    and its predictions."""
    best, best_pred = None, None
    for threads in counts:
        torch.set_num_threads(threads)
        peer_blas.set_blas_threads(threads)
        if name == "faiss":
            import faiss

            faiss.omp_set_num_threads(threads)
        start = time.perf_counter()
        top1, top5, pred = knn(*data, args.sigma, args.topk, args.l2_norm)
        seconds = time.perf_counter() - start
        print(f"# {name} on {threads} threads: {seconds:.4f} s", flush=True)
        if best is None or seconds < best[0]:
            best, best_pred = (seconds, float(top1), float(top5), threads), pred
    return best, best_pred


def faiss_missing():
    """None when faiss imports, else why not."""
    try:
        import faiss  # noqa: F401
    except ImportError as e:
        return str(e)
    return None


def run(args):
    data = load_split(args.dir)
    counts = [int(t) for t in args.threads.split(",")] if args.threads else sorted({os.cpu_count(), 1}, reverse=True)
    peers = {
        "torch": ("knn_bench", lambda *a: vissl_knn(*a, check_ties=False)),
        "faiss": ("faiss_bench", faiss_knn),
    }
    names = args.peers.split(",")
    if "faiss" in names and faiss_missing():
        print(f"# faiss: not installed ({faiss_missing()}); install python3-faiss", flush=True)
        names.remove("faiss")
    # The library every run below calls; each run caps its threads to its own count.
    print("# " + peer_blas.describe(["numpy", "torch"] + (["faiss"] if "faiss" in names else [])), flush=True)
    for name in names:
        tag, knn = peers[name]
        best, pred = time_peer(name, knn, data, args, counts)
        np.save(os.path.join(args.dir, f"{name}_predictions.npy"), pred.astype(np.int64))
        print("%s %.4f %r %r %d" % ((tag,) + best), flush=True)


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
    r.add_argument("--peers", default="torch,faiss")
    args = p.parse_args()
    generate(args) if args.cmd == "gen" else run(args)


if __name__ == "__main__":
    main()
