"""Comparison helpers: device results against the CPU reference."""

from __future__ import annotations

import torch

DEVICE = "neuron"


def assert_close(dev: torch.Tensor, ref: torch.Tensor, **kw) -> None:
    assert dev.device.type == DEVICE, dev.device
    torch.testing.assert_close(dev.cpu(), ref, **kw)
