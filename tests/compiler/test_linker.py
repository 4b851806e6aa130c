"""A graph's compiled regions linked into one program (one function per region, linker.py)."""

from __future__ import annotations

import pytest
import torch
from helpers import DEVICE
from test_partition import soft_clip

from torchneuron.compiler import executable, get_metrics, reset_metrics
from torchneuron.compiler.cache import CACHE
from torchneuron.compiler.executable import Executable, IreeCompileError, Program, compile_flags
from torchneuron.compiler.linker import LinkError, link

# Two modules as torch-mlir prints them: location aliases before and after the module, and a
# private helper of the same name in both, so that linking must rename aliases and symbols.
_MODULE = """#loc1 = loc("model.py":{line}:0)
module {{
  func.func private @helper(%arg0: tensor<4xf32> loc(#loc1)) -> tensor<4xf32> {{
    %0 = stablehlo.{op} %arg0, %arg0 : tensor<4xf32> loc(#loc2)
    return %0 : tensor<4xf32> loc(#loc)
  }} loc(#loc)
  func.func @main(%arg0: tensor<4xf32> loc(#loc1)) -> tensor<4xf32> {{
    %0 = call @helper(%arg0) : (tensor<4xf32>) -> tensor<4xf32> loc(#loc2)
    return %0 : tensor<4xf32> loc(#loc)
  }} loc(#loc)
}} loc(#loc)
#loc = loc(unknown)
#loc2 = loc("model.py":{line2}:4)
"""


def _module(op: str, line: int) -> str:
    return _MODULE.format(op=op, line=line, line2=line + 1)


def test_linked_functions_keep_their_own_helpers_and_locations():
    text = link([("add_region", _module("add", 10)), ("mul_region", _module("multiply", 20))])
    assert text.count("func.func private") == 2 and "@add_region__helper" in text
    assert '#add_region__loc2 = loc("model.py":11:4)' in text
    assert '#mul_region__loc2 = loc("model.py":21:4)' in text
    program = Program(executable.compile_stablehlo(text, compile_flags(text)).vmfb, "linked")
    x = torch.arange(4, dtype=torch.float32)
    add = Executable(program, [torch.float32], [torch.float32], name="a", function="add_region")
    mul = Executable(program, [torch.float32], [torch.float32], name="m", function="mul_region")
    for _ in range(10):  # past the driver choice, each function on its own
        torch.testing.assert_close(add(x.to(DEVICE))[0].cpu(), x + x, rtol=0, atol=0)
        torch.testing.assert_close(mul(x.to(DEVICE))[0].cpu(), x * x, rtol=0, atol=0)


def test_link_refuses_duplicate_names_and_non_modules():
    with pytest.raises(LinkError, match="not unique"):
        link([("f", _module("add", 1)), ("f", _module("add", 2))])
    with pytest.raises(LinkError, match="single top-level module"):
        link([("f", "func.func @main() { return }")])


def _three_regions(x):
    h = soft_clip((x * 2.0 + 1.0).relu(), 1.5)  # soft_clip does not lower: regions around it
    h = soft_clip((h.exp() - 1.0).abs() * 0.5, 2.0)
    return (h.sin() + h.cos()).sum(-1)


def _graph():
    (graph,) = get_metrics()["graphs"].values()
    return graph


def test_a_graphs_regions_are_one_program():
    x = torch.randn(8, 16)
    out = torch.compile(_three_regions, backend="neuron")(x.to(DEVICE))
    torch.testing.assert_close(out.cpu(), _three_regions(x), rtol=1e-5, atol=1e-5)
    graph = _graph()
    assert graph["regions"] == 3 and graph["programs"] == 1
    assert graph["cache_misses"] + graph["cache_hits"] == 1


def test_linking_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("TORCHNEURON_LINK_REGIONS", "0")
    x = torch.randn(8, 16)
    out = torch.compile(_three_regions, backend="neuron")(x.to(DEVICE))
    torch.testing.assert_close(out.cpu(), _three_regions(x), rtol=1e-5, atol=1e-5)
    graph = _graph()
    assert graph["regions"] == 3 and graph["programs"] == 3


def test_identical_regions_share_one_function(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path))

    def twice(x):
        a = soft_clip((x * 2.0).relu() + 1.0, 1.5)
        b = soft_clip((a * 2.0).relu() + 1.0, 1.5)  # the same region as the first
        return (b * 2.0).relu() + 1.0

    x = torch.randn(4, 4)
    out = torch.compile(twice, backend="neuron")(x.to(DEVICE))
    torch.testing.assert_close(out.cpu(), twice(x), rtol=1e-5, atol=1e-5)
    (graph_dir,) = tmp_path.iterdir()
    functions = (graph_dir / "program0.functions.txt").read_text().splitlines()
    assert len(functions) == 3 and len({line.split(": ")[1] for line in functions}) == 1
    assert (graph_dir / "program0.stablehlo.mlir").read_text().count("func.func @") == 1


def test_a_rejected_program_is_bisected_and_the_rejection_remembered(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", str(tmp_path))  # nothing compiled before
    CACHE.clear_memory()
    real = executable.compile_stablehlo
    calls: list[str] = []

    def picky(text, flags):  # rejects any program holding the sine region together with another
        calls.append(text)
        if "stablehlo.sine" in text and text.count("func.func @") > 1:
            raise IreeCompileError("IREE compilation failed: sine rejected when linked (test)", "log")
        return real(text, flags)

    monkeypatch.setattr("torchneuron.compiler.graph_compiler.compile_stablehlo", picky)
    x = torch.randn(8, 16)
    torch.compile(_three_regions, backend="neuron")(x.to(DEVICE))
    graph = _graph()
    # all three rejected -> one region alone + two linked (rejected again when the sine region
    # is one of them -> one + one): the sine region ends in a program of its own
    assert graph["regions"] == 3 and graph["programs"] in (2, 3)
    assert len(calls) == 1 + graph["programs"] + (graph["programs"] == 3)
    programs = graph["programs"]
    # a warm start (memory level cleared, disk kept) goes straight to the programs that compiled
    torch._dynamo.reset()
    CACHE.clear_memory()
    reset_metrics()
    calls.clear()
    out = torch.compile(_three_regions, backend="neuron")(x.to(DEVICE))
    torch.testing.assert_close(out.cpu(), _three_regions(x), rtol=1e-5, atol=1e-5)
    assert calls == [] and _graph()["programs"] == programs


def test_a_linked_program_that_fails_to_load_is_bisected(monkeypatch):
    """IREE checks some limits only when a module's initialisers run (e.g. a dispatch with more
    than 32 bindings): a linked program that cannot be loaded is split like a rejected one."""
    from torchneuron.compiler import graph_compiler

    real = graph_compiler.Program

    def refuse_linked(vmfb, name):
        if "/program" in name:
            raise IndexError("binding count 41 > 32 (test)")
        return real(vmfb, name)

    monkeypatch.setattr(graph_compiler, "Program", refuse_linked)
    x = torch.randn(8, 16)
    out = torch.compile(_three_regions, backend="neuron")(x.to(DEVICE))
    torch.testing.assert_close(out.cpu(), _three_regions(x), rtol=1e-5, atol=1e-5)
    graph = _graph()
    assert graph["regions"] == 3 and graph["programs"] == 3
