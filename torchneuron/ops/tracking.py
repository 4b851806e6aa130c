"""Operator placement tracking: which ATen operators ran on the device, which fell back.

``get_executed_ops()`` and ``get_fallback_ops()`` use TorchNeuron's names; counts are per
``aten::name.overload`` since the last ``clear_op_tracking()``.
"""

from __future__ import annotations

from collections import Counter

from ..native import fast

_executed: Counter[str] = Counter()
_fallback: Counter[str] = Counter()
_transfers: Counter[str] = Counter()


def executed(name: str) -> None:
    _executed[name] += 1


def fell_back(name: str) -> None:
    _fallback[name] += 1


def transfer(direction: str, nbytes: int) -> None:
    """Count an explicit copy between host and device memory ("host_to_device" / "device_to_host")."""
    _transfers[direction + "_bytes"] += nbytes
    _transfers[direction + "_count"] += 1


def transfer_stats() -> dict[str, int]:
    """Explicit host<->device copies since the last clear: counts and bytes per direction."""
    keys = ("host_to_device_count", "host_to_device_bytes", "device_to_host_count", "device_to_host_bytes")
    return {k: _transfers.get(k, 0) for k in keys}


def get_executed_ops() -> dict[str, int]:
    """Operators executed on the NeuronCore since the last clear, with counts."""
    executed = Counter(_executed)
    executed.update(fast.counts())  # calls the C++ kernels ran without entering Python
    return dict(executed)


def get_fallback_ops() -> dict[str, int]:
    """Operators that ran on the CPU (fallback) since the last clear, with counts."""
    return dict(_fallback)


def clear_op_tracking() -> None:
    _executed.clear()
    fast.clear_counts()
    _fallback.clear()
    _transfers.clear()
