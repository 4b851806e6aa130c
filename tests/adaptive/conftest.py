"""Adaptive-mode tests: each runs in adaptive mode and leaves the process in eager mode."""

from __future__ import annotations

import pytest

import torchneuron
from torchneuron import adaptive


@pytest.fixture
def adaptive_mode():
    adaptive.reset_metrics()
    torchneuron.set_execution_mode("adaptive")
    try:
        yield adaptive
    finally:
        torchneuron.set_execution_mode("eager")
