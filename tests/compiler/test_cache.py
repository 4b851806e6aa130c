"""The executable cache: warm starts, corrupt entries, concurrent processes.

These tests run with AOTAutograd's cache of whole compiled graphs off (graph_cache.py, tested in
test_graph_cache.py): it sits in front of the executable cache, so a warm graph would never reach
the executable cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from torchneuron.compiler.cache import ExecutableCache, cache_key

# A script compiling and training a small model for two steps; prints the metrics as JSON.
_SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    import torch.nn.functional as F
    sys.path.insert(0, {tests!r})
    from models import MLP
    torch.manual_seed(0)
    model = MLP().to("neuron")
    compiled = torch.compile(model, backend="neuron")
    x = torch.randn(8, 32, device="neuron")
    y = torch.randint(0, 10, (8,), device="neuron")
    for _ in range(2):
        F.cross_entropy(compiled(x), y).backward()
    import torchneuron.compiler as tnc
    m = tnc.get_metrics()
    print("METRICS " + json.dumps({{k: v for k, v in m.items() if k != "graphs"}}))
    print("GRAD " + repr(float(model.net[0].weight.grad.abs().sum().cpu())))
    """
)


@pytest.fixture(autouse=True)
def _executable_cache_only(monkeypatch):
    monkeypatch.setenv("TORCHNEURON_GRAPH_CACHE", "0")


def _run(cache_dir: Path, wait: bool = True):
    env = dict(os.environ, TORCHNEURON_CACHE_DIR=str(cache_dir), TORCHNEURON_GRAPH_CACHE="0")
    env.pop("TORCHNEURON_DUMP_DIR", None)
    code = _SCRIPT.format(tests=str(Path(__file__).parent))
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return _result(proc) if wait else proc


def _result(proc):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    metrics = json.loads(next(ln for ln in out.splitlines() if ln.startswith("METRICS "))[8:])
    grad = float(next(ln for ln in out.splitlines() if ln.startswith("GRAD "))[5:])
    return metrics, grad, err


def test_warm_start_in_a_new_process_compiles_nothing(tmp_path):
    cold, grad_cold, _ = _run(tmp_path)
    assert cold["cache_misses"] == 2 and cold["compile_seconds"] > 0
    assert cold["lowering_cache_hits"] == 0
    warm, grad_warm, _ = _run(tmp_path)
    assert warm["cache_misses"] == 0 and warm["cache_hits"] == 2
    assert warm["compile_seconds"] == 0
    assert warm["lowering_cache_hits"] == 2  # torch-mlir did not run either
    assert grad_warm == grad_cold


def test_lowering_cache_key_and_corrupt_entry(tmp_path, monkeypatch):
    """The lowered StableHLO is found again for the same region; a different input shape or
    constant is a different key; a corrupt entry is reported and the region lowered again."""
    from torchneuron.compiler.lowering_cache import LOWERED, lower_region, region_key

    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", str(tmp_path))

    def region(shape, constant):
        from torch.fx.experimental.proxy_tensor import make_fx

        # an ATen graph reading ``constant`` through a get_attr node
        return make_fx(lambda x: torch.tanh(x) * constant.sum())(torch.zeros(shape))

    keys = {region_key(region((4, 3), torch.ones(2))) for _ in range(2)}
    assert len(keys) == 1
    assert region_key(region((4, 5), torch.ones(2))) not in keys
    assert region_key(region((4, 3), torch.zeros(2))) not in keys
    traced = region((4, 3), torch.ones(2))
    lowered, source = lower_region(traced)
    assert source == "compiled" and "stablehlo.tanh" in lowered.text
    LOWERED.clear_memory()
    again, source = lower_region(traced)
    assert source == "disk" and again.text == lowered.text
    (entry,) = LOWERED.entries()
    Path(entry["path"]).write_bytes(Path(entry["path"]).read_bytes()[:-10])
    LOWERED.clear_memory()
    with pytest.warns(RuntimeWarning, match="corrupt compile cache entry"):
        fresh, source = lower_region(traced)
    assert source == "compiled" and fresh.text == lowered.text


