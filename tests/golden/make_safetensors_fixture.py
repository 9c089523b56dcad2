#!/usr/bin/python3
"""make_safetensors_fixture.py — write the safetensors files tests/unit/test_safetensors.c
reads, without the `safetensors` package (Debian has none): the format is built by hand with
struct + json, following the reference serializer (huggingface/safetensors, tensor.rs):

  * tensors ordered by descending dtype alignment rank, then by name;
  * header = compact JSON (separators "," and ":"), "__metadata__" first, then each tensor as
    {"dtype":..,"shape":[..],"data_offsets":[begin,end]} in data order;
  * header padded with spaces to a multiple of 8, preceded by its length as u64 little-endian.

Run with /usr/bin/python3 tests/golden/make_safetensors_fixture.py; the files go to
tests/golden/fixtures/safetensors/ and are committed. Values follow the formula of
make_npy_fixtures.py per element index i (k = (i * 7) % 11): floats (k - 5) * 0.25 (BF16 is
the top half of the float32), signed k - 5, unsigned k, BOOL i % 3 == 0, F8 types the raw byte
k. tests/golden/safetensors_readback.py imports `serialize` and `pattern` from here.
"""
import json
import os
import struct

import numpy as np
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("safetensors")

# The reference's Dtype enum order, which is its alignment order.
RANK = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32",
        "F32", "F64", "I64", "U64"]
NUMPY = {"BOOL": "|b1", "U8": "|u1", "I8": "|i1", "F8_E5M2": "|u1", "F8_E4M3": "|u1",
         "I16": "<i2", "U16": "<u2", "F16": "<f2", "BF16": "<u2", "I32": "<i4", "U32": "<u4",
         "F32": "<f4", "F64": "<f8", "I64": "<i8", "U64": "<u8"}


def pattern(dtype, shape):
    """The formula values for a tensor, as raw little-endian bytes."""
    n = 1
    for d in shape:
        n *= d
    i = np.arange(n, dtype=np.int64)
    k = (i * 7) % 11
    if dtype == "BF16":
        f32 = ((k - 5) * 0.25).astype("<f4")
        return (f32.view("<u4") >> 16).astype("<u2").tobytes()
    if dtype in ("F16", "F32", "F64"):
        return ((k - 5) * 0.25).astype(NUMPY[dtype]).tobytes()
    if dtype.startswith("I"):
        return (k - 5).astype(NUMPY[dtype]).tobytes()
    if dtype == "BOOL":
        return (i % 3 == 0).astype("|b1").tobytes()
    return k.astype(NUMPY[dtype]).tobytes()  # unsigned and F8: the byte k


def serialize(tensors, metadata=None):
    """tensors: {name: (dtype, shape, bytes)}; metadata: {str: str} or None. The reference's
    HashMap gives metadata in arbitrary order; we sort keys, as selfsup's writer does."""
    names = sorted(tensors, key=lambda n: (-RANK.index(tensors[n][0]), n.encode()))
    header = {}
    if metadata is not None:
        header["__metadata__"] = dict(sorted(metadata.items()))
    at = 0
    for name in names:
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + len(data)]}
        at += len(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(tensors[n][2] for n in names)


# name -> (dtype, shape): a VISSL-like checkpoint touching every dtype, 0-d and empty tensors.
MIX = {
    "trunk._feature_blocks.conv1.weight": ("F32", (4, 3, 2, 2)),
    "trunk._feature_blocks.bn1.running_var": ("F64", (4,)),
    "trunk._feature_blocks.bn1.num_batches_tracked": ("I64", ()),
    "heads.0.clf.0.weight": ("F16", (3, 5)),
    "heads.0.clf.0.bias": ("BF16", (3,)),
    "loss.queue": ("F32", (0, 8)),
    "loss.queue_ptr": ("I32", (1,)),
    "train.sampler_position": ("U64", (2,)),
    "train.rng": ("U32", (4,)),
    "train.small_i16": ("I16", (2, 2)),
    "train.small_u16": ("U16", (3,)),
    "train.bytes": ("U8", (7,)),
    "train.signed_bytes": ("I8", (5,)),
    "train.mask": ("BOOL", (2, 3)),
    "train.f8a": ("F8_E4M3", (2,)),
    "train.f8b": ("F8_E5M2", (2,)),
}
MIX_META = {"format": "pt", "phase": "3", "note": "caf\u00e9 \"quoted\"\n"}


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def unordered():
    """Valid but not canonical: pretty JSON, metadata last, entries in name order with data in
    another order, and a header length that is not a multiple of 8 (data misaligned)."""
    a, b = pattern("F32", (2, 2)), pattern("U8", (3,))
    c = pattern("I64", (1,))
    header = {
        "a": {"shape": [2, 2], "dtype": "F32", "data_offsets": [3, 19]},
        "b": {"dtype": "U8", "data_offsets": [0, 3], "shape": [3]},
        "c": {"dtype": "I64", "shape": [1], "data_offsets": [19, 27], "extra": "ignored"},
        "__metadata__": {"who": "hand"},
    }
    text = json.dumps(header, indent=1).encode()
    if len(text) % 8 == 0:
        text += b" "
    return struct.pack("<Q", len(text)) + text + b + a + c


def main():
    os.makedirs(OUT, exist_ok=True)
    mix = {n: (d, s, pattern(d, s)) for n, (d, s) in MIX.items()}
    write("mix.safetensors", serialize(mix, MIX_META))
    write("no_metadata.safetensors", serialize({"x": ("F32", (1, 2, 3), pattern("F32", (1, 2, 3)))}))
    write("empty.safetensors", serialize({}))
    write("unordered.safetensors", unordered())
    print(f"wrote {len(os.listdir(OUT))} fixtures to {OUT}")


if __name__ == "__main__":
    main()
