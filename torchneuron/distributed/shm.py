"""Shared-memory collectives for the ranks of a process group that run on one host.

gloo moves every byte through the kernel's TCP loopback; ranks on one host can instead meet in a
shared memory segment. Each rank owns two staging buffers there (double buffering); a collective
goes through them in chunks of at most one buffer:

* ``all_reduce``: every rank copies its chunk into its buffer; barrier; rank ``r`` reduces part
  ``r`` of the chunk over all buffers, in place in its own buffer; barrier; every rank copies
  the reduced parts out. Each part is reduced once, so all ranks get bit-identical results.
* ``broadcast`` / ``all_gather``: the sources copy in; barrier; everyone copies out.
* ``reduce_scatter``: every rank copies the blocks of its input into its buffer; barrier; rank
  ``r`` reduces block ``r`` over all buffers into its output.

Because a rank writes a buffer again only two chunks later, after a barrier that every rank
reaches only once it has finished reading that buffer, one or two barriers per chunk suffice.

The barrier (``native/shm_sync.cpp``) also carries the cross-rank signature check: each rank
writes its collective's signature (kind, dtype, shape) into its control line before arriving,
and after the barrier every rank compares them all, so a disagreement raises on every rank at
the same point and the group stays in step — at the cost of no extra round trip (gloo's check
costs one all-gather per collective). Collectives the segment does not serve (gloo does) still
meet here for their check.

Failures are prompt and leave no rank behind: a peer process that exits is noticed within
~100 ms, the group timeout is honoured, and a rank that fails in the middle of a collective
sets an abort word that wakes the others. After such a failure the group raises on every call,
as a NCCL communicator does after an abort.

Set up once per process group (``open_channel``): the ranks compare host identities through the
store; rank 0 creates and fully allocates the segment under ``/dev/shm`` (so a full ``/dev/shm``
is an error here, not a SIGBUS later), the others map it, and once every rank has answered rank 0
unlinks it — the mapping outlives the name, nothing is left behind by a crash. If anything fails
on any rank, every rank uses gloo. ``TORCHNEURON_DIST_SHM=0`` turns it off; buffer size
``TORCHNEURON_DIST_SHM_MIB`` (default 4, two per rank).
"""

from __future__ import annotations

import mmap
import os
import socket
import tempfile
from datetime import timedelta

import numpy as np
import torch
from torch.distributed import DistBackendError

_HEADER = 4096
_LINE = 256  # bytes per rank in the control area (see shm_sync.cpp)
_LINE_I64 = _LINE // 8
_SIG_COLS = (2, 16)  # int64 column of the two signature areas in a control line
_ALIGN = 64
_MAGIC = 0x74_6E_73_68_6D_30_31  # "tnshm01"
_OFF = ("0", "false", "False", "off", "no")

# reductions the segment serves (others, and bool/complex/float8 tensors, go through gloo)
REDUCE_DTYPES = frozenset({
    torch.float32, torch.float64, torch.float16, torch.bfloat16,
    torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
})


def enabled() -> bool:
    return os.environ.get("TORCHNEURON_DIST_SHM", "1") not in _OFF


def _buffer_bytes() -> int:
    mib = float(os.environ.get("TORCHNEURON_DIST_SHM_MIB", "4"))
    return max(_ALIGN, int(mib * (1 << 20)) // _ALIGN * _ALIGN)


def _host_identity() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}|{boot}"


def _get(store, key: str) -> str:
    return store.get(key).decode()


