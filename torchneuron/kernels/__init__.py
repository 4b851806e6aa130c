"""Kernels written in NKI (``torchneuron.nki``), each exposed as a ``torch`` custom op that runs
on the simulated NeuronCore (eager, and as an eager node inside ``torch.compile``).

* :func:`rms_norm` -- ``torch.ops.torchneuron.nki_rmsnorm`` (+ ``nki_rmsnorm_bwd``)
* :func:`softmax` -- ``torch.ops.torchneuron.nki_softmax`` (+ ``nki_softmax_bwd``)
* :func:`flash_attention` -- ``torch.ops.torchneuron.nki_flash_attn`` (+ ``nki_flash_attn_bwd``):
  causal or full, grouped-query attention
* :func:`layer_norm` -- ``torch.ops.torchneuron.nki_layernorm`` (+ ``nki_layernorm_bwd``)
* :func:`swiglu_mlp` -- ``torch.ops.torchneuron.nki_swiglu_mlp`` (+ ``nki_swiglu_mlp_bwd``)
* :func:`matmul_kernel` (``matmul.py``) -- a blocked bf16 matmul, the timing model's reference (no op)
* MoE: :func:`moe_router_topk` (``nki_moe_router``), :func:`moe_routing` (host metadata),
  :func:`moe_permute` / :func:`moe_unpermute` (indirect-DMA gathers, ``nki_moe_permute`` /
  ``nki_moe_unpermute``), :func:`moe_grouped_matmul` (``nki_moe_grouped_matmul``)
* :func:`apply_rope` -- ``torch.ops.torchneuron.nki_rope`` (its own backward, inverse rotation)

The raw ``@nki.jit`` kernels (``rmsnorm_fwd_kernel``, ``softmax_fwd_kernel``, ...) can be run
on numpy arrays or timed with ``nki.simulate(kernel, return_profile=True)``.
"""

from __future__ import annotations

from .attention import flash_attention, flash_attn_bwd_kernel, flash_attn_fwd_kernel
from .layernorm import layer_norm, layernorm_bwd_kernel, layernorm_fwd_kernel
from .moe import (
    MoERouting,
    moe_grouped_matmul,
    moe_permute,
    moe_router_topk,
    moe_routing,
    moe_unpermute,
)
from .rmsnorm import rms_norm, rmsnorm_bwd_kernel, rmsnorm_fwd_kernel
from .rope import apply_rope, rope_kernel
from .softmax import softmax, softmax_bwd_kernel, softmax_fwd_kernel
from .swiglu import swiglu_bwd_kernel, swiglu_fwd_kernel, swiglu_mlp

__all__ = [
    "MoERouting",
    "apply_rope",
    "flash_attention",
    "flash_attn_bwd_kernel",
    "flash_attn_fwd_kernel",
    "layer_norm",
    "layernorm_bwd_kernel",
    "layernorm_fwd_kernel",
    "moe_grouped_matmul",
    "moe_permute",
    "moe_router_topk",
    "moe_routing",
    "moe_unpermute",
    "rms_norm",
    "rmsnorm_bwd_kernel",
    "rmsnorm_fwd_kernel",
    "rope_kernel",
    "softmax",
    "softmax_bwd_kernel",
    "softmax_fwd_kernel",
    "swiglu_bwd_kernel",
    "swiglu_fwd_kernel",
    "swiglu_mlp",
]
