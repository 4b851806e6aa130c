"""Ecosystem tests: Hugging Face libraries on the `neuron` device, offline, reduced configs."""

from __future__ import annotations

import os

# No downloads: every model is built from a config class, every dataset is made here.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import pytest  # noqa: E402

pytest.importorskip("transformers", reason="the ecosystem extra is not installed")
pytest.importorskip("accelerate", reason="the ecosystem extra is not installed")


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    """accelerate keeps process-wide singletons: every test starts and ends without them."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
