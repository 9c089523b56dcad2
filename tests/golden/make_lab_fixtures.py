#!/usr/bin/python3
"""make_lab_fixtures.py — golden outputs of OpenCV 4.6's cvtColor(COLOR_BGR2LAB) on 8-bit
images, for stages/augment/lab.c (checked by tests/unit/test_img_lab.c).

VISSL's ImgPil2LabTensor reverses the PIL RGB image's channels to BGR and calls
cv2.cvtColor(img, cv2.COLOR_BGR2LAB); img_rgb_to_lab takes the RGB bytes and must give the
same L, a, b bytes.

Regenerate (Debian bookworm: python3-opencv 4.6.0+dfsg-12, python3-pil, mate-backgrounds):
    /usr/bin/python3 tests/golden/make_lab_fixtures.py
The files land in tests/golden/fixtures/lab/ and are committed; the tests only read them.

Inputs (uint8, shape (H, W, 3), RGB), written as IN.npy, and OpenCV's result as IN__lab.npy
(uint8, same shape: L, a, b):
  noise      uniform random RGB, 23 rows x 37 columns (seeded)
  gradient   R along x, G along y, B along the diagonal: smooth sweeps through the gamut
  pure       black, white, grays, the primaries and secondaries, and colours whose Y lands
             on cube-root table entry 324, where OpenCV's truncating softfloat cbrt differs
             from the correctly rounded cube root (a port using libm's cbrt fails these)
  photo      a crop of a real photo (odd size)
"""
import os

import cv2
import numpy as np
from PIL import Image
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("lab")
PHOTOS = "/usr/share/backgrounds/mate/nature"


def vissl_lab_bytes(rgb):
    """The 8-bit part of VISSL's ImgPil2LabTensor: RGB -> BGR -> cvtColor(BGR2LAB)."""
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2LAB)


def gradient(h=48, w=64):
    y, x = np.mgrid[0:h, 0:w]
    r = x * 255 // (w - 1)
    g = y * 255 // (h - 1)
    b = (x + y) * 255 // (w + h - 2)
    return np.stack([r, g, b], -1).astype(np.uint8)


def pure():
    levels = [0, 1, 2, 10, 17, 18, 19, 20, 50, 100, 128, 200, 254, 255]
    rows = [[(v, v, v) for v in levels]]
    rows.append([(255, 0, 0), (0, 255, 0), (0, 0, 255), (0, 255, 255), (255, 0, 255),
                 (255, 255, 0), (128, 0, 0), (0, 128, 0), (0, 0, 128), (255, 128, 0),
                 (255, 255, 254), (1, 0, 0), (0, 1, 0), (0, 0, 1)])
    # Y index 324 (see the module docstring): found by comparing a libm-cbrt port with cv2.
    rows.append([(0, 98, 254), (0, 100, 248), (0, 101, 245), (0, 103, 238), (0, 104, 235),
                 (0, 105, 231), (0, 107, 224), (0, 108, 220), (0, 109, 216), (0, 110, 212),
                 (0, 98, 254), (0, 100, 248), (0, 101, 245), (0, 103, 238)])
    return np.array(rows, dtype=np.uint8)


def crop(name, x, y, w, h):
    im = Image.open(os.path.join(PHOTOS, name)).convert("RGB")
    return np.asarray(im.crop((x, y, x + w, y + h)), dtype=np.uint8).copy()


def inputs():
    rng = np.random.default_rng(20240612)
    return {
        "noise": rng.integers(0, 256, (23, 37, 3), dtype=np.uint8),
        "gradient": gradient(),
        "pure": pure(),
        "photo": crop("LadyBird.jpg", 1250, 760, 61, 43),
    }


def main():
    assert cv2.__version__.startswith("4.6."), cv2.__version__
    os.makedirs(OUT, exist_ok=True)
    total = 0
    for name, arr in inputs().items():
        lab = vissl_lab_bytes(arr)
        assert lab.shape == arr.shape and lab.dtype == np.uint8
        golden.save_array(os.path.join(OUT, f"{name}.npy"), arr)
        golden.save_array(os.path.join(OUT, f"{name}__lab.npy"), lab)
        total += arr.nbytes + lab.nbytes
    # VISSL's float step after cvtColor, on Lab bytes (v, v, 255 - v) for every v: the
    # tensor ImgPil2LabTensor returns, CHW float32 (its code, line for line).
    img_lab = np.stack([np.arange(256), np.arange(256), 255 - np.arange(256)], -1)[None].astype(np.uint8)
    golden.save_array(os.path.join(OUT, "float_input.npy"), img_lab)
    img_lab = img_lab.astype(np.float32)
    img_lab[:, :, 0] = (img_lab[:, :, 0] * (100.0 / 255.0)) - 50.0
    img_lab[:, :, 1:] = img_lab[:, :, 1:] - 128.0
    tensor = np.ascontiguousarray(np.transpose(img_lab, (2, 0, 1)))
    assert tensor.dtype == np.float32
    golden.save_array(os.path.join(OUT, "float_expected.npy"), tensor)
    print(f"wrote {OUT}: {total} bytes of arrays")


if __name__ == "__main__":
    main()
