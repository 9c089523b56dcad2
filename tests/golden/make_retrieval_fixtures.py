#!/usr/bin/python3
"""make_retrieval_fixtures.py — VISSL's instance-retrieval benchmark on small synthetic datasets
(tests/unit/test_retrieval.c): the numbers tools/instance_retrieval_test.py computes, restated from
VISSL 0.1.5's vissl/utils/instance_retrieval_utils (rmac.py, pca.py, evaluate.py, data_util.py),
in numpy and torch as the tool runs them.

The datasets (tests/golden/fixtures/retrieval/data/):
  roxford5k/  jpg/*.jpg and gnd_roxford5k.pkl (imlist, qimlist, gnd[i] {bbx, easy, hard, junk}),
              the revisited layout; rparis6k/ the same, the PCA's training set;
  Oxford/     jpg/*.jpg and lab/Q_{query,good,ok,junk}.txt, the classic layout (one Paris
              corrupt-list name in jpg/, which VISSL leaves out);
  whitening/  images named by whiten_list.txt.
The images are small JPEGs of a few "buildings" (smooth random patterns), each seen again shifted,
scaled and noised, at several aspect ratios.

The trunk is torchvision's resnet18 with make_resnet_fixtures.py's formula weights (the C side
writes the same as a torchvision .pth); the layer is res4 (layer3), RESIZE_IMG 96, SPATIAL_LEVELS 3.
Each image: PIL open, convert("RGB"), resize so the longer side is 96 (PIL bilinear, sizes
np.round), ToTensor, ImageNet Normalize, layer3's map. Cases:
  rmac_revisited   rmac, PCA (N_PCA 8) learned on rparis6k, eval roxford5k:
                   rmac_revisited_sim.npy (queries × database), rmac_revisited_scores.npy
                   [mAP E, M, H, then mP@1,5,10 for E, M, H] (fractions)
  gem_revisited    gem (p 3), PCA (N_PCA 4) on rparis6k, eval roxford5k: gem_revisited_*.npy
  rmac_classic     rmac, PCA (N_PCA 8) on the whitening images (not resized: the tool resizes
                   them only when it evaluates INSTRE or whitening), eval Oxford with the queries
                   cropped to their regions: rmac_classic_sim.npy, rmac_classic_ap.npy (per query,
                   compute_ap.cpp's float arithmetic, queries in sorted label-file order)
  regions          rmac_regions.npy: rows [H, W, L, x, y, w, h] of get_rmac_region_coordinates
                   for a set of map sizes
Where VISSL 0.1.5's tool itself fails (R-MAC without PCA, GeM on maps of different sizes) the
fixtures follow selfsup's documented choice (stages/retrieval/retrieval.h); these cases do not
reach those paths except GeM's per-image pooling, which equals the tool's when sizes agree.

Every case is also computed in float64, and the generator checks that the ranking is the same and
that the closest two similarities of a query are far apart, so that the fixture's ranking does not
depend on rounding.

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_retrieval_fixtures.py
"""
import os
import pickle
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torchvision.transforms as T
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden  # noqa: E402
from make_resnet_fixtures import trunk  # noqa: E402

OUT = golden.out_dir("retrieval")
DATA = os.path.join(OUT, "data")
S = 96
LEVELS = 3
SEED = int(os.environ.get("RETRIEVAL_SEED", "4"))
MIN_GAP = 5e-4  # the smallest allowed difference between two similarities of one query, per unit of the largest


# ---- VISSL 0.1.5, restated ---------------------------------------------------------------------

def normalize_L2(a, dim):
    return a / torch.sqrt(torch.sum(a ** 2, dim=dim, keepdim=True))


