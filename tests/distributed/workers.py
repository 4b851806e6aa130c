"""Per-rank programs for the distributed tests: ``workers.py <scenario> <result.json> [args]``.

Each scenario runs many checks in one process group and writes ``{"checks": {name: "ok" |
error text}, ...}`` so that one launch (two Python start-ups) serves many tests.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

import torchneuron.distributed  # noqa: F401  registers the c10d backend "neuron"

DEV = torch.device("neuron")
RESULT: dict = {"checks": {}}


def check(name):
    def deco(fn):
        try:
            fn()
            RESULT["checks"][name] = "ok"
        except Exception:
            RESULT["checks"][name] = traceback.format_exc(limit=6)
        return fn

    return deco


def close(a, b, tol=1e-5):
    a = a.cpu() if isinstance(a, torch.Tensor) else torch.tensor(a)
    b = b.cpu() if isinstance(b, torch.Tensor) else torch.tensor(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert torch.allclose(a.double(), b.double(), atol=tol, rtol=tol), (a, b)


# ---- scenarios ---------------------------------------------------------------------------------
def scenario_collectives():
    dist.init_process_group("neuron")  # env:// from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
    r, w = dist.get_rank(), dist.get_world_size()
    RESULT["backend"] = str(dist.get_backend())
    RESULT["pg_backend_name"] = dist.group.WORLD._get_backend(DEV).name()
    RESULT["uses_shared_memory"] = dist.group.WORLD._get_backend(DEV).uses_shared_memory

    def contrib(shape=(3, 4), dtype=torch.float32):
        return (torch.arange(int(torch.tensor(shape).prod()), dtype=torch.float64).reshape(shape) + 10 * (r + 1)).to(dtype)

    for op_name, op, ref in [
        ("sum", dist.ReduceOp.SUM, lambda xs: sum(xs)),
        ("avg", dist.ReduceOp.AVG, lambda xs: sum(xs) / len(xs)),
        ("min", dist.ReduceOp.MIN, lambda xs: torch.stack(xs).min(0).values),
        ("max", dist.ReduceOp.MAX, lambda xs: torch.stack(xs).max(0).values),
        ("product", dist.ReduceOp.PRODUCT, lambda xs: torch.stack(xs).prod(0)),
    ]:
        @check(f"all_reduce_{op_name}")
        def _(op=op, ref=ref):
            t = contrib().to(DEV)
            ptr = t.data_ptr()
            dist.all_reduce(t, op=op)
            assert t.device.type == "neuron" and t.data_ptr() == ptr  # in place, on the device
            saved_r = r
            xs = []
            for k in range(w):
                xs.append(torch.arange(12, dtype=torch.float64).reshape(3, 4) + 10 * (k + 1))
            close(t, ref(xs).float(), tol=1e-4)
            assert saved_r == r

    @check("all_reduce_int64_and_bf16")
    def _():
        t = torch.full((5,), r + 1, dtype=torch.int64, device=DEV)
        dist.all_reduce(t)
        close(t, torch.full((5,), sum(range(1, w + 1)), dtype=torch.int64))
        b = torch.full((7,), float(r + 1), dtype=torch.bfloat16, device=DEV)
        dist.all_reduce(b)
        assert b.dtype == torch.bfloat16
        close(b.float(), torch.full((7,), float(sum(range(1, w + 1)))))

    @check("all_reduce_view")
    def _():
        base = torch.zeros(4, 6, device=DEV)
        v = base[1:3]  # contiguous view with an offset
        v.fill_(float(r + 1))
        dist.all_reduce(v)
        ref = torch.zeros(4, 6)
        ref[1:3] = float(sum(range(1, w + 1)))
        close(base, ref)

    @check("broadcast")
    def _():
        t = contrib().to(DEV) if r == 1 else torch.zeros(3, 4, device=DEV)
        dist.broadcast(t, src=1)
        close(t, torch.arange(12.0).reshape(3, 4) + 20)

    @check("all_gather_list")
    def _():
        outs = [torch.empty(3, 4, device=DEV) for _ in range(w)]
        dist.all_gather(outs, contrib().to(DEV))
        for k in range(w):
            close(outs[k], torch.arange(12.0).reshape(3, 4) + 10 * (k + 1))

    @check("all_gather_into_tensor")
    def _():
        out = torch.empty(w * 3, 4, device=DEV)
        dist.all_gather_into_tensor(out, contrib().to(DEV))
        close(out, torch.cat([torch.arange(12.0).reshape(3, 4) + 10 * (k + 1) for k in range(w)]))

    @check("reduce_scatter_tensor")
    def _():
        inp = torch.arange(w * 6, dtype=torch.float32, device=DEV) * (r + 1)
        out = torch.empty(6, device=DEV)
        dist.reduce_scatter_tensor(out, inp)
        s = sum(range(1, w + 1))
        close(out, torch.arange(r * 6, r * 6 + 6, dtype=torch.float32) * s)

    @check("reduce_scatter_tensor_avg")
    def _():
        inp = torch.arange(w * 6, dtype=torch.float32, device=DEV) * (r + 1)
        out = torch.empty(6, device=DEV)
        dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.AVG)
        s = sum(range(1, w + 1)) / w
        close(out, torch.arange(r * 6, r * 6 + 6, dtype=torch.float32) * s)

    @check("reduce_scatter_list")
    def _():
        ins = [torch.full((4,), float((r + 1) * (k + 1)), device=DEV) for k in range(w)]
        out = torch.empty(4, device=DEV)
        dist.reduce_scatter(out, ins)
        close(out, torch.full((4,), float(sum(range(1, w + 1)) * (r + 1))))

    @check("reduce")
    def _():
        t = contrib().to(DEV)
        dist.reduce(t, dst=0)
        if r == 0:
            close(t, sum(torch.arange(12.0).reshape(3, 4) + 10 * (k + 1) for k in range(w)))

    @check("all_to_all_single_even")
    def _():
        inp = torch.arange(w * 2, dtype=torch.float32, device=DEV) + 100 * r
        out = torch.empty(w * 2, device=DEV)
        dist.all_to_all_single(out, inp)
        ref = torch.cat([torch.arange(r * 2, r * 2 + 2, dtype=torch.float32) + 100 * k for k in range(w)])
        close(out, ref)

    @check("all_to_all_single_uneven")
    def _():
        # rank r sends (k + 1) elements to rank k, filled with 10*r + k
        in_splits = [k + 1 for k in range(w)]
        inp = torch.cat([torch.full((k + 1,), float(10 * r + k)) for k in range(w)]).to(DEV)
        out_splits = [r + 1] * w
        out = torch.empty(sum(out_splits), device=DEV)
        dist.all_to_all_single(out, inp, out_splits, in_splits)
        ref = torch.cat([torch.full((r + 1,), float(10 * k + r)) for k in range(w)])
        close(out, ref)

    @check("all_to_all_list")
    def _():
        ins = [torch.full((2,), float(10 * r + k), device=DEV) for k in range(w)]
        outs = [torch.empty(2, device=DEV) for _ in range(w)]
        dist.all_to_all(outs, ins)
        for k in range(w):
            close(outs[k], torch.full((2,), float(10 * k + r)))

    @check("gather")
    def _():
        t = contrib().to(DEV)
        outs = [torch.empty(3, 4, device=DEV) for _ in range(w)] if r == 0 else None
        dist.gather(t, outs, dst=0)
        if r == 0:
            for k in range(w):
                close(outs[k], torch.arange(12.0).reshape(3, 4) + 10 * (k + 1))

    @check("scatter")
    def _():
        ins = [torch.full((3,), float(k + 7), device=DEV) for k in range(w)] if r == 1 else None
        out = torch.empty(3, device=DEV)
        dist.scatter(out, ins, src=1)
        close(out, torch.full((3,), float(r + 7)))

    @check("send_recv")
    def _():
        if r == 0:
            dist.send(torch.arange(5.0, device=DEV) * 3, dst=1)
            t = torch.empty(2, dtype=torch.int32, device=DEV)
            dist.recv(t, src=1)
            close(t, torch.tensor([4, 2], dtype=torch.int32))
        elif r == 1:
            t = torch.empty(5, device=DEV)
            dist.recv(t, src=0)
            close(t, torch.arange(5.0) * 3)
            dist.send(torch.tensor([4, 2], dtype=torch.int32, device=DEV), dst=0)

    @check("isend_irecv")
    def _():
        peer = (r + 1) % w
        src = (r - 1) % w
        out = torch.empty(4, device=DEV)
        reqs = [dist.isend(torch.full((4,), float(r), device=DEV), dst=peer),
                dist.irecv(out, src=src)]
        for q in reqs:
            q.wait()
        close(out, torch.full((4,), float(src)))

    @check("batch_isend_irecv")
    def _():
        peer = (r + 1) % w
        src = (r - 1) % w
        out = torch.empty(3, device=DEV)
        ops = [dist.P2POp(dist.isend, torch.full((3,), float(r + 1), device=DEV), peer),
               dist.P2POp(dist.irecv, out, src)]
        for q in dist.batch_isend_irecv(ops):
            q.wait()
        close(out, torch.full((3,), float(src + 1)))

    @check("barrier")
    def _():
        dist.barrier()
        dist.barrier(device_ids=None)

    @check("monitored_barrier")
    def _():
        dist.monitored_barrier(timeout=timedelta(seconds=30))

    @check("async_work")
    def _():
        t = torch.full((1000,), float(r + 1), device=DEV)
        work = dist.all_reduce(t, async_op=True)
        assert work.wait()
        # NOTE: work.is_completed() stays False for Work returned by a Python backend (c10d
        # does not forward isCompleted to Python); wait() and get_future() are what count.
        val = work.get_future().value()
        assert isinstance(val, list) and val[0].device.type == "neuron", val
        close(t, torch.full((1000,), float(sum(range(1, w + 1)))))
        # a chain of async ops then wait
        ts = [torch.full((10,), float(i), device=DEV) for i in range(4)]
        works = [dist.all_reduce(x, async_op=True) for x in ts]
        for wk in works:
            wk.wait()
        for i, x in enumerate(ts):
            close(x, torch.full((10,), float(i * w)))
        wg = dist.all_gather_into_tensor(torch.empty(w * 2, device=DEV), torch.ones(2, device=DEV), async_op=True)
        wg.wait()

    @check("cpu_tensors_same_group")
    def _():
        t = torch.full((3,), float(r + 1))
        dist.all_reduce(t)
        close(t, torch.full((3,), float(sum(range(1, w + 1)))))

    @check("object_collectives")
    def _():
        objs = [None] * w
        dist.all_gather_object(objs, {"rank": r})
        assert objs == [{"rank": k} for k in range(w)], objs
        lst = [{"x": 5}] if r == 0 else [None]
        dist.broadcast_object_list(lst, src=0)
        assert lst == [{"x": 5}]

    @check("no_copy")
    def _():
        from torchneuron import transfer_stats
        from torchneuron.runtime.storage import host

        t = torch.ones(1 << 16, device=DEV)
        h = host(t)
        before = transfer_stats()
        dist.all_reduce(t)
        after = transfer_stats()
        assert h.data_ptr() == t.data_ptr()
        assert before == after, (before, after)
        assert float(h[0]) == float(w)

    @check("pending_device_error_surfaces")
    def _():
        from torchneuron import NeuronRuntimeError

        wt = torch.randn(10, 4, device=DEV)
        idx = torch.tensor([1, 11], device=DEV)
        torch.nn.functional.embedding(idx, wt)  # deferred device error (index out of range)
        t = torch.ones(3, device=DEV)
        try:
            dist.all_reduce(t)
        except NeuronRuntimeError as e:
            assert "embedding" in str(e)
        else:
            raise AssertionError("the pending device error did not surface")
        dist.all_reduce(t)  # the group still works
        close(t, torch.full((3,), float(w)))

    @check("mismatched_shape_error")
    def _():
        t = torch.ones(4 + r, device=DEV)
        try:
            dist.all_reduce(t)
        except RuntimeError as e:
            msg = str(e)
            assert "ranks disagree on all_reduce" in msg and "float32[4]" in msg and "float32[5]" in msg, msg
        else:
            raise AssertionError("no error")

    @check("mismatched_dtype_error")
    def _():
        t = torch.ones(4, dtype=torch.float32 if r == 0 else torch.int32, device=DEV)
        try:
            dist.broadcast(t, src=0)
        except RuntimeError as e:
            msg = str(e)
            assert "ranks disagree on broadcast" in msg and "int32" in msg, msg
        else:
            raise AssertionError("no error")

    @check("mismatched_collective_error")
    def _():
        t = torch.ones(4, device=DEV)
        try:
            if r == 0:
                dist.all_reduce(t)
            else:
                dist.broadcast(t, src=0)
        except RuntimeError as e:
            assert "ranks disagree" in str(e), str(e)
        else:
            raise AssertionError("no error")
        dist.all_reduce(t)  # still in step afterwards
        close(t, torch.full((4,), float(w)))

    @check("new_group")
    def _():
        g = dist.new_group(ranks=list(range(w)))
        t = torch.full((2,), float(r), device=DEV)
        dist.all_reduce(t, group=g)
        close(t, torch.full((2,), float(sum(range(w)))))
        assert g._get_backend(DEV).name() == "neuron"
        dist.destroy_process_group(g)

    @check("functional_collectives")
    def _():
        import torch.distributed._functional_collectives as funcol

        t = torch.full((4,), float(r + 1), device=DEV)
        out = funcol.all_reduce(t, "sum", dist.group.WORLD)
        out = funcol.wait_tensor(out)
        assert out.device.type == "neuron"
        close(out, torch.full((4,), float(sum(range(1, w + 1)))))
        g = funcol.wait_tensor(funcol.all_gather_tensor(t, 0, dist.group.WORLD))
        close(g, torch.cat([torch.full((4,), float(k + 1)) for k in range(w)]))
        rs = funcol.wait_tensor(funcol.reduce_scatter_tensor(torch.ones(w * 2, device=DEV), "sum", 0, dist.group.WORLD))
        close(rs, torch.full((2,), float(w)))

    @check("timeout_honoured")
    def _():
        # only rank 0 takes part: it must fail within the group timeout, not hang
        g = dist.new_group(ranks=list(range(w)), timeout=timedelta(seconds=3))
        if r == 0:
            os.environ["TORCHNEURON_DIST_CHECK"] = "0"  # the collective itself must time out
            t0 = time.monotonic()
            try:
                dist.all_reduce(torch.ones(2, device=DEV), group=g)
            except RuntimeError as e:
                took = time.monotonic() - t0
                assert took < 20, took
                RESULT["timeout_message"] = str(e)[:300]
                RESULT["timeout_seconds"] = took
            else:
                raise AssertionError("no timeout")
            finally:
                os.environ.pop("TORCHNEURON_DIST_CHECK")
        else:
            time.sleep(5)

    dist.barrier()
    dist.destroy_process_group()


def scenario_default_backend():
    # init_process_group() with no backend: the default device map picks "neuron" for neuron
    dist.init_process_group()
    r, w = dist.get_rank(), dist.get_world_size()
    RESULT["backend"] = str(dist.get_backend())
    RESULT["default_map_neuron"] = dist.Backend.default_device_backend_map.get("neuron")

    @check("all_reduce")
    def _():
        t = torch.full((3,), float(r + 1), device=DEV)
        dist.all_reduce(t)
        close(t, torch.full((3,), float(sum(range(1, w + 1)))))
        assert dist.group.WORLD._get_backend(DEV).name() == "neuron"

    @check("barrier")
    def _():
        dist.barrier()

    dist.destroy_process_group()


def scenario_mixed():
    dist.init_process_group("cpu:gloo,neuron:neuron")
    r, _w = dist.get_rank(), dist.get_world_size()

    @check("neuron_and_cpu")
    def _():
        t = torch.full((3,), float(r + 1), device=DEV)
        c = torch.full((3,), float(r + 1))
        dist.all_reduce(t)
        dist.all_reduce(c)
        close(t, c)
        assert dist.group.WORLD._get_backend(DEV).name() == "neuron"
        assert dist.group.WORLD._get_backend(torch.device("cpu")).name() == "gloo"
        dist.barrier()

    dist.destroy_process_group()


def scenario_dead_rank():
    dist.init_process_group("neuron", timeout=timedelta(seconds=5))
    r = dist.get_rank()
    t = torch.ones(3, device=DEV)
    dist.all_reduce(t)
    if r == 1:
        RESULT["checks"]["exit"] = "ok"
        _write()
        os._exit(0)  # dies without cleaning up
    t0 = time.monotonic()
    try:
        for _ in range(3):
            dist.all_reduce(t)
        RESULT["checks"]["raised"] = "no error"
    except Exception as e:  # noqa: BLE001
        RESULT["checks"]["raised"] = "ok"
        RESULT["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    RESULT["seconds"] = time.monotonic() - t0
    _write()
    os._exit(0)


def scenario_ddp():
    from ddp_cases import run_ddp

    dist.init_process_group("neuron")
    RESULT.update(run_ddp(check))
    dist.destroy_process_group()


def scenario_shm():
    from shm_cases import run_shm

    os.environ["TORCHNEURON_DIST_SHM_MIB"] = "0.0625"  # 64 KiB buffers: many chunks
    dist.init_process_group("neuron")
    RESULT.update(run_shm(check))
    dist.destroy_process_group()


def scenario_parallel():
    from parallel_cases import run_parallel

    dist.init_process_group("neuron")
    t0 = time.monotonic()
    RESULT.update(run_parallel(check, sys.argv[3], heavy=dist.get_world_size() == 4))
    RESULT["seconds"] = time.monotonic() - t0
    dist.destroy_process_group()


def _write():
    with open(OUT, "w") as f:
        json.dump(RESULT, f)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    SCENARIO, OUT = sys.argv[1], sys.argv[2]
    try:
        globals()[f"scenario_{SCENARIO}"]()
    except Exception:
        RESULT["fatal"] = traceback.format_exc()
    _write()
