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
import sys
import time

import numpy as np

# VISSL's SVMTrainer restated once, in the fixture generator the tests read.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
from make_svm_fixtures import vissl_train_test  # noqa: E402


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


def vissl(a):
    """VISSL's SVMTrainer on the bench files, timed from the loaded arrays to the test APs."""
    costs = [float(c) for c in a.costs.split(",")]
    load = lambda n: np.load(os.path.join(a.dir, n))  # noqa: E731
    xtr, ttr = load("train_features.npy"), load("train_targets.npy")
    xte, tte = load("test_features.npy"), load("test_targets.npy")
    t0 = time.time()
    _, chosen, test_ap = vissl_train_test(xtr, ttr, xte, tte, costs, folds=a.folds, threaded=True)
    seconds = time.time() - t0
    print(f"# seconds {seconds:.3f}")
    print(f"# mAP {round(100 * float(np.mean(test_ap)), 3)}")
    print("# chosen " + " ".join(repr(float(c)) for c in chosen))


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
