#!/usr/bin/python3
"""Golden batches for selfsup-collate: VISSL 0.1.5's collators run with PyTorch.

Regenerate:  /usr/bin/python3 tests/golden/make_collate_fixtures.py
Writes tests/golden/fixtures/collate/<collator>/<tensor>.npy, one file per tensor of the batch
dict, named with selfsup's record rule (list entry i of key K -> "K.i", nested "K.i.j").

The samples follow formulas that tests/unit/test_collate.c rebuilds as records:
  item k of sample i: uint8 [H_k, W_k, 3] (or [T, H, W, 3] for Jigsaw towers) with
      value (i*37 + k*11 + y*5 + x*3 + c + t*7) % 256
  label[j] = 100*i + j;  data_valid[k] = -1 for (i, k) == (1, 0) else 1;  data_idx[k] = 10 + i
The collators below are VISSL's code paths (vissl/data/collators/*.py at v0.1.5), written
out here so that torch.stack / view / squeeze do the stacking, not our C.

Labels that are rows (a 2-D [N, M] label .npy, np.load(path)[idx] is a row of M values):
  default_collate_label_rows: label[j] of sample i = int64 row [ROW(i, j, m) for m < M_ROW]
  with ROW(i, j, m) = (i + 2*j + m) % 3 - 1 (VOC07's {1, 0, -1}); one item [2, 3, 3].
targets_one_hot_default_collator (fixture dirs targets_one_hot_*): label[0] = [pos, neg] from
ONE_HOT_CASES below (test_collate.c encodes them as a -1 padded row [pos..., neg...]); one
item [2, 3, 3] per sample, data_valid / data_idx as above.
"""
import os
import numpy as np
import torch
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("collate")
N = 3  # samples per batch (4 for mixup, which pairs them)


def item(i, k, shape):
    t_, h, w = ((1,) + tuple(shape) if len(shape) == 3 else tuple(shape))[:3]
    a = np.zeros((t_, h, w, 3), np.uint8)
    for t in range(t_):
        for y in range(h):
            for x in range(w):
                for c in range(3):
                    a[t, y, x, c] = (i * 37 + k * 11 + y * 5 + x * 3 + c + t * 7) % 256
    return torch.from_numpy(a[0] if len(shape) == 3 else a)


def samples(shapes, n_label, n=N):
    out = []
    for i in range(n):
        out.append({
            "data": [item(i, k, s) for k, s in enumerate(shapes)],
            "label": [100 * i + j for j in range(n_label)],
            "data_valid": [(-1 if (i, k) == (1, 0) else 1) for k in range(len(shapes))],
            "data_idx": [10 + i for _ in shapes],
        })
    return out


def default_collate(batch):
    return torch.utils.data.dataloader.default_collate(batch)


def simclr_collator(batch):
    num_pos = len(batch[0]["data"])
    d, l, v, ix = [], [], [], []
    for pos in range(num_pos):
        for s in batch:
            d.append(s["data"][pos]); l.append(s["label"][pos])
            v.append(s["data_valid"][pos]); ix.append(s["data_idx"][pos])
    return {"data": [torch.stack(d)], "label": [torch.LongTensor(l)],
            "data_valid": [torch.LongTensor(v)], "data_idx": [torch.LongTensor(ix)]}


def multicrop_collator(batch):
    data = [x["data"] for x in batch]
    labels = [torch.tensor(x["label"]) for x in batch]
    valid = [torch.tensor(x["data_valid"]) for x in batch]
    idx = [torch.tensor(x["data_idx"]) for x in batch]
    od, ol, ov, oi = [], [], [], []
    for pos in range(len(data[0])):
        cur = []
        for i in range(len(data)):
            cur.append(data[i][pos]); ol.append(labels[i][pos]); ov.append(valid[i][pos]); oi.append(idx[i][pos])
        od.append(torch.stack(cur))
    return {"data": [od], "label": [torch.stack(ol)], "data_valid": [torch.stack(ov)], "data_idx": [torch.stack(oi)]}


def moco_collator(batch):
    # VISSL indexes [:, 0, :, :, :] on CHW tensors; our items are HWC, same rank.
    data = [torch.stack(x["data"]) for x in batch]
    labels = [torch.tensor(x["label"]) for x in batch]
    valid = [torch.tensor(x["data_valid"]) for x in batch]
    idx = [torch.tensor(x["data_idx"]) for x in batch]
    return {"data": [torch.stack(data).squeeze()[:, 0, :, :, :].squeeze()],
            "data_momentum": [torch.stack(data).squeeze()[:, 1, :, :, :].squeeze()],
            "label": [torch.stack(labels).squeeze()], "data_valid": [torch.stack(valid).squeeze()],
            "data_idx": [torch.stack(idx).squeeze()]}


