"""Streams and events: all streams are ordered on the device's one hardware queue."""

from __future__ import annotations

import pytest
import torch


def test_stream_api_and_ordering():
    s1 = torch.neuron.Stream()
    s2 = torch.neuron.Stream(priority=-1)
    assert s1 != s2 and s2.priority == -1
    assert torch.neuron.current_stream() == torch.neuron.default_stream()
    x = torch.zeros(1000, device="neuron")
    with torch.neuron.stream(s1):
        assert torch.neuron.current_stream() == s1
        x.add_(1)
        ev = s1.record_event()
    s2.wait_event(ev)
    with torch.neuron.stream(s2):
        x.mul_(3)  # ordered after s1's add on the single queue
    s2.wait_stream(s1)
    assert ev.query() and s1.query()
    s1.synchronize()
    torch.neuron.synchronize()
    assert torch.neuron.current_stream() == torch.neuron.default_stream()
    assert x.sum().item() == 3000.0


def test_set_stream_and_accelerator_api():
    s = torch.neuron.Stream()
    torch.neuron.set_stream(s)
    try:
        assert torch.accelerator.current_stream() == s
    finally:
        torch.neuron.set_stream(torch.neuron.default_stream())
    torch.accelerator.set_stream(s)
    assert torch.neuron.current_stream() == s
    torch.accelerator.set_stream(torch.neuron.default_stream())


def test_event_timing():
    start = torch.neuron.Event(enable_timing=True)
    end = torch.neuron.Event(enable_timing=True)
    start.record()
    a = torch.randn(256, 256, device="neuron")
    for _ in range(5):
        a = a @ a / 256
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert ms > 0
    with pytest.raises(RuntimeError, match="enable_timing"):
        torch.neuron.Event().elapsed_time(end)
    with pytest.raises(RuntimeError, match="recorded"):
        torch.neuron.Event(enable_timing=True).elapsed_time(end)
