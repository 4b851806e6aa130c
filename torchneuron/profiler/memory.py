"""Device memory timeline and snapshots (``torch.neuron.memory_snapshot``).

``record_memory_history(True)`` keeps every allocation and free of the current core (time, bytes,
allocated and reserved totals after it) until turned off; ``memory_snapshot()`` returns the
allocator's statistics, its cache of free blocks, and that history. Profiles with
``ProfilerActivity.PrivateUse1`` record the same events into their trace as a counter track.
"""

from __future__ import annotations

import time

from ..runtime import devices, state
from .recorder import MemoryEvent

_history: list[MemoryEvent] | None = None
_max_entries = 0
_core = 0  # the core whose history is kept


def _observer(action: str, nbytes: int, allocated: int) -> None:
    h = _history
    if h is None:
        return
    h.append(MemoryEvent(time.perf_counter_ns(), action, nbytes, allocated, state.allocator(_core).reserved))
    if _max_entries and len(h) > _max_entries:
        del h[: len(h) - _max_entries]


def record_memory_history(enabled: bool = True, max_entries: int = 100_000) -> None:
    """Start (``True``) or stop (``False``) keeping the allocation/free history of the current
    core (as ``torch.cuda.memory._record_memory_history`` does for the current device)."""
    global _history, _max_entries, _core
    alloc = state.allocator(_core)
    if enabled:
        if _history is None:
            alloc.remove_observer(_observer)
            _core = devices.current()
            alloc = state.allocator(_core)
        _max_entries = max_entries
        if _history is None:
            _history = []
        if _observer not in alloc.observers:
            alloc.add_observer(_observer)
    else:
        alloc.remove_observer(_observer)
        _history = None


def memory_snapshot(device=None) -> dict:
    """A core's memory state (the current core's by default): statistics, cached free blocks
    and, for the core whose history is recorded, that history.

    Keys: ``device``, ``target``, ``capacity_bytes``, ``stats`` (as ``memory_stats()``),
    ``cached_blocks`` (``[{"size": bytes, "count": n}]``), ``history``
    (``[{"t_ns", "action", "nbytes", "allocated", "reserved"}]``, empty unless
    :func:`record_memory_history` is on).
    """
    core = devices.index_of(device)
    alloc = state.allocator(core)
    with alloc._lock:
        cached = [{"size": size, "count": len(bucket)} for size, bucket in alloc._cache.items()]
    hist = list(_history or ()) if core == _core else []
    return {
        "device": f"neuron:{core}",
        "target": state.target().name,
        "capacity_bytes": alloc.capacity,
        "stats": alloc.stats(),
        "cached_blocks": cached,
        "history": [
            {"t_ns": m.t_ns, "action": m.action, "nbytes": m.nbytes, "allocated": m.allocated, "reserved": m.reserved}
            for m in hist
        ],
    }


__all__ = ["memory_snapshot", "record_memory_history"]
