"""Device memory of the simulated NeuronCore: a caching allocator over host RAM.

Every byte of device memory is a host buffer (a CPU ``UntypedStorage``) that a device storage
points at. The allocator accounts for it the way ``torch.cuda``'s caching allocator does:

* ``allocated`` — bytes of live device storages, exactly (their ``nbytes``);
* ``reserved``  — allocated blocks rounded up to the allocation granularity, plus the blocks
  kept in the cache after their storage died (ready to be handed out again);
* an allocation that would exceed the logical core's HBM capacity first empties the cache and,
  if still too large, raises ``torch.OutOfMemoryError`` naming the request, the capacity and
  the current allocated / reserved figures. Nothing is changed by a failed allocation.

Blocks the allocator handed out are reused by exact byte size (a training loop asks for the
same sizes every step); the cache holds at most ``TORCHNEURON_CACHE_LIMIT_MB`` (default 1024)
of freed blocks. Buffers a kernel computed and the device adopted go back to the host
allocator when they die (they count in ``reserved`` only while alive).

The figures themselves live in an accounts object: in the C++ eager-kernel module when it is
built (:class:`NativeAccounts`; those kernels adopt their results without entering Python and
account for them in the same numbers), in Python otherwise (:class:`PyAccounts`).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from functools import partial

import torch

from .target import GiB, MiB

GRANULE = 512  # bytes: allocation granularity (as in the CUDA caching allocator)
LARGE = 1 * MiB  # blocks at least this big are rounded to 2 MiB segments
SEGMENT = 2 * MiB


def round_size(nbytes: int) -> int:
    if nbytes < LARGE:
        return max(GRANULE, -(-nbytes // GRANULE) * GRANULE)
    return -(-nbytes // SEGMENT) * SEGMENT


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


class Block:
    """One device allocation: the host buffer behind a device storage.

    It lives in the device storage's ``__dict__``; when the last tensor using the storage
    dies, the storage's Python object dies with it and so does the block, which returns its
    bytes to the allocator.
    """

    __slots__ = ("host", "nbytes", "rounded", "allocator", "flats", "alias_key", "alias", "cacheable",
                 "counted", "__weakref__")

    def __init__(self, host: torch.UntypedStorage, nbytes: int, rounded: int, allocator: DeviceAllocator,
                 cacheable: bool = True, counted: bool = True):
        self.host = host
        self.cacheable = cacheable
        self.counted = counted
        self.nbytes = nbytes
        self.rounded = rounded
        self.allocator = allocator
        self.flats: dict[torch.dtype, torch.Tensor] = {}
        self.alias_key: tuple | None = None
        self.alias: torch.Tensor | None = None

    def __del__(self) -> None:
        alloc = self.allocator
        if alloc is not None:
            try:
                alloc._release(self)
            except Exception:  # interpreter shutdown
                pass


class PyAccounts:
    """The allocator's figures, kept in Python (the C++ fast kernels keep them in
    ``torchneuron.native.fast_kernels`` instead, see :class:`NativeAccounts`)."""

    def __init__(self) -> None:
        self.capacity = 0
        self._v = [0] * 7  # allocated, reserved, peak allocated, peak reserved, allocs, frees, active

    def set_capacity(self, n: int) -> None:
        self.capacity = n

    def alloc(self, nbytes: int, rounded: int, from_cache: bool) -> None:
        v = self._v
        v[0] += nbytes
        if not from_cache:
            v[1] += rounded
        v[4] += 1
        v[6] += 1
        if v[0] > v[2]:
            v[2] = v[0]
        if v[1] > v[3]:
            v[3] = v[1]

    def free(self, nbytes: int, rounded: int, to_cache: bool) -> None:
        v = self._v
        v[0] -= nbytes
        if not to_cache:
            v[1] -= rounded
        v[5] += 1
        v[6] -= 1

    def unreserve(self, n: int) -> None:
        self._v[1] -= n

    def get(self) -> tuple[int, ...]:
        return tuple(self._v)

    def reset_peak(self) -> None:
        self._v[2], self._v[3] = self._v[0], self._v[1]

    def reset_counts(self) -> None:
        self._v[4] = self._v[5] = 0


class NativeAccounts:
    """The allocator's figures in the C++ fast-kernel module, which adopts kernel results as
    device memory without entering Python and accounts for them in the same numbers."""

    def __init__(self, module, index: int = 0) -> None:
        self.alloc = partial(module.account_alloc, index)
        self.free = partial(module.account_free, index)
        self.unreserve = partial(module.account_unreserve, index)
        self.get = partial(module.account_get, index)
        self.reset_peak = partial(module.account_reset_peak, index)
        self.reset_counts = partial(module.account_reset_counts, index)
        self.set_capacity = partial(module.set_capacity, index)


class DeviceAllocator:
    def __init__(self, capacity: int, cache_limit: int | None = None, accounts=None, index: int = 0):
        self.index = index  # the logical core whose memory this is
        self.device = torch.device("neuron", index)
        self.accounts = PyAccounts() if accounts is None else accounts
        self.capacity = capacity
        if cache_limit is None:
            cache_limit = int(float(os.environ.get("TORCHNEURON_CACHE_LIMIT_MB", "1024")) * MiB)
        self.cache_limit = cache_limit
        self._lock = threading.Lock()
        self._cache: OrderedDict[int, list[torch.UntypedStorage]] = OrderedDict()
        self._cached_bytes = 0  # rounded bytes held by the cache
        self.reset_all_stats()
        self.observers: list = []  # callables (event, nbytes, allocated) for profilers
        self.on_observers_changed = None  # set by the fast kernels: they stand aside while observed

    # ---- statistics -----------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self._capacity

    @capacity.setter
    def capacity(self, n: int) -> None:
        self._capacity = n
        self.accounts.set_capacity(n)

    allocated = property(lambda self: self.accounts.get()[0])
    reserved = property(lambda self: self.accounts.get()[1])
    peak_allocated = property(lambda self: self.accounts.get()[2])
    peak_reserved = property(lambda self: self.accounts.get()[3])
    num_allocs = property(lambda self: self.accounts.get()[4])
    num_frees = property(lambda self: self.accounts.get()[5])
    active_blocks = property(lambda self: self.accounts.get()[6])

    def add_observer(self, fn) -> None:
        self.observers.append(fn)
        if self.on_observers_changed is not None:
            self.on_observers_changed()

    def remove_observer(self, fn) -> None:
        if fn in self.observers:
            self.observers.remove(fn)
        if self.on_observers_changed is not None:
            self.on_observers_changed()

    def reset_all_stats(self) -> None:
        self.accounts.reset_counts()
        self.num_cache_hits = 0
        self.num_ooms = 0
        self.num_cache_flushes = 0

    def reset_peak(self) -> None:
        with self._lock:
            self.accounts.reset_peak()

    # ---- allocation -----------------------------------------------------------------------
    def _check_capacity(self, nbytes: int, rounded: int) -> None:
        if self.reserved + rounded <= self.capacity:
            return
        self._empty_cache_locked()
        reserved = self.reserved
        if reserved + rounded <= self.capacity:
            return
        self.num_ooms += 1
        free = max(0, self.capacity - reserved)
        raise torch.OutOfMemoryError(
            f"neuron out of memory: tried to allocate {_fmt_bytes(nbytes)} on neuron:{self.index} "
            f"(simulated {self._target_name()} logical NeuronCore with {_fmt_bytes(self.capacity)} "
            f"of HBM; {_fmt_bytes(self.allocated)} allocated by live tensors, "
            f"{_fmt_bytes(reserved)} reserved, {_fmt_bytes(free)} free). "
            "Free tensors you no longer need, use a smaller batch, or raise the simulated "
            "capacity with TORCHNEURON_HBM_GIB."
        )

    @staticmethod
    def _target_name() -> str:
        from . import state

        return state.target().name

    def _account(self, nbytes: int, rounded: int, from_cache: bool) -> None:
        self.accounts.alloc(nbytes, rounded, from_cache)
        if self.observers:
            allocated = self.allocated
            for obs in self.observers:
                obs("alloc", nbytes, allocated)

    def allocate(self, nbytes: int) -> Block:
        """A block of exactly ``nbytes`` bytes, from the cache when one of that size is free."""
        rounded = round_size(nbytes)
        with self._lock:
            bucket = self._cache.get(nbytes)
            if bucket:
                host = bucket.pop()
                if not bucket:
                    del self._cache[nbytes]
                self._cached_bytes -= rounded
                self.num_cache_hits += 1
                self._account(nbytes, rounded, from_cache=True)
                return Block(host, nbytes, rounded, self)
            self._check_capacity(nbytes, rounded)
            host = torch.UntypedStorage(nbytes)
            self._account(nbytes, rounded, from_cache=False)
            return Block(host, nbytes, rounded, self)

    def adopt(self, host: torch.UntypedStorage, nbytes: int | None = None, counted: bool = True) -> Block:
        """Take a host buffer computed by a kernel as a new device allocation (no copy).

        ``counted=False``: a simulator-side staging buffer that stands for memory already
        accounted for (the result of a fused program that the chip writes straight into its
        destination buffer); it is not device memory and is not in the statistics."""
        if nbytes is None:
            nbytes = host.nbytes()
        rounded = round_size(nbytes) if nbytes >= GRANULE else GRANULE
        if not counted:
            return Block(host, nbytes, rounded, self, cacheable=False, counted=False)
        with self._lock:
            self._check_capacity(nbytes, rounded)
            self._account(nbytes, rounded, from_cache=False)
            return Block(host, nbytes, rounded, self, cacheable=False)

    def _release(self, block: Block) -> None:
        if not block.counted:
            block.allocator = None
            return
        with self._lock:
            host = block.host
            block.allocator = None
            if block.cacheable and host is not None and block.rounded <= self.cache_limit:
                self.accounts.free(block.nbytes, block.rounded, True)
                self._cache.setdefault(block.nbytes, []).append(host)
                self._cache.move_to_end(block.nbytes)
                self._cached_bytes += block.rounded
                while self._cached_bytes > self.cache_limit and self._cache:
                    size, bucket = next(iter(self._cache.items()))
                    bucket.pop()
                    r = round_size(size)
                    self._cached_bytes -= r
                    self.accounts.unreserve(r)
                    if not bucket:
                        del self._cache[size]
            else:
                self.accounts.free(block.nbytes, block.rounded, False)
            if self.observers:
                allocated = self.allocated
                for obs in self.observers:
                    obs("free", block.nbytes, allocated)

    def empty_cache(self) -> None:
        with self._lock:
            self._empty_cache_locked()

    def _empty_cache_locked(self) -> None:
        if self._cached_bytes:
            self.num_cache_flushes += 1
        self.accounts.unreserve(self._cached_bytes)
        self._cached_bytes = 0
        self._cache.clear()

    @property
    def cached_bytes(self) -> int:
        return self._cached_bytes

    # ---- reports ---------------------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        with self._lock:
            allocated, reserved, peak_allocated, peak_reserved, allocs, frees, active = self.accounts.get()
            return {
                "allocated_bytes.all.current": allocated,
                "allocated_bytes.all.peak": peak_allocated,
                "reserved_bytes.all.current": reserved,
                "reserved_bytes.all.peak": peak_reserved,
                "inactive_split_bytes.all.current": self._cached_bytes,
                "active.all.current": active,
                "allocation.all.allocated": allocs,
                "allocation.all.freed": frees,
                "num_alloc_retries": self.num_cache_flushes,
                "num_ooms": self.num_ooms,
                "num_cache_hits": self.num_cache_hits,
                "capacity_bytes": self.capacity,
            }

    def summary(self, target_name: str) -> str:
        s = self.stats()
        rows = [
            ("Allocated memory", s["allocated_bytes.all.current"], s["allocated_bytes.all.peak"]),
            ("Reserved memory", s["reserved_bytes.all.current"], s["reserved_bytes.all.peak"]),
            ("Cached (free) blocks", s["inactive_split_bytes.all.current"], None),
        ]
        width = 75
        out = ["=" * width, f" neuron:{self.index} memory summary — simulated {target_name}, capacity "
               f"{_fmt_bytes(self.capacity)}".ljust(width), "-" * width,
               f" {'Metric':<28}{'Current':>20}{'Peak':>20}", "-" * width]
        for name, cur, peak in rows:
            out.append(f" {name:<28}{_fmt_bytes(cur):>20}{(_fmt_bytes(peak) if peak is not None else '-'):>20}")
        out.append("-" * width)
        out.append(f" {'Live blocks':<28}{s['active.all.current']:>20}")
        out.append(f" {'Allocations / frees':<28}{s['allocation.all.allocated']:>20}{s['allocation.all.freed']:>20}")
        out.append(f" {'Cache hits':<28}{s['num_cache_hits']:>20}")
        out.append(f" {'Cache flushes / OOMs':<28}{s['num_alloc_retries']:>20}{s['num_ooms']:>20}")
        out.append("=" * width)
        return "\n".join(out) + "\n"


__all__ = ["Block", "DeviceAllocator", "NativeAccounts", "PyAccounts", "round_size", "GiB"]
