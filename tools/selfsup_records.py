#!/usr/bin/env python3
"""selfsup_records.py — read and write selfsup records with nothing but numpy.

A record is one sample or batch: a 64-byte header, a table of 128-byte tensor descriptors,
then the payloads, each at a 64-byte-aligned offset. Everything is little-endian. This module
is written from that format description (shm/record.h in the selfsup sources), not from the
C code, so the two can check each other.

    header      <IHHIIQQII24x   magic "SSRC" (0x43525353), version 1, kind (1 data,
                                2 end of stream), flags, n_tensors, size (whole record,
                                multiple of 64), seq, epoch, source, 24 reserved zero bytes

An end-of-stream record has no tensors; its seq is the number of data records before it and
its flags say how the stream ended: 1 the writer finished, 2 it was stopped (the stream is
incomplete). Readers refuse a stopped stream and one whose count is not what they read.
    descriptor  <32sHHIQQ8Q8x   name (NUL-terminated, NUL-padded, 1..31 printable chars),
                                dtype code, ndim (<= 8), reserved zero, payload offset,
                                nbytes (== prod(shape) * itemsize), shape[8] (unused = 0),
                                8 reserved zero bytes

Library use:

    for header, tensors in read_records("cache.rec"):   # a path or a binary file object
        print(header["seq"], {k: v.shape for k, v in tensors.items()})
    with open("out.rec", "wb") as f:
        write_record(f, {"data.0": img, "label": np.array(3, np.int64)}, seq=0, epoch=0)
        write_eos(f, records=1)

bfloat16 has no numpy dtype: it reads as float32 (exactly), and is written from a
("bfloat16", array) pair, where array is uint16 bit patterns or float32 values (rounded to
nearest even).

Command line:  python3 selfsup_records.py [--values N] [--json] FILE|-
"""
import json
import struct
import sys

import numpy as np

MAGIC = 0x43525353
VERSION = 1
ALIGN = 64
HEADER_BYTES = 64
TENSOR_BYTES = 128
NAME_MAX = 31
MAX_DIMS = 8
MAX_TENSORS = 256
MAX_BYTES = 1 << 30

KINDS = {1: "data", 2: "eos"}
KIND_CODES = {"data": 1, "eos": 2}
EOS_FINISHED = 1
EOS_STOPPED = 2

# wire code -> (name, numpy dtype or None for bfloat16, item size)
DTYPES = {
    1: ("uint8", np.dtype("<u1"), 1),
    2: ("int8", np.dtype("<i1"), 1),
    3: ("int16", np.dtype("<i2"), 2),
    4: ("int32", np.dtype("<i4"), 4),
    5: ("int64", np.dtype("<i8"), 8),
    6: ("float16", np.dtype("<f2"), 2),
    7: ("bfloat16", None, 2),
    8: ("float32", np.dtype("<f4"), 4),
    9: ("float64", np.dtype("<f8"), 8),
    10: ("bool", np.dtype("?"), 1),
}
DTYPE_CODES = {name: code for code, (name, _, _) in DTYPES.items()}

HEADER = struct.Struct("<IHHIIQQII24s")
TENSOR = struct.Struct("<32sHHIQQ8Q8s")
assert HEADER.size == HEADER_BYTES and TENSOR.size == TENSOR_BYTES


class RecordError(ValueError):
    """A malformed record; the message says what and where."""


