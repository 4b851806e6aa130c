"""Graph compilation for the ``neuron`` device: ``torch.compile(model, backend="neuron")``.

Dynamo → AOTAutograd (forward/backward graphs) → FX passes → partitioning (nodes that cannot
be lowered run eagerly on the device) → StableHLO (torch-mlir) → ``.vmfb`` executables (IREE,
for the host CPU that simulates the NeuronCore) → cached on disk and run on device memory.
See docs/compile.md.

Importing this package does not import Dynamo: the backend reaches Dynamo through the
``torch_dynamo_backends`` entry point (``neuron = torchneuron.compiler.backend:neuron_backend``),
which Dynamo loads when ``backend="neuron"`` is first looked up.
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
