"""The process's one simulated logical NeuronCore: its target figures and allocator."""

from __future__ import annotations

from functools import lru_cache

from .memory import DeviceAllocator, NativeAccounts
from .target import Target, target_from_env


@lru_cache(maxsize=1)
def target() -> Target:
    return target_from_env()


@lru_cache(maxsize=1)
def allocator() -> DeviceAllocator:
    from ..native import fast

    mod = fast.module()  # the C++ eager kernels adopt device memory too: one set of accounts
    alloc = DeviceAllocator(target().hbm_bytes, accounts=None if mod is None else NativeAccounts(mod))
    alloc.on_observers_changed = fast.refresh  # memory observers must see every allocation
    return alloc
