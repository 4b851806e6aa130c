"""SDPA's CPU flash-attention operator as compilable ops, with the results the kernel gives.

On the device, ``F.scaled_dot_product_attention`` runs ``_scaled_dot_product_flash_attention_for_cpu``,
which returns the attention output and the log-sum-exp of each query's scores (its backward reads
it). PyTorch's decomposition returns the attention *weights* in the second place (it is meant for
inference, where nothing reads it), so a compiled graph that passes that result on — an adaptive
eager window whose backward runs later, ViT's training step — got a tensor of another shape. This
decomposition computes both results as the kernel defines them, from one score matrix.
"""

from __future__ import annotations

import math

import torch

_aten = torch.ops.aten


def _flash_attention_for_cpu(query, key, value, dropout_p: float = 0.0, is_causal: bool = False, *,
                             attn_mask=None, scale: float | None = None):
    torch._check(dropout_p == 0.0, lambda: f"dropout probability must be zero, got {dropout_p}")
    torch._check(query.dim() == 4 and key.dim() == 4 and value.dim() == 4,
                 lambda: "q, k, v must be 4-dimensional tensors")
    heads, kv_heads = query.size(1), key.size(1)
    if kv_heads != heads:  # grouped-query attention
        key = key.repeat_interleave(heads // kv_heads, dim=1)
        value = value.repeat_interleave(heads // kv_heads, dim=1)
    # the kernel accumulates reduced-precision inputs in float32 and returns a float32 log-sum-exp
    acc = torch.float32 if query.dtype in (torch.bfloat16, torch.float16) else query.dtype
    q, k, v = query.to(acc), key.to(acc), value.to(acc)
    s = scale if scale is not None else 1.0 / math.sqrt(query.size(-1))
    scores = (q @ k.transpose(-2, -1)) * s
    if is_causal:
        causal = torch.ones(query.size(-2), key.size(-2), dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.to(acc)
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.exp(scores - lse.unsqueeze(-1)) @ v
    return out.to(query.dtype), lse  # contiguous, as the kernel's


def attention_decompositions() -> dict:
    return {_aten._scaled_dot_product_flash_attention_for_cpu.default: _flash_attention_for_cpu}
