"""``masked_scatter_backward`` with static shapes (``compiler/masked_scatter.py``)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torchneuron
from torchneuron.compiler import get_metrics
from torchneuron.compiler.masked_scatter import masked_scatter_backward_static

DEVICE = "neuron"


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4), st.integers(1, 6), st.integers(1, 5), st.integers(0, 8), st.integers(0, 2**16))
def test_equals_aten_bit_for_bit(batch, tokens, width, spare, seed):
    g = torch.Generator().manual_seed(seed)
    grad = torch.randn(batch, tokens, width, generator=g)
    mask = (torch.rand(batch, tokens, 1, generator=g) < 0.5)  # broadcast over the width, as a VLM's image mask
    rows = int(mask.sum()) + spare  # the source may hold more than the mask selects: padded with zeros
    sizes = [rows, width]
    expected = torch.ops.aten.masked_scatter_backward(grad, mask, sizes)
    assert torch.equal(masked_scatter_backward_static(grad, mask, sizes), expected)


def test_image_features_gradient_compiles():
    def f(embeds, features, mask):
        return (embeds.masked_scatter(mask, features * 2) * 3).tanh()

    mask = torch.tensor([[1, 0, 1, 1, 0], [0, 0, 1, 0, 1]], dtype=torch.bool)[..., None]
    embeds, features = torch.randn(2, 5, 4), torch.randn(6, 4)
    e, x = embeds.to(DEVICE).requires_grad_(), features.to(DEVICE).requires_grad_()
    torchneuron.clear_op_tracking()
    out = torch.compile(f, backend="neuron")(e, x, mask.to(DEVICE))
    out.sum().backward()
    ce, cx = embeds.clone().requires_grad_(), features.clone().requires_grad_()
    ref = f(ce, cx, mask)
    ref.sum().backward()
    torch.testing.assert_close(out.cpu(), ref)
    torch.testing.assert_close(x.grad.cpu(), cx.grad)
    torch.testing.assert_close(e.grad.cpu(), ce.grad)
    assert torchneuron.get_fallback_ops() == {}  # masked_scatter_backward ran on the CPU before
    assert all(where != "eager" for g in get_metrics()["graphs"].values() for where in g["placement"].values())
