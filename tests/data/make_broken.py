#!/usr/bin/python3
"""make_broken.py — writes tests/data/broken/: small image files, valid and broken, that the
decode stage must handle as PIL would (valid ones decode to PIL's pixels, broken ones become
VISSL's gray image with data_valid = -1): JPEG, PNG, GIF (PIL's own and containers rebuilt
around its image data: frame offsets, transparency, local and missing palettes) and WebP.

Run from anywhere: /usr/bin/python3 tests/data/make_broken.py. Uses PIL and numpy, and cc with
libjpeg for the one file PIL cannot write (an arithmetic-coded JPEG). The files are committed;
tests only read them. tests/golden/make_decode_fixtures.py then stores PIL's decodes.
"""
import io
import os
import struct
import subprocess
import tempfile
import zlib

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "broken")
PHOTO = "/usr/share/backgrounds/mate/nature/Garden.jpg"


def base_image(w=67, h=45):
    """A small real photo with odd sizes, so that chroma subsampling has edges to get right."""
    im = Image.open(PHOTO).convert("RGB")
    return im.resize((w, h), Image.BICUBIC)


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def jpeg_bytes(im, **kw):
    b = io.BytesIO()
    im.save(b, "JPEG", **kw)
    return b.getvalue()


def png_chunk(kind, payload):
    crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)


def png_bytes(rows_bytes, w, h, bit_depth, color_type, extra_chunks=b""):
    """A PNG written by hand (PIL cannot write 16-bit RGB or 2-bit gray): filter 0 rows."""
    raw = b"".join(b"\0" + r for r in rows_bytes)
    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra_chunks +
            png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))


JPEG_TOOL_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <jpeglib.h>
/* arith IN OUT: jpegtran -arithmetic (copy the DCT coefficients, re-code arithmetically).
 * ycck RAW W H OUT: compress raw CMYK bytes as an Adobe YCCK JPEG (what Photoshop writes). */
