"""FSDP2 on neuron: blocked (see docs/distributed.md), kept as a strict xfail in the slow set."""

from __future__ import annotations

import pytest
from _launch import launch


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="FSDP2 frees/reallocates unsharded parameters with untyped_storage().resize_(), "
    "which needs PrivateUse1HooksInterface::resizePrivateUse1Bytes; the Python hooks cannot "
    "provide it",
)
def test_fully_shard_matches_reference():
    ranks = launch("fsdp", 2, timeout=240)
    for r in ranks:
        assert r.get("fatal") is None, r.get("fatal")
        assert r["checks"]["fsdp2_fully_shard"] == "ok", r["checks"]["fsdp2_fully_shard"]
