"""all_reduce bus bandwidth: the ``neuron`` backend on device tensors vs gloo on CPU tensors.

    python bench/collectives.py [--ranks 2 4] [--sizes-mib 1 4 16 64 256] [--iters N]

Bus bandwidth follows nccl-tests: algbw * 2 (n - 1) / n.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(rank, world, port, sizes, iters, q):
    import torchneuron.distributed  # noqa: F401

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("cpu:gloo,neuron:neuron", rank=rank, world_size=world)
    rows = []
    for mib in sizes:
        n = mib * (1 << 20) // 4
        for label, dev in (("gloo/cpu", "cpu"), ("neuron", "neuron")):
            t = torch.ones(n, device=dev)
            dist.all_reduce(t)  # warm-up
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t)
            dt = (time.perf_counter() - t0) / iters
            bus = (mib * (1 << 20) / dt) * 2 * (world - 1) / world / 1e9
            rows.append((world, mib, label, dt * 1e3, bus))
    if rank == 0:
        q.put(rows)
    dist.destroy_process_group()


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--sizes-mib", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    p.add_argument("--iters", type=int, default=5)
    a = p.parse_args(argv)
    ctx = mp.get_context("spawn")
    print(f"{'ranks':>5} {'MiB':>5} {'backend':>9} {'ms':>9} {'busbw GB/s':>11} {'vs gloo':>8}")
    for world in a.ranks:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        q = ctx.Queue()
        mp.spawn(_worker, args=(world, port, a.sizes_mib, a.iters, q), nprocs=world, join=True)
        rows = q.get()
        gloo = {(r[0], r[1]): r[4] for r in rows if r[2] == "gloo/cpu"}
        for w, mib, label, ms, bus in rows:
            ratio = bus / gloo[(w, mib)]
            print(f"{w:>5} {mib:>5} {label:>9} {ms:>9.2f} {bus:>11.3f} {ratio:>8.2f}x")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
