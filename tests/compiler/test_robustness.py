"""A region the lowering or the compiler cannot take as a whole is split, and torch-mlir runs in
a child process so that its crashes, hangs and memory blow-ups cannot take the user's process."""

from __future__ import annotations

import os
import signal

import pytest
import torch
import torch.fx as fx
from helpers import DEVICE

from torchneuron.compiler import executable, get_metrics, lowering, reset_metrics
from torchneuron.compiler.executable import IreeCompileError


def _program(x):
    y = (x * 3 + 1).relu()
    z = torch.sin(y) * 2  # the op the "compiler" below rejects
    return (z - y).exp().sum(1)


def test_a_region_that_fails_as_a_whole_is_split_and_the_rest_still_compiles(monkeypatch):
    real = executable.compile_stablehlo

    def picky(text, flags):
        if "stablehlo.sine" in text:
            raise IreeCompileError("IREE compilation failed: sine rejected (test)", "log")
        return real(text, flags)

    monkeypatch.setattr("torchneuron.compiler.graph_compiler.compile_stablehlo", picky)
    torch._dynamo.reset()
    reset_metrics()
    x = torch.randn(8, 16)
    out = torch.compile(_program, backend="neuron")(x.to(DEVICE))
    torch.testing.assert_close(out.cpu(), _program(x), rtol=1e-5, atol=1e-5)
    (graph,) = get_metrics()["graphs"].values()
    assert graph["split_regions"] >= 1
    assert graph["eager_after_split"] == 1  # only sin itself runs eagerly
    assert graph["cache_misses"] + graph["cache_hits"] >= 2  # the halves around it compiled


def _tiny_graph() -> fx.GraphModule:
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(lambda a: torch.ops.aten.neg.default(a), tracing_mode="fake")(torch.randn(4))


def test_a_crash_in_torch_mlir_is_a_lowering_error(monkeypatch):
    monkeypatch.setattr(lowering, "_lower_here", lambda gm, name: os.kill(os.getpid(), signal.SIGSEGV))
    with pytest.raises(lowering.LoweringError, match="torch-mlir crashed while lowering \\(SIGSEGV"):
        lowering.lower(_tiny_graph(), isolate=True)


def test_a_hang_in_torch_mlir_is_a_lowering_error(monkeypatch):
    import time

    monkeypatch.setenv("TORCHNEURON_LOWERING_TIMEOUT", "2")
    monkeypatch.setattr(lowering, "_lower_here", lambda gm, name: time.sleep(60))
    with pytest.raises(lowering.LoweringError, match="did not finish lowering within 2 s"):
        lowering.lower(_tiny_graph(), isolate=True)


def test_isolated_lowering_gives_the_same_stablehlo():
    here = lowering.lower(_tiny_graph(), isolate=False)
    child = lowering.lower(_tiny_graph(), isolate=True)
    assert here.text == child.text and "stablehlo.negate" in child.text
