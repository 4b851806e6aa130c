"""``grid_sampler_2d_backward`` as gathers and a scatter-add (``compiler/grid_sampling.py``)."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from torchneuron.compiler import get_metrics
from torchneuron.compiler.grid_sampling import grid_sampler_2d_backward_as_gathers

DEVICE = "neuron"
_aten = torch.ops.aten


def test_decomposition_matches_aten():
    """Both gradients, zero and border padding, either ``align_corners``, points outside the
    input and exactly on its corners and centre; float32 sums in another order than ATen's."""
    torch.manual_seed(0)
    cases = 0
    for (h, w), (oh, ow), padding, align in itertools.product([(1, 1), (3, 4), (6, 5)], [(1, 1), (2, 3), (7, 5)],
                                                              [0, 1], [False, True]):
        for spread in (0.9, 1.5):  # within the input, and a third of the points beyond it
            x, g = torch.randn(2, 3, h, w), torch.randn(2, 3, oh, ow)
            grid = (torch.rand(2, oh, ow, 2) * 2 - 1) * spread
            grid[0, 0, 0], grid[-1, -1, -1] = torch.tensor([-1.0, 1.0]), torch.tensor([0.0, 0.0])
            args = (g, x, grid, 0, padding, align, [True, True])
            for got, ref in zip(grid_sampler_2d_backward_as_gathers(*args), _aten.grid_sampler_2d_backward(*args),
                                strict=True):
                torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5, msg=lambda m, a=args[3:6]: f"{a}: {m}")
            cases += 1
    assert cases == 72


def test_only_the_masked_gradients_are_computed():
    x, grid, g = torch.randn(1, 2, 4, 4), torch.rand(1, 3, 3, 2) * 2 - 1, torch.randn(1, 2, 3, 3)
    grad_input, grad_grid = grid_sampler_2d_backward_as_gathers(g, x, grid, 0, 0, False, [False, True])
    assert grad_input is None
    torch.testing.assert_close(grad_grid, _aten.grid_sampler_2d_backward(g, x, grid, 0, 0, False, [False, True])[1])


@pytest.mark.parametrize("mode,padding", [("nearest", "zeros"), ("bilinear", "reflection")])
def test_other_modes_are_left_to_the_op(mode, padding):
    modes = {"bilinear": 0, "nearest": 1}
    pads = {"zeros": 0, "border": 1, "reflection": 2}
    x, grid, g = torch.randn(1, 2, 4, 4), torch.rand(1, 3, 3, 2), torch.randn(1, 2, 3, 3)
    assert grid_sampler_2d_backward_as_gathers(g, x, grid, modes[mode], pads[padding], False, [True, True]) \
        is NotImplemented


def test_deformable_sampling_trains_compiled_and_matches_cpu():
    """Sampling offsets learned from the features, as deformable attention does: the backward
    graph runs no node eagerly."""
    torch.manual_seed(0)
    offsets = torch.nn.Linear(4, 2)
    x = torch.randn(2, 4, 6, 6, requires_grad=True)

    def f(m, x):
        grid = torch.tanh(m(x.permute(0, 2, 3, 1)))  # [n, h, w, 2]
        return F.grid_sample(x * 2, grid, mode="bilinear", padding_mode="zeros", align_corners=False).square().sum()

    dev_offsets = torch.nn.Linear(4, 2).to(DEVICE)
    dev_offsets.load_state_dict(offsets.state_dict())
    xd = x.detach().to(DEVICE).requires_grad_()
    torch.compile(f, backend="neuron")(dev_offsets, xd).backward()
    f(offsets, x).backward()
    (backward,) = [g for g in get_metrics()["graphs"].values() if g["kind"] == "backward"]
    assert backward["eager_nodes"] == 0, backward["placement"]
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(dev_offsets.weight.grad.cpu(), offsets.weight.grad, rtol=1e-4, atol=1e-4)