static int arith(const char *a, const char *b) {
    struct jpeg_decompress_struct in; struct jpeg_compress_struct out;
    struct jpeg_error_mgr e1, e2;
    FILE *fi = fopen(a, "rb"), *fo = fopen(b, "wb");
    if (!fi || !fo) return 1;
    in.err = jpeg_std_error(&e1); jpeg_create_decompress(&in); jpeg_stdio_src(&in, fi);
    jpeg_read_header(&in, TRUE);
    jvirt_barray_ptr *coef = jpeg_read_coefficients(&in);
    out.err = jpeg_std_error(&e2); jpeg_create_compress(&out); jpeg_stdio_dest(&out, fo);
    jpeg_copy_critical_parameters(&in, &out);
    out.arith_code = TRUE;
    jpeg_write_coefficients(&out, coef);
    jpeg_finish_compress(&out); jpeg_destroy_compress(&out);
    jpeg_finish_decompress(&in); jpeg_destroy_decompress(&in);
    fclose(fi); return fclose(fo) != 0;
}
static int ycck(const char *raw, int w, int h, const char *b) {
    unsigned char *px = malloc((size_t)w * h * 4);
    FILE *fr = fopen(raw, "rb"), *fo = fopen(b, "wb");
    if (!px || !fr || !fo || fread(px, 4, (size_t)w * h, fr) != (size_t)w * h) return 1;
    struct jpeg_compress_struct out; struct jpeg_error_mgr e;
    out.err = jpeg_std_error(&e); jpeg_create_compress(&out); jpeg_stdio_dest(&out, fo);
    out.image_width = w; out.image_height = h; out.input_components = 4; out.in_color_space = JCS_CMYK;
    jpeg_set_defaults(&out); jpeg_set_colorspace(&out, JCS_YCCK); jpeg_set_quality(&out, 90, TRUE);
    jpeg_start_compress(&out, TRUE);
    while (out.next_scanline < out.image_height) {
        JSAMPROW row = px + (size_t)out.next_scanline * w * 4;
        jpeg_write_scanlines(&out, &row, 1);
    }
    jpeg_finish_compress(&out); jpeg_destroy_compress(&out);
    fclose(fr); return fclose(fo) != 0;
}
int main(int argc, char **argv) {
    if (argc == 4 && argv[1][0] == 'a') return arith(argv[2], argv[3]);
    if (argc == 6 && argv[1][0] == 'y') return ycck(argv[2], atoi(argv[3]), atoi(argv[4]), argv[5]);
    return 2;
}
"""


def jpeg_tool(args, inputs):
    """Run the libjpeg helper above in a scratch folder; inputs: {name: bytes}."""
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "tool.c"), os.path.join(d, "tool")
        with open(src, "w") as f:
            f.write(JPEG_TOOL_C)
        subprocess.run(["cc", "-O1", src, "-o", exe, "-ljpeg"], check=True)
        for name, data in inputs.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        subprocess.run([exe] + [os.path.join(d, a) if a in inputs or a == "out.jpg" else a for a in args],
                       check=True)
        with open(os.path.join(d, "out.jpg"), "rb") as f:
            return f.read()


def arithmetic_jpeg(baseline):
    return jpeg_tool(["arith", "in.jpg", "out.jpg"], {"in.jpg": baseline})


def ycck_jpeg(im):
    """Adobe-style inverted CMYK, as Photoshop stores it, coded as YCCK."""
    cmyk = 255 - np.asarray(im.convert("CMYK"))
    return jpeg_tool(["ycck", "in.raw", str(im.width), str(im.height), "out.jpg"],
                     {"in.raw": cmyk.astype(np.uint8).tobytes()})


def adam7_png(a):
    """An interlaced (Adam7) 8-bit RGB PNG of the HxWx3 array a, written by hand."""
    h, w = a.shape[:2]
    raw = b""
    for xs, ys, dx, dy in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
                           (0, 1, 1, 2)):
        sub = a[ys::dy, xs::dx]
        if sub.shape[0] and sub.shape[1]:
            raw += b"".join(b"\0" + r.tobytes() for r in sub)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(raw)) +
            png_chunk(b"IEND", b""))


def sof_offset(data):
    """Offset of the SOF0/SOF2 marker segment in a JPEG."""
    for marker in (b"\xff\xc0", b"\xff\xc2"):
        i = data.find(marker)
        if i > 0:
            return i
    raise ValueError("no SOF")


def valid_files(im):
    write("valid_1x1.jpg", jpeg_bytes(Image.new("RGB", (1, 1), (200, 30, 90)), quality=90))
    write("valid_420.jpg", jpeg_bytes(im, quality=90, subsampling=2))
    write("valid_422.jpg", jpeg_bytes(im, quality=90, subsampling=1))
    write("valid_444.jpg", jpeg_bytes(im, quality=90, subsampling=0))
    write("valid_progressive.jpg", jpeg_bytes(im, quality=90, progressive=True))
    write("valid_gray.jpg", jpeg_bytes(im.convert("L"), quality=90))
    write("valid_cmyk.jpg", jpeg_bytes(im.convert("CMYK"), quality=90))
    write("valid_arithmetic.jpg", arithmetic_jpeg(jpeg_bytes(im, quality=90)))
    write("valid_ycck.jpg", ycck_jpeg(im))
    write("valid_interlaced.png", adam7_png(np.asarray(im)))
    b = io.BytesIO()
    rgba = im.convert("RGBA")
    rgba.putalpha(Image.linear_gradient("L").resize(im.size))
    rgba.save(b, "PNG")
    write("valid_alpha.png", b.getvalue())
    b = io.BytesIO()
    im.convert("P", palette=Image.ADAPTIVE, colors=16).save(b, "PNG", transparency=3)
    write("valid_palette.png", b.getvalue())
    b = io.BytesIO()
    im.convert("L").save(b, "PNG")
    write("valid_gray.png", b.getvalue())
    b = io.BytesIO()
    im.convert("LA").save(b, "PNG")
    write("valid_gray_alpha.png", b.getvalue())
    a = np.asarray(im).astype(np.uint16) * 257 + np.arange(im.width, dtype=np.uint16)[None, :, None]
    write("valid_rgb16.png", png_bytes([r.astype(">u2").tobytes() for r in a], im.width, im.height, 16, 2))
    g = (np.asarray(im.convert("L")).astype(np.uint16) * 3)  # 0..765: PIL clips at 255
    write("valid_gray16.png", png_bytes([r.astype(">u2").tobytes() for r in g], im.width, im.height, 16, 0))
    g2 = (np.asarray(im.convert("L")) >> 6).astype(np.uint8)
    packed = [np.packbits(np.unpackbits(r[:, None], axis=1)[:, 6:].reshape(-1)).tobytes() for r in g2]
    write("valid_gray2.png", png_bytes(packed, im.width, im.height, 2, 0))
    b = io.BytesIO()
    im.save(b, "PNG")
    write("valid_png_named.jpg", b.getvalue())  # PIL picks the format by content
    # A palette of 4 colours, pixels using indices up to 255: PIL fills the rest with a gray ramp.
    idx = (np.arange(16 * 16, dtype=np.uint8).reshape(16, 16))
    plte = png_chunk(b"PLTE", bytes([255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 9, 9]))
    write("valid_palette_short.png", png_bytes([r.tobytes() for r in idx], 16, 16, 8, 3, plte))
    data = bytearray(jpeg_bytes(im, quality=90))
    mid = len(data) // 2
    for i in range(mid, mid + 40, 7):  # flipped bits inside the entropy-coded data
        if data[i] != 0xFF and data[i] ^ 0x55 != 0xFF:
            data[i] ^= 0x55
    write("flipped_data.jpg", bytes(data))


def broken_files(im):
    good = jpeg_bytes(im, quality=90)
    write("bad_zero.jpg", b"")
    write("bad_text.jpg", b"this is not an image, only text named .jpg\n")
    write("bad_truncated.jpg", good[: len(good) // 2])
    write("bad_truncated_progressive.jpg", jpeg_bytes(im, quality=90, progressive=True)[:700])
    write("bad_header_only.jpg", good[: sof_offset(good) + 19])
    data = bytearray(good)
    sof = sof_offset(good)
    data[sof + 4] = 13  # sample precision 13: libjpeg refuses it
    write("bad_precision.jpg", bytes(data))
    data = bytearray(good)
    struct.pack_into(">HH", data, sof + 5, 65535, 65535)  # height, width in the header
    write("bad_huge.jpg", bytes(data))
    png = open(os.path.join(OUT, "valid_gray.png"), "rb").read()
    write("bad_truncated.png", png[: len(png) * 2 // 3])
    data = bytearray(png)
    data[29] ^= 0xFF  # IHDR's CRC
    write("bad_crc.png", bytes(data))
    # A tEXt chunk with a wrong CRC before the image data: PIL refuses it (it checks them).
    i = png.index(b"IDAT") - 4
    text = png_chunk(b"tEXt", b"Comment\0hello")
    write("bad_ancillary_crc.png", png[:i] + text[:-4] + b"\0\0\0\0" + png[i:])
    # A wrong CRC on the image data: PIL does not check those, so the image is valid.
    j = png.index(b"IDAT") - 4
    length = struct.unpack(">I", png[j:j + 4])[0]
    crc_at = j + 8 + length
    write("valid_idat_bad_crc.png", png[:crc_at] + bytes(b ^ 0xFF for b in png[crc_at:crc_at + 4]) + png[crc_at + 4:])
    ihdr = struct.pack(">IIBBBBB", 20000, 10000, 8, 0, 0, 0, 0)  # 200 M pixels, a token of data
    write("bad_bomb.png", b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
          png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + png_chunk(b"IEND", b""))
    data = bytearray(good)
    struct.pack_into(">HH", data, sof + 5, 10000, 20000)  # 200 M pixels, under libjpeg's 65500
    write("bad_bomb.jpg", bytes(data))
    write("bad_truncated_no_eoi.jpg", good[:-2])
    write("valid_trailing_garbage.jpg", good + b"trailing bytes after EOI")
    b = io.BytesIO()
    im.save(b, "BMP")
    write("valid_bmp_named.jpg", b.getvalue())  # the content decides, not the name


# ---- GIF and WebP ---------------------------------------------------------------------------------

def gif_parts(data):
    """A PIL-written single-frame GIF's pieces: its global palette, the LZW minimum code size and
    the image data's sub-blocks (with their terminator), to rebuild other containers around."""
    flags = data[10]
    at = 13
    palette = data[at:at + (3 << ((flags & 7) + 1))] if flags & 0x80 else b""
    at += len(palette)
    while data[at] == 0x21:  # extensions: label, then sub-blocks
        at += 2
        while data[at]:
            at += data[at] + 1
        at += 1
    assert data[at] == 0x2C, "an image descriptor"
    iflags = data[at + 9]
    at += 10
    if iflags & 0x80:
        palette = data[at:at + (3 << ((iflags & 7) + 1))]
        at += len(palette)
    start = at
    at += 1  # LZW minimum code size
    while data[at]:
        at += data[at] + 1
    return palette, data[start:at + 1]


