"""Float functions of integer tensors compiled after a cast (``compiler/integer_inputs.py``)."""

from __future__ import annotations

import pytest
import torch

from torchneuron.compiler import get_metrics, reset_metrics
from torchneuron.compiler.integer_inputs import integer_input_decompositions

DEVICE = "neuron"


def _functions(z, s):
    z = z * 1  # neighbours, so that each op sits inside a compiled region
    return (torch.reciprocal(z) + 1, torch.erf(z) * 2, torch.isinf(z).logical_not(),
            torch.copysign(z, s) + 1, torch.copysign(z, -2.0) + 1)


def _inputs(dtype):
    if dtype == torch.bool:
        z = torch.tensor([True, False, True, True, False, False])
        return z, z.logical_not()
    return torch.tensor([-7, -2, -1, 0, 1, 3], dtype=dtype), torch.tensor([1, -1, 2, -3, -4, 5], dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool])
def test_integer_inputs_compile_and_match_cpu(dtype):
    z, s = _inputs(dtype)
    reset_metrics()
    got = torch.compile(_functions, backend="neuron")(z.to(DEVICE), s.to(DEVICE))
    for i, (g, e) in enumerate(zip(got, _functions(z, s), strict=True)):
        assert g.dtype == e.dtype, (i, g.dtype, e.dtype)
        if i == 1:  # erf: the compiler's polynomial is within a few float32 ulps of the CPU's
            torch.testing.assert_close(g.cpu(), e, rtol=4 * torch.finfo(torch.float32).eps, atol=1e-7)
        else:
            assert torch.equal(g.cpu(), e), (i, g, e)
    (graph,) = get_metrics()["graphs"].values()
    eager = {n: w for n, w in graph["placement"].items() if not w.startswith("fused_")}
    assert not eager, eager


def test_float_operands_are_left_to_the_op_and_signs_from_numbers_become_tensors():
    table = integer_input_decompositions()
    x = torch.randn(4)
    assert table[torch.ops.aten.reciprocal.default](x) is NotImplemented
    assert table[torch.ops.aten.copysign.Tensor](x, x) is NotImplemented
    mixed = table[torch.ops.aten.copysign.Tensor](torch.tensor([1, -2]), torch.tensor([-1.0, 1.0], dtype=torch.bfloat16))
    by_number = table[torch.ops.aten.copysign.Scalar]
    for z in (x.to(torch.bfloat16), torch.tensor([3, -1, 0]), torch.tensor([True, False])):
        for sign in (-2.0, 0.0, -0.0, 5):
            got, expected = by_number(z, sign), torch.copysign(z, sign)
            assert got.dtype == expected.dtype and torch.equal(got, expected), (z, sign)
            assert torch.equal(torch.signbit(got), torch.signbit(expected)), (z, sign)
    assert mixed.dtype == torch.bfloat16 and torch.equal(mixed, torch.tensor([-1.0, 2.0], dtype=torch.bfloat16))
