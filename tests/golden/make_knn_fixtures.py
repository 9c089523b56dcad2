#!/usr/bin/python3
"""make_knn_fixtures.py — VISSL's kNN benchmark run on small features, for tests/unit/test_knn.c.

Run with Debian's python3 (numpy, torch 1.13):  /usr/bin/python3 tests/golden/make_knn_fixtures.py
The files land in tests/golden/fixtures/knn/ and are committed; CI only reads them.

vissl_knn() below restates tools/nearest_neighbor_test.py (VISSL 0.1.5) step for step, in
torch on the CPU, with three changes that keep it from raising where selfsup-knn goes on:
the test chunk is max(1, N_test // 100) (VISSL's N_test // 100 is 0 below 100 test rows),
k = min(TOPK, N_train) (topk raises past N_train), and top-5 looks at min(5, num_classes)
predictions (narrow(1, 0, 5) raises below 5 classes). None of these changes a result.

Per case CASE (features: random Gaussian clusters, one per class):
  CASE_train_features.npy  float32 N×D     CASE_train_targets.npy  int64 N×1
  CASE_test_features.npy   float32 M×D     CASE_test_targets.npy   int64 M×1
  CASE_params.npy          float64 [sigma, topk, l2_norm]
  CASE_predictions.npy     int64 M×min(5, C): torch's first classes per test row
  CASE_accuracy.npy        float64 [top1, top5] in percent, as VISSL reports them
Every case is checked to be clear of near-ties (the k-th and k+1-th similarities, and
adjacent non-zero class scores among the first six, differ by more than float32 rounding), so
a C implementation that sums in another order must still find the same predictions. Exact
ties between classes with no votes (score 0) are kept on purpose: torch's sort decides them.

sort_CASE: rows of class scores full of exact ties and torch's sort(descending=True) order:
  sort_CASE_values.npy float32 R×C, sort_CASE_order.npy int32 R×C
"""
import os

import numpy as np
import torch
from torch import nn
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("knn")


