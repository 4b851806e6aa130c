"""``nn.LSTM`` / ``nn.LSTMCell`` on the device (PyTorch's fused accelerator cell) match the CPU,
forward and backward, with and without biases."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn


@pytest.mark.parametrize("bias", [True, False])
def test_lstm_matches_cpu(bias):
    torch.manual_seed(0)
    cpu = nn.LSTM(8, 16, num_layers=2, bias=bias, batch_first=True)
    dev = copy.deepcopy(cpu).to("neuron")
    x = torch.randn(3, 5, 8)
    outs = []
    for model, inp in ((cpu, x), (dev, x.to("neuron"))):
        y, (h, c) = model(inp)
        (y.sum() + h.square().sum() + c.sum()).backward()  # gradients through hy and cy
        outs.append((y, h, c))
    for a, b in zip(outs[0], outs[1], strict=True):
        torch.testing.assert_close(b.cpu(), a.detach(), rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(cpu.named_parameters(), dev.parameters(), strict=True):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-5, msg=name)


def test_lstm_cell_only_cell_state_used():
    """Backward with no gradient reaching ``hy`` (only the cell state is used)."""
    torch.manual_seed(0)
    cpu = nn.LSTMCell(4, 6)
    dev = copy.deepcopy(cpu).to("neuron")
    x = torch.randn(2, 4)
    cpu(x)[1].sum().backward()
    dev(x.to("neuron"))[1].sum().backward()
    for p, q in zip(cpu.parameters(), dev.parameters(), strict=True):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-6)
