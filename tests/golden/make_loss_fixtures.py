#!/usr/bin/python3
"""make_loss_fixtures.py — VISSL 0.1.5's losses in PyTorch float64 (tests/unit/test_loss.c).

Each loss is VISSL's forward rewritten from VISSL 0.1.5's vissl/losses/ (SimclrInfoNCECriterion with its
precomputed masks, the multi-crop criterion's local-only negatives, cross_entropy_multiple_
output_single_target, bce_logits_multiple_output_single_target, swav_loss's SwAVCriterion with
its Sinkhorn-Knopp codes; ClassyVision's CrossEntropyLoss), on random outputs in float64;
autograd gives d(loss)/d(output).

Per case (tests/golden/fixtures/loss/CASE_*.npy): out{k} (float32, the outputs as the C side
reads them; the reference runs on exactly these values in float64), label (int64), loss
(float64 [1]) and dout{k} (float64).

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_loss_fixtures.py
"""
import os

import numpy as np
import torch
import torch.nn.functional as F
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

OUT = golden.out_dir("loss")


def simclr(out, temperature, batch):
    """SimclrInfoNCECriterion, world size 1: rows [crop0 images, crop1 images]."""
    r = out.shape[0]
    z = F.normalize(out, dim=1, p=2)
    sim = torch.exp(z @ z.t() / temperature)
    pos_mask = torch.zeros(r, r, dtype=out.dtype)
    neg_mask = torch.ones(r, r, dtype=out.dtype)
    for i in range(r):
        j = (i + batch) % r
        pos_mask[i, j] = 1
        neg_mask[i, i] = 0
        neg_mask[i, j] = 0
    pos = (sim * pos_mask).sum(1)
    neg = (sim * neg_mask).sum(1)
    return -torch.mean(torch.log(pos / (pos + neg)))


def multicrop_simclr(out, temperature, batch, crops):
    """The multi-crop criterion: one positive mask per crop offset, negatives local only."""
    r = batch * crops
    z = F.normalize(out, dim=1, p=2)
    sim = torch.exp(z @ z.t() / temperature)
    pos_masks = []
    neg_mask = torch.ones(r, r, dtype=out.dtype) - torch.eye(r, dtype=out.dtype)
    for d in range(1, crops):
        m = torch.zeros(r, r, dtype=out.dtype)
        for i in range(r):
            m[i, (i + d * batch) % r] = 1
        pos_masks.append(m)
        neg_mask = neg_mask - m
    neg = (sim * neg_mask).sum(1)
    total, count = 0, 0
    for m in pos_masks:
        pos = (sim * m).sum(1)
        total = total + torch.log(pos / (pos + neg)).sum()
        count += r
    return -total / count


def ce_multi(outs, label, normalize, temperature, weight, ignore_index=-1):
    loss = 0
    for o in outs:
        x = F.normalize(o, dim=1, p=2) if normalize else o
        loss = loss + F.cross_entropy(x / temperature, label, weight=weight, ignore_index=ignore_index)
    return loss


def bce_multi(outs, label):
    loss = 0
    for o in outs:
        per = F.binary_cross_entropy_with_logits(o, label.to(o.dtype).clamp(min=0), reduction="none")
        valid = (label != -1).to(o.dtype)
        per = per * valid
        n = valid.sum(0).clamp(min=1)
        loss = loss + (per / n).sum()
    return loss


def one_process(t, op="sum"):
    """An all_reduce over a world of one: t itself."""
    return t


def swav_codes(scores, eps, iters, hard, across=one_process, world=1):
    """SwAVCriterion's codes, float path: exp(s/ε − max)ᵀ, then distributed_sinkhornknopp
    (vissl/losses/swav_loss.py), with its guards; hard: temp_hard_assignment_iters. across(t, op)
    is the all_reduce ("sum" or "max") over the `world` processes (make_ddp_fixtures.py's)."""
    with torch.no_grad():
        a = scores / eps
        Q = torch.exp(a - across(a.max(), "max")).t()
        Q = Q / across(Q.sum())
        K, n = Q.shape
        r, c = torch.ones(K, dtype=Q.dtype) / K, torch.ones(n, dtype=Q.dtype) / (world * n)
        for _ in range(iters):
            u = across(Q.sum(dim=1))
            if (u == 0).any():
                Q += 1e-12
                u = across(Q.sum(dim=1))
            u = r / u
            u[torch.isinf(u)] = u[~torch.isinf(u)].max()
            Q *= u.unsqueeze(1)
            Q *= (c / Q.sum(dim=0)).unsqueeze(0)
        q = (Q / Q.sum(dim=0, keepdim=True)).t()
        return F.one_hot(q.argmax(dim=1), K).to(q.dtype) if hard else q


