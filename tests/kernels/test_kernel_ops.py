"""Every kernel-library op passes ``torch.library.opcheck``: schema, fake (meta) implementation
against the real outputs, autograd registration and AOT dispatch -- what ``torch.compile``
relies on to trace the ops as opaque nodes. Small CPU inputs (the ops accept CPU tensors)."""

from __future__ import annotations

import pytest
import torch

from torchneuron.kernels import moe_routing

ops = torch.ops.torchneuron


def _cases():
    g = torch.Generator().manual_seed(0)

    def r(*s):
        return torch.randn(*s, generator=g)

    ex = torch.tensor([[0, 1], [1, 2], [2, 0]] * 10, dtype=torch.int32)
    rt = moe_routing(ex, 3)
    return {
        "flash_attn": (ops.nki_flash_attn, (r(1, 2, 72, 16).requires_grad_(), r(1, 1, 72, 16), r(1, 1, 72, 16), 0.25, True)),
        "layernorm": (ops.nki_layernorm, (r(130, 40).requires_grad_(), r(1, 40), r(1, 40), 1e-5)),
        "rope": (ops.nki_rope, (r(2, 130, 16).requires_grad_(), r(130, 8), r(130, 8), False)),
        "swiglu_mlp": (ops.nki_swiglu_mlp, (r(130, 40).requires_grad_(), r(40, 64), r(40, 64), r(64, 40))),
        "moe_router": (ops.nki_moe_router, (r(30, 6).requires_grad_(), 2, True)),
        "moe_permute": (ops.nki_moe_permute, (r(30, 8).requires_grad_(), rt.row_to_token, rt.slot_to_row)),
        "moe_unpermute": (
            ops.nki_moe_unpermute,
            (r(rt.rows, 8).requires_grad_(), torch.rand(30, 2, generator=g), rt.slot_to_row, rt.row_to_token, rt.row_to_slot),
        ),
        "moe_grouped_matmul": (ops.nki_moe_grouped_matmul, (r(rt.rows, 8).requires_grad_(), r(3, 8, 5), rt.block_expert)),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_opcheck(name):
    op, args = _cases()[name]
    torch.library.opcheck(op, args)
