"""Views recomputed in the backward graph instead of saved (torchneuron/compiler/saved_views.py)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from functorch.compile import aot_function, aot_module
from models import TinyLM
from torch._functorch.partitioners import default_partition

from torchneuron.compiler import saved_views


def _capture(into: dict, key: str):
    def compiler(gm: torch.fx.GraphModule, _inputs):
        into[key] = gm
        return gm

    return compiler


def _saved_outputs(forward: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The forward graph's outputs other than the user-visible first one."""
    (out,) = forward.graph.find_nodes(op="output")
    return [a for a in out.args[0][1:] if isinstance(a, torch.fx.Node)]


def _is_view(node: torch.fx.Node) -> bool:
    return isinstance(node.target, torch._ops.OpOverload) and node.target.is_view


def _linear_chain(x, w1, b1, w2):
    return F.linear(torch.tanh(F.linear(x, w1, b1)), w2).sum(-1)


def _inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 16, generator=g, requires_grad=True)
    w1 = torch.randn(32, 16, generator=g, requires_grad=True)
    b1 = torch.randn(32, generator=g, requires_grad=True)
    w2 = torch.randn(4, 32, generator=g, requires_grad=True)
    return x, w1, b1, w2


def test_default_partitioner_saves_transposed_weights():
    """The premise: without the rewrite the forward saves views (``permute`` of weights)."""
    graphs: dict = {}
    f = aot_function(_linear_chain, fw_compiler=_capture(graphs, "fw"), bw_compiler=_capture(graphs, "bw"),
                     partition_fn=default_partition)
    f(*_inputs()).sum().backward()
    assert any(_is_view(n) for n in _saved_outputs(graphs["fw"]))


def test_forward_saves_parameters_not_their_views_and_gradients_match():
    graphs: dict = {}
    f = aot_function(_linear_chain, fw_compiler=_capture(graphs, "fw"), bw_compiler=_capture(graphs, "bw"),
                     partition_fn=saved_views.partition)
    args = _inputs()
    f(*args).sum().backward()
    saved = _saved_outputs(graphs["fw"])
    assert not any(_is_view(n) for n in saved), [str(n.target) for n in saved]
    # the weights themselves cross to the backward, which takes their transposes again
    assert {"primals_2", "primals_4"} <= {n.name for n in saved}
    bw_views = [n for n in graphs["bw"].graph.nodes if n.op == "call_function" and _is_view(n)]
    assert bw_views

    ref = [a.detach().clone().requires_grad_() for a in _inputs()]
    _linear_chain(*ref).sum().backward()
    for got, want in zip(args, ref, strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=0, atol=0)


def test_view_of_a_saved_activation_is_recomputed_from_it():
    """``y`` is saved for tanh's backward; its reshaped view for the matmul's is taken again."""

    def fn(x, w):
        y = torch.tanh(x)
        return (y.view(4, 8) @ w).sum() + y.sum()

    graphs: dict = {}
    f = aot_function(fn, fw_compiler=_capture(graphs, "fw"), bw_compiler=_capture(graphs, "bw"),
                     partition_fn=saved_views.partition)
    x, w = torch.randn(32, requires_grad=True), torch.randn(8, 3, requires_grad=True)
    f(x, w).backward()
    saved = _saved_outputs(graphs["fw"])
    assert not any(_is_view(n) for n in saved), [str(n.target) for n in saved]
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    fn(xr, wr).backward()
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(w.grad, wr.grad)


def test_view_of_an_unsaved_intermediate_stays_saved():
    """A view whose base the backward does not need is saved as before (recomputing it would
    save the larger base instead)."""

    def fn(x, w):
        return ((x * 3)[:, :2] @ w).sum()

    graphs: dict = {}
    f = aot_function(fn, fw_compiler=_capture(graphs, "fw"), bw_compiler=_capture(graphs, "bw"),
                     partition_fn=saved_views.partition)
    x, w = torch.randn(4, 6, requires_grad=True), torch.randn(2, 3, requires_grad=True)
    f(x, w).backward()
    assert any(_is_view(n) for n in _saved_outputs(graphs["fw"]))
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    fn(xr, wr).backward()
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(w.grad, wr.grad)


def test_transformer_training_matches_with_fewer_saved_bytes():
    torch.manual_seed(0)
    model = TinyLM(vocab=64, d=32, heads=4, layers=2, seq=16, sdpa=False)
    idx = torch.randint(0, 64, (2, 16))
    saved_bytes = {}
    grads = {}
    for name, fn in (("default", default_partition), ("views", saved_views.partition)):
        graphs: dict = {}
        m = aot_module(_copy(model), fw_compiler=_capture(graphs, "fw"), bw_compiler=_capture(graphs, "bw"),
                       partition_fn=fn)
        m(idx).float().pow(2).mean().backward()
        saved_bytes[name] = sum(n.meta["val"].numel() * n.meta["val"].element_size()
                                for n in _saved_outputs(graphs["fw"]) if isinstance(n.meta.get("val"), torch.Tensor)
                                and n.op != "placeholder")
        grads[name] = {k: p.grad for k, p in m.orig_module.named_parameters()}
    assert saved_bytes["views"] < saved_bytes["default"]
    for k, g in grads["default"].items():
        torch.testing.assert_close(grads["views"][k], g, rtol=0, atol=0)


def _copy(model: nn.Module) -> nn.Module:
    import copy

    return copy.deepcopy(model)


def test_view_returned_to_the_user_and_read_by_the_backward():
    """The output node returns forward values as well as gradients; a view the user gets back
    stays a forward output while the backward takes its own copy."""

    def fn(x, w):
        v = torch.tanh(x).view(4, 8)
        return (v @ w).sum(), v

    graphs: dict = {}
    f = aot_function(fn, fw_compiler=_capture(graphs, "fw"), bw_compiler=_capture(graphs, "bw"),
                     partition_fn=saved_views.partition)
    x, w = torch.randn(32, requires_grad=True), torch.randn(8, 3, requires_grad=True)
    s, v = f(x, w)
    (s + v.sum()).backward()
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    sr, vr = fn(xr, wr)
    (sr + vr.sum()).backward()
    torch.testing.assert_close(v, vr)
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(w.grad, wr.grad)
