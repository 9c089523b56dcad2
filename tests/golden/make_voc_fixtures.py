#!/usr/bin/python3
"""make_voc_fixtures.py — reference data files for `selfsup dataset voc2007|voc2012`
(orchestrator/cmd_dataset_voc.c).

Writes two small VOCdevkit-style trees of class lists (no images: the script never opens one)
and what VISSL 0.1.5's extra_scripts/create_voc_data_files.py makes of them, its functions
re-stated (fvcore's PathManager is plain open/os.path.exists here). Under
tests/golden/fixtures/dataset_voc/:

  VOC2007/ImageSets/Main/*.txt   trainval and test lists of three classes, with what VISSL's
                                 reader meets in the wild: double spaces and tabs, ids out of
                                 order, an image in one list only, a "difficult" 0, a label that
                                 is not a number (the image is kept, its -1s too), a line of three
                                 fields (skipped), a blank line; and files that are not lists:
                                 train.txt, big_plane_trainval.txt (three parts around '_')
  VOC2012/ImageSets/Main/*.txt   train, val and trainval lists and no test ones (VISSL's VOC2012
                                 rule: train from the train lists, test from the val ones)
  voc2007/{train,test}_{images,labels}.npy             the script run on VOC2007
  voc2007_separate/{train,val,test}_{images,labels}.npy and {...}_targets.json
                                 --separate_partitions 1 --generate_json 1 on VOC2007
  voc2012/{train,test}_{images,labels}.npy             the script run on VOC2012

data_source_dir is the relative "VOC2007" / "VOC2012" (the paths in the .npy files keep it as
given), so the test runs the command from the fixture folder.

Run from the repository root:  /usr/bin/python3 tests/golden/make_voc_fixtures.py
"""
import json
import os
from glob import glob

import numpy as np

import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

CLASSES = ("cat", "aeroplane", "dog")  # written unsorted: the script sorts the list files

VOC2007 = {
    "trainval": {
        "aeroplane": "000012 -1\n000005  1\n000009\t0\n000017 -1\n",
        "cat": "000012  1\n000005 -1\n000009 -1\n000017 x\n000020 1 extra\n\n",
        "dog": "000012 -1\n000005 -1\n000009  1\n000017 1\n000021 1\n",
    },
    "test": {
        "aeroplane": "000003 1\n000001 -1\n000007 0\n",
        "cat": "000003 -1\n000001 1\n000007 -1\n",
        "dog": "000003 -1\n000001 -1\n000007 1\n",
    },
    "train": {
        "aeroplane": "000012 -1\n000005  1\n",
        "cat": "000012  1\n000005 -1\n",
        "dog": "000012 -1\n000005 -1\n",
    },
    "val": {
        "aeroplane": "000009\t0\n000017 -1\n",
        "cat": "000009 -1\n000017 x\n",
        "dog": "000009  1\n000017 1\n",
    },
}
VOC2007_OTHER = {"train.txt": "000012\n000005\n", "big_plane_trainval.txt": "000012 1\n"}

VOC2012 = {
    "train": {c: f"2008_00{i}2 1\n2008_00{i}1 -1\n" for i, c in enumerate(CLASSES)},
    "val": {c: f"2008_10{i}0 0\n2008_1000 -1\n" for i, c in enumerate(CLASSES)},
    "trainval": {c: f"2008_00{i}2 1\n2008_00{i}1 -1\n2008_10{i}0 0\n" for i, c in enumerate(CLASSES)},
}


def write_tree(root, lists, other=None):
    main = os.path.join(root, "ImageSets", "Main")
    os.makedirs(main, exist_ok=True)
    for split, per_class in lists.items():
        for cls, text in per_class.items():
            with open(os.path.join(main, f"{cls}_{split}.txt"), "w") as f:
                f.write(text)
    for name, text in (other or {}).items():
        with open(os.path.join(main, name), "w") as f:
            f.write(text)


