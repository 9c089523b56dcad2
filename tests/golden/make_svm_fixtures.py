#!/usr/bin/python3
"""make_svm_fixtures.py -- reference outputs of VISSL's SVM protocol for tests/unit/test_svm.c.

Run with Debian's python3 (numpy, scikit-learn 1.2.1):
    /usr/bin/python3 tests/golden/make_svm_fixtures.py
Writes small .npy files under tests/golden/fixtures/svm/.

The VOC07 case restates VISSL's SVMTrainer.train + test (vissl/utils/svm_utils/svm_trainer.py)
exactly as VISSL calls sklearn: float64 features, x / (||x|| + 1e-5), labels 0 -> -1 (rows
marked -1 stay negatives), LinearSVC(C, class_weight {1: 2, -1: 1}, intercept_scaling 1,
squared hinge, l2, dual, tol 1e-4, max_iter 2000), cross_val_score(cv=3,
scoring="average_precision"), fit on all rows, argmax of the mean CV AP, test AP with VISSL's
get_precision_recall (written here in numpy) on the test rows whose target is not -1.
"""
import os

import numpy as np
from sklearn.metrics import average_precision_score
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.svm import LinearSVC
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("svm")


def save(name, arr):
    golden.save_array(os.path.join(OUT, name + ".npy"), arr)


def vissl_voc_ap(targets, scores):
    """VISSL's get_precision_recall + calculate_ap (rows with target -1 already dropped)."""
    gt = (targets > 0).astype(np.float64)
    order = np.argsort(scores)[::-1]
    tp = gt[order]
    fp = 1 - tp
    tp, fp = np.cumsum(tp), np.cumsum(fp)
    prec = tp / (tp + fp)
    rec = tp / gt.sum()
    mrec = np.concatenate(([0.0], rec, [1.0]))
    mpre = np.concatenate(([0.0], prec, [0.0]))
    for i in range(len(mpre) - 2, -1, -1):
        mpre[i] = max(mpre[i], mpre[i + 1])
    i = np.where(mrec[1:] != mrec[:-1])[0]
    return float(np.sum((mrec[i + 1] - mrec[i]) * mpre[i + 1]))


def make_voc_case(rng, n_train=150, n_test=80, dim=32, ncls=4):
    """Clustered features, multi-label targets {1, 0, -1}; class c positive near centre c."""
    centres = rng.normal(size=(ncls, dim)) * 1.2

    def split(n):
        t = (rng.random((n, ncls)) < 0.3).astype(np.int64)
        t[np.arange(n), rng.integers(0, ncls, n)] = 1
        x = rng.normal(size=(n, dim)) * 1.0 + t @ centres * rng.uniform(0.3, 1.0, (n, 1))
        difficult = rng.random((n, ncls)) < 0.06
        t[difficult] = -1
        return x.astype(np.float32), t

    return split(n_train), split(n_test)


