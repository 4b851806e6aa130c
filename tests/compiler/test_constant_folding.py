"""Uniform constants folded into ``aten.full`` before lowering (compiler/constant_folding.py)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torchneuron.compiler.constant_folding import fold_uniform_constants

DEVICE = "neuron"
_aten = torch.ops.aten


def _targets(gm) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_a_reduction_of_a_constant_becomes_one_full():
    gm = make_fx(lambda x: (torch.full_like(x, 2.0).exp().sum(-1) + x.sum(-1),), tracing_mode="fake")(
        torch.randn(3, 4))
    assert fold_uniform_constants(gm) == 1
    targets = _targets(gm)
    assert _aten.exp.default not in targets and _aten.full_like.default not in targets
    (full,) = [n for n in gm.graph.nodes if n.target is _aten.full.default]
    assert full.args[0] == [3] and full.args[1] == pytest.approx(4 * math.exp(2.0), rel=1e-6)
    x = torch.randn(3, 4)
    torch.testing.assert_close(gm(x)[0], torch.full_like(x, 2.0).exp().sum(-1) + x.sum(-1))


def test_values_that_depend_on_inputs_or_vary_or_are_random_stay():
    def f(x):
        ramp = torch.arange(4.0).exp()  # a constant, but not one value throughout
        noise = torch.rand_like(x).sum(-1)  # random: drawn from the device generator at run time
        return ((x.exp() + ramp).sum(-1) + noise,)

    gm = make_fx(f, tracing_mode="fake")(torch.randn(2, 4))
    before = _targets(gm)
    assert fold_uniform_constants(gm) == 0
    assert _targets(gm) == before


def test_only_the_frontier_of_a_folded_chain_is_replaced():
    def f(x):
        ones = ~torch.zeros_like(x, dtype=torch.bool)
        return (ones.float().sum(-1) * x.sum(-1), ones)

    gm = make_fx(f, tracing_mode="fake")(torch.randn(2, 5))
    assert fold_uniform_constants(gm) == 2  # the output mask and the row count
    fulls = sorted((n.args[1] for n in gm.graph.nodes if n.target is _aten.full.default), key=float)
    assert fulls == [True, 5.0]
    assert _aten.bitwise_not.default not in _targets(gm)


# IREE 3.13 summed one element of such rows (exp(2) for a row of four exp(2))
CASES = {
    "exp_of_full": lambda x: torch.full_like(x, 2.0).exp().sum(-1) * x[:, 0],
    "not_of_zeros": lambda x: (~torch.zeros_like(x, dtype=torch.bool)).float().sum(-1) + x.sum(-1),
    "not_of_a_constant_comparison": lambda x: (~(torch.zeros_like(x, dtype=torch.long) >= 0.5)).float().sum(-1),
    "negated_full": lambda x: (-torch.full_like(x, -1.0)).mean(-1) - x.amax(-1),
}


@pytest.mark.parametrize("name", CASES)
def test_compiled_reductions_of_constants_match_cpu(name):
    f = CASES[name]
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    torch._dynamo.reset()
    got = torch.compile(f, backend="neuron")(x.to(DEVICE))
    torch.testing.assert_close(got.cpu(), f(x), rtol=1e-5, atol=1e-5)


def test_running_statistics_over_an_all_valid_mask_match_cpu():
    """TimesFM 2.5 folds patch statistics into running ones (Welford) under a padding mask that
    defaults to all-valid, so every count and mask in the loop is a constant."""

    def update(count, mean, std, values, mask):
        valid = (~mask).to(values.dtype)
        n = valid.sum(-1)
        n_safe = torch.where(n == 0, torch.ones_like(n), n)
        m = (values * valid).sum(-1) / n_safe
        var = (((values - m.unsqueeze(-1)) * valid) ** 2).sum(-1) / n_safe
        total = count + n
        new_mean = (count * mean + m * n) / total
        new_var = (count * std**2 + n * var + count * (mean - new_mean) ** 2 + n * (m - new_mean) ** 2) / total
        return total, new_mean, new_var.clamp(min=0).sqrt()

    def f(x):
        patches = x.view(2, -1, 8)
        masks = torch.zeros_like(x, dtype=torch.long).view(2, -1, 8) >= 0.5
        count, mean, std = x.new_zeros(2), x.new_zeros(2), x.new_zeros(2)
        history = []
        for i in range(patches.shape[1]):
            count, mean, std = update(count, mean, std, patches[:, i], masks[:, i])
            history += [mean, std]
        return torch.stack(history, 1), count

    x = torch.randn(2, 48, generator=torch.Generator().manual_seed(0)) * 3 + 1
    ref = f(x)
    torch._dynamo.reset()
    got = torch.compile(f, backend="neuron")(x.to(DEVICE))
    for r, g in zip(ref, got, strict=True):
        torch.testing.assert_close(g.cpu(), r, rtol=1e-5, atol=1e-5)


def test_a_reduction_of_constants_behind_a_strided_view_is_folded():
    """Mask2Former's valid ratios of its default (all-valid) mask: ``(~mask[:, :, 0]).sum(1)``
    feeds the model through a slice of the stacked ratios, a frontier that is not contiguous (so
    not replaced by a ``full``): the reduction itself is, or IREE sums one element per row."""

    def f(x):
        mask = torch.zeros_like(x, dtype=torch.bool)
        height = (~mask[:, :, 0]).sum(1).float() / x.shape[1]
        width = (~mask[:, 0, :]).sum(1).float() / x.shape[2]
        ratios = torch.stack([width, height], -1)
        return ratios[:, :1] * x[:, 0, :1] + ratios[:, 1:] * x[:, 1, 1:2]

    gm = make_fx(f, tracing_mode="fake")(torch.randn(2, 4, 3))
    assert fold_uniform_constants(gm) >= 2
    assert _aten.sum.dim_IntList not in _targets(gm)
    x = torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(0))
    torch._dynamo.reset()
    got = torch.compile(f, backend="neuron")(x.to(DEVICE))
    torch.testing.assert_close(got.cpu(), f(x), rtol=1e-6, atol=1e-6)
