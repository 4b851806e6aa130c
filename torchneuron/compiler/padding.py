"""Padding backwards in forms that torch-mlir lowers.

torch-mlir does not lower ``aten.replication_pad{1,2,3}d_backward`` and PyTorch has no
decomposition for them (it has one for the reflection pads' backwards), so each ran eagerly
between a backward graph's compiled regions — once per training step in the audio codecs of
the sweep (Mimi, Pocket-TTS: their causal convolutions replicate the signal's edge).

Output position ``o`` of a replication pad reads input position ``clamp(o - left, 0, n - 1)``
along each padded dimension (a negative ``left`` crops; ATen's kernels use the same mapping),
so the backward is one ``scatter_add`` per padded dimension, of the output gradient into
those positions: the edge positions sum the gradients of every copy of them. Half-precision
gradients are summed in float32, as PyTorch's decomposition of the max-pool backward does.
"""

from __future__ import annotations

import torch

_aten = torch.ops.aten


def replication_pad_backward_as_scatter(grad: torch.Tensor, x: torch.Tensor, padding) -> torch.Tensor:
    """``replication_pad{1,2,3}d_backward(grad, x, padding)``; ``padding`` as the forward's:
    (left, right) of the last dimension first."""
    dims = len(padding) // 2
    if dims not in (1, 2, 3) or len(padding) != 2 * dims or grad.dim() != x.dim() or x.dim() < dims:
        return NotImplemented
    work = torch.float32 if grad.dtype in (torch.float16, torch.bfloat16) else grad.dtype
    g = _aten._to_copy.default(grad, dtype=work)
    for i in range(dims):
        dim = x.dim() - dims + i
        left = padding[2 * (dims - 1 - i)]
        n_out, n_in = g.shape[dim], x.shape[dim]
        source = _aten.clamp.default(_aten.sub.Tensor(torch.arange(n_out, device=g.device), left), 0, n_in - 1)
        shape = [1] * g.dim()
        shape[dim] = n_out
        index = _aten.expand.default(_aten.view.default(source, shape), list(g.shape))
        target = list(g.shape)
        target[dim] = n_in
        g = _aten.scatter_add.default(_aten.zeros.default(target, dtype=work, device=g.device), dim, index, g)
    return _aten._to_copy.default(g, dtype=grad.dtype)


def padding_decompositions() -> dict:
    return {op.default: replication_pad_backward_as_scatter
            for op in (_aten.replication_pad1d_backward, _aten.replication_pad2d_backward,
                       _aten.replication_pad3d_backward)}


__all__ = ["padding_decompositions", "replication_pad_backward_as_scatter"]