def swav(outs, temperature, eps, iters, crops, cfa, queues=None, hard=False, codes=swav_codes):
    """SwAVLoss.forward: the mean over prototype heads of SwAVCriterion (swapped prediction of
    each assignment crop's codes by every other crop); queues[h][i]: the queue's scores that
    go below assignment crop i's before Sinkhorn; codes: Sinkhorn-Knopp (one process's, or
    make_ddp_fixtures.py's over the world)."""
    total = 0.0 * outs[0].sum()  # the embedding takes no gradient from the loss
    for h, scores in enumerate(outs[1:]):
        bs, loss_h = scores.shape[0] // crops, 0.0
        for i, a in enumerate(cfa):
            s = scores[bs * a:bs * (a + 1)].detach()
            if queues is not None:
                s = torch.cat((s, queues[h][i]))
            q = codes(s, eps, iters, hard)[:bs]
            sub = 0.0
            for p in range(crops):
                if p != a:
                    sub = sub - torch.mean(torch.sum(q * F.log_softmax(scores[bs * p:bs * (p + 1)] / temperature,
                                                                       dim=1), dim=1))
            loss_h = loss_h + sub / (crops - 1)
        total = total + loss_h / len(cfa)
    return total / (len(outs) - 1)


def save(name, outs, label, fn):
    leaves = [torch.from_numpy(o).double().requires_grad_() for o in outs]
    loss = fn(leaves)
    loss.backward()
    w = lambda what, a: golden.save_array(os.path.join(OUT, f"{name}_{what}.npy"), a)
    for k, (o, leaf) in enumerate(zip(outs, leaves)):
        w(f"out{k}", o)
        w(f"dout{k}", leaf.grad.numpy())
    w("label", label.numpy().astype(np.int64))
    w("loss", np.array([loss.item()], dtype=np.float64))


def main():
    os.makedirs(OUT, exist_ok=True)
    g = torch.Generator().manual_seed(5)
    rnd = lambda *s: torch.randn(*s, generator=g).float().numpy()
    b, d = 4, 8
    out = rnd(2 * b, d)
    none = torch.zeros(2 * b, dtype=torch.int64)
    save("simclr", [out], none, lambda o: simclr(o[0], 0.1, b))
    save("multicrop3", [rnd(3 * b, d)], torch.zeros(3 * b, dtype=torch.int64),
         lambda o: multicrop_simclr(o[0], 0.1, b, 3))
    label = torch.tensor([0, 4, 2, -1, 1, 3])
    save("ce_multi", [rnd(6, 5), rnd(6, 7)], label, lambda o: ce_multi(o, label, True, 0.5, None))
    weight = torch.tensor([0.5, 1.0, 2.0, 1.5, 0.25], dtype=torch.float64)
    save("ce_weighted", [rnd(6, 5)], label, lambda o: ce_multi(o, label, False, 1.0, weight))
    save("cross_entropy", [rnd(6, 5) * 3], label, lambda o: ce_multi(o, label, False, 1.0, None))
    bl = torch.tensor([[1, 0, -1, 1], [0, 0, 1, -1], [1, -1, 0, 0], [-1, 1, 1, 0], [0, 1, 0, -1], [1, 1, -1, 0]])
    save("bce", [rnd(6, 4) * 2, rnd(6, 4)], bl, lambda o: bce_multi(o, bl))
    # SwAV: 3 crops of 4 images, an 8-wide embedding, prototype heads of 6 and 5, cosine-like
    # scores; crops_for_assign [0, 1]; T 0.1, ε 0.05, 3 iterations. Then with a queue of 8 rows
    # per assignment crop (its scores: queue{h}, A × L × K_h), and with hard assignments.
    sw = [rnd(12, 8), rnd(12, 6) * 0.4, rnd(12, 5) * 0.4]
    none12 = torch.zeros(12, dtype=torch.int64)
    save("swav", sw, none12, lambda o: swav(o, 0.1, 0.05, 3, 3, [0, 1]))
    queues = [torch.from_numpy(rnd(2, 8, k) * 0.4).double() for k in (6, 5)]
    for h, q in enumerate(queues):
        golden.save_array(os.path.join(OUT, f"swav_queue_queue{h}.npy"), q.float().numpy())
    save("swav_queue", sw, none12, lambda o: swav(o, 0.1, 0.05, 3, 3, [0, 1], queues))
    save("swav_hard", sw, none12, lambda o: swav(o, 0.1, 0.05, 3, 3, [1, 2], hard=True))


if __name__ == "__main__":
    main()
