#!/usr/bin/python3
"""train_bench.py — the SimCLR quickstart trained the PyTorch/VISSL way, for bench/train.sh.

What VISSL runs for configs/quickstart/simclr.yaml, written out with Debian's torch and
torchvision: a DataLoader with NUM_DATALOADER_WORKERS worker processes doing PIL decode and
the quickstart's TRANSFORMS, read from the YAML and built as VISSL builds them
(bench/methods_bench.py's build_transforms: the classes of bench/data_bench.py and torchvision's), the
simclr_collator; torchvision's ResNet-18 as VISSL's trunk (bench/methods_bench.py's Trunk: the
quickstart's small-image stem when it asks for it) with VISSL's heads [mlp 512→512 ReLU],
[mlp 512→128]; VISSL's SimclrInfoNCECriterion (T 0.1); SGD momentum 0.9, weight decay 1e-4 on
VISSL's parameter groups; the cosine LR per step from 0.075 (the quickstart adds LARC and
τ 0.2: left out here, they only make this side's step the cheaper). The quickstart's batch, one
epoch over the first N images of the Fashion-MNIST file list, torch on T threads.

Prints "torch_breakdown WAIT FORWARD LOSS BACKWARD OPTIMIZER" (mean ms per step) after it.
Prints "torch_train images_per_second data_wait_fraction steps" for the steps after the first
WARMUP (median step time), and '#' lines with details.

    /usr/bin/python3 bench/train_bench.py --filelist data/fashion-mnist/disk_filelist/train_images.npy \
        --n 2560 --workers 2 --threads 2
"""
import argparse
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data_bench as D  # noqa: E402  VISSL's transforms and collator
import methods_bench as MB  # noqa: E402  the quickstart's YAML and its transforms

WARMUP = 5


class Dataset(torch.utils.data.Dataset):
    """VISSL's disk_filelist source: PIL decode, convert RGB, then the transforms."""

    def __init__(self, paths, transforms):
        self.paths = paths
        self.transforms = MB.build_transforms(transforms)

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as f:
            img = Image.open(f).convert("RGB")
        return D.apply_all(self.transforms, {"data": [img], "label": [0], "data_valid": [1], "data_idx": [i]})


class MLP(nn.Module):
    def __init__(self, dims, use_relu=False):
        super().__init__()
        layers = []
        for i in range(len(dims) - 1):
            layers.append(nn.Linear(dims[i], dims[i + 1]))
            if use_relu:
                layers.append(nn.ReLU(inplace=True))
        self.clf = nn.Sequential(*layers)

    def forward(self, x):
        return self.clf(x)


def model(trunk_cfg):
    trunk = MB.Trunk(trunk_cfg)
    return nn.ModuleDict({"trunk": trunk, "heads": nn.ModuleList([MLP([512, 512], True), MLP([512, 128])])})


def simclr_loss(out, temperature=0.1):
    """VISSL's SimclrInfoNCECriterion on one process."""
    r = out.shape[0]
    b = r // 2
    z = F.normalize(out, dim=1, p=2)
    sim = torch.exp(z @ z.t() / temperature)
    idx = torch.arange(r)
    pos_mask = torch.zeros(r, r)
    pos_mask[idx, (idx + b) % r] = 1
    neg_mask = 1 - pos_mask - torch.eye(r)
    pos, neg = (sim * pos_mask).sum(1), (sim * neg_mask).sum(1)
    return -torch.mean(torch.log(pos / (pos + neg)))


def param_groups(m, wd):
    """VISSL 0.1.5: conv/linear weights and trunk biases regularised, BN unregularised."""
    reg, unreg = [], []
    for name, module in m.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            bn = isinstance(module, nn.BatchNorm2d)
            (unreg if bn else reg).append(p)
    return [{"params": reg, "weight_decay": wd}, {"params": unreg, "weight_decay": 0.0}]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--filelist", required=True)
    ap.add_argument("--n", type=int, default=2560)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    paths = [str(p) for p in np.load(a.filelist, allow_pickle=True)[: a.n]]
    cfg = MB.config("simclr")
    batch = cfg["DATA"]["TRAIN"]["BATCHSIZE_PER_REPLICA"]
    loader = torch.utils.data.DataLoader(Dataset(paths, cfg["DATA"]["TRAIN"]["TRANSFORMS"]), batch_size=batch, shuffle=True, drop_last=True,
                                         num_workers=a.workers, collate_fn=D.simclr_collator)
    m = model(cfg["MODEL"]["TRUNK"]).train()
    opt = torch.optim.SGD(param_groups(m, 1e-4), lr=0.075, momentum=0.9)
    steps = len(loader)
    times, waits, parts = [], [], []
    t_end = time.perf_counter()
    for k, samples in enumerate(loader):
        t0 = time.perf_counter()
        x = samples["data"][0]
        out = m["heads"][1](m["heads"][0](m["trunk"](x)))
        tf = time.perf_counter()
        loss = simclr_loss(out)
        tl = time.perf_counter()
        opt.zero_grad()
        loss.backward()
        tb = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = 0.075 * (1 + math.cos(math.pi * k / steps)) / 2
        opt.step()
        t1 = time.perf_counter()
        if k >= WARMUP:
            times.append(t1 - t_end)
            waits.append(t0 - t_end)
            parts.append((t0 - t_end, tf - t0, tl - tf, tb - tl, t1 - tb))
        t_end = t1
    step = statistics.median(times)
    print(f"# {steps} steps, last loss {loss.item():.4f}, median step {step * 1e3:.1f} ms, "
          f"median data wait {statistics.median(waits) * 1e3:.1f} ms")
    print(f"torch_train {batch / step:.1f} {sum(waits) / sum(times):.3f} {steps}")
    # mean ms per step: data wait, forward, loss, backward (with zero_grad), optimizer step
    print("torch_breakdown " + " ".join(f"{1e3 * sum(p[i] for p in parts) / len(parts):.1f}" for i in range(5)))


if __name__ == "__main__":
    main()
