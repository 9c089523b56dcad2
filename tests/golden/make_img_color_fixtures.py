#!/usr/bin/python3
"""make_img_color_fixtures.py — golden outputs of PIL 9.4 / torchvision 0.14 for
stages/augment/color.c and blur.c (checked by tests/unit/test_img_color.c).

Regenerate (Debian bookworm: python3-pil 9.4, python3-torchvision 0.14, mate-backgrounds):
    /usr/bin/python3 tests/golden/make_img_color_fixtures.py
The files land in tests/golden/fixtures/img_color/ and are committed; the tests only read them.

Inputs (uint8, shape (H, W, 3)), written as IN.npy:
  photo_a, photo_b, photo_c  crops of three real photos (odd sizes on purpose)
  noise                      uniform random RGB (every hue/saturation case, seeded)
  tiny                       a 5x2 random image (box blur radius > size, SMOOTH no-op)
  flat_g                     a photo crop whose green channel is constant (autocontrast)
  narrow                     a photo crop squeezed into levels 40..180 (autocontrast)
For every input and operation OP, IN__OP.npy holds the outputs for each parameter of
OP_params.npy (float64), stacked: shape (P, H, W, 3). autocontrast has one "parameter" (0).
"""
import os

import numpy as np
import torchvision.transforms.functional as TF
from PIL import Image, ImageEnhance, ImageFilter, ImageOps
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("img_color")
PHOTOS = "/usr/share/backgrounds/mate/nature"

PARAMS = {
    "brightness": [0.0, 0.2, 0.75, 1.0, 1.6, 3.0],
    "contrast": [-0.5, 0.0, 0.2, 0.75, 1.0, 1.6],
    "saturation": [-0.5, 0.0, 0.2, 0.75, 1.6],
    "sharpness": [0.0, 0.1, 0.5, 1.9],
    "hue": [-0.5, -0.2, -0.07, 0.07, 0.25, 0.5],
    "posterize": [1, 3, 4, 5, 6, 8],
    "solarize": [0, 1, 128, 200, 255, 256],
    "autocontrast": [0],
    "blur": [0.1, 0.5, 1.0, 1.37, 2.0, 3.3, 6.0],
}


def apply(op, im, p):
    """The PIL/torchvision call that img_OP reproduces."""
    if op == "brightness":
        return ImageEnhance.Brightness(im).enhance(p)
    if op == "contrast":
        return ImageEnhance.Contrast(im).enhance(p)
    if op == "saturation":
        return ImageEnhance.Color(im).enhance(p)
    if op == "sharpness":
        return ImageEnhance.Sharpness(im).enhance(p)
    if op == "hue":
        return TF.adjust_hue(im, p)
    if op == "posterize":
        return ImageOps.posterize(im, int(p))
    if op == "solarize":
        return ImageOps.solarize(im, int(p))
    if op == "autocontrast":
        return ImageOps.autocontrast(im)
    if op == "blur":
        return im.filter(ImageFilter.GaussianBlur(p))
    raise ValueError(op)


def crop(name, x, y, w, h):
    im = Image.open(os.path.join(PHOTOS, name)).convert("RGB")
    return np.asarray(im.crop((x, y, x + w, y + h)), dtype=np.uint8).copy()


def inputs():
    rng = np.random.default_rng(20240611)
    a = crop("LadyBird.jpg", 1250, 760, 64, 48)
    b = crop("Garden.jpg", 1500, 700, 71, 53)
    c = crop("Storm.jpg", 900, 600, 45, 37)
    flat = a.copy()
    flat[:, :, 1] = 77
    narrow = (40 + (c.astype(np.int32) * 140) // 255).astype(np.uint8)
    return {
        "photo_a": (a, list(PARAMS)),
        "photo_b": (b, list(PARAMS)),
        "photo_c": (c, list(PARAMS)),
        "noise": (rng.integers(0, 256, (30, 40, 3), dtype=np.uint8), list(PARAMS)),
        "tiny": (rng.integers(0, 256, (2, 5, 3), dtype=np.uint8), ["sharpness", "blur"]),
        "flat_g": (flat, ["autocontrast"]),
        "narrow": (narrow, ["autocontrast", "contrast"]),
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    for op, ps in PARAMS.items():
        golden.save_array(os.path.join(OUT, f"{op}_params.npy"), np.array(ps, dtype=np.float64))
    total = 0
    for name, (arr, ops) in inputs().items():
        golden.save_array(os.path.join(OUT, f"{name}.npy"), arr)
        im = Image.fromarray(arr, "RGB")
        for op in ops:
            outs = [np.asarray(apply(op, im, p), dtype=np.uint8) for p in PARAMS[op]]
            stack = np.stack(outs)
            assert stack.shape == (len(outs),) + arr.shape
            golden.save_array(os.path.join(OUT, f"{name}__{op}.npy"), stack)
            total += stack.nbytes
    print(f"wrote {OUT}: {total} bytes of outputs")


if __name__ == "__main__":
    main()
