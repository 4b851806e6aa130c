"""``remainder`` with the divisor's sign and ``fmod`` by a number, compiled (``compiler/modulo.py``)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchneuron.compiler import get_metrics, reset_metrics
from torchneuron.compiler.modulo import fmod_by_number, remainder_from_fmod

DEVICE = "neuron"

_specials = st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan])
_floats = st.one_of(st.floats(-1e6, 1e6, width=32), _specials)
_divisors = st.one_of(st.floats(-1e3, 1e3, width=32), _specials)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_floats, _divisors), min_size=1, max_size=16))
def test_float_decomposition_equals_aten(pairs):
    """Bit for bit, signed zeros, infinities and NaN included, as the CPU kernel."""
    a = torch.tensor([p[0] for p in pairs], dtype=torch.float32)
    b = torch.tensor([p[1] for p in pairs], dtype=torch.float32)
    expected = torch.remainder(a, b)
    got = remainder_from_fmod(a, b)
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(torch.signbit(got), torch.signbit(expected))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), st.integers(-2**31, 2**31 - 1).filter(bool)),
                min_size=1, max_size=16),
       st.sampled_from([torch.int32, torch.int64]))
def test_integer_decomposition_equals_aten(pairs, dtype):
    a = torch.tensor([p[0] for p in pairs], dtype=dtype)
    b = torch.tensor([p[1] for p in pairs], dtype=dtype)
    assert torch.equal(remainder_from_fmod(a, b), torch.remainder(a, b))


def test_number_operands_take_the_result_dtype():
    x = torch.arange(-5, 6, dtype=torch.int32)
    assert torch.equal(remainder_from_fmod(x, 3), torch.remainder(x, 3))
    assert torch.equal(remainder_from_fmod(x, 2.5), torch.remainder(x, 2.5))  # int tensor, float number
    assert torch.equal(remainder_from_fmod(7, x[x != 0]), torch.remainder(7, x[x != 0]))
    assert torch.equal(fmod_by_number(x, -3), torch.fmod(x, -3))
    assert remainder_from_fmod(torch.tensor([True]), torch.tensor([True])) is NotImplemented


def _modulo(a, b):
    x = a * 1  # a single op is not worth a program: give the ops compiled neighbours
    return (x % b + 0, torch.remainder(x, 3) + 0, torch.fmod(x, -3) + 0, torch.remainder(7, b) + 0)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32, torch.bfloat16])
def test_compiled_remainder_takes_the_divisor_sign(dtype):
    """torch-mlir's lowering gave ``(-5) % 3 == -2``; every result is now the CPU's, compiled."""
    a = torch.arange(-12, 13).to(dtype)
    b = torch.tensor([3, -3, 4, -4, 5, -7, 2, -2] * 3 + [9]).to(dtype)
    reset_metrics()
    got = torch.compile(_modulo, backend="neuron")(a.to(DEVICE), b.to(DEVICE))
    for g, e in zip(got, _modulo(a, b), strict=True):
        assert torch.equal(g.cpu(), e), (dtype, g, e)
    (graph,) = get_metrics()["graphs"].values()
    eager = {n: w for n, w in graph["placement"].items() if not w.startswith("fused_")}
    assert not eager, eager
