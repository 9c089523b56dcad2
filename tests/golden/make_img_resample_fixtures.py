#!/usr/bin/python3
"""make_img_resample_fixtures.py — PIL 9.4 / torchvision 0.14 answers for stages/augment/resample.c
(checked by tests/unit/test_img_resample.c).

Regenerate (Debian's python3-pil and python3-torchvision, and the mate-backgrounds photos):
    /usr/bin/python3 tests/golden/make_img_resample_fixtures.py
The files land in tests/golden/fixtures/img_resample/ and are committed; CI only reads them.

Inputs, cut from real photos (/usr/share/backgrounds/mate/nature/), saved as uint8 HWC (h, w, c):
    in_0.npy  97x71 RGB      in_1.npy  160x120 RGB     in_2.npy  64x64 RGB (square)
    in_3.npy  83x61 L        in_4.npy  48x48 L (square)
and, for the rotations only (rotate_inputs): in_5 .. in_8 noise 1x1 RGB, 2x3 RGB, 3x2 L, 5x5 L;
in_9 23x17 RGB and in_10 16x16 RGB photo crops; in_11 33000x1 L noise (beyond affine_fixed's
range); in_12 31x47 RGB photo crop.
L images are stored with an explicit channel axis (h, w, 1), as every output is.

Case tables (int32, one row per case) say what the C side must do; the expected output of case i
of table T is T_i.npy:
    resize.npy  [input, x, y, w, h, out_w, out_h, filter]  img_resize(img_view(in, x, y, w, h))
                filter is PIL's number (0 NEAREST, 2 BILINEAR, 3 BICUBIC); a view smaller than
                the image is torchvision F.resized_crop (= PIL crop then resize)
    crop.npy    [input, x0, y0, w, h]                       img_crop_padded (CenterCrop padding)
    rotate.npy  [input, angle, path]  float64               img_rotate (F.rotate, NEAREST);
                path is the one PIL takes: 0 transpose/copy, 1 ImagingScaleAffine,
                2 affine_fixed, 3 ImagingTransformAffine's float walk
    rotate_linspace.npy  float64 (40, 41): row n-1 is torch.linspace(0, 360, n + 1) (float32
                values, as ImgRotatePil computes its angles), NaN padded
    flip.npy    [input]                                     img_flip_lr (F.hflip)
    gray.npy    [input]       gray_i.npy = convert("L"), gray3_i.npy = rgb_to_grayscale(img, 3)
    tofloat.npy [input]       tofloat_i.npy = Normalize(mean_i, std_i)(ToTensor()(img)), float32
                CHW; tofloat_mean_i.npy / tofloat_std_i.npy hold mean and std (float32)
"""
import math
import os

import numpy as np
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as F
from PIL import Image
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("img_resample")
PHOTOS = "/usr/share/backgrounds/mate/nature/"

NEAREST, BILINEAR, BICUBIC = 0, 2, 3
TV_MODE = {NEAREST: T.InterpolationMode.NEAREST, BILINEAR: T.InterpolationMode.BILINEAR,
           BICUBIC: T.InterpolationMode.BICUBIC}


def save(name, arr):
    golden.save_array(os.path.join(OUT, name), arr)


def hwc(img):
    a = np.asarray(img, dtype=np.uint8)
    return a[:, :, None] if a.ndim == 2 else a


def cut(photo, box, size, mode):
    """A region of a photo, shrunk to `size` so that it has real detail at pixel scale."""
    im = Image.open(os.path.join(PHOTOS, photo)).convert("RGB").crop(box)
    im = im.resize(size, Image.Resampling.BOX)
    return im.convert(mode) if mode != "RGB" else im


def inputs():
    return [
        cut("Garden.jpg", (400, 300, 400 + 388, 300 + 284), (97, 71), "RGB"),
        cut("LadyBird.jpg", (600, 400, 600 + 480, 400 + 360), (160, 120), "RGB"),
        cut("RainDrops.jpg", (200, 200, 200 + 256, 200 + 256), (64, 64), "RGB"),
        cut("TwoWings.jpg", (500, 300, 500 + 332, 300 + 244), (83, 61), "L"),
        cut("Aqua.jpg", (100, 100, 100 + 192, 100 + 192), (48, 48), "L"),
    ]


