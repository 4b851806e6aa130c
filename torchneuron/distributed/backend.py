"""The ``neuron`` c10d backend: gloo's transport over host aliases of device tensors.

A ``neuron`` tensor's bytes live in host memory (the simulated chip shares the host's address
space), so :func:`torchneuron.runtime.storage.host` gives a CPU tensor over the very same bytes.
Every collective hands gloo those aliases: gloo reads the inputs from, and writes the results
into, device memory directly; no byte is copied between the device and the host.

Ranks on one host move the bytes of the common collectives (all_reduce, broadcast, all_gather,
reduce_scatter on contiguous tensors, barrier) through a shared memory segment instead
(:mod:`torchneuron.distributed.shm`): no kernel round trip, several times gloo's speed on small
tensors. Everything else, and every group that spans hosts, uses gloo.

Before each collective the backend

* raises any pending device error (``torch.neuron.synchronize()``), so a failed kernel is not
  silently shipped to the other ranks;
* unless ``TORCHNEURON_DIST_CHECK=0``, compares a small signature (collective, dtype, shape)
  across the ranks and raises a clear ``RuntimeError`` on every rank when they disagree (gloo
  itself would hang, crash or silently reinterpret bytes). With the shared segment the
  signatures ride on the collective's first barrier; without it they take one gloo all-gather.

Reductions gloo lacks are built on the ones it has: ``AVG`` is ``SUM`` then a division,
``PREMUL_SUM`` a scaling then ``SUM``.
"""

from __future__ import annotations

import os
import time
import warnings
import zlib
from datetime import timedelta

import torch
import torch._C._distributed_c10d as c10d
import torch.distributed as dist

from ..runtime import activity, storage
from ..runtime.queue import QUEUE
from . import shm as _shm

ReduceOp = c10d.ReduceOp
_RED = ReduceOp.RedOpType

_DTYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
    torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128,
    torch.float8_e4m3fn, torch.float8_e5m2, torch.uint16, torch.uint32, torch.uint64,
]
_DTYPE_CODE = {d: i + 1 for i, d in enumerate(_DTYPES)}
_KINDS = [
    "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "reduce", "all_to_all_single", "all_to_all", "gather", "scatter",
    "all_reduce_coalesced", "all_gather_coalesced", "barrier",
]
_KIND_CODE = {k: i + 1 for i, k in enumerate(_KINDS)}
_SIG_LEN = 12  # kind, dtype, ntensors, ndim, numel, 6 leading dims, hash of all shapes


def _check_enabled() -> bool:
    return os.environ.get("TORCHNEURON_DIST_CHECK", "1") not in ("0", "false", "False", "")


def _red_kind(op):
    return op.op if hasattr(op, "op") else op


# in-place ``acc <- acc (op) other`` for the reductions the shared segment serves
_REDUCERS = {
    _RED.SUM: lambda a, b: a.add_(b),
    _RED.PRODUCT: lambda a, b: a.mul_(b),
    _RED.MIN: lambda a, b: torch.minimum(a, b, out=a),
    _RED.MAX: lambda a, b: torch.maximum(a, b, out=a),
    _RED.BAND: lambda a, b: a.bitwise_and_(b),
    _RED.BOR: lambda a, b: a.bitwise_or_(b),
    _RED.BXOR: lambda a, b: a.bitwise_xor_(b),
}
_BITWISE = (_RED.BAND, _RED.BOR, _RED.BXOR)


def _raise_if_disagree(kind: str, sigs: list[list[int]] | None) -> None:
    if sigs and _shm.disagree(sigs):
        lines = "; ".join(f"rank {r}: {_describe(s)}" for r, s in enumerate(sigs) if s[0] != 0)
        raise RuntimeError(
            f"neuron backend: ranks disagree on {kind} (every rank must call the same "
            f"collective with the same dtype and shape): {lines}"
        )


def _h(t: torch.Tensor) -> torch.Tensor:
    """The tensor gloo works on: the host alias of a neuron tensor, a CPU tensor as is."""
    if t.device.type == "neuron":
        return storage.host(t)
    return t


def _hl(ts) -> list[torch.Tensor]:
    return [_h(t) for t in ts]


