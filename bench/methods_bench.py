#!/usr/bin/python3
"""methods_bench.py — every quickstart method trained the PyTorch/VISSL way, for bench/methods.sh.

The recipe is read from the same file selfsup reads, configs/quickstart/NAME.yaml, and built
the way VISSL 0.1.5 builds it, with Debian's torch and torchvision:
  data      a DataLoader with DATA.NUM_DATALOADER_WORKERS worker processes over the first N
            images of the Fashion-MNIST file list: PIL decode, convert RGB, then TRANSFORMS
            applied as VISSL's SSLTransformsWrapper does (torchvision's by name; VISSL's own:
            ImgReplicatePil, ImgPilToMultiCrop, ImgPilColorDistortion from bench/data_bench.py,
            ImgRotatePil, ImgPilToPatchesAndImage, ImgPatchesFromTensor, ShuffleImgPatches
            here), then COLLATE_FUNCTION (bench/data_bench.py and
            tests/golden/make_collate_fixtures.py hold VISSL's collators); shuffled, DROP_LAST
  model     torchvision's ResNet of TRUNK DEPTH as VISSL's trunk (SMALL_STEM and
            ZERO_INIT_RESIDUAL honoured), or torchvision's regnet_* for a `regnet` preset, MODEL.HEAD.PARAMS from tests/golden's VISSL heads
            (mlp, swav_head, siamese_concat_view), MULTI_INPUT_HEAD_MAPPING (PIRL), VISSL's
            multi-resolution forward (one trunk pass per crop size: SwAV)
  loss      LOSS.name re-stated from VISSL (tests/golden/make_loss_fixtures.py and
            make_train_fixtures.py): SimCLR's info-NCE; SwAV's swapped prediction with
            Sinkhorn-Knopp, frozen prototypes and their normalisation; MoCo's momentum encoder
            and queue; NCE with a memory bank and alias-method negatives (NPID, PIRL);
            DeepClusterV2's memory pass, k-means at the epoch's start and the loss with memory;
            cross-entropy (RotNet, Jigsaw, supervised, ClusterFit)
  optimizer SGD (momentum, Nesterov) on VISSL's parameter groups (regularize_bn / _bias), LARC
            when use_larc, the LR schedule per step or epoch with auto_lr_scaling
Batch BATCHSIZE_PER_REPLICA, one epoch, torch on --threads threads.

Subcommands:
  train NAME --filelist F --n N --threads T [--labels L]
        prints "torch_train IMAGES_PER_SECOND DATA_WAIT_SHARE STEPS" (batch / median step time
        over the steps after the first WARMUP; the share of those steps' time spent in the
        DataLoader's next), "torch_breakdown WAIT FORWARD LOSS BACKWARD OPTIMIZER" (mean ms
        per step) and '#' lines. Only the training steps are timed: DeepClusterV2's memory pass
        and k-means come before the first.
  overrides NAME   the `selfsup run` overrides that make the quickstart one epoch long with the
                   LR it has in its first epoch (a multistep schedule keeps its first value)
  stats NAME FILE  selfsup's side from its stdout.json, in torch_train's format ("selfsup_train ...")
                   and breakdown ("selfsup_breakdown ...")

    /usr/bin/python3 bench/methods_bench.py train swav --filelist data/fashion-mnist/disk_filelist/train_images.npy \
        --n 640 --threads 2
"""
import argparse
import json
import math
import os
import random
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
import torchvision.transforms as T
import torchvision.transforms.functional as TF
import yaml
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
import data_bench as D  # noqa: E402  VISSL's transforms and collators (simclr, multicrop)
import make_collate_fixtures as C  # noqa: E402  VISSL's collators (moco, siamese, patch_and_image)
import make_heads_fixtures as H  # noqa: E402  VISSL's heads
import make_loss_fixtures as L  # noqa: E402  VISSL's losses (SwAV's criterion and Sinkhorn)
import make_model_fixtures as M  # noqa: E402  siamese_concat_view
import make_optim_fixtures as O  # noqa: E402  VISSL's parameter groups, Apex's LARC
import make_train_fixtures as TR  # noqa: E402  MoCo's encoder, NCECriterion

WARMUP = 5


