"""``masked_scatter_backward`` with static shapes.

Vision-language models write image features into the token embeddings with
``inputs_embeds.masked_scatter(image_mask, features)``; the gradient for the features is
``masked_scatter_backward(grad, mask, features.shape)``, which ATen computes as
``grad.masked_select(mask)`` padded with zeros to the features' size. ``masked_select`` has a
data-dependent size, so the op ran eagerly on its CPU fallback in every compiled backward graph
(BLIP-2, InstructBLIP, Higgs Audio v2). The result's size is static, though:
:func:`masked_scatter_backward_static` sends the i-th selected element to slot i with a
``scatter_add`` (the index of a selected element is the running count of the mask before it; the
others go to one extra slot, dropped after), which compiles.
"""

from __future__ import annotations

import math

import torch

_aten = torch.ops.aten


def masked_scatter_backward_static(grad: torch.Tensor, mask: torch.Tensor, sizes):
    numel = math.prod(sizes)
    selected = _aten.expand.default(mask, list(grad.shape)).reshape(-1)
    values = grad.reshape(-1)
    slot = _aten.sub.Tensor(_aten.cumsum.default(selected, 0, dtype=torch.int64), 1)
    # ATen pads with zeros beyond the selected elements and refuses more than ``numel`` of them (in forward)
    index = _aten.where.self(selected, _aten.clamp_max.default(slot, numel), _aten.full_like.default(slot, numel))
    out = _aten.zeros.default([numel + 1], dtype=grad.dtype, device=grad.device)
    out = _aten.scatter_add.default(out, 0, index, values)
    return _aten.view.default(_aten.slice.Tensor(out, 0, 0, numel), list(sizes))


def masked_scatter_decompositions() -> dict:
    return {_aten.masked_scatter_backward.default: masked_scatter_backward_static}


__all__ = ["masked_scatter_backward_static", "masked_scatter_decompositions"]
