"""``torch_neuronx``: torchneuron's stand-in for AWS's TorchNeuron package of the same name.

Libraries that already support TorchNeuron (Hugging Face transformers, accelerate, diffusers)
detect the ``neuron`` device by finding a module named ``torch_neuronx`` and then call
``torch.neuron.*``. This module lets them find torchneuron instead: importing it loads
torchneuron (which registers the ``neuron`` device and ``torch.neuron``) and exposes, under
TorchNeuron's documented names, the parts of its Python API that torchneuron implements.

It replaces AWS's ``torch-neuronx`` package: do not install the two in the same environment.
"""

from __future__ import annotations

import torch  # noqa: F401  - loads torchneuron through the `torch.backends` entry point

import torchneuron
from torchneuron import clear_op_tracking, get_executed_ops, get_fallback_ops
from torchneuron.nki.torch_integration import nki_op

from . import neuron_dynamo_backend

__version__ = torchneuron.__version__

__all__ = [
    "clear_op_tracking",
    "get_executed_ops",
    "get_fallback_ops",
    "neuron_dynamo_backend",
    "nki_op",
]