def open_channel(store, rank: int, size: int, timeout: timedelta) -> ShmChannel | None:
    """The group's shared-memory channel, or None when the ranks cannot share one (every rank
    reaches the same answer)."""
    if size < 2:
        return None
    from ..native import shm as native_shm

    sync = native_shm.module() if enabled() and os.path.isdir("/dev/shm") else None
    # every rank answers, willing or not, so that no rank waits for one that gave up early
    store.set(f"tn_shm/host/{rank}", _host_identity() if sync is not None else "")
    hosts = {_get(store, f"tn_shm/host/{k}") for k in range(size)}
    if len(hosts) != 1 or "" in hosts:
        return None  # ranks on several hosts, or one without the transport: gloo
    buf = _buffer_bytes()
    ctrl = -(-size * _LINE // 4096) * 4096
    total = _HEADER + ctrl + size * 2 * buf
    path = ""
    if rank == 0:
        try:
            fd, path = tempfile.mkstemp(prefix="torchneuron-c10d-", dir="/dev/shm")
            try:
                os.posix_fallocate(fd, 0, total)  # reserve now: a full /dev/shm fails here
                with mmap.mmap(fd, total) as mm:
                    np.frombuffer(mm, dtype=np.int64, count=2)[:] = (_MAGIC, total)
            finally:
                os.close(fd)
        except OSError:
            if path:
                os.unlink(path)
            path = ""
        store.set("tn_shm/name", path)
    path = _get(store, "tn_shm/name")
    channel = None
    if path:
        try:
            fd = os.open(path, os.O_RDWR)
            try:
                mm = mmap.mmap(fd, total)
            finally:
                os.close(fd)
            head = tuple(np.frombuffer(mm, dtype=np.int64, count=2).tolist())
            if head == (_MAGIC, total):
                channel = ShmChannel(mm, sync, rank, size, buf, timeout)
            else:
                mm.close()
        except OSError:
            channel = None
    store.set(f"tn_shm/ok/{rank}", "1" if channel is not None else "0")
    oks = [_get(store, f"tn_shm/ok/{k}") == "1" for k in range(size)]
    if rank == 0 and path:
        os.unlink(path)  # every rank has mapped it (or given up): the name is no longer needed
    if not all(oks):
        if channel is not None:
            channel.close()
        return None
    channel.start_liveness_checks()
    return channel


class ShmChannel:
    """One process group's shared-memory segment, seen from one rank."""

    def __init__(self, mm: mmap.mmap, sync, rank: int, size: int, buf_bytes: int, timeout: timedelta):
        self._mm = mm
        self._sync_mod = sync
        self.rank, self.size = rank, size
        self.buf_bytes = buf_bytes
        self.timeout = timeout
        seg = torch.frombuffer(mm, dtype=torch.uint8)
        self._seg = seg
        base = seg.data_ptr()
        self._header = base
        self._ctrl_addr = base + _HEADER
        ctrl = -(-size * _LINE // 4096) * 4096
        self._lines = np.frombuffer(mm, dtype=np.int64, count=size * _LINE_I64, offset=_HEADER).reshape(size, _LINE_I64)
        self._data = _HEADER + ctrl
        self._gen = 0
        self._checks = 0
        self._step = 0
        self._check_pids = False
        self.broken: str | None = None
        sync.set_pid(self._ctrl_addr, rank, os.getpid())

    def start_liveness_checks(self) -> None:
        pids = self._lines[:, 1].tolist()
        self._check_pids = all(self._sync_mod.pid_visible(int(p)) for p in pids)

    def close(self) -> None:
        self._lines = None
        self._seg = None
        try:
            self._mm.close()
        except BufferError:  # a view is still alive: the mapping goes with the last one
            pass

    # ---- buffers --------------------------------------------------------------------------
    def _buffer(self, r: int, b: int) -> torch.Tensor:
        off = self._data + (r * 2 + b) * self.buf_bytes
        return self._seg[off : off + self.buf_bytes]

    def _next(self) -> int:
        b = self._step & 1
        self._step += 1
        return b

    # ---- the barrier ----------------------------------------------------------------------
    def _fail(self, message: str) -> None:
        self.broken = message
        self._sync_mod.set_abort(self._header, self.rank)
        raise DistBackendError(message)

    def sync(self, kind: str, sig: list[int] | None = None,
             timeout: timedelta | None = None) -> list[list[int]] | None:
        """Arrive at the next barrier and wait for every rank. With ``sig`` (this rank's
        signature), returns every rank's signature, read after the barrier, so that all ranks
        judge the same list (see :func:`disagree`); otherwise None."""
        if self.broken is not None:
            raise DistBackendError(f"{self.broken} (the process group cannot be used any more)")
        area = None
        if sig is not None:
            area = _SIG_COLS[self._checks & 1]
            self._checks += 1
            self._lines[self.rank, area : area + len(sig)] = sig
        self._gen += 1
        t = timeout if timeout is not None and timeout.total_seconds() > 0 else self.timeout
        status, who = self._sync_mod.arrive_wait(
            self._ctrl_addr, self._header, self.rank, self.size, self._gen, t.total_seconds(), self._check_pids
        )
        if status == 1:
            self._fail(
                f"neuron backend: Timed out after {t.total_seconds():g} s in {kind} waiting for rank "
                f"{who} (shared-memory transport; the group timeout)"
            )
        elif status == 2:
            pid = int(self._lines[who, 1])
            self._fail(f"neuron backend: rank {who} (pid {pid}) exited while the group was in {kind}")
        elif status == 3:
            self._fail(f"neuron backend: rank {who} failed during a collective; {kind} cannot complete")
        if area is None:
            return None
        sigs = self._lines[:, area : area + len(sig)].tolist()
        if disagree(sigs):
            # every rank returns here; they may have taken different paths to get here (a
            # collective on the segment on one rank, one on gloo on another), so re-derive the
            # buffer parity from the generation, which all ranks share. Nobody is reading a
            # buffer now: any may be written next.
            self._step = self._gen
        return sigs

    def guarded(self, fn, *args):
        """Run a data movement; a failure in the middle makes every other rank stop waiting."""
        try:
            return fn(*args)
        except DistBackendError:
            raise
        except BaseException:
            if self.broken is None:
                self.broken = "neuron backend: a collective failed on this rank"
                self._sync_mod.set_abort(self._header, self.rank)
            raise

    # ---- collectives on contiguous host tensors -------------------------------------------
    def _chunked(self, n: int, per: int, kind: str, sig, timeout, stage, finish):
        """The loop every collective shares: for each chunk ``[start, start + c)`` of ``n``
        (``c <= per``) through buffer set ``b``: ``stage(start, c, b)``, a barrier (the first one
        carries the signature; on a disagreement every rank returns the signatures there, before
        anything is read), ``finish(start, c, b)``. Returns the first barrier's signatures."""
        start, first = 0, None
        while True:
            c = min(per, n - start)
            b = self._next()
            stage(start, c, b)
            got = self.sync(kind, sig if start == 0 else None, timeout)
            if start == 0:
                first = got
                if got is not None and disagree(got):
                    return got
            finish(start, c, b)
            start += c
            if start >= n:
                return first

    def _typed(self, r: int, b: int, count: int, dtype: torch.dtype) -> torch.Tensor:
        """The first ``count`` elements of rank ``r``'s buffer ``b`` as ``dtype``."""
        return self._buffer(r, b)[: count * dtype.itemsize].view(dtype)

    def all_reduce(self, h: torch.Tensor, reduce, scale, kind: str, sig, timeout=None):
        """In place; ``scale`` (PREMUL_SUM's factor, or None) multiplies each rank's input."""
        flat, dt = h.view(-1), h.dtype

        def stage(start, c, b):
            mine = self._typed(self.rank, b, c, dt)
            mine.copy_(flat[start : start + c])
            if scale is not None:
                mine.mul_(scale)

        def finish(start, c, b):
            bounds = _parts(c, self.size, h.element_size())
            lo, hi = bounds[self.rank]
            if hi > lo:  # this rank's part, reduced in place in its own buffer
                acc = self._typed(self.rank, b, c, dt)[lo:hi]
                for k in range(self.size):
                    if k != self.rank:
                        reduce(acc, self._typed(k, b, c, dt)[lo:hi])
            self.sync(kind, None, timeout)
            for k, (lo, hi) in enumerate(bounds):
                if hi > lo:
                    flat[start + lo : start + hi].copy_(self._typed(k, b, c, dt)[lo:hi])

        per = max(1, self.buf_bytes // h.element_size())
        return self._chunked(flat.numel(), per, kind, sig, timeout, stage, finish)

    def broadcast(self, h: torch.Tensor, root: int, kind: str, sig, timeout=None):
        data = h.view(-1).view(torch.uint8)

        def stage(start, c, b):
            if self.rank == root:
                self._buffer(root, b)[:c].copy_(data[start : start + c])

        def finish(start, c, b):
            if self.rank != root:
                data[start : start + c].copy_(self._buffer(root, b)[:c])

        return self._chunked(data.numel(), self.buf_bytes, kind, sig, timeout, stage, finish)

    def all_gather(self, outs: list[torch.Tensor], h: torch.Tensor, kind: str, sig, timeout=None):
        """``outs[k]`` (contiguous, like ``h``) receives rank k's ``h``."""
        data = h.view(-1).view(torch.uint8)
        dests = [o.view(-1).view(torch.uint8) for o in outs]

        def stage(start, c, b):
            self._buffer(self.rank, b)[:c].copy_(data[start : start + c])

        def finish(start, c, b):
            for k, d in enumerate(dests):
                d[start : start + c].copy_(self._buffer(k, b)[:c])

        return self._chunked(data.numel(), self.buf_bytes, kind, sig, timeout, stage, finish)

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, reduce, scale, kind: str, sig, timeout=None):
        """``out`` (m elements) = reduction over ranks of block ``rank`` of ``inp`` (size x m);
        ``scale`` (PREMUL_SUM's factor, or None) multiplies each rank's input."""
        dst, dt, w = out.view(-1), out.dtype, self.size
        blocks = inp.view(w, dst.numel())

        def stage(start, c, b):
            mine = self._typed(self.rank, b, w * c, dt).view(w, c)
            mine.copy_(blocks[:, start : start + c])
            if scale is not None:
                mine.mul_(scale)

        def finish(start, c, b):
            acc = dst[start : start + c]
            acc.copy_(self._typed(self.rank, b, w * c, dt).view(w, c)[self.rank])
            for k in range(w):
                if k != self.rank:
                    reduce(acc, self._typed(k, b, w * c, dt).view(w, c)[self.rank])

        per = max(1, self.buf_bytes // (out.element_size() * w))
        return self._chunked(dst.numel(), per, kind, sig, timeout, stage, finish)


def disagree(sigs: list[list[int]]) -> bool:
    """Whether the ranks' signatures differ (ranks that checked nothing wrote zeros)."""
    present = [s for s in sigs if s[0] != 0]
    return any(s != present[0] for s in present)


def _parts(n: int, size: int, elem: int) -> list[tuple[int, int]]:
    """Split n elements into ``size`` contiguous parts aligned to 64 bytes."""
    step = max(1, _ALIGN // elem)
    per = -(-n // size)
    per = -(-per // step) * step
    return [(min(n, r * per), min(n, (r + 1) * per)) for r in range(size)]


__all__ = ["REDUCE_DTYPES", "ShmChannel", "disagree", "enabled", "open_channel"]
