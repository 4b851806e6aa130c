"""Python float arguments rounded to the computed dtype to nearest before lowering (``passes.round_float_scalars``):
IREE folds the f64 constants torch-mlir emits toward zero."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torchneuron.compiler import get_metrics
from torchneuron.compiler.passes import round_float_scalars

DEVICE = "neuron"


def test_product_by_a_float_is_bitwise_eager():
    def f(x):
        return -(x * 0.8571428571428571)  # two ops: a lone op is not compiled; no product-sum to contract

    x = torch.arange(64, dtype=torch.float32)
    got = torch.compile(f, backend="neuron")(x.to(DEVICE)).cpu()
    assert torch.equal(got, f(x))  # was one float32 ulp low on most elements (6/7 folded to 0.857142806)


def test_float64_product_is_float32_arithmetic():
    """float64 is computed as float32 (dtype policy): its float arguments are rounded to float32 to
    nearest too, so the compiled product is bitwise the CPU's float32 one (folded toward zero it was one
    ulp low on most elements)."""
    def f(x):
        return -(x * 0.8571428571428571)

    x = torch.arange(64, dtype=torch.float64)
    got = torch.compile(f, backend="neuron")(x.to(DEVICE)).cpu()
    assert got.dtype == torch.float64 and torch.equal(got, f(x.float()).double())


def test_align_corners_resize_picks_eager_source_pixels(monkeypatch):
    """The source position 7·(6/7) is 6: folded toward zero it was 5.9999995, which took pixel 5."""
    monkeypatch.setenv("TORCHNEURON_VERIFY_REGIONS", "1")

    def f(x):
        return F.interpolate(x, size=(8, 8), mode="bilinear", align_corners=True) * 2

    x = torch.randn(1, 2, 7, 7)
    got = torch.compile(f, backend="neuron")(x.to(DEVICE)).cpu()
    torch.testing.assert_close(got, f(x), rtol=1e-6, atol=1e-6)
    assert get_metrics()["mismatched_regions"] == []


def test_rounding_rules():
    def f(x, d):
        a = torch.ops.aten.mul.Tensor(x, 0.1)  # pointwise on float32: rounded
        b = torch.ops.aten.mul.Tensor(d, 0.1)  # on float64: rounded to float32 (kept with exact dtypes)
        c = torch.ops.aten.arange.start_step(0.0, 1.0, 0.1)  # computed in double by ATen: kept
        e = torch.ops.aten.full.default([2], 0.1, dtype=torch.float32)  # a fill: rounded
        return a, b, c, e

    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    with FakeTensorMode() as mode:
        gm = make_fx(f)(mode.from_tensor(torch.ones(2)), mode.from_tensor(torch.ones(2, dtype=torch.float64)))
    assert round_float_scalars(gm) == 3  # the float64 product too: the chip computes it in float32
    f32 = torch.tensor(0.1, dtype=torch.float32).item()
    args = {n.target: n.args for n in gm.graph.nodes if n.op == "call_function"}
    assert args[torch.ops.aten.full.default][1] == f32
    assert args[torch.ops.aten.arange.start_step][2] == 0.1
    muls = [n.args[1] for n in gm.graph.nodes if n.target is torch.ops.aten.mul.Tensor]
    assert muls == [f32, f32]