def config(name):
    """configs/quickstart/NAME.yaml's `config` mapping."""
    with open(os.path.join(ROOT, "configs", "quickstart", f"{name}.yaml")) as f:
        return yaml.safe_load(f)["config"]


# ---- VISSL's transforms that bench/data_bench.py does not have ---------------------------

class ImgRotatePil:
    """vissl/data/ssl_transforms/img_rotate_pil.py: a random multiple of 360/num_angles; the
    rotation's index is the label."""

    def __init__(self, num_angles=4, num_rotations_per_img=1):
        self.num_angles = num_angles
        self.angles = torch.linspace(0, 360, num_angles + 1)[:-1]

    def __call__(self, image):
        label = torch.randint(self.num_angles, [1]).item()
        return TF.rotate(image, float(self.angles[label])), label


def grid_patches(arr, num_patches, jitter, chw):
    """ImgPatchesFromTensor's cut: a side × side grid, each patch a crop of its cell at a random
    offset below `jitter`; arr is CHW (a tensor) or HWC (a PIL image's array)."""
    side = int(math.sqrt(num_patches))
    h = arr.shape[1] if chw else arr.shape[0]
    grid = h // side
    size = grid - jitter
    off = np.random.randint(0, jitter, (2, side, side))
    out = []
    for i in range(side):
        for j in range(side):
            y, x = j * grid + off[1, i, j], i * grid + off[0, i, j]
            out.append(arr[:, y:y + size, x:x + size] if chw else arr[y:y + size, x:x + size])
    return out


class ImgPatchesFromTensor:
    def __init__(self, num_patches=9, patch_jitter=21):
        self.num_patches, self.patch_jitter = num_patches, patch_jitter

    def __call__(self, image):
        return grid_patches(image, self.num_patches, self.patch_jitter, chw=True)


class ShuffleImgPatches:
    """The patches in one of the file's permutations, stacked; the permutation's index is the label."""

    def __init__(self, perm_file):
        path = perm_file if os.path.isabs(perm_file) else os.path.join(ROOT, perm_file)
        self.perms = np.load(path)
        if self.perms.min() == 1:
            self.perms = self.perms - 1

    def __call__(self, patches):
        k = np.random.randint(self.perms.shape[0])
        return torch.stack([patches[i] for i in self.perms[k]]), k


class ImgPilToPatchesAndImage:
    """A RandomResizedCrop of the image, then num_patches jittered patches (jitter 21, as VISSL)
    of a second, larger crop, in a random order: [image] + patches, all PIL."""

    def __init__(self, crop_scale_image=(0.08, 1.0), crop_size_image=224, crop_scale_patches=(0.6, 1.0),
                 crop_size_patches=255, permute_patches=True, num_patches=9):
        self.image_crop = T.RandomResizedCrop(crop_size_image, scale=crop_scale_image)
        self.patch_crop = T.RandomResizedCrop(crop_size_patches, scale=crop_scale_patches)
        self.num_patches = num_patches

    def __call__(self, image):
        img = self.image_crop(image)
        patches = grid_patches(np.asarray(self.patch_crop(image)), self.num_patches, 21, chw=False)
        return [img] + [Image.fromarray(np.ascontiguousarray(patches[p])) for p in np.random.permutation(len(patches))]


VISSL_TRANSFORMS = {
    "ImgReplicatePil": D.ImgReplicatePil, "ImgPilToMultiCrop": D.ImgPilToMultiCrop,
    "ImgPilColorDistortion": D.ImgPilColorDistortion, "ImgPilGaussianBlur": D.ImgPilGaussianBlur,
    "ImgPilRandomSolarize": D.ImgPilRandomSolarize,
    "ImgRotatePil": ImgRotatePil, "ImgPilToPatchesAndImage": ImgPilToPatchesAndImage,
    "ImgPatchesFromTensor": ImgPatchesFromTensor, "ShuffleImgPatches": ShuffleImgPatches,
}
# SSLTransformsWrapper's lists: transforms that make copies of an item, or set its label.
WITH_COPIES = (D.ImgReplicatePil, D.ImgPilToMultiCrop, ImgPilToPatchesAndImage)
WITH_LABELS = (ImgRotatePil, ShuffleImgPatches)