def siamese_collator(batch):
    n_src = len(batch[0]["data"])
    data = [x["data"] for x in batch]
    labels = [x["label"] for x in batch]
    data_valid = torch.BoolTensor([x["data_valid"][0] for x in batch])
    od, ol = [], []
    for s in range(n_src):
        st = torch.stack([data[i][s] for i in range(len(batch))])
        b, t = st.shape[:2]
        od.append(st.view((b * t,) + tuple(st.shape[2:])))
        ol.append(torch.stack([torch.tensor(labels[i][s]) for i in range(len(batch))]).squeeze())
    return {"data": od, "label": ol, "data_valid": [data_valid]}


def patch_and_image_collator(batch):
    images = torch.stack([x["data"][0] for x in batch])
    patches = torch.stack([p for x in batch for p in x["data"][1:]])
    labels = torch.LongTensor([x["label"][0] for x in batch]).squeeze()
    valid = torch.BoolTensor([x["data_valid"][0] for x in batch])
    return {"images": [images], "patches": [patches], "label": [labels], "data_valid": [valid]}


MIXUP_LAMBDA = 0.3141592653589793
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def multicrop_mixup_collator(batch):
    # VISSL's collator sees float CHW tensors (ToTensor, Normalize); ours get HWC bytes plus the
    # pending normalisation, so make the tensors torchvision's way first. lambda is fixed here
    # (np.random.beta(0.2, 0.2) in VISSL) so the C test can pass the same one.
    import torchvision.transforms.functional as F
    for x in batch:
        x["data"] = [F.normalize(F.to_tensor(d.numpy()), MEAN, STD) for d in x["data"]]
    data = [x["data"] for x in batch]
    labels = [torch.tensor(x["label"]) for x in batch]
    valid = [torch.tensor(x["data_valid"]) for x in batch]
    idx = [torch.tensor(x["data_idx"]) for x in batch]

    def blend(images, m):
        images[0].mul_(m)
        images[1].mul_(1 - m)
        images[0].add_(images[1])
        return images[0]

    od, ol, ov, oi = [], [], [], []
    for pos in range(len(data[0])):
        cur = []
        for i in range(0, len(data), 2):
            cur.append(blend([data[i][pos], data[i + 1][pos]], MIXUP_LAMBDA))
            ol.append(labels[i][pos]); ov.append(valid[i][pos]); oi.append(idx[i][pos])
        od.append(torch.stack(cur))
    return {"data": [od], "label": [torch.stack(ol)], "data_valid": [torch.stack(ov)], "data_idx": [torch.stack(oi)]}


def convert_to_one_hot(pos_lbl, neg_lbl, num_classes):
    # VISSL 0.1.5 vissl/data/collators/targets_one_hot_default_collator.py: -1 everywhere
    # (ignore), scatter 1 at the positives, then 0 at the negatives (so negatives win).
    one_hot_targets = torch.LongTensor(num_classes).zero_() - 1
    if isinstance(pos_lbl, list) and len(pos_lbl) > 0:
        assert max(pos_lbl) < num_classes, "Class Index must be less than number of classes"
        one_hot_targets.scatter_(0, torch.Tensor(pos_lbl).long(), 1)
    if isinstance(neg_lbl, list) and len(neg_lbl) > 0:
        assert max(neg_lbl) < num_classes, "Class Index must be less than number of classes"
        one_hot_targets.scatter_(0, torch.Tensor(neg_lbl).long(), 0)
    return one_hot_targets.squeeze()


def targets_one_hot_default_collator(batch, num_classes):
    assert num_classes > 0, "num_classes not specified for the collator"
    assert "data" in batch[0] and "label" in batch[0]
    assert len(batch[0]["data"]) == 1, "This collator supports only 1 data source."
    assert len(batch[0]["label"][0]) == 2, "This collator takes positive and negative labels separately."
    data = torch.stack([x["data"][0] for x in batch])
    data_valid = torch.stack([torch.tensor(x["data_valid"][0]) for x in batch])
    data_idx = torch.stack([torch.tensor(x["data_idx"][0]) for x in batch])
    labels = [x["label"][0] for x in batch]
    output_labels = []
    for idx in range(data.shape[0]):
        output_labels.append(convert_to_one_hot(labels[idx][0], labels[idx][1], num_classes))
    return {"data": [data], "label": [torch.stack(output_labels)], "data_valid": [data_valid],
            "data_idx": [data_idx]}


