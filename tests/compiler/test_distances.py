"""``torch.cdist`` forward and backward compiled (``compiler/distances.py``), against ATen's kernels."""

from __future__ import annotations

import math

import pytest
import torch

from torchneuron.compiler import get_metrics
from torchneuron.compiler.distances import PAIRWISE_LIMIT, cdist_backward, cdist_forward

DEVICE = "neuron"
_aten = torch.ops.aten
_NORMS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, math.inf]


def _operands(b1, b2, r1, r2, m, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x1 = torch.randn(*b1, r1, m, generator=g, dtype=dtype)
    x2 = torch.randn(*b2, r2, m, generator=g, dtype=dtype)
    if x1.shape[:-2] == x2.shape[:-2]:
        x2[..., 0, :] = x1[..., 0, :]  # a coincident pair: distance 0
    x2[..., -1, 0] = x1.reshape(-1, m)[0, 0]  # an equal coordinate: a zero difference (sign, p < 1)
    return x1, x2


@pytest.mark.parametrize("p", _NORMS, ids=lambda p: f"p{p}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_forward_and_backward_match_aten(p, dtype):
    """Coincident rows (zero distances) and equal coordinates included; broadcast batches; the
    matrix-product route of the 2-norm (more than 25 rows, or compute_mode 1) and the direct one."""
    rtol = 1e-5 if dtype == torch.float32 else 1e-12
    for case in [((), (), 5, 7, 3, None), ((2,), (2,), 4, 6, 5, None), ((3, 1), (2,), 3, 4, 2, None),
                 ((), (), 30, 6, 4, None), ((2,), (2,), 5, 5, 3, 1), ((), (), 30, 30, 3, 2)]:
        *shape, mode = case
        x1, x2 = _operands(*shape, dtype)
        ref = _aten._cdist_forward(x1, x2, p, mode)
        got = cdist_forward(x1, x2, p, mode)
        torch.testing.assert_close(got, ref, rtol=rtol, atol=rtol * 10, msg=lambda s, c=case: f"forward {c}: {s}")
        grad = torch.randn(ref.shape, dtype=dtype, generator=torch.Generator().manual_seed(1))
        for a, b, gr, dist in [(x1, x2, grad, ref), (x2, x1, grad.mT.contiguous(), ref.mT.contiguous())]:
            want = _aten._cdist_backward(gr, a, b, p, dist)
            have = cdist_backward(gr, a, b, p, dist)
            assert have.shape == want.shape
            torch.testing.assert_close(have, want, rtol=rtol * 10, atol=rtol * 10,
                                       msg=lambda s, c=case: f"backward {c}: {s}")


def test_half_precision_and_huge_pairwise_stay_with_aten():
    x = torch.randn(4, 3, dtype=torch.bfloat16)
    assert cdist_forward(x, x, 2.0) is NotImplemented  # ATen's CPU kernel refuses it too
    n = int(math.isqrt(PAIRWISE_LIMIT // 2)) + 2
    big = torch.empty(n, 2, device="meta")
    assert cdist_forward(big, big, 1.0) is NotImplemented


@pytest.mark.parametrize("p", [1.0, 2.0], ids=["p1", "p2"])
def test_cdist_trains_compiled_without_fallback(p):
    torch.manual_seed(0)
    x = torch.randn(2, 6, 4)
    codebook = torch.randn(9, 4)

    def f(a, c):
        return torch.cdist(a * 2, c, p=p).softmax(-1).square().sum()

    da, dc = x.to(DEVICE).requires_grad_(), codebook.to(DEVICE).requires_grad_()
    torch.compile(f, backend="neuron")(da, dc).backward()
    graphs = get_metrics()["graphs"].values()
    assert len(graphs) == 2 and all(g["eager_nodes"] == 0 for g in graphs), [g["placement"] for g in graphs]
    ra, rc = x.clone().requires_grad_(), codebook.clone().requires_grad_()
    f(ra, rc).backward()
    torch.testing.assert_close(da.grad.cpu(), ra.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dc.grad.cpu(), rc.grad, rtol=1e-4, atol=1e-5)