def build_transforms(specs):
    """TRANSFORMS as VISSL builds them: its own classes by name, else torchvision's with the
    same keyword arguments."""
    out = []
    for spec in specs:
        kw = dict(spec)
        name = kw.pop("name")
        out.append(VISSL_TRANSFORMS[name](**kw) if name in VISSL_TRANSFORMS else getattr(T, name)(**kw))
    return out


def apply_all(transforms, sample):
    """SSLTransformsWrapper: each transform over every item of sample['data']; copies flatten
    into the list (labels and indices repeated), label transforms set the last label."""
    for t in transforms:
        out, copies = [], 1
        for img in sample["data"]:
            r = t(img)
            if isinstance(t, WITH_COPIES):
                copies = len(r)
                out.extend(r)
            elif isinstance(t, WITH_LABELS):
                out.append(r[0])
                sample["label"][-1] = int(r[1])
            else:
                out.append(r)
        if copies > 1:
            for key in ("label", "data_valid", "data_idx"):
                sample[key] = [v for v in sample[key] for _ in range(copies)]
        sample["data"] = out
    return sample


class Dataset(torch.utils.data.Dataset):
    """VISSL's disk_filelist source: PIL decode, convert RGB, the transforms; the label is the
    sample index (LABEL_TYPE sample_index), the label file's entry, or 0 (set by a label transform)."""

    def __init__(self, paths, labels, transforms):
        self.paths, self.labels, self.transforms = paths, labels, transforms

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as f:
            img = Image.open(f).convert("RGB")
        label = int(self.labels[i]) if self.labels is not None else 0
        return apply_all(self.transforms, {"data": [img], "label": [label], "data_valid": [1], "data_idx": [i]})


COLLATORS = {
    "simclr_collator": D.simclr_collator, "multicrop_collator": D.multicrop_collator,
    "moco_collator": C.moco_collator, "siamese_collator": C.siamese_collator,
    "patch_and_image_collator": C.patch_and_image_collator,
    "default_collate": torch.utils.data.default_collate,
}


def loader(cfg, paths, labels):
    train = cfg["DATA"]["TRAIN"]
    return torch.utils.data.DataLoader(
        Dataset(paths, labels, build_transforms(train["TRANSFORMS"])), batch_size=train["BATCHSIZE_PER_REPLICA"],
        shuffle=True, drop_last=train.get("DROP_LAST", False), num_workers=cfg["DATA"]["NUM_DATALOADER_WORKERS"],
        collate_fn=COLLATORS[train.get("COLLATE_FUNCTION", "default_collate")])


# ---- the model ---------------------------------------------------------------------------

class Trunk(nn.Module):
    """VISSL's trunk, the pooled features flattened: torchvision's ResNet without fc, or for a
    `regnet` trunk named by a preset torchvision's regnet_* of that name without fc (the same
    network as ClassyVision's where their widths agree: regnet_y_400mf, among others)."""

    def __init__(self, trunk):
        super().__init__()
        if trunk.get("NAME") == "regnet":
            self.net = getattr(torchvision.models, trunk["TRUNK_PARAMS"]["REGNET"]["name"].replace(".", "_"))()
            self.net.fc = nn.Identity()
            return
        resnets = trunk["TRUNK_PARAMS"]["RESNETS"]
        self.net = getattr(torchvision.models, f"resnet{resnets.get('DEPTH', 50)}")()
        self.net.fc = nn.Identity()
        if resnets.get("SMALL_STEM", False):  # selfsup's stem for 28-64 px images
            self.net.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
            self.net.maxpool = nn.Identity()
        if resnets.get("ZERO_INIT_RESIDUAL", False):
            for m in self.net.modules():
                if isinstance(m, torchvision.models.resnet.BasicBlock):
                    nn.init.zeros_(m.bn2.weight)
                elif isinstance(m, torchvision.models.resnet.Bottleneck):
                    nn.init.zeros_(m.bn3.weight)

    def forward(self, x):
        return self.net(x)


def head(name, kw):
    if name == "mlp":
        return H.MLP(**kw)
    if name == "swav_head":
        return H.SwAVPrototypesHead(**kw)
    if name == "siamese_concat_view":
        return M.SiameseConcatView(**kw)
    raise SystemExit(f"methods_bench.py: no head {name!r}")


