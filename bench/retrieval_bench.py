#!/usr/bin/python3
"""retrieval_bench.py — the PyTorch side of bench/retrieval.sh: VISSL's instance-retrieval flow
(tools/instance_retrieval_test.py with rmac and PCA whitening) on the CPU, and the dataset both
sides read.

    retrieval_bench.py gen PHOTOS DIR N_DB N_QUERIES N_TRAIN
        DIR/roxford5k (database + queries) and DIR/rparis6k (the PCA's training images) in the
        revisited layout, from the JPEGs under PHOTOS (bench/make-photo-corpus), with a
        gnd pickle whose ground truth is arbitrary (the bench measures time, not mAP), and
        DIR/resnet50.pth: torchvision's resnet50 (seed 0), which both sides load
    retrieval_bench.py run DIR RESIZE N_PCA THREADS OUT.npy
        the tool's steps in torch (tests/golden/make_retrieval_fixtures.py restates them): PCA on
        rparis6k's R-MAC regions of layer3 (res4), then the queries' and the database's R-MAC
        descriptors; writes the similarities and prints "retrieval_bench SECONDS"
"""
import glob
import os
import pickle
import shutil
import sys
import time

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
import make_retrieval_fixtures as vissl  # noqa: E402  (VISSL's functions, restated)


def gen(photos, out, n_db, n_q, n_train):
    files = sorted(glob.glob(os.path.join(photos, "**", "*.JPEG"), recursive=True))
    need = n_db + n_q + n_train
    if len(files) < need:
        sys.exit(f"retrieval_bench.py: {len(files)} photos under {photos}, {need} needed")
    sets = {"roxford5k": (files[:n_db], files[n_db:n_db + n_q]), "rparis6k": (files[n_db + n_q:need], [])}
    for name, (db, queries) in sets.items():
        jpg = os.path.join(out, name, "jpg")
        os.makedirs(jpg, exist_ok=True)
        imlist = [f"db{i:05d}" for i in range(len(db))]
        qimlist = [f"q{i:05d}" for i in range(len(queries))]
        for names, srcs in ((imlist, db), (qimlist, queries)):
            for n, src in zip(names, srcs):
                shutil.copyfile(src, os.path.join(jpg, n + ".jpg"))
        gnd = [{"bbx": [0.0, 0.0, 10.0, 10.0], "easy": [i % max(1, len(db))], "hard": [], "junk": []}
               for i in range(len(queries))]
        with open(os.path.join(out, name, f"gnd_{name}.pkl"), "wb") as f:
            pickle.dump({"imlist": imlist, "qimlist": qimlist, "gnd": gnd}, f, protocol=2)
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet50().state_dict(), os.path.join(out, "resnet50.pth"))


def res4(model, x):
    """The trunk up to layer3, as VISSL's feature extractor stops at its deepest layer."""
    m = model
    with torch.no_grad():
        y = m.maxpool(m.relu(m.bn1(m.conv1(x.unsqueeze(0)))))
        return m.layer3(m.layer2(m.layer1(y)))


def rmac_rows(model, paths, pca):
    return [vissl.get_rmac_descriptors(res4(model, vissl.load_and_prepare(p)), vissl.LEVELS, pca).numpy()
            for p in paths]


def run(root, resize, n_pca, threads, out):
    torch.set_num_threads(threads)
    vissl.S = resize
    model = torchvision.models.resnet50()
    model.load_state_dict(torch.load(os.path.join(root, "resnet50.pth")))
    model.eval()
    dataset = pickle.load(open(os.path.join(root, "roxford5k", "gnd_roxford5k.pkl"), "rb"))
    train = pickle.load(open(os.path.join(root, "rparis6k", "gnd_rparis6k.pkl"), "rb"))
    path = lambda name, im: os.path.join(root, name, "jpg", im + ".jpg")  # noqa: E731
    start = time.perf_counter()
    rows = rmac_rows(model, [path("rparis6k", n) for n in train["imlist"]], None)
    pca = vissl.PCA(n_pca)
    pca.fit(np.vstack([r.reshape(-1, r.shape[-1]) for r in rows]))
    q = np.vstack(rmac_rows(model, [path("roxford5k", n) for n in dataset["qimlist"]], pca))
    db = np.vstack(rmac_rows(model, [path("roxford5k", n) for n in dataset["imlist"]], pca))
    sim = q.dot(db.T)
    seconds = time.perf_counter() - start
    np.save(out, sim.astype(np.float32))
    print(f"retrieval_bench {seconds:.3f}")


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "gen":
        gen(sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7]))
    elif len(sys.argv) == 7 and sys.argv[1] == "run":
        run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
    else:
        sys.exit(__doc__)
