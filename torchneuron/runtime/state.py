"""The process's one simulated logical NeuronCore: its target figures and allocator."""

from __future__ import annotations

from functools import lru_cache

from .memory import DeviceAllocator
from .target import Target, target_from_env


@lru_cache(maxsize=1)
def target() -> Target:
    return target_from_env()


@lru_cache(maxsize=1)
def allocator() -> DeviceAllocator:
    return DeviceAllocator(target().hbm_bytes)
