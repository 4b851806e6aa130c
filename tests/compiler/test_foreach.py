"""Optimizer-style ``_foreach_*`` updates compile into fused regions (per-tensor decompositions)."""

from __future__ import annotations

import torch
from helpers import DEVICE

from torchneuron.compiler import get_metrics, reset_metrics


def _update(params, grads, avgs):
    torch._foreach_lerp_(avgs, grads, 0.1)
    torch._foreach_mul_(params, 0.99)
    denom = torch._foreach_add(torch._foreach_sqrt(torch._foreach_abs(avgs)), 1e-8)
    torch._foreach_addcdiv_(params, avgs, denom, [-0.01, -0.02])
    torch._foreach_add_(params, grads, alpha=-0.5)
    return params


def test_foreach_updates_compile_without_eager_nodes():
    torch._dynamo.reset()
    reset_metrics()
    g = torch.Generator().manual_seed(0)
    host = [[torch.randn(5, 3, generator=g), torch.randn(7, generator=g)] for _ in range(3)]
    ref = _update(*[[t.clone() for t in ts] for ts in host])
    dev = [[t.to(DEVICE) for t in ts] for ts in host]
    torch.compile(_update, backend="neuron")(*dev)
    for d, r in zip(dev[0], ref, strict=True):
        torch.testing.assert_close(d.cpu(), r, rtol=1e-5, atol=1e-6)
    for d, r in zip(dev[2], [t.clone() for t in host[2]], strict=True):
        assert not torch.equal(d.cpu(), r)  # the averages were updated in place too
    graphs = list(get_metrics()["graphs"].values())
    assert graphs and all(gr["eager_nodes"] == 0 for gr in graphs), graphs
