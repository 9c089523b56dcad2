#!/usr/bin/python3
"""svm_bench.py -- the Python side of bench/svm.sh: synthetic features, and VISSL's SVM path.

    svm_bench.py gen   --dir D --train N --test M --dim K --classes C [--seed S]
    svm_bench.py vissl --dir D --costs 0.01,0.1,1,10 [--folds 3]

gen writes D/{train,test}_{features,targets}.npy: VOC07-like multi-label data (1 to 3 labels
per image out of C, about 5% of the targets -1 "difficult"), features clustered around the
classes' centres, non-negative like pooled ResNet activations, float32.

vissl restates VISSL's SVMTrainer.train + test (vissl/utils/svm_utils/svm_trainer.py) as VISSL
runs them: float64 features, x / (||x|| + 1e-5), one Python thread per class (liblinear runs
without the GIL), per cost LinearSVC(C, class_weight {1: 2, -1: 1}, intercept_scaling 1,
squared hinge, l2, dual, tol 1e-4, max_iter 2000), cross_val_score(cv=folds,
scoring="average_precision"), fit on all rows, the cost of the best mean CV AP, test AP with
VISSL's get_precision_recall on the rows whose target is not -1. VISSL also pickles every model;
that is left out (it costs little). Prints "# seconds S", "# mAP M" (100 * mean test AP) and
"# chosen c0 c1 ...".
"""
import argparse
import os
import threading
import time

import numpy as np


def gen(a):
    rng = np.random.default_rng(a.seed)
    centres = np.abs(rng.normal(size=(a.classes, a.dim))) * (rng.random((a.classes, a.dim)) < 0.15) * 0.6

    def split(n):
        t = np.zeros((n, a.classes), dtype=np.int64)
        nlab = rng.integers(1, 4, n)
        for i in range(n):
            t[i, rng.choice(a.classes, nlab[i], replace=False)] = 1
        x = t @ centres * rng.uniform(0.5, 1.5, (n, 1)) + np.abs(rng.normal(size=(n, a.dim))) * 1.5
        t[(rng.random(t.shape) < 0.05)] = -1
        return x.astype(np.float32), t

    for name, n in (("train", a.train), ("test", a.test)):
        x, t = split(n)
        np.save(os.path.join(a.dir, f"{name}_features.npy"), x)
        np.save(os.path.join(a.dir, f"{name}_targets.npy"), t)


def vissl_voc_ap(labels, scores):
    """VISSL's get_precision_recall + calculate_ap (labels in {1, -1})."""
    gt = (labels > 0).astype(np.float64)
    order = np.argsort(scores)[::-1]
    tp = np.cumsum(gt[order])
    fp = np.cumsum(1 - gt[order])
    prec = tp / (tp + fp)
    rec = tp / gt.sum()
    mrec = np.concatenate(([0.0], rec, [1.0]))
    mpre = np.concatenate(([0.0], prec, [0.0]))
    for i in range(len(mpre) - 2, -1, -1):
        mpre[i] = max(mpre[i], mpre[i + 1])
    i = np.where(mrec[1:] != mrec[:-1])[0]
    return float(np.sum((mrec[i + 1] - mrec[i]) * mpre[i + 1]))


def vissl(a):
    from sklearn.model_selection import cross_val_score
    from sklearn.svm import LinearSVC

    costs = [float(c) for c in a.costs.split(",")]
    load = lambda n: np.load(os.path.join(a.dir, n))  # noqa: E731
    xtr, ttr = load("train_features.npy").astype(np.float64), load("train_targets.npy")
    xte, tte = load("test_features.npy").astype(np.float64), load("test_targets.npy")
    t0 = time.time()
    xtr = xtr / (np.linalg.norm(xtr, axis=1) + 1e-5)[:, np.newaxis]
    ncls = ttr.shape[1]
    crossval = np.zeros((ncls, len(costs)))
    models = {}

    def train_cls(c):
        y = ttr[:, c].astype(np.int32, copy=True)
        y[y == 0] = -1
        for k, cost in enumerate(costs):
            clf = LinearSVC(C=cost, class_weight={1: 2, -1: 1}, intercept_scaling=1.0, penalty="l2",
                            loss="squared_hinge", tol=0.0001, dual=True, max_iter=2000)
            crossval[c, k] = cross_val_score(clf, xtr, y, cv=a.folds, scoring="average_precision").mean()
            clf.fit(xtr, y)
            models[c, k] = clf

    threads = [threading.Thread(target=train_cls, args=(c,)) for c in range(ncls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    xte = xte / (np.linalg.norm(xte, axis=1) + 1e-5)[:, np.newaxis]
    chosen = np.argmax(crossval, axis=1)
    aps = []
    for c in range(ncls):
        pred = models[c, chosen[c]].decision_function(xte)
        keep = tte[:, c] != -1
        labels = tte[keep, c].copy()
        labels[labels == 0] = -1
        aps.append(vissl_voc_ap(labels, pred[keep]))
    seconds = time.time() - t0
    print(f"# seconds {seconds:.3f}")
    print(f"# mAP {round(100 * float(np.mean(aps)), 3)}")
    print("# chosen " + " ".join(repr(costs[i]) for i in chosen))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("--dir", required=True)
    g.add_argument("--train", type=int, required=True)
    g.add_argument("--test", type=int, required=True)
    g.add_argument("--dim", type=int, required=True)
    g.add_argument("--classes", type=int, required=True)
    g.add_argument("--seed", type=int, default=0)
    v = sub.add_parser("vissl")
    v.add_argument("--dir", required=True)
    v.add_argument("--costs", required=True)
    v.add_argument("--folds", type=int, default=3)
    a = p.parse_args()
    if a.cmd == "gen":
        gen(a)
    else:
        import warnings

        warnings.simplefilter("ignore")  # liblinear's ConvergenceWarning at large costs, as in VISSL's logs
        vissl(a)


if __name__ == "__main__":
    main()
