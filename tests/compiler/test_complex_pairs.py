"""complex64 arithmetic compiled as float32 pairs (``compiler/complex_pairs.py``)."""

from __future__ import annotations

import pytest
import torch

from torchneuron.compiler import get_metrics, reset_metrics

DEVICE = "neuron"
# complex products are a few real products and a sum each: float32 rounding, as the CPU's
TOL = {"rtol": 1e-5, "atol": 1e-5}


def _eager_nodes() -> dict:
    return {n: w for g in get_metrics()["graphs"].values() for n, w in g["placement"].items()
            if not w.startswith("fused_")}


def _rope(xq, freqs):
    """Llama 4's and DeepSeek-V2's rotary embedding, written with complex numbers."""
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    return torch.view_as_real(xq_ * freqs_cis[:, :, None, :]).flatten(3).type_as(xq) * 2


def test_complex_rotary_embedding_trains_compiled():
    """Forward and backward: only the views in and out of complex stay outside the programs
    (the complex factor saved for the backward), nothing runs on the CPU."""
    torch.manual_seed(0)
    xq, freqs = torch.randn(2, 8, 4, 16, requires_grad=True), torch.randn(2, 8, 8)
    xd = xq.detach().to(DEVICE).requires_grad_()
    reset_metrics()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        got = torch.compile(_rope, backend="neuron")(xd, freqs.to(DEVICE))
    (got * torch.arange(16.0, device=DEVICE)).sum().backward()
    expected = _rope(xq, freqs)
    (expected * torch.arange(16.0)).sum().backward()
    torch.testing.assert_close(got.detach().cpu(), expected.detach(), **TOL)
    torch.testing.assert_close(xd.grad.cpu(), xq.grad, **TOL)
    assert set(_eager_nodes().values()) == {"eager"}
    assert {n.rsplit("_default", 1)[0] for n in _eager_nodes()} <= {"view_as_complex", "view_as_real"}, _eager_nodes()


def _mixed(z, x, r):
    """Complex inputs and outputs, a real factor, conjugates, sums, views and a concatenation."""
    w = torch.view_as_complex(x)                       # [4, 6]
    a = (z * w.conj() + w * 0.5 - z).transpose(0, 1)   # [6, 4]
    b = torch.cat([a, a[:, :2] * r[:, None]], dim=1)   # [6, 6]
    c = torch.complex(r, -r).unsqueeze(-1) * b
    return torch.view_as_real(c).sum(-1) + 1, c[1:, ::2], c.abs()


@pytest.mark.parametrize("rewritten", [True, False])
def test_complex_inputs_outputs_and_ops_left_alone_match_cpu(rewritten, monkeypatch):
    """A complex graph input, a complex output and an op the rewrite does not know (``abs`` of a
    complex tensor) meet the pairs through views; results equal the CPU's either way."""
    if not rewritten:
        import torchneuron.compiler.graph_compiler as gc
        monkeypatch.setattr(gc, "complex_as_pairs", lambda gm: 0)
    torch.manual_seed(1)
    z = torch.randn(4, 6, dtype=torch.complex64)
    x, r = torch.randn(4, 6, 2), torch.randn(6)
    reset_metrics()
    got = torch.compile(_mixed, backend="neuron")(z.to(DEVICE), x.to(DEVICE), r.to(DEVICE))
    for g, e in zip(got, _mixed(z, x, r), strict=True):
        assert g.dtype == e.dtype
        torch.testing.assert_close(g.cpu(), e, **TOL)
    arithmetic = {n for n in _eager_nodes() if n.split("_")[0] in ("mul", "add", "sub", "cat", "complex")}
    assert (not arithmetic) == rewritten, _eager_nodes()


_ON_HOST = {
    "conjugate product": lambda z, x, r: torch.view_as_real(z * torch.view_as_complex(x).conj()) + 0,
    "scaled difference": lambda z, x, r: torch.view_as_real(torch.view_as_complex(x) * 0.5 - z) + 0,
    "transposed": lambda z, x, r: torch.view_as_real((z - z * z).transpose(0, 1)) + 0,
    "concatenated": lambda z, x, r: torch.view_as_real(torch.cat([z * z, (z * z)[:, :2] * r[:4, None]], 1)) + 0,
    "built from parts": lambda z, x, r: torch.view_as_real(torch.complex(r, -r).unsqueeze(-1) * z.transpose(0, 1)),
    "views": lambda z, x, r: torch.view_as_real((-z).reshape(2, 12).permute(1, 0)[3:, 1] * z.reshape(-1)[:9]),
    "mixed": _mixed,
    "zeros and scatters": lambda z, x, r: (
        torch.view_as_real(torch.zeros_like(z).slice_scatter(z[:, 1:4] * z[:, :3], 1, 2, 5)) + 0,
        torch.view_as_real(x.new_zeros(3, 4, dtype=torch.complex64).copy_(z[1:, :4] * 2)) + 0),
    "scalar product, empty": lambda z, x, r: torch.view_as_real(
        torch.ops.aten.mul.Scalar(z, 3.0) + torch.empty_like(z).copy_(z)) + 0,
    "complex like a real tensor": lambda z, x, r: torch.view_as_real(
        torch.empty_like(r, dtype=torch.complex64).copy_(z[0]) * 2 + torch.zeros_like(r, dtype=torch.complex64)) + 0,
}
# every complex value of these is computed as pairs: complex tensors left are the inputs alone
_ALL_PAIRS = {"conjugate product", "scaled difference", "transposed", "concatenated", "views", "zeros and scatters",
               "scalar product, empty", "complex like a real tensor"}