class Model(nn.Module):
    """trunk + heads, named as VISSL names them (the parameter groups look for 'head')."""

    def __init__(self, cfg):
        super().__init__()
        m = cfg["MODEL"]
        self.trunk = Trunk(m["TRUNK"])
        self.heads = nn.ModuleList(
            nn.Sequential(*[head(n, kw) for n, kw in e]) if isinstance(e[0], list) else head(*e)
            for e in m["HEAD"]["PARAMS"])
        self.multi_input = bool(m.get("MULTI_INPUT_HEAD_MAPPING"))

    def run_heads(self, feats, heads):
        for h in heads:
            feats = h(feats)
        return feats

    def features(self, x):
        """VISSL's multi-resolution forward: consecutive crops of one size share a trunk pass."""
        if not isinstance(x, list):
            return self.trunk(x)
        feats, start = [], 0
        while start < len(x):
            end = start
            while end < len(x) and x[end].shape[-1] == x[start].shape[-1]:
                end += 1
            feats.append(self.trunk(torch.cat(x[start:end])))
            start = end
        return torch.cat(feats)

    def forward(self, inputs):
        """inputs: one tensor (or list of crops) per input key; MULTI_INPUT_HEAD_MAPPING sends
        input i through head i, else every head runs in turn on the one input."""
        if self.multi_input:
            return [self.run_heads(self.features(x), [h]) for x, h in zip(inputs, self.heads)]
        return self.run_heads(self.features(inputs[0]), self.heads)


# ---- the losses, with the hooks VISSL runs around them ----------------------------------

class Loss:
    """A loss: __call__(out, batch, model) → the scalar; before_step(k) runs between the
    backward and the optimizer (FreezeParametersHook), after_step() after it."""

    def before_step(self, step):
        pass

    def after_step(self):
        pass


class SimCLR(Loss):
    """SimclrInfoNCECriterion on one process, its masks made once as VISSL makes them."""

    def __init__(self, cfg, n, batch, model):
        p = cfg["LOSS"]["simclr_info_nce_loss"]
        self.t = p.get("temperature", 0.1)
        r = 2 * batch
        idx = torch.arange(r)
        self.pos = torch.zeros(r, r)
        self.pos[idx, (idx + batch) % r] = 1
        self.neg = 1 - self.pos - torch.eye(r)

    def __call__(self, out, batch, model):
        z = F.normalize(out, dim=1, p=2)
        sim = torch.exp(z @ z.t() / self.t)
        pos, neg = (sim * self.pos).sum(1), (sim * self.neg).sum(1)
        return -torch.mean(torch.log(pos / (pos + neg)))


class SwAV(Loss):
    """swav_loss (make_loss_fixtures.swav: Sinkhorn-Knopp codes of the assignment crops,
    swapped prediction), no queue; TEMP_FROZEN_PARAMS_ITER_MAP drops the prototypes' gradient for
    their first iterations (FreezeParametersHook); the prototypes are L2-normalised after every
    update (NormalizePrototypesHook)."""

    def __init__(self, cfg, n, batch, model):
        p = cfg["LOSS"]["swav_loss"]
        if p.get("queue", {}).get("queue_length", 0):
            raise SystemExit("methods_bench.py: SwAV's queue is not re-stated here")
        self.p, self.crops = p, sum(cfg["DATA"]["TRAIN"]["TRANSFORMS"][0]["num_crops"])
        self.head = model.heads[0]
        self.frozen = {name.replace("module.", "", 1): iters
                       for name, iters in cfg["MODEL"].get("TEMP_FROZEN_PARAMS_ITER_MAP", [])}
        self.named = dict(model.named_parameters())

    def __call__(self, out, batch, model):
        p = self.p
        return L.swav(out, p["temperature"], p["epsilon"], p["num_iters"], self.crops, p["crops_for_assign"])

    def before_step(self, step):
        for name, iters in self.frozen.items():
            if step < iters:
                self.named[name].grad = None

    def after_step(self):
        if self.p.get("normalize_last_layer", True):
            with torch.no_grad():
                for h in range(self.head.nmb_heads):
                    w = getattr(self.head, f"prototypes{h}").weight
                    w.copy_(F.normalize(w, dim=1, p=2))


