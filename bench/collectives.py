"""Collective bandwidth: the ``neuron`` backend on device tensors vs gloo on CPU tensors.

    python bench/collectives.py [--ranks 2 4] [--sizes-mib 1 4 16 64 256] [--iters 5]
                                [--ops all_reduce all_gather reduce_scatter]

For every size four variants run interleaved (the order rotates every iteration) so that the
load of a shared machine hits all of them alike: gloo on CPU tensors (the peer); ``neuron`` as
users get it (same-host ranks meet in shared memory, cross-rank signature check on);
``neuron-nocheck`` (the same with ``TORCHNEURON_DIST_CHECK=0``); ``neuron-gloo`` (a group made
with ``TORCHNEURON_DIST_SHM=0``: gloo's TCP transport on the device tensors' host aliases, check
on); each op is preceded by a barrier and the median time is reported. Bus bandwidth follows
nccl-tests: algbw * 2 (n - 1) / n for all_reduce, algbw * (n - 1) / n for all_gather and
reduce_scatter (algbw = bytes of the full tensor / time).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

VARIANTS = ("gloo/cpu", "neuron", "neuron-nocheck", "neuron-gloo")


def _busbw(op: str, nbytes: int, seconds: float, world: int) -> float:
    factor = 2 * (world - 1) / world if op == "all_reduce" else (world - 1) / world
    return nbytes / seconds * factor / 1e9


def _make(op: str, n: int, world: int, dev: str, group=None):
    if op == "all_reduce":
        t = torch.ones(n, device=dev)
        return lambda: dist.all_reduce(t, group=group)
    if op == "all_gather":  # n elements in the gathered tensor
        out, inp = torch.empty(n, device=dev), torch.ones(n // world, device=dev)
        return lambda: dist.all_gather_into_tensor(out, inp, group=group)
    if op == "reduce_scatter":  # n elements in the input
        out, inp = torch.empty(n // world, device=dev), torch.ones(n, device=dev)
        return lambda: dist.reduce_scatter_tensor(out, inp, group=group)
    raise ValueError(op)


def _worker(rank, world, port, ops, sizes, iters, q):
    import torchneuron.distributed  # noqa: F401

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("cpu:gloo,neuron:neuron", rank=rank, world_size=world)
    os.environ["TORCHNEURON_DIST_SHM"] = "0"
    tcp = dist.new_group(backend="neuron")
    os.environ.pop("TORCHNEURON_DIST_SHM")
    assert dist.group.WORLD._get_backend(torch.device("neuron")).uses_shared_memory
    groups = {"gloo/cpu": None, "neuron": None, "neuron-nocheck": None, "neuron-gloo": tcp}
    rows = []
    for op in ops:
        for mib in sizes:
            nbytes = mib * (1 << 20)
            n = nbytes // 4
            runs = {v: _make(op, n, world, "cpu" if v == "gloo/cpu" else "neuron", groups[v]) for v in VARIANTS}
            times: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for i in range(iters + 1):  # the first round warms up
                k = i % len(VARIANTS)
                order = VARIANTS[k:] + VARIANTS[:k]
                for v in order:
                    os.environ["TORCHNEURON_DIST_CHECK"] = "0" if v == "neuron-nocheck" else "1"
                    dist.barrier()
                    t0 = time.perf_counter()
                    runs[v]()
                    dt = time.perf_counter() - t0
                    if i:
                        times[v].append(dt)
            del runs
            for v in VARIANTS:
                dt = statistics.median(times[v])
                rows.append((op, world, mib, v, dt * 1e3, _busbw(op, nbytes, dt, world)))
    if rank == 0:
        q.put(rows)
    dist.destroy_process_group()


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--sizes-mib", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--ops", nargs="+", default=["all_reduce"],
                   choices=["all_reduce", "all_gather", "reduce_scatter"])
    a = p.parse_args(argv)
    ctx = mp.get_context("spawn")
    print(f"{'op':>14} {'ranks':>5} {'MiB':>5} {'backend':>15} {'ms':>9} {'busbw GB/s':>11} {'vs gloo':>8}")
    for world in a.ranks:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        q = ctx.Queue()
        mp.spawn(_worker, args=(world, port, a.ops, a.sizes_mib, a.iters, q), nprocs=world, join=True)
        rows = q.get()
        gloo = {(r[0], r[2]): r[5] for r in rows if r[3] == "gloo/cpu"}
        for op, w, mib, label, ms, bus in rows:
            ratio = bus / gloo[(op, mib)]
            print(f"{op:>14} {w:>5} {mib:>5} {label:>15} {ms:>9.2f} {bus:>11.3f} {ratio:>8.2f}x")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
