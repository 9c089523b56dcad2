#!/usr/bin/python3
"""knn_bench.py — the torch side of bench/knn.sh: VISSL's kNN benchmark on the CPU.

  knn_bench.py gen --dir D --train N --test M --dim W --classes C [--seed S]
      writes D/{train,test}_{features,targets}.npy: Gaussian clusters, one per class, float32
      features and int64 N×1 targets (the same files both sides read)
  knn_bench.py run --dir D [--sigma 0.1] [--topk 200] [--l2-norm] [--threads T[,T...]]
      runs tools/nearest_neighbor_test.py's computation (VISSL 0.1.5, restated below; on the
      CPU instead of CUDA) on those files once per thread count (default: every core, then 1,
      because on a loaded machine torch's every-core run can be the slower one), writes the
      first five predictions of every test row to D/torch_predictions.npy and prints
      "knn_bench SECONDS TOP1 TOP5 THREADS" for the fastest run (seconds: the kNN from arrays
      in memory to top-1/top-5)
"""
import argparse
import os
import time

import numpy as np
import torch
from torch import nn


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


def vissl_knn(train_f, train_l, test_f, test_l, sigma, topk, l2_norm):
    """VISSL 0.1.5's nearest_neighbor_test after merge_features, with .cuda() left out."""
    train_features = torch.from_numpy(train_f).float().t()
    train_labels = torch.LongTensor(train_l)
    num_classes = train_labels.max() + 1
    if l2_norm:
        train_features = nn.functional.normalize(train_features, dim=0, p=2)
    top1, top5, total = 0.0, 0.0, 0
    num_test_images, num_chunks = test_l.shape[0], 100
    imgs_per_chunk = num_test_images // num_chunks
    all_predictions = []
    with torch.no_grad():
        retrieval_one_hot = torch.zeros(topk, num_classes)
        for idx in range(0, num_test_images, imgs_per_chunk):
            features = test_f[idx : min((idx + imgs_per_chunk), num_test_images), :]
            targets = test_l[idx : min((idx + imgs_per_chunk), num_test_images), :]
            batch_size = targets.shape[0]
            features = torch.from_numpy(features).float()
            targets = torch.LongTensor(targets)
            if l2_norm:
                features = nn.functional.normalize(features, dim=1, p=2)
            similarity = torch.mm(features, train_features)
            distances, indices = similarity.topk(topk, largest=True, sorted=True)
            candidates = train_labels.view(1, -1).expand(batch_size, -1)
            retrieved_neighbors = torch.gather(candidates, 1, indices)
            retrieval_one_hot.resize_(batch_size * topk, num_classes).zero_()
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
            top5 = top5 + correct.narrow(1, 0, 5).sum().item()
            total += targets.size(0)
            all_predictions.append(predictions[:, :5].numpy())
    return top1 * 100.0 / total, top5 * 100.0 / total, np.concatenate(all_predictions)


def run(args):
    load = lambda name: np.load(os.path.join(args.dir, name))
    train_f, train_l = load("train_features.npy"), load("train_targets.npy")
    test_f, test_l = load("test_features.npy"), load("test_targets.npy")
    counts = [int(t) for t in args.threads.split(",")] if args.threads else sorted({os.cpu_count(), 1}, reverse=True)
    best = None
    for threads in counts:
        torch.set_num_threads(threads)
        start = time.perf_counter()
        top1, top5, pred = vissl_knn(train_f, train_l, test_f, test_l, args.sigma, args.topk, args.l2_norm)
        seconds = time.perf_counter() - start
        print(f"# torch on {threads} threads: {seconds:.4f} s", flush=True)
        if best is None or seconds < best[0]:
            best = (seconds, top1, top5, threads)
    np.save(os.path.join(args.dir, "torch_predictions.npy"), pred.astype(np.int64))
    print("knn_bench %.4f %r %r %d" % best)


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
    args = p.parse_args()
    generate(args) if args.cmd == "gen" else run(args)


if __name__ == "__main__":
    main()