def vissl_train_test(xtr, ttr, xte, tte, costs, folds=3, threaded=False):
    """VISSL's SVMTrainer.train + test; threaded: one thread per class, as VISSL trains them
    (bench/svm_bench.py times it so; the results are the same)."""
    import threading

    def normalize(x):
        x = x.astype(np.float64)
        return x / (np.linalg.norm(x, axis=1) + 1e-5)[:, np.newaxis]

    xtr, xte = normalize(xtr), normalize(xte)
    ncls = ttr.shape[1]
    crossval = np.zeros((ncls, len(costs)))
    models = {}

    def train_cls(c):
        y = ttr[:, c].astype(np.int32, copy=True)
        y[y == 0] = -1
        for k, cost in enumerate(costs):
            clf = LinearSVC(C=cost, class_weight={1: 2, -1: 1}, intercept_scaling=1.0, penalty="l2",
                            loss="squared_hinge", tol=0.0001, dual=True, max_iter=2000)
            crossval[c, k] = cross_val_score(clf, xtr, y, cv=folds, scoring="average_precision").mean()
            clf.fit(xtr, y)
            models[c, k] = clf

    if threaded:
        threads = [threading.Thread(target=train_cls, args=(c,)) for c in range(ncls)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for c in range(ncls):
            train_cls(c)
    chosen = np.argmax(crossval, axis=1)
    test_ap = np.zeros((ncls, 1))
    for c in range(ncls):
        pred = models[c, chosen[c]].decision_function(xte)
        keep = tte[:, c] != -1
        labels = tte[keep, c].copy()
        labels[labels == 0] = -1
        test_ap[c, 0] = vissl_voc_ap(labels, pred[keep])
    return crossval, np.array([costs[i] for i in chosen]), test_ap


def clear_winners(crossval):
    """Every class's best cost wins by a margin that solver round-off cannot bridge."""
    return all(np.sort(row)[-1] - np.sort(row)[-2] > 0.004 for row in crossval)


def voc_case(rng):
    costs = [0.001, 0.1, 10.0]
    for attempt in range(50):  # the first data set (in seed order) whose chosen costs are clear
        (xtr, ttr), (xte, tte) = make_voc_case(rng)
        crossval, chosen, test_ap = vissl_train_test(xtr, ttr, xte, tte, costs)
        if clear_winners(crossval) and len(set(chosen)) > 1:
            break
    else:
        raise SystemExit("no data set with clear cost winners")
    save("voc_train_x", xtr)
    save("voc_train_t", ttr)
    save("voc_test_x", xte)
    save("voc_test_t", tte)
    save("voc_costs", np.array(costs))
    save("voc_crossval", crossval)
    save("voc_chosen", chosen)
    save("voc_test_ap", test_ap)
    print("crossval\n", crossval, "\nchosen", chosen, "\ntest_ap", test_ap.ravel())


def folds_case(rng):
    """sklearn's StratifiedKFold test folds for label vectors of int8 {+1, -1} and more."""
    cases = {
        "unbalanced": np.array([-1] * 17 + [1] * 4 + [-1] * 5 + [1] * 2, dtype=np.int8),
        "few_pos": np.array([-1, -1, 1, -1, -1, -1, 1, -1, -1, -1], dtype=np.int8),
        "random": np.where(rng.random(53) < 0.3, 1, -1).astype(np.int8),
        "three": rng.integers(-1, 2, 40).astype(np.int8),
    }
    for name, y in cases.items():
        for k in (3, 5):
            folds = StratifiedKFold(n_splits=k, shuffle=False)._make_test_folds(np.zeros((len(y), 1)), y)
            save(f"folds_{name}_k{k}_y", y)
            save(f"folds_{name}_k{k}_fold", folds.astype(np.int32))


def ap_case(rng):
    """sklearn's average_precision_score with tied scores."""
    scores = np.round(rng.normal(size=60), 1)  # many ties
    y = np.where(rng.random(60) < 0.4, 1, -1).astype(np.int8)
    save("ap_ties_scores", scores)
    save("ap_ties_y", y)
    save("ap_ties_ap", np.array([average_precision_score(y, scores)]))


def aggregate_case(rng):
    """VISSL's aggregate_stats on per-sample test APs (k values x samples x costs)."""
    aps = rng.uniform(0.2, 0.9, size=(3, 5, 4))
    save("agg_aps", aps)
    mean, mn, mx, std = aps.mean(axis=1), aps.min(axis=1), aps.max(axis=1), aps.std(axis=1)
    best = np.argmax(mean, axis=1)
    stats = np.array([[round(100.0 * m[i, best[i]], 2) for m in (mean, mn, mx, std)] for i in range(3)])
    save("agg_stats", stats)
    save("agg_mean", mean)
    save("agg_std", std)


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20240607)
    voc_case(rng)
    folds_case(rng)
    ap_case(rng)
    aggregate_case(rng)


if __name__ == "__main__":
    main()
