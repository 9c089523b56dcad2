#!/usr/bin/python3
"""cluster_bench.py — the reference side of bench/cluster.sh: VISSL's ClusterFit clustering.

  gen --dir D --n N --dim D --k K   Gaussian blobs as one rank's extracted features
                                    (D/rank0_train_res5_{features,targets,inds}.npy)
  run --dir D --k K --niter I       VISSL 0.1.5's cluster_features_and_label.py after its
                                    extraction (merge, L2 norm + 1e-5, faiss.Kmeans, search),
                                    timed from the features in memory to the labels; prints
                                    "vissl SECONDS" and writes D/vissl_lbls.npy
"""
import argparse
import time

import numpy as np


def gen(a):
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(a.k, a.dim)).astype(np.float32)
    x = centers[rng.integers(0, a.k, a.n)] + rng.normal(size=(a.n, a.dim)).astype(np.float32)
    np.save(f"{a.dir}/rank0_train_res5_features.npy", x.astype(np.float32))
    np.save(f"{a.dir}/rank0_train_res5_targets.npy", np.zeros((a.n, 1), np.int64))
    np.save(f"{a.dir}/rank0_train_res5_inds.npy", np.arange(a.n, dtype=np.int64))


def run(a):
    import faiss
    features = np.load(f"{a.dir}/rank0_train_res5_features.npy")
    t0 = time.perf_counter()
    feat_norm = np.linalg.norm(features, axis=1) + 1e-5
    features = features / feat_norm[:, np.newaxis]
    kmeans = faiss.Kmeans(features.shape[1], a.k, niter=a.niter, verbose=False)
    kmeans.train(features)
    _, labels = kmeans.index.search(features, 1)
    seconds = time.perf_counter() - t0
    np.save(f"{a.dir}/vissl_lbls.npy", np.array(labels.tolist(), dtype=np.int64).reshape(-1))
    print(f"vissl {seconds:.3f} faiss {faiss.__version__}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cmd", choices=["gen", "run"])
    p.add_argument("--dir", required=True)
    p.add_argument("--n", type=int, default=0)
    p.add_argument("--dim", type=int, default=0)
    p.add_argument("--k", type=int, required=True)
    p.add_argument("--niter", type=int, default=20)
    a = p.parse_args()
    gen(a) if a.cmd == "gen" else run(a)


if __name__ == "__main__":
    main()