def get_rmac_region_coordinates(H, W, L):
    ovr = 0.4
    steps = np.array((2, 3, 4, 5, 6, 7), dtype=np.float32)
    w = np.minimum(H, W)
    b = (np.maximum(H, W) - w) / (steps - 1)
    idx = np.argmin(np.abs(((w ** 2 - w * b) / w ** 2) - ovr)) + 1
    Wd = 0
    Hd = 0
    if H < W:
        Wd = idx
    elif H > W:
        Hd = idx
    regions_xywh = []
    for l in range(1, L + 1):  # noqa: E741
        wl = np.floor(2 * w / (l + 1))
        wl2 = np.floor(wl / 2 - 1)
        b = (W - wl) / (l + Wd - 1) if l + Wd - 1 > 0 else 0
        cenW = np.floor(wl2 + b * np.arange(l - 1 + Wd + 1)) - wl2
        b = (H - wl) / (l + Hd - 1) if l + Hd - 1 > 0 else 0
        cenH = np.floor(wl2 + b * np.arange(l - 1 + Hd + 1)) - wl2
        for i_ in cenH:
            for j_ in cenW:
                regions_xywh.append([j_, i_, wl, wl])
    for i in range(len(regions_xywh)):
        for j in range(4):
            regions_xywh[i][j] = int(round(regions_xywh[i][j]))
        if regions_xywh[i][0] + regions_xywh[i][2] > W:
            regions_xywh[i][0] -= (regions_xywh[i][0] + regions_xywh[i][2]) - W
        if regions_xywh[i][1] + regions_xywh[i][3] > H:
            regions_xywh[i][1] -= (regions_xywh[i][1] + regions_xywh[i][3]) - H
    return np.array(regions_xywh)


def get_rmac_descriptors(features, rmac_levels, pca=None):
    nim, nc, xd, yd = features.size()
    rmac_regions = get_rmac_region_coordinates(xd, yd, rmac_levels).astype(int)
    nr = len(rmac_regions)
    descs = []
    for x0, y0, w, h in rmac_regions:
        desc = features[:, :, y0:y0 + h, x0:x0 + w]
        desc = torch.max(desc, 2, keepdim=True)[0]
        desc = torch.max(desc, 3, keepdim=True)[0]
        descs.append(desc.view(-1, 1, nc))
    descs = normalize_L2(torch.cat(descs, 1), 2)
    if pca is None:
        return descs
    descs = pca.apply(descs.view(nr * nim, nc))
    descs = normalize_L2(descs, 1).view(nim, nr, pca.n_components)
    return normalize_L2(torch.sum(descs, 1), 1)


class PCA:
    def __init__(self, n_components):
        self.n_components = n_components

    def fit(self, X):
        mean = X.mean(axis=0)
        X -= mean
        self.mean = torch.from_numpy(mean).view(1, -1)
        Xcov = np.dot(X.T, X)
        d, V = np.linalg.eigh(Xcov)
        eps = d.max() * 1e-5
        d[d < eps] = eps
        idx = np.argsort(d)[::-1][: self.n_components]
        d = d[idx]
        V = V[:, idx]
        D = np.diag(1.0 / np.sqrt(d))
        self.DVt = torch.from_numpy(np.dot(D, V.T))

    def apply(self, X):
        X = X - self.mean
        return torch.mm(self.DVt, X.transpose(0, 1)).transpose(0, 1)


def gem(x, p=3, eps=1e-6):
    x = x.clamp(min=eps)
    x = F.avg_pool2d(x.pow(p), (x.size(-2), x.size(-1))).pow(1.0 / p)
    x = torch.cat((x, x.new_ones(x.size(0), 1, 1, 1)), 1)
    return x.view(x.size(0), -1)


def l2n(x, eps=1e-6):
    return x / (torch.norm(x, p=2, dim=1, keepdim=True) + eps).expand_as(x)


def compute_ap(ranks, nres):
    ap = 0
    recall_step = 1.0 / nres
    for j in np.arange(len(ranks)):
        rank = ranks[j]
        precision_0 = 1.0 if rank == 0 else float(j) / rank
        precision_1 = float(j + 1) / (rank + 1)
        ap += (precision_0 + precision_1) * recall_step / 2.0
    return ap


def compute_map(ranks, gnd, kappas):
    map_ = 0.0
    nq = len(gnd)
    pr = np.zeros(len(kappas))
    nempty = 0
    for i in np.arange(nq):
        qgnd = np.array(gnd[i]["ok"])
        if qgnd.shape[0] == 0:
            nempty += 1
            continue
        qgndj = np.array(gnd[i]["junk"])
        pos = np.arange(ranks.shape[0])[np.in1d(ranks[:, i], qgnd)]
        junk = np.arange(ranks.shape[0])[np.in1d(ranks[:, i], qgndj)]
        k = 0
        ij = 0
        if len(junk):
            ip = 0
            while ip < len(pos):
                while ij < len(junk) and pos[ip] > junk[ij]:
                    k += 1
                    ij += 1
                pos[ip] = pos[ip] - k
                ip += 1
        map_ += compute_ap(pos, len(qgnd))
        pos += 1
        for j in np.arange(len(kappas)):
            kq = min(max(pos), kappas[j])
            pr[j] += (pos <= kq).sum() / kq
    return map_ / (nq - nempty), pr / (nq - nempty)


