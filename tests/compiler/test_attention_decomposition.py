"""The compiler's decomposition of SDPA's CPU flash-attention operator gives the kernel's two
results (output and log-sum-exp), shapes, dtypes and layout included."""

from __future__ import annotations

import pytest
import torch

from torchneuron.compiler.attention import attention_decompositions

_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_decomposition_matches_the_kernel(dtype, causal, with_mask, kv_heads):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 5, 8, generator=g).to(dtype)
    k, v = (torch.randn(2, kv_heads, 7, 8, generator=g).to(dtype) for _ in range(2))
    mask = torch.randn(2, 1, 5, 7, generator=g).to(dtype) if with_mask else None
    groups = 4 // kv_heads  # the kernel takes every head; grouped-query attention repeats k, v
    out, lse = _FLASH(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1), 0.0, causal,
                      attn_mask=mask, scale=0.3)
    got_out, got_lse = attention_decompositions()[_FLASH](q, k, v, 0.0, causal, attn_mask=mask, scale=0.3)
    assert (got_out.shape, got_out.stride(), got_out.dtype) == (out.shape, out.stride(), out.dtype)
    assert (got_lse.shape, got_lse.dtype) == (lse.shape, lse.dtype)
    # fp32: the same sums in another order; bf16: both accumulate in fp32, the output rounded once
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1.6e-2, atol=1e-2)
    torch.testing.assert_close(got_out, out, **tol)
    torch.testing.assert_close(got_lse, lse, rtol=1e-5, atol=1e-5)
