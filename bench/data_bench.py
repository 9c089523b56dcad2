#!/usr/bin/python3
"""data_bench.py — the reference side of the data pipeline: how VISSL 0.1.5 loads a sample.

    /usr/bin/python3 bench/data_bench.py --dir CORPUS [--n N] [--pipelines decode,simclr,swav,eval]
                                         [--batch B] [--reps R] [--cpu C]

CORPUS is an ImageFolder tree (bench/make-photo-corpus N CORPUS writes one; DIR/train is used
when it exists). Everything runs on ONE core: the process is pinned to one CPU and torch uses
one thread, as one DataLoader worker does. Pipelines, per image:

  decode  read the file, PIL Image.open(f).convert("RGB")            (DiskImageDataset)
  simclr  decode + ImgReplicatePil(2), then per copy RandomResizedCrop(224), RandomHorizontalFlip,
          ImgPilColorDistortion(1.0), ImgPilGaussianBlur(0.5, 0.1, 2.0), ToTensor, Normalize
          (configs/pretrain/simclr), collated by simclr_collator
  swav    decode + ImgPilToMultiCrop(2x224 scale (0.14, 1), 6x96 scale (0.05, 0.14)), then per
          crop RandomHorizontalFlip, ImgPilColorDistortion(1.0), ImgPilGaussianBlur(0.5, 0.1,
          2.0), ToTensor, Normalize (configs/pretrain/swav), collated by multicrop_collator
  eval    decode + Resize(256), CenterCrop(224), ToTensor, Normalize, default_collate

Transforms are applied as VISSL's SSLTransformsWrapper does: each transform in turn over the
sample's whole data list. Collation (torch.stack per batch of --batch samples, VISSL's
collators' layouts) is timed too. Each pipeline gets one untimed warm-up batch, then --reps
timed passes over --n images (the corpus repeats when N is larger than it); the median is
reported.

Output, one line per pipeline:  vissl_data PIPELINE IMAGES_PER_SECOND
and '#' lines with details. Needs Debian's python3-torch, python3-torchvision, python3-pil.
"""
import argparse
import os
import random
import statistics
import sys
import time

import numpy as np
import torch
import torchvision.transforms as T
from PIL import Image, ImageFilter, ImageOps

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


# ---- VISSL 0.1.5's own transforms (vissl/data/ssl_transforms), as they are ----------------

class ImgReplicatePil:
    def __init__(self, num_times=2):
        self.num_times = num_times

    def __call__(self, image):
        return [image for _ in range(self.num_times)]


class ImgPilToMultiCrop:
    def __init__(self, total_num_crops, num_crops, size_crops, crop_scales):
        assert np.sum(num_crops) == total_num_crops
        assert len(size_crops) == len(num_crops) == len(crop_scales)
        self.trans = []
        for i, sc in enumerate(size_crops):
            self.trans.extend([T.RandomResizedCrop(sc, scale=crop_scales[i])] * num_crops[i])

    def __call__(self, image):
        return list(map(lambda trans: trans(image), self.trans))


class ImgPilColorDistortion:
    def __init__(self, strength=1.0):
        s = strength
        color_jitter = T.ColorJitter(0.8 * s, 0.8 * s, 0.8 * s, 0.2 * s)
        self.transforms = T.Compose([T.RandomApply([color_jitter], p=0.8), T.RandomGrayscale(p=0.2)])

    def __call__(self, image):
        return self.transforms(image)


class ImgPilGaussianBlur:
    def __init__(self, p=0.5, radius_min=0.1, radius_max=2.0):
        self.prob, self.radius_min, self.radius_max = p, radius_min, radius_max

    def __call__(self, img):
        if not np.random.rand() <= self.prob:
            return img
        return img.filter(ImageFilter.GaussianBlur(radius=random.uniform(self.radius_min, self.radius_max)))


class ImgPilRandomSolarize:
    """BYOL's solarisation as VISSL has it: with probability p, PIL's solarize at a threshold
    drawn from [0, 256] (256 leaves the image as it is)."""

    def __init__(self, p=0.66):
        self.prob = p

    def __call__(self, img):
        if not random.random() < self.prob:
            return img
        return ImageOps.solarize(img, threshold=random.randint(0, 256))


# Transforms that turn one image into a list (SSLTransformsWrapper's _TRANSFORMS_WITH_COPIES).
COPIES = (ImgReplicatePil, ImgPilToMultiCrop)


def apply_all(transforms, sample):
    """SSLTransformsWrapper over Compose: each transform over every entry of sample['data']."""
    for t in transforms:
        out, copies = [], 1
        for img in sample["data"]:
            r = t(img)
            if isinstance(t, COPIES):
                copies = len(r)
                out.extend(r)
            else:
                out.append(r)
        if copies > 1:
            for key in ("label", "data_valid", "data_idx"):
                sample[key] = [v for v in sample[key] for _ in range(copies)]
        sample["data"] = out
    return sample


# ---- VISSL's collators ------------------------------------------------------------------

