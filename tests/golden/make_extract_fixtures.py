#!/usr/bin/python3
"""make_extract_fixtures.py — torchvision's own features for selfsup-extract (tests/unit/test_extract.c).

The trunk is torchvision's resnet18 with every parameter and BN statistic set by the closed
formulas of make_resnet_fixtures.py (the C side's model_init_formula sets the same values and
writes them as a torchvision-layout .pth, which selfsup-extract loads with VISSL's
APPEND_PREFIX rule), in eval mode, as VISSL's extract_features runs it. Five 32 × 32 inputs from
the same input formula. What VISSL's feature-extractor model returns for
LINEAR_EVAL_FEAT_POOL_OPS_MAP [["res4", ["AdaptiveAvgPool2d", [[2, 2]]]], ["res5avg", ["Identity", []]]]:
  res4    = AdaptiveAvgPool2d((2, 2))(layer3(...)).flatten(1)   5 × 1024
  res5avg = avgpool(layer4(...)).flatten(1)                      5 × 512

Files (tests/golden/fixtures/extract/): tv_r18_x.npy (the inputs, 5 × 3 × 32 × 32),
tv_r18_res4.npy, tv_r18_res5avg.npy.

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_extract_fixtures.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_resnet_fixtures import inputs, trunk  # noqa: E402
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("extract")


def main():
    os.makedirs(OUT, exist_ok=True)
    m = trunk(18).eval()
    x = inputs(5, 32, phase=3)
    seen = {}
    m.layer3.register_forward_hook(lambda mod, i, o: seen.__setitem__("res4", o))
    with torch.no_grad():
        res5avg = m(x)
        res4 = torch.nn.AdaptiveAvgPool2d((2, 2))(seen["res4"]).flatten(1)
    for name, arr in (("x", x), ("res4", res4), ("res5avg", res5avg)):
        golden.save_f32(os.path.join(OUT, f"tv_r18_{name}.npy"), arr)
    print("res4", tuple(res4.shape), "res5avg", tuple(res5avg.shape))


if __name__ == "__main__":
    main()
