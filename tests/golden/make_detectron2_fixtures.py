#!/usr/bin/python3
"""make_detectron2_fixtures.py — reference files for `selfsup convert IN OUT --to detectron2`
(orchestrator/cmd_convert.c).

A VISSL checkpoint of a ResNet-50 trunk (every name torchvision's resnet50 has, fc.* aside, under
_feature_blocks., num_batches_tracked included) and a head, each tensor small with values of its
own, and what VISSL 0.1.5's extra_scripts/convert_vissl_to_detectron2.py makes of it
(--state_dict_key_name classy_state_dict --weights_type torch), its functions re-stated. Detectron2
reads the result with its checkpointer: the names are Detectron2's ResNet names (stem.conv1,
res2…res5, shortcut, conv*.norm), which the script's table encodes. Under
tests/golden/fixtures/convert/:

  vissl_rn50.torch   the VISSL checkpoint (classy_state_dict.base_model.model.{trunk,heads})
  d2_rn50.torch      the script's output: {"model": OrderedDict, "matching_heuristics": True}
  d2_rn50_names.txt  its "model" names, in order, one per line

Run from the repository root:  /usr/bin/python3 tests/golden/make_detectron2_fixtures.py
"""
import os
import re
from collections import OrderedDict

import numpy as np
import torch
import torchvision

import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

_SKIP_LAYERS = ["num_batches_tracked", "fc1", "fc2"]


def convert_to_detectron2_names(layer_keys):
    output_keys = []
    for k in layer_keys:
        k = k.replace("_feature_blocks.conv1.", "stem.conv1.")
        k = k.replace("_feature_blocks.bn1.", "stem.conv1.norm.")
        k = k.replace("_feature_blocks.layer1.", "res2.")
        k = k.replace("_feature_blocks.layer2.", "res3.")
        k = k.replace("_feature_blocks.layer3.", "res4.")
        k = k.replace("_feature_blocks.layer4.", "res5.")
        k = k.replace(".downsample.0.", ".shortcut.")
        k = k.replace(".downsample.1.", ".shortcut.norm.")
        k = k.replace(".bn1.", ".conv1.bn.")
        k = k.replace(".bn2.", ".conv2.bn.")
        k = k.replace(".bn3.", ".conv3.bn.")
        k = re.sub("bn\\.bias$", "norm.bias", k)
        k = re.sub("bn\\.weight$", "norm.weight", k)
        k = re.sub("bn\\.running_mean$", "norm.running_mean", k)
        k = re.sub("bn\\.running_var$", "norm.running_var", k)
        output_keys.append(k)
    assert len(output_keys) == len(set(output_keys)), "Error in converting layer names"
    return output_keys


def _rename_weights_to_d2(weights):
    original_keys = sorted(weights.keys())
    layer_keys = convert_to_detectron2_names(sorted(weights.keys()))
    key_map = {k: v for k, v in zip(original_keys, layer_keys)}
    new_weights = OrderedDict()
    for k in original_keys:
        if any(x in k for x in _SKIP_LAYERS):
            continue
        new_weights[key_map[k]] = torch.from_numpy(np.array(weights[k].detach().cpu()))
    return new_weights


def vissl_checkpoint():
    trunk = OrderedDict()
    for i, (name, t) in enumerate(torchvision.models.resnet50().state_dict().items()):
        if name.startswith("fc."):
            continue
        if name.endswith("num_batches_tracked"):
            trunk[f"_feature_blocks.{name}"] = torch.tensor(i, dtype=torch.int64)
        else:
            trunk[f"_feature_blocks.{name}"] = torch.arange(3, dtype=torch.float32) + 3 * i
    heads = OrderedDict([("0.clf.0.weight", torch.ones(2, 3)), ("0.clf.0.bias", torch.zeros(2))])
    return {"classy_state_dict": {"base_model": {"model": {"trunk": trunk, "heads": heads}}}}


def main():
    out = golden.out_dir("convert")
    ckpt = vissl_checkpoint()
    torch.save(ckpt, os.path.join(out, "vissl_rn50.torch"))
    loaded = torch.load(os.path.join(out, "vissl_rn50.torch"))["classy_state_dict"]["base_model"]["model"]["trunk"]
    d2 = _rename_weights_to_d2(loaded)
    torch.save({"model": d2, "matching_heuristics": True}, os.path.join(out, "d2_rn50.torch"))
    with open(os.path.join(out, "d2_rn50_names.txt"), "w") as f:
        f.write("".join(f"{k}\n" for k in d2))


if __name__ == "__main__":
    main()
