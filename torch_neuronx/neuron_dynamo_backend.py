"""TorchNeuron's ``neuron_dynamo_backend`` helpers, backed by ``torchneuron.compiler``.

``torch.compile(model, backend="neuron")`` itself needs no import: the backend is registered
through the ``torch_dynamo_backends`` entry point.
"""

from __future__ import annotations

from typing import Any

__all__ = ["get_dynamo_metrics", "reset_dynamo_metrics"]


def get_dynamo_metrics() -> dict[str, Any]:
    """Compilation metrics since the last reset: totals and one entry per compiled graph
    (see ``torchneuron.compiler.get_metrics``)."""
    from torchneuron.compiler import get_metrics

    return get_metrics()


def reset_dynamo_metrics() -> None:
    """Clear the compilation metrics."""
    from torchneuron.compiler import reset_metrics

    reset_metrics()
