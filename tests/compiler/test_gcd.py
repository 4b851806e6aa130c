"""``gcd``/``lcm`` compiled as unrolled Euclid steps (``compiler/gcd.py``)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchneuron.compiler import get_metrics, reset_metrics
from torchneuron.compiler.gcd import euclid_gcd, euclid_lcm, euclid_steps

DEVICE = "neuron"


def _fibonacci_below(limit: int) -> tuple[int, int]:
    a, b = 1, 2
    while a + b <= limit:
        a, b = b, a + b
    return a, b


def test_step_count_covers_the_worst_case_of_each_width():
    for dtype in (torch.int8, torch.int16, torch.int32, torch.int64):
        a, b = _fibonacci_below(torch.iinfo(dtype).max)  # consecutive Fibonacci numbers: Lamé's worst case
        x, y = torch.tensor([b], dtype=dtype), torch.tensor([a], dtype=dtype)
        assert euclid_gcd(x, y).item() == 1, dtype
    assert euclid_steps(torch.int32) < euclid_steps(torch.int64) < 100


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(-2**31 + 1, 2**31 - 1), st.integers(-2**31 + 1, 2**31 - 1)), min_size=1, max_size=16),
       st.sampled_from([torch.int32, torch.int64]))
def test_matches_aten(pairs, dtype):
    a = torch.tensor([p[0] for p in pairs] + [0, 0, 7], dtype=dtype)
    b = torch.tensor([p[1] for p in pairs] + [0, 5, 0], dtype=dtype)
    assert torch.equal(euclid_gcd(a, b), torch.gcd(a, b))
    if dtype == torch.int64:  # the int32 products overflow differently, as in C
        assert torch.equal(euclid_lcm(a, b), torch.lcm(a, b))


def test_gcd_and_lcm_compile():
    torch.manual_seed(0)
    a, b = torch.randint(-1000, 1000, (64,)), torch.randint(-1000, 1000, (64,))
    a[:3], b[2:5] = 0, 0

    def f(a, b):
        return torch.gcd(a * 2, b) + 1, torch.lcm(a, b + 1) * 2

    reset_metrics()
    got = torch.compile(f, backend="neuron")(a.to(DEVICE), b.to(DEVICE))
    for g, w in zip(got, f(a, b), strict=True):
        assert torch.equal(g.cpu(), w)
    placement = [where for g in get_metrics()["graphs"].values() for where in g["placement"].values()]
    assert "eager" not in placement
