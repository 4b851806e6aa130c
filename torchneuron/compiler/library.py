"""Operators a compiled graph calls as the device's library kernels instead of compiling them.

Convolutions, forward and backward (``aten.convolution``, ``aten.convolution_backward``), stay
outside the compiled regions by default and run through the device's convolution kernels: on
the simulated core those are the host's oneDNN convolutions, the library Inductor calls for
convolutions on the CPU too (its ``extern_kernels.convolution``). The compiled regions carry
everything between them (batch norm, activations, residual additions, pooling, the loss and the
optimizer step), so a CNN still compiles into a few regions per layer boundary, each fused.

Why: IREE 3.13's CPU code for convolutions is several times slower than oneDNN on this host.
``python bench/compile.py --only resnet --steps 6`` (ResNet-18, 64x64, batch 8), same machine
and minute: inference 204.9 ms compiled through IREE (im2col) against 92.2 ms with library
convolutions, training 382.8 against 351.4 ms (Inductor 50–84 and 325–378 ms in those runs;
docs/performance.md has the quiet-machine figures).

``options={"library_convolutions": False}`` or ``TORCHNEURON_LIBRARY_CONVOLUTIONS=0`` compiles
convolutions with IREE (their backward then lowers as forward convolutions, ``convolution.py``).
With ``options={"partition": False}`` the whole graph is one region and nothing is left out.
"""

from __future__ import annotations

import torch
import torch.fx as fx

_aten = torch.ops.aten

LIBRARY_OPS = frozenset({_aten.convolution.default, _aten.convolution_backward.default})


def is_library_node(node: fx.Node) -> bool:
    """A ``call_function`` node of an operator the graph calls as a library kernel."""
    return node.op == "call_function" and node.target in LIBRARY_OPS
