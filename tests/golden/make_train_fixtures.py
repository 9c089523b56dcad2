#!/usr/bin/python3
"""make_train_fixtures.py — a few training steps the VISSL way (tests/unit/test_trainer.c).

VISSL's model (make_model_fixtures.py: a ResNet-18 small-stem trunk, every tensor set by the
closed formulas model_init_formula uses) with its trunk frozen and kept in eval mode
(FEATURE_EVAL_SETTINGS: EVAL_MODE_ON, FREEZE_TRUNK_ONLY) and heads that train, VISSL 0.1.5's
parameter groups and Apex's LARC (make_optim_fixtures.py), VISSL's losses (make_loss_fixtures.py)
and the LR schedules VISSL would read: five steps on five fixed batches, in float64 (the exact
answer to the fp32 batches and weights). The trunk is frozen because a ResNet whose BN runs in
train mode on a few 16 px images is chaotic over several steps — torch's own float32 run
drifts from float64 by 2-40% in the weight updates — so it could not be a reference; the
trunk's gradients are held to PyTorch in test_resnet.c and test_model.c instead.

Cases:
  simclr_larc  heads [mlp 512→64 ReLU], [mlp 64→16]; simclr_info_nce_loss (T 0.1); SGD
               momentum 0.9, weight decay 1e-4, LARC (trust 0.02); cosine LR 0.3 → 0 read at
               where = k/5 (update_interval step); one epoch of 5 batches
  ce_multistep head [mlp 512→10]; CrossEntropyLoss on labels 0-9 (one −1, ignored); SGD
               momentum 0.9 Nesterov, weight decay 5e-4; multistep LR [0.1, 0.01, 0.001] at
               epochs [2, 4] (update_interval epoch); five epochs of one batch each
  adamw        as simclr_larc with AdamW (betas 0.9, 0.999; weight decay 0.05; constant LR 0.01)
  swav_queue   swav_loss with its queue and hooks (SWAV below); queue0.npy holds the embedding
               queue's starting values, which the C side loads into the loss state
  moco         moco_loss with MoCoHook's momentum encoder (MOCO below); queue0.npy is the key
               queue's start (rows: VISSL's queue transposed), loaded into the loss state;
               queue.npy, enc.npy the queue and the encoder's head parameters after the 5 steps
  npid, npid_infonce
               nce_loss_with_memory (NPID below), loss_type nce and cross_entropy; memory0.npy is
               the memory bank's start, loaded into the loss state; memory.npy the bank after the
               5 steps; npid_z.npy the normalisation constant Z
  pirl         PIRL: nce_loss_with_memory on two outputs (PIRL below): patches.0 and images.0
               batches, memory0.npy / memory.npy as npid's
  swav_momentum
               swav_momentum_loss with SwAVMomentumHook's network (SWAVM below); queue0.npy is
               the embedding queue's start; enc.npy the network's head parameters at the end
  dc           deepclusterv2_loss with InitMemoryHook and ClusterMemoryHook (DC below):
               memory.rec the memory pass's batch; memory.npy the banks after the 5 steps,
               centroids.npy every head's centroids (rows stacked), assign.npy the assignments;
               dc_half_batches.rec / dc_half_memory.rec: the first 3 epochs cut into batches of
               4, for the exact-resume test (stops inside an epoch; no reference values)

ce_multistep also has test phases, as VISSL runs them with TEST_MODEL and TEST_EVERY_NUM_EPOCH
2 over its five epochs: after epochs 0, 2 and 4 the model (no update, no gradient) scores two
test batches of 8 images; per phase the mean of the batches' losses and the top-1 / top-5
accuracy in percent (torch.topk), which the C side reads from metrics.json.

The batches are selfsup batch records (tools/selfsup_records.py), as the collate stage writes
them: data.0 uint8 [8, 16, 16, 3] (SimCLR: crop 0 of images 0-3, then crop 1), label.0 int64
[8], normalize float32 [3, 3] (divisor, mean, std: the ToTensor + Normalize the trainer
applies, torchvision's float32 arithmetic, done the same way here).

Files (tests/golden/fixtures/train/CASE_*):
  batches.rec   the batch records and an end-of-stream record
  loss.npy      float64 [5]: the loss of each step (before its update)
  loss32.npy    float64 [5]: the same run in float32, for the report
  delta.npy     float64: w5 − w0 of every trained tensor, flattened in state-dict order
  floor.npy     float64 [2]: torch's own float32 error against this reference (loss, relative;
                update, relative to its largest value): the C side is held to 3x it, at least
                1e-4 and 1e-3
  test_batches.rec, test.npy (ce_multistep): the test batches, and float64 [3, 3] (mean loss,
                top-1 %, top-5 %) of the test phases after epochs 0, 2 and 4

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_train_fixtures.py
"""
import copy
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import make_loss_fixtures as L  # noqa: E402
import make_model_fixtures as M  # noqa: E402
import make_optim_fixtures as O  # noqa: E402
import selfsup_rng  # noqa: E402  (lib/rng.c in Python: the negatives selfsup draws)
import selfsup_records as records  # noqa: E402
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("train")
B, SIZE, STEPS = 4, 16, 5
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]

