#!/usr/bin/python3
"""make_jigsaw_fixtures.py — reference permutation sets for `selfsup dataset jigsaw-perms`
(orchestrator/cmd_jigsaw.c).

VISSL 0.1.5's extra_scripts/generate_jigsaw_permutations.py, its main loop re-stated line for line
(itertools.permutations, np.delete, scipy's cdist(metric="hamming"), D.mean(axis=0) or
D.min(axis=0), argmax), with one change: the first permutation, which VISSL draws with an
unseeded np.random.randint, is given. Writes tests/golden/fixtures/jigsaw/:

  cases.txt                      "N K METHOD FIRST" per case, one line each
  perms_N_K_METHOD_FIRST.npy     int64 N × K, what VISSL's script saves for that case

The K = 9, N = 100 case is the one where numpy's float64 means break ties differently from exact
integer sums (a set made with integers parts from this one after 9 rows). VISSL's own script
cannot make all K! permutations (its last argmax is over nothing), so no case asks for them.

Run from the repository root:  /usr/bin/python3 tests/golden/make_jigsaw_fixtures.py
"""
import itertools
import os

import numpy as np
from scipy.spatial.distance import cdist

import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

CASES = [(100, 9, "max_avg", 0), (40, 6, "max_avg", 123), (30, 5, "max_min", 7), (12, 4, "max_min", 0),
         (50, 7, "max_avg", 4999)]


def vissl_perms(num_perms, num_patches, method, j):
    """generate_jigsaw_permutations.py's loop, first permutation j."""
    all_perms = np.array(list(itertools.permutations(list(range(num_patches)))))
    for idx in range(num_perms):
        if idx == 0:
            selected_perms = all_perms[j].reshape([1, -1])
        else:
            selected_perms = np.concatenate([selected_perms, all_perms[j].reshape([1, -1])], axis=0)
        all_perms = np.delete(all_perms, j, axis=0)
        D = cdist(selected_perms, all_perms, metric="hamming")
        if idx + 1 == num_perms:
            break  # VISSL computes one more choice it never uses
        if method == "max_avg":
            j = D.mean(axis=0).argmax()
        else:
            j = D.min(axis=0).argmax()
    return selected_perms


def main():
    out = golden.out_dir("jigsaw")
    with open(os.path.join(out, "cases.txt"), "w") as f:
        for n, k, method, first in CASES:
            f.write(f"{n} {k} {method} {first}\n")
            golden.save_array(os.path.join(out, f"perms_{n}_{k}_{method}_{first}.npy"),
                              vissl_perms(n, k, method, first), np.int64)


if __name__ == "__main__":
    main()
