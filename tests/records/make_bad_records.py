#!/usr/bin/env python3
"""make_bad_records.py — regenerate tests/records/bad/: malformed records, one defect each.

Every file starts from the same valid record, written by tools/selfsup_records.py:

    offset   0  header (64 bytes), 2 tensors, size 448
    offset  64  descriptor #0 'data.0'  uint8 [2, 3, 4]  payload at 320, 24 bytes
    offset 192  descriptor #1 'label'   int64 []         payload at 384, 8 bytes
    offset 320  payloads

and then changes exactly one field (or cuts the file short). EXPECT lists each file with a
substring of the error the C reader (shm/record.c) must give, for both rec_parse on the whole
file and rec_fd_read on it as a stream; test_record.c checks that. As a second opinion this
script checks that the Python reader rejects every file too, and that the base is valid.

    python3 tests/records/make_bad_records.py     (from anywhere; writes next to itself)
"""
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import selfsup_records as sr  # noqa: E402

D0, D1 = 64, 192  # descriptor offsets
NAME, DTYPE, NDIM, RES0, OFFSET, NBYTES, SHAPE, RES1 = 0, 32, 34, 36, 40, 48, 56, 120


def base():
    data = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    b = sr.encode_record({"data.0": data, "label": np.array(7, np.int64)}, seq=5, epoch=1)
    assert len(b) == 448, len(b)
    return bytearray(b)


def put(fmt, off, value):
    def f(b):
        struct.pack_into(fmt, b, off, value)
        return b
    return f


def name(desc, raw):
    def f(b):
        b[desc:desc + 32] = raw.ljust(32, b"\0")
        return b
    return f


def cut(n):
    return lambda b: b[:n]


def both(*fs):
    def f(b):
        for g in fs:
            b = g(b)
        return b
    return f


# (file name, corruption, substring of the C error)
CASES = [
    ("bad_magic", put("<I", 0, 0x12345678), "bad magic 0x12345678"),
    ("big_endian", put("<I", 0, 0x53535243), "big-endian"),
    ("wrong_version", put("<H", 4, 2), "version 2, expected 1"),
    ("bad_kind", put("<H", 6, 7), "unknown kind 7"),
    ("size_not_multiple_of_64", both(put("<Q", 16, 449), lambda b: b + b"\0"),
     "size 449 is not a positive multiple of 64"),
    ("size_zero", put("<Q", 16, 0), "size 0 is not a positive multiple of 64"),
    ("size_over_limit", put("<Q", 16, 1 << 31), "over the limit of 1073741824 bytes"),
    ("truncated_header", cut(30), "truncated"),
    ("truncated_payload", cut(400), "truncated"),
    ("n_tensors_too_large", put("<I", 12, 300), "n_tensors 300 is over the limit of 256"),
    ("descriptor_table_past_end", put("<I", 12, 4), "descriptor table ending at 576, past the record size 448"),
    ("reserved_header_nonzero", put("<B", 50, 1), "reserved header byte 10 is 0x01"),
    ("eos_with_tensors", put("<H", 6, 2), "end-of-stream record has 2 tensors"),
    ("name_without_nul", name(D0, b"a" * 32), "tensor #0: name is not NUL-terminated"),
    ("name_empty", name(D1, b""), "tensor #1: name is empty"),
    ("name_nonprintable", name(D0, b"data\x01.0"), "non-printable byte 0x01 at 4"),
    ("name_with_space", name(D1, b"my label"), "non-printable byte 0x20 at 2"),
    ("name_not_nul_padded", name(D1, b"label\0X"), "name is not NUL-padded (byte 6 is 0x58)"),
    ("duplicate_names", name(D1, b"data.0"), "tensor 'data.0' (#1): name repeats tensor #0"),
    ("bad_dtype", put("<H", D1 + DTYPE, 11), "tensor 'label' (#1): unknown dtype code 11"),
    ("dtype_zero", put("<H", D0 + DTYPE, 0), "tensor 'data.0' (#0): unknown dtype code 0"),
    ("ndim_9", put("<H", D0 + NDIM, 9), "ndim 9 is over the limit of 8"),
    ("unused_dim_nonzero", put("<Q", D1 + SHAPE, 1), "shape[0] is 1 but ndim is 0"),
    ("reserved0_nonzero", put("<I", D0 + RES0, 5), "reserved0 is 0x00000005"),
    ("reserved1_nonzero", put("<B", D1 + RES1 + 7, 9), "reserved1 byte 7 is 0x09"),
    ("nbytes_mismatch", put("<Q", D0 + NBYTES, 25), "nbytes 25 != 24"),
    ("shape_overflow", both(put("<Q", D0 + SHAPE, 1 << 32), put("<Q", D0 + SHAPE + 8, 1 << 32)),
     "shape × uint8 size overflows 64 bits"),
    ("offset_misaligned", put("<Q", D1 + OFFSET, 392), "payload offset 392 is not a multiple of 64"),
    ("offset_in_descriptor_table", put("<Q", D0 + OFFSET, 256),
     "payload offset 256 is inside the header and descriptor table, which end at 320"),
    ("offset_overlap", put("<Q", D1 + OFFSET, 320), "payload offset 320 overlaps the previous payload, which ends at 344"),
    ("offset_past_end", put("<Q", D1 + OFFSET, 448), "payload offset 448 + 8 bytes is past the record end 448"),
    ("nbytes_past_end", both(put("<Q", D1 + SHAPE, 9), put("<H", D1 + NDIM, 1), put("<Q", D1 + NBYTES, 72)),
     "payload offset 384 + 72 bytes is past the record end 448"),
]


def main():
    out = os.path.join(HERE, "bad")
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.remove(os.path.join(out, f))
    good = bytes(base())
    list(sr.read_records(__import__("io").BytesIO(good)))  # the base itself must be valid
    lines = []
    for fname, corrupt, expect in CASES:
        b = bytes(corrupt(base()))
        assert b != good, fname
        try:
            list(sr.read_records(__import__("io").BytesIO(b)))
        except sr.RecordError:
            pass
        else:
            sys.exit("make_bad_records: the Python reader accepts %s" % fname)
        with open(os.path.join(out, fname + ".rec"), "wb") as f:
            f.write(b)
        lines.append("%s.rec: %s\n" % (fname, expect))
    with open(os.path.join(out, "EXPECT"), "w", encoding="utf-8") as f:
        f.write("# file: substring of the error shm/record.c must report (see ../make_bad_records.py)\n")
        f.writelines(lines)
    print("wrote %d bad records to %s" % (len(CASES), out))


if __name__ == "__main__":
    main()