def _hll(tss) -> list[list[torch.Tensor]]:
    return [[_h(t) for t in ts] for ts in tss]


def _sync_device() -> None:
    # the simulated queue executes at launch; synchronising raises deferred device errors
    QUEUE.synchronize()


def _dtype_name(code: int) -> str:
    return str(_DTYPES[code - 1]).replace("torch.", "") if 0 < code <= len(_DTYPES) else "?"


def _describe(sig: list[int]) -> str:
    kind = _KINDS[sig[0] - 1] if 0 < sig[0] <= len(_KINDS) else "?"
    ndim = sig[3]
    dims = sig[5 : 5 + min(ndim, 6)]
    shape = "[" + ", ".join(str(d) for d in dims) + (", ..." if ndim > 6 else "") + "]"
    more = f" (+{sig[2] - 1} more tensors)" if sig[2] > 1 else ""
    return f"{kind} {_dtype_name(sig[1])}{shape}{more}"


class NeuronWork(c10d.Work):
    """An asynchronous collective: wraps gloo's work; its future yields the device tensors."""

    def __init__(self, fut: torch.futures.Future, gloo_work=None):
        super().__init__()
        self._fut = fut
        self._gloo_work = gloo_work

    def wait(self, timeout: timedelta | None = None) -> bool:
        if self._gloo_work is not None:
            # gloo's wait honours the group timeout (and a per-call one when given)
            if timeout is not None and timeout != timedelta(0) and timeout.total_seconds() > 0:
                self._gloo_work.wait(timeout)
            else:
                self._gloo_work.wait()
        self._fut.wait()
        return True

    def is_completed(self) -> bool:
        return self._fut.done()

    def is_success(self) -> bool:
        return self._fut.done() and not self._failed()

    def _failed(self) -> bool:
        try:
            self._fut.value()
        except Exception:  # noqa: BLE001
            return True
        return False

    def exception(self):
        try:
            self._fut.value()
        except Exception as e:  # noqa: BLE001
            return e
        return None

    def result(self):
        return self._fut.value()

    def get_future(self) -> torch.futures.Future:
        return self._fut

    def synchronize(self) -> None:
        self.wait()


class _Work:
    @staticmethod
    def wrap(gloo_work, results: list[torch.Tensor], after=None):
        try:
            fut = gloo_work.get_future()
        except RuntimeError:  # some gloo works have no future (e.g. reduce_scatter lists)
            gloo_work.wait()
            if after is not None:
                after()
            return _done(results)

        def done(f):
            f.value()  # re-raises a communication error
            if after is not None:
                after()
            return results

        return NeuronWork(fut.then(done), gloo_work)


