"""The ``torch.neuron`` module: device, memory, RNG and stream API (names as in torch.cuda).

A process drives the logical NeuronCores of its simulated chip(s), ``neuron:0 .. neuron:N-1``
(see :mod:`torchneuron.runtime.devices`); a rank started by a launcher starts on
``neuron:LOCAL_RANK``. Functions taking ``device`` default to the current core.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .runtime import devices as _devices
from .runtime import queue as _queue
from .runtime import rng as _rng
from .runtime import state as _state
from .runtime.errors import ERRORS
from .runtime.queue import Event, Stream, current_stream, default_stream, set_stream, stream

__all__ = [
    "is_available", "is_initialized", "init", "device_count", "current_device", "set_device",
    "device", "device_of", "get_device_name", "get_device_properties", "get_device_capability",
    "synchronize", "is_bf16_supported",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "reset_peak_memory_stats", "reset_max_memory_allocated", "memory_stats", "memory_summary",
    "mem_get_info", "empty_cache", "memory_snapshot", "record_memory_history",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
    "set_rng_state", "get_rng_state_all", "set_rng_state_all",
    "Stream", "Event", "stream", "current_stream", "default_stream", "set_stream",
    "get_amp_supported_dtype",
]


@dataclass(frozen=True)
class NeuronDeviceProperties:
    name: str
    target: str
    total_memory: int
    logical_core_count: int  # physical NeuronCores behind this logical core (LNC)
    logical_cores_per_chip: int
    type: str = "neuron"

    def __repr__(self) -> str:
        return (
            f"NeuronDeviceProperties(name='{self.name}', target='{self.target}', "
            f"total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"logical_core_count={self.logical_core_count})"
        )


def _index(device: Any) -> int:
    """The core ``device`` names (None: the current one); raises for one that does not exist."""
    return _devices.index_of(device)


# ---- device ----------------------------------------------------------------------------------
def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def init() -> None:
    return None


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    return _devices.count()


def current_device() -> int:
    return _devices.current()


def set_device(device: Any) -> None:
    """Make ``device`` the calling thread's current core (a negative index is ignored, as in
    torch.cuda)."""
    if isinstance(device, int) and device < 0:
        return
    _devices.set_current(_index(device))


class device:  # noqa: N801 - torch.cuda.device is a lowercase context manager too
    """Context manager making a core current for the block (``None`` or -1: no change)."""

    def __init__(self, device: Any):
        self.idx = -1 if device is None or device == -1 else _index(device)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev_idx = _devices.current()
            _devices.set_current(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx >= 0:
            _devices.set_current(self.prev_idx)
        return False


class device_of(device):  # noqa: N801
    """Context manager making the core of tensor ``obj`` current (no change for a CPU tensor)."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.device.type == "neuron" else -1)


def get_device_name(device: Any = None) -> str:
    _index(device)
    return _state.target().device_name


def get_device_properties(device: Any = None) -> NeuronDeviceProperties:
    _index(device)
    t = _state.target()
    return NeuronDeviceProperties(
        name=t.device_name,
        target=t.name,
        total_memory=t.hbm_bytes,
        logical_core_count=t.lnc,
        logical_cores_per_chip=t.logical_cores_per_chip,
    )


def get_device_capability(device: Any = None) -> tuple[int, int]:
    _index(device)
    return (2, 0) if _state.target().name == "trn2" else (3, 0)


def synchronize(device: Any = None) -> None:
    """Wait for all work on the core; raises the earliest deferred device error, if any (the
    simulated cores complete their work at launch, so errors are the process's, not a core's)."""
    _index(device)
    _queue.QUEUE.synchronize()


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


# ---- memory ----------------------------------------------------------------------------------
def memory_allocated(device: Any = None) -> int:
    return _state.allocator(_index(device)).allocated


def max_memory_allocated(device: Any = None) -> int:
    return _state.allocator(_index(device)).peak_allocated


def memory_reserved(device: Any = None) -> int:
    return _state.allocator(_index(device)).reserved


def max_memory_reserved(device: Any = None) -> int:
    return _state.allocator(_index(device)).peak_reserved


def reset_peak_memory_stats(device: Any = None) -> None:
    _state.allocator(_index(device)).reset_peak()


def reset_max_memory_allocated(device: Any = None) -> None:
    reset_peak_memory_stats(device)


def memory_stats(device: Any = None) -> dict[str, int]:
    return _state.allocator(_index(device)).stats()


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    return _state.allocator(_index(device)).summary(_state.target().name)


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of the logical core's HBM."""
    a = _state.allocator(_index(device))
    return (a.capacity - a.reserved, a.capacity)


def empty_cache() -> None:
    """Release the cached blocks of every core used so far."""
    for a in _state.allocators().values():
        a.empty_cache()


def memory_snapshot() -> dict:
    """Device allocations and frees recorded since ``record_memory_history()`` (see profiler)."""
    from .profiler import memory_snapshot as snapshot

    return snapshot()


def record_memory_history(enabled: str | bool | None = "all", max_entries: int = 100_000) -> None:
    """Start (``"all"``/``True``) or stop (``None``/``False``) recording the device's
    allocation history, as ``torch.cuda.memory._record_memory_history`` does."""
    from .profiler import record_memory_history as record

    return record(bool(enabled), max_entries=max_entries)


# ---- RNG -------------------------------------------------------------------------------------
def manual_seed(seed: int) -> None:
    """Seed the current core's generator (as torch.cuda.manual_seed)."""
    _rng.manual_seed(seed, _devices.current())


def manual_seed_all(seed: int) -> None:
    for i in range(_devices.count()):
        _rng.manual_seed(seed, i)


def seed() -> None:
    _rng.seed(_devices.current())


def seed_all() -> None:
    """Seed every core with one random seed."""
    s = _rng.seed(0)
    for i in range(1, _devices.count()):
        _rng.manual_seed(s, i)


def initial_seed() -> int:
    return _rng.initial_seed(_devices.current())


def get_rng_state(device: Any = "neuron") -> torch.Tensor:
    return _rng.get_state(_index(device))


def set_rng_state(new_state: torch.Tensor, device: Any = "neuron") -> None:
    _rng.set_state(new_state, _index(device))


def get_rng_state_all() -> list[torch.Tensor]:
    return [_rng.get_state(i) for i in range(_devices.count())]


def set_rng_state_all(new_states) -> None:
    for i, s in enumerate(new_states):
        _rng.set_state(s, i)


def __getattr__(name: str):
    # ``default_generators``, as torch.cuda's: a neuron torch.Generator needs the native hooks,
    # which are installed after this module is imported, so it is looked up on first use
    if name == "default_generators":
        from . import native

        if not native.available():
            raise AttributeError(native.missing_message("torch.neuron.default_generators"))
        return _rng.default_generators()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---- deferred errors (not in torch.cuda: useful for tests and tools) -------------------------
def has_pending_error() -> bool:
    return ERRORS.pending


# the streams API is re-exported from the runtime queue
_ = (Stream, Event, stream, current_stream, default_stream, set_stream)
