"""Compiled executables and their compilation are device activity too."""

from __future__ import annotations

import pytest
import torch

from torchneuron.runtime import activity

pytest.importorskip("torch_mlir", reason="the compile extra is not installed")
pytest.importorskip("iree.compiler", reason="the compile extra is not installed")


class _Collect:
    def __init__(self):
        self.events = []

    def record(self, kind, name, inputs, outputs, start_ns, end_ns):
        self.events.append((kind, name, end_ns - start_ns))


def test_executables_and_compilation_are_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()
    f = torch.compile(lambda x: torch.tanh(x @ x) * 2, backend="neuron")
    x = torch.randn(16, 16, device="neuron")
    rec = _Collect()
    prev = activity.set_recorder(rec)
    try:
        y = f(x)
    finally:
        activity.set_recorder(prev)
    torch.testing.assert_close(y.cpu(), torch.tanh(x.cpu() @ x.cpu()) * 2, rtol=1e-5, atol=1e-5)
    kinds = [k for k, _, _ in rec.events]
    assert "executable" in kinds
    assert "compile" in kinds
    assert all(d >= 0 for _, _, d in rec.events)