CASES = {
    "simclr_larc": dict(heads=[["mlp", {"dims": [512, 64], "use_relu": True}], ["mlp", {"dims": [64, 16]}]],
                        loss="simclr", opt="sgd", nesterov=False, wd=1e-4, larc=0.02,
                        lr=lambda k, epoch: 0.3 * (1 + math.cos(math.pi * k / STEPS)) / 2, epochs=False),
    "ce_multistep": dict(heads=[["mlp", {"dims": [512, 10]}]], loss="ce", opt="sgd", nesterov=True, wd=5e-4,
                         larc=None, lr=lambda k, epoch: [0.1, 0.1, 0.01, 0.01, 0.001][epoch], epochs=True),
    "adamw": dict(heads=[["mlp", {"dims": [512, 64], "use_relu": True}], ["mlp", {"dims": [64, 16]}]],
                  loss="simclr", opt="adamw", nesterov=False, wd=0.05, larc=None, lr=lambda k, epoch: 0.01,
                  epochs=False),
}
LABELS = [3, 7, 0, 9, -1, 2, 5, 1]
TEST_AFTER = [0, 2, 4]  # VISSL's test phases for 5 epochs, TEST_EVERY_NUM_EPOCH 2
TEST_LABELS = [[4, 1, 8, 0, 6, 2, 9, 3], [7, 5, 1, 1, 0, 8, 2, 6]]


def test_batches():
    g = torch.Generator().manual_seed(99)
    return [torch.randint(0, 256, (2 * B, SIZE, SIZE, 3), generator=g, dtype=torch.uint8) for _ in TEST_LABELS]


def forward(model, x):
    out = model.trunk(x)[0]
    for h in model.heads:
        out = h(out)
    return out


def test_phase(model, tests, dtype):
    """A test phase: (mean batch loss, top-1 %, top-5 %) with no update."""
    losses, top1, top5, n = [], 0, 0, 0
    with torch.no_grad():
        for u8, labels in zip(tests, TEST_LABELS):
            out, target = forward(model, to_input(u8).to(dtype)), torch.tensor(labels)
            losses.append(F.cross_entropy(out, target).item())
            pred = out.topk(5, dim=1).indices
            top1 += pred[:, :1].eq(target[:, None]).any(dim=1).sum().item()
            top5 += pred.eq(target[:, None]).any(dim=1).sum().item()
            n += len(labels)
    return [float(np.mean(losses)), 100.0 * top1 / n, 100.0 * top5 / n]


def batches(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (2 * B, SIZE, SIZE, 3), generator=g, dtype=torch.uint8) for _ in range(STEPS)]


