"""FSDP2, DeviceMesh, DTensor, TP/SP, pipelining and DCP on neuron vs single-process references.

One launch per world size serves every check (see ``parallel_cases.py`` for the models, the
references and the tolerances). World size 2 runs in ``make test``; world size 4 (which adds the
2-D mesh and FSDP2 + TP) is in the slow set.
"""

from __future__ import annotations

import pytest
from _launch import launch, needs_native_hooks

CHECKS = [
    "device_mesh_1d", "dtensor_distribute_full_tensor", "dtensor_redistribute", "dtensor_ops",
    "dtensor_autograd", "fsdp2_fully_shard", "fsdp2_no_reshard_after_forward",
    "fsdp2_mixed_precision_bf16", "fsdp2_grad_clipping", "tensor_parallel_block",
    "sequence_parallel_block", "pipeline_gpipe", "pipeline_1f1b", "dcp_fsdp2_save_load_bit_exact",
]
CHECKS_4 = CHECKS + ["device_mesh_2d", "fsdp2_tp_2d"]


def _run(nprocs, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"parallel{nprocs}")  # shared by the ranks (DCP checkpoint)
    ranks = launch("parallel", nprocs, timeout=300 * nprocs // 2, args=[str(tmp)])
    for rank, r in enumerate(ranks):
        assert r.get("fatal") is None, f"rank {rank}: {r.get('fatal')}\n{r['_log'][-3000:]}"
    return ranks


@pytest.fixture(scope="module")
def ranks2(tmp_path_factory):
    return _run(2, tmp_path_factory)


@pytest.fixture(scope="module")
def ranks4(tmp_path_factory):
    return _run(4, tmp_path_factory)


NATIVE = {"fsdp2_fully_shard", "fsdp2_no_reshard_after_forward", "fsdp2_mixed_precision_bf16",
          "fsdp2_grad_clipping", "dcp_fsdp2_save_load_bit_exact", "fsdp2_tp_2d"}


def _params(names):
    return [pytest.param(n, marks=needs_native_hooks()) if n in NATIVE else n for n in names]


def _check(ranks, name):
    for rank, r in enumerate(ranks):
        assert r["checks"].get(name) == "ok", f"rank {rank}: {r['checks'].get(name)}"


def test_every_check_ran(ranks2):
    for r in ranks2:
        assert set(r["checks"]) == set(CHECKS), set(CHECKS) ^ set(r["checks"])


@pytest.mark.parametrize("name", _params(CHECKS))
def test_world_size_2(ranks2, name):
    _check(ranks2, name)


@needs_native_hooks()
def test_fsdp2_frees_unsharded_parameters(ranks2):
    # after a step: sharded parameters + sharded gradients, measured exactly by the allocator
    grown, sharded = ranks2[0]["fsdp2_memory"]
    assert grown == 2 * sharded


@pytest.mark.slow
@pytest.mark.parametrize("name", _params(CHECKS_4))
def test_world_size_4(ranks4, name):
    _check(ranks4, name)