def oxford_compute_ap(pos, amb, ranked):
    """compute_ap.cpp: float variables, double intermediates."""
    f = np.float32
    old_recall, old_precision, ap = f(0), f(1), f(0)
    hits, j = 0, 0
    for name in ranked:
        if name in amb:
            continue
        if name in pos:
            hits += 1
        recall = f(hits) / f(len(pos))
        precision = f(hits / (j + 1.0))
        ap = f(float(ap) + float(recall - old_recall) * ((float(old_precision) + float(precision)) / 2.0))
        old_recall, old_precision = recall, precision
        j += 1
    return float(ap)


TRANSFORM = T.Compose([T.ToTensor(), T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])


def load_and_prepare(path, roi=None, resize=True):
    """InstanceRetrievalImageLoader: load_and_prepare_image / _revisited_image / _whitening_image."""
    with open(path, "rb") as f:
        im = Image.open(f).convert(mode="RGB")
    if not resize:
        return TRANSFORM(im)
    hw = np.array((im.size[1], im.size[0]))
    ratio = float(S) / np.max(hw)
    new = tuple(np.round(hw * ratio).astype(np.int32))
    x = TRANSFORM(im.resize((new[1], new[0]), Image.BILINEAR))
    if roi is not None:
        roi = np.round(roi * ratio).astype(np.int32)
        x = x[:, roi[1]:roi[3], roi[0]:roi[2]]
    return x


# ---- the datasets ----------------------------------------------------------------------------

def building(rng, k):
    """Building k's base picture: smooth random colour fields, 64 × 64."""
    base = rng.random((8, 8, 3)) * 255
    img = Image.fromarray(base.astype(np.uint8)).resize((64, 64), Image.BICUBIC)
    return np.asarray(img).astype(np.float64)


def view(rng, base, size):
    """A view of a building: a random crop, resized to size (w, h), with noise."""
    x0, y0 = rng.integers(0, 16, 2)
    crop = base[y0:y0 + 48, x0:x0 + 48]
    img = Image.fromarray(np.clip(crop, 0, 255).astype(np.uint8)).resize(size, Image.BILINEAR)
    arr = np.asarray(img).astype(np.float64) + rng.normal(0, 12, (size[1], size[0], 3))
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


SIZES = [(48, 36), (36, 48), (40, 40), (44, 33), (33, 44), (50, 30)]


def write_images(rng, folder, names, buildings, which):
    os.makedirs(folder, exist_ok=True)
    for name, b in zip(names, which):
        size = SIZES[rng.integers(0, len(SIZES))]
        view(rng, buildings[b], size).save(os.path.join(folder, name + ".jpg"), quality=90)


def revisited(rng, name, buildings, n_db, queries):
    """A revisited dataset: n_db database images of random buildings; each query is a view of
    a building; its images of the same building are easy or hard (alternately), one is junk."""
    which = [int(b) for b in rng.integers(0, len(buildings), n_db)]
    imlist = [f"{name}_{i:03d}" for i in range(n_db)]
    qimlist = [f"{name}_q{i}" for i in range(len(queries))]
    jpg = os.path.join(DATA, name, "jpg")
    write_images(rng, jpg, imlist, buildings, which)
    write_images(rng, jpg, qimlist, buildings, queries)
    gnd = []
    for b in queries:
        same = [i for i in range(n_db) if which[i] == b]
        junk = same[-1:] if len(same) >= 3 else []
        rest = [i for i in same if i not in junk]
        gnd.append({"bbx": [2.0, 3.0, 30.0, 28.0], "easy": rest[0::2], "hard": rest[1::2], "junk": junk})
    with open(os.path.join(DATA, name, f"gnd_{name}.pkl"), "wb") as f:
        pickle.dump({"imlist": imlist, "qimlist": qimlist, "gnd": gnd}, f, protocol=2)
    return imlist, qimlist, gnd