def resize_cases(ims):
    """Rows [input, x, y, w, h, out_w, out_h, filter] and PIL's outputs."""
    rows, outs = [], []

    def add(i, box, out_size, flt):
        x, y, w, h = box
        img = ims[i]
        if box == (0, 0) + img.size:
            want = img.resize(out_size, flt)
        else:
            want = img.crop((x, y, x + w, y + h)).resize(out_size, flt)
            # torchvision's resized_crop is exactly that (size is (h, w) there)
            tv = F.resized_crop(img, y, x, h, w, [out_size[1], out_size[0]], TV_MODE[flt])
            assert np.array_equal(hwc(tv), hwc(want))
        rows.append([i, x, y, w, h, out_size[0], out_size[1], flt])
        outs.append(hwc(want))

    whole = lambda i: (0, 0) + ims[i].size
    for flt in (BILINEAR, BICUBIC):
        add(0, whole(0), (224, 224), flt)    # up, odd ratios
        add(0, whole(0), (32, 40), flt)      # down in x, down less in y
        add(0, whole(0), (96, 96), flt)      # barely down in x, up in y
        add(0, whole(0), (50, 71), flt)      # width only: no vertical pass
        add(0, whole(0), (97, 120), flt)     # height only: no horizontal pass
        add(3, whole(3), (40, 30), flt)      # L, down
        add(3, whole(3), (150, 111), flt)    # L, up
        add(1, (20, 10, 100, 90), (112, 112), flt)   # resized_crop boxes
        add(1, (37, 0, 77, 120), (64, 64), flt)
        add(1, (131, 97, 29, 23), (112, 112), flt)   # a small box at the corner, upscaled a lot
        add(1, (3, 5, 150, 110), (17, 13), flt)      # a strong downscale
        add(1, whole(1), (2, 3), flt)                # windows of 100+ taps
        add(1, (10, 10, 1, 2), (5, 7), flt)          # from a 1x2 box
    # torchvision Resize(n) on PIL: the shorter side becomes n, aspect kept
    for i, n in ((1, 72), (0, 33)):
        w, h = ims[i].size
        tv = T.Resize(n, interpolation=T.InterpolationMode.BILINEAR)(ims[i])
        want = ims[i].resize(tv.size, BILINEAR)
        assert np.array_equal(hwc(tv), hwc(want))
        add(i, whole(i), tv.size, BILINEAR)
    add(2, whole(2), (64, 64), BICUBIC)     # same size: a copy
    add(0, whole(0), (50, 37), NEAREST)
    add(0, whole(0), (150, 100), NEAREST)
    add(3, whole(3), (31, 77), NEAREST)
    add(1, (20, 10, 100, 90), (64, 64), NEAREST)
    return rows, outs


def noise_image(w, h, mode, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (h, w, 3 if mode == "RGB" else 1), dtype=np.uint8)
    return Image.fromarray(a if mode == "RGB" else a[:, :, 0], mode)


def rotate_inputs():
    """in_5 .. in_12, used by the rotations only: tiny noise images, small photo crops (odd
    sizes, square and not) and one 33000x1 row, wide enough that PIL leaves affine_fixed's
    16.16 range for its float walk."""
    return [
        noise_image(1, 1, "RGB", 5),
        noise_image(2, 3, "RGB", 6),
        noise_image(3, 2, "L", 7),
        noise_image(5, 5, "L", 8),
        cut("Garden.jpg", (900, 500, 900 + 230, 500 + 170), (23, 17), "RGB"),
        cut("LadyBird.jpg", (700, 450, 700 + 160, 450 + 160), (16, 16), "RGB"),
        noise_image(33000, 1, "L", 11),
        cut("RainDrops.jpg", (300, 100, 300 + 155, 100 + 235), (31, 47), "RGB"),
    ]


