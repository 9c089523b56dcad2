#!/usr/bin/python3
"""make_decode_fixtures.py — PIL's decodes, the reference for selfsup-decode's image decoder.

Writes to tests/golden/fixtures/decode/:
  photo_NAME_VARIANT.jpg  real photos (Debian's mate-backgrounds) cut down to 80x48 and
                          re-encoded by PIL at quality 90 as 4:2:0, 4:2:2, 4:4:4,
                          progressive and grayscale JPEGs;
  *.npy                   np.asarray(Image.open(p).convert("RGB")) for each of those and for
                          every file of tests/data/broken/ that PIL can open (broken_NAME_EXT.npy);
  draft_NAME_VARIANT_M.npy  the photo decoded after Image.draft("RGB", (M, M)): libjpeg's
                          DCT-domain downscaling by 1/2, 1/4 or 1/8;
  MANIFEST.tsv            one line per tests/data/broken/ file: name, what selfsup must do
                          (valid | invalid), and what PIL said.
A file PIL opens but selfsup does not decode (PPM, CMYK TIFF... named unsupported_*) is expected
invalid: selfsup reads JPEG, PNG, WebP, GIF, BMP and 8-bit TIFF. Run tests/data/make_broken.py first.
"""
import glob
import os
import warnings

import numpy as np
from PIL import Image
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = golden.out_dir("decode")
BROKEN = os.path.join(HERE, "..", "data", "broken")
PHOTOS = ["Aqua", "LadyBird", "Storm"]
VARIANTS = {
    "420": dict(subsampling=2),
    "422": dict(subsampling=1),
    "444": dict(subsampling=0),
    "progressive": dict(progressive=True),
    "gray": dict(),
}


def pil_decode(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Image.open(path) as im:
            return im.format, np.asarray(im.convert("RGB"))


def photos():
    for name in PHOTOS:
        im = Image.open(f"/usr/share/backgrounds/mate/nature/{name}.jpg").convert("RGB")
        im = im.resize((80, 48), Image.BICUBIC)
        for variant, kw in VARIANTS.items():
            src = im.convert("L") if variant == "gray" else im
            path = os.path.join(OUT, f"photo_{name}_{variant}.jpg")
            src.save(path, "JPEG", quality=90, **kw)
            golden.save_array(path[:-4] + ".npy", pil_decode(path)[1])


def broken():
    lines = []
    for path in sorted(glob.glob(os.path.join(BROKEN, "*"))):
        name = os.path.basename(path)
        try:
            fmt, px = pil_decode(path)
        except Exception as e:  # noqa: BLE001 - every PIL failure is a verdict
            lines.append(f"{name}\tinvalid\tPIL: {type(e).__name__}: {str(e).replace(path, name)[:80]}")
            continue
        if fmt not in ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF") or name.startswith("unsupported"):
            lines.append(f"{name}\tinvalid\tPIL opens it as {fmt}; selfsup decodes JPEG, PNG, WebP, GIF, BMP and "
                         "8-bit TIFF")
            continue
        golden.save_array(os.path.join(OUT, "broken_" + name.replace(".", "_") + ".npy"), px)
        lines.append(f"{name}\tvalid\tPIL: {fmt} {px.shape[1]}x{px.shape[0]}")
    with open(os.path.join(OUT, "MANIFEST.tsv"), "w") as f:
        f.write("\n".join(lines) + "\n")


# DCT-domain downscaling (selfsup-decode --dct-downscale MIN): PIL's Image.draft("RGB",
# (MIN, MIN)) picks the same 1/2, 1/4 or 1/8 scale and libjpeg decodes at it.
DRAFT_MINS = [40, 20, 10, 6]


def drafts():
    for name in PHOTOS:
        for variant in VARIANTS:
            path = os.path.join(OUT, f"photo_{name}_{variant}.jpg")
            for m in DRAFT_MINS:
                with Image.open(path) as im:
                    im.draft("RGB", (m, m))
                    px = np.asarray(im.convert("RGB"))
                golden.save_array(os.path.join(OUT, f"draft_{name}_{variant}_{m}.npy"), px)


def main():
    os.makedirs(OUT, exist_ok=True)
    photos()
    broken()
    drafts()
    print("wrote", len(os.listdir(OUT)), "files to", OUT)


if __name__ == "__main__":
    main()
