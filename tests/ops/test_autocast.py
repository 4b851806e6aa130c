"""torch.autocast("neuron") follows the CUDA autocast policy."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_policies(dtype):
    a = torch.randn(8, 8, device="neuron")
    lin = torch.nn.Linear(8, 8).to("neuron")
    with torch.autocast("neuron", dtype=dtype):
        assert torch.is_autocast_enabled("neuron")
        assert (a @ a).dtype == dtype  # lower precision
        assert lin(a).dtype == dtype
        assert torch.softmax(a.to(dtype), -1).dtype == torch.float32  # float32 policy
        assert torch.nn.functional.layer_norm(a.to(dtype), (8,)).dtype == torch.float32
        assert torch.addcmul(a, a.to(dtype), a).dtype == torch.float32  # promote
        assert (a + a).dtype == torch.float32  # untouched
        with torch.autocast("neuron", enabled=False):
            assert (a @ a).dtype == torch.float32
    assert (a @ a).dtype == torch.float32


def test_autocast_backward_and_grad_dtype():
    lin = torch.nn.Linear(4, 4).to("neuron")
    x = torch.randn(2, 4, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        loss = lin(x).float().pow(2).mean()
    loss.backward()
    assert lin.weight.grad.dtype == torch.float32  # master weights stay fp32
