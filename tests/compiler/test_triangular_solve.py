"""``aten.linalg_solve_triangular`` compiled as batched products (``compiler/triangular_solve.py``)."""

from __future__ import annotations

import itertools

import pytest
import torch

import torchneuron
from torchneuron.compiler import get_metrics
from torchneuron.compiler.triangular_solve import BLOCK, MAX_ROWS, solve_triangular_as_products

DEVICE = "neuron"


def _system(batch, n, k, left, gen):
    """A random system with unit-sized diagonals (condition numbers of its triangles up to ~1e6
    at 130 rows); the triangle not solved holds random values too, which the solve ignores."""
    a = torch.randn(*batch, n, n, generator=gen) * 0.3
    a.diagonal(0, -2, -1).add_(torch.where(torch.rand(*batch, n, generator=gen) < 0.5, -1.0, 1.0))
    b = torch.randn(*batch, n, k, generator=gen) if left else torch.randn(*batch, k, n, generator=gen)
    return a, b


def _relative_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double() - ref).abs().max() / ref.abs().max().clamp_min(1)) if ref.numel() else 0.0


@pytest.mark.parametrize("upper,left,unitriangular", list(itertools.product((False, True), repeat=3)))
def test_matches_lapack_within_float32_rounding(upper, left, unitriangular):
    """Sizes below, at and above one block (padded and block-substituted), broadcast batches;
    against a float64 solve, within 1e-5 of the solution's scale, as LAPACK's float32 is."""
    gen = torch.Generator().manual_seed(0)
    worst = worst_lapack = 0.0
    for n, k, (batch_a, batch_b) in itertools.product(
            (1, 3, 5, 17, BLOCK, 100, 130), (1, 3, 64), [((), ()), ((2,), (2,)), ((2, 1), (3,)), ((), (2,))]):
        a, _ = _system(batch_a, n, k, left, gen)
        _, b = _system(batch_b, n, k, left, gen)
        kwargs = {"upper": upper, "left": left, "unitriangular": unitriangular}
        ref = torch.linalg.solve_triangular(a.double(), b.double(), **kwargs)
        lapack = torch.linalg.solve_triangular(a, b, **kwargs)
        got = solve_triangular_as_products(a, b, **kwargs)
        assert got.shape == lapack.shape and got.stride() == lapack.stride(), (n, k, batch_a, batch_b)
        worst_lapack = max(worst_lapack, _relative_error(lapack, ref))
        worst = max(worst, _relative_error(got, ref))
    print(f"largest error: {worst:.2e}, LAPACK's {worst_lapack:.2e}")
    assert worst < 1e-5 and worst_lapack < 1e-5


def test_reads_only_the_triangle_it_solves():
    gen = torch.Generator().manual_seed(1)
    for upper, unitriangular in itertools.product((False, True), repeat=2):
        a = torch.randn(2, 70, 70, generator=gen) * 0.1 + 2 * torch.eye(70)
        b = torch.randn(2, 70, 4, generator=gen)
        ones = torch.ones(70, 70, dtype=torch.bool)
        unread = ones.tril(-1) if upper else ones.triu(1)
        if unitriangular:
            unread = unread | torch.eye(70, dtype=torch.bool)
        dirty = torch.where(unread, float("nan"), a)
        clean = torch.linalg.solve_triangular(a, b, upper=upper, unitriangular=unitriangular)
        got = solve_triangular_as_products(dirty, b, upper=upper, unitriangular=unitriangular)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, clean, rtol=1e-5, atol=1e-5)


def test_gated_delta_net_systems_as_accurate_as_lapack():
    """The UT transform of Qwen3-Next's chunked gated delta rule: ``(k_beta @ k.T) * decay`` with
    L2-normalised keys, betas in (0, 1) and decays ≤ 1, solved unit-lower-triangular."""
    gen = torch.Generator().manual_seed(2)
    for chunk, dk in ((16, 16), (64, 64), (64, 128)):
        key = torch.nn.functional.normalize(torch.randn(2, 4, 3, chunk, dk, generator=gen), dim=-1)
        beta = torch.rand(2, 4, 3, chunk, generator=gen)
        cum = (-0.5 * torch.rand(2, 4, 3, chunk, generator=gen)).cumsum(-1)
        upper_mask = torch.ones(chunk, chunk, dtype=torch.bool).triu(1)
        decay = (cum.unsqueeze(-1) - cum.unsqueeze(-2)).masked_fill(upper_mask, float("-inf")).exp()
        system = ((key * beta[..., None]) @ key.mT) * decay
        values = torch.randn(2, 4, 3, chunk, dk, generator=gen)
        ref = torch.linalg.solve_triangular(system.double(), values.double(), upper=False, unitriangular=True)
        lapack = torch.linalg.solve_triangular(system, values, upper=False, unitriangular=True)
        got = solve_triangular_as_products(system, values, upper=False, unitriangular=True)
        assert _relative_error(got, ref) <= 2 * _relative_error(lapack, ref) + 1e-7


@pytest.mark.parametrize("case", ["bfloat16", "float16", "complex", "mixed", "too large"])
def test_what_aten_refuses_or_is_too_large_is_left_to_the_op(case):
    n = MAX_ROWS + 1 if case == "too large" else 4
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "complex": torch.complex64}.get(case, torch.float32)
    a = torch.eye(n, dtype=dtype)
    b = torch.ones(n, 2, dtype=torch.float64 if case == "mixed" else dtype)
    assert solve_triangular_as_products(a, b, upper=False) is NotImplemented


def _ut_solve(system, values):
    x = torch.linalg.solve_triangular(system, values, upper=False, unitriangular=True)
    y = torch.linalg.solve_triangular(system.mT, x, upper=True, left=True)
    return (x * y).sum(), x.transpose(-1, -2).reshape(x.shape[0], -1)  # a view ATen's layout allows


def test_compiled_forward_and_backward_run_on_the_device():
    """Forward and backward (whose gradients are triangular solves again) in one program each,
    no CPU fallback, equal to the CPU's gradients."""
    torch.manual_seed(0)
    system = torch.randn(3, 64, 64) * 0.1 + torch.eye(64)
    values = torch.randn(3, 64, 8)
    torchneuron.clear_op_tracking()
    sd, vd = system.to(DEVICE).requires_grad_(), values.to(DEVICE).requires_grad_()
    loss, flat = torch.compile(_ut_solve, backend="neuron")(sd, vd)
    loss.backward()
    sc, vc = system.clone().requires_grad_(), values.clone().requires_grad_()
    ref_loss, ref_flat = _ut_solve(sc, vc)
    ref_loss.backward()
    assert torchneuron.get_fallback_ops() == {}
    for graph in get_metrics()["graphs"].values():
        assert graph["eager_nodes"] == 0 and graph["regions"] == 1, graph["placement"]
    torch.testing.assert_close(flat.cpu(), ref_flat, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(loss.cpu(), ref_loss, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(sd.grad.cpu(), sc.grad, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(vd.grad.cpu(), vc.grad, rtol=1e-4, atol=1e-4)
