"""Which IREE driver runs an executable: chosen by timing its first calls (``auto``), or forced."""

from __future__ import annotations

import pytest
import torch

from torchneuron.compiler import executable
from torchneuron.compiler.executable import Executable, compile_flags, compile_stablehlo
from torchneuron.compiler.lowering import lower

DEVICE = "neuron"


def _vmfb() -> bytes:
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(lambda a, b: torch.tanh(a @ b) * 2.0, tracing_mode="fake")(torch.randn(16, 8), torch.randn(8, 4))
    text = lower(gm).text
    return compile_stablehlo(text, compile_flags(text)).vmfb


@pytest.fixture(scope="module")
def vmfb() -> bytes:
    return _vmfb()


def test_auto_times_both_drivers_then_keeps_one(vmfb, monkeypatch):
    monkeypatch.setenv("TORCHNEURON_IREE_DRIVER", "auto")
    ex = Executable(vmfb, [torch.float32, torch.float32], [torch.float32], name="t")
    a, b = torch.randn(16, 8), torch.randn(8, 4)
    ref = torch.tanh(a @ b) * 2.0
    calls = len(executable._AUTO_DRIVERS) * (executable._TIMED_CALLS + 1)
    outs = []
    for i in range(calls + 2):
        if i < calls:
            assert ex.driver is None  # still alternating
        outs.append(ex(a.to(DEVICE), b.to(DEVICE))[0].cpu())
    assert ex.driver in executable._AUTO_DRIVERS
    for out in outs:  # the same code on either driver: the same bits
        torch.testing.assert_close(out, outs[0], rtol=0, atol=0)
    torch.testing.assert_close(outs[0], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("driver", ["local-task", "local-sync"])
def test_a_forced_driver_is_used_from_the_first_call(vmfb, monkeypatch, driver):
    monkeypatch.setenv("TORCHNEURON_IREE_DRIVER", driver)
    ex = Executable(vmfb, [torch.float32, torch.float32], [torch.float32], name="t")
    assert ex.driver == driver
    ex(torch.ones(16, 8, device=DEVICE), torch.ones(8, 4, device=DEVICE))
    assert ex.driver == driver


def test_an_unknown_driver_is_a_clear_error(vmfb, monkeypatch):
    monkeypatch.setenv("TORCHNEURON_IREE_DRIVER", "cuda")
    with pytest.raises(ValueError, match="expected auto, local-task or local-sync"):
        Executable(vmfb, [torch.float32, torch.float32], [torch.float32], name="t")
