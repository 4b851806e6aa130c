"""The cost model scales as roofline theory says, using the target table's figures."""

from __future__ import annotations

import pytest
import torch

from torchneuron.profiler import cost_model as cm
from torchneuron.profiler.recorder import TensorMeta
from torchneuron.runtime.target import TARGETS

TRN2 = TARGETS["trn2"]


def T(shape, dtype=torch.bfloat16):
    n = 1
    for s in shape:
        n *= s
    return TensorMeta(tuple(shape), dtype, n * torch.tensor([], dtype=dtype).element_size())


def mm(m, k, n, dtype=torch.bfloat16, target=TRN2):
    return cm.cost("kernel", "aten::mm", [T((m, k), dtype), T((k, n), dtype)], [T((m, n), dtype)], target)


def test_large_bf16_matmul_is_flops_over_peak():
    c = mm(8192, 8192, 8192)
    expected = 2 * 8192**3 / TRN2.peak_flops("bf16")
    assert c.bound == "compute" and c.category == "matmul" and c.engine == "tensor"
    assert c.flops == 2 * 8192**3
    assert c.time_s == pytest.approx(expected, rel=0.05)


@pytest.mark.parametrize("dtype,family", [(torch.float32, "fp32"), (torch.float16, "fp16"), (torch.float8_e4m3fn, "fp8")])
def test_matmul_peak_depends_on_dtype(dtype, family):
    c = mm(4096, 4096, 4096, dtype)
    assert c.compute_s == pytest.approx(2 * 4096**3 / TRN2.peak_flops(family), rel=1e-6)


def test_matmul_time_proportional_to_flops_above_ridge():
    ridge = cm.ridge_point(TRN2, "bf16")
    sizes = [2048, 4096, 8192]
    costs = [mm(s, s, s) for s in sizes]
    for c in costs:
        assert c.flops / c.bytes > ridge and c.bound == "compute"
    for c in costs[1:]:
        assert (c.time_s - c.fixed_s) / (costs[0].time_s - costs[0].fixed_s) == pytest.approx(c.flops / costs[0].flops, rel=1e-6)


def test_small_matmul_below_ridge_is_memory_bound():
    c = mm(4096, 4096, 64)  # matrix-vector-like: intensity ~62 flop/byte, below the ridge (~230)
    assert c.flops / c.bytes < cm.ridge_point(TRN2)
    assert c.bound == "memory"
    assert c.time_s - c.fixed_s == pytest.approx(c.bytes / TRN2.hbm_bandwidth, rel=1e-6)


def test_elementwise_time_proportional_to_bytes():
    def add(n, dtype=torch.float32):
        return cm.cost("kernel", "aten::add.Tensor", [T((n,), dtype), T((n,), dtype)], [T((n,), dtype)], TRN2)

    a, b = add(1 << 22), add(1 << 24)
    assert a.category == "elementwise" and a.engine == "vector" and a.bound == "memory"
    assert (b.time_s - b.fixed_s) / (a.time_s - a.fixed_s) == pytest.approx(b.bytes / a.bytes, rel=1e-6)
    assert a.memory_s == pytest.approx(a.bytes / TRN2.hbm_bandwidth)


def test_trn3_prices_memory_bound_ops_by_its_bandwidth():
    args = ("kernel", "aten::mul.Tensor", [T((1 << 24,), torch.float32)] * 2, [T((1 << 24,), torch.float32)])
    r = cm.cost(*args, TRN2).memory_s / cm.cost(*args, TARGETS["trn3"]).memory_s
    assert r == pytest.approx(TARGETS["trn3"].hbm_bandwidth / TRN2.hbm_bandwidth)


def test_conv_and_attention_flops():
    x, w, y = T((8, 64, 32, 32)), T((128, 64, 3, 3)), T((8, 128, 32, 32))
    c = cm.cost("kernel", "aten::convolution", [x, w, None], [y], TRN2)
    assert c.category == "conv" and c.flops == 2 * y.numel * 64 * 9
    q = T((2, 8, 1024, 64))
    a = cm.cost("kernel", "aten::_scaled_dot_product_flash_attention_for_cpu", [q, q, q], [q], TRN2)
    assert a.category == "attention" and a.flops == 4 * 16 * 1024 * 1024 * 64


def test_classification_and_transfers():
    assert cm.classify("kernel", "aten::gelu")[1] == "scalar"
    assert cm.classify("kernel", "aten::sum.dim_IntList")[0] == "reduction"
    assert cm.classify("kernel", "aten::empty.memory_format")[0] == "allocation"
    assert cm.classify("kernel", "aten::index_select")[1] == "gpsimd"
    h2d = cm.cost("copy_h2d", "aten::copy_", [T((1 << 20,), torch.float32)], [T((1 << 20,), torch.float32)], TRN2)
    assert h2d.category == "transfer"
    assert h2d.time_s == pytest.approx(4 * (1 << 20) / cm.host_link_bandwidth(TRN2) + TRN2.dma_fixed_cost_s)


def test_collective_ring_model():
    t = cm.collective_time(TRN2, "c10d::allreduce_", 1 << 30, 8)
    bw = TRN2.chip_to_chip_bandwidth / TRN2.logical_cores_per_chip
    assert t == pytest.approx(2 * 7 / 8 * (1 << 30) / bw)
    assert cm.collective_time(TRN2, "c10d::allreduce_", 1 << 30, 1) == 0.0


def test_every_assumption_is_documented():
    for key, (_value, why) in cm.ASSUMPTIONS.items():
        assert why, key