def simclr_collator(batch):
    num_data_sources = len(batch[0]["data"])
    data = [torch.stack([batch[i]["data"][c] for c in range(num_data_sources) for i in range(len(batch))])]
    out = {"data": data}
    for key in ("label", "data_valid", "data_idx"):
        out[key] = [torch.LongTensor([batch[i][key][c] for c in range(num_data_sources) for i in range(len(batch))])]
    return out


def multicrop_collator(batch):
    num_crops = len(batch[0]["data"])
    data = [[torch.stack([batch[i]["data"][c] for i in range(len(batch))]) for c in range(num_crops)]]
    out = {"data": data}
    for key in ("label", "data_valid", "data_idx"):
        out[key] = [torch.LongTensor([batch[i][key][c] for c in range(num_crops) for i in range(len(batch))])]
    return out


def default_collator(batch):
    return torch.utils.data.default_collate(batch)


# ---- the pipelines ----------------------------------------------------------------------

def decode(path):
    """DiskImageDataset: open the file, PIL decode, convert to RGB."""
    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


def pipelines():
    color, blur = ImgPilColorDistortion(1.0), ImgPilGaussianBlur(0.5, 0.1, 2.0)
    tensor, norm = T.ToTensor(), T.Normalize(MEAN, STD)
    return {
        "decode": (None, None),
        "simclr": ([ImgReplicatePil(2), T.RandomResizedCrop(224), T.RandomHorizontalFlip(0.5), color, blur,
                    tensor, norm], simclr_collator),
        "swav": ([ImgPilToMultiCrop(8, [2, 6], [224, 96], [[0.14, 1], [0.05, 0.14]]), T.RandomHorizontalFlip(0.5),
                  color, blur, tensor, norm], multicrop_collator),
        "eval": ([T.Resize(256), T.CenterCrop(224), tensor, norm], default_collator),
    }


def run(paths, transforms, collate, batch_size):
    """Load len(paths) samples as a single DataLoader worker does; returns a checksum-ish count."""
    batch, crops = [], 0
    for idx, path in enumerate(paths):
        img = decode(path)
        if transforms is None:
            crops += 1
            continue
        sample = {"data": [img], "label": [idx % 10], "data_valid": [1], "data_idx": [idx]}
        batch.append(apply_all(transforms, sample))
        if len(batch) == batch_size or idx == len(paths) - 1:
            out = collate(batch)
            d = out["data"][0]
            crops += sum(t.shape[0] for t in d) if isinstance(d, list) else d.shape[0]
            batch = []
    return crops


def find_images(root):
    if os.path.isdir(os.path.join(root, "train")):
        root = os.path.join(root, "train")
    exts = (".jpg", ".jpeg", ".png")
    paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.lower().endswith(exts))
    return paths


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, help="photo corpus (ImageFolder; DIR/train if present)")
    ap.add_argument("--n", type=int, default=200, help="images per timed pass (default 200)")
    ap.add_argument("--pipelines", default="decode,simclr,swav,eval")
    ap.add_argument("--batch", type=int, default=32, help="collate batch size (default 32)")
    ap.add_argument("--reps", type=int, default=3, help="timed passes; the median is reported")
    ap.add_argument("--cpu", type=int, default=None, help="CPU to pin to (default: the first allowed)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    known = pipelines()
    names = [p for p in a.pipelines.split(",") if p]
    bad = [p for p in names if p not in known]
    if bad or a.n < 1 or a.batch < 1 or a.reps < 1:
        ap.error(f"unknown pipeline(s) {bad}; known: {','.join(known)}" if bad else "--n, --batch, --reps must be positive")
    paths = find_images(a.dir)
    if not paths:
        print(f"data_bench.py: no images under {a.dir}; make one with bench/make-photo-corpus 200 DIR", file=sys.stderr)
        return 1

    cpu = a.cpu if a.cpu is not None else min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    torch.set_num_threads(1)
    random.seed(a.seed)
    np.random.seed(a.seed)
    torch.manual_seed(a.seed)

    work = [paths[k % len(paths)] for k in range(a.n)]
    print(f"# data_bench.py: {len(paths)} images in {a.dir}, {a.n} per pass, batch {a.batch}, {a.reps} reps, "
          f"cpu {cpu}, torch {torch.__version__} threads {torch.get_num_threads()}, PIL {Image.__version__}")
    for name in names:
        transforms, collate = known[name]
        run(work[:a.batch], transforms, collate, a.batch)  # warm-up: page cache, allocator, lazy imports
        times, crops = [], 0
        for _ in range(a.reps):
            t0 = time.perf_counter()
            crops = run(work, transforms, collate, a.batch)
            times.append(time.perf_counter() - t0)
        t = statistics.median(times)
        print(f"# {name}: {crops} crops per pass, passes {' '.join(f'{x:.3f}' for x in times)} s, "
              f"best {a.n / min(times):.2f} images/s")
        print(f"vissl_data {name} {a.n / t:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
