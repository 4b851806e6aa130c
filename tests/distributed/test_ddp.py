"""DDP on neuron at world size 2 matches a single-process reference (one launch)."""

from __future__ import annotations

import pytest
from _launch import launch

PINNED = (
    "DDP's Reducer copies the used-parameter map through a pinned CPU tensor for PrivateUse1 "
    "devices; torchneuron's PrivateUse1 hooks (Python) cannot provide getPinnedMemoryAllocator"
)


@pytest.fixture(scope="module")
def ranks():
    return launch("ddp", 2, timeout=240)


@pytest.mark.parametrize(
    "name",
    [
        "ddp_basic",
        "ddp_small_buckets",
        "ddp_no_sync",
        pytest.param("ddp_find_unused", marks=pytest.mark.xfail(reason=PINNED, strict=True)),
        pytest.param("ddp_static_graph", marks=pytest.mark.xfail(reason=PINNED, strict=True)),
    ],
)
def test_ddp_matches_reference(ranks, name):
    for rank, r in enumerate(ranks):
        assert r.get("fatal") is None, r.get("fatal")
        assert r["checks"].get(name) == "ok", f"rank {rank}: {r['checks'].get(name)}"