def pil_rotate_path(size, angle):
    """Which path PIL 9.4's Image.rotate(angle, NEAREST) takes (0 transpose or copy, 1
    ImagingScaleAffine, 2 affine_fixed, 3 the float walk), by its own arithmetic."""
    w, h = size
    angle = angle % 360.0
    if angle in (0, 180) or (angle in (90, 270) and w == h):
        return 0
    t = -math.radians(angle)
    a = [round(math.cos(t), 15), round(math.sin(t), 15), 0.0,
         round(-math.sin(t), 15), round(math.cos(t), 15), 0.0]
    a[2], a[5] = a[0] * -(w / 2.0) + a[1] * -(h / 2.0) + a[2], \
        a[3] * -(w / 2.0) + a[4] * -(h / 2.0) + a[5]
    a[2] += w / 2.0
    a[5] += h / 2.0
    if a[1] == 0 and a[3] == 0:
        return 1
    fits = all(abs(x * a[0] + y * a[1] + a[2]) < 32768.0 and
               abs(x * a[3] + y * a[4] + a[5]) < 32768.0
               for x, y in ((0, 0), (w, h), (0, h), (w, 0)))
    return 2 if fits else 3


def rotate_cases(ims):
    """Rows [input, angle, path] (float64; path as pil_rotate_path says, for the test to
    check that every path is covered)."""
    seven = float(np.linspace(0, 360, 8)[1])     # 51.42857142857143
    seven_t = torch.linspace(0, 360, 8)[1:].tolist()  # ImgRotatePil's own angles (float32)
    rng = np.random.default_rng(2023)
    rand = [float(v) for v in rng.uniform(-400.0, 400.0, 3)]
    main = [45.0, 120.0, seven, 240.0, 300.0, 10.5, -30.0, 359.9] + rand
    edge = [90.0, 270.0, -90.0, 360.0, 720.0, 450.0,
            1e-14,          # sine rounds to 0 at 15 digits: ImagingScaleAffine, identity
            180.0 + 1e-13,  # the same about 180
            -1e-20,         # -1e-20 % 360.0 == 360.0: the affine path, not the copy
            89.99999999999999, 135.0, 225.0, 315.0] + seven_t
    rows = [[i, a] for i in (0, 2, 3, 4) for a in (0.0, 90.0, 180.0, 270.0)]
    for i in (5, 6, 7, 8):                  # tiny noise: everything
        rows += [[i, a] for a in main + edge]
    for i in (9, 10):                       # small photos: all but the repeats
        rows += [[i, a] for a in main + edge[:3] + edge[6:9] + seven_t[:2]]
    rows += [[12, a] for a in main[:6]]      # 31x47 RGB photo (tall)
    rows += [[3, a] for a in main[:4] + rand[:2]]   # 83x61 L photo
    rows += [[4, a] for a in main[:4] + rand[:2]]   # 48x48 L photo (square)
    rows += [[0, 45.0]]                     # 97x71 RGB photo
    rows += [[11, 0.002], [11, 180.3]]      # 33000x1: the float walk, both directions
    out = [[float(i), float(a), float(pil_rotate_path(ims[i].size, a))] for i, a in rows]
    for i, a, p in out:
        # F.rotate is Image.rotate(angle, NEAREST, expand=False, fillcolor=0)
        im = ims[int(i)]
        assert np.array_equal(hwc(F.rotate(im, a)),
                              hwc(im.rotate(a, Image.Resampling.NEAREST, fillcolor=0))), (i, a)
    paths = {p for _, _, p in out}
    assert paths == {0.0, 1.0, 2.0, 3.0}, paths
    assert all(p == 3 for i, _, p in out if i == 11)
    return out


