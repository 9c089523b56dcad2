#!/usr/bin/python3
"""make_npy_fixtures.py — write the small .npy files tests/unit/test_npy.c compares against.

Run with Debian's python3 (it has numpy):  /usr/bin/python3 tests/golden/make_npy_fixtures.py
The files land in tests/golden/fixtures/npy/ and are committed; CI only reads them.

Values follow formulas the C test recomputes, so no values are duplicated by hand:
  element i of a float array:    ((i * 7) % 11 - 5) * 0.25   (exact in float16 too)
  element i of a signed array:   (i * 7) % 11 - 5
  element i of an unsigned array:(i * 7) % 11
  element i of a bool array:     i % 3 == 0
Files named *_2x3.npy etc. are written with numpy.save and must be byte-identical to what
npy_write produces; files under read_* are odd-but-valid inputs numpy reads (versions 2.0 and
3.0, Python 2 'L' dims, harmless Fortran order); files under bad_* must be refused.
"""
import io
import os
import struct

import numpy as np
from numpy.lib import format as npfmt
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("npy")

DTYPES = ["f4", "f8", "i4", "i8", "u1", "i1", "u2", "i2", "u4", "u8", "f2", "b1"]


def pattern(dtype, shape):
    """The formula array described in the module docstring."""
    n = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    i = np.arange(n, dtype=np.int64)
    kind = np.dtype(dtype).kind
    if kind == "f":
        v = ((i * 7) % 11 - 5) * 0.25
    elif kind == "i":
        v = (i * 7) % 11 - 5
    elif kind == "u":
        v = (i * 7) % 11
    else:
        v = i % 3 == 0
    return v.astype(dtype).reshape(shape)


def save(name, arr):
    golden.save_array(os.path.join(OUT, name), arr)


def raw(name, header_dict, payload, version=(1, 0)):
    """A file written through numpy's own header writer with a header numpy.save would not
    produce (e.g. fortran_order True for a row vector)."""
    buf = io.BytesIO()
    npfmt._write_array_header(buf, header_dict, version)
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(buf.getvalue() + payload)


def handmade(name, header_text, payload, version=(1, 0), align=64, rest=0):
    """A file whose header text is given literally, padded so that the payload starts at an
    offset that is `rest` modulo `align` (numpy pads to 0 modulo 64)."""
    body = header_text.encode("latin1")
    prefix = 10 if version == (1, 0) else 12
    total = prefix + len(body) + 1
    pad = (rest - total) % align
    body += b" " * pad + b"\n"
    fmt = "<H" if version == (1, 0) else "<I"
    data = b"\x93NUMPY" + bytes(version) + struct.pack(fmt, len(body)) + body + payload
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def main():
    os.makedirs(OUT, exist_ok=True)
    for old in os.listdir(OUT):
        if old.endswith(".npy"):
            os.remove(os.path.join(OUT, old))

    # Byte-identity fixtures: what numpy.save writes.
    for d in DTYPES:
        save(f"{d}_2x3.npy", pattern(d, (2, 3)))
    save("f4_scalar.npy", pattern("f4", ()))
    save("f8_5.npy", pattern("f8", (5,)))
    save("i4_2x3x4.npy", pattern("i4", (2, 3, 4)))
    save("i1_1.npy", pattern("i1", (1,)))
    save("f4_empty_0.npy", pattern("f4", (0,)))
    save("i8_empty_2x0x3.npy", pattern("i8", (2, 0, 3)))
    save("u1_empty_12345x0.npy", pattern("u1", (12345, 0)))
    save("f4_empty_bigdim.npy", np.empty((10**15, 0), dtype="f4"))
    # Header lands exactly on 64 bytes before padding: numpy then pads a whole 64 more.
    save("u1_pad64.npy", np.zeros((0,) + (10,) * 9 + (100,), dtype="u1"))
    save("i8_extremes.npy", np.array([-(2**63), 2**63 - 1, 0, -1], dtype="<i8"))
    save("u8_extremes.npy", np.array([0, 2**64 - 1, 1, 2**63], dtype="<u8"))
    save("i4_extremes.npy", np.array([-(2**31), 2**31 - 1, 0, -1], dtype="<i4"))
    save("f4_special.npy",
         np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45, 3.4028235e38], dtype="<f4"))

    # Valid files numpy reads that our writer never produces.
    two_by_three = pattern("f4", (2, 3))
    for version in [(2, 0), (3, 0)]:
        buf = io.BytesIO()
        npfmt.write_array(buf, two_by_three, version=version)
        with open(os.path.join(OUT, f"read_f4_v{version[0]}.npy"), "wb") as f:
            f.write(buf.getvalue())
    raw("read_f4_fortran_row.npy",
        {"descr": "<f4", "fortran_order": True, "shape": (1, 3)},
        pattern("f4", (1, 3)).tobytes())
    handmade("read_i4_py2.npy",
             "{'descr': '<i4', 'fortran_order': False, 'shape': (2L, 3L), }",
             pattern("i4", (2, 3)).tobytes())
    handmade("read_f8_reordered.npy",
             '{"shape": (5,), "fortran_order": False, "descr": "<f8"}',
             pattern("f8", (5,)).tobytes())
    # A payload that is not 8-byte aligned in the file: numpy reads it; we must copy it so
    # that callers get aligned doubles.
    handmade("read_f8_misaligned.npy",
             "{'descr': '<f8', 'fortran_order': False, 'shape': (5,), }",
             pattern("f8", (5,)).tobytes(), align=8, rest=4)

    # Files that must be refused with a clear message.
    save("bad_f4_fortran.npy", np.asfortranarray(pattern("f4", (2, 3))))
    save("bad_f4_bigendian.npy", pattern("f4", (2, 3)).astype(">f4"))
    save("bad_unicode.npy", np.array(["ab", "cd"]))
    save("bad_structured.npy", np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))

    # Self-check: everything not bad_* loads in numpy with the expected shape.
    for name in sorted(os.listdir(OUT)):
        if not name.startswith("bad_"):
            np.load(os.path.join(OUT, name))
    print(f"wrote {len(os.listdir(OUT))} fixtures to {OUT}")


if __name__ == "__main__":
    main()
