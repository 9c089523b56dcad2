#!/usr/bin/python3
"""make_caffe2_fixtures.py — Caffe2 pickles and what VISSL 0.1.5's converters make of them, for
`selfsup convert --from caffe2-resnet|caffe2-alexnet` (orchestrator/convert_caffe2.c) and the
numpy-array unpickler under it (lib/torchfile.c).

The blobs are named as the ICCV'19 benchmark suite's Caffe2 models name them (conv1_w,
res_conv1_bn_{s,b,rm,riv}, res{2..5}_{j}_branch{1,2a,2b,2c}_{w,bn_s,…}, pred_w, momentum copies;
the AlexNet's conv{1..5}_{w,b}, conv{N}norm_{s,b,rm,riv}, fc6/fc7, pred), with small shapes
(conv1_w is 64 × 3 × 7 × 7, as --bgr2rgb asserts) and values of their own, plus the numbers lr
and model_iter. The converters' functions are re-stated from extra_scripts/
convert_caffe2_to_torchvision_resnet.py and convert_caffe2_to_vissl_alexnet.py (--weights_type
caffe2). Under tests/golden/fixtures/caffe2/:

  resnet_py2.pkl          {"blobs": …} written as Python 2's cPickle writes protocol 2 (byte
                          strings as BINSTRING, read with encoding="latin1"); checked here to load
                          in Python 3 as the scripts load it
  resnet_py3.pkl          the same blobs by Python 3's pickle, protocol 2 (bytes through
                          _codecs.encode) — and resnet_jigsaw_py3.pkl, a Jigsaw model's (3 towers)
  alexnet_py3.pkl         an AlexNet's, protocol 4, with a Jigsaw tower suffix
  resnet_out.torch, resnet_out_names.txt                 the ResNet script's state dict
  resnet_jigsaw_bgr_out.torch, …_names.txt               with --jigsaw and --bgr2rgb
  alexnet_jigsaw_out.torch, alexnet_jigsaw_out_names.txt the AlexNet script's model_state_dict
                                                         (--model_name jigsaw)

Run from the repository root:  /usr/bin/python3 tests/golden/make_caffe2_fixtures.py
"""
import io
import os
import pickle
import re
import struct
import sys
from collections import OrderedDict

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden  # noqa: E402

OUT = golden.out_dir("caffe2")


# ---- the blobs --------------------------------------------------------------------------------

def value(i, shape):
    return (np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) * 0.5 + i).astype(np.float32)


def resnet_blobs(towers=None):
    names = [("conv1_w", (64, 3, 7, 7))]
    names += [(f"res_conv1_bn_{p}", (64,)) for p in ("s", "b", "rm", "riv")]
    for stage, blocks in zip(range(2, 6), (3, 4, 6, 3)):
        for j in range(blocks):
            branches = ["branch2a", "branch2b", "branch2c"] + (["branch1"] if j == 0 else [])
            for br in branches:
                names.append((f"res{stage}_{j}_{br}_w", (2, 2, 1, 1)))
                names += [(f"res{stage}_{j}_{br}_bn_{p}", (2,)) for p in ("s", "b", "rm", "riv")]
    names += [("pred_w", (10, 2)), ("pred_b", (10,)), ("res2_0_branch2a_w_momentum", (2, 2, 1, 1))]
    blobs = OrderedDict()
    for i, (n, shape) in enumerate(names):
        if towers and n.startswith("res2_"):  # the siamese towers: res2's blobs, once per tower
            for t in range(towers):
                blobs[re.sub(r"_(w|b|bn_\w+)$", rf"_s{t}_\1", n)] = value(i + 100 * t, shape)
        else:
            blobs[n] = value(i, shape)
    blobs["lr"] = np.float32(0.1)
    blobs["model_iter"] = np.int64(1234)
    return blobs


