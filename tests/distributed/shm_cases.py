"""Checks of the shared-memory transport, run inside every rank by ``workers.py shm``.

The group is created with 64 KiB staging buffers (``TORCHNEURON_DIST_SHM_MIB``) so that tensors of
a few hundred KiB already go through several chunks and both buffers. Every result is compared
with the same collective computed from all ranks' inputs on the CPU (each rank can rebuild them
from the seed), and with the other ranks' results (they must be bit-identical).
"""

from __future__ import annotations

import glob
import os

import torch
import torch.distributed as dist

DEV = torch.device("neuron")
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.int8]
SIZES = [0, 1, 13, 16_385, 100_003]  # up to ~6 chunks of a 64 KiB buffer


def _inputs(n: int, dtype: torch.dtype, w: int, seed: int) -> list[torch.Tensor]:
    out = []
    for k in range(w):
        g = torch.Generator().manual_seed(seed * 97 + k)
        if dtype.is_floating_point:
            out.append(torch.randn(n, generator=g).to(dtype))
        else:
            out.append(torch.randint(-40, 40, (n,), generator=g).to(dtype))  # 3 ranks stay inside int8
    return out


def _tol(dtype: torch.dtype, w: int) -> float:
    # float sums in the tensor's dtype round once per added rank: w ulps of the result
    return {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}.get(dtype, 1e-6) * w * 8 if dtype.is_floating_point else 0


def _same_everywhere(t: torch.Tensor, w: int) -> bool:
    got = [torch.empty_like(t) for _ in range(w)]
    dist.all_gather(got, t)
    return all(torch.equal(got[0].cpu(), g.cpu()) for g in got)


