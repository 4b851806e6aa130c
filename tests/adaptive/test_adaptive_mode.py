"""The execution-mode switch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import torchneuron
from torchneuron import adaptive


def test_default_is_eager():
    assert torchneuron.get_execution_mode() == "eager"


def test_switch_and_context_manager():
    with torchneuron.execution_mode("adaptive"):
        assert torchneuron.get_execution_mode() == "adaptive"
        x = torch.ones(4, device="neuron") * 3
        with torchneuron.execution_mode("eager"):
            # leaving adaptive mode runs what was recorded
            assert torchneuron.get_execution_mode() == "eager"
            assert x.sum().item() == 12
        assert torchneuron.get_execution_mode() == "adaptive"
    assert torchneuron.get_execution_mode() == "eager"


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="unknown execution mode 'lazy'"):
        torchneuron.set_execution_mode("lazy")
    assert torchneuron.get_execution_mode() == "eager"


def test_pending_work_runs_when_mode_ends(adaptive_mode):
    x = torch.arange(6.0, device="neuron")
    y = x * 2 + 1
    assert adaptive.get_metrics()["windows"] == 0
    torchneuron.set_execution_mode("eager")
    assert adaptive.get_metrics()["flush_reasons"].get("mode switch") == 1
    assert y.cpu().tolist() == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]


def _run(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


def test_environment_variable_turns_it_on():
    p = _run("import torch, torchneuron; print(torchneuron.get_execution_mode())",
             TORCHNEURON_ADAPTIVE_EAGER="1")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "adaptive"


def test_bad_window_limit_is_a_clear_error():
    p = _run("import torch, torchneuron; torchneuron.set_execution_mode('adaptive')",
             TORCHNEURON_ADAPTIVE_WINDOW="many")
    assert p.returncode != 0
    assert "TORCHNEURON_ADAPTIVE_WINDOW must be a positive integer, got 'many'" in p.stderr
