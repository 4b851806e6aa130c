"""Device errors surface at the next synchronisation point, earliest first, with context."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import torchneuron
from torchneuron import NeuronRuntimeError


def _bad_embedding():
    w = torch.randn(10, 4, device="neuron")
    idx = torch.tensor([1, 2, 11], device="neuron")
    return torch.nn.functional.embedding(idx, w)  # index 11 is out of range


SYNC_POINTS = {
    "synchronize": lambda t: torch.neuron.synchronize(),
    "accelerator.synchronize": lambda t: torch.accelerator.synchronize(),
    "item": lambda t: t.sum().item(),
    "tolist": lambda t: t.tolist(),
    "cpu": lambda t: t.cpu(),
    "to_cpu": lambda t: t.to("cpu"),
    "print": lambda t: repr(t),
    "event.synchronize": lambda t: torch.neuron.Event().synchronize(),
    "stream.synchronize": lambda t: torch.neuron.current_stream().synchronize(),
    "nonzero": lambda t: torch.nonzero(t),
    "masked_select": lambda t: torch.masked_select(t, t > 0),
}


@pytest.mark.parametrize("name", sorted(SYNC_POINTS))
def test_error_is_deferred_to_sync_point(name):
    out = _bad_embedding()  # does not raise here
    assert out.shape == (3, 4)
    y = out * 2  # more work is queued after the failure
    with pytest.raises(NeuronRuntimeError) as ei:
        SYNC_POINTS[name](y)
    msg = str(ei.value)
    assert "aten::embedding" in msg
    assert "neuron:float32[10, 4]" in msg and "neuron:int64[3]" in msg
    assert "test_deferred_errors.py" in msg and "_bad_embedding" in msg  # user's stack
    assert isinstance(ei.value, RuntimeError)
    assert isinstance(ei.value.__cause__, IndexError)
    # the device works afterwards and results are right
    z = torch.arange(6.0, device="neuron").reshape(2, 3)
    assert (z * 2).sum().item() == 30.0
    torch.neuron.synchronize()


def test_only_earliest_error_is_raised_with_count():
    _bad_embedding()
    torch.gather(torch.zeros(3, device="neuron"), 0, torch.tensor([5], device="neuron"))
    torch.index_select(torch.zeros(3, device="neuron"), 0, torch.tensor([9], device="neuron"))
    with pytest.raises(NeuronRuntimeError) as ei:
        torch.neuron.synchronize()
    msg = str(ei.value)
    assert "aten::embedding" in msg and "aten::gather" not in msg
    assert "2 later device error(s)" in msg
    torch.neuron.synchronize()  # slot is empty now


def test_shape_errors_raise_immediately():
    a = torch.ones(3, device="neuron")
    b = torch.ones(4, device="neuron")
    with pytest.raises(RuntimeError, match="size of tensor a"):
        a + b
    assert not torch.neuron.has_pending_error()


def test_error_in_backward_is_deferred_and_process_survives():
    class BadIndex(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            idx = torch.tensor([7], device=g.device)
            return torch.zeros_like(g).index_add(0, idx, g[:1])  # 7 is out of range

    x = torch.ones(3, device="neuron", requires_grad=True)
    BadIndex.apply(x).sum().backward()  # no raise inside the autograd engine
    with pytest.raises(NeuronRuntimeError, match="index_add"):
        torch.neuron.synchronize()
    y = torch.ones(3, device="neuron", requires_grad=True)
    (y * 2).sum().backward()
    assert y.grad.tolist() == [2.0, 2.0, 2.0]


def test_launch_blocking_raises_at_the_op():
    code = (
        "import torch, torchneuron\n"
        "w = torch.randn(10, 4, device='neuron')\n"
        "idx = torch.tensor([11], device='neuron')\n"
        "try:\n"
        "    torch.nn.functional.embedding(idx, w)\n"
        "except torchneuron.NeuronRuntimeError as e:\n"
        "    print('raised at op', 'NEURON_LAUNCH_BLOCKING' not in str(e).split('launched from')[0])\n"
    )
    env = dict(os.environ, NEURON_LAUNCH_BLOCKING="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "raised at op True"


def test_error_class_is_exported():
    assert issubclass(torchneuron.NeuronRuntimeError, RuntimeError)