@pytest.mark.parametrize("name", sorted(_ON_HOST))
def test_rewritten_graph_computes_what_the_complex_one_does(name):
    """The pass alone, on CPU graphs traced with fake tensors: same values as the complex code."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from torchneuron.compiler.complex_pairs import complex_as_pairs

    torch.manual_seed(2)
    args = torch.randn(4, 6, dtype=torch.complex64), torch.randn(4, 6, 2), torch.randn(6)
    fn = _ON_HOST[name]
    gm = make_fx(torch.func.functionalize(fn), tracing_mode="fake")(*args)  # as AOTAutograd's graphs
    assert complex_as_pairs(gm) > 0
    arithmetic = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in (
        torch.ops.aten.mul.Tensor, torch.ops.aten.add.Tensor, torch.ops.aten.sub.Tensor)]
    assert arithmetic and not any(n.meta["val"].is_complex() for n in arithmetic)
    if name in _ALL_PAIRS:
        left = [n for n in gm.graph.nodes if n.op == "call_function" and n.meta["val"].is_complex()]
        assert not left, left
    got, expected = gm(*args), fn(*args)
    for g, e in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, expected)), strict=True):
        torch.testing.assert_close(g, e, **TOL)


def test_a_rule_that_fails_leaves_its_node_as_it_was(monkeypatch):
    from torch.fx.experimental.proxy_tensor import make_fx

    import torchneuron.compiler.complex_pairs as cp

    def broken(r, node):
        r.emit(torch.ops.aten.neg.default, r.pair(node.args[0]))  # some work, then a failure
        raise RuntimeError("view size is not compatible with input tensor's size and stride")

    monkeypatch.setitem(cp.RULES, torch.ops.aten.view.default, broken)
    fn = _ON_HOST["views"]
    args = torch.randn(4, 6, dtype=torch.complex64), torch.randn(4, 6, 2), torch.randn(6)
    gm = make_fx(fn, tracing_mode="fake")(*args)
    cp.complex_as_pairs(gm)
    views = [n for n in gm.graph.nodes if n.target is torch.ops.aten.view.default]
    assert views and all(n.meta["val"].is_complex() for n in views)
    torch.testing.assert_close(gm(*args), fn(*args), **TOL)


def test_a_conjugate_view_from_outside_gets_its_pair_without_resolving_it():
    """``view_as_real`` refuses a conjugate view; its pair is its base's, imaginary part negated."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from torchneuron.compiler.complex_pairs import complex_as_pairs

    def fn(z, w):
        return torch.view_as_real(z * w) + 0

    z, w = torch.randn(3, 5, dtype=torch.complex64), torch.randn(3, 5, dtype=torch.complex64)
    gm = make_fx(fn, tracing_mode="fake")(z.conj(), w)
    assert complex_as_pairs(gm) > 0
    torch.testing.assert_close(gm(z.conj(), w), fn(z.conj(), w), **TOL)


def test_a_conjugate_view_kept_as_complex_stays_a_conjugate_view():
    """A rewritten ``_conj`` still needed as complex (a graph output, saved for the backward) is
    rebuilt as a conjugate view, as its traced value is: ``view_as_real(_conj(out))`` works."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from torchneuron.compiler.complex_pairs import complex_as_pairs

    def fn(z, w):
        c = (z * w).conj()
        return c, torch.view_as_real(c * w) + 0

    z, w = torch.randn(3, 5, dtype=torch.complex64), torch.randn(3, 5, dtype=torch.complex64)
    gm = make_fx(fn, tracing_mode="fake")(z, w)
    assert complex_as_pairs(gm) > 0
    (c, pairs), (c_ref, pairs_ref) = gm(z, w), fn(z, w)
    assert c.is_conj() == c_ref.is_conj()
    torch.testing.assert_close(torch.view_as_real(torch.conj(c)), torch.view_as_real(torch.conj(c_ref)), **TOL)
    torch.testing.assert_close(pairs, pairs_ref, **TOL)
