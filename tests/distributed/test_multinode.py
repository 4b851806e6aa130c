"""Two torchrun "nodes" (``--nnodes=2``, one process each, rendezvous on 127.0.0.1) train DDP
together on ``neuron`` and match a single-process reference."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch
from _launch import HERE, REPO, free_port
from ddp_cases import Net, _reference


def test_two_torchrun_nodes_train_ddp_together(tmp_path):
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    nodes = []
    for node in range(2):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={node}",
               "--nproc-per-node=1", "--master-addr=127.0.0.1", f"--master-port={port}",
               "--max-restarts=0", str(HERE / "multinode_worker.py"), str(tmp_path)]
        nodes.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    logs = []
    try:
        for p in nodes:
            logs.append(p.communicate(timeout=240)[0])
    finally:
        for p in nodes:
            if p.poll() is None:
                p.kill()
    for p, log in zip(nodes, logs, strict=True):
        assert p.returncode == 0, log[-4000:]

    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [(r["rank"], r["node_rank"], r["local_rank"], r["world"]) for r in ranks] == [
        (0, 0, 0, 2), (1, 1, 0, 2)]
    assert {r["backend"] for r in ranks} == {"neuron"}

    torch.manual_seed(0)
    ref = _reference(Net(), 1, 2)  # the full batch on one process, on neuron
    for r in ranks:
        for k, v in ref.items():
            got = torch.tensor(r["params"][k])
            # float32 summation order only (see parallel_cases.py for the tolerance argument)
            assert torch.allclose(got, v, atol=1e-5, rtol=0), (r["rank"], k, (got - v).abs().max())
