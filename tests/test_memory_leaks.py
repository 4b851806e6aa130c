"""Device memory returns to its post-warm-up value across a long training loop."""

from __future__ import annotations

import gc

import pytest
import torch
from support.reference_models import make


@pytest.mark.parametrize("steps", [1000])
def test_no_leak_over_1000_steps(steps):
    torch.manual_seed(0)
    model = make("mlp").to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(16, 32, device="neuron")
    y = torch.randint(0, 10, (16,), device="neuron")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):
        step()
    torch.neuron.synchronize()
    gc.collect()  # earlier tests' cyclic garbage must not be freed inside the measurement
    warm = torch.neuron.memory_allocated()
    for _ in range(steps):
        step()
    torch.neuron.synchronize()
    gc.collect()
    assert torch.neuron.memory_allocated() == warm
    assert torch.neuron.memory_stats()["active.all.current"] > 0
