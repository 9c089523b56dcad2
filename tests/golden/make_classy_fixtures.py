#!/usr/bin/python3
"""make_classy_fixtures.py — reference files for `selfsup convert … --to classy_vision` and for
reading ClassyVision ResNet checkpoints (orchestrator/cmd_convert.c).

make_detectron2_fixtures.py's VISSL checkpoint of a ResNet-50 trunk (every torchvision name,
num_batches_tracked included, each tensor small with values of its own, and a head), through
VISSL 0.1.5's extra_scripts/convert_vissl_to_classy_vision.py (--depth 50, no --include_heads) and
back through extra_scripts/convert_classy_vision_to_vissl_resnet.py, both re-stated. Under
tests/golden/fixtures/convert/:

  classy_rn50.torch          the first script's output: {"classy_state_dict": {"base_model":
                             {"model": {"trunk": …}}}} with ClassyVision's ResNet names
  classy_rn50_names.txt      its trunk names, in order
  classy_to_vissl_names.txt  the second script's model_state_dict names, in order (the
                             num_batches_tracked tensors dropped, as it drops them)
  vissl_rn50_heads.torch     the same trunk with a 2-layer head (0.clf.0 FC + 0.clf.1 BN, 1.clf.0)
  classy_rn50_heads.torch    the first script's output for it with --include_heads
                             --num_fc_layers 2 --use_bn_head --use_bias_head_fc
                             --output_head_prefix proj; classy_rn50_heads_names.txt: the head's
                             names under heads.block3-2.default_head, in order

Run from the repository root:  /usr/bin/python3 tests/golden/make_classy_fixtures.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden  # noqa: E402
from make_detectron2_fixtures import vissl_checkpoint  # noqa: E402

BLOCK_CONFIG = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}


def convert_trunk_to_classy_model(state_dict_trunk, depth):
    layers = BLOCK_CONFIG[depth]
    output_dict = {}
    for (k, val) in state_dict_trunk.items():
        if any(x in k for x in ["fc", "clf"]):
            continue
        k = k.replace("_feature_blocks.conv1.", "initial_block._module.0.")
        k = k.replace("_feature_blocks.bn1.", "initial_block._module.1.")
        for idx in range(len(layers)):
            for j in range(layers[idx]):
                k = k.replace(f"_feature_blocks.layer{idx + 1}.{j}.", f"blocks.{idx}.block{idx}-{j}.")
        k = k.replace(".conv1.weight", ".convolutional_block.0.weight")
        k = k.replace(".conv2.weight", ".convolutional_block.3.weight")
        k = k.replace(".conv3.weight", ".convolutional_block.6.weight")
        k = k.replace(".bn1.", ".convolutional_block.1.")
        k = k.replace(".bn2.", ".convolutional_block.4.")
        k = k.replace(".bn3.", ".bn.")
        output_dict[k] = val
    return output_dict


def convert_classy_trunk_to_vissl_model(state_dict_trunk, depth):
    layers = BLOCK_CONFIG[depth]
    output_dict = {}
    for (k, val) in state_dict_trunk.items():
        if any(x in k for x in ["fc", "clf", "num_batches_tracked"]):
            continue
        k = k.replace("initial_block._module.0.", "_feature_blocks.conv1.")
        k = k.replace("initial_block._module.1.", "_feature_blocks.bn1.")
        for idx in range(len(layers)):
            for j in range(layers[idx]):
                k = k.replace(f"blocks.{idx}.block{idx}-{j}.", f"_feature_blocks.layer{idx + 1}.{j}.")
        k = k.replace(".convolutional_block.0.weight", ".conv1.weight")
        k = k.replace(".convolutional_block.3.weight", ".conv2.weight")
        k = k.replace(".convolutional_block.6.weight", ".conv3.weight")
        k = k.replace(".convolutional_block.1.", ".bn1.")
        k = k.replace(".convolutional_block.4.", ".bn2.")
        k = k.replace(".bn.", ".bn3.")
        output_dict[k] = val
    return output_dict


def convert_heads_to_classy_model(state_dict, out_prefix, num_fc_layers, use_bn_head=False, use_bias_head_fc=True):
    converted_dict = {"block3-2": {"default_head": {}}}
    if num_fc_layers > 1:
        out_dict = {}
        for idx in range(num_fc_layers - 1):
            local_prefix = f"mlp.layers.{idx}"
            out_dict[f"{local_prefix}.fc.weight"] = state_dict[f"{idx}.clf.0.weight"]
            if use_bias_head_fc:
                out_dict[f"{local_prefix}.fc.bias"] = state_dict[f"{idx}.clf.0.bias"]
            if use_bn_head:
                bn = f"{local_prefix}.batch_norm"
                out_dict[f"{bn}.weight"] = state_dict[f"{idx}.clf.1.weight"]
                out_dict[f"{bn}.bias"] = state_dict[f"{idx}.clf.1.bias"]
                out_dict[f"{bn}.running_mean"] = state_dict[f"{idx}.clf.1.running_mean"]
                out_dict[f"{bn}.running_var"] = state_dict[f"{idx}.clf.1.running_var"]
        out_dict[f"{out_prefix}_fc.weight"] = state_dict[f"{idx + 1}.clf.0.weight"]
        if use_bias_head_fc:
            out_dict[f"{out_prefix}_fc.bias"] = state_dict[f"{idx + 1}.clf.0.bias"]
        converted_dict["block3-2"]["default_head"] = out_dict
    else:
        converted_dict = {"block3-2": {"default_head": {
            f"{out_prefix}_fc.weight": state_dict["0.clf.0.weight"],
            f"{out_prefix}_fc.bias": state_dict["0.clf.0.bias"]}}}
    return converted_dict


def heads_case(out, trunk):
    heads = {}
    for i, (k, shape) in enumerate([("0.clf.0.weight", (4, 3)), ("0.clf.0.bias", (4,)), ("0.clf.1.weight", (4,)),
                                    ("0.clf.1.bias", (4,)), ("0.clf.1.running_mean", (4,)),
                                    ("0.clf.1.running_var", (4,)), ("0.clf.1.num_batches_tracked", ()),
                                    ("1.clf.0.weight", (2, 4)), ("1.clf.0.bias", (2,))]):
        heads[k] = torch.tensor(5, dtype=torch.int64) if not shape else torch.arange(
            float(torch.Size(shape).numel()), dtype=torch.float32).reshape(shape) + 100 * i
    torch.save({"classy_state_dict": {"base_model": {"model": {"trunk": trunk, "heads": heads}}}},
               os.path.join(out, "vissl_rn50_heads.torch"))
    converted = convert_heads_to_classy_model(heads, "proj", 2, True, True)
    classy = convert_trunk_to_classy_model(trunk, 50)
    torch.save({"classy_state_dict": {"base_model": {"model": {"trunk": classy, "heads": converted}}}},
               os.path.join(out, "classy_rn50_heads.torch"))
    with open(os.path.join(out, "classy_rn50_heads_names.txt"), "w") as f:
        f.write("".join(f"{k}\n" for k in converted["block3-2"]["default_head"]))


def main():
    out = golden.out_dir("convert")
    trunk = vissl_checkpoint()["classy_state_dict"]["base_model"]["model"]["trunk"]
    classy = convert_trunk_to_classy_model(trunk, 50)
    torch.save({"classy_state_dict": {"base_model": {"model": {"trunk": classy}}}},
               os.path.join(out, "classy_rn50.torch"))
    with open(os.path.join(out, "classy_rn50_names.txt"), "w") as f:
        f.write("".join(f"{k}\n" for k in classy))
    back = convert_classy_trunk_to_vissl_model(classy, 50)
    with open(os.path.join(out, "classy_to_vissl_names.txt"), "w") as f:
        f.write("".join(f"{k}\n" for k in back))
    assert all(torch.equal(back[k], trunk[k]) for k in back)
    heads_case(out, trunk)


if __name__ == "__main__":
    main()
