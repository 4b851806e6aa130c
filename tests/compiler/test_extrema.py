"""Minima and maxima of int64 and bool tensors compiled in int32 (``compiler/extrema.py``)."""

from __future__ import annotations

import pytest
import torch

from torchneuron.compiler import get_metrics, reset_metrics

DEVICE = "neuron"


def _extrema(x):
    x = x * 1 if x.dtype != torch.bool else x.logical_not()  # neighbours: each op inside a region
    values = (torch.min(x, -1)[0], torch.max(x, 1)[0], torch.amin(x, (0, 2)), torch.amax(x, -1, keepdim=True))
    shifted = tuple(v + 0 if v.dtype != torch.bool else v.logical_not() for v in values)
    indices = (torch.min(x, -1)[1] + 0, torch.max(x, 0)[1] + 0)
    if x.dtype != torch.bool:  # ATen has no argmin/argmax of bool tensors
        indices += (torch.argmin(x, -1) + 0, torch.argmax(x, 1) + 0)
    return shifted + indices


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_compiled_extrema_equal_the_cpu(dtype):
    """TimesFM's ``torch.min(padding, dim=-1)`` of an int64 mask gave -1 everywhere, compiled."""
    torch.manual_seed(0)
    x = torch.randint(-3, 4, (3, 5, 6)).to(dtype)  # ties everywhere: the first extreme's index
    x[0, 0] = 2**31 - 5 if dtype != torch.bool else x[0, 0]
    reset_metrics()
    got = torch.compile(_extrema, backend="neuron")(x.to(DEVICE))
    for i, (g, e) in enumerate(zip(got, _extrema(x), strict=True)):
        assert g.dtype == e.dtype and torch.equal(g.cpu(), e), (i, g, e)
    (graph,) = get_metrics()["graphs"].values()
    eager = {n: w for n, w in graph["placement"].items() if not w.startswith("fused_")}
    assert not eager, eager
