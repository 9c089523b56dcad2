#!/usr/bin/python3
"""gloo_bench.py — the reference for the network world's all-reduce: torch.distributed's gloo
(VISSL's CPU backend across nodes) among W processes meeting over tcp on the loopback.

usage: gloo_bench.py WORLD COUNT REPS PORT
Each rank all-reduces (sum) COUNT fp32 values, REPS timed calls after one warm-up, rank 0
timing each between two barriers, as bench/coll_bench.c does; the sum is checked (small
integers, exact). Prints "gloo_bench all_reduce WORLD COUNT MEDIAN_S".
"""
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, world, count, reps, port, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    times = []
    for k in range(-1, reps):
        buf = torch.full((count,), float(rank + 1))
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        if k >= 0:
            times.append(time.perf_counter() - t0)
    want = world * (world + 1) / 2
    if not bool((buf[::4099] == want).all()):
        raise SystemExit(f"gloo_bench: rank {rank}: a wrong sum")
    if rank == 0:
        out.put(times)
    dist.destroy_process_group()


def main():
    world, count, reps, port = (int(a) for a in sys.argv[1:5])
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, world, count, reps, port, out)) for r in range(world)]
    for p in procs:
        p.start()
    times = out.get()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit("gloo_bench: a rank failed")
    print(f"gloo_bench all_reduce {world} {count} {statistics.median(times):.6f}")


if __name__ == "__main__":
    main()
