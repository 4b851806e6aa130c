"""The c10d backend ``neuron`` at world size 2: every collective, errors, timeouts (one launch)."""

from __future__ import annotations

import os

import pytest
from _launch import launch

CHECKS = [
    "all_reduce_sum", "all_reduce_avg", "all_reduce_min", "all_reduce_max", "all_reduce_product",
    "all_reduce_int64_and_bf16", "all_reduce_view", "broadcast", "all_gather_list",
    "all_gather_into_tensor", "reduce_scatter_tensor", "reduce_scatter_tensor_avg",
    "reduce_scatter_list", "reduce", "all_to_all_single_even", "all_to_all_single_uneven",
    "all_to_all_list", "gather", "scatter", "send_recv", "isend_irecv", "batch_isend_irecv",
    "barrier", "monitored_barrier", "async_work", "cpu_tensors_same_group", "object_collectives",
    "no_copy", "pending_device_error_surfaces", "mismatched_shape_error",
    "mismatched_dtype_error", "mismatched_collective_error", "new_group",
    "functional_collectives", "timeout_honoured",
]


@pytest.fixture(scope="module", params=["shared-memory", "gloo"])
def ranks(request):
    if request.param == "shared-memory" and not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm on this machine")
    # same-host ranks use the shared segment by default; groups across hosts use gloo's TCP
    env = {"TORCHNEURON_DIST_SHM": "0"} if request.param == "gloo" else None
    results = launch("collectives", 2, timeout=240, env=env)
    for r in results:
        assert r.get("uses_shared_memory") == (request.param == "shared-memory"), r.get("fatal")
    return results


def test_launch_succeeded(ranks):
    for r in ranks:
        assert r.get("fatal") is None, r.get("fatal") + r["_log"][-3000:]
        assert r["backend"] == "neuron" and r["pg_backend_name"] == "neuron"
        assert set(r["checks"]) == set(CHECKS), set(CHECKS) ^ set(r["checks"])


@pytest.mark.parametrize("name", CHECKS)
def test_collective(ranks, name):
    for rank, r in enumerate(ranks):
        assert r["checks"].get(name) == "ok", f"rank {rank}: {r['checks'].get(name)}"


def test_timeout_is_prompt(ranks):
    assert ranks[0]["timeout_seconds"] < 20
    assert "Timed out" in ranks[0]["timeout_message"] or "timeout" in ranks[0]["timeout_message"].lower()
