"""``scaled_dot_product_attention`` on the device.

PyTorch picks a fused attention kernel through a C++ dispatch stub that an out-of-tree device
cannot fill from Python, so on PrivateUse1 attention would always decompose into the math
path (a dozen separate ops and a materialised score matrix). The device applies the same
choice the host makes for these shapes and dtypes and, when that is the fused (flash) kernel,
runs it directly: one kernel forward, one backward, with autograd through PyTorch's own
derivative formulas for the fused op.
"""

from __future__ import annotations

import os

import torch

from ..runtime.storage import has_device_memory, host

aten = torch.ops.aten
_FLASH = 1  # sdp::SDPBackend::flash_attention
_libs: list[torch.library.Library] = []


def _as_seen(t):
    """The host alias of ``t`` as the host's kernel choice must see it: with ``requires_grad``
    (the fused kernel has no gradient for a mask, so the host picks the math path then)."""
    h = host(t)
    if t.requires_grad and torch.is_grad_enabled():
        h = h.detach().requires_grad_(True)
    return h


def _choice(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa) -> int:
    m = _as_seen(attn_mask) if isinstance(attn_mask, torch.Tensor) else attn_mask
    return aten._fused_sdp_choice.default(
        _as_seen(q), _as_seen(k), _as_seen(v), m, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
    )


def _device_memory(t) -> bool:
    """A real device tensor (not a fake or functional one seen while tracing)."""
    return t.device.type == "neuron" and has_device_memory(t)


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
    if os.environ.get("TORCHNEURON_NKI_SDPA") == "1" and all(map(_device_memory, (query, key, value))):
        from ..kernels.attention import sdpa_via_nki  # NKI flash kernels when the call fits

        out = sdpa_via_nki(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        if out is not None:
            return out
    # The fused CPU kernel takes 4-D [B, H, T, D] tensors; while tracing (torch.compile) the
    # math path is what the compiler lowers.
    if (
        query.dim() == 4 and key.dim() == 4 and value.dim() == 4
        and _device_memory(query) and _device_memory(key) and _device_memory(value)
        and (attn_mask is None or _device_memory(attn_mask))
    ):
        if _choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa) == _FLASH:
            if attn_mask is not None and attn_mask.dtype == torch.bool:
                # as PyTorch's composite does: a boolean mask becomes an additive one
                attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill_(
                    attn_mask.logical_not(), float("-inf")
                )
            return aten._scaled_dot_product_flash_attention_for_cpu.default(
                query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
            )[0]
    return aten._scaled_dot_product_attention_math.default(
        query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa
    )[0]


def install() -> None:
    if _libs:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("scaled_dot_product_attention", sdpa, "AutogradPrivateUse1")
    lib.impl("scaled_dot_product_attention", sdpa, "PrivateUse1")
    _libs.append(lib)