class NeuronBackend(c10d.Backend):
    """c10d backend for ``neuron`` tensors (and CPU tensors) delegating to ``ProcessGroupGloo``."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta, group_name: str = "",
                 global_ranks=None):
        super().__init__(rank, size)
        self._rank = rank
        self._size = size
        self._timeout = timeout
        self._gloo = c10d.ProcessGroupGloo(store, rank, size, timeout)
        if global_ranks is not None:
            self._gloo.options.global_ranks_in_group = list(global_ranks)
        if group_name:
            self._gloo.options.group_name = group_name
        # same-host ranks: a shared segment for the common collectives (None: gloo for all)
        self._shm = _shm.open_channel(store, rank, size, timeout)
        self._pending: list = []  # gloo collectives in flight (the segment waits for them)

    # ---- identity -----------------------------------------------------------------------
    def getBackendName(self) -> str:  # noqa: N802 (c10d trampoline name)
        return "neuron"

    @property
    def gloo(self):
        return self._gloo

    # ---- checks -------------------------------------------------------------------------
    @property
    def uses_shared_memory(self) -> bool:
        """Whether this group moves its common collectives through a shared memory segment."""
        return self._shm is not None

    def _signature(self, kind: str, tensors, *, shape_of=None) -> list[int]:
        ts = [t for t in tensors]
        sig = [0] * _SIG_LEN
        sig[0] = _KIND_CODE[kind]
        if ts:
            t0 = ts[0]
            shape = list(shape_of if shape_of is not None else t0.shape)
            sig[1] = _DTYPE_CODE.get(t0.dtype, 99)
            sig[2] = len(ts)
            sig[3] = len(shape)
            sig[4] = t0.numel()
            for i, d in enumerate(shape[:6]):
                sig[5 + i] = d
            desc = repr([(str(t.dtype), tuple(t.shape)) for t in ts]).encode()
            sig[11] = zlib.crc32(desc)
        return sig

    def _prologue(self, kind: str, tensors, *, shape_of=None) -> list[int] | None:
        """Raise pending device errors, record the collective; its signature unless unchecked."""
        _sync_device()
        if activity.RECORDER is not None:
            # collectives are asynchronous: recorded at issue, priced by the cost model
            now = time.perf_counter_ns()
            hosts = [storage.host(t) for t in tensors if isinstance(t, torch.Tensor) and t.device.type == "neuron"]
            activity.RECORDER.record("collective", f"c10d::{kind}", tuple(hosts), None, now, now)
        if self._size == 1 or not _check_enabled():
            return None
        return self._signature(kind, tensors, shape_of=shape_of)

    def _check(self, kind: str, tensors, *, shape_of=None) -> None:
        """Prologue of a collective gloo carries: the signature check on its own."""
        sig = self._prologue(kind, tensors, shape_of=shape_of)
        if sig is None:
            return
        if self._shm is not None:
            sigs = self._shm.sync(kind, sig)
        else:
            mine = torch.tensor(sig, dtype=torch.int64)
            every = [torch.empty_like(mine) for _ in range(self._size)]
            self._gloo.allgather([every], [mine]).wait()
            sigs = [s.tolist() for s in every]
        _raise_if_disagree(kind, sigs)

    # ---- the shared segment ---------------------------------------------------------------
    def _track(self, work):
        """Remember a gloo collective in flight: the segment's collectives wait for it first."""
        if self._shm is not None:
            self._pending = [w for w in self._pending if not w.is_completed()]
            self._pending.append(work)
        return work

    def _drain(self) -> None:
        pending, self._pending = self._pending, []
        for w in pending:
            try:
                w.wait()
            except Exception:  # noqa: BLE001  (its own wait reports it)
                pass

    def _on_shm(self, *tensors: torch.Tensor, reduce=None, strided: bool = False) -> bool:
        """Whether the segment serves a collective on ``tensors`` (with reduction ``reduce``;
        ``strided``: the caller stages non-contiguous tensors itself)."""
        if self._shm is None:
            return False
        for t in tensors:
            if not strided and not t.is_contiguous():
                return False
            if reduce is not None and t.dtype not in _shm.REDUCE_DTYPES:
                return False
        if reduce is not None:
            kind = _red_kind(reduce)
            if kind not in _REDUCERS or (kind in _BITWISE and tensors[0].is_floating_point()):
                return False
        return True

    def _shm_call(self, kind: str, tensors, timeout, fn, *args) -> None:
        """Run a collective through the segment: ``fn(*args, kind, signature, timeout)``."""
        sig = self._prologue(kind, tensors)
        self._drain()
        sigs = self._shm.guarded(fn, *args, kind, sig, timeout)
        _raise_if_disagree(kind, sigs)

    def _gather_geometry(self, output, input) -> None:
        _same_dtype(output, input, "all_gather_into_tensor")
        if output.numel() != input.numel() * self._size:
            raise RuntimeError(
                f"neuron backend: all_gather_into_tensor output has {output.numel()} elements, "
                f"expected {self._size} x {input.numel()}"
            )

    def _scatter_geometry(self, output, input) -> None:
        _same_dtype(output, input, "reduce_scatter_tensor")
        if input.numel() != output.numel() * self._size:
            raise RuntimeError(
                f"neuron backend: reduce_scatter_tensor input has {input.numel()} elements, "
                f"expected {self._size} x {output.numel()}"
            )

    def _wrap(self, gloo_work, results, after=None):
        return _Work.wrap(self._track(gloo_work), results, after)

    # ---- reductions gloo lacks ------------------------------------------------------------
    def _reduce_plan(self, op):
        """(gloo reduce op, scale-before factor or None, divide-after?)"""
        kind = op.op if isinstance(op, ReduceOp) else op
        if kind == _RED.AVG:
            return ReduceOp.SUM, None, True
        if kind == _RED.PREMUL_SUM:
            return ReduceOp.SUM, _premul_factor(op), False
        return op, None, False

    # ---- collectives ----------------------------------------------------------------------
    def allreduce(self, tensors, opts):
        red, factor, avg = self._reduce_plan(opts.reduceOp)
        if len(tensors) == 1 and self._on_shm(tensors[0], reduce=red, strided=True):
            h = _h(tensors[0])
            dense = h.contiguous()
            self._shm_call("all_reduce", tensors, opts.timeout, self._shm.all_reduce, dense,
                           _REDUCERS[_red_kind(red)], factor)
            if avg:
                _divider([dense], self._size)()
            if dense is not h:
                h.copy_(dense)
            return _done(list(tensors))
        self._check("all_reduce", tensors)
        hosts = _hl(tensors)
        dense = [h.contiguous() for h in hosts]  # gloo reads a strided tensor as if it were dense
        if factor is not None:
            for h in dense:
                h.mul_(factor)
        o = c10d.AllreduceOptions()
        o.reduceOp = red
        o.timeout = opts.timeout
        work = self._gloo.allreduce(dense, o)
        return self._wrap(work, list(tensors), _finisher(hosts, dense, self._size if avg else None))

    def allreduce_coalesced(self, tensors, opts):
        self._check("all_reduce_coalesced", tensors)
        red, factor, avg = self._reduce_plan(opts.reduceOp)
        hosts = _hl(tensors)
        if factor is not None:
            for h in hosts:
                h.mul_(factor)
        o = c10d.AllreduceCoalescedOptions()
        o.reduceOp = red
        o.timeout = opts.timeout
        work = self._gloo.allreduce_coalesced(hosts, o)
        after = _divider(hosts, self._size) if avg else None
        return self._wrap(work, list(tensors), after)

    def broadcast(self, tensors, opts):
        if len(tensors) == 1 and self._on_shm(tensors[0], strided=True):
            h = _h(tensors[0])
            dense = h.contiguous()
            self._shm_call("broadcast", tensors, opts.timeout, self._shm.broadcast, dense, opts.rootRank)
            if dense is not h:
                h.copy_(dense)
            return _done(list(tensors))
        self._check("broadcast", tensors)
        hosts = _hl(tensors)
        dense = [h.contiguous() for h in hosts]
        return self._wrap(self._gloo.broadcast(dense, opts), list(tensors), _finisher(hosts, dense, None))

    def reduce(self, tensors, opts):
        self._check("reduce", tensors)
        red, factor, avg = self._reduce_plan(opts.reduceOp)
        hosts = _hl(tensors)
        if factor is not None:
            for h in hosts:
                h.mul_(factor)
        o = c10d.ReduceOptions()
        o.reduceOp = red
        o.rootRank = opts.rootRank
        o.rootTensor = opts.rootTensor
        o.timeout = opts.timeout
        work = self._gloo.reduce(hosts, o)
        after = _divider(hosts, self._size) if (avg and self._rank == opts.rootRank) else None
        return self._wrap(work, list(tensors), after)

    def allgather(self, output_tensors, input_tensors, opts):
        outs = [t for ts in output_tensors for t in ts]
        if len(input_tensors) == 1 and len(outs) == self._size and self._on_shm(input_tensors[0], *outs):
            _same_geometry(outs, input_tensors[0])
            self._shm_call("all_gather", input_tensors, opts.timeout, self._shm.all_gather,
                           _hl(outs), _h(input_tensors[0]))
            return _done(outs)
        self._check("all_gather", input_tensors)
        _same_geometry(outs, input_tensors[0])
        work = self._gloo.allgather(_hll(output_tensors), _hl(input_tensors), opts)
        return self._wrap(work, outs)

    def _allgather_base(self, output, input, opts):
        if self._on_shm(output, input):
            self._gather_geometry(output, input)
            ho = _h(output).view(self._size, -1)
            self._shm_call("all_gather_into_tensor", [input], opts.timeout, self._shm.all_gather,
                           list(ho.unbind(0)), _h(input))
            return _done([output])
        self._check("all_gather_into_tensor", [input])
        self._gather_geometry(output, input)
        work = self._gloo._allgather_base(_h(output), _h(input), opts)
        return self._wrap(work, [output])

    def allgather_coalesced(self, output_lists, input_list, opts):
        self._check("all_gather_coalesced", input_list)
        work = self._gloo.allgather_coalesced(_hll(output_lists), _hl(input_list), opts)
        return self._wrap(work, [t for ts in output_lists for t in ts])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts):
        self._check("all_gather_coalesced", inputs)
        works = [self._gloo._allgather_base(_h(o), _h(i), opts) for o, i in zip(outputs, inputs, strict=False)]
        for w in works[:-1]:
            w.wait()
        return self._wrap(works[-1], list(outputs)) if works else _done([])

    def reduce_scatter(self, output_tensors, input_tensors, opts):
        self._check("reduce_scatter", output_tensors)
        red, factor, avg = self._reduce_plan(opts.reduceOp)
        ins = _hll(input_tensors)
        if factor is not None:
            ins = [[h * factor for h in hs] for hs in ins]
        o = c10d.ReduceScatterOptions()
        o.reduceOp = red
        o.timeout = opts.timeout
        outs = _hl(output_tensors)
        work = self._gloo.reduce_scatter(outs, ins, o)
        return self._wrap(work, list(output_tensors), _divider(outs, self._size) if avg else None)

    def _reduce_scatter_base(self, output, input, opts):
        red, factor, avg = self._reduce_plan(opts.reduceOp)
        if self._on_shm(output, input, reduce=red):
            self._scatter_geometry(output, input)
            hout = _h(output)
            self._shm_call("reduce_scatter_tensor", [output], opts.timeout, self._shm.reduce_scatter,
                           hout, _h(input), _REDUCERS[_red_kind(red)], factor)
            if avg:
                _divider([hout], self._size)()
            return _done([output])
        self._check("reduce_scatter_tensor", [output])
        self._scatter_geometry(output, input)
        hin = _h(input)
        if factor is not None:
            hin = hin * factor
        o = c10d.ReduceScatterOptions()
        o.reduceOp = red
        o.timeout = opts.timeout
        hout = _h(output)
        work = self._gloo._reduce_scatter_base(hout, hin, o)
        return self._wrap(work, [output], _divider([hout], self._size) if avg else None)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts):
        works = [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs, strict=False)]
        for w in works[:-1]:
            w.wait()
        return works[-1] if works else _done([])

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts):
        self._check("all_to_all_single", [input], shape_of=[])  # splits may differ per rank
        _same_dtype(output, input, "all_to_all_single")
        work = self._gloo.alltoall_base(
            _h(output), _h(input), list(output_split_sizes), list(input_split_sizes), opts
        )
        return self._wrap(work, [output])

    def alltoall(self, output_tensors, input_tensors, opts):
        self._check("all_to_all", input_tensors[:1], shape_of=[])
        # gloo has no list all_to_all: one send/recv pair per peer
        works = []
        me = self._rank
        output_tensors[me].copy_(input_tensors[me])
        for peer in range(self._size):
            if peer == me:
                continue
            works.append(self._gloo.send([_h(input_tensors[peer].contiguous())], peer, 0x7A11))
            works.append(self._gloo.recv([_h(output_tensors[peer])], peer, 0x7A11))
        for w in works:
            w.wait()
        return _done(list(output_tensors))

    def gather(self, output_tensors, input_tensors, opts):
        self._check("gather", input_tensors)
        work = self._gloo.gather(_hll(output_tensors), _hl(input_tensors), opts)
        return self._wrap(work, [t for ts in output_tensors for t in ts] or list(input_tensors))

    def scatter(self, output_tensors, input_tensors, opts):
        self._check("scatter", output_tensors)
        work = self._gloo.scatter(_hl(output_tensors), _hll(input_tensors), opts)
        return self._wrap(work, list(output_tensors))

    def send(self, tensors, dst_rank, tag):
        _sync_device()
        return self._gloo.send(_hl(tensors), dst_rank, tag)

    def recv(self, tensors, src_rank, tag):
        _sync_device()
        return self._gloo.recv(_hl(tensors), src_rank, tag)

    def recv_anysource(self, tensors, tag):
        _sync_device()
        return self._gloo.recv_anysource(_hl(tensors), tag)

    def barrier(self, opts):
        if self._shm is not None:
            sig = self._prologue("barrier", [])
            self._drain()
            _raise_if_disagree("barrier", self._shm.sync("barrier", sig, opts.timeout))
            return _done([])
        _sync_device()
        return self._gloo.barrier(opts)

    def monitored_barrier(self, opts, wait_all_ranks=False):
        _sync_device()
        timeout = opts.timeout if isinstance(opts, c10d.BarrierOptions) else opts
        return self._gloo.monitored_barrier(timeout or self._timeout, wait_all_ranks)

    # ---- torch 2.14 names of the single-tensor collectives --------------------------------
    def all_gather_single(self, output, input, opts):
        return self._allgather_base(output, input, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts):
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def reduce_scatter_single(self, output, input, opts):
        return self._reduce_scatter_base(output, input, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def gather_single(self, output, input, opts):
        self._check("gather", [input])
        outs = []
        if self._rank == opts.rootRank:
            _same_dtype(output, input, "gather_single")
            flat = _h(output).view(-1)
            outs = [[c.view(input.shape) for c in flat.split(input.numel())]]
        work = self._gloo.gather(outs, [_h(input)], opts)
        return self._wrap(work, [output])

    gather_into_tensor = gather_single

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    # ---- capabilities (plain attributes: the C++ properties would call back into Python) --
    supports_coalescing = False
    supports_splitting = False
    supports_shrinking = False
    supports_tensor_alloc = False
    supports_time_estimate = False
    supports_window = False
    supports_reconfigure = False


def _same_geometry(outs, inp: torch.Tensor) -> None:
    for t in outs:
        if t.shape != inp.shape or t.dtype != inp.dtype:
            raise RuntimeError(
                f"neuron backend: all_gather output {t.dtype}{list(t.shape)} does not match "
                f"the input {inp.dtype}{list(inp.shape)}"
            )


def _same_dtype(a: torch.Tensor, b: torch.Tensor, kind: str) -> None:
    if a.dtype != b.dtype:
        raise RuntimeError(f"neuron backend: {kind} output dtype {a.dtype} != input dtype {b.dtype}")


def _premul_factor(op):
    factor = getattr(op, "factor", None)
    if factor is None:
        raise RuntimeError("neuron backend: PREMUL_SUM without a factor")
    if isinstance(factor, torch.Tensor):
        factor = _h(factor)
    return factor


def _divider(hosts, n: int):
    def run():
        for h in hosts:
            if h.is_floating_point() or h.is_complex():
                h.div_(n)
            else:
                h.floor_divide_(n)

    return run


def _finisher(hosts, dense, divide_by):
    """After an in-place collective on ``dense`` (contiguous stand-ins of ``hosts``): the AVG
    division and the copy back into strided tensors; None when there is nothing to do."""
    strided = [(h, d) for h, d in zip(hosts, dense, strict=True) if d is not h]
    if divide_by is None and not strided:
        return None

    def run():
        if divide_by is not None:
            _divider(dense, divide_by)()
        for h, d in strided:
            h.copy_(d)

    return run


def _done(results):
    fut = torch.futures.Future()
    fut.set_result(results)
    return NeuronWork(fut)


_warned_native = False


def _warn_without_native_hooks() -> None:
    global _warned_native
    from .. import native

    if _warned_native or native.available():
        return
    _warned_native = True
    warnings.warn(
        "neuron backend: " + native.missing_message(
            "DDP with find_unused_parameters=True or static_graph=True, FSDP2 (fully_shard) "
            "and pin_memory=True"
        ),
        RuntimeWarning,
        stacklevel=3,
    )


def create_backend(opts, backend_options=None) -> NeuronBackend:
    """The c10d creator (``extended_api=True``): one backend per process group."""
    _warn_without_native_hooks()
    return NeuronBackend(
        opts.store,
        opts.group_rank,
        opts.group_size,
        opts.timeout,
        group_name=getattr(opts, "group_id", "") or "",
        global_ranks=getattr(opts, "global_ranks_in_group", None),
    )


__all__ = ["NeuronBackend", "create_backend", "dist"]
