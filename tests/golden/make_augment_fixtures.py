#!/usr/bin/python3
"""Golden chains for selfsup-augment: VISSL's transform lists, replayed with torchvision + PIL.

Regenerate (after `make`):  /usr/bin/python3 tests/golden/make_augment_fixtures.py [BUILD_DIR]

For each chain (SimCLR, SwAV, RotNet, Jigsaw, PIRL, colorization, eval) and a few sample indices, this runs
BUILD_DIR/tests/selfsup-test-augtrace on a real photo (cut from Debian's mate-backgrounds),
which applies the list with selfsup's own random draws and writes down every decision it took
(crop boxes, flips, jitter order and factors, blur radii, rotations, patch offsets, ...). The
script then makes the same crops and colour changes with torchvision 0.14's functional API
and PIL 9.4 (OpenCV 4.6 for ImgPil2LabTensor's bytes) — the code VISSL runs — and stores, under tests/golden/fixtures/augment/CHAIN.IDX/:
  input.npy       the photo, uint8 [H, W, 3]
  transforms.yaml the list (key `t`), seed/epoch/index in params.txt
  trace.txt       the decisions, which the unit test requires to be reproduced exactly
  expected.K.npy  torchvision/PIL's result for item K
tests/unit/test_augment_chains.c re-runs each list in C and compares. The script also prints
how far selfsup's output is from torchvision's, per chain.
"""
import glob
import os
import shutil
import subprocess
import sys

import cv2
import numpy as np
import torch
import torchvision.transforms.functional as F
from PIL import Image, ImageEnhance, ImageFilter, ImageOps
from torchvision.transforms import InterpolationMode
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = golden.out_dir("augment")
MEAN_STD = "mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]"
FILTERS = {0: InterpolationMode.NEAREST, 2: InterpolationMode.BILINEAR, 3: InterpolationMode.BICUBIC}

CHAINS = {
    "simclr": """t:
  - {name: ImgReplicatePil, num_times: 2}
  - {name: RandomResizedCrop, size: 96}
  - {name: RandomHorizontalFlip, p: 0.5}
  - {name: ImgPilColorDistortion, strength: 1.0}
  - {name: ImgPilGaussianBlur, p: 0.5, radius_min: 0.1, radius_max: 2.0}
  - {name: ToTensor}
  - {name: Normalize, %s}
""" % MEAN_STD,
    "swav": """t:
  - {name: ImgPilToMultiCrop, total_num_crops: 5, num_crops: [2, 3], size_crops: [96, 48], crop_scales: [[0.14, 1], [0.05, 0.14]]}
  - {name: RandomHorizontalFlip, p: 0.5}
  - {name: ImgPilColorDistortion, strength: 1.0}
  - {name: ImgPilGaussianBlur, p: 0.5, radius_min: 0.1, radius_max: 2.0}
  - {name: ToTensor}
  - {name: Normalize, %s}
""" % MEAN_STD,
    "rotnet": """t:
  - {name: ImgRotatePil}
  - {name: RandomResizedCrop, size: 64, scale: [0.5, 1.0]}
  - {name: RandomHorizontalFlip}
  - {name: ToTensor}
  - {name: Normalize, %s}
""" % MEAN_STD,
    "rotnet7": """t:
  - {name: RandomResizedCrop, size: 48, scale: [0.5, 1.0]}
  - {name: ImgRotatePil, num_angles: 7}
""",
    "jigsaw": """t:
  - {name: Resize, size: 256}
  - {name: RandomHorizontalFlip}
  - {name: RandomCrop, size: 255}
  - {name: RandomGrayscale, p: 0.66}
  - {name: ToTensor}
  - {name: Normalize, %s}
  - {name: ImgPatchesFromTensor, num_patches: 9, patch_jitter: 21}
  - {name: ShuffleImgPatches, perm_file: "PERM_FILE"}
""" % MEAN_STD,
    "pirl": """t:
  - {name: ImgPilToPatchesAndImage, crop_size_image: 64, crop_size_patches: 96, num_patches: 9}
  - {name: ColorJitter, brightness: 0.4, contrast: 0.4, saturation: 0.4, hue: 0.2}
  - {name: ImgPilRandomPhotometric, p: 0.66}
  - {name: RandomGrayscale, p: 0.2}
  - {name: RandomHorizontalFlip}
  - {name: ToTensor}
  - {name: Normalize, %s}
""" % MEAN_STD,
    "cifar": """t:
  - {name: Resize, size: [32, 32]}
  - {name: RandomCrop, size: 32, padding: 4, fill: [10, 200, 30]}
  - {name: RandomHorizontalFlip}
  - {name: ToTensor}
  - {name: Normalize, %s}
""" % MEAN_STD,
    "padmodes": """t:
  - {name: Resize, size: [48, 56]}
  - {name: ImgReplicatePil, num_times: 3}
  - {name: RandomCrop, size: [40, 60], padding: [3, 5, 7, 9], padding_mode: reflect, indices: [0]}
  - {name: RandomCrop, size: 70, pad_if_needed: true, padding_mode: symmetric, indices: [1]}
  - {name: RandomCrop, size: 50, padding: 2, padding_mode: edge, indices: [2]}
""",
    "colorization": """t:
  - {name: RandomResizedCrop, size: 40}
  - {name: RandomHorizontalFlip}
  - {name: ImgPil2LabTensor}
""",
    "eval": """t:
  - {name: Resize, size: 256}
  - {name: CenterCrop, size: 224}
  - {name: ToTensor}
  - {name: Normalize, %s}
""" % MEAN_STD,
}
INDICES = {"simclr": [3, 8, 21], "swav": [5, 13], "rotnet": [1, 2, 6], "jigsaw": [4, 9], "pirl": [7, 11],
           "eval": [0], "cifar": [2, 5], "padmodes": [1, 4], "colorization": [3, 10],
           "rotnet7": [1, 2, 3, 5, 8]}
