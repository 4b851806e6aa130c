"""MoE NKI kernels: router top-k, permute/unpermute and the blockwise grouped expert matmul,
against PyTorch references in fp32 and bf16, forward and backward.

Errors are norm-wise (``||got - ref|| / ||ref||``) against fp32 math on the same inputs:
* fp32: summation order only (fp32 PSUM/SBUF accumulation) -> bound 1e-5.
* bf16: permuted activations and expert outputs are bf16 tensors (one rounding each, <= 2^-9
  relative), expert outputs are rounded again after the weighted sum -> bound 2^-7.
The router's weights are fp32 in both cases (computed in fp32 from the logits).
"""

from __future__ import annotations

import pytest
import torch

from torchneuron.kernels import (
    moe_grouped_matmul,
    moe_permute,
    moe_router_topk,
    moe_routing,
    moe_unpermute,
)

BOUND = {torch.float32: 1e-5, torch.bfloat16: 2**-7}


def _rel(a, b):
    a, b = a.detach().cpu().float(), b.detach().float()
    return float((a - b).norm() / b.norm())


def _ref_router(logits, experts, normalize):
    """Weights of the kernel's chosen experts, and a check that they are a top k."""
    probs = torch.softmax(logits.float(), -1)
    ex = experts.cpu().long()
    chosen = probs.gather(1, ex)
    k = ex.shape[1]
    torch.testing.assert_close(chosen.detach(), probs.topk(k, -1).values.detach(), rtol=0, atol=0)
    assert all(len(set(row.tolist())) == k for row in ex), "an expert chosen twice"
    return chosen / chosen.sum(-1, keepdim=True) if normalize else chosen


@pytest.mark.parametrize("normalize", [True, False], ids=["renorm", "softmax"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_router_topk_forward_backward(dtype, normalize):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(200, 12, generator=g).to(dtype)
    gw = torch.randn(200, 3, generator=g)
    ln = logits.to("neuron").requires_grad_()
    w, ex = moe_router_topk(ln, 3, normalize)
    assert w.dtype == torch.float32 and ex.dtype == torch.int32 and w.shape == ex.shape == (200, 3)
    w.backward(gw.to("neuron"))
    lr = logits.float().requires_grad_()
    ref = _ref_router(lr, ex, normalize)
    ref.backward(gw)
    torch.testing.assert_close(w.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-6)
    assert ln.grad.dtype == dtype
    assert _rel(ln.grad, lr.grad) < BOUND[dtype]


def test_router_ties_and_few_experts():
    logits = torch.zeros(5, 4)  # every expert ties; fewer experts than max8's 8 lanes
    logits[1, 2] = 1.0
    w, ex = moe_router_topk(logits.to("neuron"), 4, normalize=False)
    assert all(sorted(r) == [0, 1, 2, 3] for r in ex.cpu().tolist())
    assert ex[1, 0].item() == 2
    torch.testing.assert_close(w.cpu().sum(-1), torch.ones(5))


def test_routing_metadata_invariants():
    g = torch.Generator().manual_seed(1)
    experts = torch.stack([torch.randperm(5, generator=g)[:2] for _ in range(300)]).int()
    r = moe_routing(experts, 5)
    assert r.rows % 128 == 0 and r.block_expert.shape == (r.rows // 128, 1)
    rt, rs, sr = r.row_to_token[:, 0].long(), r.row_to_slot[:, 0].long(), r.slot_to_row.long()
    valid = rt >= 0
    assert int(valid.sum()) == 600 and bool(((rs >= 0) == valid).all())
    flat = sr.reshape(-1)
    assert torch.equal(rs[flat], torch.arange(600)) and torch.equal(rt[flat], torch.arange(600) // 2)
    # every row of a block belongs to the block's expert
    row_expert = r.block_expert[:, 0].long().repeat_interleave(128)
    assert torch.equal(row_expert[flat], experts.reshape(-1).long())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_moe_layer_forward_backward(dtype):
    """router -> permute -> grouped matmul -> unpermute, against a per-token reference;
    Din = 200 and Dout = 600 exercise partial 128-row chunks and two 512-column blocks."""
    t, e, k, din, dout = 150, 4, 2, 200, 600
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(t, e, generator=g).to(dtype)
    x = torch.randn(t, din, generator=g).to(dtype)
    w = (torch.randn(e, din, dout, generator=g) / din**0.5).to(dtype)
    gy = torch.randn(t, dout, generator=g).to(dtype)
    ln, xn, wn = (v.to("neuron").requires_grad_() for v in (logits, x, w))
    aff, ex = moe_router_topk(ln, k)
    routing = moe_routing(ex, e)
    y = moe_unpermute(moe_grouped_matmul(moe_permute(xn, routing), wn, routing), aff, routing)
    assert y.shape == (t, dout) and y.dtype == dtype and y.device.type == "neuron"
    y.backward(gy.to("neuron"))

    lr, xr, wr = (v.float().clone().requires_grad_() for v in (logits, x, w))
    aff_r = _ref_router(lr, ex, True)
    ex_c = ex.cpu().long()
    yr = sum(aff_r[:, j : j + 1] * torch.einsum("td,tdo->to", xr, wr[ex_c[:, j]]) for j in range(k))
    yr.backward(gy.float())
    for got, ref in ((y, yr), (ln.grad, lr.grad), (xn.grad, xr.grad), (wn.grad, wr.grad)):
        assert _rel(got, ref) < BOUND[dtype]


def test_permute_unpermute_roundtrip_and_unused_expert():
    x = torch.randn(40, 16)
    experts = torch.tensor([[0, 2]] * 40, dtype=torch.int32)  # expert 1 gets no token
    r = moe_routing(experts, 3)
    assert r.rows == 256 and r.block_expert[:, 0].tolist() == [0, 2]
    xp = moe_permute(x.to("neuron"), r)
    pad = r.row_to_token[:, 0].cpu() < 0
    assert bool((xp.cpu()[pad] == 0).all())
    aff = torch.full((40, 2), 0.5)
    torch.testing.assert_close(moe_unpermute(xp, aff.to("neuron"), r).cpu(), x)
    w = torch.randn(3, 16, 8, requires_grad=True)
    wn = w.detach().to("neuron").requires_grad_()
    moe_grouped_matmul(xp, wn, r).sum().backward()
    assert bool((wn.grad.cpu()[1] == 0).all())  # no block, no gradient
    torch.testing.assert_close(wn.grad.cpu()[0], x.sum(0)[:, None].expand(16, 8), rtol=1e-5, atol=1e-5)