def classic(rng, buildings):
    """Oxford in the classic layout: database, three queries with regions, their label files."""
    which = [int(b) for b in rng.integers(0, len(buildings), 10)]
    names = [f"all_souls_{i:06d}" for i in range(10)]
    jpg = os.path.join(DATA, "Oxford", "jpg")
    lab = os.path.join(DATA, "Oxford", "lab")
    os.makedirs(lab, exist_ok=True)
    write_images(rng, jpg, names, buildings, which)
    write_images(rng, jpg, ["paris_louvre_000136"], buildings, [0])  # corrupt in Paris: left out
    queries = []
    for q, qi in enumerate([0, 3, 6]):
        qname = f"q{q}_{names[qi]}"
        roi = [1.5 + q, 2.25, 30.5 - q, 29.75]
        with open(os.path.join(lab, f"{qname}_query.txt"), "w") as f:
            f.write(f"oxc1_{names[qi]} " + " ".join(str(v) for v in roi) + "\n")
        same = [names[i] for i in range(10) if which[i] == which[qi]]
        others = [n for n in names if n not in same]
        with open(os.path.join(lab, f"{qname}_good.txt"), "w") as f:
            f.write("".join(n + "\n" for n in same[:1]))
        with open(os.path.join(lab, f"{qname}_ok.txt"), "w") as f:
            f.write("".join(n + "\n" for n in same[1:] + ["all_souls_999999"]))  # one not in the database
        with open(os.path.join(lab, f"{qname}_junk.txt"), "w") as f:
            f.write("".join(n + "\n" for n in others[:1]))
        queries.append(qname)
    return names, sorted(queries)


def whitening(rng, buildings):
    names = [f"w{i}" for i in range(8)]
    write_images(rng, os.path.join(DATA, "whitening", "imgs"), names, buildings,
                 [int(b) for b in rng.integers(0, len(buildings), 8)])
    with open(os.path.join(OUT, "whiten_list.txt"), "w") as f:
        f.write("".join(f"imgs/{n}.jpg\n" for n in names))
    return [os.path.join(DATA, "whitening", "imgs", n + ".jpg") for n in names]


# ---- the benchmark ---------------------------------------------------------------------------

def layer3_map(model, x, dtype):
    m = model.to(dtype)
    seen = {}
    h = m.layer3.register_forward_hook(lambda mod, i, o: seen.__setitem__("m", o))
    with torch.no_grad():
        m(x.unsqueeze(0).to(dtype))
    h.remove()
    return seen["m"]


def check_ranking(sim32, sim64, what):
    """The ranking must not hang on rounding: same order in both precisions, clear gaps."""
    for q in range(sim32.shape[0]):
        o32, o64 = np.argsort(-sim32[q], kind="stable"), np.argsort(-sim64[q], kind="stable")
        assert (o32 == o64).all(), f"{what}: query {q} ranks differently in float32 and float64"
        s = np.sort(sim64[q])
        gap = np.min(np.diff(s)) if len(s) > 1 else 1
        assert gap > MIN_GAP * max(1, np.abs(s).max()), f"{what}: query {q} has two similarities {gap:.2g} apart"
    print(f"{what}: float32 vs float64 similarities differ by {np.abs(sim32 - sim64).max():.2g}")


def describe(model, paths, kind, pca, dtype, rois=None, resize=True):
    feats = []
    for i, p in enumerate(paths):
        x = load_and_prepare(p, None if rois is None else np.array(rois[i], dtype=np.float32), resize)
        amap = layer3_map(model, x, dtype)
        if kind == "rmac":
            feats.append(get_rmac_descriptors(amap, LEVELS, pca).numpy())
        else:
            g = l2n(gem(amap, 3))
            feats.append(pca.apply(g).numpy())
    return np.vstack(feats)


def train_pca(model, paths, kind, n, dtype, resize=True):
    rows = []
    for p in paths:
        amap = layer3_map(model, load_and_prepare(p, resize=resize), dtype)
        d = get_rmac_descriptors(amap, LEVELS) if kind == "rmac" else l2n(gem(amap, 3))
        rows.append(d.numpy().reshape(-1, d.shape[-1]))
    pca = PCA(n)
    pca.fit(np.vstack(rows))
    return pca