# name: (num_classes, [(pos_list, neg_list) per sample]); mirrored in test_collate.c.
ONE_HOT_CASES = {
    "targets_one_hot_t20": (12, [([1, 3, 6], [4, 9])]),  # spec T20
    "targets_one_hot_overlap": (5, [([0, 2], [2]), ([4], [4, 1])]),  # in both lists -> 0
    "targets_one_hot_batch": (7, [([1, 5], [0]), ([], [2, 3, 6]), ([6], [])]),  # ragged lists
}
M_ROW = 3


def one_hot_samples(lists):
    out = []
    for i, (pos, neg) in enumerate(lists):
        out.append({"data": [item(i, 0, (2, 3, 3))], "label": [[pos, neg]],
                    "data_valid": [-1 if i == 1 else 1], "data_idx": [10 + i]})
    return out


def label_row_samples(n_label, n=N):
    out = samples([(2, 3, 3)], 0, n)
    for i, s in enumerate(out):
        s["label"] = [np.array([(i + 2 * j + m) % 3 - 1 for m in range(M_ROW)], np.int64) for j in range(n_label)]
    return out


def flatten(batch):
    out = {}
    for key, val in batch.items():
        for i, v in enumerate(val):
            if isinstance(v, list):
                for j, t in enumerate(v):
                    out[f"{key}.{i}.{j}"] = t
            else:
                out[f"{key}.{i}"] = v
    return out


CASES = {
    "default_collate": (default_collate, [(4, 5, 3), (2, 3, 3)], 2),
    "simclr_collator": (simclr_collator, [(4, 5, 3), (4, 5, 3)], 2),
    "multicrop_collator": (multicrop_collator, [(4, 5, 3), (4, 5, 3), (2, 3, 3), (2, 3, 3)], 4),
    "moco_collator": (moco_collator, [(4, 5, 3), (4, 5, 3)], 2),
    "siamese_collator": (siamese_collator, [(3, 2, 2, 3)], 1),
    "patch_and_image_collator": (patch_and_image_collator, [(4, 5, 3), (2, 2, 3), (2, 2, 3), (2, 2, 3)], 4),
    "multicrop_mixup_collator": (multicrop_mixup_collator, [(4, 5, 3), (2, 3, 3)], 2),
}


def save(name, batch):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    for tname, t in flatten(batch).items():
        a = t.numpy()
        if a.dtype in (np.int64, np.uint8, np.bool_, np.float32):
            golden.save_array(os.path.join(d, tname + ".npy"), a)
        else:
            raise SystemExit(f"{name}/{tname}: unexpected dtype {a.dtype}")
    print(name, sorted(os.listdir(d)))


def main_extra():
    for name, (num_classes, lists) in ONE_HOT_CASES.items():
        save(name, targets_one_hot_default_collator(one_hot_samples(lists), num_classes))
    t20 = ONE_HOT_CASES["targets_one_hot_t20"]
    got = targets_one_hot_default_collator(one_hot_samples(t20[1]), t20[0])["label"][0][0].tolist()
    assert got == [-1, 1, -1, 1, 0, -1, 1, -1, -1, 0, -1, -1], got  # worked by hand
    batch = default_collate(label_row_samples(2))
    save("default_collate_label_rows", {k: list(v) for k, v in batch.items()})


def main():
    for name, (fn, shapes, n_label) in CASES.items():
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
        batch = fn(samples(shapes, n_label, 4 if name == "multicrop_mixup_collator" else N))
        if name == "default_collate":  # torch returns a dict of lists already
            batch = {k: list(v) for k, v in batch.items()}
        for tname, t in flatten(batch).items():
            a = t.numpy()
            if a.dtype in (np.int64, np.uint8, np.bool_, np.float32):
                golden.save_array(os.path.join(d, tname + ".npy"), a)
            else:
                raise SystemExit(f"{name}/{tname}: unexpected dtype {a.dtype}")
        print(name, sorted(os.listdir(d)))
    main_extra()


if __name__ == "__main__":
    main()
