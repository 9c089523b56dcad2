#!/usr/bin/python3
"""make_buckets_fixtures.py — torch DistributedDataParallel's gradient buckets, for
stages/train/buckets.c (tests/unit/test_ddp.c).

DDP groups the parameters into buckets by size (torch.distributed._compute_bucket_assignment_by_size,
limits [_DEFAULT_FIRST_BUCKET_BYTES, bucket_cap_mb MiB]). After its first iteration it rebuilds
them (Reducer::rebuild_buckets) from the order the gradients became ready, which for these models
is the reverse of the parameters' order: that is the call below, the tensors reversed and their
indices passed as tensor_indices, as the reducer makes it.

The model is VISSL's SimCLR ResNet-50: torchvision's resnet50 without its fc (VISSL's trunk),
then the head mlp [2048, 2048, 128] (Linear, ReLU, Linear), parameters in state-dict order.

Per bucket_cap_mb in CAPS (tests/golden/fixtures/buckets/resnet50_simclr_cap{CAP}.npy): int64,
the first parameter index of each bucket, in the order the buckets become ready; each bucket
runs from there to the previous bucket's first (the last to the model's end).

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_buckets_fixtures.py
"""
import os

import numpy as np
import torch
import torch.distributed as dist
import torchvision

import golden

OUT = golden.out_dir("buckets")
CAPS = (25, 1, 0, 100)


def simclr_resnet50_params():
    trunk = torchvision.models.resnet50()
    head = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 128))
    return [p for n, p in trunk.named_parameters() if not n.startswith("fc.")] + list(head.parameters())


def ready_order_buckets(params, cap_mb):
    order = list(reversed(range(len(params))))
    limits = [dist._DEFAULT_FIRST_BUCKET_BYTES, int(cap_mb * 1024 * 1024)]
    buckets, _ = dist._compute_bucket_assignment_by_size(
        [params[i] for i in order], limits, [False] * len(params), order)
    firsts = []
    end = len(params)
    for b in buckets:
        assert sorted(b) == list(range(min(b), end)), "a bucket that is not a run of consecutive parameters"
        firsts.append(min(b))
        end = min(b)
    assert end == 0
    return firsts


def main():
    params = simclr_resnet50_params()
    for cap in CAPS:
        golden.save_array(os.path.join(OUT, "resnet50_simclr_cap%d.npy" % cap), ready_order_buckets(params, cap),
                          np.int64)


if __name__ == "__main__":
    main()
