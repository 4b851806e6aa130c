"""Shared fixtures: the neuron device is registered by `import torch` (entry point)."""

from __future__ import annotations

import gc

import pytest


@pytest.fixture
def no_garbage():
    """Collect earlier tests' reference cycles and pause the cyclic collector for the test, so
    that device-memory accounting (``memory_allocated() == before``) sees only the test's own
    tensors: a collection in the middle of a test freed an earlier test's tensors once (192 -> 88
    bytes allocated across a ``del``)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture
def small_hbm(no_garbage):
    """Temporarily shrink the simulated HBM so that OOM paths are cheap to reach."""
    from torchneuron.runtime import state

    alloc = state.allocator()
    saved = alloc.capacity
    alloc.empty_cache()
    alloc.capacity = alloc.reserved + 64 * 1024 * 1024
    try:
        yield alloc
    finally:
        alloc.capacity = saved


@pytest.fixture(autouse=True)
def _no_pending_device_error():
    """Every test starts and ends with an empty device error slot."""
    from torchneuron.runtime.errors import ERRORS

    ERRORS.take()
    yield
    leftover = ERRORS.take()
    assert leftover is None, f"test left a pending device error: {leftover and leftover.cause}"


@pytest.fixture(scope="session", autouse=True)
def _private_inductor_cache(tmp_path_factory):
    """AOTAutograd's cache (where compiled graphs are stored, compiler/graph_cache.py) of this
    test session only: a run does not start from graphs an earlier run stored."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor_cache")))
        yield
