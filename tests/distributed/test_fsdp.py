"""FSDP2 on neuron matches a single-process reference (needs the native storage-resize hook)."""

from __future__ import annotations

import pytest
from _launch import launch


@pytest.mark.slow
def test_fully_shard_matches_reference():
    ranks = launch("fsdp", 2, timeout=240)
    for r in ranks:
        assert r.get("fatal") is None, r.get("fatal")
        assert r["checks"]["fsdp2_fully_shard"] == "ok", r["checks"]["fsdp2_fully_shard"]