def run_shm(check) -> dict:
    r, w = dist.get_rank(), dist.get_world_size()
    be = dist.group.WORLD._get_backend(DEV)
    dist.barrier()  # rank 0 unlinks the name once every rank has answered
    result = {"uses_shared_memory": be.uses_shared_memory,
              "leftover_segments": glob.glob("/dev/shm/torchneuron-c10d-*")}

    reductions = [
        ("sum", dist.ReduceOp.SUM, lambda xs: torch.stack([x.double() for x in xs]).sum(0)),
        ("max", dist.ReduceOp.MAX, lambda xs: torch.stack([x.double() for x in xs]).max(0).values),
        ("min", dist.ReduceOp.MIN, lambda xs: torch.stack([x.double() for x in xs]).min(0).values),
        ("avg", dist.ReduceOp.AVG, None),
    ]
    for name, op, ref in reductions:
        @check(f"all_reduce_{name}")
        def _(op=op, ref=ref, name=name):
            for i, dtype in enumerate(DTYPES):
                for n in SIZES:
                    xs = _inputs(n, dtype, w, i)
                    t = xs[r].to(DEV)
                    dist.all_reduce(t, op=op)
                    if name == "avg":
                        s = torch.stack([x.double() for x in xs]).sum(0)
                        want = s / w if dtype.is_floating_point else torch.div(s, w, rounding_mode="floor")
                    else:
                        want = ref(xs) if n else torch.empty(0, dtype=torch.float64)
                    tol = _tol(dtype, w)
                    assert torch.allclose(t.cpu().double(), want, atol=tol * 4, rtol=tol), (dtype, n, name)
                    assert _same_everywhere(t, w), (dtype, n, name)

    @check("all_reduce_premul_sum_and_product")
    def _():
        t = torch.full((1000,), float(r + 1), device=DEV)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
        assert torch.equal(t.cpu(), torch.full((1000,), 0.5 * w * (w + 1) / 2))
        t = torch.full((9,), 2, dtype=torch.int32, device=DEV)
        dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
        assert torch.equal(t.cpu(), torch.full((9,), 2 ** w, dtype=torch.int32))
        t = torch.full((9,), 1 << r, dtype=torch.int64, device=DEV)
        dist.all_reduce(t, op=dist.ReduceOp.BOR)
        assert torch.equal(t.cpu(), torch.full((9,), (1 << w) - 1, dtype=torch.int64))

    @check("all_reduce_strided")
    def _():
        base = torch.arange(40_000, dtype=torch.float32).reshape(200, 200).to(DEV)
        view = base[:, ::3]  # non-contiguous: staged through a dense copy
        before = base.cpu()
        dist.all_reduce(view)
        want = before.clone()
        want[:, ::3] *= w
        assert torch.equal(base.cpu(), want)

    @check("broadcast")
    def _():
        for i, dtype in enumerate(DTYPES + [torch.bool, torch.float8_e4m3fn]):
            for n in SIZES:
                root = (i + n) % w
                xs = _inputs(n, torch.float32, w, i)
                t = (xs[r] > 0) if dtype == torch.bool else xs[r].to(dtype)
                want = (xs[root] > 0) if dtype == torch.bool else xs[root].to(dtype)
                t = t.to(DEV)
                dist.broadcast(t, src=root)
                assert torch.equal(t.cpu(), want), (dtype, n)

    @check("all_gather_into_tensor_and_list")
    def _():
        for i, dtype in enumerate(DTYPES):
            for n in SIZES:
                xs = _inputs(n, dtype, w, i)
                out = torch.empty(w * n, dtype=dtype, device=DEV)
                dist.all_gather_into_tensor(out, xs[r].to(DEV))
                assert torch.equal(out.cpu(), torch.cat(xs)), (dtype, n)
                outs = [torch.empty(n, dtype=dtype, device=DEV) for _ in range(w)]
                dist.all_gather(outs, xs[r].to(DEV))
                assert all(torch.equal(o.cpu(), x) for o, x in zip(outs, xs, strict=True))
        # in place: the input is this rank's slice of the output (FSDP2's layout)
        out = torch.zeros(w, 5000, device=DEV)
        out[r].fill_(r + 1)
        dist.all_gather_into_tensor(out.view(-1), out[r])
        assert torch.equal(out.cpu(), torch.arange(1, w + 1, dtype=torch.float32)[:, None].expand(w, 5000))

    @check("reduce_scatter_tensor")
    def _():
        for i, dtype in enumerate(DTYPES):
            for n in SIZES:
                xs = _inputs(w * n, dtype, w, i)
                out = torch.empty(n, dtype=dtype, device=DEV)
                dist.reduce_scatter_tensor(out, xs[r].to(DEV))
                want = torch.stack([x.double() for x in xs]).sum(0).view(w, n)[r]
                tol = _tol(dtype, w)
                assert torch.allclose(out.cpu().double(), want, atol=tol * 4, rtol=tol), (dtype, n)
        out = torch.empty(3, device=DEV)
        dist.reduce_scatter_tensor(out, torch.full((3 * w,), float(r + 1), device=DEV), op=dist.ReduceOp.AVG)
        assert torch.allclose(out.cpu(), torch.full((3,), (w + 1) / 2))

    @check("mismatch_on_segment_and_on_gloo")
    def _():
        for call, kind in [
            (lambda: dist.all_reduce(torch.ones(70_000 + r, device=DEV)), "all_reduce"),
            (lambda: dist.all_gather_into_tensor(torch.empty(w * (3 + r), device=DEV), torch.ones(3 + r, device=DEV)), "all_gather_into_tensor"),
            # served by gloo: the check still meets on the segment
            (lambda: dist.reduce(torch.ones(3 + r, device=DEV), dst=0), "reduce"),
            (lambda: dist.broadcast(torch.ones(3, device=DEV), src=0) if r else dist.barrier(), "broadcast"),
        ]:
            try:
                call()
            except RuntimeError as e:
                assert "ranks disagree on" in str(e), str(e)
                assert kind in str(e), str(e)
            else:
                raise AssertionError(f"{kind}: no error")
            t = torch.ones(4, device=DEV)
            dist.all_reduce(t)  # still in step
            assert torch.equal(t.cpu(), torch.full((4,), float(w)))

    @check("order_with_async_gloo_collectives")
    def _():
        # an async collective gloo carries, then one on the segment over the same tensor
        t = torch.full((50_000,), float(r + 1), device=DEV)
        outs = [torch.empty(50_000, device=DEV) for _ in range(w)]
        work = dist.gather(t, outs if r == 0 else None, dst=0, async_op=True)
        dist.all_reduce(t)
        work.wait()
        assert torch.equal(t.cpu(), torch.full((50_000,), float(w * (w + 1) / 2))), t.unique()
        if r == 0:
            assert all(torch.equal(o.cpu(), torch.full((50_000,), float(k + 1))) for k, o in enumerate(outs))

    @check("barrier_and_gloo_group")
    def _():
        dist.barrier()
        if r == 0:  # one rank without the transport: every rank agrees on gloo, none waits
            os.environ["TORCHNEURON_DIST_SHM"] = "0"
        try:
            g = dist.new_group(backend="neuron")
        finally:
            os.environ.pop("TORCHNEURON_DIST_SHM", None)
        assert not g._get_backend(DEV).uses_shared_memory
        t = torch.full((30_000,), float(r + 1), device=DEV)
        dist.all_reduce(t, group=g)
        assert torch.equal(t.cpu(), torch.full((30_000,), float(w * (w + 1) / 2)))
        dist.destroy_process_group(g)

    return result
