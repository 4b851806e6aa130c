"""Adjustments of torch_glue.py that change behaviour users can observe."""

from __future__ import annotations

import threading

import torch


def _backward_thread(x: torch.Tensor) -> int:
    seen = []
    y = (x * 2).sum()
    x.register_hook(lambda g: seen.append(threading.get_ident()))
    y.backward()
    return seen[0]


def test_device_backward_runs_on_the_calling_thread():
    # the simulated core computes on host threads: a device thread per core would give the
    # process a second OpenMP team, which throttles every later parallel region (docs/architecture.md)
    x = torch.ones(8, device="neuron", requires_grad=True)
    assert not torch.autograd.is_multithreading_enabled()
    assert _backward_thread(x) == threading.get_ident()
    assert x.grad.cpu().tolist() == [2.0] * 8


def test_pytorch_default_is_one_call_away():
    x = torch.ones(8, device="neuron", requires_grad=True)
    with torch.autograd.set_multithreading_enabled(True):
        assert _backward_thread(x) != threading.get_ident()  # the engine's device thread
    assert not torch.autograd.is_multithreading_enabled()
    assert x.grad.cpu().tolist() == [2.0] * 8
