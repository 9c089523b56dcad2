#!/usr/bin/python3
"""make_inat_fixtures.py — reference file lists for `selfsup dataset inaturalist2018`
(orchestrator/cmd_dataset_inat.c).

Small train2018.json / val2018.json files in the competition's layout (only what the script
reads: images' file_name) and what VISSL's extra_scripts/datasets/create_inaturalist2018_data_files.py
makes of them, its get_images_labels_info re-stated, input_dir_path the relative "inat" (the test
runs the command from the fixture folder). Under tests/golden/fixtures/dataset_inat/:

  inat/{train,val}2018.json, out/{train,val}_{images,labels}.npy

Run from the repository root:  /usr/bin/python3 tests/golden/make_inat_fixtures.py
"""
import json
import os

import numpy as np

import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

FILES = {
    "train2018.json": ["train_val2018/Plantae/7477/3b60c9486db1d2ee875f11a669fbde4b.jpg",
                       "train_val2018/Insecta/1/f9f6f7fd0b9bb3fdaa1ac1b8a7c2e46c.jpg",
                       "train_val2018/Aves/3210/0a0b1c2d.jpg"],
    "val2018.json": ["train_val2018/Fungi/8000/aa.jpg", "train_val2018/Plantae/7477/bb.jpg"],
}


def get_images_labels_info(input_file_name, input_dir_path):
    data_source_path = input_dir_path + input_file_name
    with open(data_source_path) as ds_path:
        data = json.load(ds_path)
    images, labels = [], []
    for info in data["images"]:
        image = info["file_name"]
        path_elements = image.split("/")
        inaturalist_path = "/".join(path_elements[1:])
        full_path = f"{ input_dir_path }/train_val2018/{inaturalist_path}"
        label = int(path_elements[2])
        images.append(full_path)
        labels.append(label)
    return np.array(images), np.array(labels)


def main():
    out = golden.out_dir("dataset_inat")
    os.makedirs(os.path.join(out, "inat"), exist_ok=True)
    os.makedirs(os.path.join(out, "out"), exist_ok=True)
    for name, files in FILES.items():
        images = [{"id": i, "file_name": f, "width": 800, "height": 600} for i, f in enumerate(files)]
        with open(os.path.join(out, "inat", name), "w") as f:
            json.dump({"images": images, "annotations": [], "categories": []}, f)
    here = os.getcwd()
    os.chdir(out)
    try:
        for split in ("train", "val"):
            images, labels = get_images_labels_info(f"/{split}2018.json", "inat")
            np.save(f"out/{split}_images.npy", images)
            np.save(f"out/{split}_labels.npy", labels)
    finally:
        os.chdir(here)


if __name__ == "__main__":
    main()
