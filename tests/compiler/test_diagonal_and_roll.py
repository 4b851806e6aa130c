"""``diagonal``/``diagonal_scatter`` by masks and flattened ``roll`` (``compiler/diagonal_and_roll.py``)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchneuron.compiler import get_metrics, reset_metrics
from torchneuron.compiler.diagonal_and_roll import (
    diagonal_by_mask,
    diagonal_scatter_by_mask,
    roll_flattened,
)

DEVICE = "neuron"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=2, max_size=4), st.integers(-6, 6), st.data())
def test_diagonal_and_its_scatter_match_aten(shape, offset, data):
    dims = data.draw(st.permutations(range(len(shape))))[:2]
    dim1, dim2 = dims[0] - data.draw(st.sampled_from([0, len(shape)])), dims[1]  # negative dims too
    x = torch.randn(shape)
    x.view(-1)[0] = float("inf")  # off the diagonal it must not leak into the sum
    want = torch.diagonal(x, offset, dim1, dim2)
    torch.testing.assert_close(diagonal_by_mask(x, offset, dim1, dim2), want, rtol=0, atol=0)
    src = torch.randn(want.shape)
    torch.testing.assert_close(diagonal_scatter_by_mask(x, src, offset, dim1, dim2),
                               torch.diagonal_scatter(x, src, offset, dim1, dim2), rtol=0, atol=0)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=3), st.integers(-30, 30))
def test_flattened_roll_matches_aten(shape, shift):
    x = torch.arange(torch.Size(shape).numel()).view(shape)
    assert torch.equal(roll_flattened(x, [shift]), torch.roll(x, shift))
    assert roll_flattened(x, [shift], [0]) is NotImplemented  # rolls along dimensions lower as they are


def test_diagonals_and_rolls_compile_forward_and_backward():
    torch.manual_seed(0)
    x = torch.randn(6, 9)

    def f(t):
        t = t * 2
        return torch.diag(t) + 1, torch.trace(t) + 1, torch.diagonal(t, -2) * 3, torch.roll(t, 5) + 1, t.clone().fill_diagonal_(0.5) + 1

    reset_metrics()
    for got, want in zip(torch.compile(f, backend="neuron")(x.to(DEVICE)), f(x), strict=True):
        torch.testing.assert_close(got.cpu(), want)
    w, wd = x.clone().requires_grad_(), x.to(DEVICE).requires_grad_()

    def loss(t):
        return (torch.diagonal(t * 2, 1) ** 2).sum() + torch.trace(t * 3)

    torch.compile(loss, backend="neuron")(wd).backward()
    loss(w).backward()
    torch.testing.assert_close(wd.grad.cpu(), w.grad)
    placement = [where for g in get_metrics()["graphs"].values() for where in g["placement"].values()]
    assert "eager" not in placement
