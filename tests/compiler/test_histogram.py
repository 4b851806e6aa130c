"""``aten.histc`` compiled as comparisons and a sum (``compiler/histogram.py``)."""

from __future__ import annotations

import random

import pytest
import torch

from torchneuron.compiler import get_metrics
from torchneuron.compiler.histogram import histc_as_counts

DEVICE = "neuron"


def _sample(rng: random.Random, dtype: torch.dtype, bins: int, lo: float, hi: float) -> torch.Tensor:
    shape = [rng.randint(0, 6) for _ in range(rng.randint(1, 3))]
    kind = rng.random()
    if kind < 0.4:  # exactly on the bin edges, the last one included
        x = torch.randint(0, bins + 1, shape).double() * (hi - lo) / bins + lo
    else:  # a fifth of the range below and above it as well
        x = torch.rand(shape, dtype=torch.float64) * (hi - lo) * 1.4 + lo - 0.2 * (hi - lo)
    x = x.to(dtype)
    if x.numel() and rng.random() < 0.2:
        x.view(-1)[0] = float("nan")  # skipped, as outside values are
    return x


def test_decomposition_matches_aten_exactly():
    """Bin positions computed as ATen does, one operation after the other in the input's dtype:
    equal counts on random inputs with values on every edge, outside the range and NaN."""
    rng = random.Random(0)
    torch.manual_seed(0)
    cases = 0
    for _ in range(2500):
        dtype = rng.choice([torch.float32, torch.float64, torch.float16, torch.bfloat16])
        bins = rng.choice([1, 2, 3, 5, 7, 8, 10, 16, 33, 100])
        lo = rng.choice([0.0, -1.0, -3.7, 0.1, 2.0])
        hi = lo + rng.choice([0.3, 1.0, 7.0, 10.0, 1e-3, 100.0])
        x = _sample(rng, dtype, bins, lo, hi)
        got = histc_as_counts(x, bins, lo, hi)
        if got is NotImplemented:  # (1e-3 wide ranges vanish in bfloat16)
            continue
        assert torch.equal(got, torch.histc(x, bins, lo, hi)), (dtype, bins, lo, hi, x)
        cases += 1
    assert cases > 2000


def test_integer_input_counts_like_the_device_eager_kernel():
    ids = torch.tensor([[0, 3, 3], [1, 7, -1], [8, 2, 3]], dtype=torch.int32)
    expected = torch.histc(ids.float(), bins=8, min=0, max=7).to(torch.int32)
    got = histc_as_counts(ids, 8, 0, 7)
    assert got.dtype == torch.int32 and torch.equal(got, expected)
    assert torch.equal(torch.histc(ids.to(DEVICE), bins=8, min=0, max=7).cpu(), expected)  # eager


@pytest.mark.parametrize("bins,lo,hi", [(8, 0, 0), (4, 2.0, 2.0)])
def test_a_range_taken_from_the_data_is_left_to_the_op(bins, lo, hi):
    assert histc_as_counts(torch.randn(10), bins, lo, hi) is NotImplemented


def _router(logits: torch.Tensor, experts: int):
    """Mixtral-style routing statistics: top-2 experts per token counted with ``histc`` (on
    integer ids, as transformers' MoE layers do off the CPU) and the load-balancing term."""
    weights, chosen = torch.topk(torch.softmax(logits, -1), 2, dim=-1)
    per_expert = torch.histc(chosen.reshape(-1).int(), bins=experts, min=0, max=experts - 1)
    load = torch.histc(chosen.reshape(-1).float(), bins=experts, min=0, max=experts)
    return per_expert, load, weights * load[chosen]


def test_routing_histogram_is_compiled_and_matches_cpu():
    torch.manual_seed(0)
    logits = torch.randn(16, 6)
    got = torch.compile(_router, backend="neuron")(logits.to(DEVICE), 6)
    per_expert, load, scaled = _router_on_cpu(logits, 6)  # the CPU has no integer histc
    (graph,) = get_metrics()["graphs"].values()
    eager = {n for n, where in graph["placement"].items() if not where.startswith("fused_")}
    # topk's tie order is the host's; the softmax alone before it is not worth a program
    assert eager == {"_softmax", "topk"}, graph["placement"]
    assert got[0].dtype == torch.int32 and torch.equal(got[0].cpu(), per_expert)
    assert torch.equal(got[1].cpu(), load)
    torch.testing.assert_close(got[2].cpu(), scaled)


def _router_on_cpu(logits: torch.Tensor, experts: int):
    weights, chosen = torch.topk(torch.softmax(logits, -1), 2, dim=-1)
    per_expert = torch.histc(chosen.reshape(-1).float(), bins=experts, min=0, max=experts - 1).int()
    load = torch.histc(chosen.reshape(-1).float(), bins=experts, min=0, max=experts)
    return per_expert, load, weights * load[chosen]
