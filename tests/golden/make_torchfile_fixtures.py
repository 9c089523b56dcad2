#!/usr/bin/python3
"""make_torchfile_fixtures.py — write the PyTorch checkpoints tests/unit/test_torchfile.c reads,
with Debian's python3-torch, into tests/golden/fixtures/torchfile/:

  * NAME_zip.pt (torch.save's zip format), NAME_legacy.pt (_use_new_zipfile_serialization=False)
    and NAME_p4_*.pt (pickle protocol 4: FRAME, STACK_GLOBAL, MEMOIZE) for three objects:
    `mixed` (every dtype, a transposed tensor, two views of one storage, a 0-d and an empty
    tensor, plain values), `vissl` (classy_state_dict -> base_model -> model -> trunk/heads with
    nn.Parameters) and `block` (a torchvision BasicBlock state_dict, with its _metadata);
  * NAME.safetensors: the expected tensors, flattened to dotted names, contiguous, written with
    make_safetensors_fixture.serialize (struct + json + numpy, no selfsup code). Its metadata
    maps each name to "strides S offset O param P grad G" as torch saw the tensor.
  * bad/: hostile and broken files, never executed here (pickles built from opcodes, or by
    classes whose __reduce__ names a function without calling it), and bad/EXPECT with one
    "file: expected error substring" line each.

Run with /usr/bin/python3 tests/golden/make_torchfile_fixtures.py; the files are committed.
"""
import collections
import io
import os
import pickle
import struct
import sys
import zipfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_safetensors_fixture import serialize  # noqa: E402
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("torchfile")
BAD = os.path.join(OUT, "bad")
MARKER = "/tmp/selfsup_torchfile_pwned"  # what the os.system payloads would create

ST_DTYPE = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
            torch.float64: "F64", torch.int64: "I64", torch.int32: "I32", torch.bool: "BOOL",
            torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16"}


def vals(n, scale=0.25):
    return (torch.arange(n, dtype=torch.float64) * 7 % 11 - 5) * scale


def mixed():
    return collections.OrderedDict([
        ("f32", vals(6).float().reshape(2, 3)),
        ("f16", vals(5).half()),
        ("bf16", vals(4).bfloat16().reshape(2, 2)),
        ("f64", vals(3)),
        ("i64", torch.arange(-3, 4, dtype=torch.int64)),
        ("i32", torch.tensor([1, -2, 3], dtype=torch.int32)),
        ("u8", torch.tensor([0, 7, 255], dtype=torch.uint8)),
        ("bool", torch.tensor([True, False, False, True, True])),
        ("transposed", vals(12).float().reshape(3, 4).t()),
        ("scalar", torch.tensor(2.5)),
        ("empty", torch.zeros(0, 3)),
        ("step", 7), ("lr", 0.125), ("name", "mixed"), ("flag", True), ("nothing", None),
        ("list", [1, 2.5, "a", (3, 4)]), ("big", -(2 ** 40)),
    ])


def add_shared(d):
    """Two views of one storage (saved once, offsets 2 and 6)."""
    base = vals(12).float()
    d["view_a"] = base[2:8].view(2, 3)
    d["view_b"] = base[6:]
    return d


def vissl():
    torch.manual_seed(0)
    trunk = collections.OrderedDict([
        ("_feature_blocks.conv1.weight",
         torch.nn.Parameter(vals(2 * 3 * 3 * 3).float().reshape(2, 3, 3, 3))),
        ("_feature_blocks.bn1.running_mean", vals(2).float()),
        ("_feature_blocks.bn1.num_batches_tracked", torch.tensor(5)),
    ])
    heads = collections.OrderedDict([
        ("0.clf.0.weight",
         torch.nn.Parameter(vals(3 * 2).float().reshape(3, 2), requires_grad=False)),
        ("0.clf.0.bias", vals(3).float()),
    ])
    return {"classy_state_dict": {"base_model": {"model": {"trunk": trunk, "heads": heads}},
                                  "loss": {}},
            "phase_idx": 3, "iteration": 120, "type": "checkpoint"}