# VISSL's ImgRotatePil angles: torch.linspace(0, 360, num_angles + 1)[:-1] (float32)
ROT_ANGLES = {n: torch.linspace(0, 360, n + 1)[:-1].tolist() for n in (4, 7)}
SEED, EPOCH = 7, 2


def photo():
    """A 160x120 region of a real photo, downscaled from a Debian wallpaper."""
    src = sorted(glob.glob("/usr/share/backgrounds/mate/nature/*.jpg"))[0]
    im = Image.open(src).convert("RGB")
    w, h = im.size
    im = im.crop((w // 4, h // 4, w // 4 + w // 3, h // 4 + h // 4)).resize((160, 120), Image.BICUBIC)
    return np.asarray(im).copy()


def perms():
    rng = np.random.default_rng(3)
    return np.stack([rng.permutation(9) for _ in range(12)]).astype(np.int64)


# ---- replaying the trace with torchvision / PIL ------------------------------------------------

def jitter(img, order, on, f):
    for fn in order:
        if not on[fn]:
            continue
        img = [F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue][fn](img, f[fn])
    return img


def cut_patches(arr, cuts):
    """ImgPatchesFromTensor's slices on an HWC array: (x, y, size) per patch."""
    return [arr[y:y + s, x:x + s].copy() for (x, y, s) in cuts]


def replay(img, lines, perm_table):
    data = [img]
    pending = {}
    name = None
    pirl = {}
    for line in lines:
        w = line.split()
        op, args = w[0], w[1:]
        if op == "T":
            name = args[0]
            continue
        if op == "flatten":
            data = [x for i in range(len(data)) for x in pending.get(i, [data[i]])]
            pending = {}
            continue
        i = int(args[0])
        a = args[1:]
        if op == "replicate":
            pending[i] = [data[i].copy() for _ in range(int(a[0]))]
        elif op == "rrc":
            x, y, bw, bh, ow, oh, f = map(int, a)
            out = F.resized_crop(data[i], y, x, bh, bw, [oh, ow], FILTERS[f])
            if name == "ImgPilToMultiCrop":
                pending.setdefault(i, []).append(out)
            elif name == "ImgPilToPatchesAndImage":
                pirl.setdefault(i, []).append(out)
            else:
                data[i] = out
        elif op == "resize":
            ow, oh, f = map(int, a)
            data[i] = F.resize(data[i], [oh, ow], FILTERS[f])
        elif op == "center_crop":
            data[i] = F.center_crop(data[i], [int(a[0]), int(a[1])])
        elif op == "pad":
            l, t, r, b, mode, f0, f1, f2 = map(int, a)
            modes = ["constant", "edge", "reflect", "symmetric"]
            data[i] = F.pad(data[i], [l, t, r, b], fill=(f0, f1, f2) if mode == 0 else 0, padding_mode=modes[mode])
        elif op == "crop":
            x, y, cw, ch = map(int, a)
            data[i] = F.crop(data[i], y, x, ch, cw)
        elif op == "flip":
            data[i] = [np.ascontiguousarray(p[:, ::-1]) for p in data[i]] if isinstance(data[i], list) \
                else F.hflip(data[i])
        elif op == "jitter":
            order = [int(v) for v in a[0:4]]
            on = [v == "1" for v in a[4:8]]
            f = [float(v) for v in a[8:12]]
            data[i] = jitter(data[i], order, on, f)
        elif op == "gray":
            data[i] = F.rgb_to_grayscale(data[i], num_output_channels=3)
        elif op == "blur":
            data[i] = data[i].filter(ImageFilter.GaussianBlur(float(a[0])))
        elif op == "photometric":
            im = ImageOps.posterize(data[i], int(a[0]))
            im = ImageEnhance.Sharpness(im).enhance(float(a[1]))
            im = ImageOps.solarize(im, int(a[2]))
            data[i] = ImageOps.autocontrast(im)
        elif op == "solarize":
            data[i] = ImageOps.solarize(data[i], int(a[0]))
        elif op == "lab":
            # ImgPil2LabTensor's 8-bit part (its float step is checked with fixtures/lab)
            data[i] = cv2.cvtColor(np.ascontiguousarray(np.asarray(data[i])[:, :, ::-1]), cv2.COLOR_BGR2LAB)
        elif op == "rotate":
            angle = float(a[0])
            if not any(angle in angles for angles in ROT_ANGLES.values()):
                raise SystemExit(f"rotation by {angle!r} is not one of VISSL's angles")
            data[i] = F.rotate(data[i], angle)
        elif op == "patch":
            x, y, s = map(int, a)
            if name == "ImgPilToPatchesAndImage":
                pirl.setdefault(("cuts", i), []).append((x, y, s))
            else:
                if not isinstance(data[i], dict):
                    data[i] = {"src": np.asarray(data[i]), "cuts": []}
                data[i]["cuts"].append((x, y, s))
        elif op == "permute":
            image, big = pirl[i]
            patches = cut_patches(np.asarray(big), pirl[("cuts", i)])
            pending[i] = [image] + [Image.fromarray(patches[int(p)]) for p in a]
            pirl = {}
        elif op == "shuffle":
            d = data[i]
            patches = cut_patches(d["src"], d["cuts"])
            data[i] = [patches[int(p)] for p in perm_table[int(a[0])]]
        else:
            raise SystemExit(f"unknown trace line: {line}")
        # ImgPatchesFromTensor leaves a dict until ShuffleImgPatches stacks it
    out = []
    for d in data:
        if isinstance(d, dict):
            d = cut_patches(d["src"], d["cuts"])
        out.append(np.stack([np.asarray(p) for p in d]) if isinstance(d, list) else np.asarray(d))
    return out


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    tool = os.path.join(build, "tests", "selfsup-test-augtrace")
    if not os.access(tool, os.X_OK):
        raise SystemExit(f"{tool} missing: make {tool}")
    img = photo()
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    perm_path = os.path.join(OUT, "perms.npy")
    golden.save_array(perm_path, perms())
    golden.save_array(os.path.join(OUT, "input.npy"), img)
    worst = {}
    for chain, yaml in CHAINS.items():
        for idx in INDICES[chain]:
            d = os.path.join(OUT, f"{chain}.{idx}")
            os.makedirs(d)
            text = yaml.replace("PERM_FILE", "PERM_FILE")
            with open(os.path.join(d, "transforms.yaml"), "w") as f:
                f.write(text)
            run_yaml = os.path.join(d, "run.yaml")
            with open(run_yaml, "w") as f:
                f.write(text.replace("PERM_FILE", perm_path))
            subprocess.run([tool, os.path.join(OUT, "input.npy"), run_yaml, str(SEED), str(EPOCH), str(idx), d],
                           check=True)
            os.remove(run_yaml)
            with open(os.path.join(d, "trace.txt")) as f:
                lines = [l for l in f.read().splitlines() if l]
            expected = replay(Image.fromarray(img), lines, perms())
            ours = sorted(glob.glob(os.path.join(d, "out.*.npy")))
            if len(ours) != len(expected):
                raise SystemExit(f"{chain}.{idx}: selfsup made {len(ours)} items, the replay {len(expected)}")
            for k, e in enumerate(expected):
                golden.save_array(os.path.join(d, f"expected.{k}.npy"), e)
                o = np.load(os.path.join(d, f"out.{k}.npy"))
                if o.shape != e.shape:
                    raise SystemExit(f"{chain}.{idx} item {k}: shape {o.shape} vs torchvision {e.shape}")
                diff = np.abs(o.astype(int) - e.astype(int))
                w = worst.setdefault(chain, [0, 0, 0])
                w[0] = max(w[0], int(diff.max()))
                w[1] += int((diff > 1).sum())
                w[2] += diff.size
                os.remove(os.path.join(d, f"out.{k}.npy"))
            os.remove(os.path.join(d, "label.npy"))
    for chain, (mx, over1, total) in worst.items():
        print(f"{chain}: max |selfsup - torchvision| = {mx}, values off by more than 1: {over1} of {total}")


if __name__ == "__main__":
    main()
