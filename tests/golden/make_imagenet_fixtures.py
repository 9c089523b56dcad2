#!/usr/bin/python3
"""make_imagenet_fixtures.py — reference file lists for `selfsup dataset imagenet`
(orchestrator/cmd_dataset_imagenet.c).

Writes a small ImageNet-style tree (empty image files: the script never opens one) and what
VISSL 0.1.5's extra_scripts/create_imagenet_data_files.py makes of it with --generate_json, its
functions re-stated with one change, which is the command's default: os.listdir's order, which
depends on the file system, is sorted (classes and images; torchvision's ImageFolder order). The
command's --listdir-order keeps the script's own order; the test checks that one against the
listing it reads itself. Under tests/golden/fixtures/dataset_imagenet/:

  tree/{train,val}/<class>/<image>   three classes (names that sort otherwise by bytes than by
                                     case), images named out of order; val lacks one class, so
                                     its numbers are its own, as the script's per-split numbering
  imagenet/{train,val}_{images,labels}.npy and {train,val}_targets.json

data_source_dir is the relative "tree", so the test runs the command from the fixture folder.

Run from the repository root:  /usr/bin/python3 tests/golden/make_imagenet_fixtures.py
"""
import json
import os

import numpy as np

import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

TREE = {
    "train": {"n01440764": ["n01440764_10026.JPEG", "n01440764_10.JPEG", "n01440764_2.JPEG"],
              "Zebra": ["z_1.JPEG", "Z_0.JPEG"],
              "n02102040": ["n02102040_7.JPEG"]},
    "val": {"n01440764": ["ILSVRC2012_val_00000293.JPEG", "ILSVRC2012_val_00000002.JPEG"],
            "n02102040": ["ILSVRC2012_val_00000009.JPEG"]},
}


def get_all_classes(data_dir):
    class_idx = {}
    counter = 0
    for item in sorted(os.listdir(data_dir)):  # the script: os.listdir's order
        if item not in ["." ".."]:
            class_idx[item] = counter
            counter += 1
    return class_idx


def get_images_labels_info(split, data_source_dir):
    data_dir = f"{data_source_dir}/{split}"
    class_idx = get_all_classes(data_dir)
    image_paths, image_classes, img_ids = [], [], []
    for class_name in class_idx.keys():
        class_label = class_idx[class_name]
        class_dir = f"{data_dir}/{class_name}"
        for item in sorted(os.listdir(class_dir)):  # the script: os.listdir's order
            if item not in [".", ".."]:
                image_paths.append(f"{class_dir}/{item}")
                img_ids.append(f"{class_name}/{item}")
                image_classes.append(class_label)
    output_dict = {img_ids[i]: image_classes[i] for i in range(len(img_ids))}
    return image_paths, image_classes, output_dict


def main():
    out = golden.out_dir("dataset_imagenet")
    for split, classes in TREE.items():
        for cls, images in classes.items():
            d = os.path.join(out, "tree", split, cls)
            os.makedirs(d, exist_ok=True)
            for name in images:
                open(os.path.join(d, name), "w").close()
    res = os.path.join(out, "imagenet")
    os.makedirs(res, exist_ok=True)
    here = os.getcwd()
    os.chdir(out)
    try:
        for split in ("train", "val"):
            imgs, lbls, output_dict = get_images_labels_info(split, "tree")
            np.save(f"imagenet/{split}_images.npy", np.array(imgs))
            np.save(f"imagenet/{split}_labels.npy", np.array(lbls))
            with open(f"imagenet/{split}_targets.json", "w") as fp:
                json.dump(output_dict, fp)
    finally:
        os.chdir(here)


if __name__ == "__main__":
    main()
