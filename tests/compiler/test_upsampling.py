"""Linear and bicubic upsampling's backward as matrix products (``compiler/upsampling.py``)."""

from __future__ import annotations

import itertools

import pytest
import torch

from torchneuron.compiler import get_metrics
from torchneuron.compiler.upsampling import upsampling_decompositions

DEVICE = "neuron"
_aten = torch.ops.aten
_TABLE = upsampling_decompositions()
_SIZES = [1, 2, 5, 7, 10]
_OUTS = [1, 3, 5, 7, 14, 20]


def _cases(dims: int):
    """(input size, output size, align_corners, scales) per dimension, scales given or not."""
    for size, out, align in itertools.product(_SIZES, _OUTS, [False, True]):
        yield [size] * dims, [out] * dims, align, [None] * dims
        if not align:  # a given scale factor, not quite out/size, as F.interpolate passes it
            yield [size] * dims, [out] * dims, align, [out / size * 1.03] * dims
    yield [5, 4, 3][:dims], [9, 4, 2][:dims], False, [None] * dims  # one size per dimension


@pytest.mark.parametrize("op", [_aten.upsample_linear1d_backward.default, _aten.upsample_bilinear2d_backward.default,
                                _aten.upsample_trilinear3d_backward.default], ids=["1d", "2d", "3d"])
def test_backward_decomposition_matches_aten(op):
    """ATen's source indices and weights (an output as long as its input copies it, whatever
    the scale); the sums in another order than ATen's scatter: float32 rounding apart."""
    dims = {"upsample_linear1d_backward": 1, "upsample_bilinear2d_backward": 2}.get(op.__name__.split(".")[0], 3)
    torch.manual_seed(0)
    cases = 0
    for size, out, align, scales in _cases(dims):
        if dims == 3 and max(out) > 7:
            continue  # (keeps the 3-D cases small)
        grad = torch.randn(2, 3, *out)
        args = (grad, out, [2, 3, *size], align, *scales)
        ref = op(*args)
        torch.testing.assert_close(_TABLE[op](*args), ref, rtol=1e-5, atol=1e-5 * max(1.0, float(ref.abs().max())),
                                   msg=lambda m, a=args[1:]: f"{a}: {m}")
        cases += 1
    assert cases > 30


def test_float64_gradient_stays_float64():
    grad = torch.randn(1, 2, 6, 4, dtype=torch.float64)
    args = (grad, [6, 4], [1, 2, 3, 2], False, None, None)
    got = _TABLE[_aten.upsample_bilinear2d_backward.default](*args)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, _aten.upsample_bilinear2d_backward(*args), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", [_aten.upsample_bilinear2d_backward, _aten.upsample_bicubic2d_backward],
                         ids=["bilinear", "bicubic"])
def test_backward_is_compiled_and_matches_cpu(op):
    """The backward op as autograd calls it outside compiled graphs (eager and adaptive mode
    record it); inside one it lowers instead of running on the CPU."""
    torch.manual_seed(0)
    grad = torch.randn(2, 3, 14, 9)

    def f(g):
        return op(g * 2, [14, 9], [2, 3, 7, 5], False, None, None) + 1

    got = torch.compile(f, backend="neuron")(grad.to(DEVICE))
    (graph,) = get_metrics()["graphs"].values()
    assert graph["eager_nodes"] == 0, graph["placement"]
    torch.testing.assert_close(got.cpu(), f(grad), rtol=1e-5, atol=1e-5)


def test_bicubic_backward_decomposition_matches_aten():
    """Four clamped taps per output with Keys' coefficients, per dimension; scales given or not,
    both corner conventions, one dimension unchanged (computed, not copied: ATen copies only when
    neither changes), and downsampling."""
    op = _aten.upsample_bicubic2d_backward.default
    torch.manual_seed(0)
    cases = 0
    for size, out, align, scales in itertools.chain(_cases(2), [([5, 7], [5, 12], False, [None, None]),
                                                                 ([9, 6], [4, 6], True, [None, None])]):
        for dtype in (torch.float32, torch.float64):
            grad = torch.randn(2, 3, *out, dtype=dtype)
            args = (grad, out, [2, 3, *size], align, *scales)
            ref = op(*args)
            got = _TABLE[op](*args)
            assert got.dtype == dtype
            torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5 * max(1.0, float(ref.abs().max())),
                                       msg=lambda m, a=args[1:]: f"{a}: {m}")
            cases += 1
    assert cases > 100


@pytest.mark.parametrize("op", [_aten.upsample_nearest1d_backward.default,
                                _aten._upsample_nearest_exact1d_backward.default], ids=["nearest", "nearest-exact"])
def test_nearest1d_backward_decomposition_matches_aten(op):
    """One-hot rows with ATen's float32 source index: equal sizes, doubling, up- and downsampling,
    scales given (a factor not quite out/size) or not; float32 and float64 gradients."""
    torch.manual_seed(0)
    cases = 0
    for size, out in itertools.product([1, 2, 3, 5, 7, 10, 16], [1, 2, 3, 5, 7, 14, 20, 32, 33]):
        for scale in (None, out / size, out / size * 1.03):
            for dtype in (torch.float32, torch.float64):
                grad = torch.randn(2, 3, out, dtype=dtype)
                args = (grad, [out], [2, 3, size], scale)
                ref = op(*args)
                got = _TABLE[op](*args)
                assert got.dtype == dtype
                torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6 * max(1.0, float(ref.abs().max())),
                                           msg=lambda m, a=args[1:]: f"{a}: {m}")
                cases += 1
    assert cases > 300


def test_nearest1d_backward_is_compiled_and_matches_cpu():
    """The backward op as autograd calls it outside compiled graphs (eager and adaptive mode
    record it; inside a compiled training graph PyTorch decomposes nearest upsampling to
    indexing): it lowers instead of running on the CPU."""
    torch.manual_seed(0)
    grad = torch.randn(2, 4, 17)

    def f(g):
        return _aten.upsample_nearest1d_backward(g * 2, [17], [2, 4, 7], 2.5) + 1

    got = torch.compile(f, backend="neuron")(grad.to(DEVICE))
    (graph,) = get_metrics()["graphs"].values()
    assert graph["eager_nodes"] == 0, graph["placement"]
    torch.testing.assert_close(got.cpu(), f(grad), rtol=1e-5, atol=1e-5)
