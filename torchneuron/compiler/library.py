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

Concatenations of three or more tensors along a dimension that has a non-unit dimension
outside it (``torch.cat(features, 1)`` of NCHW maps with a batch of 2) run as the device's copy
kernel (the host's ``torch.cat``, a strided memcpy; on the chip such copies are DMA work) too.
IREE 3.13 turns each input of such a concatenation into a dispatch of its own, a "slow_memcpy"
whose destination offset is a constant, so none is shared: DenseNet-121's training forward
program had 594 of them among 964 dispatches and took 49 s to compile, 22 s with them left
out (368 dispatches; inference program 22 -> 6 s). Two inputs (rotary embeddings'
``cat((-x2, x1), -1)``) and concatenations along the outermost non-unit dimension (contiguous
updates, no dispatch) stay compiled, and so does a concatenation whose region computes its
inputs (``concatenations_at_region_entries``). ``options={"library_concatenations": False}`` or
``TORCHNEURON_LIBRARY_CONCATENATIONS=0`` compiles them all.

With ``options={"partition": False}`` the whole graph is one region and nothing is left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.fx as fx

_aten = torch.ops.aten

LIBRARY_OPS = frozenset({_aten.convolution.default, _aten.convolution_backward.default})
# the fewest inputs of a concatenation left to the copy kernel (see above)
MIN_LIBRARY_CAT_INPUTS = 3


def is_library_node(node: fx.Node) -> bool:
    """A ``call_function`` node of a convolution, which the graph calls as a library kernel."""
    return node.op == "call_function" and node.target in LIBRARY_OPS


def is_strided_concatenation(node: fx.Node) -> bool:
    """``aten.cat`` of at least ``MIN_LIBRARY_CAT_INPUTS`` tensors whose result has a non-unit
    dimension outside the concatenated one: each input lands in a strided slice of the result."""
    if node.op != "call_function" or node.target is not _aten.cat.default:
        return False
    tensors = node.args[0]
    out = node.meta.get("val")
    if not isinstance(out, torch.Tensor) or len(tensors) < MIN_LIBRARY_CAT_INPUTS or out.dim() == 0:
        return False
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    dim = dim % out.dim()
    return math.prod(out.shape[:dim]) > 1


@dataclass(frozen=True)
class LibraryKernels:
    """The predicate of the nodes a graph calls as library kernels, for the chosen kinds.

    ``concatenations`` marks the candidates (``is_strided_concatenation``); the partitioner
    keeps only those at a region's entry (``concatenations_at_region_entries``)."""

    convolutions: bool = True
    concatenations: bool = True

    def __call__(self, node: fx.Node) -> bool:
        return (self.convolutions and is_library_node(node)) or \
            (self.concatenations and is_strided_concatenation(node))

    def without_concatenations(self) -> LibraryKernels:
        return LibraryKernels(self.convolutions, False)


def library_kernels(convolutions: bool = True, concatenations: bool = True) -> LibraryKernels:
    return LibraryKernels(convolutions, concatenations)


def concatenations_at_region_entries(groups: list[dict[fx.Node, None]]) -> set[fx.Node]:
    """The strided concatenations of ``groups`` (regions proposed with them compiled) none of
    whose inputs is computed in the concatenation's own region: taking such a concatenation out
    leaves its region whole. One whose inputs its region computes (a transformer backward's
    ``cat([dq, dk, dv], -1)``) stays compiled: taking it out would cut the region in two
    programs' worth of calls, with the copy's inputs written out between them (the GPT-2-style
    LM's backward went from one region to five)."""
    region = {node: i for i, group in enumerate(groups) for node in group}
    return {node for node, i in region.items()
            if is_strided_concatenation(node) and all(region.get(a) != i for a in node.all_input_nodes)}

