"""AOTAutograd's cache for the neuron backend (graph_cache.py): a new process rebuilds the
compiled graphs — nothing traced, partitioned or compiled — and computes what the first did; the
key changes with the options and the TORCHNEURON_* environment; the cache can be turned off."""

from __future__ import annotations

import copy
import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch

from torchneuron.compiler import get_metrics, reset_metrics

# Trains an MLP for three steps and prints the losses and the compile metrics as JSON.
_SCRIPT = textwrap.dedent(
    """
    import json
    import sys
    import torch
    from torch import nn
    import torchneuron.compiler as tc

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(model, backend="neuron")
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(3):
        x, y = torch.randn(8, 16, generator=g).to("neuron"), torch.randn(8, 4, generator=g).to("neuron")
        opt.zero_grad()
        loss = nn.functional.mse_loss(compiled(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    m = tc.get_metrics()
    from torchneuron.compiler.passes import decompositions
    print(json.dumps({"decomposition_tables": decompositions.cache_info().currsize, "losses": losses, "compiled": m["graphs_compiled"], "loaded": m["graphs_loaded"],
                      "records": [(r["kind"], r["loaded"], r["compiled_nodes"]) for r in m["graphs"].values()],
                      "inductor_codegen": [k for k in ("torch._inductor.codegen.cpp", "torch._inductor.codegen.triton",
                                                       "torch._inductor.codegen.wrapper") if k in sys.modules]}))
    """
)


def _run(tmp_path, **env_extra) -> dict:
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               TORCHNEURON_CACHE_DIR=str(tmp_path / "neuron"), **env_extra)
    env.pop("TORCHNEURON_DUMP_DIR", None)
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_new_process_loads_the_compiled_graphs_and_trains_alike(tmp_path):
    cold = _run(tmp_path)
    assert cold["compiled"] == 2 and cold["loaded"] == 0  # forward and backward
    warm = _run(tmp_path)
    assert warm["compiled"] == 0 and warm["loaded"] == 2
    assert warm["losses"] == cold["losses"]  # the same programs: the same bits
    # the key leaves out what only Inductor's code generators need (graph_cache_key.py): neither
    # process imports them (importing them all was ~1 s of a warm start)
    assert cold["inductor_codegen"] == warm["inductor_codegen"] == []
    # nothing is traced, so the decomposition table is not built either (backend._DecompositionTable)
    assert cold["decomposition_tables"] == 1 and warm["decomposition_tables"] == 0
    # a loaded graph keeps the record it was compiled with (its placement), marked loaded
    assert sorted(warm["records"]) == sorted([k, True, n] for k, _, n in cold["records"])
    off = _run(tmp_path, TORCHNEURON_GRAPH_CACHE="0")
    assert off["compiled"] == 2 and off["loaded"] == 0
    # `torchneuron cache clear --graphs` empties AOTAutograd's cache: the next process compiles
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               TORCHNEURON_CACHE_DIR=str(tmp_path / "neuron"))
    out = subprocess.run([sys.executable, "-m", "torchneuron.cli", "cache", "clear", "--graphs"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and "removed 1 AOTAutograd cache entries" in out.stdout, out.stdout + out.stderr
    assert _run(tmp_path)["loaded"] == 0


def test_other_options_or_environment_compile_again(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))

    def f(x):
        return torch.relu(x @ x.t()) + 1

    x = torch.randn(6, 6).to("neuron")

    def compile_and_run(**options):
        torch._dynamo.reset()
        reset_metrics()
        out = torch.compile(f, backend="neuron", options=options or None)(x)
        m = get_metrics()
        return out, m["graphs_compiled"], m["graphs_loaded"]

    first, compiled, loaded = compile_and_run()
    assert (compiled, loaded) == (1, 0)
    again, compiled, loaded = compile_and_run()
    assert (compiled, loaded) == (0, 1) and torch.equal(again.cpu(), first.cpu())
    _, compiled, loaded = compile_and_run(partition=False)
    assert (compiled, loaded) == (1, 0)
    monkeypatch.setenv("TORCHNEURON_LINK_REGIONS", "0")
    _, compiled, loaded = compile_and_run()
    assert (compiled, loaded) == (1, 0)
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path / "dump"))
    _, compiled, loaded = compile_and_run()  # a dump needs a compilation
    assert (compiled, loaded) == (1, 0) and any((tmp_path / "dump").iterdir())


