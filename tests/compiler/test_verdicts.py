"""Lowering verdicts per node signature are remembered on disk for later processes."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch
import torch.fx as fx

from torchneuron.compiler import lowering, verdicts


@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", str(tmp_path))


def _new_process(monkeypatch) -> None:
    """What a new process starts with: no verdicts in memory."""
    monkeypatch.setattr(verdicts, "_loaded", None)
    monkeypatch.setattr(verdicts, "_pending", {})
    monkeypatch.setattr(lowering, "_cache", {})


def _add_node() -> fx.Node:
    def f(x, y):
        return x + y

    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(f, tracing_mode="fake")(torch.ones(3), torch.ones(3))
    return next(n for n in gm.graph.nodes if n.op == "call_function")


def test_a_later_process_reuses_the_verdict_without_probing(monkeypatch):
    _new_process(monkeypatch)
    node = _add_node()
    assert lowering.node_lowers(node)  # probed with torch-mlir, and remembered
    verdicts.flush()  # (the partitioner flushes once per graph)
    data = json.loads(verdicts.path().read_text())
    assert data[repr(lowering._key(node))] is True

    _new_process(monkeypatch)
    probes = []
    monkeypatch.setattr(lowering, "lower", lambda *a, **k: probes.append(a))
    assert lowering.node_lowers(node)
    assert probes == []


def test_a_damaged_file_is_ignored_and_rewritten(monkeypatch):
    _new_process(monkeypatch)
    verdicts.path().parent.mkdir(parents=True, exist_ok=True)
    verdicts.path().write_text("{not json")
    node = _add_node()
    assert lowering.node_lowers(node)
    verdicts.flush()
    assert json.loads(verdicts.path().read_text())[repr(lowering._key(node))] is True


def test_writes_merge_with_other_processes(monkeypatch):
    _new_process(monkeypatch)
    verdicts.put(("op.a", (), ()), True)
    verdicts.flush()
    # another process adds its own verdict to the file meanwhile
    data = json.loads(verdicts.path().read_text())
    data[repr(("op.b", (), ()))] = False
    verdicts.path().write_text(json.dumps(data))
    verdicts.put(("op.c", (), ()), True)
    verdicts.flush()
    merged = json.loads(verdicts.path().read_text())
    assert merged[repr(("op.a", (), ()))] is True
    assert merged[repr(("op.b", (), ()))] is False
    assert verdicts.get(("op.b", (), ())) is False


def test_without_the_disk_cache_verdicts_stay_in_memory(monkeypatch):
    _new_process(monkeypatch)
    monkeypatch.setenv("TORCHNEURON_CACHE", "0")
    verdicts.put(("op.memory", (), ()), True)
    verdicts.flush()
    assert verdicts.get(("op.memory", (), ())) is True
    assert not verdicts.path().exists() or repr(("op.memory", (), ())) not in verdicts.path().read_text()


def test_cache_clear_forgets_them(monkeypatch, capsys):
    from torchneuron.cli import main

    _new_process(monkeypatch)
    verdicts.put(("op.x", (), ()), True)
    verdicts.flush()
    assert verdicts.path().exists()
    assert main(["cache", "clear"]) == 0
    assert not verdicts.path().exists()
    assert "lowering verdicts" in capsys.readouterr().out
    assert verdicts.get(("op.x", (), ())) is None


def test_verdicts_are_per_shape_and_argument():
    from torch.fx.experimental.proxy_tensor import make_fx

    def nodes(f, *xs):
        gm = make_fx(f, tracing_mode="fake")(*xs)
        return [n for n in gm.graph.nodes if n.op == "call_function"]

    a = nodes(lambda x: torch.sum(x, 0), torch.ones(3, 4))[0]
    b = nodes(lambda x: torch.sum(x, 0), torch.ones(5, 4))[0]
    c = nodes(lambda x: torch.sum(x, 1), torch.ones(3, 4))[0]
    assert len({lowering._key(a), lowering._key(b), lowering._key(c)}) == 3


def test_shape_ops_on_0d_tensors_are_probed(monkeypatch):
    """unsqueeze/squeeze of a scalar lower (a scalar loss .unsqueeze(0)): they are not refused
    as the 0-d reductions that crash torch-mlir are."""
    from torch.fx.experimental.proxy_tensor import make_fx

    _new_process(monkeypatch)
    gm = make_fx(lambda x: torch.ops.aten.unsqueeze.default(x, 0), tracing_mode="fake")(torch.tensor(1.0))
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    assert not lowering.crashes_lowering(node)
    assert lowering.node_lowers(node)
    gm = make_fx(lambda x: torch.amax(x, [0], True), tracing_mode="fake")(torch.tensor(1.0))
    assert lowering.crashes_lowering(next(n for n in gm.graph.nodes if n.op == "call_function"))


def test_a_compiled_graph_leaves_its_verdicts_on_disk(monkeypatch):
    from helpers import DEVICE

    _new_process(monkeypatch)
    f = torch.compile(lambda x: torch.relu(x) * 2 + 1, backend="neuron")
    f(torch.randn(8, device=DEVICE))
    data = json.loads(verdicts.path().read_text())
    assert any("relu" in k for k in data)


def _mixed_graph() -> fx.GraphModule:
    """Many distinct node signatures, two of which torch-mlir does not lower (a custom op)."""
    from test_partition import soft_clip
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        outs = []
        for n in range(2, 14):
            y = x[:n].relu() * 2.0 + 1.0
            outs.append(soft_clip(y, 1.5) if n in (5, 11) else y.exp())
        return outs

    return make_fx(f, tracing_mode="fake")(torch.randn(16, 8))


def test_batched_probes_give_the_verdicts_of_single_probes(monkeypatch):
    gm = _mixed_graph()
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    _new_process(monkeypatch)
    alone = {n.name: lowering.node_lowers(n) for n in nodes}
    assert sum(not ok for ok in alone.values()) == 2  # the two custom-op nodes

    _new_process(monkeypatch)
    real, lowerings = lowering.lower, []

    def counted(gm, *args, **kwargs):
        lowerings.append(sum(1 for n in gm.graph.nodes if n.op == "call_function"))
        return real(gm, *args, **kwargs)

    monkeypatch.setattr(lowering, "lower", counted)
    lowering.probe_nodes(nodes)
    probes = len(lowerings)
    batched = {n.name: lowering.node_lowers(n) for n in nodes}  # answered from the cache
    assert batched == alone
    assert len(lowerings) == probes < len(nodes) // 2


def _count_forks(monkeypatch) -> list:
    forks, real = [], os.fork

    def counted():
        forks.append(1)
        return real()

    monkeypatch.setattr(os, "fork", counted)
    return forks


def test_a_failing_batch_is_probed_node_by_node_in_one_child(monkeypatch):
    """Halving a failing batch cost up to 2n - 1 forked probes when most nodes fail; the nodes
    of a failing batch are now judged one by one in a single child."""
    gm = _mixed_graph()
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    _new_process(monkeypatch)
    alone = {n.name: lowering.node_lowers(n) for n in nodes}

    _new_process(monkeypatch)
    forks = _count_forks(monkeypatch)
    lowering.probe_nodes(nodes)
    assert {n.name: lowering.node_lowers(n) for n in nodes} == alone
    assert len(forks) == 2  # the batch, then its nodes one by one


def test_a_crash_in_the_node_by_node_child_judges_only_that_node(monkeypatch):
    gm = _mixed_graph()
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"][:12]
    victim = nodes[5]
    real = lowering.lower

    def crashing(g, *args, **kwargs):
        if kwargs.get("isolate") is None and any(n.name == victim.name for n in g.graph.nodes):
            os.kill(os.getpid(), signal.SIGSEGV)  # in the child only: the parent passes isolate
        return real(g, *args, **kwargs)

    _new_process(monkeypatch)
    monkeypatch.setattr(lowering, "lower", crashing)
    forks = _count_forks(monkeypatch)
    got = lowering._lower_each_isolated(nodes)
    assert got[5] is False
    assert got[:5] + got[6:] == [True] * 11  # slices, multiplications, additions, exps: all lower
    assert len(forks) == 3  # up to the crash, the crashing node alone, the rest