def alexnet_blobs():
    blobs = OrderedDict()
    i = 0
    for c in range(1, 6):
        for suffix, shape in (("w", (2, 3, 2, 2)), ("b", (2,))):
            for t in (0, 1):  # two Jigsaw towers for conv1, one name otherwise
                name = f"conv{c}_s{t}_{suffix}" if c == 1 else f"conv{c}_{suffix}"
                if c > 1 and t == 1:
                    continue
                blobs[name] = value(i, shape)
                i += 1
        for p in ("s", "b", "rm", "riv"):
            blobs[f"conv{c}norm_{p}"] = value(i, (2,))
            i += 1
    for n, shape in (("fc6_w", (4, 2)), ("fc6_b", (4,)), ("pred_w", (3, 4)), ("conv1_s0_w_momentum", (2, 3, 2, 2))):
        blobs[n] = value(i, shape)
        i += 1
    blobs["lr"] = np.float64(0.01)
    return blobs


# ---- Python 2's cPickle, protocol 2 -----------------------------------------------------------

def py2_pickle(obj):
    """What Python 2's cPickle.dump(obj, f, 2) writes for a dict of str -> ndarray / numpy scalar
    (without the memo, which a reader may do without): str as SHORT_BINSTRING / BINSTRING."""
    out = io.BytesIO()
    w = out.write

    def s(text):
        b = text if isinstance(text, bytes) else text.encode("latin1")
        w(b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<i", len(b)) + b)

    def integer(v):
        w(b"K" + bytes([v]) if 0 <= v < 256 else b"J" + struct.pack("<i", v))

    def dtype(dt):
        w(b"cnumpy\ndtype\n")
        s(dt.str[1:])
        integer(0)
        integer(1)
        w(b"\x87R(")  # TUPLE3 REDUCE MARK
        integer(3)
        s(dt.str[0])
        w(b"NNN")
        integer(-1)
        integer(-1)
        integer(0)
        w(b"tb")  # TUPLE BUILD

    def array(a):
        w(b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n")
        integer(0)
        w(b"\x85")
        s("b")
        w(b"\x87R(")
        integer(1)
        w(b"(")
        for d in a.shape:
            integer(d)
        w(b"t")
        dtype(a.dtype)
        w(b"\x89")  # NEWFALSE: C order
        s(a.tobytes())
        w(b"tb")

    def scalar(v):
        w(b"cnumpy.core.multiarray\nscalar\n")
        dtype(v.dtype)
        s(v.tobytes())
        w(b"\x86R")  # TUPLE2 REDUCE

    w(b"\x80\x02}(")
    s("blobs")
    w(b"}(")
    for k, v in obj["blobs"].items():
        s(k)
        array(v) if isinstance(v, np.ndarray) else scalar(v)
    w(b"uu.")
    return out.getvalue()


# ---- VISSL's converters, re-stated ------------------------------------------------------------

def remove_jigsaw_names(data, resnet):
    output_blobs = {}
    remove_suffixes = ["s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8"]
    for item in sorted(data.keys()):
        if "s0" in item:
            out_name = re.sub("_s[0-9]_", "_", item) if resnet else item.replace("_s0_", "_")
            output_blobs[out_name] = data[item]
        elif any(x in item for x in remove_suffixes):
            continue
        else:
            output_blobs[item] = data[item]
    return output_blobs


def convert_bgr2rgb(state_dict, resnet):
    w = state_dict["conv1_w"]
    if resnet:
        assert w.shape == (64, 3, 7, 7), "Error in converting bgr2rgb"
    state_dict["conv1_w"] = w[:, ::-1, :, :].copy()
    return state_dict


def _rename_basic_resnet_weights(layer_keys):
    for a, b in [("_", "."), (".w", ".weight"), (".bn", "_bn"), (".b", ".bias"), ("_bn.s", "_bn.scale"),
                 (".biasranch", ".branch"), ("res.conv1_", "conv1_"), ("_bn.scale", "_bn.weight"),
                 ("_bn.rm", "_bn.running_mean"), ("_bn.riv", "_bn.running_var"), ("conv1_bn.", "bn1."),
                 ("res2.", "layer1."), ("res3.", "layer2."), ("res4.", "layer3."), ("res5.", "layer4."),
                 (".branch2a.", ".conv1."), (".branch2a_bn.", ".bn1."), (".branch2b.", ".conv2."),
                 (".branch2b_bn.", ".bn2."), (".branch2c.", ".conv3."), (".branch2c_bn.", ".bn3."),
                 (".branch1.", ".downsample.0."), (".branch1_bn.", ".downsample.1.")]:
        layer_keys = [k.replace(a, b) for k in layer_keys]
    return layer_keys


def _rename_weights_for_resnet(weights):
    original_keys = sorted(weights.keys())
    layer_keys = sorted(weights.keys())
    layer_keys = [k if k != "pred_b" else "fc1000_b" for k in layer_keys]
    layer_keys = [k if k != "pred_w" else "fc1000_w" for k in layer_keys]
    layer_keys = _rename_basic_resnet_weights(layer_keys)
    key_map = {k: v for k, v in zip(original_keys, layer_keys)}
    new_weights = OrderedDict()
    for k in original_keys:
        if "_momentum" in k or "pred" in k or k == "lr" or k == "model_iter":
            continue
        new_weights[key_map[k]] = torch.from_numpy(weights[k])
    return new_weights


def _rename_basic_caffe2_alexnet_weights(layer_keys):
    output_keys = []
    for k in layer_keys:
        for a, b in [("norm", "_bn"), ("_bn_b", ".1.bias"), ("_bn_s", ".1.weight"), ("_bn_rm", ".1.running_mean"),
                     ("_bn_riv", ".1.running_var"), ("_b", ".0.bias"), ("_w", ".0.weight"), ("conv1.", "0."),
                     ("conv2.", "2."), ("conv3.", "4."), ("conv4.", "5."), ("conv5.", "6.")]:
            k = k.replace(a, b)
        output_keys.append(f"_feature_blocks.{k}")
    return output_keys


def _rename_weights_for_alexnet(weights):
    skip = ["_momentum", "sobel", "classifier", "top_layer", "pred", "fc", "data"]
    original_keys = sorted(weights.keys())
    key_map = dict(zip(original_keys, _rename_basic_caffe2_alexnet_weights(original_keys)))
    new_weights = OrderedDict()
    for k in original_keys:
        v = np.array(weights[k])
        if any(x in k for x in skip) or k in ("lr", "model_iter"):
            continue
        new_weights[key_map[k]] = torch.from_numpy(v)
    return new_weights


def load_c2(path):
    with open(path, "rb") as f:
        data = pickle.load(f, encoding="latin1")
    return data["blobs"] if "blobs" in data else data


def save_out(name, state):
    torch.save(state, os.path.join(OUT, f"{name}.torch"))
    with open(os.path.join(OUT, f"{name}_names.txt"), "w") as f:
        f.write("".join(f"{k}\n" for k in state))


def main():
    blobs = resnet_blobs()
    with open(os.path.join(OUT, "resnet_py2.pkl"), "wb") as f:
        f.write(py2_pickle({"blobs": blobs}))
    back = load_c2(os.path.join(OUT, "resnet_py2.pkl"))
    assert list(back) == list(blobs) and all(np.array_equal(back[k], blobs[k]) for k in blobs), "py2 pickle"
    with open(os.path.join(OUT, "resnet_py3.pkl"), "wb") as f:
        pickle.dump({"blobs": blobs}, f, protocol=2)
    save_out("resnet_out", _rename_weights_for_resnet(load_c2(os.path.join(OUT, "resnet_py3.pkl"))))

    with open(os.path.join(OUT, "resnet_jigsaw_py3.pkl"), "wb") as f:
        pickle.dump({"blobs": resnet_blobs(towers=3)}, f, protocol=2)
    w = convert_bgr2rgb(remove_jigsaw_names(load_c2(os.path.join(OUT, "resnet_jigsaw_py3.pkl")), True), True)
    save_out("resnet_jigsaw_bgr_out", _rename_weights_for_resnet(w))

    with open(os.path.join(OUT, "alexnet_py3.pkl"), "wb") as f:
        pickle.dump(alexnet_blobs(), f, protocol=4)
    w = remove_jigsaw_names(load_c2(os.path.join(OUT, "alexnet_py3.pkl")), False)
    state = _rename_weights_for_alexnet(w)
    torch.save({"model_state_dict": state}, os.path.join(OUT, "alexnet_jigsaw_out.torch"))
    with open(os.path.join(OUT, "alexnet_jigsaw_out_names.txt"), "w") as f:
        f.write("".join(f"{k}\n" for k in state))


if __name__ == "__main__":
    main()