def test_corrupt_entry_is_detected_and_recompiled(cache_root):
    import torch

    from torchneuron.compiler import get_metrics, reset_metrics
    from torchneuron.compiler.cache import CACHE

    def f(x, w):
        return torch.tanh(x @ w) * 3 - 1

    x, w = torch.randn(6, 5, device="neuron"), torch.randn(5, 7, device="neuron")
    ref = torch.compile(f, backend="neuron")(x, w).cpu()
    entries = {e["path"] for e in CACHE.entries()}
    torch._dynamo.reset()
    CACHE.clear_memory()
    reset_metrics()
    # truncate every entry, then flip one byte in the payload of the rewritten entry
    for p in entries:
        data = Path(p).read_bytes()
        Path(p).write_bytes(data[: len(data) // 2])
    with pytest.warns(RuntimeWarning, match="corrupt compile cache entry"):
        out = torch.compile(f, backend="neuron")(x, w)
    torch.testing.assert_close(out.cpu(), ref)
    m = get_metrics()
    assert m["corrupt_cache_entries"] >= 1 and m["cache_misses"] == 1
    (path,) = [e["path"] for e in CACHE.entries() if e.get("graph") == next(iter(m["graphs"]))]
    blob = bytearray(Path(path).read_bytes())
    blob[-100] ^= 0xFF
    Path(path).write_bytes(bytes(blob))
    torch._dynamo.reset()
    CACHE.clear_memory()
    reset_metrics()
    with pytest.warns(RuntimeWarning, match="checksum"):
        out = torch.compile(f, backend="neuron")(x, w)
    torch.testing.assert_close(out.cpu(), ref)
    assert get_metrics()["cache_misses"] == 1


@pytest.mark.slow
def test_two_processes_compiling_the_same_graph_compile_it_once(tmp_path):
    procs = [_run(tmp_path, wait=False) for _ in range(2)]
    results = [_result(p) for p in procs]
    assert sum(m["cache_misses"] for m, _, _ in results) == 2  # fwd + bwd, once in total
    assert sum(m["cache_hits"] for m, _, _ in results) == 2
    assert results[0][1] == results[1][1]


def test_cache_unit_roundtrip_and_corruption(tmp_path):
    cache = ExecutableCache(tmp_path, use_disk=True)
    key = cache_key("module {}", "v1", ("--flag",), "trn2")
    assert key != cache_key("module {}", "v2", ("--flag",), "trn2")
    assert key != cache_key("module {}", "v1", ("--other",), "trn2")
    assert key != cache_key("module {}", "v1", ("--flag",), "trn3")
    calls = []

    def compile_fn():
        calls.append(1)
        return b"\x00payload" * 100

    assert cache.get_or_compile(key, compile_fn, {}).source == "compiled"
    assert cache.get_or_compile(key, compile_fn, {}).source == "memory"
    fresh = ExecutableCache(tmp_path, use_disk=True)
    assert fresh.get_or_compile(key, compile_fn, {}).source == "disk"
    assert len(calls) == 1
    path = fresh.path(key)
    path.write_bytes(b"garbage")
    fresh.clear_memory()
    with pytest.warns(RuntimeWarning, match="corrupt compile cache entry"):
        assert fresh.get_or_compile(key, compile_fn, {}).source == "compiled"
    assert len(calls) == 2
    assert [e["key"] for e in fresh.entries()] == [key]
    assert not list(path.parent.glob("*.tmp"))
    assert fresh.clear_disk() == 1


def test_cache_cli_list_stats_clear(tmp_path, monkeypatch, capsys):
    from torchneuron import cli

    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", str(tmp_path / "cli_cache"))
    torch._dynamo.reset()
    f = torch.compile(lambda x: x * 3 + 1, backend="neuron")
    f(torch.ones(4, device="neuron"))
    assert cli.main(["cache", "stats"]) == 0
    out = capsys.readouterr().out
    assert "entries: 1 (0 corrupt)" in out and "lowered regions: 1 (0 corrupt)" in out
    assert cli.main(["cache", "list"]) == 0
    assert "1 entries in" in capsys.readouterr().out
    assert cli.main(["cache", "clear"]) == 0
    out = capsys.readouterr().out
    assert "removed 1 entries" in out and "removed 1 lowered regions" in out
    cli.main(["cache", "stats"])
    assert "entries: 0" in capsys.readouterr().out