def gif(screen, frame, palette, image_data, local=None, transparent=None, interlace=False):
    """A GIF89a: a screen with `palette` as global table, an optional graphic control extension
    naming a transparent index, one frame (x, y, w, h) with an optional local table."""
    sw, sh = screen
    x, y, w, h = frame
    bits = max(1, (len(palette) // 3 - 1).bit_length()) if palette else 1
    out = b"GIF89a" + struct.pack("<HHBBB", sw, sh, (0x80 | (bits - 1)) if palette else 0, 0, 0) + palette
    if transparent is not None:
        out += b"\x21\xf9\x04" + bytes([1, 0, 0, transparent]) + b"\x00"
    lflags = (0x40 if interlace else 0)
    if local:
        lbits = max(1, (len(local) // 3 - 1).bit_length())
        lflags |= 0x80 | (lbits - 1)
    out += b"\x2c" + struct.pack("<HHHHB", x, y, w, h, lflags) + (local or b"") + image_data + b"\x3b"
    return out


def gif_files(im):
    b = io.BytesIO()
    im.save(b, "GIF")
    plain = b.getvalue()
    write("valid_adaptive.gif", plain)  # PIL's own: a palette of the photo's colours
    b = io.BytesIO()
    im.save(b, "GIF", interlace=True)
    write("valid_interlaced.gif", b.getvalue())
    palette, data = gif_parts(plain)
    w, h = im.size
    # a screen larger than the frame, the rest filled with the transparent index's colour
    write("valid_transparent_offset.gif", gif((w + 13, h + 15), (7, 5, w, h), palette, data, transparent=3))
    # no transparency: the rest is index 0; the frame reaches past a smaller screen, which grows
    write("valid_offset_grows.gif", gif((40, 30), (10, 12, w, h), palette, data))
    # a local palette, which wins over the global one (given reversed here)
    reversed_palette = b"".join(palette[i:i + 3] for i in range(len(palette) - 3, -1, -3))
    write("valid_local_palette.gif", gif((w, h), (0, 0, w, h), reversed_palette, data, local=palette))
    # no palette at all: the indices are gray levels
    write("valid_no_palette.gif", gif((w, h), (0, 0, w, h), b"", data))
    b = io.BytesIO()
    im.convert("L").save(b, "GIF")
    write("valid_gray.gif", b.getvalue())
    write("bad_truncated.gif", plain[:len(plain) // 2])


# ---- BMP ------------------------------------------------------------------------------------

def bmp(width, height, bits, pixels, header=40, compression=0, palette=b"", masks=None, offset=None, top_down=False):
    """A BMP file around `pixels` (already in storage order, rows padded as the format wants)."""
    if header == 12:
        info = struct.pack("<IHHHH", 12, width, height, 1, bits)
    else:
        h = (2**32 - height) if top_down else height
        info = struct.pack("<IiIHHIIiiII", header, width, h, 1, bits, compression, len(pixels), 2835, 2835, 0, 0)
        if masks and header >= 56:
            info += struct.pack("<IIII", *masks)
        info += b"\0" * (header - len(info))
    extra = struct.pack("<III", *masks[:3]) if masks and header == 40 else b""
    start = 14 + len(info) + len(extra) + len(palette)
    offset = start if offset is None else offset
    return b"BM" + struct.pack("<IHHI", start + len(pixels), 0, 0, offset) + info + extra + palette + pixels


def rows(data_rows, row_bytes):
    """Rows padded to 4 bytes, bottom row first (BMP's storage order), from top-down rows."""
    pad = (-row_bytes) % 4
    return b"".join(r + b"\0" * pad for r in reversed(data_rows))


def bmp_files(im):
    for mode, name in (("RGB", "valid_rgb24.bmp"), ("P", "valid_pal8.bmp"), ("L", "valid_gray8.bmp"),
                       ("1", "valid_1bit.bmp"), ("RGBA", "valid_rgba32.bmp")):
        src = im.convert(mode) if mode != "P" else im.convert("P", palette=Image.ADAPTIVE, colors=200)
        b = io.BytesIO()
        src.save(b, "BMP")
        write(name, b.getvalue())
    w, h = 13, 7
    px = np.asarray(im.resize((w, h), Image.BICUBIC))
    rgb_rows = [px[y].tobytes() for y in range(h)]

    def pack16(v555):
        return [struct.pack(f"<{w}H", *v555[y]) for y in range(h)]
    r, g, b_ = (px[..., 0].astype(np.uint32), px[..., 1].astype(np.uint32), px[..., 2].astype(np.uint32))
    v555 = ((r >> 3) << 10) | ((g >> 3) << 5) | (b_ >> 3) | (1 << 15)  # the top bit is unused
    v565 = ((r >> 3) << 11) | ((g >> 2) << 5) | (b_ >> 3)
    write("valid_rgb555.bmp", bmp(w, h, 16, rows(pack16(v555.tolist()), 2 * w)))
    write("valid_rgb565_bitfields.bmp", bmp(w, h, 16, rows(pack16(v565.tolist()), 2 * w), compression=3,
                                            masks=(0xF800, 0x7E0, 0x1F)))
    bgr = [bytes(p for x in range(w) for p in px[y, x, ::-1]) for y in range(h)]
    write("valid_topdown.bmp", bmp(w, h, 24, b"".join(r_ + b"\0" * ((-3 * w) % 4) for r_ in bgr), top_down=True))
    full = bmp(w, h, 24, rows(bgr, 3 * w))
    write("valid_no_last_padding.bmp", full[:-((-3 * w) % 4)])
    write("bad_truncated.bmp", full[:len(full) - 3 * w])
    rgba = [bytes(v for x in range(w) for v in (*px[y, x], 200)) for y in range(h)]
    write("valid_rgba_v4.bmp", bmp(w, h, 32, rows(rgba, 4 * w), header=108, compression=3,
                                   masks=(0xFF, 0xFF00, 0xFF0000, 0xFF000000)))
    xbgr = [bytes(v for x in range(w) for v in (7, *px[y, x, ::-1])) for y in range(h)]
    write("valid_xbgr_v5.bmp", bmp(w, h, 32, rows(xbgr, 4 * w), header=124, compression=3,
                                   masks=(0xFF000000, 0xFF0000, 0xFF00, 0)))
    # palettes: 8 bits with an OS/2 header (3-byte entries), 4 bits, and an offset that skips none
    rng = np.random.default_rng(5)
    pal = rng.integers(0, 256, (256, 3), dtype=np.uint8)
    idx8 = rng.integers(0, 256, (h, w), dtype=np.uint8)
    idx8[0, :3] = 255  # indices past a shorter palette
    write("valid_os2_pal8.bmp", bmp(w, h, 8, rows([idx8[y].tobytes() for y in range(h)], w), header=12,
                                    palette=pal[:, ::-1].tobytes()))
    pal4 = b"".join(bytes((*pal[i, ::-1], 0)) for i in range(16))
    idx4 = rng.integers(0, 16, (h, w + 1), dtype=np.uint8)
    rows4 = [bytes((idx4[y, 2 * k] << 4) | idx4[y, 2 * k + 1] for k in range((w + 1) // 2)) for y in range(h)]
    write("valid_pal4.bmp", bmp(w, h, 4, rows(rows4, (w + 1) // 2), palette=pal4))
    pal8_short = b"".join(bytes((*pal[i, ::-1], 0)) for i in range(100))
    info_colors = bmp(w, h, 8, rows([idx8[y].tobytes() for y in range(h)], w), palette=pal8_short)
    info_colors = info_colors[:46] + struct.pack("<I", 100) + info_colors[50:]  # biClrUsed = 100
    write("valid_pal8_short.bmp", info_colors)
    quirk = bmp(w, h, 8, rows([idx8[y].tobytes() for y in range(h)], w), palette=pal8_short, offset=14 + 40)
    quirk = quirk[:46] + struct.pack("<I", 100) + quirk[50:]
    write("valid_offset_quirk.bmp", quirk)
    # run lengths: RLE8 (runs, an odd absolute run, end of line, a delta, end of bitmap) and RLE4
    # row 0 (bottom): 5 x 7, an absolute [1 2 3] + pad byte, 4 x 9, end of line; row 1: 13 x 200;
    # a delta (PIL reads four bytes: 2, 1, then 0, 0 as right and up); 3 x 17; end of line; four
    # more rows; end of bitmap
    rle8 = bytes([5, 7, 0, 3, 1, 2, 3, 0, 4, 9, 0, 0, 13, 200, 0, 0, 0, 2, 2, 1, 0, 0, 3, 17, 0, 0]
                 + sum(([13, 40 + k, 0, 0] for k in range(4)), []) + [0, 1])
    write("valid_rle8.bmp", bmp(w, h, 8, rle8, compression=1, palette=b"".join(bytes((*pal[i, ::-1], 0)) for i in range(256))))
    rle4 = bytes([6, 0x12, 0, 5, 0x34, 0x56, 0x70, 0, 0, 0] + sum(([13, 0x9A - k, 0, 0] for k in range(6)), []) + [0, 1])
    write("valid_rle4.bmp", bmp(w, h, 4, rle4, compression=2, palette=pal4))
    write("bad_rle_short.bmp", bmp(w, h, 8, bytes([5, 7, 0, 0, 0, 1]), compression=1, palette=pal8_short))


# ---- TIFF -------------------------------------------------------------------------------------

def tiff_file(width, height, samples, bits, photometric, chunks, extra=None, tile=None):
    """A little-endian TIFF whose strips (or tiles of `tile` px) are `chunks`, uncompressed."""
    entries = []  # (tag, type, count, value bytes)
    def add(tag, typ, values):
        fmt = {3: "H", 4: "I"}[typ]
        entries.append((tag, typ, len(values), struct.pack(f"<{len(values)}{fmt}", *values)))
    data_at = 8
    offsets, at = [], data_at
    for c in chunks:
        offsets.append(at)
        at += len(c)
    add(256, 4, [width]); add(257, 4, [height]); add(258, 3, [bits] * samples); add(259, 3, [1])
    add(262, 3, [photometric]); add(277, 3, [samples]); add(284, 3, [1])
    if tile:
        add(322, 4, [tile]); add(323, 4, [tile]); add(324, 4, offsets); add(325, 4, [len(c) for c in chunks])
    else:
        add(273, 4, offsets); add(278, 4, [height]); add(279, 4, [len(c) for c in chunks])
    if extra is not None:
        add(338, 3, [extra])
    entries.sort()
    ifd_at = at + (at % 2)
    blob = bytearray(b"II*\0" + struct.pack("<I", ifd_at) + b"".join(chunks) + b"\0" * (ifd_at - at))
    after = ifd_at + 2 + 12 * len(entries) + 4
    ifd, out_of_line = bytearray(struct.pack("<H", len(entries))), bytearray()
    for tag, typ, count, raw in entries:
        if len(raw) <= 4:
            ifd += struct.pack("<HHI", tag, typ, count) + raw + b"\0" * (4 - len(raw))
        else:
            ifd += struct.pack("<HHII", tag, typ, count, after + len(out_of_line))
            out_of_line += raw
    return bytes(blob + ifd + b"\0\0\0\0" + out_of_line)


def tiff_files(im):
    def pil_tiff(image, **kw):
        b = io.BytesIO()
        image.save(b, "TIFF", **kw)
        return b.getvalue()
    write("valid_rgb.tif", pil_tiff(im))
    write("valid_rgb_lzw.tif", pil_tiff(im, compression="tiff_lzw"))
    write("valid_rgb_deflate.tif", pil_tiff(im, compression="tiff_adobe_deflate"))
    write("valid_gray_packbits.tif", pil_tiff(im.convert("L"), compression="packbits"))
    write("valid_bilevel.tif", pil_tiff(im.convert("1")))
    write("valid_bilevel_g4.tif", pil_tiff(im.convert("1"), compression="group4"))
    write("valid_palette.tif", pil_tiff(im.convert("P", palette=Image.ADAPTIVE, colors=64)))
    rgba = im.convert("RGBA")
    rgba.putalpha(Image.linear_gradient("L").resize(im.size))
    write("valid_rgba_lzw.tif", pil_tiff(rgba, compression="tiff_lzw"))
    la = im.convert("LA")
    write("valid_gray_alpha.tif", pil_tiff(la))
    write("valid_multipage.tif", pil_tiff(im, save_all=True, append_images=[im.rotate(90), im.convert("L")]))
    full = pil_tiff(im, compression="tiff_lzw")
    write("bad_truncated.tif", full[:len(full) // 3])
    w, h = 37, 21
    px = np.asarray(im.resize((w, h), Image.BICUBIC))
    # 16 x 16 tiles, uncompressed (PIL cannot write tiles)
    tiles = []
    for ty in range(0, h, 16):
        for tx in range(0, w, 16):
            t = np.zeros((16, 16, 3), np.uint8)
            part = px[ty:ty + 16, tx:tx + 16]
            t[:part.shape[0], :part.shape[1]] = part
            tiles.append(t.tobytes())
    write("valid_tiled.tif", tiff_file(w, h, 3, 8, 2, tiles, tile=16))
    # associated (premultiplied) alpha: PIL divides it out
    a = (np.arange(w * h, dtype=np.uint32).reshape(h, w) * 7 % 256).astype(np.uint8)
    pre = (px.astype(np.uint32) * a[..., None] // 255).astype(np.uint8)
    write("valid_assoc_alpha.tif", tiff_file(w, h, 4, 8, 2, [np.dstack([pre, a]).tobytes()], extra=1))
    write("valid_min_is_white.tif", tiff_file(w, h, 1, 8, 0, [px[..., 0].tobytes()]))
    cmyk = np.dstack([255 - px, np.zeros((h, w), np.uint8)])
    write("unsupported_cmyk.tif", tiff_file(w, h, 4, 8, 5, [cmyk.tobytes()]))


def webp_files(im):
    def webp(image, **kw):
        b = io.BytesIO()
        image.save(b, "WEBP", **kw)
        return b.getvalue()
    rgba = im.convert("RGBA")
    alpha = Image.linear_gradient("L").resize(im.size)
    rgba.putalpha(alpha)
    write("valid_lossy.webp", webp(im, quality=80))
    write("valid_lossless.webp", webp(im, lossless=True))
    write("valid_lossless_alpha.webp", webp(rgba, lossless=True))
    write("valid_lossy_alpha.webp", webp(rgba, quality=70))
    write("valid_animated.webp", webp(im, save_all=True, append_images=[im.rotate(90)], duration=100, quality=80))
    lossy = webp(im, quality=80)
    write("bad_truncated.webp", lossy[:len(lossy) // 2])


def main():
    os.makedirs(OUT, exist_ok=True)
    im = base_image()
    valid_files(im)
    broken_files(im)
    gif_files(im)
    webp_files(im)
    bmp_files(im)
    tiff_files(im)
    print("wrote", len(os.listdir(OUT)), "files to", OUT)


if __name__ == "__main__":
    main()
