"""Graph compilation for the ``neuron`` device: ``torch.compile(model, backend="neuron")``.

Dynamo → AOTAutograd (forward/backward graphs) → FX passes → partitioning (nodes that cannot
be lowered run eagerly on the device) → StableHLO (torch-mlir) → ``.vmfb`` executables (IREE,
for the host CPU that simulates the NeuronCore) → cached on disk and run on device memory.
See docs/compile.md.
"""

from __future__ import annotations

from .errors import NeuronCompilationError
from .metrics import get_metrics, reset_metrics

__all__ = ["NeuronCompilationError", "get_metrics", "neuron_backend", "reset_metrics"]


def __getattr__(name: str):
    if name == "neuron_backend":
        from .backend import neuron_backend

        return neuron_backend
    raise AttributeError(name)


def _register_with_dynamo() -> None:
    from torch._dynamo.backends.registry import _BACKENDS, _COMPILER_FNS, register_backend

    # When Dynamo is loading the `torch_dynamo_backends` entry point, it registers it itself.
    if "neuron" not in _COMPILER_FNS and _BACKENDS.get("neuron") is None:
        from .backend import neuron_backend

        register_backend(name="neuron")(neuron_backend)


_register_with_dynamo()

from ..torch_glue import skip_in_dynamo  # noqa: E402

skip_in_dynamo()