def linspace_table():
    """torch.linspace(0, 360, n + 1) for n = 1..40 (ImgRotatePil's angles, float32 widened to
    float64 as .tolist() does), row n - 1, padded with NaN."""
    t = np.full((40, 41), np.nan)
    for n in range(1, 41):
        t[n - 1, :n + 1] = torch.linspace(0, 360, n + 1).tolist()
    return t


def center_crop_box(img, cw, ch):
    """The (x0, y0) of the PIL crop box that equals torchvision CenterCrop((ch, cw)), padding
    included: a side that is padded starts at -pad_left, else at round((size - crop) / 2)."""
    iw, ih = img.size
    x0 = -((cw - iw) // 2) if cw > iw else int(round((iw - cw) / 2.0))
    y0 = -((ch - ih) // 2) if ch > ih else int(round((ih - ch) / 2.0))
    return x0, y0


def crop_cases(ims):
    rows, outs = [], []
    for i, cw, ch in ((0, 130, 130), (0, 60, 100), (1, 50, 50), (3, 90, 64), (2, 63, 65)):
        tv = T.CenterCrop((ch, cw))(ims[i])
        x0, y0 = center_crop_box(ims[i], cw, ch)
        want = ims[i].crop((x0, y0, x0 + cw, y0 + ch))
        assert np.array_equal(hwc(tv), hwc(want)), (i, cw, ch)
        rows.append([i, x0, y0, cw, ch])
        outs.append(hwc(want))
    # a box hanging off the top-left and one off the bottom-right corner
    for i, x0, y0, w, h in ((1, -7, -5, 40, 30), (0, 80, 60, 30, 20)):
        rows.append([i, x0, y0, w, h])
        outs.append(hwc(ims[i].crop((x0, y0, x0 + w, y0 + h))))
    return rows, outs


def main():
    # the C side promises these versions' pixels; other versions may round differently
    import PIL
    import torchvision
    assert PIL.__version__.startswith("9.4."), f"PIL {PIL.__version__}, want 9.4"
    assert torchvision.__version__.startswith("0.14."), f"torchvision {torchvision.__version__}"
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.endswith(".npy"):
            os.remove(os.path.join(OUT, f))
    ims = inputs() + rotate_inputs()
    for i, im in enumerate(ims):
        save(f"in_{i}.npy", hwc(im))

    rows, outs = resize_cases(ims)
    save("resize.npy", np.array(rows, np.int32))
    for k, o in enumerate(outs):
        save(f"resize_{k}.npy", o)

    rows, outs = crop_cases(ims)
    save("crop.npy", np.array(rows, np.int32))
    for k, o in enumerate(outs):
        save(f"crop_{k}.npy", o)

    rows = rotate_cases(ims)
    save("rotate.npy", np.array(rows, np.float64))
    for k, (i, a, _) in enumerate(rows):
        save(f"rotate_{k}.npy", hwc(F.rotate(ims[int(i)], a)))
    save("rotate_linspace.npy", linspace_table())

    rows = [[0], [2], [3]]
    save("flip.npy", np.array(rows, np.int32))
    for k, (i,) in enumerate(rows):
        save(f"flip_{k}.npy", hwc(F.hflip(ims[i])))

    rows = [[0], [2]]
    save("gray.npy", np.array(rows, np.int32))
    for k, (i,) in enumerate(rows):
        save(f"gray_{k}.npy", hwc(ims[i].convert("L")))
        save(f"gray3_{k}.npy", hwc(F.rgb_to_grayscale(ims[i], num_output_channels=3)))

    norms = [(0, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
             (2, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]),
             (3, [0.5], [0.25])]
    save("tofloat.npy", np.array([[i] for i, _, _ in norms], np.int32))
    for k, (i, mean, std) in enumerate(norms):
        t = T.Normalize(mean, std)(T.ToTensor()(ims[i]))
        save(f"tofloat_{k}.npy", t.numpy().astype(np.float32))
        save(f"tofloat_mean_{k}.npy", np.array(mean, np.float32))
        save(f"tofloat_std_{k}.npy", np.array(std, np.float32))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