class MoCo(Loss):
    """moco_loss with MoCoHook: the encoder (a fresh build: the model's parameters at the first
    forward, then their moving average; always in training mode, no gradient) encodes
    data_momentum; logits against the queue (D × K, random normal columns normalised), then the
    keys are enqueued."""

    def __init__(self, cfg, n, batch, model):
        p = cfg["LOSS"]["moco_loss"]
        self.m, self.t, self.k = p["momentum"], p["temperature"], p["queue_size"]
        self.queue = F.normalize(torch.randn(p["embedding_dim"], self.k), dim=0)
        self.ptr, self.encoder = 0, None

    def keys(self, model, batch):
        with torch.no_grad():
            if self.encoder is None:
                self.encoder = TR.moco_encoder(model)
                for pq, pk in zip(model.parameters(), self.encoder.parameters()):
                    pk.data.copy_(pq.data)
            else:
                for pq, pk in zip(model.parameters(), self.encoder.parameters()):
                    pk.data = pk.data * self.m + pq.data * (1.0 - self.m)
            return F.normalize(self.encoder([batch["data_momentum"][0]]), dim=1)

    def __call__(self, out, batch, model):
        k = self.keys(model, batch)
        q = F.normalize(out, dim=1)
        logits = torch.cat([torch.einsum("nc,nc->n", q, k).unsqueeze(-1),
                            torch.einsum("nc,ck->nk", q, self.queue.clone().detach())], dim=1) / self.t
        b = k.shape[0]
        self.queue[:, self.ptr:self.ptr + b] = k.t()
        self.ptr = (self.ptr + b) % self.k
        return F.cross_entropy(logits, torch.zeros(b, dtype=torch.long))


class NCEWithMemory(Loss):
    """nce_loss_with_memory (NCELossWithMemory, NCEAverage, NCECriterion): per output, K
    negatives per row from the AliasMethod (uniform), exp(memory rows · e / T) / Z (Z from the
    first batch), NCECriterion, weighted; the memory takes the embeddings of every output
    (update_mem_on_forward, NPID) or of update_mem_with_emb_index's only (PIRL)."""

    def __init__(self, cfg, n, batch, model):
        p = cfg["LOSS"]["nce_loss_with_memory"]
        mem = p["memory_params"]
        self.n = n if mem.get("memory_size", -1) < 0 else mem["memory_size"]
        self.k = p["negative_sampling_params"]["num_negatives"]
        self.t, self.m = p["temperature"], mem["momentum"]
        self.weights = p.get("loss_weights", [1.0])
        self.on_forward = mem.get("update_mem_on_forward", True)
        self.emb_index = p.get("update_mem_with_emb_index", -100)
        self.norm = p.get("norm_embedding", True)
        d = mem["embedding_dim"]
        stdv = 1.0 / math.sqrt(d / 3)
        self.memory = torch.rand(self.n, d) * 2 * stdv - stdv
        if mem.get("norm_init", True):
            self.memory = F.normalize(self.memory, dim=1)
        self.prob, self.alias = torch.ones(self.n), torch.zeros(self.n, dtype=torch.long)  # AliasMethod(uniform)
        self.z = -1.0

    def draw(self, count):
        """AliasMethod.draw."""
        kk = torch.zeros(count, dtype=torch.long).random_(0, self.n)
        b = torch.bernoulli(self.prob.index_select(0, kk))
        return kk.mul(b.long()) + self.alias.index_select(0, kk).mul((1 - b).long())

    def update(self, e, y):
        with torch.no_grad():
            pos = self.memory.index_select(0, y) * self.m + e.detach() * (1 - self.m)
            self.memory.index_copy_(0, y, F.normalize(pos, dim=1))

    def __call__(self, out, batch, model):
        outs = out if isinstance(out, list) else [out]
        y = batch["label"][0]
        loss, embs = 0.0, []
        for i, (o, w) in enumerate(zip(outs, self.weights)):
            e = F.normalize(o, dim=1, p=2) if self.norm else o
            embs.append(e)
            b = e.shape[0]
            idx = self.draw(b * (self.k + 1)).view(b, -1)
            idx.select(1, 0).copy_(y)
            rows = self.memory.index_select(0, idx.view(-1)).detach().view(b, self.k + 1, -1)
            x = torch.exp(torch.bmm(rows, e.view(b, -1, 1)) / self.t)
            if self.z < 0:
                self.z = x.mean().item() * self.n
            loss = loss + w * TR.nce_criterion((x / self.z).squeeze(2), self.n)
            if self.on_forward:
                self.update(e, y)
        if not self.on_forward:
            self.update(embs[self.emb_index], y)
        return loss