def revisited_case(model, kind, n_pca, train_paths, imlist, qimlist, gnd, dtype):
    pca = train_pca(model, train_paths, kind, n_pca, dtype)
    jpg = os.path.join(DATA, "roxford5k", "jpg")
    q = describe(model, [os.path.join(jpg, n + ".jpg") for n in qimlist], kind, pca, dtype)
    db = describe(model, [os.path.join(jpg, n + ".jpg") for n in imlist], kind, pca, dtype)
    sim = q.dot(db.T)
    ranks = np.argsort(-sim.T, axis=0)
    scores = []
    protocols = [("easy", "junk", "hard"), None, ("hard", "junk", "easy")]
    maps, prs = [], []
    for p in range(3):
        if p == 1:
            g = [{"ok": np.concatenate([x["easy"], x["hard"]]), "junk": np.array(x["junk"])} for x in gnd]
        else:
            ok, j1, j2 = protocols[p]
            g = [{"ok": np.array(x[ok]), "junk": np.concatenate([x[j1], x[j2]])} for x in gnd]
        m, pr = compute_map(ranks, g, [1, 5, 10])
        maps.append(m)
        prs.extend(pr)
    scores = maps + prs
    return sim, np.array(scores)


def classic_case(model, names, queries, white_paths, dtype):
    pca = train_pca(model, white_paths, "rmac", 8, dtype, resize=False)
    lab = os.path.join(DATA, "Oxford", "lab")
    jpg = os.path.join(DATA, "Oxford", "jpg")
    qpaths, rois = [], []
    for qn in queries:
        with open(os.path.join(lab, f"{qn}_query.txt")) as f:
            parts = f.readline().split(" ")
        qpaths.append(os.path.join(jpg, parts[0][5:] + ".jpg"))
        rois.append([float(v) for v in parts[1:]])
    q = describe(model, qpaths, "rmac", pca, dtype, rois)
    db = describe(model, [os.path.join(jpg, n + ".jpg") for n in names], "rmac", pca, dtype)
    sim = q.dot(db.T)
    aps = []
    for i, qn in enumerate(queries):
        sets = {}
        for k in ("good", "ok", "junk"):
            with open(os.path.join(lab, f"{qn}_{k}.txt")) as f:
                sets[k] = {e.strip() for e in f}
        ranked = np.array(names)[np.argsort(sim[i])[::-1]]
        aps.append(oxford_compute_ap(sets["good"] | sets["ok"], sets["junk"], ranked))
    return sim, np.array(aps)


def regions_table():
    rows = []
    for H, W, L in [(7, 7, 3), (6, 5, 3), (5, 6, 3), (3, 3, 3), (4, 9, 3), (30, 40, 3), (40, 30, 4), (32, 24, 2)]:
        for r in get_rmac_region_coordinates(H, W, L):
            rows.append([H, W, L] + [int(v) for v in r])
    return np.array(rows, dtype=np.int64)


def main():
    shutil.rmtree(DATA, ignore_errors=True)
    rng = np.random.default_rng(SEED)
    buildings = [building(rng, k) for k in range(4)]
    imlist, qimlist, gnd = revisited(rng, "roxford5k", buildings, 12, [0, 1, 2, 3])
    paris, _, _ = revisited(rng, "rparis6k", buildings, 8, [0])
    train_paths = [os.path.join(DATA, "rparis6k", "jpg", n + ".jpg") for n in paris]
    names, queries = classic(rng, buildings)
    white = whitening(rng, buildings)
    model = trunk(18).eval()
    cases = {
        "rmac_revisited": lambda dt: revisited_case(model, "rmac", 8, train_paths, imlist, qimlist, gnd, dt),
        "gem_revisited": lambda dt: revisited_case(model, "gem", 4, train_paths, imlist, qimlist, gnd, dt),
        "rmac_classic": lambda dt: classic_case(model, names, queries, white, dt),
    }
    for name, run in cases.items():
        sim32, scores = run(torch.float32)
        sim64, scores64 = run(torch.float64)
        check_ranking(sim32, sim64, name)
        assert np.allclose(scores, scores64), name
        golden.save_f32(os.path.join(OUT, f"{name}_sim.npy"), sim32)
        golden.save_array(os.path.join(OUT, f"{name}_{'ap' if 'classic' in name else 'scores'}.npy"), scores,
                          np.float64)
        print(name, "scores", np.round(scores, 4))
    golden.save_array(os.path.join(OUT, "rmac_regions.npy"), regions_table())


if __name__ == "__main__":
    main()