def _align(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


# ---- reading ------------------------------------------------------------------------------


def parse_header(b):
    """Validate a 64-byte header on its own; return it as a dict (size tells how much to read)."""
    magic, version, kind, flags, n, size, seq, epoch, source, reserved = HEADER.unpack(b)
    if magic == int.from_bytes(MAGIC.to_bytes(4, "little"), "big"):
        raise RecordError("record is big-endian (magic 0x%08x)" % magic)
    if magic != MAGIC:
        raise RecordError("not a record: bad magic 0x%08x" % magic)
    where = "record seq %d" % seq
    if version != VERSION:
        raise RecordError("%s: version %d, expected %d" % (where, version, VERSION))
    if kind not in KINDS:
        raise RecordError("%s: unknown kind %d" % (where, kind))
    if any(reserved):
        raise RecordError("%s: reserved header bytes are not 0" % where)
    if size % ALIGN or size < HEADER_BYTES:
        raise RecordError("%s: size %d is not a positive multiple of 64" % (where, size))
    if size > MAX_BYTES:
        raise RecordError("%s: size %d is over the limit of %d bytes" % (where, size, MAX_BYTES))
    if n > MAX_TENSORS:
        raise RecordError("%s: n_tensors %d is over the limit of %d" % (where, n, MAX_TENSORS))
    if HEADER_BYTES + n * TENSOR_BYTES > size:
        raise RecordError("%s: n_tensors %d needs a descriptor table past the record size %d" % (where, n, size))
    if kind == 2 and (n or size != HEADER_BYTES):
        raise RecordError("%s: end-of-stream record must have no tensors and be 64 bytes" % where)
    return {"kind": KINDS[kind], "flags": flags, "n_tensors": n, "size": size, "seq": seq, "epoch": epoch,
            "source": source}


def _check_name(raw, i, where):
    name, nul, pad = raw.partition(b"\0")
    if not nul:
        raise RecordError("%s: tensor #%d: name is not NUL-terminated" % (where, i))
    if not name:
        raise RecordError("%s: tensor #%d: name is empty" % (where, i))
    if any(c <= 32 or c >= 127 for c in name):
        raise RecordError("%s: tensor #%d: name has a non-printable byte" % (where, i))
    name = name.decode("ascii")
    if any(pad):
        raise RecordError("%s: tensor '%s' (#%d): name is not NUL-padded" % (where, name, i))
    return name


def _tensor(buf, i, table_end, prev_end, where):
    raw, dtype, ndim, res0, offset, nbytes, *rest = TENSOR.unpack_from(buf, HEADER_BYTES + i * TENSOR_BYTES)
    shape, res1 = rest[:MAX_DIMS], rest[MAX_DIMS]
    name = _check_name(raw, i, where)
    tw = "%s: tensor '%s' (#%d)" % (where, name, i)
    if dtype not in DTYPES:
        raise RecordError("%s: unknown dtype code %d" % (tw, dtype))
    if ndim > MAX_DIMS:
        raise RecordError("%s: ndim %d is over the limit of %d" % (tw, ndim, MAX_DIMS))
    if any(shape[ndim:]):
        raise RecordError("%s: shape[%d..] is not 0 but ndim is %d (unused dims must be 0)" % (tw, ndim, ndim))
    if res0 or any(res1):
        raise RecordError("%s: reserved fields must be 0" % tw)
    want = DTYPES[dtype][2]
    for d in shape[:ndim]:
        want *= d  # Python integers do not overflow; compare against 64 bits as C does
    if want >= 1 << 64:
        raise RecordError("%s: shape × item size overflows 64 bits" % tw)
    if nbytes != want:
        raise RecordError("%s: nbytes %d != %d (shape × item size)" % (tw, nbytes, want))
    if offset % ALIGN:
        raise RecordError("%s: payload offset %d is not a multiple of 64" % (tw, offset))
    if offset < table_end:
        raise RecordError("%s: payload offset %d is inside the header and descriptor table" % (tw, offset))
    if offset < prev_end:
        raise RecordError("%s: payload offset %d overlaps the previous payload" % (tw, offset))
    if offset + nbytes > len(buf):
        raise RecordError("%s: payload offset %d + %d bytes is past the record end %d" % (tw, offset, nbytes, len(buf)))
    return name, dtype, tuple(shape[:ndim]), offset, nbytes


def _array(buf, dtype, shape, offset, nbytes):
    raw = bytes(buf[offset:offset + nbytes])
    if DTYPES[dtype][1] is None:  # bfloat16: widen the bits to float32, which is exact
        bits = np.frombuffer(raw, "<u2").astype("<u4") << 16
        return bits.view("<f4").reshape(shape)
    return np.frombuffer(raw, DTYPES[dtype][1]).reshape(shape).copy()


def parse_record(buf):
    """Validate one whole record (bytes); return (header dict, {name: array})."""
    if len(buf) < HEADER_BYTES:
        raise RecordError("record truncated: %d bytes, less than the 64-byte header" % len(buf))
    header = parse_header(buf[:HEADER_BYTES])
    where = "record seq %d" % header["seq"]
    if header["size"] != len(buf):
        raise RecordError("%s: size field says %d bytes but %d are there%s" % (
            where, header["size"], len(buf), " (truncated)" if len(buf) < header["size"] else ""))
    table_end = HEADER_BYTES + header["n_tensors"] * TENSOR_BYTES
    prev_end, tensors, dtypes = table_end, {}, {}
    for i in range(header["n_tensors"]):
        name, dtype, shape, offset, nbytes = _tensor(buf, i, table_end, prev_end, where)
        if name in tensors:
            raise RecordError("%s: tensor '%s' (#%d): name repeats an earlier tensor" % (where, name, i))
        tensors[name] = _array(buf, dtype, shape, offset, nbytes)
        dtypes[name] = DTYPES[dtype][0]
        prev_end = offset + nbytes
    header["dtypes"] = dtypes
    return header, tensors


def _read_exact(f, n):
    chunks, got = [], 0
    while got < n:
        c = f.read(n - got)
        if not c:
            break
        chunks.append(c)
        got += len(c)
    return b"".join(chunks)


def read_records(source):
    """Yield (header, {name: np.ndarray}) for each record of a path or binary file object.

    header has kind ("data" or "eos"), flags, n_tensors, size, seq, epoch, source, offset (in
    the stream) and dtypes ({name: wire dtype name}, which tells bfloat16 from float32).
    A clean end of file between records ends the iteration; anything else raises RecordError.
    """
    if isinstance(source, (str, bytes)) or hasattr(source, "__fspath__"):
        with open(source, "rb") as f:
            yield from read_records(f)
        return
    offset = 0
    while True:
        head = _read_exact(source, HEADER_BYTES)
        if not head:
            return
        if len(head) < HEADER_BYTES:
            raise RecordError("stream offset %d: record truncated: %d bytes of a 64-byte header" % (offset, len(head)))
        try:
            size = parse_header(head)["size"]
        except RecordError as e:
            raise RecordError("stream offset %d: %s" % (offset, e)) from None
        body = _read_exact(source, size - HEADER_BYTES)
        if len(body) < size - HEADER_BYTES:
            raise RecordError("stream offset %d: record truncated: %d of its %d bytes" % (
                offset, HEADER_BYTES + len(body), size))
        try:
            header, tensors = parse_record(head + body)
        except RecordError as e:
            raise RecordError("stream offset %d: %s" % (offset, e)) from None
        header["offset"] = offset
        offset += size
        yield header, tensors


# ---- writing ------------------------------------------------------------------------------


def _bf16_bits(a):
    a = np.asarray(a)
    if a.dtype == np.uint16:
        return a.astype("<u2")
    bits = np.asarray(a, "<f4", order="C").view("<u4").astype(np.uint64)
    one, half = np.uint64(1), np.uint64(0x7FFF)
    bits = (bits + half + ((bits >> np.uint64(16)) & one)) >> np.uint64(16)  # round to nearest even
    nan = np.isnan(np.asarray(a, "<f4"))  # rounding could carry a NaN into infinity
    return np.asarray(np.where(nan, 0x7FC0, bits), "<u2")


def _wire(value):
    """(dtype code, little-endian C-contiguous array) for one tensor value."""
    if isinstance(value, tuple):
        kind, a = value
        if kind != "bfloat16":
            return DTYPE_CODES[kind], np.asarray(a, DTYPES[DTYPE_CODES[kind]][1], order="C")
        return DTYPE_CODES["bfloat16"], _bf16_bits(a)
    a = np.asarray(value)
    for code, (_, dt, _) in DTYPES.items():
        if dt is not None and a.dtype.kind == dt.kind and a.dtype.itemsize == dt.itemsize:
            return code, np.asarray(a, dt, order="C")  # not ascontiguousarray: it makes 0-d arrays 1-d
    raise ValueError("no record dtype for numpy dtype %s" % a.dtype)


def encode_record(tensors, seq, epoch=0, kind="data", flags=0, source=0):
    """The bytes of one record, laid out as the C writer lays them out with max_tensors = n."""
    kind = KIND_CODES.get(kind, kind)
    if kind not in KINDS:
        raise ValueError("unknown record kind %r" % (kind,))
    if kind == 2 and tensors:
        raise ValueError("an end-of-stream record has no tensors")
    if len(tensors) > MAX_TENSORS:
        raise ValueError("%d tensors, over the limit of %d" % (len(tensors), MAX_TENSORS))
    table = bytearray()
    payload = bytearray()
    end = HEADER_BYTES + len(tensors) * TENSOR_BYTES
    for name, value in tensors.items():
        raw = name.encode("ascii")
        if not 1 <= len(raw) <= NAME_MAX or any(c <= 32 or c >= 127 for c in raw):
            raise ValueError("tensor name %r must be 1..%d printable characters" % (name, NAME_MAX))
        code, a = _wire(value)
        if a.ndim > MAX_DIMS:
            raise ValueError("tensor %r: %d dims, over the limit of %d" % (name, a.ndim, MAX_DIMS))
        shape = list(a.shape) + [0] * (MAX_DIMS - a.ndim)
        data = a.tobytes()
        table += TENSOR.pack(raw, code, a.ndim, 0, end, len(data), *shape, bytes(8))
        payload += data + bytes(_align(len(data)) - len(data))
        end += _align(len(data))
    size = HEADER_BYTES + len(table) + len(payload)
    if size > MAX_BYTES:
        raise ValueError("record of %d bytes is over the limit of %d" % (size, MAX_BYTES))
    head = HEADER.pack(MAGIC, VERSION, kind, flags, len(tensors), size, seq, epoch, source, bytes(24))
    return head + bytes(table) + bytes(payload)


def write_record(f, tensors, seq, epoch=0, kind="data", flags=0, source=0):
    """Write one record of {name: array} to a binary file object; returns its size."""
    b = encode_record(tensors, seq, epoch, kind, flags, source)
    f.write(b)
    return len(b)


def write_eos(f, records, stopped=False):
    """End a stream of `records` data records: the end-of-stream record a finished (or a
    stopped) writer sends."""
    return write_record(f, {}, seq=records, kind="eos", flags=EOS_STOPPED if stopped else EOS_FINISHED)


# ---- command line -------------------------------------------------------------------------


def _values(a, n):
    flat = a.reshape(-1)
    vals = flat[:n].tolist() if n >= 0 else flat.tolist()
    return vals, flat.size > len(vals)


def _print_text(header, tensors, n):
    if header["kind"] == "eos":
        print("end of stream: %d data records, %s" % (
            header["seq"], "writer stopped" if header["flags"] & EOS_STOPPED else "writer finished"))
        return
    print("record seq %d epoch %d: %d tensor%s, %d bytes, flags 0x%x, source %d" % (
        header["seq"], header["epoch"], header["n_tensors"], "" if header["n_tensors"] == 1 else "s",
        header["size"], header["flags"], header["source"]))
    width = max((len(k) for k in tensors), default=0)
    for name, a in tensors.items():
        line = "  %-*s %-8s [%s]" % (width, name, header["dtypes"][name], ", ".join(str(d) for d in a.shape))
        if n:
            vals, more = _values(a, n)
            text = ["%g" % v if isinstance(v, float) else ("true" if v is True else "false" if v is False else str(v))
                    for v in vals]
            line += " = [" + ", ".join(text + (["..."] if more else [])) + "]"
        print(line)


def _print_json(header, tensors, n):
    out = {k: header[k] for k in ("kind", "flags", "n_tensors", "size", "seq", "epoch", "source", "offset")}
    out["tensors"] = [{"name": name, "dtype": header["dtypes"][name], "shape": list(a.shape),
                       "values": _values(a, n)[0]} for name, a in tensors.items()]
    print(json.dumps(out))


def main(argv):
    import argparse
    p = argparse.ArgumentParser(description="Print selfsup records (a file of records, or - for stdin).")
    p.add_argument("file")
    p.add_argument("--values", type=int, default=8, help="values to print per tensor (-1: all)")
    p.add_argument("--json", action="store_true", help="one JSON object per record")
    args = p.parse_args(argv)
    show = _print_json if args.json else _print_text
    source = sys.stdin.buffer if args.file == "-" else args.file
    try:
        for header, tensors in read_records(source):
            show(header, tensors, args.values)
    except RecordError as e:
        sys.stdout.flush()
        print("selfsup_records: %s" % e, file=sys.stderr)
        return 1
    except OSError as e:
        print("selfsup_records: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
