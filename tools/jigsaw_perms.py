#!/usr/bin/python3
"""jigsaw_perms.py N OUT.npy [--seed S] — Jigsaw's permutation set, as VISSL's published files
(hamming_perms_<N>_patches_9_max_avg.npy) are made: N permutations of the 9 patches chosen
greedily for the largest average Hamming distance to those already chosen (Noroozi & Favaro
2016, the "max_avg" variant), the first one at random. Written 0-based, int64, N × 9, which
ShuffleImgPatches reads (a 1-based file works too: it subtracts 1 when the minimum is 1).

VISSL's recipes download their file; selfsup never downloads, so this makes one locally:
    /usr/bin/python3 tools/jigsaw_perms.py 100 configs/quickstart/jigsaw_perms_100.npy
Ties go to the lowest-numbered permutation (itertools order), so a seed gives one file.
"""
import argparse
import itertools

import numpy as np


def max_avg_hamming(n, seed):
    every = np.array(list(itertools.permutations(range(9))), dtype=np.int64)  # 362880 × 9
    rng = np.random.default_rng(seed)
    chosen = [int(rng.integers(len(every)))]
    total = np.zeros(len(every), dtype=np.int64)  # Σ distance to the chosen ones
    taken = np.zeros(len(every), dtype=bool)
    for _ in range(1, n):
        total += (every != every[chosen[-1]]).sum(axis=1)
        taken[chosen[-1]] = True
        chosen.append(int(np.argmax(np.where(taken, -1, total))))
    return every[chosen]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("n", type=int)
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if not 1 <= a.n <= 362880:
        ap.error("N must be 1 to 9! = 362880")
    perms = max_avg_hamming(a.n, a.seed)
    np.save(a.out, perms)
    d = (perms[:, None, :] != perms[None, :, :]).sum(axis=2)
    off = d[~np.eye(len(perms), dtype=bool)] if len(perms) > 1 else np.array([0])
    print(f"{a.out}: {len(perms)} permutations, Hamming distance between them min {off.min()}, mean {off.mean():.3f}")


if __name__ == "__main__":
    main()
