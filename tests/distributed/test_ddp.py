"""DDP on neuron at world size 2 matches a single-process reference (one launch)."""

from __future__ import annotations

import pytest
from _launch import launch, needs_native_hooks


@pytest.fixture(scope="module")
def ranks():
    return launch("ddp", 2, timeout=240)


@pytest.mark.parametrize(
    "name",
    [
        "ddp_basic",
        "ddp_small_buckets",
        "ddp_no_sync",
        pytest.param("ddp_find_unused", marks=needs_native_hooks()),
        pytest.param("ddp_static_graph", marks=needs_native_hooks()),
    ],
)
def test_ddp_matches_reference(ranks, name):
    for rank, r in enumerate(ranks):
        assert r.get("fatal") is None, r.get("fatal")
        assert r["checks"].get(name) == "ok", f"rank {rank}: {r['checks'].get(name)}"
