"""TORCHNEURON_PRECOMPILE=1: a new process starts from Dynamo's stored packages and torchneuron's
serialised graphs — nothing traced, nothing compiled — and computes what the first process did."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

pytest.importorskip("torch_mlir", reason="the compile extra is not installed")
pytest.importorskip("iree.compiler", reason="the compile extra is not installed")

# Trains an MLP (hidden size argv[1]) for one step per batch size in argv[2] ("8,8,5") and prints
# the losses and torchneuron's compile metrics as JSON.
_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    from torch import nn
    import torchneuron.compiler as tc

    hidden = int(sys.argv[1])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, hidden), nn.GELU(), nn.Linear(hidden, 4)).to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(model, backend="neuron")
    losses = []
    for b in map(int, sys.argv[2].split(",")):
        g = torch.Generator().manual_seed(b)
        x, y = torch.randn(b, 16, generator=g).to("neuron"), torch.randn(b, 4, generator=g).to("neuron")
        opt.zero_grad()
        loss = nn.functional.mse_loss(compiled(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    m = tc.get_metrics()
    print(json.dumps({"losses": losses, "compiled": m["graphs_compiled"],
                      "loaded": m["graphs_loaded"]}))
    """
)


def _run(tmp_path, hidden: int, batches: str) -> dict:
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    env = dict(os.environ, TORCHNEURON_PRECOMPILE="1", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               TORCHNEURON_CACHE_DIR=str(tmp_path / "neuron"))
    res = subprocess.run([sys.executable, str(script), str(hidden), batches], capture_output=True, text=True,
                         timeout=600, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def _reference(hidden: int, batches: str) -> list[float]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, hidden), nn.GELU(), nn.Linear(hidden, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for b in map(int, batches.split(",")):
        g = torch.Generator().manual_seed(b)
        x, y = torch.randn(b, 16, generator=g), torch.randn(b, 4, generator=g)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_a_new_process_loads_instead_of_compiling(tmp_path):
    cold = _run(tmp_path, 32, "8,8,8")
    assert cold["compiled"] == 2 and cold["loaded"] == 0  # forward and backward
    warm = _run(tmp_path, 32, "8,8,8")
    assert warm["compiled"] == 0 and warm["loaded"] == 2
    assert warm["losses"] == cold["losses"]  # the same programs: bit-identical
    torch.testing.assert_close(cold["losses"], _reference(32, "8,8,8"), rtol=1e-5, atol=1e-6)
    # `torchneuron cache clear --precompile` forgets the packages: the next process compiles
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               TORCHNEURON_CACHE_DIR=str(tmp_path / "neuron"))
    out = subprocess.run([sys.executable, "-m", "torchneuron.cli", "cache", "clear", "--precompile"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and "removed 1 precompiled packages" in out.stdout, out.stdout + out.stderr
    assert _run(tmp_path, 32, "8")["loaded"] == 0


def test_models_with_the_same_forward_keep_their_own_packages(tmp_path):
    """Two nn.Sequential share `Sequential.forward`, PyTorch's whole package key: each model
    must load its own graphs (the other's would fail its guards)."""
    a_cold, b_cold = _run(tmp_path, 32, "8"), _run(tmp_path, 48, "8")
    a_warm, b_warm = _run(tmp_path, 32, "8"), _run(tmp_path, 48, "8")
    assert b_cold["compiled"] == 2  # not A's package
    assert (a_warm["compiled"], a_warm["loaded"], b_warm["compiled"], b_warm["loaded"]) == (0, 2, 0, 2)
    assert a_warm["losses"] == a_cold["losses"] and b_warm["losses"] == b_cold["losses"]
    assert a_cold["losses"] != b_cold["losses"]


def test_a_new_shape_after_a_load_compiles_it(tmp_path):
    """A frame recompiled after a package load must not collide with the names the package
    installed (PyTorch 2.14 stops with "Name '__builtins_dict___0' already exists in scope")."""
    _run(tmp_path, 32, "8")
    mixed = _run(tmp_path, 32, "8,5")
    assert mixed["loaded"] == 2 and mixed["compiled"] == 2
    torch.testing.assert_close(mixed["losses"], _reference(32, "8,5"), rtol=1e-5, atol=1e-6)


def test_a_failed_store_warns_and_the_step_goes_on(monkeypatch):
    from torch._dynamo.precompile_context import PrecompileContext

    from torchneuron.compiler import precompile

    def broken():
        raise OSError("disk full")

    monkeypatch.setattr(PrecompileContext, "save_to_dynamo_cache", broken)
    with pytest.warns(RuntimeWarning, match="could not be stored for the next process.*disk full"):
        precompile._save()
