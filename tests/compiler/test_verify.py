"""``TORCHNEURON_VERIFY_REGIONS``: compiled regions checked against their eager graphs (``compiler/verify.py``)."""

from __future__ import annotations

import warnings

import pytest
import torch

import torchneuron.compiler.graph_compiler as graph_compiler
from torchneuron.compiler import get_metrics
from torchneuron.compiler.verify import RegionMismatchError, difference

DEVICE = "neuron"


def test_difference_rules():
    x = torch.linspace(-3, 3, 64)
    assert difference(x, x + 1e-6) is None  # float32: summation-order noise is accepted
    assert "max error" in difference(x, x + 1e-2)
    assert difference(x * 100, x * 100 + 5e-3) is None  # relative to the reference's magnitude
    y = x.clone()
    y[3] = float("nan")
    assert "NaN" in difference(x, y)
    assert difference(y, y.clone()) is None  # NaN where the reference has NaN is a match
    assert difference(x.bfloat16(), (x + 0.01).bfloat16()) is None  # bf16: a few ulps per fused op
    assert "max error" in difference(x.bfloat16(), (x + 0.5).bfloat16())
    i = torch.arange(10)
    assert difference(i, i.clone()) is None
    j = i.clone()
    j[7] = -1
    assert "1 of 10 torch.int64 elements differ (first at flat index 7: 7 against -1)" in difference(i, j)
    assert "against" in difference(x, x[:10])


def _f(x):
    a = x * 3 + 1
    b = torch.sin(a)
    c = b * b + a
    return torch.tanh(c).sum(-1), c


@pytest.fixture
def verifying(monkeypatch):
    monkeypatch.setenv("TORCHNEURON_VERIFY_REGIONS", "1")


@pytest.fixture
def sin_miscompiled(monkeypatch):
    """A compiler bug on purpose: every compiled ``sin`` computes ``cos`` (the eager graph is untouched)."""
    original = graph_compiler.PreparedRegion.__init__

    def buggy(self, name, sub, record, dump):
        for n in sub.graph.nodes:
            if n.target is torch.ops.aten.sin.default:
                n.target = torch.ops.aten.cos.default
        sub.recompile()
        original(self, name, sub, record, dump)

    monkeypatch.setattr(graph_compiler.PreparedRegion, "__init__", buggy)


def test_correct_training_has_no_mismatch(verifying):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                                torch.nn.Linear(32, 4)).to(DEVICE)
    x = torch.randn(8, 16, device=DEVICE)
    compiled = torch.compile(model, backend="neuron")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for _ in range(2):
            compiled(x).square().mean().backward()
    m = get_metrics()
    assert {g["kind"] for g in m["graphs"].values()} == {"forward", "backward"}
    assert m["region_mismatches"] == 0 and m["mismatched_regions"] == []


def test_miscompiled_node_is_found_with_its_source_line(verifying, sin_miscompiled):
    x = torch.randn(4, 8)
    with pytest.warns(RuntimeWarning, match=r"first differing node sin \(aten.sin.default\) at .*test_verify.py"):
        total, c = torch.compile(_f, backend="neuron")(x.to(DEVICE))
    # the compiled (wrong) result is what the program gets: the check does not change the run
    a = x * 3 + 1
    torch.testing.assert_close(c.cpu(), torch.cos(a) ** 2 + a)
    (mismatch,) = get_metrics()["mismatched_regions"]
    assert mismatch["kind"] == "inference" and mismatch["op"] == "aten.sin.default"
    assert "b = torch.sin(a)" in mismatch["source"]
    assert "max error" in mismatch["detail"]
    assert get_metrics()["region_mismatches"] == 1
    # the bisection compiled prefixes in scratch records: the graph's own record is unchanged
    assert len(get_metrics()["graphs"]) == 1


def test_raise_mode(monkeypatch, sin_miscompiled):
    monkeypatch.setenv("TORCHNEURON_VERIFY_REGIONS", "raise")
    with pytest.raises(RegionMismatchError, match="differs from the eager kernels in output"):
        torch.compile(_f, backend="neuron")(torch.randn(4, 8, device=DEVICE))
    # the device is still usable
    torch.testing.assert_close((torch.ones(3, device=DEVICE) * 2).cpu(), torch.full((3,), 2.0))


def test_invalid_setting(monkeypatch):
    monkeypatch.setenv("TORCHNEURON_VERIFY_REGIONS", "sometimes")
    with pytest.raises(Exception, match="TORCHNEURON_VERIFY_REGIONS='sometimes': expected 0, 1 \\(warn\\) or raise"):
        torch.compile(_f, backend="neuron")(torch.randn(4, 8, device=DEVICE))
