"""``scatter_reduce.two`` compiled through ``scatter_add`` and one-hot reductions
(``compiler/scatter_reduction.py``)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchneuron.compiler import get_metrics, reset_metrics, scatter_reduction
from torchneuron.compiler.scatter_reduction import scatter_reduce_decomposed

DEVICE = "neuron"
_REDUCTIONS = ["sum", "prod", "mean", "amax", "amin"]


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(_REDUCTIONS), st.booleans(), st.integers(0, 1), st.integers(1, 6), st.integers(1, 9),
       st.sampled_from([torch.float32, torch.int32, torch.int64]), st.booleans(), st.integers(0, 2**31 - 1))
def test_matches_aten(reduce, include_self, dim, rows, width, dtype, with_nan, seed):
    g = torch.Generator().manual_seed(seed)
    shape = [rows, width]
    out_shape = list(shape)
    out_shape[dim] = max(1, shape[dim] // 2)  # several elements per output position, some none
    index = torch.randint(0, out_shape[dim], shape, generator=g)
    if dtype.is_floating_point:
        src, base = torch.randn(shape, generator=g), torch.randn(out_shape, generator=g)
        if with_nan:
            src.view(-1)[0] = float("nan")
    else:
        src, base = torch.randint(-5, 6, shape, generator=g, dtype=dtype), torch.randint(-5, 6, out_shape, generator=g, dtype=dtype)
    got = scatter_reduce_decomposed(base, dim, index, src, reduce, include_self)
    want = base.scatter_reduce(dim, index, src, reduce, include_self=include_self)
    # float: sums and products associate differently from ATen's sequential loop
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-5, atol=1e-6)


def test_index_narrower_than_src_reads_only_its_part():
    base, src = torch.zeros(2, 3), torch.arange(12.0).view(2, 6)
    index = torch.tensor([[0, 2], [1, 1]])
    for reduce in _REDUCTIONS:
        torch.testing.assert_close(scatter_reduce_decomposed(base, 1, index, src, reduce, False),
                                   base.scatter_reduce(1, index, src, reduce, include_self=False))


def test_dense_reductions_past_the_limit_stay_eager(monkeypatch):
    monkeypatch.setattr(scatter_reduction, "DENSE_LIMIT", 10)
    base, src, index = torch.zeros(4, 4), torch.randn(4, 8), torch.randint(0, 4, (4, 8))
    assert scatter_reduce_decomposed(base, 1, index, src, "amax", True) is NotImplemented
    assert scatter_reduce_decomposed(base, 1, index, src, "sum", True) is not NotImplemented


@pytest.mark.parametrize("reduce", _REDUCTIONS)
def test_compiles_forward_and_backward(reduce):
    torch.manual_seed(0)
    src, index, base = torch.randn(5, 12), torch.randint(0, 4, (5, 12)), torch.randn(5, 4)

    def f(b, s, i):
        return (b.mul(2).scatter_reduce(1, i, s * 1, reduce, include_self=False) + 1).square().sum()

    bd, sd = base.to(DEVICE).requires_grad_(), src.to(DEVICE).requires_grad_()
    b, s = base.clone().requires_grad_(), src.clone().requires_grad_()
    reset_metrics()
    got = torch.compile(f, backend="neuron")(bd, sd, index.to(DEVICE))
    got.backward()
    want = f(b, s, index)
    want.backward()
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(bd.grad.cpu(), b.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sd.grad.cpu(), s.grad, rtol=1e-5, atol=1e-5)
    placement = [where for g in get_metrics()["graphs"].values() for where in g["placement"].values()]
    assert "eager" not in placement