def block():
    import torchvision.models.resnet as resnet
    torch.manual_seed(1)
    b = resnet.BasicBlock(4, 4)
    with torch.no_grad():
        for i, p in enumerate(b.parameters()):
            p.copy_(vals(p.numel(), 0.125 + i / 64).reshape(p.shape))
        b.bn1.running_var.fill_(1.5)
    return b.state_dict()


def flatten(obj, prefix, out, info):
    if isinstance(obj, torch.Tensor):
        info[prefix] = "strides %s offset %d param %d grad %d" % (
            ",".join(str(s) for s in obj.stride()), obj.storage_offset(),
            isinstance(obj, torch.nn.Parameter), obj.requires_grad)
        t = obj.detach().contiguous()
        data = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        out[prefix] = (ST_DTYPE[t.dtype], tuple(t.shape), data)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            flatten(v, "%s.%s" % (prefix, k) if prefix else str(k), out, info)


def save_all(name, obj):
    torch.save(obj, os.path.join(OUT, name + "_zip.pt"))
    torch.save(obj, os.path.join(OUT, name + "_legacy.pt"), _use_new_zipfile_serialization=False)
    torch.save(obj, os.path.join(OUT, name + "_p4_zip.pt"), pickle_protocol=4)
    torch.save(obj, os.path.join(OUT, name + "_p4_legacy.pt"), pickle_protocol=4,
               _use_new_zipfile_serialization=False)
    tensors, info = {}, {}
    flatten(obj, "", tensors, info)
    with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
        f.write(serialize(tensors, info))


# ---- hostile and broken files ---------------------------------------------------------------

class Global:
    """Pickles as a reference to module.name without importing or calling it."""
    def __init__(self, module, name):
        self.module, self.name = module, name


class Call:
    """Pickles as REDUCE(func, args); func is a Global."""
    def __init__(self, func, args):
        self.func, self.args = func, args


class Pickler(pickle.Pickler):
    def __init__(self, f, protocol, persid=None):
        super().__init__(f, protocol)
        self.persid = persid or {}

    def persistent_id(self, obj):
        return self.persid.get(id(obj))

    def reducer_override(self, obj):
        if isinstance(obj, Call):
            return (obj.func, obj.args)
        return NotImplemented


def global_bytes(module, name, protocol):
    if protocol >= 4:
        return (b"\x8c" + bytes([len(module)]) + module.encode() +
                b"\x8c" + bytes([len(name)]) + name.encode() + b"\x93")
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def call_pickle(module, name, arg, protocol=2):
    """PROTO, the global, a 1-tuple of one string, REDUCE, STOP — written by hand."""
    a = arg.encode()
    return (b"\x80" + bytes([protocol]) + global_bytes(module, name, protocol) +
            b"X" + struct.pack("<I", len(a)) + a + b"\x85R.")


def tensor_pickle(numel, size, stride, offset=0):
    """A data.pkl rebuilding one tensor on storage '0' of `numel` floats."""
    class Storage:
        pass
    st = Storage()

    class Tensor:
        def __reduce__(self):
            return (torch._utils._rebuild_tensor_v2,
                    (st, offset, size, stride, False, collections.OrderedDict()))
    f = io.BytesIO()
    p = Pickler(f, 2, {id(st): ("storage", torch.FloatStorage, "0", "cpu", numel)})
    p.dump({"w": Tensor()})
    return f.getvalue()


def rezip(src, dst, replace=None, drop=()):
    """Copy zip `src` to `dst`, replacing entries (by suffix) and dropping others."""
    replace = replace or {}
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        prefix = zin.infolist()[0].filename.split("/", 1)[0]
        done = set()
        for item in zin.infolist():
            suffix = item.filename.split("/", 1)[1]
            done.add(suffix)
            if suffix not in drop:
                zout.writestr(golden.zip_entry(item.filename), replace.get(suffix, zin.read(item.filename)))
        for suffix in sorted(set(replace) - done):
            zout.writestr(golden.zip_entry(prefix + "/" + suffix), replace[suffix])


