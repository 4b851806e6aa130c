"""Profiling for the neuron device: device activity, torch.profiler integration, a Trainium
cost model, memory timeline and HTML reports. See docs/profiling.md."""

from __future__ import annotations

from . import integration
from .cost_model import ASSUMPTIONS, OpCost
from .estimate import Estimate, OpEstimate, estimate, from_events
from .memory import memory_snapshot, record_memory_history
from .recorder import DeviceEvent, MemoryEvent, Session, is_recording, record
from .trace import write_trace

integration.install()

__all__ = [
    "ASSUMPTIONS",
    "DeviceEvent",
    "Estimate",
    "MemoryEvent",
    "OpCost",
    "OpEstimate",
    "Session",
    "estimate",
    "from_events",
    "is_recording",
    "memory_snapshot",
    "record",
    "record_memory_history",
    "write_trace",
]
