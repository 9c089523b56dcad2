#!/usr/bin/python3
"""make_clusterfit_fixtures.py — ClusterFit's clustering step on small features, for
tests/unit/test_cluster.c.

Run with Debian's python3 (numpy, faiss 1.7.3 from python3-faiss):
  /usr/bin/python3 tests/golden/make_clusterfit_fixtures.py
The files land in tests/golden/fixtures/clusterfit/ and are committed; CI only reads them.

vissl_cluster() restates VISSL 0.1.5's tools/cluster_features_and_label.py after its
extraction, step for step: merge_features (every rank's rows, the first of each index kept,
sorted by index), features / (np.linalg.norm(features, axis=1) + 1e-5), faiss.Kmeans(d, K,
niter=N_ITER).train, kmeans.index.search(features, 1), and the labels as int64 (N,).

Per case CASE (Gaussian blobs, split over two ranks as a distributed extraction writes them:
interleaved rows, and rank 1 repeats rank 0's first row as a sampler's padding would):
  CASE/rank{0,1}_train_res5_{features,targets,inds}.npy   the input, as selfsup-extract writes it
  CASE_params.npy          int64 [K, N_ITER]
  CASE_normalized.npy      float32 N×D: the merged features after VISSL's normalisation
  CASE_labels.npy          int64 (N,): VISSL's _lbls.npy
  CASE_centroids.npy       float32 K×D
  CASE_distances.npy       float32 N×1: squared L2 to the nearest centroid
Cases: "plain" (K·256 ≥ N: FAISS clusters every row) and "subsampled" (N > K·256: FAISS
clusters a sample drawn with its seed 1234, then assigns every row). Each case is checked to be
clear of near-ties (every row's nearest and second-nearest centroids differ by more than
float32 rounding), so a GEMM that rounds differently still gives the same labels.
"""
import os

import faiss
import numpy as np
import golden  # noqa: E402

OUT = golden.out_dir("clusterfit")
CASES = {"plain": (1200, 32, 12, 20), "subsampled": (1500, 24, 5, 10)}  # N, D, K, N_ITER


def merge_features(ranks):
    """VISSL's merge_features: a dict by index (the first occurrence wins), then sorted."""
    rows = {}
    for feats, inds in ranks:
        for f, i in zip(feats, inds):
            rows.setdefault(int(i), f)
    order = sorted(rows)
    return np.array([rows[i] for i in order], dtype=np.float32), np.array(order)


def vissl_cluster(features, k, niter):
    feat_norm = np.linalg.norm(features, axis=1) + 1e-5
    features = features / feat_norm[:, np.newaxis]
    kmeans = faiss.Kmeans(features.shape[1], k, niter=niter, verbose=False)
    kmeans.train(features)
    distances, labels = kmeans.index.search(features, 1)
    return features, np.array(labels.tolist(), dtype=np.int64).reshape(-1), kmeans.centroids, distances


def check_margin(x, centroids):
    d = ((x[:, None, :] - centroids[None, :, :]) ** 2).sum(-1)
    two = np.sort(d, axis=1)[:, :2]
    gap = (two[:, 1] - two[:, 0]).min()
    assert gap > 1e-4, f"a row is {gap} from a tie between two centroids"


def blobs(rng, n, d, k):
    centers = rng.normal(size=(k, d)) * 2
    return (centers[rng.integers(0, k, n)] + rng.normal(size=(n, d))).astype(np.float32) * 5


def write_ranks(case, x):
    d = os.path.join(OUT, case)
    os.makedirs(d, exist_ok=True)
    n = len(x)
    parts = [np.arange(0, n, 2), np.concatenate([np.arange(1, n, 2), [0]])]
    ranks = []
    for r, inds in enumerate(parts):
        feats = x[inds]
        if r == 1:
            feats = feats.copy()
            feats[-1] += 1  # the padding row differs: the first occurrence (rank 0's) must win
        golden.save_array(f"{d}/rank{r}_train_res5_features.npy", feats, np.float32)
        golden.save_array(f"{d}/rank{r}_train_res5_targets.npy", (inds % 3)[:, None], np.int64)
        golden.save_array(f"{d}/rank{r}_train_res5_inds.npy", inds, np.int64)
        ranks.append((feats, inds))
    return ranks


def main():
    rng = np.random.default_rng(2023)
    for case, (n, d, k, niter) in CASES.items():
        merged, inds = merge_features(write_ranks(case, blobs(rng, n, d, k)))
        assert (inds == np.arange(n)).all()
        normalized, labels, centroids, distances = vissl_cluster(merged, k, niter)
        check_margin(normalized, centroids)
        golden.save_array(f"{OUT}/{case}_params.npy", [k, niter], np.int64)
        golden.save_f32(f"{OUT}/{case}_normalized.npy", normalized)
        golden.save_array(f"{OUT}/{case}_labels.npy", labels, np.int64)
        golden.save_f32(f"{OUT}/{case}_centroids.npy", centroids)
        golden.save_f32(f"{OUT}/{case}_distances.npy", distances)
        print(f"clusterfit/{case}: {n} x {d} into {k} clusters, {niter} iterations, "
              f"{len(np.unique(labels))} used")


if __name__ == "__main__":
    main()