class DeepClusterV2(Loss):
    """deepclusterv2_loss with InitMemoryHook (a pass over one epoch fills the banks, before
    training) and ClusterMemoryHook (k-means per head at the epoch's start): CE of the
    normalised outputs against each head's centroids / T on the samples' assignments, averaged
    over the heads; then the batch's crops replace the next rows of their banks."""

    def __init__(self, cfg, n, batch, model):
        p = cfg["LOSS"]["deepclusterv2_loss"]
        self.t, self.ks, self.iters = p["temperature"], p["num_clusters"], p["kmeans_iters"]
        self.crops_for_mb = p["memory_params"]["crops_for_mb"]
        self.crops = sum(cfg["DATA"]["TRAIN"]["TRANSFORMS"][0]["num_crops"])
        rows = n - n % batch
        d = p["memory_params"]["embedding_dim"]
        self.bank = torch.zeros(len(self.crops_for_mb), rows, d)
        self.index = torch.zeros(rows, dtype=torch.long)
        self.assign = torch.full((len(self.ks), n), -100, dtype=torch.long)
        self.centroids, self.start = [], 0

    def remember(self, z, idx):
        """update_memory_bank: crop c's rows of the batch into bank c."""
        b = len(idx) // self.crops
        self.index[self.start:self.start + b] = idx[:b]
        for i, c in enumerate(self.crops_for_mb):
            self.bank[i, self.start:self.start + b] = z[c * b:(c + 1) * b].detach()
        self.start += b

    def fill(self, model, data):
        """InitMemoryHook: the model in training mode, no backward, one epoch of batches."""
        with torch.no_grad():
            for batch in data:
                self.remember(F.normalize(model([batch["data"][0]]), dim=1), batch["data_idx"][0])

    def cluster(self):
        """ClusterMemoryHook's cluster_memory on one process."""
        self.centroids, j = [], 0
        with torch.no_grad():
            for h, k in enumerate(self.ks):
                bank = self.bank[j]
                cent = bank[torch.randperm(len(bank))[:k]]
                for it in range(self.iters + 1):
                    assign = (bank @ cent.t()).max(dim=1)[1]
                    if it == self.iters:
                        break
                    sums = torch.zeros_like(cent).index_add_(0, assign, bank)
                    counts = torch.bincount(assign, minlength=k)
                    mask = counts > 0
                    cent[mask] = sums[mask] / counts[mask].unsqueeze(1)
                    cent = F.normalize(cent, dim=1, p=2)
                self.centroids.append(cent)
                self.assign[h][self.index] = assign
                j = (j + 1) % len(self.crops_for_mb)
        self.start = 0

    def __call__(self, out, batch, model):
        z = F.normalize(out, dim=1, p=2)
        idx = batch["data_idx"][0]
        loss = sum(F.cross_entropy(z @ c.t() / self.t, self.assign[h][idx], ignore_index=-100)
                   for h, c in enumerate(self.centroids)) / len(self.centroids)
        self.remember(z, idx)
        return loss


class CrossEntropy(Loss):
    """cross_entropy_multiple_output_single_target on one output (ignore_index -1)."""

    def __init__(self, cfg, n, batch, model):
        self.ignore = cfg["LOSS"]["cross_entropy_multiple_output_single_target"].get("ignore_index", -1)

    def __call__(self, out, batch, model):
        return F.cross_entropy(out, batch["label"][0].view(-1), ignore_index=self.ignore)


LOSSES = {"simclr_info_nce_loss": SimCLR, "swav_loss": SwAV, "moco_loss": MoCo,
          "nce_loss_with_memory": NCEWithMemory, "deepclusterv2_loss": DeepClusterV2,
          "cross_entropy_multiple_output_single_target": CrossEntropy}