# ---- create_voc_data_files.py, re-stated --------------------------------------------------------

def validate_files(input_files):
    return [item for item in input_files if len(item.split("/")[-1].split("_")) == 2]


def get_data_files(split, data_source_dir, separate_partitions):
    data_dir = f"{data_source_dir}/ImageSets/Main"
    assert os.path.exists(data_dir)
    test_data_files = validate_files(glob(os.path.join(data_dir, "*_test.txt")))
    if separate_partitions > 0:
        train_data_files = validate_files(glob(os.path.join(data_dir, "*_train.txt")))
        val_data_files = validate_files(glob(os.path.join(data_dir, "*_val.txt")))
        assert len(train_data_files) == len(val_data_files)
        data_files = {"train": train_data_files, "test": test_data_files}.get(split, val_data_files)
    else:
        train_data_files = glob(os.path.join(data_dir, "*_trainval.txt"))
        if len(test_data_files) == 0:
            train_data_files = glob(os.path.join(data_dir, "*_train.txt"))
            test_data_files = glob(os.path.join(data_dir, "*_val.txt"))
        test_data_files = validate_files(test_data_files)
        train_data_files = validate_files(train_data_files)
        data_files = train_data_files if (split == "train") else test_data_files
    assert len(train_data_files) == len(test_data_files), "Missing classes"
    return data_files


def get_images_labels_info(split, data_source_dir, separate_partitions, generate_json):
    data_files = get_data_files(split, data_source_dir, separate_partitions)
    img_labels_map = {}
    for cls_num, data_path in enumerate(sorted(data_files)):
        with open(data_path, "r") as fopen:
            for line in fopen:
                try:
                    img_name, orig_label = line.strip().split()
                    if img_name not in img_labels_map:
                        img_labels_map[img_name] = -(np.ones(len(data_files), dtype=np.int32))
                    orig_label = int(orig_label)
                    if orig_label == -1:
                        orig_label = 0
                    elif orig_label == 0:
                        orig_label = -1
                    img_labels_map[img_name][cls_num] = orig_label
                except Exception:
                    pass
    img_paths, img_labels = [], []
    for item in sorted(img_labels_map.keys()):
        img_paths.append(f"{data_source_dir}/JPEGImages/{item}.jpg")
        img_labels.append(img_labels_map[item])
    output_dict = {}
    if generate_json:
        cls_names = [item.split("/")[-1].split(".")[0].split("_")[0] for item in sorted(data_files)]
        for img_id in sorted(img_labels_map.keys()):
            output_dict[img_id] = {name: int(img_labels_map[img_id][k]) for k, name in enumerate(cls_names)}
    return img_paths, img_labels, output_dict


def run_script(data_source_dir, output_dir, separate_partitions=0, generate_json=0):
    os.makedirs(output_dir, exist_ok=True)
    partitions = ["train", "test"] + (["val"] if separate_partitions > 0 else [])
    for partition in partitions:
        imgs, lbls, output_dict = get_images_labels_info(partition, data_source_dir, separate_partitions,
                                                         generate_json)
        np.save(f"{output_dir}/{partition}_images.npy", np.array(imgs))
        np.save(f"{output_dir}/{partition}_labels.npy", np.array(lbls))
        if generate_json:
            with open(f"{output_dir}/{partition}_targets.json", "w") as fp:
                json.dump(output_dict, fp)


def main():
    out = golden.out_dir("dataset_voc")
    write_tree(os.path.join(out, "VOC2007"), VOC2007, VOC2007_OTHER)
    write_tree(os.path.join(out, "VOC2012"), VOC2012)
    here = os.getcwd()
    os.chdir(out)  # data_source_dir relative, as the test gives it
    try:
        run_script("VOC2007", "voc2007")
        run_script("VOC2007", "voc2007_separate", separate_partitions=1, generate_json=1)
        run_script("VOC2012", "voc2012")
    finally:
        os.chdir(here)


if __name__ == "__main__":
    main()
