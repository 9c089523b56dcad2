#!/usr/bin/python3
"""make_weights_fixtures.py — PyTorch's side of tests/unit/test_weights.c (nn/weights.c,
lib/torchsave.c, selfsup convert), run by the test at test time into a fresh directory.

Usage: /usr/bin/python3 tests/golden/make_weights_fixtures.py CASE DIR

Cases that make files before the C side runs:
  r50      torchvision resnet50 (seed 0, eval, BN affine and running stats perturbed), saved by
           torch.save in the zip format (r50.pth) and the legacy one (r50_legacy.pth), fc
           included as torchvision has it; x.npy (N × 3 × 224 × 224, N from WEIGHTS_R50_N,
           default 2) and feat.npy (the pooled 2048-d trunk features, eval).
  vissl    a VISSL checkpoint (vissl.torch): classy_state_dict.base_model.model.trunk holds a
           resnet18 trunk ("_feature_blocks." keys), .heads an mlp head [512, 256, 128] with BN
           and ReLU ("0.clf.N." keys), plus the other top-level keys VISSL writes; x.npy
           (2 × 3 × 64 × 64), feat.npy (trunk features) and out.npy (head output), eval; and
           prefixed.torch: {"state_dict": {"module." + torchvision name: tensor}} (DDP-style).
  small    state dicts for a 7-tensor model whose tensor k holds k + 0.25·i (exact in every
           float dtype): good.pth, mixed_dtypes.pth (F16, BF16, F64), wrong_shape.pth,
           int64.pth, missing.pth, unexpected.pth, torchvision.pth (no prefix), evil.pth (a
           pickle that calls os.system('touch DIR/pwned') when unpickled by torch.load; never
           loaded here), truncated.pth (half of good.pth).
  export   x.npy (2 × 3 × 64 × 64) for the export round trip.
  convert  tv.pth: a torchvision resnet18 state dict (with fc and num_batches_tracked).
Cases that check what the C side wrote:
  export-check    model.safetensors (parsed with numpy) → torchvision resnet18 (+ mlp head) →
                  feat_torch.npy, out_torch.npy; model.torch (torch.load) equals it exactly.
  convert-check   back.torch (torch.load) holds tv.pth's tensors exactly, fc left out.
Exit status 0 on success, 1 with a message otherwise.
"""
import collections
import json
import os
import struct
import sys

import numpy as np
import torch
import torchvision

TRUNK = "_feature_blocks."


def perturb(model, gen):
    """Non-trivial BN: affine and running stats away from 1/0, num_batches_tracked set."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.BatchNorm1d)):
                c = m.num_features
                m.weight.copy_(1 + 0.2 * torch.randn(c, generator=gen))
                m.bias.copy_(0.1 * torch.randn(c, generator=gen))
                m.running_mean.copy_(0.1 * torch.randn(c, generator=gen))
                m.running_var.copy_(0.5 + torch.rand(c, generator=gen))
                m.num_batches_tracked.fill_(7)


def trunk_features(model, x):
    fc = model.fc
    model.fc = torch.nn.Identity()
    with torch.no_grad():
        y = model(x)
    model.fc = fc
    return y


def case_r50(d):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    m = torchvision.models.resnet50().eval()
    perturb(m, gen)
    n = int(os.environ.get("WEIGHTS_R50_N", "2"))
    x = torch.randn(n, 3, 224, 224, generator=gen)
    np.save(os.path.join(d, "x.npy"), x.numpy())
    np.save(os.path.join(d, "feat.npy"), trunk_features(m, x).numpy())
    sd = m.state_dict()
    torch.save(sd, os.path.join(d, "r50.pth"))
    torch.save(sd, os.path.join(d, "r50_legacy.pth"), _use_new_zipfile_serialization=False)


def mlp_head():
    """VISSL's MLP(dims=[512, 256, 128], use_bn=True, use_relu=True) as nn.Sequential 'clf'."""
    layers = []
    last = 512
    for dim in (256, 128):
        layers += [torch.nn.Linear(last, dim), torch.nn.BatchNorm1d(dim), torch.nn.ReLU(inplace=True)]
        last = dim
    head = torch.nn.Module()
    head.clf = torch.nn.Sequential(*layers)
    return head


