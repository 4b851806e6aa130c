"""Creating the group: env:// under torchrun, the default device map, mixed maps, dead ranks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from _launch import REPO, free_port, launch


def _ok(ranks):
    for rank, r in enumerate(ranks):
        assert r.get("fatal") is None, r.get("fatal")
        bad = {k: v for k, v in r["checks"].items() if v != "ok"}
        assert not bad, f"rank {rank}: {bad}"


def test_default_device_map_picks_neuron():
    ranks = launch("default_backend", 2)
    _ok(ranks)
    assert ranks[0]["default_map_neuron"] == "neuron"


def test_cpu_gloo_neuron_neuron():
    _ok(launch("mixed", 2))


def test_dead_rank_raises_promptly():
    ranks = launch("dead_rank", 2, timeout=60)
    assert ranks[0]["checks"]["raised"] == "ok", ranks[0]
    assert ranks[0]["seconds"] < 10


def test_registered_at_package_import():
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent("""
            import torch, torch.distributed as dist, torchneuron.distributed
            print(dist.Backend.default_device_backend_map["neuron"],
                  dist.Backend.default_device_backend_map["cpu"], dist.Backend.NEURON)
        """)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["neuron", "gloo", "neuron"]


TORCHRUN_SCRIPT = textwrap.dedent("""
    import os, torch, torch.distributed as dist
    import torchneuron.distributed
    dist.init_process_group("neuron")
    t = torch.full((4,), float(dist.get_rank() + 1), device="neuron")
    dist.all_reduce(t)
    assert t.device.type == "neuron"
    assert t.cpu().tolist() == [3.0] * 4, t
    print("RANK", os.environ["RANK"], "LOCAL_RANK", os.environ["LOCAL_RANK"], "OK", flush=True)
    dist.destroy_process_group()
""")


@pytest.mark.slow  # the fast tier covers torchrun env:// with test_multinode.py
def test_torchrun_env_init(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TORCHRUN_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
         "--master-addr=127.0.0.1", f"--master-port={free_port()}", str(script)],
        capture_output=True, text=True, env=env, timeout=180,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("OK") == 2


@pytest.mark.slow
def test_collectives_world_size_4():
    ranks = launch("collectives", 4, timeout=400)
    _ok(ranks)
