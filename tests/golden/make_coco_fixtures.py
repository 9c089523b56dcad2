#!/usr/bin/python3
"""make_coco_fixtures.py — reference data files for `selfsup dataset coco2014`
(orchestrator/cmd_dataset_coco.c).

Writes small COCO instance files and what VISSL 0.1.5's extra_scripts/create_coco_data_files.py
makes of them, its functions re-stated (pycocotools' COCO index, which the script uses only for
imgs and getAnnIds, is re-stated too: images by id, annotations per image in file order). Under
tests/golden/fixtures/dataset_coco/:

  annotations/instances_{train,val,minival}2014.json   no valminusminival: the command skips a
      partition whose file is missing (VISSL's script asserts them all), so the script is run on
      the three here. The files hold what get_valid_objs sorts out: "ignore": 1 (and true), a zero
      area, boxes of width or height 1 or less (x2 = x1), boxes outside the image (clipped to one
      line) and partly outside (kept), float boxes; categories with COCO's gapped ids, in an order
      that is not the ids'; two images with one file name (one row, as VISSL's map keyed by name),
      an image without annotations (a row of zeros); file names out of order.
  coco/{val,train,minival}_{images,labels}.npy          the script's output, train_imgs_path
      "train2014", val_imgs_path "val2014"

Run from the repository root:  /usr/bin/python3 tests/golden/make_coco_fixtures.py
"""
import json
import os
from collections import defaultdict

import numpy as np

import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

CATEGORIES = [{"id": 7, "name": "train"}, {"id": 1, "name": "person"}, {"id": 90, "name": "toothbrush"},
              {"id": 3, "name": "car"}]


def image(i, name, w=64, h=48):
    return {"id": i, "file_name": name, "width": w, "height": h}


def ann(i, image_id, cat, bbox, area=100.0, **extra):
    return dict({"id": i, "image_id": image_id, "category_id": cat, "bbox": bbox, "area": area}, **extra)


FILES = {
    "train": {
        "images": [image(11, "COCO_train2014_000000000011.jpg"), image(5, "COCO_train2014_000000000005.jpg", 30, 20),
                   image(9, "COCO_train2014_000000000009.jpg"), image(12, "COCO_train2014_000000000005.jpg"),
                   image(40, "COCO_train2014_000000000040.jpg")],
        "annotations": [
            ann(1, 11, 7, [3.0, 4.0, 10.0, 10.0]),                  # valid
            ann(2, 11, 1, [3.0, 4.0, 10.0, 10.0], ignore=1),        # ignored
            ann(3, 11, 90, [3.0, 4.0, 10.0, 10.0], area=0),         # no area
            ann(4, 5, 3, [2.0, 2.0, 1.0, 5.0]),                     # width 1: x2 == x1
            ann(5, 5, 90, [25.0, 15.0, 20.0, 20.0]),                # partly outside: clipped, kept
            ann(6, 9, 1, [70.0, 10.0, 5.0, 5.0]),                   # right of the image: one line
            ann(7, 9, 3, [10.5, 10.25, 2.5, 1.75]),                 # float box, kept
            ann(8, 12, 7, [1.0, 1.0, 4.0, 4.0], ignore=True),       # true == 1: ignored
            ann(9, 12, 1, [1.0, 1.0, 4.0, 4.0], ignore=0),          # kept: joins image 5's row
            ann(10, 9, 3, [0.0, 0.0, 3.0, 0.5]),                    # height under 1: y2 == y1
            ann(11, 11, 7, [30.0, 30.0, 8.0, 8.0]),                 # the same category again
        ],
        "categories": CATEGORIES,
    },
    "val": {
        "images": [image(3, "COCO_val2014_000000000003.jpg"), image(1, "COCO_val2014_000000000001.jpg")],
        "annotations": [ann(1, 1, 3, [1.0, 1.0, 5.0, 5.0]), ann(2, 3, 90, [1.0, 1.0, 5.0, 5.0]),
                        ann(3, 3, 1, [-5.0, -5.0, 10.0, 10.0])],
        "categories": CATEGORIES,
    },
    "minival": {
        "images": [image(1, "COCO_val2014_000000000001.jpg")],
        "annotations": [ann(1, 1, 3, [1.0, 1.0, 5.0, 5.0])],
        "categories": CATEGORIES,
    },
}


# ---- create_coco_data_files.py, re-stated ----------------------------------------------------------

def clip_xyxy_to_image(x1, y1, x2, y2, height, width):
    x1 = np.minimum(width - 1.0, np.maximum(0.0, x1))
    y1 = np.minimum(height - 1.0, np.maximum(0.0, y1))
    x2 = np.minimum(width - 1.0, np.maximum(0.0, x2))
    y2 = np.minimum(height - 1.0, np.maximum(0.0, y2))
    return x1, y1, x2, y2


def get_valid_objs(entry, objs):
    valid_objs = []
    width, height = entry["width"], entry["height"]
    for obj in objs:
        if "ignore" in obj and obj["ignore"] == 1:
            continue
        x1 = obj["bbox"][0]
        y1 = obj["bbox"][1]
        x2 = x1 + np.maximum(0.0, obj["bbox"][2] - 1.0)
        y2 = y1 + np.maximum(0.0, obj["bbox"][3] - 1.0)
        x1, y1, x2, y2 = clip_xyxy_to_image(x1, y1, x2, y2, height, width)
        if obj["area"] > 0 and x2 > x1 and y2 > y1:
            valid_objs.append(obj)
    return valid_objs


def get_imgs_labels_info(split, json_file, train_imgs_path, val_imgs_path):
    json_data = json.load(open(json_file, "r"))
    image_index = [x["id"] for x in json_data["images"]]
    imgs = {img["id"]: img for img in json_data["images"]}  # pycocotools' COCO.imgs
    img_to_anns = defaultdict(list)  # COCO.imgToAnns, behind getAnnIds(imgIds=id)
    for a in json_data["annotations"]:
        img_to_anns[a["image_id"]].append(a)
    cat_ids = [x["id"] for x in json_data["categories"]]
    coco_to_me = {val: ind for ind, val in enumerate(cat_ids)}
    num_classes = len(json_data["categories"])
    img_labels_map = {}
    for im_id in image_index:
        entry = imgs[im_id]
        img_name = entry["file_name"]
        valid_objs = get_valid_objs(entry, img_to_anns[im_id])
        if img_name not in img_labels_map:
            img_labels_map[img_name] = np.zeros(num_classes, dtype=np.int32)
        for obj in valid_objs:
            img_labels_map[img_name][coco_to_me[obj["category_id"]]] = 1.0
    img_paths, img_labels = [], []
    prefix = train_imgs_path if split == "train" else val_imgs_path
    for item in sorted(img_labels_map.keys()):
        img_paths.append(f"{prefix}/{item}")
        img_labels.append(img_labels_map[item])
    return img_paths, img_labels


def main():
    out = golden.out_dir("dataset_coco")
    ann_dir = os.path.join(out, "annotations")
    os.makedirs(ann_dir, exist_ok=True)
    res = os.path.join(out, "coco")
    os.makedirs(res, exist_ok=True)
    for partition, data in FILES.items():
        path = os.path.join(ann_dir, f"instances_{partition}2014.json")
        with open(path, "w") as f:
            json.dump(data, f)
        imgs, lbls = get_imgs_labels_info(partition, path, "train2014", "val2014")
        np.save(os.path.join(res, f"{partition}_images.npy"), np.array(imgs))
        np.save(os.path.join(res, f"{partition}_labels.npy"), np.array(lbls))


if __name__ == "__main__":
    main()
