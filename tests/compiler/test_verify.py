"""``TORCHNEURON_VERIFY_REGIONS``: compiled regions checked against their eager graphs (``compiler/verify.py``)."""

from __future__ import annotations

import warnings

import pytest
import torch
from miscompile import miscompile, retargeted

from torchneuron.compiler import get_metrics
from torchneuron.compiler.verify import (
    RegionMismatchError,
    difference,
    first_difference,
    float64_reference,
    uninitialised_outputs,
)

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
    miscompile(monkeypatch, retargeted(torch.ops.aten.sin.default, torch.ops.aten.cos.default))


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


def test_float64_evaluation_excuses_rounding_both_sides_share():
    """A difference beyond the tolerance is not a mismatch when eager float32 is as far from the float64
    evaluation as the compiled result (ill-conditioned arithmetic), and is one when only compiled is off."""
    exact = torch.tensor([1.0, 2.0], dtype=torch.float64)
    eager = torch.tensor([1.0, 2.01])
    assert first_difference([torch.tensor([1.0, 1.995])], [eager])[0] == 0  # beyond 1e-4 of the scale
    assert first_difference([torch.tensor([1.0, 1.995])], [eager], [exact]) is None  # eager is 0.01 off too
    assert first_difference([torch.tensor([1.0, 2.5])], [eager], [exact])[0] == 0  # 0.5 off: 50 times eager's
    # integers computed from floats: one off the float64 evaluation is rounding, two is not
    ints = torch.tensor([5, 6])
    assert first_difference([torch.tensor([5, 5])], [ints], [torch.tensor([5, 5])]) is None
    assert first_difference([torch.tensor([5, 3])], [ints], [torch.tensor([5, 5])]) is not None
    # a comparison at a rounding boundary: compiled True where eager said False, and float64 agrees
    flags = torch.tensor([True, False])
    assert first_difference([torch.tensor([True, True])], [flags], [torch.tensor([True, True])]) is None
    assert first_difference([torch.tensor([True, True])], [flags], [torch.tensor([True, False])]) is not None


def test_float64_reference_widens_inputs_dtypes_and_devices():
    def f(x, n):
        y = torch.ops.prims.convert_element_type.default(x, torch.float32) * (1 / 3)
        return y + torch.full([2], 0.1, dtype=torch.float32, device=x.device), n + 1

    gm = torch.fx.symbolic_trace(f)
    x, n = torch.tensor([1.0, 2.0], device=DEVICE), torch.tensor([1, 2], device=DEVICE)
    y64, n1 = float64_reference(gm, [x, n])
    assert y64.dtype == torch.float64 and y64.device.type == "cpu" and n1.tolist() == [2, 3]
    torch.testing.assert_close(y64, torch.tensor([1 / 3 + 0.1, 2 / 3 + 0.1], dtype=torch.float64), rtol=0, atol=1e-15)


def test_uninitialised_outputs_are_not_compared():
    def f(x):
        buf = torch.ops.aten.empty.memory_format([2, 3], dtype=torch.float32, device=x.device)
        return x + 1, torch.ops.aten.view.default(buf, [3, 2]), torch.ops.aten.sum.default(buf)

    gm = torch.fx.symbolic_trace(f)
    assert uninitialised_outputs(gm) == frozenset({1})  # the view of an empty buffer; its sum is not one


def test_amplified_rounding_is_told_apart_from_a_wrong_node(verifying, monkeypatch):
    """A compiled product one float32 ulp off (within rounding) that the region then amplifies a million
    times is reported as ill-conditioned, not as a wrong result."""
    def one_ulp_off(graph):
        for n in graph.nodes:
            if n.target is torch.ops.aten.mul.Tensor and n.args[1] == 1.25:
                n.args = (n.args[0], 1.25 * (1 + 2**-22))

    miscompile(monkeypatch, one_ulp_off)

    def g(x):
        a = x * 1.25
        return (a - 1.25) * 1e6 + x.sin()

    with pytest.warns(RuntimeWarning, match="amplifies float rounding"):
        torch.compile(g, backend="neuron")(torch.ones(8, device=DEVICE))
    (mismatch,) = get_metrics()["mismatched_regions"]
    assert mismatch["amplified"] and mismatch["op"] == "aten.mul.Tensor"


def test_mismatch_reproducer_is_saved_with_the_dumps(verifying, sin_miscompiled, monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path))
    x = torch.randn(4, 8)
    with pytest.warns(RuntimeWarning, match="inputs and graph saved in"):
        torch.compile(_f, backend="neuron")(x.to(DEVICE))
    (mismatch,) = get_metrics()["mismatched_regions"]
    saved = torch.load(mismatch["reproducer"], weights_only=False)
    assert saved["mismatch"]["op"] == "aten.sin.default" and "torch.ops.aten.sin.default" in saved["graph"]
    (inp,) = [t for t in saved["inputs"] if isinstance(t, torch.Tensor)]
    torch.testing.assert_close(inp, x)
    # the saved graph runs: eager on the host it gives the correct (sin) result
    outputs = saved["module"](*saved["inputs"])
    a = x * 3 + 1
    expected = torch.sin(a) ** 2 + a
    assert any(o.shape == expected.shape and torch.allclose(o.cpu(), expected) for o in outputs)


def test_sum_off_by_its_rounding_bound_is_amplified_not_wrong(verifying, monkeypatch):
    """A sum of cancelling terms may differ from eager's by ~1e-4 of the sum of its terms' magnitudes
    (another summation order): reported as rounding, although beyond the tolerance of its result."""
    def reordered_sum(graph):
        for n in list(graph.nodes):
            if n.target is torch.ops.aten.sum.dim_IntList:
                x = n.args[0]
                with graph.inserting_before(n):
                    a = graph.call_function(torch.ops.aten.abs.default, (x,))
                    b = graph.call_function(torch.ops.aten.mul.Tensor, (a, 2e-7))
                    c = graph.call_function(torch.ops.aten.add.Tensor, (x, b))
                a.meta["val"] = x.meta["val"].abs()
                b.meta["val"] = a.meta["val"] * 2e-7
                c.meta["val"] = x.meta["val"] + b.meta["val"]
                n.args = (c, *n.args[1:])

    miscompile(monkeypatch, reordered_sum)

    def g(x):
        return (x * 2).sum(-1) + 1

    x = torch.cat([torch.full((4, 5000), 1.5), torch.full((4, 5000), -1.5)], -1)  # sums to 0 from 15000 of magnitude
    with pytest.warns(RuntimeWarning, match="amplifies float rounding"):
        torch.compile(g, backend="neuron")(x.to(DEVICE))
    (mismatch,) = get_metrics()["mismatched_regions"]
    assert mismatch["amplified"] and mismatch["op"] == "aten.sum.dim_IntList"


def test_source_line_under_a_default_device(verifying, sin_miscompiled):
    """Under ``torch.set_default_device`` the recorded trace ends in PyTorch's device mode: the user's
    line is the innermost frame outside PyTorch."""
    with torch.device(DEVICE):
        x = torch.randn(4, 8)
        with pytest.warns(RuntimeWarning, match=r"first differing node sin .* at .*test_verify.py"):
            torch.compile(_f, backend="neuron")(x)
    (mismatch,) = get_metrics()["mismatched_regions"]
    assert "b = torch.sin(a)" in mismatch["source"]