def test_key_keeps_aotautograd_and_process_state(tmp_path, monkeypatch):
    """The lean key (graph_cache_key.py) still tells apart what AOTAutograd's own key does."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))

    def f(x):
        return torch.tanh(x) * 2

    x = torch.randn(5, 3).to("neuron")

    def counts(**patch):
        torch._dynamo.reset()
        reset_metrics()
        with torch._inductor.config.patch(**patch):
            out = torch.compile(f, backend="neuron")(x)
        torch.testing.assert_close(out.cpu(), f(x.cpu()))
        m = get_metrics()
        return m["graphs_compiled"], m["graphs_loaded"]

    assert counts() == (1, 0)
    assert counts() == (0, 1)
    torch.use_deterministic_algorithms(True)
    try:
        assert counts() == (1, 0)  # deterministic-algorithm settings are in the key
        assert counts() == (0, 1)
    finally:
        torch.use_deterministic_algorithms(False)
    assert counts(max_autotune=True) == (1, 0)  # Inductor's configuration still over-keys (cheap)
    assert counts() == (0, 1)
    with torch.no_grad():  # grad mode: AOTAutograd's own part of the key
        assert counts() == (1, 0)


def _compile_and_run(f, *args):
    torch._dynamo.reset()
    reset_metrics()
    out = torch.compile(f, backend="neuron")(*args)
    m = get_metrics()
    return out, m["graphs_compiled"], m["graphs_loaded"]


def test_graph_with_tensor_constants_is_stored_and_loaded(tmp_path, monkeypatch):
    """AOTAutograd pickles the compiled graph inside its fake mode; the constants made in the
    graph (``torch.tensor([...], device=x.device)``) are real device tensors, saved as such."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))

    def f(x):
        idx = torch.tensor([4, 6, 8, 9], device=x.device)
        return (x[idx] * 2).sum() + torch.tensor([1.5, 2.5], device=x.device)

    x = torch.arange(16.0)
    first, compiled, loaded = _compile_and_run(f, x.to("neuron"))
    assert (compiled, loaded) == (1, 0)
    again, compiled, loaded = _compile_and_run(f, x.to("neuron"))
    assert (compiled, loaded) == (0, 1)
    assert torch.equal(again.cpu(), f(x)) and torch.equal(first.cpu(), f(x))


def test_corrupt_or_truncated_entry_is_compiled_again_never_run(tmp_path, monkeypatch):
    """A flipped byte in a stored program fails the graph's checksum: warned about, the entry
    removed, the graph compiled again; a truncated entry is a miss for PyTorch and written again."""
    from torchneuron.compiler import graph_cache

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))

    def f(x):
        return torch.tanh(x @ x.t()) * 3 - 1

    x = torch.randn(6, 6)
    ref, compiled, _ = _compile_and_run(f, x.to("neuron"))
    assert compiled == 1
    (entry,) = [p for p in graph_cache.directory().glob("*/*") if p.is_file()]
    blob = bytearray(entry.read_bytes())
    at = blob.index(b"IREE") + 200  # inside the program's bytes: the pickles still load
    blob[at] ^= 0xFF
    entry.write_bytes(bytes(blob))
    with pytest.warns(RuntimeWarning, match="corrupt compile cache entry in AOTAutograd's cache"):
        out, compiled, loaded = _compile_and_run(f, x.to("neuron"))
    assert (compiled, loaded) == (1, 0) and not entry.exists()
    torch.testing.assert_close(out.cpu(), f(x), rtol=1e-5, atol=1e-5)
    _, compiled, loaded = _compile_and_run(f, x.to("neuron"))  # the bypassed one stored nothing: this one does
    assert (compiled, loaded) == (1, 0)
    (entry,) = [p for p in graph_cache.directory().glob("*/*") if p.is_file()]
    entry.write_bytes(entry.read_bytes()[:-1000])
    out, compiled, loaded = _compile_and_run(f, x.to("neuron"))
    assert (compiled, loaded) == (1, 0)
    assert torch.equal(out.cpu(), ref.cpu())
    again, compiled, loaded = _compile_and_run(f, x.to("neuron"))
    assert (compiled, loaded) == (0, 1) and torch.equal(again.cpu(), ref.cpu())


def test_compiled_graph_pickles_as_its_programs(tmp_path, monkeypatch):
    """The stored form of a compiled graph: the GraphModule with its programs' bytes; loaded
    again it runs without compiling and gives the same bits."""
    from torchneuron.compiler import graph_cache
    from torchneuron.compiler.graph_compiler import compile_graph
    from torchneuron.compiler.metrics import graph_record
    from torchneuron.compiler.settings import CompileOptions

    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", str(tmp_path))

    def f(x, w):
        return ((torch.tanh(x @ w) * 2).sum(1),)

    x, w = torch.randn(4, 5), torch.randn(5, 3)
    fn = compile_graph(torch.fx.symbolic_trace(f), "inference", CompileOptions.from_user(None))
    record = copy.deepcopy(graph_record(fn.torchneuron_graph_id))
    live = graph_cache.NeuronOutputCode(fn, "inference", record)
    expected = live([x.to("neuron"), w.to("neuron")])[0]
    stored = copy.copy(live)  # AOTAutograd's bundled cache prepares a shallow copy, then pickles it
    stored.prepare_for_serialization()
    assert live.fn is not None and stored.fn is None
    loaded = pickle.loads(pickle.dumps(stored))
    reset_metrics()
    loaded.post_compile([], None, {})
    got = loaded([x.to("neuron"), w.to("neuron")])[0]
    assert torch.equal(got.cpu(), expected.cpu())
    torch.testing.assert_close(got.cpu(), f(x, w)[0], rtol=1e-5, atol=1e-6)
    m = get_metrics()
    assert m["graphs_compiled"] == 0 and m["graphs_loaded"] == 1
    (rec,) = m["graphs"].values()
    assert rec["loaded"] and rec["placement"] == record.placement and rec["compiled_nodes"] == record.compiled_nodes


@pytest.mark.parametrize("value", ["0", "off"])
def test_switch_and_force_disable_caches(monkeypatch, value):
    from torchneuron.compiler import graph_cache

    monkeypatch.delenv("TORCHNEURON_GRAPH_CACHE", raising=False)
    assert graph_cache.enabled()
    with torch.compiler.config.patch(force_disable_caches=True):
        assert not graph_cache.enabled()
    monkeypatch.setenv("TORCHNEURON_GRAPH_CACHE", value)
    assert not graph_cache.enabled()