# ---- the optimizer -----------------------------------------------------------------------

def optimizer(cfg, model):
    """SGD on VISSL 0.1.5's parameter groups (trunk/head × regularised or not, weight decay 0
    on the unregularised), with LARC's settings when use_larc."""
    o = cfg["OPTIMIZER"]
    if o.get("name", "sgd") != "sgd":
        raise SystemExit(f"methods_bench.py: optimizer {o['name']!r} is not re-stated here")
    wd = float(o.get("weight_decay", 1e-4))
    group_of = O.vissl_groups(model, o.get("regularize_bn", False), o.get("regularize_bias", True), [])
    params = list(model.named_parameters())
    groups = [{"params": [p for n, p in params if group_of[n] == g], "weight_decay": [wd, 0.0, wd, 0.0, wd][g]}
              for g in range(5) if any(group_of[n] == g for n, _ in params)]
    opt = torch.optim.SGD(groups, lr=0.1, momentum=float(o.get("momentum", 0.9)), nesterov=o.get("nesterov", False))
    larc = None
    if o.get("use_larc", False):
        lc = o.get("larc_config", {})
        larc = (float(lc.get("trust_coefficient", 0.02)), float(lc.get("eps", 1e-8)), lc.get("clip", False))
    return opt, larc


def lr_schedule(cfg, batch, steps):
    """The LR at step k of the one epoch: param_schedulers.lr with auto_lr_scaling (linear or
    sqrt in batch / base_lr_batch_size)."""
    s = cfg["OPTIMIZER"]["param_schedulers"]["lr"]
    scale = 1.0
    auto = s.get("auto_lr_scaling", {})
    if auto.get("auto_scale", False):
        ratio = batch / auto["base_lr_batch_size"]
        scale = auto["base_value"] * (math.sqrt(ratio) if auto.get("scaling_type", "linear") == "sqrt" else ratio)
        scale /= s["start_value"] if s["name"] == "cosine" else s["values"][0]
    if s["name"] == "cosine":
        a, b = s["start_value"] * scale, s["end_value"] * scale
        return lambda k: b + (a - b) * (1 + math.cos(math.pi * k / steps)) / 2
    if s["name"] == "multistep":
        return lambda k: s["values"][0] * scale  # epoch 0's value
    if s["name"] == "constant":
        return lambda k: s["value"]
    raise SystemExit(f"methods_bench.py: LR schedule {s['name']!r} is not re-stated here")


# ---- one epoch ---------------------------------------------------------------------------

def inputs(cfg, batch):
    """The model's inputs: the batch's INPUT_KEY_NAMES (default data), entry 0 of each."""
    return [batch[k][0] for k in cfg["DATA"]["TRAIN"].get("INPUT_KEY_NAMES", ["data"])]


