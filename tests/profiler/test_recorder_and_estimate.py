"""Device activity recording: nothing when off, events with stream/bytes/flops when on."""

from __future__ import annotations

import pytest
import torch

import torchneuron.profiler as tnp
from torchneuron.runtime import activity, state


def test_no_recorder_when_no_profiler_is_active():
    assert activity.RECORDER is None and not tnp.is_recording()
    observers = list(state.allocator().observers)
    x = torch.randn(32, 32, device="neuron")
    (x @ x).relu().sum().cpu()
    assert activity.RECORDER is None
    assert state.allocator().observers == observers
    with tnp.record() as s:
        assert activity.RECORDER is not None
    assert activity.RECORDER is None and state.allocator().observers == observers
    assert s.events == []


def test_nothing_installed_when_off():
    """With no profiler the device's only cost is its one ``RECORDER is None`` check: after a
    session neither the activity recorder nor an allocator observer is left installed, and
    device work done then is not recorded. (Timing belongs in bench/, not in unit tests.)"""
    from torchneuron.runtime import state

    x = torch.randn(8, 8, device="neuron")
    observers_before = list(state.allocator().observers)
    with tnp.record() as s:
        torch.add(x, x)
    n = len(s.events)
    assert activity.RECORDER is None
    assert state.allocator().observers == observers_before
    torch.add(x, x)
    assert len(s.events) == n


def test_events_have_kind_stream_bytes_flops():
    a = torch.randn(64, 128)
    with tnp.record() as s:
        x = a.to("neuron")
        side = torch.neuron.Stream()
        with torch.neuron.stream(side):
            y = x @ x.t()
        z = y.relu()
        z.cpu()
    kinds = [e.kind for e in s.events]
    assert kinds[0] == "copy_h2d" and kinds[-1] == "copy_d2h"
    mm = next(e for e in s.events if e.name == "aten::mm")
    assert mm.stream == side.stream_id != 0
    assert mm.flops == 2 * 64 * 128 * 64
    assert mm.bytes_moved == (64 * 128 * 2 + 64 * 64) * 4
    relu = next(e for e in s.events if e.name.startswith("aten::relu"))
    assert relu.stream == 0 and relu.flops == 64 * 64
    assert [e.seq for e in s.events] == list(range(1, len(s.events) + 1))
    assert all(e.end_ns >= e.start_ns for e in s.events)
    assert any(m.action == "alloc" for m in s.memory)


def test_estimate_model_train_step():
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 8))
    est = tnp.estimate(model, torch.randn(32, 128), train=True)
    assert isinstance(est, tnp.Estimate)
    assert est.total_s > 0
    assert est.total_s == pytest.approx(sum(est.by_category.values()))
    assert est.total_s == pytest.approx(sum(est.by_engine.values()))
    assert "matmul" in est.by_category and "tensor" in est.by_engine
    names = {op.name for op in est.top_ops}
    assert {"aten::addmm", "aten::mm"} <= names  # forward and backward matmuls
    assert all(op.bound in ("compute", "memory", "none", "host") for op in est.ops)
    text = str(est)
    assert "aten::addmm" in text and "bound" in text and "trn2" in text
    inf = tnp.estimate(model, torch.randn(32, 128), train=False)
    assert inf.total_s < est.total_s


def test_estimate_function_and_large_matmul():
    a = torch.randn(1024, 1024, dtype=torch.bfloat16)
    est = tnp.estimate(lambda x: x @ x, a, train=False)
    (op,) = [o for o in est.ops if o.name == "aten::mm"]
    assert op.bound == "compute"
    peak = state.target().peak_flops("bf16")
    assert op.time_s - state.target().dma_fixed_cost_s == pytest.approx(2 * 1024**3 / peak, rel=0.05)


def test_memory_snapshot_history():
    tnp.record_memory_history(True)
    try:
        x = torch.empty(1 << 20, device="neuron")
        del x
        snap = tnp.memory_snapshot()
    finally:
        tnp.record_memory_history(False)
    assert snap["device"] == "neuron:0" and snap["capacity_bytes"] > 0
    acts = [(h["action"], h["nbytes"]) for h in snap["history"]]
    assert ("alloc", 4 << 20) in acts and ("free", 4 << 20) in acts
    assert "allocated_bytes.all.current" in snap["stats"]
    assert tnp.memory_snapshot()["history"] == []
