#!/usr/bin/python3
"""make_ddp_fixtures.py — VISSL's data-parallel training in two PyTorch processes (gloo), for
tests/unit/test_ddp.c.

Two processes join a torch.distributed world (gloo, a file rendezvous), wrap the model in
DistributedDataParallel as VISSL does (gradients averaged over the ranks, rank 0's buffers
broadcast before every forward) and train five steps, each rank on its own batches. The model
is make_train_fixtures.py's: a ResNet-18 small-stem trunk set by model_init_formula's formulas,
frozen and in eval mode (FREEZE_TRUNK_ONLY: a BN trunk in train mode on 16 px images is chaotic
over several steps, see make_train_fixtures.py), heads that train. No SyncBN: a head's batch
norm normalises each rank's own batch.

Cases:
  simclr_larc  make_train_fixtures.py's simclr_larc: heads [mlp 512→64 ReLU], [mlp 64→16],
               simclr_info_nce_loss (T 0.1) over the gathered embeddings (VISSL's
               gather_from_all: all_gather forward, GatherLayer's all_reduce of the gathered
               rows' gradients backward; masks from precompute_pos_neg_mask for the rank),
               SGD momentum 0.9, weight decay 1e-4, LARC (trust 0.02), cosine LR 0.3 → 0 per step
  swav         swav_head [512, 32, 16] with BN (each rank's batch) and prototype heads of 20 and
               12, four crops (two 16 px, two 8 px), crops_for_assign [0, 1], no queue, hard
               assignments at iteration 0, prototypes0 frozen at iteration 1, prototypes
               normalised after every update; Sinkhorn over both ranks' scores (VISSL's
               distributed_sinkhornknopp: the max, the total and the prototype sums
               all_reduced, the samples' marginal 1/(W·n)); SGD momentum 0.9, weight decay 1e-4,
               cosine LR 0.3 → 0 per step

Per case (tests/golden/fixtures/ddp/CASE_*):
  rank{R}_batches.rec  rank R's batch records (4 images a step) and an end-of-stream record
  loss.npy             float64 [5]: the logged loss of each step (VISSL's all_reduce_mean of
                       the ranks' losses)
  delta.npy            float64: w5 − w0 of every trained tensor, flattened in state-dict order
                       (the ranks hold the same)
  floor.npy            float64 [2]: the same run in float32 against this one (loss, relative;
                       update, relative to its largest value)

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_ddp_fixtures.py
"""
import math
import os
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import make_loss_fixtures as L  # noqa: E402
import make_model_fixtures as M  # noqa: E402
import make_optim_fixtures as O  # noqa: E402
import make_train_fixtures as T  # noqa: E402
import selfsup_records as records  # noqa: E402
import golden  # noqa: E402

OUT = golden.out_dir("ddp")
WORLD, B, SIZE, STEPS = 2, 4, 16, 5
LR = lambda k: 0.3 * (1 + math.cos(math.pi * k / STEPS)) / 2  # noqa: E731
SIMCLR_HEADS = [["mlp", {"dims": [512, 64], "use_relu": True}], ["mlp", {"dims": [64, 16]}]]
SWAV_HEADS = [["swav_head", {"dims": [512, 32, 16], "use_bn": True, "num_clusters": [20, 12]}]]
CROPS, CFA = 4, [0, 1]


