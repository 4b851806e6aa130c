"""``torchneuron check script.py``: placement, fallback call sites and compile counts of a user script."""

from __future__ import annotations

import json
import textwrap

import pytest

from torchneuron import cli
from torchneuron.sweep.check import run_check

SCRIPT = textwrap.dedent('''\
    import sys
    import torch

    dev = torch.accelerator.current_accelerator()
    a = torch.randn(4, 4, device=dev).triu() + 4 * torch.eye(4, device=dev)
    b = torch.randn(4, 2, device=dev)


    def solve(a, b):
        return torch.linalg.cholesky_ex(a @ a.mT).L  # line 10: a CPU fallback


    for _ in range(int(sys.argv[1])):
        x = solve(a, b)
    y = torch.special.bessel_j0(b)  # line 15: another fallback
    assert x.device.type == "neuron", x.device
    ''')


@pytest.fixture
def script(tmp_path):
    p = tmp_path / "user_script.py"
    p.write_text(SCRIPT)
    return p


def test_check_reports_placement_and_fallback_sites(script):
    rep = run_check(str(script), ["3"])
    assert rep["exit_code"] == 0 and rep["error"] is None
    fb = rep["fallback_ops"]
    assert fb["aten::linalg_cholesky_ex"]["calls"] == 3
    (site, n), = fb["aten::linalg_cholesky_ex"]["sites"].items()
    assert site.endswith("user_script.py:10 (solve)") and n == 3
    (site, n), = fb["aten::special_bessel_j0"]["sites"].items()
    assert site.endswith("user_script.py:15 (<module>)") and n == 1
    assert rep["device_ops"]["aten::triu"] == 1
    assert rep["device_op_calls"] >= 5 and rep["fallback_op_calls"] == 4
    assert 0 < rep["device_fraction"] < 1


def test_check_cli_text_and_exit_code(script, capsys):
    assert cli.main(["check", str(script), "2"]) == 0
    out = capsys.readouterr().out
    assert "CPU fallbacks (2 ops)" in out
    assert "aten::linalg_cholesky_ex" in out and "user_script.py:10 (solve) x2" in out
    assert "torch.compile: not used" in out


def test_check_script_failure_is_reported(tmp_path, capsys):
    p = tmp_path / "bad_script.py"
    p.write_text("import torch\nx = torch.ones(2, device='neuron')\nraise ValueError('boom')\n")
    assert cli.main(["check", "--json", str(p)]) == 1  # options before the script
    rep = json.loads(capsys.readouterr().out)
    assert rep["error"] == "ValueError: boom" and rep["error_site"].endswith("bad_script.py:3")
    assert rep["device_op_calls"] >= 1


def test_check_default_device(tmp_path):
    p = tmp_path / "plain_script.py"
    p.write_text("import torch\nx = torch.ones(3) * 2\nassert x.device.type == 'neuron', x.device\n")
    assert run_check(str(p))["exit_code"] == 1  # runs on CPU without the flag
    rep = run_check(str(p), default_device="neuron")
    assert rep["exit_code"] == 0 and rep["device_ops"].get("aten::mul.Tensor") == 1
    import torch

    assert torch.get_default_device().type == "cpu"  # restored


def test_check_counts_graph_breaks_and_neuron_graphs(tmp_path):
    pytest.importorskip("iree.compiler")
    pytest.importorskip("torch_mlir")
    p = tmp_path / "compiled_script.py"
    p.write_text(textwrap.dedent('''\
        import torch


        @torch.compile(backend="neuron")
        def f(x):
            y = x.sin() * 2
            torch._dynamo.graph_break()
            return y.cos() + 1


        f(torch.randn(8, device="neuron"))
        '''))
    rep = run_check(str(p))
    assert rep["exit_code"] == 0, rep["error"]
    d = rep["compile"]["dynamo"]
    assert d["frames_compiled"] == 2 and d["graph_breaks"] == 1
    assert any("graph_break()" in r for r in d["graph_break_reasons"])
    assert rep["compile"]["neuron_compiler"]["graphs"] == 2
    assert rep["compile"]["neuron_compiler"]["library_nodes"] == 0  # no convolution here


def test_check_verify_regions_reports_a_miscompiled_node(tmp_path, monkeypatch, capsys):
    """``torchneuron check --verify-regions``: a compiler bug put there on purpose (compiled ``sin``
    computes ``cos``) is reported with the node and the script's line."""
    pytest.importorskip("iree.compiler")
    pytest.importorskip("torch_mlir")
    import torch
    from miscompile import miscompile, retargeted

    miscompile(monkeypatch, retargeted(torch.ops.aten.sin.default, torch.ops.aten.cos.default))
    monkeypatch.delenv("TORCHNEURON_VERIFY_REGIONS", raising=False)
    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", str(tmp_path / "cache"))
    torch._dynamo.reset()
    p = tmp_path / "verified_script.py"
    p.write_text(textwrap.dedent('''\
        import torch


        @torch.compile(backend="neuron")
        def f(x):
            return (x * 3).sin().exp() + 1


        f(torch.randn(8, device="neuron"))
        '''))
    try:
        assert cli.main(["check", "--verify-regions", str(p)]) == 0
    finally:
        import os

        os.environ.pop("TORCHNEURON_VERIFY_REGIONS", None)  # set by the command for the script
        torch._dynamo.reset()
    out = capsys.readouterr().out
    assert "region check (TORCHNEURON_VERIFY_REGIONS): 1 compiled regions compute a wrong result" in out
    assert "first differing node sin (aten.sin.default) at" in out and "verified_script.py:6" in out