def case_vissl(d):
    torch.manual_seed(2)
    gen = torch.Generator().manual_seed(3)
    trunk = torchvision.models.resnet18().eval()
    head = mlp_head().eval()
    perturb(trunk, gen)
    perturb(head, gen)
    x = torch.randn(2, 3, 64, 64, generator=gen)
    feat = trunk_features(trunk, x)
    with torch.no_grad():
        out = head.clf(feat)
    np.save(os.path.join(d, "x.npy"), x.numpy())
    np.save(os.path.join(d, "feat.npy"), feat.numpy())
    np.save(os.path.join(d, "out.npy"), out.numpy())
    tsd = collections.OrderedDict((TRUNK + k, v) for k, v in trunk.state_dict().items() if not k.startswith("fc."))
    hsd = collections.OrderedDict(("0." + k, v) for k, v in head.state_dict().items())
    ckpt = {
        "phase_idx": 4, "iteration": 120, "loss": {}, "iteration_num": 120, "train_phase_idx": 4,
        "classy_state_dict": {
            "train": True,
            "base_model": {"model": {"trunk": tsd, "heads": hsd}},
            "optimizer": {"num_updates": 120}, "phase_idx": 4, "train_phase_idx": 4, "num_updates": 120,
        },
    }
    torch.save(ckpt, os.path.join(d, "vissl.torch"))
    ddp = collections.OrderedDict(("module." + k, v) for k, v in trunk.state_dict().items()
                                  if not k.startswith("fc."))
    torch.save({"state_dict": ddp, "epoch": 3}, os.path.join(d, "prefixed.torch"))


SMALL = [  # (name, shape): the 7-tensor model of test_weights.c, in its order
    ("trunk._feature_blocks.conv1.weight", (4, 3, 3, 3)),
    ("trunk._feature_blocks.bn1.weight", (4,)),
    ("trunk._feature_blocks.bn1.bias", (4,)),
    ("trunk._feature_blocks.bn1.running_mean", (4,)),
    ("trunk._feature_blocks.bn1.running_var", (4,)),
    ("heads.0.clf.0.weight", (2, 4)),
    ("heads.0.clf.0.bias", (2,)),
]


class Evil:
    """Unpickling this runs os.system: what a hostile checkpoint does."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


def small_value(k, shape, dtype=torch.float32):
    n = int(np.prod(shape))
    return torch.from_numpy((k + 0.25 * np.arange(n, dtype=np.float64)).reshape(shape)).to(dtype)


def case_small(d):
    good = collections.OrderedDict((name, small_value(k, shape)) for k, (name, shape) in enumerate(SMALL))
    good["trunk._feature_blocks.bn1.num_batches_tracked"] = torch.tensor(7)

    def save(name, sd):
        torch.save(sd, os.path.join(d, name))

    save("good.pth", good)
    mixed = collections.OrderedDict(good)
    mixed[SMALL[0][0]] = small_value(0, SMALL[0][1], torch.float16)
    mixed[SMALL[1][0]] = small_value(1, SMALL[1][1], torch.bfloat16)
    mixed[SMALL[2][0]] = small_value(2, SMALL[2][1], torch.float64)
    # a non-contiguous view (strides (1, 2)) with the same values: torchfile makes it contiguous
    mixed[SMALL[5][0]] = small_value(5, (2, 4)).t().contiguous().t()
    save("mixed_dtypes.pth", mixed)
    bad = collections.OrderedDict(good)
    bad[SMALL[0][0]] = torch.zeros(4, 3, 5, 5)
    save("wrong_shape.pth", bad)
    bad = collections.OrderedDict(good)
    bad[SMALL[0][0]] = torch.arange(108, dtype=torch.int64).reshape(4, 3, 3, 3)
    save("int64.pth", bad)
    bad = collections.OrderedDict((k, v) for k, v in good.items() if not k.endswith(("running_var", "bn1.bias")))
    save("missing.pth", bad)
    bad = collections.OrderedDict(good)
    bad["trunk._feature_blocks.layer9.conv.weight"] = torch.zeros(1)
    bad["heads.0.clf.9.weight"] = torch.zeros(1)
    save("unexpected.pth", bad)
    save("torchvision.pth", collections.OrderedDict((k[len("trunk._feature_blocks."):], v)
                                                    for k, v in good.items() if k.startswith("trunk.")))
    save("evil.pth", {"state_dict": good, "payload": Evil(os.path.join(d, "pwned"))})
    with open(os.path.join(d, "good.pth"), "rb") as f:
        blob = f.read()
    with open(os.path.join(d, "truncated.pth"), "wb") as f:
        f.write(blob[: len(blob) // 2])


def case_export(d):
    gen = torch.Generator().manual_seed(4)
    np.save(os.path.join(d, "x.npy"), torch.randn(2, 3, 64, 64, generator=gen).numpy())


def read_safetensors(path):
    """name → numpy array, with struct + json + numpy only (no safetensors package)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(info["shape"]).copy()
    return out