def to_input(u8):
    """ToTensor + Normalize in float32, per image, as torchvision (and img_normalize_chw)."""
    x = u8.permute(0, 3, 1, 2).float().div(255)
    mean = torch.tensor(MEAN, dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(STD, dtype=torch.float32).view(1, 3, 1, 1)
    return x.sub(mean).div(std)


def train(c, data, dtype, tests=None):
    model = M.Model(M.Trunk(18, True), M.heads_modules(c["heads"])).to(dtype).train()
    model.trunk.eval()  # FREEZE_TRUNK_ONLY keeps the trunk in eval mode, without gradients
    for p in model.trunk.parameters():
        p.requires_grad_(False)
    group_of = O.vissl_groups(model, False, True, [])
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    wds = [c["wd"], 0.0, c["wd"], 0.0, c["wd"]]
    groups = [{"params": [p for n, p in params if group_of[n] == g], "weight_decay": wds[g]}
              for g in range(5) if any(group_of[n] == g for n, _ in params)]
    if c["opt"] == "sgd":
        opt = torch.optim.SGD(groups, lr=0.1, momentum=0.9, nesterov=c["nesterov"])
    else:
        opt = torch.optim.AdamW(groups, lr=0.1, betas=(0.9, 0.999), eps=1e-8)
    w0 = [p.detach().clone() for _, p in params]
    losses, phases = [], []
    target = torch.tensor(LABELS)
    for k, u8 in enumerate(data):
        x = to_input(u8).to(dtype)
        out = forward(model, x)
        loss = L.simclr(out, 0.1, B) if c["loss"] == "simclr" else F.cross_entropy(out, target, ignore_index=-1)
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        for g in opt.param_groups:
            g["lr"] = c["lr"](k, k)
        saved = O.larc_step(opt.param_groups, c["larc"], 1e-8, False) if c["larc"] else None
        opt.step()
        if saved:
            for g, wd in zip(opt.param_groups, saved):
                g["weight_decay"] = wd
        if tests is not None and k in TEST_AFTER:  # one batch an epoch: step k ends epoch k
            phases.append(test_phase(model, tests, dtype))
    delta = np.concatenate([(p.detach() - w).double().numpy().ravel() for (_, p), w in zip(params, w0)])
    return np.array(losses), delta, np.array(phases)


# swav_queue: SwAV's loss, queue and hooks over five steps. Multi-crop batches of B images:
# data.0.0, data.0.1 two 16 px crops, data.0.2, data.0.3 two 8 px crops (the trunk runs once per
# resolution, the head on the features joined crop-major); swav_head [512, 32, 16] with BN and prototype heads of
# 20 and 12; crops_for_assign [0, 1]; a queue of 8 rows per assignment crop from iteration 2;
# hard assignments at iteration 0; prototypes0 frozen at iteration 1 (TEMP_FROZEN_PARAMS_ITER_MAP
# 2); prototypes L2-normalised after every update (NormalizePrototypesHook); SGD momentum 0.9,
# weight decay 1e-4, cosine LR 0.3 → 0 per step.
SWAV = dict(heads=[["swav_head", {"dims": [512, 32, 16], "use_bn": True, "num_clusters": [20, 12]}]],
            crops=4, cfa=[0, 1], queue=8, start_iter=2, hard_iters=1, frozen=2, wd=1e-4,
            lr=lambda k: 0.3 * (1 + math.cos(math.pi * k / STEPS)) / 2)


def swav_batches(seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, 256, (2 * B, SIZE, SIZE, 3), generator=g, dtype=torch.uint8),
             torch.randint(0, 256, (2 * B, SIZE // 2, SIZE // 2, 3), generator=g, dtype=torch.uint8))
            for _ in range(STEPS)]


def train_swav(data, queue0, dtype):
    """VISSL's SwAV step: forward, SwAVUpdateQueueScoresHook, loss (then the queue takes the
    batch), FreezeParametersHook, SGD, NormalizePrototypesHook."""
    c = SWAV
    model = M.Model(M.Trunk(18, True), M.heads_modules(c["heads"])).to(dtype).train()
    model.trunk.eval()
    for p in model.trunk.parameters():
        p.requires_grad_(False)
    head = model.heads[0]
    group_of = O.vissl_groups(model, False, True, [])
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    wds = [c["wd"], 0.0, c["wd"], 0.0, c["wd"]]
    groups = [{"params": [p for n, p in params if group_of[n] == g], "weight_decay": wds[g]}
              for g in range(5) if any(group_of[n] == g for n, _ in params)]
    opt = torch.optim.SGD(groups, lr=0.1, momentum=0.9)
    w0 = [p.detach().clone() for _, p in params]
    emb_queue, num_iteration, losses = queue0.clone().to(dtype), 0, []
    for k, (big, small) in enumerate(data):
        feats = [model.trunk(to_input(big).to(dtype))[0], model.trunk(to_input(small).to(dtype))[0]]
        out = head(torch.cat(feats))
        use_queue = num_iteration >= c["start_iter"]
        queues = None
        if use_queue:
            with torch.no_grad():
                queues = [[getattr(head, f"prototypes{h}")(emb_queue[i]) for i in range(len(c["cfa"]))]
                          for h in range(head.nmb_heads)]
        loss = L.swav(out, 0.1, 0.05, 3, c["crops"], c["cfa"], queues, hard=num_iteration < c["hard_iters"])
        num_iteration += 1
        if use_queue:
            emb = out[0].detach()
            for i, a in enumerate(c["cfa"]):
                emb_queue[i, B:] = emb_queue[i, :-B].clone()
                emb_queue[i, :B] = emb[a * B:(a + 1) * B]
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        if k + 1 < c["frozen"]:
            head.prototypes0.weight.grad = None
        for g in opt.param_groups:
            g["lr"] = c["lr"](k)
        opt.step()
        with torch.no_grad():
            for h in range(head.nmb_heads):
                w = getattr(head, f"prototypes{h}").weight
                w.copy_(F.normalize(w, dim=1, p=2))
    delta = np.concatenate([(p.detach() - w).double().numpy().ravel() for (_, p), w in zip(params, w0)])
    return np.array(losses), delta


def swav_case(norm):
    data = swav_batches(41)
    stdv = 1.0 / math.sqrt(16 / 3)  # VISSL's initialize_queue: U(−stdv, stdv), D = 16
    g = torch.Generator().manual_seed(43)
    queue0 = (torch.rand(2, SWAV["queue"], 16, generator=g) * 2 * stdv - stdv).float()
    losses, delta = train_swav(data, queue0, torch.float64)
    losses32, delta32 = train_swav(data, queue0, torch.float32)
    out = lambda n, a: golden.save_array(os.path.join(OUT, f"swav_queue_{n}.npy"), a)
    out("loss", losses)
    out("loss32", losses32)
    out("delta", delta)
    out("queue0", queue0.numpy())
    out("floor", np.array([np.max(np.abs(losses32 - losses) / np.abs(losses)),
                           np.max(np.abs(delta32 - delta)) / np.max(np.abs(delta))]))
    with open(os.path.join(OUT, "swav_queue_batches.rec"), "wb") as f:
        for k, (big, small) in enumerate(data):
            crops = [big[:B], big[B:], small[:B], small[B:]]  # the multicrop collator: data.0.K is crop K
            records.write_record(f, {**{f"data.0.{i}": c.numpy() for i, c in enumerate(crops)}, "normalize": norm},
                                 seq=k)
        records.write_eos(f, len(data))
    print(f"swav_queue: losses {losses.round(5)}; torch float32 vs float64: loss "
          f"{np.max(np.abs(losses32 - losses) / np.abs(losses)):.2g}, update "
          f"{np.max(np.abs(delta32 - delta)) / np.max(np.abs(delta)):.2g}")


class Trained:
    """VISSL's model (make_model_fixtures.py) with its trunk frozen and in eval mode
    (FREEZE_TRUNK_ONLY) and heads that train, under SGD (momentum 0.9, weight decay wd on VISSL
    0.1.5's parameter groups): what the stateful methods' cases below train."""

    def __init__(self, heads, wd, dtype):
        self.model = M.Model(M.Trunk(18, True), M.heads_modules(heads)).to(dtype).train()
        self.model.trunk.eval()
        for p in self.model.trunk.parameters():
            p.requires_grad_(False)
        group_of = O.vissl_groups(self.model, False, True, [])
        self.params = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        wds = [wd, 0.0, wd, 0.0, wd]
        groups = [{"params": [p for n, p in self.params if group_of[n] == g], "weight_decay": wds[g]}
                  for g in range(5) if any(group_of[n] == g for n, _ in self.params)]
        self.opt = torch.optim.SGD(groups, lr=0.1, momentum=0.9)
        self.w0 = [p.detach().clone() for _, p in self.params]

    def step(self, loss, lr):
        """Backward and one SGD step at lr."""
        self.opt.zero_grad()
        loss.backward()
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.step()

    def delta(self):
        """w5 − w0 of every trained tensor, flattened in state-dict order."""
        return np.concatenate([(p.detach() - w).double().numpy().ravel() for (_, p), w in zip(self.params, self.w0)])


# moco: MoCo v2 over five steps. moco_collator batches of B images: data.0 the queries' crops,
# data_momentum.0 the keys'; heads [mlp 512→64 ReLU], [mlp 64→16]; moco_loss with a queue of 16
# keys (4 steps fill it), T 0.2; the encoder follows with m 0.9 (VISSL's MoCoHook: built from a
# fresh model, so its BN buffers are the defaults, its parameters the model's at the first forward,
# then k·m + q·(1 − m) before every later one; its frozen trunk in eval mode as the model's);
# SGD momentum 0.9, weight decay 1e-4, cosine LR 0.3 → 0 per step.
MOCO = dict(heads=[["mlp", {"dims": [512, 64], "use_relu": True}], ["mlp", {"dims": [64, 16]}]],
            queue=16, T=0.2, m=0.9, wd=1e-4, lr=lambda k: 0.3 * (1 + math.cos(math.pi * k / STEPS)) / 2)


def moco_encoder(model):
    """VISSL's build_model for the encoder: the same modules, BN buffers as a fresh build leaves them."""
    enc = copy.deepcopy(model)
    for m in enc.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
    for p in enc.parameters():
        p.requires_grad_(False)
    return enc


def train_moco(data, queue0, dtype):
    """VISSL's MoCo step: query forward, MoCoHook.on_forward (encoder update, keys), MoCoLoss
    (logits against the old queue, then the enqueue), SGD."""
    c = MOCO
    t = Trained(c["heads"], c["wd"], dtype)
    model = t.model
    encoder = moco_encoder(model)
    queue, ptr, losses = queue0.clone().to(dtype), 0, []
    for k, u8 in enumerate(data):
        out = forward(model, to_input(u8[:B]).to(dtype))
        with torch.no_grad():
            for pq, pk in zip(model.parameters(), encoder.parameters()):
                if k == 0:
                    pk.copy_(pq)
                else:
                    pk.data = pk.data * c["m"] + pq.data * (1.0 - c["m"])
            key = F.normalize(forward(encoder, to_input(u8[B:]).to(dtype)), dim=1)
        q = F.normalize(out, dim=1)
        logits = torch.cat([(q * key).sum(1, keepdim=True), q @ queue.clone().T], dim=1) / c["T"]
        queue[ptr:ptr + B] = key
        ptr = (ptr + B) % c["queue"]
        loss = F.cross_entropy(logits, torch.zeros(B, dtype=torch.long))
        losses.append(loss.item())
        t.step(loss, c["lr"](k))
    delta = t.delta()
    enc = np.concatenate([p.detach().double().numpy().ravel() for n, p in encoder.named_parameters()
                          if n.startswith("heads.")])
    return np.array(losses), delta, queue.double().numpy(), enc


def moco_case(norm):
    data = batches(47)
    g = torch.Generator().manual_seed(53)
    queue0 = F.normalize(torch.randn(MOCO["queue"], 16, generator=g), dim=1)  # VISSL's randn(D, Q), dim 0
    losses, delta, queue, enc = train_moco(data, queue0, torch.float64)
    losses32, delta32, _, _ = train_moco(data, queue0, torch.float32)
    out = lambda n, a: golden.save_array(os.path.join(OUT, f"moco_{n}.npy"), a)
    out("loss", losses)
    out("loss32", losses32)
    out("delta", delta)
    out("queue0", queue0.numpy())
    out("queue", queue)
    out("enc", enc)
    out("floor", np.array([np.max(np.abs(losses32 - losses) / np.abs(losses)),
                           np.max(np.abs(delta32 - delta)) / np.max(np.abs(delta))]))
    with open(os.path.join(OUT, "moco_batches.rec"), "wb") as f:
        for k, u8 in enumerate(data):
            records.write_record(f, {"data.0": u8[:B].numpy(), "data_momentum.0": u8[B:].numpy(),
                                     "normalize": norm}, seq=k)
        records.write_eos(f, len(data))
    print(f"moco: losses {losses.round(5)}; torch float32 vs float64: loss "
          f"{np.max(np.abs(losses32 - losses) / np.abs(losses)):.2g}, update "
          f"{np.max(np.abs(delta32 - delta)) / np.max(np.abs(delta)):.2g}")


# npid: NPID's nce_loss_with_memory over five steps. Batches of B images whose label.0 is their
# sample index (LABEL_TYPE sample_index) in a training set of 32; heads [mlp 512→64 ReLU],
# [mlp 64→16]; a memory bank of 32 × 16, 8 negatives per image drawn as selfsup draws them
# (selfsup_rng.py: VISSL's own draw is torch's generator, which no other program reproduces),
# T 0.07 and momentum 0.5 read back as float32 (VISSL's params buffer), Z from the first batch;
# the memory takes each batch after its scores; SGD momentum 0.9, weight decay 1e-4, cosine LR
# 0.3 → 0 per step. SEED_VALUE 0 keys the draws.
NPID = dict(heads=[["mlp", {"dims": [512, 64], "use_relu": True}], ["mlp", {"dims": [64, 16]}]],
            n=32, k=8, T=0.07, m=0.5, wd=1e-4, lr=lambda k: 0.3 * (1 + math.cos(math.pi * k / STEPS)) / 2)


def npid_samples(k):
    return [(7 * k + 5 * i + 3) % NPID["n"] for i in range(B)]


def npid_draws(step, y, output=0):
    """selfsup's negatives: row i's K from the stream (SEED 0, TRAIN, epoch i, sample_index step,
    transform_pos 2 + the output's index)."""
    idx = []
    for i, own in enumerate(y):
        s = selfsup_rng.Stream(0, selfsup_rng.PURPOSE_TRAIN, epoch=i, sample_index=step, transform_pos=2 + output)
        idx.append([own] + [s.randint(0, NPID["n"]) for _ in range(NPID["k"])])
    return torch.tensor(idx)


def nce_criterion(x, n):
    """VISSL's NCECriterion."""
    k, eps = x.shape[1] - 1, float(np.finfo("float32").eps)
    ln_pmt = torch.log(x[:, 0] / (x[:, 0] + k / n + eps))
    ln_pon = torch.log((k / n) / (x[:, 1:] + k / n + eps))
    return -(ln_pmt.sum() + ln_pon.sum()) / x.shape[0]


def train_npid(data, memory0, loss_type, dtype):
    """VISSL's NPID step: forward; NCEAverage (scores against the memory rows, Z once, the memory
    update); NCECriterion or CrossEntropyLoss; SGD."""
    c = NPID
    T, m = float(np.float32(c["T"])), float(np.float32(c["m"]))
    t = Trained(c["heads"], c["wd"], dtype)
    model = t.model
    memory, z, losses = memory0.clone().to(dtype), -1.0, []
    for k, u8 in enumerate(data):
        y = torch.tensor(npid_samples(k))
        e = F.normalize(forward(model, to_input(u8[:B]).to(dtype)), dim=1)
        idx = npid_draws(k, y.tolist())
        w = memory[idx.view(-1)].view(B, c["k"] + 1, -1).detach()
        out = torch.bmm(w, e.view(B, -1, 1)).squeeze(2) / T
        if loss_type == "nce":
            out = torch.exp(out)
            if z < 0:
                z = float(np.float32(out.detach().mean().item() * c["n"]))
            loss = nce_criterion(out / z, c["n"])
        else:
            loss = F.cross_entropy(out, torch.zeros(B, dtype=torch.long))
        with torch.no_grad():
            rows = memory[y] * m + e.detach() * (1 - m)
            memory[y] = F.normalize(rows, dim=1)
        losses.append(loss.item())
        t.step(loss, c["lr"](k))
    delta = t.delta()
    return np.array(losses), delta, memory.double().numpy(), z


def npid_case(norm, name, loss_type):
    data = batches(59)
    g = torch.Generator().manual_seed(61)
    stdv = 1.0 / math.sqrt(16 / 3)  # VISSL's init_memory: U(−stdv, stdv), then L2-normalised
    memory0 = F.normalize(torch.rand(NPID["n"], 16, generator=g) * 2 * stdv - stdv, dim=1)
    losses, delta, memory, z = train_npid(data, memory0, loss_type, torch.float64)
    losses32, delta32, _, _ = train_npid(data, memory0, loss_type, torch.float32)
    out = lambda n, a: golden.save_array(os.path.join(OUT, f"{name}_{n}.npy"), a)
    out("loss", losses)
    out("loss32", losses32)
    out("delta", delta)
    out("memory0", memory0.numpy())
    out("memory", memory)
    if loss_type == "nce":
        out("z", np.array([z]))
    out("floor", np.array([np.max(np.abs(losses32 - losses) / np.abs(losses)),
                           np.max(np.abs(delta32 - delta)) / np.max(np.abs(delta))]))
    with open(os.path.join(OUT, f"{name}_batches.rec"), "wb") as f:
        for k, u8 in enumerate(data):
            records.write_record(f, {"data.0": u8[:B].numpy(), "label.0": np.array(npid_samples(k), dtype=np.int64),
                                     "normalize": norm}, seq=k)
        records.write_eos(f, len(data))
    print(f"{name}: losses {losses.round(5)}; Z {z:.6g}; torch float32 vs float64: loss "
          f"{np.max(np.abs(losses32 - losses) / np.abs(losses)):.2g}, update "
          f"{np.max(np.abs(delta32 - delta)) / np.max(np.abs(delta)):.2g}")


# pirl: PIRL's two outputs over five steps. Batches of B images as patch_and_image_collator
# writes them: images.0 (B × 16 × 16), patches.0 (the 9 patches of image i at rows 9i … 9i + 8,
# 8 × 8 each); MULTI_INPUT_HEAD_MAPPING [[patches, [flatten]], [images, [flatten]]]: the trunk
# on each input, head 0 = [mlp 512→16, siamese_concat_view 9, mlp 144→16] on the patches, head 1
# = [mlp 512→16] on the images; nce_loss_with_memory with loss_weights [0.5, 0.5], the memory
# updated by the images' embeddings only (update_mem_on_forward False, update_mem_with_emb_index
# 1), after their scores; Z from the first batch's first output (the patches'). NPID's memory,
# negatives (each output its own streams), T, momentum and optimizer.
PIRL_HEADS = [[["mlp", {"dims": [512, 16]}], ["siamese_concat_view", {"num_towers": 9}], ["mlp", {"dims": [144, 16]}]],
              [["mlp", {"dims": [512, 16]}]]]


def pirl_batches(seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, 256, (B, SIZE, SIZE, 3), generator=g, dtype=torch.uint8),
             torch.randint(0, 256, (9 * B, SIZE // 2, SIZE // 2, 3), generator=g, dtype=torch.uint8))
            for _ in range(STEPS)]


def train_pirl(data, memory0, dtype):
    c = NPID
    T, m = float(np.float32(c["T"])), float(np.float32(c["m"]))
    t = Trained(PIRL_HEADS, c["wd"], dtype)
    model = t.model
    memory, z, losses = memory0.clone().to(dtype), -1.0, []
    for k, (images, patches) in enumerate(data):
        y = torch.tensor(npid_samples(k))
        outs = [M.run_head(model.heads[0], model.trunk(to_input(patches).to(dtype))[0]),
                M.run_head(model.heads[1], model.trunk(to_input(images).to(dtype))[0])]
        loss = 0
        for o, out in enumerate(outs):
            e = F.normalize(out, dim=1)
            idx = npid_draws(k, y.tolist(), o)
            w = memory[idx.view(-1)].view(B, c["k"] + 1, -1).detach()
            x = torch.exp(torch.bmm(w, e.view(B, -1, 1)).squeeze(2) / T)
            if z < 0:
                z = float(np.float32(x.detach().mean().item() * c["n"]))
            if o == 1:
                with torch.no_grad():
                    memory[y] = F.normalize(memory[y] * m + e.detach() * (1 - m), dim=1)
            loss = loss + 0.5 * nce_criterion(x / z, c["n"])
        losses.append(loss.item())
        t.step(loss, c["lr"](k))
    delta = t.delta()
    return np.array(losses), delta, memory.double().numpy(), z


def pirl_case(norm):
    data = pirl_batches(67)
    g = torch.Generator().manual_seed(71)
    stdv = 1.0 / math.sqrt(16 / 3)
    memory0 = F.normalize(torch.rand(NPID["n"], 16, generator=g) * 2 * stdv - stdv, dim=1)
    losses, delta, memory, z = train_pirl(data, memory0, torch.float64)
    losses32, delta32, _, _ = train_pirl(data, memory0, torch.float32)
    out = lambda n, a: golden.save_array(os.path.join(OUT, f"pirl_{n}.npy"), a)
    out("loss", losses)
    out("loss32", losses32)
    out("delta", delta)
    out("memory0", memory0.numpy())
    out("memory", memory)
    out("floor", np.array([np.max(np.abs(losses32 - losses) / np.abs(losses)),
                           np.max(np.abs(delta32 - delta)) / np.max(np.abs(delta))]))
    with open(os.path.join(OUT, "pirl_batches.rec"), "wb") as f:
        for k, (images, patches) in enumerate(data):
            records.write_record(f, {"images.0": images.numpy(), "patches.0": patches.numpy(),
                                     "label.0": np.array(npid_samples(k), dtype=np.int64), "normalize": norm}, seq=k)
        records.write_eos(f, len(data))
    print(f"pirl: losses {losses.round(5)}; Z {z:.6g}; torch float32 vs float64: loss "
          f"{np.max(np.abs(losses32 - losses) / np.abs(losses)):.2g}, update "
          f"{np.max(np.abs(delta32 - delta)) / np.max(np.abs(delta)):.2g}")


# swav_momentum: SwAV with a momentum network over five steps, on swav_queue's batches and model.
# SwAVMomentumHook: the network is the model's copy (parameters and running statistics) at the
# first forward, then its parameters move with m 0.9 and its running statistics are copied
# before every forward; it runs on the assignment crops 0 and 1, in train mode for the first
# 2 iterations (momentum_eval_mode_iter_start), then in eval mode (its frozen trunk always in
# eval mode, as the model's). SwAVMomentumLoss: codes from the network's scores (its Sinkhorn:
# exp(s/ε), no max taken), the queue from iteration 2 scored by the network's prototypes and fed
# its embeddings with VISSL's bs = rows / num_crops (here 2 of the 4 images); prototypes of
# both normalised after every update.
SWAVM = dict(SWAV, m=0.9, eval_start=2)


def momentum_sinkhorn(q, iters):
    """SwAVMomentumLoss.distributed_sinkhornknopp on Q = exp(scores/ε)ᵀ (K × n), one rank."""
    q = q / q.sum()
    k, n = q.shape
    r, c = torch.ones(k, dtype=q.dtype) / k, torch.ones(n, dtype=q.dtype) / n
    curr = q.sum(dim=1)
    for _ in range(iters):
        q = q * (r / curr).unsqueeze(1)
        q = q * (c / q.sum(dim=0)).unsqueeze(0)
        curr = q.sum(dim=1)
    return (q / q.sum(dim=0, keepdim=True)).t()


def momentum_follow(model, encoder, m):
    """SwAVMomentumHook: build (a copy) or move the parameters; copy the running statistics."""
    if encoder is None:
        encoder = copy.deepcopy(model)
        for p in encoder.parameters():
            p.requires_grad_(False)
        return encoder
    for pq, pk in zip(model.parameters(), encoder.parameters()):
        pk.data = pk.data * m + pq.data * (1.0 - m)
    for (name, bq), (_, bk) in zip(model.named_buffers(), encoder.named_buffers()):
        if "running_" in name:
            bk.data.copy_(bq.data)
    return encoder


def swav_momentum_loss(out, mscores, queues, c):
    """SwAVMomentumLoss.forward's sum, given the network's scores and the queue's."""
    loss, crops = 0, c["crops"]
    for h, scores in enumerate(out[1:]):
        bs, sub = scores.shape[0] // crops, 0
        for j, a in enumerate(c["cfa"]):
            with torch.no_grad():
                s = mscores[h][j * bs:(j + 1) * bs]
                if queues is not None:
                    s = torch.cat((s, queues[h][j]))
                codes = momentum_sinkhorn(torch.exp(s / 0.05).t(), 3)[:bs]
            subsub = 0
            for p in [p for p in range(crops) if p != a]:
                subsub -= torch.mean(torch.sum(codes * torch.log(F.softmax(scores[bs * p:bs * (p + 1)] / 0.1, dim=1)),
                                               dim=1))
            sub += subsub / (crops - 1)
        loss += sub / len(c["cfa"])
    return loss / (len(out) - 1)


def train_swav_momentum(data, queue0, dtype):
    c = SWAVM
    t = Trained(c["heads"], c["wd"], dtype)
    model = t.model
    encoder, emb_queue, num_iteration, losses = None, queue0.clone().to(dtype), 0, []
    for k, (big, small) in enumerate(data):
        head = model.heads[0]
        out = head(torch.cat([model.trunk(to_input(big).to(dtype))[0], model.trunk(to_input(small).to(dtype))[0]]))
        with torch.no_grad():
            encoder = momentum_follow(model, encoder, c["m"])
            encoder.train(num_iteration < c["eval_start"])
            encoder.trunk.eval()
            menc = encoder.heads[0](encoder.trunk(to_input(big).to(dtype))[0])
        use_queue = num_iteration >= c["start_iter"]
        queues = None
        if use_queue:
            with torch.no_grad():
                queues = [[getattr(encoder.heads[0], f"prototypes{h}")(emb_queue[i]) for i in range(len(c["cfa"]))]
                          for h in range(head.nmb_heads)]
        loss = swav_momentum_loss(out, menc[1:], queues, c)
        num_iteration += 1
        if use_queue:
            bs = len(menc[0]) // c["crops"]
            for i in range(len(c["cfa"])):
                emb_queue[i, bs:] = emb_queue[i, :-bs].clone()
                emb_queue[i, :bs] = menc[0][i * bs:(i + 1) * bs]
        losses.append(loss.item())
        t.step(loss, c["lr"](k))
        with torch.no_grad():
            for net in (model, encoder):
                for h in range(head.nmb_heads):
                    w = getattr(net.heads[0], f"prototypes{h}").weight
                    w.copy_(F.normalize(w, dim=1, p=2))
    delta = t.delta()
    enc = np.concatenate([p.detach().double().numpy().ravel() for n, p in encoder.named_parameters()
                          if n.startswith("heads.")])
    return np.array(losses), delta, enc


def swav_momentum_case(norm):
    data = swav_batches(41)
    stdv = 1.0 / math.sqrt(16 / 3)
    g = torch.Generator().manual_seed(73)
    queue0 = (torch.rand(2, SWAV["queue"], 16, generator=g) * 2 * stdv - stdv).float()
    losses, delta, enc = train_swav_momentum(data, queue0, torch.float64)
    losses32, delta32, _ = train_swav_momentum(data, queue0, torch.float32)
    out = lambda n, a: golden.save_array(os.path.join(OUT, f"swav_momentum_{n}.npy"), a)
    out("loss", losses)
    out("loss32", losses32)
    out("delta", delta)
    out("queue0", queue0.numpy())
    out("enc", enc)
    out("floor", np.array([np.max(np.abs(losses32 - losses) / np.abs(losses)),
                           np.max(np.abs(delta32 - delta)) / np.max(np.abs(delta))]))
    print(f"swav_momentum: losses {losses.round(5)}; torch float32 vs float64: loss "
          f"{np.max(np.abs(losses32 - losses) / np.abs(losses)):.2g}, update "
          f"{np.max(np.abs(delta32 - delta)) / np.max(np.abs(delta)):.2g}")


# dc: DeepClusterV2 over five epochs of one batch each. A training set of 8 samples, batches of
# all 8 (a new order and new crops every epoch), 2 crops of 16 px (multicrop_collator: label.0
# and data_idx.0 are the 16 sample indices, crop-major); heads [mlp 512→64 ReLU], [mlp 64→16];
# deepclusterv2_loss with T 0.1, num_clusters [3, 4], kmeans_iters 2, both crops in memory
# (crops_for_mb [0, 1]: head 0 clusters bank 0, head 1 bank 1). InitMemoryHook's pass is one
# batch, epoch 0's (selfsup's memory chain decodes epoch 0 again: the same crops); then every
# epoch clusters first (ClusterMemoryHook; the first centroids are the rows selfsup's
# permutation picks: stream (SEED 0, CLUSTER, epoch, head)), then trains its batch. SGD momentum
# 0.9, weight decay 1e-4, cosine LR 0.3 → 0 per step.
DC = dict(heads=[["mlp", {"dims": [512, 64], "use_relu": True}], ["mlp", {"dims": [64, 16]}]],
          n=8, crops=2, K=[3, 4], iters=2, T=0.1, wd=1e-4,
          lr=lambda k: 0.3 * (1 + math.cos(math.pi * k / STEPS)) / 2)


def dc_batches(seed):
    """Per epoch: the order of the 8 samples and the two crops' images."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(STEPS):
        order = torch.randperm(DC["n"], generator=g)
        crops = [torch.randint(0, 256, (DC["n"], SIZE, SIZE, 3), generator=g, dtype=torch.uint8)
                 for _ in range(DC["crops"])]
        out.append((order, crops))
    return out


def dc_kmeans(bank, K, iters, epoch, head, gaps):
    """VISSL's cluster_memory for one head on one bank (world size 1), the first centroids from
    selfsup's permutation; every E-step's smallest top-2 gap goes into gaps."""
    perm = selfsup_rng.Stream(0, selfsup_rng.PURPOSE_CLUSTER, epoch=epoch, sample_index=head).permutation(len(bank))
    centroids = bank[perm[:K]].clone()
    for it in range(iters + 1):
        dots = bank @ centroids.t()
        top2 = dots.topk(2, dim=1).values
        gaps.append((top2[:, 0] - top2[:, 1]).min().item())
        assign = dots.argmax(dim=1)
        if it == iters:
            break
        for k in range(K):
            rows = bank[assign == k]
            if len(rows):
                centroids[k] = rows.sum(dim=0) / len(rows)
        centroids = F.normalize(centroids, dim=1)
    return centroids, assign


def train_dc(data, dtype, gaps):
    c = DC
    t = Trained(c["heads"], c["wd"], dtype)
    model = t.model
    nb = len(c["K"])  # one bank per crop: as many as heads here
    with torch.no_grad():  # InitMemoryHook: crop by crop, the model in training mode
        order, crops = data[0]
        bank = torch.stack([F.normalize(forward(model, to_input(x[order]).to(dtype)), dim=1) for x in crops])
        index = order.clone()
    losses = []
    for k, (order, crops) in enumerate(data):
        assign = torch.full((len(c["K"]), c["n"]), -100, dtype=torch.long)
        cents = []
        with torch.no_grad():
            for h, K in enumerate(c["K"]):
                cent, a = dc_kmeans(bank[h % nb], K, c["iters"], k, h, gaps)
                cents.append(cent)
                assign[h][index] = a
        idx = order.repeat(c["crops"])
        z = F.normalize(forward(model, torch.cat([to_input(x[order]) for x in crops]).to(dtype)), dim=1)
        loss = sum(F.cross_entropy(z @ cent.t() / c["T"], assign[h][idx], ignore_index=-100)
                   for h, cent in enumerate(cents)) / len(cents)
        with torch.no_grad():
            for i in range(nb):
                bank[i] = z[i * c["n"]:(i + 1) * c["n"]].detach()
            index = order.clone()
        losses.append(loss.item())
        t.step(loss, c["lr"](k))
    return (np.array(losses), t.delta(), bank.double().numpy(), torch.cat(cents).double().numpy(),
            assign.numpy().astype(np.float64))


def dc_record(f, order, crops, norm, seq, epoch):
    idx = np.tile(order.numpy(), DC["crops"]).astype(np.int64)
    tensors = {f"data.0.{i}": x[order].numpy() for i, x in enumerate(crops)}
    tensors.update({"label.0": idx, "data_idx.0": idx, "normalize": norm})
    records.write_record(f, tensors, seq=seq, epoch=epoch)


def dc_case(norm):
    data = dc_batches(79)
    gaps = []
    losses, delta, memory, cents, assign = train_dc(data, torch.float64, gaps)
    losses32, delta32, _, _, assign32 = train_dc(data, torch.float32, [])
    # The embeddings of random images are close together, so the E-steps' margins are small; a
    # float32 run must still land on every one of float64's assignments (it does, by > 200 ulp).
    assert min(gaps) > 2e-5 and (assign32 == assign).all(), f"a k-means E-step nearly ties ({min(gaps):.3g})"
    out = lambda n, a: golden.save_array(os.path.join(OUT, f"dc_{n}.npy"), a)
    out("loss", losses)
    out("loss32", losses32)
    out("delta", delta)
    out("memory", memory)
    out("centroids", cents)
    out("assign", assign)
    out("floor", np.array([np.max(np.abs(losses32 - losses) / np.abs(losses)),
                           np.max(np.abs(delta32 - delta)) / np.max(np.abs(delta))]))
    with open(os.path.join(OUT, "dc_batches.rec"), "wb") as f:
        for k, (order, crops) in enumerate(data):
            dc_record(f, order, crops, norm, 0, k)
        records.write_eos(f, len(data))
    with open(os.path.join(OUT, "dc_memory.rec"), "wb") as f:
        dc_record(f, data[0][0], data[0][1], norm, 0, 0)
        records.write_eos(f, 1)
    half = DC["n"] // 2
    for name, epochs in (("dc_half_batches", range(3)), ("dc_half_memory", range(1))):
        with open(os.path.join(OUT, f"{name}.rec"), "wb") as f:
            for e in epochs:
                for s in range(2):
                    dc_record(f, data[e][0][s * half:(s + 1) * half], data[e][1], norm, s, e)
            records.write_eos(f, 2 * len(epochs))
    print(f"dc: losses {losses.round(5)}; smallest E-step gap {min(gaps):.3g}; torch float32 vs float64: loss "
          f"{np.max(np.abs(losses32 - losses) / np.abs(losses)):.2g}, update "
          f"{np.max(np.abs(delta32 - delta)) / np.max(np.abs(delta)):.2g}")


def main():
    os.makedirs(OUT, exist_ok=True)
    norm = np.array([[255.0] * 3, MEAN, STD], dtype=np.float32)
    for seed, (name, c) in enumerate(CASES.items()):
        data = batches(11 + seed)
        tests = test_batches() if name == "ce_multistep" else None
        losses, delta, phases = train(c, data, torch.float64, tests)
        losses32, delta32, _ = train(c, data, torch.float32, tests)
        out = lambda n, a: golden.save_array(os.path.join(OUT, f"{name}_{n}.npy"), a)
        out("loss", losses)
        out("loss32", losses32)
        out("delta", delta)
        out("floor", np.array([np.max(np.abs(losses32 - losses) / np.abs(losses)),
                               np.max(np.abs(delta32 - delta)) / np.max(np.abs(delta))]))
        with open(os.path.join(OUT, f"{name}_batches.rec"), "wb") as f:
            for k, u8 in enumerate(data):
                records.write_record(f, {"data.0": u8.numpy(), "label.0": np.array(LABELS, dtype=np.int64),
                                         "normalize": norm}, seq=0 if c["epochs"] else k,
                                     epoch=k if c["epochs"] else 0)
            records.write_eos(f, len(data))
        if tests is not None:
            out("test", phases)
            with open(os.path.join(OUT, f"{name}_test_batches.rec"), "wb") as f:
                for e, _ in enumerate(TEST_AFTER):
                    for k, (u8, labels) in enumerate(zip(tests, TEST_LABELS)):
                        records.write_record(f, {"data.0": u8.numpy(), "label.0": np.array(labels, dtype=np.int64),
                                                 "normalize": norm}, seq=k, epoch=e)
                records.write_eos(f, len(TEST_AFTER) * len(tests))
            print(f"{name} test phases (loss, top-1, top-5): {phases.round(4).tolist()}")
        print(f"{name}: losses {losses.round(5)}; torch float32 vs float64: loss "
              f"{np.max(np.abs(losses32 - losses) / np.abs(losses)):.2g}, update "
              f"{np.max(np.abs(delta32 - delta)) / np.max(np.abs(delta)):.2g}")
    swav_case(norm)
    moco_case(norm)
    npid_case(norm, "npid", "nce")
    npid_case(norm, "npid_infonce", "cross_entropy")
    pirl_case(norm)
    swav_momentum_case(norm)
    dc_case(norm)


if __name__ == "__main__":
    main()
