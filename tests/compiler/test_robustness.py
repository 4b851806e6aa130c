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


@pytest.mark.parametrize("stopped_from_outside", [False, True])
def test_a_rejection_is_remembered_unless_the_compiler_was_stopped(monkeypatch, tmp_path, stopped_from_outside):
    """A warm start does not run a rejected compilation again (Swin3D-S ran ~500 of them on
    every start); one whose compiler was stopped from outside (OOM killer, timeout) may not
    recur and is tried again."""
    from torchneuron.compiler.cache import CACHE

    real = executable.compile_stablehlo
    calls = []

    def picky(text, flags):
        calls.append("stablehlo.sine" in text)
        if "stablehlo.sine" in text:
            raise IreeCompileError("IREE compilation failed: sine rejected (test)", "log",
                                   killed=stopped_from_outside)
        return real(text, flags)

    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", str(tmp_path))  # a cold start of its own
    monkeypatch.setenv("TORCHNEURON_GRAPH_CACHE", "0")  # the executable cache alone
    monkeypatch.setattr("torchneuron.compiler.graph_compiler.compile_stablehlo", picky)
    x = torch.randn(8, 16)
    for start in ("cold", "warm"):
        torch._dynamo.reset()
        CACHE.clear_memory()
        calls.clear()
        out = torch.compile(_program, backend="neuron")(x.to(DEVICE))
        torch.testing.assert_close(out.cpu(), _program(x), rtol=1e-5, atol=1e-5)
        if start == "cold":
            assert any(calls) and not all(calls)
    if stopped_from_outside:
        assert calls and all(calls)  # the rejected compilations again, nothing that compiled
    else:
        assert calls == []


@pytest.mark.parametrize("sig, stopped", [(signal.SIGFPE, False), (signal.SIGSEGV, False),
                                          (signal.SIGKILL, True)])
def test_a_compiler_crash_is_told_from_a_stop(monkeypatch, sig, stopped):
    import sys

    import iree.compiler.tools.core as core

    monkeypatch.setattr(core, "build_compile_command_line", lambda *a, **k: [
        sys.executable, "-c", f"import os, signal; os.kill(os.getpid(), {int(sig)})"])
    with pytest.raises(IreeCompileError, match=f"died of signal {int(sig)} \\({sig.name}\\)") as info:
        executable._run_compiler("module {}", ())
    assert info.value.killed is stopped


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


def test_isolated_lowering_survives_the_parents_openmp_threads(monkeypatch):
    # GNU OpenMP is not fork-safe: a forked child that starts a parallel region after the parent
    # ran one waits forever for threads it does not have. torch-mlir's importer builds index
    # tensors for as_strided ops with ATen (large enough to run in parallel): MViT-v2's windows
    # of adaptive mode hung there until the lowering timeout, hundreds of times.
    if torch.get_num_threads() < 2:
        pytest.skip("needs ATen's thread pool to have several threads")
    from torch.fx.experimental.proxy_tensor import make_fx

    monkeypatch.setenv("TORCHNEURON_LOWERING_TIMEOUT", "60")
    torch.ones(1 << 22).add_(1)  # the parent's OpenMP team exists
    gm = make_fx(lambda b, s: torch.ops.aten.as_strided.default(b, [256, 512], [2048, 2], 0) * s,
                 tracing_mode="fake")(torch.randn(512, 1024), torch.randn(256, 512))
    assert "stablehlo.multiply" in lowering.lower(gm, isolate=True).text
