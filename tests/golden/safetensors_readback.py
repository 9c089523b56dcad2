#!/usr/bin/python3
"""safetensors_readback.py — check safetensors files written by selfsup's st_write without
the `safetensors` package: parse them with struct + json + numpy.

Usage: /usr/bin/python3 tests/golden/safetensors_readback.py DIR

DIR holds the files and a manifest.txt:
    file NAME.safetensors          starts a file
    meta KEY VALUE                 a metadata entry of that file (no spaces in KEY or VALUE)
    tensor NAME DTYPE [DIM ...]    a tensor of that file, holding the pattern values
For each file this checks the layout the reference reader enforces (header length, '{',
JSON object, offsets tiling the buffer exactly, span == shape x dtype size), the header
padding to 8 bytes, that the tensors and metadata are exactly the manifest's with the pattern
values of make_safetensors_fixture.py, and that the bytes equal what the reference serializer
writes (make_safetensors_fixture.serialize). Exit status 0 when all pass, 1 otherwise.
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_safetensors_fixture import pattern, serialize  # noqa: E402

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
         "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}


def read_manifest(path):
    files = {}
    current = None
    with open(path) as f:
        for line in f:
            w = line.split()
            if not w:
                continue
            if w[0] == "file":
                current = files.setdefault(w[1], {"meta": {}, "tensors": {}})
            elif w[0] == "meta":
                current["meta"][w[1]] = w[2]
            elif w[0] == "tensor":
                current["tensors"][w[1]] = (w[2], tuple(int(x) for x in w[3:]))
    return files


def layout_problems(blob):
    """The reference reader's checks; returns (problems, header dict or None)."""
    if len(blob) < 8:
        return ["shorter than 8 bytes"], None
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        return ["header length past the end"], None
    text = blob[8:8 + n]
    problems = []
    if n % 8:
        problems.append(f"header length {n} is not a multiple of 8")
    if not text.startswith(b"{"):
        problems.append("header does not start with '{'")
    header = json.loads(text.decode("utf-8"))
    entries = sorted((v["data_offsets"], k) for k, v in header.items() if k != "__metadata__")
    at = 0
    for (begin, end), name in entries:
        info = header[name]
        size = SIZES[info["dtype"]]
        for d in info["shape"]:
            size *= d
        if begin != at or end - begin != size:
            problems.append(f"{name}: bad data_offsets {[begin, end]}")
        at = end
    if 8 + n + at != len(blob):
        problems.append("tensors do not cover the buffer exactly")
    return problems, header


def check(path, want):
    with open(path, "rb") as f:
        blob = f.read()
    problems, header = layout_problems(blob)
    if header is None:
        return problems
    (n,) = struct.unpack("<Q", blob[:8])
    data = blob[8 + n:]
    got_meta = header.get("__metadata__", {})
    if got_meta != want["meta"]:
        problems.append(f"metadata {got_meta} != {want['meta']}")
    names = set(header) - {"__metadata__"}
    if names != set(want["tensors"]):
        problems.append(f"tensor names {sorted(names)} != {sorted(want['tensors'])}")
        return problems
    tensors = {}
    for name, (dtype, shape) in want["tensors"].items():
        info = header[name]
        if info["dtype"] != dtype or tuple(info["shape"]) != shape:
            problems.append(f"{name}: {info['dtype']} {info['shape']} != {dtype} {list(shape)}")
        begin, end = info["data_offsets"]
        if data[begin:end] != pattern(dtype, shape):
            problems.append(f"{name}: values differ from the pattern")
        tensors[name] = (dtype, shape, pattern(dtype, shape))
    if not problems and blob != serialize(tensors, want["meta"] or None):
        problems.append("bytes differ from the reference serializer's")
    return problems


def main(argv):
    if len(argv) != 2:
        print("usage: safetensors_readback.py DIR", file=sys.stderr)
        return 2
    files = read_manifest(os.path.join(argv[1], "manifest.txt"))
    failures = 0
    for name, want in files.items():
        for problem in check(os.path.join(argv[1], name), want):
            print(f"{name}: {problem}")
            failures += 1
    print(f"safetensors_readback: {len(files)} files, {failures} problems")
    return 1 if failures or not files else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
