"""Replication-pad backwards (``compiler/padding.py``): exact against ATen and compiled."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from torchneuron.compiler import get_metrics
from torchneuron.compiler.padding import replication_pad_backward_as_scatter

DEVICE = "neuron"
_aten = torch.ops.aten


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_replication_pad_backward_matches_aten(dims):
    """Every padding of {-1, 0, 1, 3} per side PyTorch accepts (negative pads crop), batched and
    unbatched; float32 sums in another order than ATen's loops, so up to a few ulps apart."""
    torch.manual_seed(0)
    backward = getattr(_aten, f"replication_pad{dims}d_backward")
    forward = getattr(_aten, f"replication_pad{dims}d")
    checked = 0
    for pads in itertools.product((-1, 0, 1, 3), repeat=2 * dims):
        if dims == 3 and checked >= 200:
            break
        for lead in ((2, 3), (3,)):
            x = torch.randn(*lead, *[4 + i for i in range(dims)])
            try:
                g = torch.randn_like(forward(x, list(pads)))
            except RuntimeError:
                continue  # a padding PyTorch rejects
            got = replication_pad_backward_as_scatter(g, x, list(pads))
            torch.testing.assert_close(got, backward(g, x, list(pads)), rtol=1e-5, atol=1e-5)
            checked += 1
    assert checked >= 20


def test_replication_pad_backward_half_precision_sums_in_float32():
    x = torch.randn(2, 3, 6).to(torch.bfloat16)
    g = torch.randn(2, 3, 6 + 40).to(torch.bfloat16)  # the left edge sums 41 gradients
    got = replication_pad_backward_as_scatter(g, x, [40, 0])
    assert got.dtype == torch.bfloat16
    ref = _aten.replication_pad1d_backward(g.float(), x.float(), [40, 0])
    torch.testing.assert_close(got.float(), ref, rtol=8e-3, atol=1e-2)  # one bf16 rounding of the sums


def test_replication_pad_backward_rejects_what_it_does_not_know():
    x = torch.randn(2, 3, 5)
    assert replication_pad_backward_as_scatter(torch.randn(2, 3, 7), x, [1, 1, 1]) is NotImplemented


@pytest.mark.parametrize("pad,mode_dims", [((3, 0), 1), ((2, 1, 0, 2), 2)], ids=["causal1d", "2d"])
def test_replication_pad_is_compiled_forward_and_backward(pad, mode_dims):
    """A causal-convolution pad (Mimi, Pocket-TTS) between elementwise producers and consumers:
    no node of the backward graph runs eagerly, values and gradients the CPU's."""
    torch.manual_seed(0)
    shape = (2, 3, 10) if mode_dims == 1 else (2, 3, 6, 7)
    x = torch.randn(*shape, requires_grad=True)

    def f(t):
        return F.pad(torch.tanh(t) * 1.5, pad, mode="replicate") * 2.0

    xd = x.detach().to(DEVICE).requires_grad_()
    got = torch.compile(f, backend="neuron")(xd)
    got.square().sum().backward()
    ref = f(x)
    ref.square().sum().backward()
    backward = [g for g in get_metrics()["graphs"].values() if g["kind"] == "backward"]
    assert backward and all(g["eager_nodes"] == 0 for g in backward), [g["placement"] for g in backward]
    torch.testing.assert_close(got.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