def train(a):
    cfg = config(a.name)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    n = a.n
    paths = [str(p) for p in np.load(a.filelist, allow_pickle=True)[:n]]
    labels = None
    if cfg["DATA"]["TRAIN"].get("LABEL_TYPE") != "sample_index" and cfg["DATA"]["TRAIN"].get("LABEL_SOURCES"):
        labels = np.load(a.labels or a.filelist.replace("_images.npy", "_labels.npy"), allow_pickle=True)[:n]
    elif cfg["DATA"]["TRAIN"].get("LABEL_TYPE") == "sample_index":
        labels = np.arange(n)
    data = loader(cfg, paths, labels)
    bs = cfg["DATA"]["TRAIN"]["BATCHSIZE_PER_REPLICA"]
    model = Model(cfg).train()
    loss_fn = LOSSES[cfg["LOSS"]["name"]](cfg, n, bs, model)
    opt, larc = optimizer(cfg, model)
    steps = len(data)
    lr = lr_schedule(cfg, bs, steps)
    t_start = time.perf_counter()
    if isinstance(loss_fn, DeepClusterV2):  # untimed, as on selfsup's side
        loss_fn.fill(model, data)
        loss_fn.cluster()
        print(f"# memory pass and k-means: {time.perf_counter() - t_start:.1f} s")
    times, waits, parts = [], [], []
    t_end = time.perf_counter()
    for k, batch in enumerate(data):
        t0 = time.perf_counter()
        out = model(inputs(cfg, batch))
        tf = time.perf_counter()
        loss = loss_fn(out, batch, model)
        tl = time.perf_counter()
        opt.zero_grad()
        loss.backward()
        tb = time.perf_counter()
        loss_fn.before_step(k)
        for g in opt.param_groups:
            g["lr"] = lr(k)
        saved = O.larc_step(opt.param_groups, *larc) if larc else None
        opt.step()
        if saved:
            for g, wd in zip(opt.param_groups, saved):
                g["weight_decay"] = wd
        loss_fn.after_step()
        t1 = time.perf_counter()
        if k >= WARMUP:
            times.append(t1 - t_end)
            waits.append(t0 - t_end)
            parts.append((t0 - t_end, tf - t0, tl - tf, tb - tl, t1 - tb))
        t_end = t1
    if not times:
        raise SystemExit(f"methods_bench.py: {steps} steps, none after the first {WARMUP}: raise --n")
    if not math.isfinite(loss.item()):
        raise SystemExit(f"methods_bench.py: {a.name}: the loss is {loss.item()}")
    step = statistics.median(times)
    print(f"# {a.name}: {steps} steps of {bs}, last loss {loss.item():.4f}, median step {step * 1e3:.1f} ms, "
          f"median data wait {statistics.median(waits) * 1e3:.1f} ms, torch threads {torch.get_num_threads()}, "
          f"{cfg['DATA']['NUM_DATALOADER_WORKERS']} DataLoader workers")
    print(f"torch_train {bs / step:.1f} {sum(waits) / sum(times):.3f} {steps}")
    print("torch_breakdown " + " ".join(f"{1e3 * sum(p[i] for p in parts) / len(parts):.1f}" for i in range(5)))


# ---- selfsup's side ----------------------------------------------------------------------

def overrides(a):
    """One epoch of the quickstart with the LR of its first epoch: a multistep schedule with
    more values than epochs keeps its first value (selfsup refuses fewer epochs than values)."""
    s = config(a.name)["OPTIMIZER"]["param_schedulers"]["lr"]
    if s["name"] == "multistep" and len(s["values"]) > 1:
        print(f"config.OPTIMIZER.param_schedulers.lr.values=[{s['values'][0]}]")
        print("config.OPTIMIZER.param_schedulers.lr.milestones=[]")


def stats(a):
    """selfsup's stdout.json (one line per iteration), the steps after the first WARMUP:
    images/s as batch / median btime, data_wait's share, and the mean per-step breakdown (the
    input's normalisation and upload, read_sample, counts with the forward as on torch's side)."""
    bs = config(a.name)["DATA"]["TRAIN"]["BATCHSIZE_PER_REPLICA"]
    rows = [json.loads(line) for line in open(a.file)]
    timed = rows[WARMUP:]
    if not timed:
        raise SystemExit(f"methods_bench.py: {a.file}: {len(rows)} steps, none after the first {WARMUP}")
    bt = [r["btime(ms)"] for r in timed]
    print(f"selfsup_train {bs / (statistics.median(bt) / 1e3):.1f} "
          f"{sum(r['data_wait(ms)'] for r in timed) / sum(bt):.3f} {len(rows)}")
    mean = lambda *keys: sum(r[k] for r in timed for k in keys) / len(timed)
    print(f"selfsup_breakdown {mean('data_wait(ms)'):.1f} {mean('read_sample(ms)', 'forward(ms)'):.1f} "
          f"{mean('loss_compute(ms)'):.1f} {mean('backward(ms)'):.1f} "
          f"{mean('optimizer_step(ms)', 'meters_update(ms)'):.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("name")
    t.add_argument("--filelist", required=True)
    t.add_argument("--n", type=int, required=True)
    t.add_argument("--threads", type=int, default=os.cpu_count())
    t.add_argument("--labels", help="the label file (default: the file list's _labels.npy)")
    sub.add_parser("overrides").add_argument("name")
    s = sub.add_parser("stats")
    s.add_argument("name")
    s.add_argument("file")
    a = ap.parse_args()
    if a.cmd == "train":
        train(a)
    elif a.cmd == "overrides":
        overrides(a)
    else:
        stats(a)


if __name__ == "__main__":
    main()