class GatherLayer(torch.autograd.Function):
    """vissl/utils/distributed_gradients.py: all_gather forward; backward, the gathered rows'
    gradients all_reduced and this rank's kept."""

    @staticmethod
    def forward(ctx, x):
        out = [torch.zeros_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(out, x)
        return tuple(out)

    @staticmethod
    def backward(ctx, *grads):
        all_grads = torch.stack(grads)
        dist.all_reduce(all_grads)
        return all_grads[dist.get_rank()]


def simclr_masks(batch, rank, world, dtype):
    """SimclrInfoNCECriterion.precompute_pos_neg_mask: rows of this rank (2·batch), columns of
    every rank's."""
    rows, total = 2 * batch, 2 * batch * world
    pos = torch.zeros(rows, total, dtype=dtype)
    neg = torch.zeros(rows, total, dtype=dtype)
    for anchor in range(2):
        for i in range(batch):
            r = anchor * batch + i
            neg[r] = 1
            neg[r, rows * rank + i] = 0
            neg[r, rows * rank + batch + i] = 0
            pos[r, rows * rank + (1 - anchor) * batch + i] = 1
    return pos, neg


def simclr_dist(out, temperature, batch):
    z = F.normalize(out, dim=1, p=2)
    zall = torch.cat(GatherLayer.apply(z))
    sim = torch.exp(z @ zall.t() / temperature)
    pos_mask, neg_mask = simclr_masks(batch, dist.get_rank(), dist.get_world_size(), out.dtype)
    pos = (sim * pos_mask).sum(1)
    neg = (sim * neg_mask).sum(1)
    return -torch.mean(torch.log(pos / (pos + neg)))


def world_all_reduce(t, op="sum"):
    """t all_reduced over the world, in place (dist.all_reduce returns nothing)."""
    dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return t


def sinkhorn_dist(scores, eps, iters, hard):
    """distributed_sinkhornknopp on this rank's scores (float path), the world's sums."""
    return L.swav_codes(scores, eps, iters, hard, across=world_all_reduce, world=dist.get_world_size())


class Net(torch.nn.Module):
    """The model as VISSL's BaseSSLMultiInputOutputModel runs it: the trunk once per resolution,
    the heads on the features joined crop-major."""

    def __init__(self, heads):
        super().__init__()
        self.m = M.Model(M.Trunk(18, True), M.heads_modules(heads))

    def forward(self, inputs):
        out = torch.cat([self.m.trunk(x)[0] for x in inputs])
        for h in self.m.heads:
            out = h(out)
        return out


def optimizer(model, wd):
    group_of = O.vissl_groups(model, False, True, [])
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    wds = [wd, 0.0, wd, 0.0, wd]
    groups = [{"params": [p for n, p in params if group_of[n] == g], "weight_decay": wds[g]}
              for g in range(5) if any(group_of[n] == g for n, _ in params)]
    return params, torch.optim.SGD(groups, lr=0.1, momentum=0.9)


def train_rank(rank, case, data, dtype, rendezvous, result):
    """One rank's five steps; its logged losses and update into result (an .npz)."""
    dist.init_process_group("gloo", init_method="file://" + rendezvous, rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    net = Net(SIMCLR_HEADS if case == "simclr_larc" else SWAV_HEADS).to(dtype).train()
    net.m.trunk.eval()  # FREEZE_TRUNK_ONLY: eval mode, no gradients
    for p in net.m.trunk.parameters():
        p.requires_grad_(False)
    params, opt = optimizer(net.m, 1e-4)
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    w0 = [p.detach().clone() for _, p in params]
    losses = []
    for k, inputs in enumerate(data[rank]):
        xs = [T.to_input(u8).to(dtype) for u8 in inputs]
        out = ddp(xs)
        if case == "simclr_larc":
            loss = simclr_dist(out, 0.1, B)
        else:
            loss = L.swav(out, 0.1, 0.05, 3, CROPS, CFA, hard=k < 1, codes=sinkhorn_dist)
        logged = loss.detach().clone()
        dist.all_reduce(logged)
        losses.append(logged.item() / WORLD)
        opt.zero_grad()
        loss.backward()
        if case == "swav" and k + 1 < 2:  # TEMP_FROZEN_PARAMS_ITER_MAP: prototypes0 until iteration 2
            net.m.heads[0].prototypes0.weight.grad = None
        for g in opt.param_groups:
            g["lr"] = LR(k)
        saved = O.larc_step(opt.param_groups, 0.02, 1e-8, False) if case == "simclr_larc" else None
        opt.step()
        if saved:
            for g, wd in zip(opt.param_groups, saved):
                g["weight_decay"] = wd
        if case == "swav":
            with torch.no_grad():
                head = net.m.heads[0]
                for h in range(head.nmb_heads):
                    w = getattr(head, f"prototypes{h}").weight
                    w.copy_(F.normalize(w, dim=1, p=2))
    delta = np.concatenate([(p.detach() - w).double().numpy().ravel() for (_, p), w in zip(params, w0)])
    np.savez(result, losses=np.array(losses), delta=delta)
    dist.destroy_process_group()


def run(case, data, dtype):
    """The two ranks' run: (logged losses, update), the same on both ranks."""
    with tempfile.TemporaryDirectory() as tmp:
        rendezvous = os.path.join(tmp, "rendezvous")
        results = [os.path.join(tmp, f"rank{r}.npz") for r in range(WORLD)]
        procs = [mp.get_context("spawn").Process(target=train_rank, args=(r, case, data, dtype, rendezvous, results[r]))
                 for r in range(WORLD)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
            assert p.exitcode == 0, f"{case}: a rank failed"
        got = [np.load(r) for r in results]
        assert np.array_equal(got[0]["delta"], got[1]["delta"]), f"{case}: the ranks are not one model"
        return got[0]["losses"], got[0]["delta"]


def batches(case, seed):
    """data[rank][step]: the inputs, one uint8 tensor per resolution (crop-major rows)."""
    g = torch.Generator().manual_seed(seed)
    rnd = lambda n, side: torch.randint(0, 256, (n, side, side, 3), generator=g, dtype=torch.uint8)  # noqa: E731
    if case == "simclr_larc":
        return [[[rnd(2 * B, SIZE)] for _ in range(STEPS)] for _ in range(WORLD)]
    return [[[rnd(2 * B, SIZE), rnd(2 * B, SIZE // 2)] for _ in range(STEPS)] for _ in range(WORLD)]


def write_records(case, data, norm):
    for rank in range(WORLD):
        with open(os.path.join(OUT, f"{case}_rank{rank}_batches.rec"), "wb") as f:
            for k, inputs in enumerate(data[rank]):
                if case == "simclr_larc":
                    tensors = {"data.0": inputs[0].numpy()}
                else:  # the multicrop collator: data.0.K is crop K
                    big, small = inputs
                    crops = [big[:B], big[B:], small[:B], small[B:]]
                    tensors = {f"data.0.{i}": c.numpy() for i, c in enumerate(crops)}
                records.write_record(f, {**tensors, "normalize": norm}, seq=k)
            records.write_eos(f, len(data[rank]))


def main():
    os.makedirs(OUT, exist_ok=True)
    norm = np.array([[255.0] * 3, T.MEAN, T.STD], dtype=np.float32)
    for seed, case in enumerate(("simclr_larc", "swav")):
        data = batches(case, 61 + seed)
        losses, delta = run(case, data, torch.float64)
        losses32, delta32 = run(case, data, torch.float32)
        out = lambda n, a: golden.save_array(os.path.join(OUT, f"{case}_{n}.npy"), a)  # noqa: E731
        out("loss", losses)
        out("delta", delta)
        out("floor", np.array([np.max(np.abs(losses32 - losses) / np.abs(losses)),
                               np.max(np.abs(delta32 - delta)) / np.max(np.abs(delta))]))
        write_records(case, data, norm)
        print(f"ddp {case}: losses {losses.round(5)}; torch float32 vs float64: loss "
              f"{np.max(np.abs(losses32 - losses) / np.abs(losses)):.2g}, update "
              f"{np.max(np.abs(delta32 - delta)) / np.max(np.abs(delta)):.2g}")


if __name__ == "__main__":
    main()