def case_export_check(d):
    tensors = read_safetensors(os.path.join(d, "model.safetensors"))
    trunk = torchvision.models.resnet18()
    trunk.fc = torch.nn.Identity()
    head = mlp_head()
    tsd = {k[len("trunk." + TRUNK):]: torch.from_numpy(v) for k, v in tensors.items() if k.startswith("trunk.")}
    hsd = {k[len("heads.0."):]: torch.from_numpy(v) for k, v in tensors.items() if k.startswith("heads.0.")}
    # selfsup keeps no num_batches_tracked: those are the only keys allowed to be missing
    missing, unexpected = trunk.load_state_dict(tsd, strict=False)
    missing += head.load_state_dict(hsd, strict=False).missing_keys
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected or len(tsd) + len(hsd) != len(tensors):
        print(f"export-check: missing {missing}, unexpected {unexpected}")
        return 1
    trunk.eval()
    head.eval()
    x = torch.from_numpy(np.load(os.path.join(d, "x.npy")))
    with torch.no_grad():
        feat = trunk(x)
        out = head.clf(feat)
    np.save(os.path.join(d, "feat_torch.npy"), feat.numpy())
    np.save(os.path.join(d, "out_torch.npy"), out.numpy())
    saved = torch.load(os.path.join(d, "model.torch"))
    if not isinstance(saved, collections.OrderedDict):
        print(f"export-check: model.torch is a {type(saved)}")
        return 1
    if sorted(saved) != sorted(tensors):
        print(f"export-check: model.torch names differ: {sorted(set(saved) ^ set(tensors))[:5]}")
        return 1
    for name, v in tensors.items():
        t = saved[name]
        if t.dtype != torch.float32 or not t.is_contiguous() or not np.array_equal(t.numpy(), v):
            print(f"export-check: model.torch: {name} differs")
            return 1
    print(f"export-check: {len(tensors)} tensors, torch.load matches")
    return 0


def case_convert(d):
    torch.manual_seed(5)
    m = torchvision.models.resnet18()
    perturb(m, torch.Generator().manual_seed(6))
    torch.save(m.state_dict(), os.path.join(d, "tv.pth"))


def case_convert_check(d):
    orig = torch.load(os.path.join(d, "tv.pth"))
    back = torch.load(os.path.join(d, "back.torch"))
    want = [k for k in orig if not k.startswith("fc.")]
    if sorted(back) != sorted(want):
        print(f"convert-check: names differ: {sorted(set(back) ^ set(want))[:5]}")
        return 1
    for k in want:
        a, b = orig[k], back[k]
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
            print(f"convert-check: {k} differs ({a.dtype} {tuple(a.shape)} vs {b.dtype} {tuple(b.shape)})")
            return 1
    m = torchvision.models.resnet18()
    result = m.load_state_dict(back, strict=False)
    if result.unexpected_keys or sorted(result.missing_keys) != ["fc.bias", "fc.weight"]:
        print(f"convert-check: load_state_dict: {result}")
        return 1
    print(f"convert-check: {len(want)} tensors identical")
    return 0


CASES = {"r50": case_r50, "vissl": case_vissl, "small": case_small, "export": case_export,
         "convert": case_convert, "export-check": case_export_check, "convert-check": case_convert_check}


def main(argv):
    if len(argv) != 3 or argv[1] not in CASES:
        print(f"usage: make_weights_fixtures.py {{{'|'.join(CASES)}}} DIR", file=sys.stderr)
        return 2
    return CASES[argv[1]](argv[2]) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
