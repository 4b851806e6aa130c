"""The process's simulated logical NeuronCores: the target's figures and one allocator per core."""

from __future__ import annotations

from functools import lru_cache

from .memory import DeviceAllocator, NativeAccounts
from .target import Target, target_from_env


@lru_cache(maxsize=1)
def target() -> Target:
    return target_from_env()


_allocators: dict[int, DeviceAllocator] = {}


def allocator(index: int = 0) -> DeviceAllocator:
    """Core ``index``'s device memory (each core has the target's per-core capacity)."""
    alloc = _allocators.get(index)
    if alloc is None:
        from ..native import fast

        mod = fast.module()  # the C++ eager kernels adopt device memory too: one set of accounts
        accounts = None if mod is None else NativeAccounts(mod, index)
        alloc = DeviceAllocator(target().hbm_bytes, accounts=accounts, index=index)
        alloc.on_observers_changed = fast.refresh  # memory observers must see every allocation
        alloc = _allocators.setdefault(index, alloc)
    return alloc


def allocators() -> dict[int, DeviceAllocator]:
    """The allocators of the cores used so far, by core index."""
    return dict(_allocators)