def vissl_knn(train_f, train_l, test_f, test_l, sigma, topk, l2_norm, check_ties=True):
    """VISSL's nearest_neighbor_test on arrays; returns (top1, top5, predictions).
    check_ties: raise NearTie where float32 rounding could decide (fixtures only; the bench,
    which times VISSL's computation, leaves it off)."""
    train_features = torch.from_numpy(train_f).float().t()
    train_labels = torch.LongTensor(train_l)
    num_classes = int(train_labels.max()) + 1
    if l2_norm:
        train_features = nn.functional.normalize(train_features, dim=0, p=2)
    k = min(topk, train_f.shape[0])
    npred = min(5, num_classes)
    top1, top5, total = 0.0, 0.0, 0
    n_test = test_l.shape[0]
    chunk = max(1, n_test // 100)
    all_predictions = []
    with torch.no_grad():
        retrieval_one_hot = torch.zeros(k, num_classes)
        for idx in range(0, n_test, chunk):
            features = test_f[idx : min(idx + chunk, n_test), :]
            targets = test_l[idx : min(idx + chunk, n_test), :]
            batch_size = targets.shape[0]
            features = torch.from_numpy(features).float()
            targets = torch.LongTensor(targets)
            if l2_norm:
                features = nn.functional.normalize(features, dim=1, p=2)
            similarity = torch.mm(features, train_features)
            distances, indices = similarity.topk(k, largest=True, sorted=True)
            candidates = train_labels.view(1, -1).expand(batch_size, -1)
            retrieved_neighbors = torch.gather(candidates, 1, indices)
            retrieval_one_hot.resize_(batch_size * k, num_classes).zero_()
            retrieval_one_hot.scatter_(1, retrieved_neighbors.view(-1, 1), 1)
            distances_transform = distances.clone().div_(sigma).exp_()
            probs = torch.sum(
                torch.mul(
                    retrieval_one_hot.view(batch_size, -1, num_classes),
                    distances_transform.view(batch_size, -1, 1),
                ),
                1,
            )
            _, predictions = probs.sort(1, True)
            correct = predictions.eq(targets.data.view(-1, 1))
            top1 = top1 + correct.narrow(1, 0, 1).sum().item()
            top5 = top5 + correct.narrow(1, 0, npred).sum().item()
            total += targets.size(0)
            all_predictions.append(predictions[:, :npred].numpy())
            if check_ties:
                check_margins(similarity, k, probs, npred)
    return top1 * 100.0 / total, top5 * 100.0 / total, np.concatenate(all_predictions)


class NearTie(Exception):
    pass


def check_margins(similarity, k, probs, npred):
    """Raise NearTie when float32 rounding could change the neighbours or the first classes."""
    sims = similarity.double().sort(1, True).values
    if k < sims.shape[1] and bool(((sims[:, k - 1] - sims[:, k]) < 2e-6).any()):
        raise NearTie("k-th similarity")
    p = probs.double().sort(1, True).values[:, : npred + 1]
    for j in range(p.shape[1] - 1):
        a, b = p[:, j], p[:, j + 1]
        close = (a > 0) & ((a - b) <= 1e-5 * a)
        if bool(close.any()):
            raise NearTie("class scores")


def clusters(rng, n, dim, num_classes, spread, centers):
    labels = rng.integers(0, num_classes, size=n)
    x = centers[labels] + spread * rng.standard_normal((n, dim))
    return x.astype(np.float32), labels.astype(np.int64).reshape(n, 1)


def make_case(name, seed, n_train, n_test, dim, num_classes, sigma, topk, l2_norm, scale=1.0, spread=2.5):
    for attempt in range(50):
        rng = np.random.default_rng(seed + 1000 * attempt)
        centers = 1.5 * rng.standard_normal((num_classes, dim))
        train_f, train_l = clusters(rng, n_train, dim, num_classes, spread, centers)
        test_f, test_l = clusters(rng, n_test, dim, num_classes, spread, centers)
        train_f *= scale
        test_f *= scale
        try:
            top1, top5, pred = vissl_knn(train_f, train_l, test_f, test_l, sigma, topk, l2_norm)
        except NearTie:
            continue
        save(name, "train_features", train_f)
        save(name, "train_targets", train_l)
        save(name, "test_features", test_f)
        save(name, "test_targets", test_l)
        save(name, "params", np.array([sigma, topk, 1.0 if l2_norm else 0.0]))
        save(name, "predictions", pred.astype(np.int64))
        save(name, "accuracy", np.array([top1, top5]))
        print(f"{name}: top1 {top1:.4f} top5 {top5:.4f} (seed attempt {attempt})")
        return
    raise SystemExit(f"{name}: no tie-free draw in 50 attempts")


def make_sort_case(name, seed, rows, num_classes):
    rng = np.random.default_rng(seed)
    levels = np.array([0.0, 0.0, 0.0, 0.5, 1.0, 2.0], dtype=np.float32)
    values = levels[rng.integers(0, len(levels), size=(rows, num_classes))]
    values[0, :] = 0.0  # nothing voted: the whole order is torch's tie rule
    order = torch.from_numpy(values).sort(1, True).indices.numpy().astype(np.int32)
    save("sort", f"{name}_values", values)
    save("sort", f"{name}_order", order)


def save(case, what, arr):
    golden.save_array(os.path.join(OUT, f"{case}_{what}.npy"), arr)


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    # Fewer than 100 test rows (VISSL itself crashes there), L2-normalised, VISSL's σ.
    make_case("l2_small", 1, 300, 60, 16, 10, 0.1, 20, True)
    # More than 100 test rows (chunks of N // 100 = 1), another σ and k.
    make_case("l2_chunks", 2, 400, 230, 24, 12, 0.07, 50, True)
    # No normalisation: raw dot products, small enough that exp(sim/σ) stays finite.
    make_case("raw", 3, 250, 80, 8, 7, 0.5, 9, False, scale=0.3, spread=1.5)
    # Three classes: top-5 counts the three there are.
    make_case("three_classes", 4, 120, 50, 6, 3, 0.2, 15, True, spread=2.0)
    # k = 1 and many classes: four of the five predictions are torch's order of zero scores.
    make_case("k1_many_classes", 5, 200, 40, 12, 40, 0.1, 1, True)
    # k = 3 and 17+ classes: ties among the zero scores of a 20-class row.
    make_case("k3", 6, 150, 45, 10, 20, 0.3, 3, True)
    # TOPK past the train rows: every train row votes.
    make_case("k_over_n", 7, 30, 25, 5, 6, 0.1, 200, True, spread=1.5)
    for seed, (name, num_classes) in enumerate(
        [("c5", 5), ("c16", 16), ("c17", 17), ("c33", 33), ("c100", 100), ("c1000", 1000)]
    ):
        make_sort_case(name, 100 + seed, 6, num_classes)


if __name__ == "__main__":
    main()
