"""The shared-memory transport of the ``neuron`` backend (ranks on one host), at 2 and 3 ranks."""

from __future__ import annotations

import os

import pytest
from _launch import launch

if not os.access("/dev/shm", os.W_OK):  # the transport's precondition (else gloo carries all)
    pytest.skip("no writable /dev/shm on this machine", allow_module_level=True)

CHECKS = [
    "all_reduce_sum", "all_reduce_max", "all_reduce_min", "all_reduce_avg",
    "all_reduce_premul_sum_and_product", "all_reduce_strided", "broadcast",
    "all_gather_into_tensor_and_list", "reduce_scatter_tensor", "mismatch_on_segment_and_on_gloo",
    "order_with_async_gloo_collectives", "barrier_and_gloo_group",
]


@pytest.fixture(scope="module", params=[2, 3], ids=["2ranks", "3ranks"])
def ranks(request):
    return launch("shm", request.param, timeout=300)


def test_launch_succeeded(ranks):
    for r in ranks:
        assert r.get("fatal") is None, r.get("fatal") + r["_log"][-3000:]
        assert r["uses_shared_memory"], "the ranks did not set up a shared segment"
        assert r["leftover_segments"] == [], "the segment's name must be unlinked once mapped"
        assert set(r["checks"]) == set(CHECKS), set(CHECKS) ^ set(r["checks"])


@pytest.mark.parametrize("name", CHECKS)
def test_shared_memory(ranks, name):
    for rank, r in enumerate(ranks):
        assert r["checks"].get(name) == "ok", f"rank {rank}: {r['checks'].get(name)}"
