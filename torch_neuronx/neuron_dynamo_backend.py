"""TorchNeuron's ``neuron_dynamo_backend`` helpers, backed by ``torchneuron.compiler``.

``torch.compile(model, backend="neuron")`` itself needs no import: the backend is registered
through the ``torch_dynamo_backends`` entry point.
"""

from __future__ import annotations

from typing import Any

__all__ = ["get_dynamo_metrics", "reset_dynamo_metrics", "set_model_name"]


def get_dynamo_metrics() -> dict[str, Any]:
    """Compilation metrics since the last reset: totals and one entry per compiled graph
    (see ``torchneuron.compiler.get_metrics``); each graph entry carries the ``model`` name
    that was set with :func:`set_model_name` when it was compiled (``None`` if none was)."""
    from torchneuron.compiler import get_metrics

    return get_metrics()


def reset_dynamo_metrics() -> None:
    """Clear the compilation metrics (the model name set with :func:`set_model_name` stays)."""
    from torchneuron.compiler import reset_metrics

    reset_metrics()


def set_model_name(name: str | None) -> None:
    """Name the model whose graphs ``torch.compile(..., backend="neuron")`` compiles from now on.

    Graphs compiled afterwards are recorded under this name in :func:`get_dynamo_metrics`
    (``graphs[<id>]["model"]``) and in the metadata of the disk-cache entries they create
    (``torchneuron cache list``); with ``TORCHNEURON_DUMP_DIR`` set, their dumps go to
    ``<dump dir>/<name>/`` instead of the dump directory itself. ``None`` clears the name.
    Compilation happens on the first call of a compiled model, so set the name before that call.
    """
    from torchneuron.compiler import settings

    settings.set_model_name(name)

