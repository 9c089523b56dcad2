#!/usr/bin/python3
"""make_svm_solver_fixtures.py — sklearn's LinearSVC fits, the reference for stages/svm/solver.c.

Two small binary problems, each fitted by sklearn 1.2.1 exactly as VISSL's SVMTrainer fits a
class (LinearSVC(C=cost, class_weight={1: 2, -1: 1}, intercept_scaling=1.0, tol=1e-4,
max_iter=2000)) at the costs 0.01, 0.1, 1 and 10, in four settings:

  sqhinge  penalty l2, squared hinge, dual True   (VISSL's default; liblinear solver 1)
  hinge    penalty l2, hinge, dual True           (solver 3)
  primal   penalty l2, squared hinge, dual False  (solver 2)
  l1       penalty l1, squared hinge, dual False  (solver 5)

Problems (features float32, as selfsup keeps them; sklearn fits their exact float64 values):
  sep      60 x 8, two nearly separable Gaussian clouds, raw (not normalised), 1/3 positive
  overlap  120 x 24, nonnegative sparse-ish "ReLU" features of two overlapping classes,
           rows normalised as VISSL does, x / (||x|| + 1e-5)

Files in tests/golden/fixtures/svm_solver/:
  PROB_x.npy (n, dim) float32, PROB_y.npy (n,) int8 (+1/-1), PROB_xtest.npy (20, dim) float32
  PROB_SETTING_w.npy       (costs, dim+1) coef_ then intercept_ (intercept_scaling 1, so the
                           intercept is the weight of the appended constant-1 feature)
  PROB_SETTING_dec.npy     (costs, 20) decision_function on the held-out rows
  PROB_SETTING_obj.npy     (costs,) the primal objective of that fit
  PROB_SETTING_optobj.npy  (costs,) the primal objective of the same problem solved to
                           tol 1e-10 (max_iter 10^6): the optimum, within ~1e-9
  all_costs.npy            (costs,)

The primal objective (the intercept regularised like any weight, as liblinear does):
  l2:  0.5 ||w~||^2 + sum_i C_i loss(y_i w~.x~_i),   l1:  ||w~||_1 + sum_i C_i loss(...)
with C_i = 2C for y = +1, C for y = -1.

Run from the repository root:  /usr/bin/python3 tests/golden/make_svm_solver_fixtures.py
"""
import os
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("svm_solver")
COSTS = [0.01, 0.1, 1.0, 10.0]
SETTINGS = {
    "sqhinge": dict(penalty="l2", loss="squared_hinge", dual=True),
    "hinge": dict(penalty="l2", loss="hinge", dual=True),
    "primal": dict(penalty="l2", loss="squared_hinge", dual=False),
    "l1": dict(penalty="l1", loss="squared_hinge", dual=False),
}
N_TEST = 20


def problem_sep(rng):
    n, dim = 60 + N_TEST, 8
    y = np.where(rng.random(n) < 1 / 3, 1, -1)
    direction = rng.normal(size=dim)
    direction /= np.linalg.norm(direction)
    x = rng.normal(size=(n, dim)) + 1.6 * y[:, None] * direction[None, :] + 0.5
    return x.astype(np.float32), y


def problem_overlap(rng):
    n, dim = 120 + N_TEST, 24
    y = np.where(rng.random(n) < 0.4, 1, -1)
    shift = rng.normal(size=dim) * 0.6
    x = rng.normal(size=(n, dim)) + 0.3 + (y[:, None] > 0) * shift[None, :]
    x = np.maximum(x, 0.0)  # ReLU: about a third of the features are 0
    x = x / (np.linalg.norm(x, axis=1, keepdims=True) + 1e-5)
    return x.astype(np.float32), y


def fit(x, y, cost, setting, tol, max_iter):
    clf = LinearSVC(C=cost, class_weight={1: 2, -1: 1}, intercept_scaling=1.0, tol=tol,
                    max_iter=max_iter, random_state=0, **SETTINGS[setting])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(x.astype(np.float64), y)
    assert list(clf.classes_) == [-1, 1]
    return np.concatenate([clf.coef_[0], clf.intercept_]), clf


def objective(w, x, y, cost, setting):
    xt = np.concatenate([x.astype(np.float64), np.ones((len(x), 1))], axis=1)
    margin = y * (xt @ w)
    c = cost * np.where(y > 0, 2.0, 1.0)
    if SETTINGS[setting]["loss"] == "hinge":
        loss = np.maximum(0.0, 1.0 - margin)
    else:
        loss = np.maximum(0.0, 1.0 - margin) ** 2
    reg = np.abs(w).sum() if SETTINGS[setting]["penalty"] == "l1" else 0.5 * w @ w
    return reg + (c * loss).sum()


def save(name, arr):
    golden.save_array(os.path.join(OUT, name + ".npy"), arr)


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20240607)
    save("all_costs", np.array(COSTS))
    for prob, make in (("sep", problem_sep), ("overlap", problem_overlap)):
        x_all, y_all = make(rng)
        x, y = x_all[:-N_TEST], y_all[:-N_TEST]
        xtest = x_all[-N_TEST:]
        save(prob + "_x", x)
        save(prob + "_y", y.astype(np.int8))
        save(prob + "_xtest", xtest)
        for setting in SETTINGS:
            ws, decs, objs, opts = [], [], [], []
            for cost in COSTS:
                w, clf = fit(x, y, cost, setting, 1e-4, 2000)
                w_opt, _ = fit(x, y, cost, setting, 1e-10, 10**6)
                ws.append(w)
                decs.append(clf.decision_function(xtest.astype(np.float64)))
                objs.append(objective(w, x, y, cost, setting))
                opts.append(objective(w_opt, x, y, cost, setting))
                print(f"{prob} {setting} C={cost}: obj {objs[-1]:.9g} opt {opts[-1]:.9g} "
                      f"rel {(objs[-1] - opts[-1]) / opts[-1]:.2e}")
            save(f"{prob}_{setting}_w", np.array(ws))
            save(f"{prob}_{setting}_dec", np.array(decs))
            save(f"{prob}_{setting}_obj", np.array(objs))
            save(f"{prob}_{setting}_optobj", np.array(opts))


if __name__ == "__main__":
    main()