def write_bad():
    os.makedirs(BAD, exist_ok=True)
    expect = []

    def bad(name, data, message):
        with open(os.path.join(BAD, name), "wb") as f:
            f.write(data)
        expect.append("%s: %s" % (name, message))

    good_zip = os.path.join(OUT, "mixed_zip.pt")
    small = collections.OrderedDict([("w", vals(6).float())])
    torch.save(small, os.path.join(BAD, "tmp.pt"))
    tmp = os.path.join(BAD, "tmp.pt")

    def zip_with(pkl=None, drop=(), extra=None):
        out = os.path.join(BAD, "tmp2.pt")
        rep = dict(extra or {})
        if pkl is not None:
            rep["data.pkl"] = pkl
        rezip(tmp, out, rep, drop)
        with open(out, "rb") as f:
            data = f.read()
        os.remove(out)
        return data

    touch = "touch " + MARKER
    bad("os_system.pt", call_pickle("os", "system", touch),
        "'os.system' is not allowed in a checkpoint")
    bad("posix_system_zip.pt", zip_with(call_pickle("posix", "system", touch)),
        "'posix.system' is not allowed in a checkpoint")
    bad("eval_p4_zip.pt", zip_with(call_pickle("builtins", "eval", "__import__('os')", 4)),
        "'builtins.eval' is not allowed in a checkpoint")
    bad("subprocess_zip.pt", zip_with(call_pickle("subprocess", "check_call", touch)),
        "'subprocess.check_call' is not allowed")
    bad("load_from_bytes_zip.pt",
        zip_with(call_pickle("torch.storage", "_load_from_bytes", "x")),
        "'torch.storage._load_from_bytes' is not allowed")
    # A storage class called as a function: allowed as a name, never as a callable.
    bad("call_storage_zip.pt", zip_with(call_pickle("torch", "FloatStorage", "x")),
        "cannot be called")
    with open(good_zip, "rb") as f:
        z = f.read()
    bad("truncated_zip.pt", z[:len(z) // 2], "truncated or damaged zip")
    bad("missing_storage_zip.pt", zip_with(drop=("data/0",)), "missing storage record")
    bad("short_storage_zip.pt", zip_with(extra={"data/0": b"\0" * 8}),
        "has 8 bytes, expected 24")
    bad("shape_exceeds_zip.pt", zip_with(tensor_pickle(6, (100, 100), (100, 1))),
        "needs 10000 elements but its storage has 6")
    bad("offset_exceeds_zip.pt", zip_with(tensor_pickle(6, (3,), (1,), 5)),
        "needs 8 elements but its storage has 6")
    bad("big_endian_zip.pt", zip_with(extra={"byteorder": b"big"}), "big-endian")
    bad("no_data_pkl_zip.pt", zip_with(drop=("data.pkl",)), "no data.pkl")
    with open(os.path.join(OUT, "mixed_legacy.pt"), "rb") as f:
        legacy = f.read()
    magic = struct.pack("<Q", 0x1950A86A20F9469C)[:8]
    assert magic in legacy[:16]
    bad("wrong_magic_legacy.pt", legacy.replace(magic, b"\1" * 8, 1), "wrong magic number")
    bad("truncated_legacy.pt", legacy[:len(legacy) - 40], "truncated")
    bad("not_torch.pt", b"hello, world\n", "not a PyTorch checkpoint")
    bad("empty.pt", b"", "not a PyTorch checkpoint")
    depth = 3000
    bad("stack_bomb_zip.pt", zip_with(b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."),
        "nested deeper than")
    bad("mark_bomb_zip.pt", zip_with(b"\x80\x02" + b"(" * 5000 + b"."), "too many MARKs")
    bad("huge_memo_zip.pt", zip_with(b"\x80\x02Nr\xff\xff\xff\x7f."),
        "memo index 2147483647 out of range")
    bad("unset_memo_zip.pt", zip_with(b"\x80\x02j\x05\x00\x00\x00."), "memo index 5 is not set")
    bad("newobj_zip.pt", zip_with(b"\x80\x02}\x81."),
        "data.pkl, byte 3: unknown or disallowed pickle opcode 0x81")
    bad("no_stop_zip.pt", zip_with(b"\x80\x02}"), "truncated pickle")
    os.remove(tmp)
    with open(os.path.join(BAD, "EXPECT"), "w") as f:
        f.write("\n".join(expect) + "\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    save_all("mixed", add_shared(mixed()))
    save_all("vissl", vissl())
    save_all("block", block())
    write_bad()


if __name__ == "__main__":
    main()
