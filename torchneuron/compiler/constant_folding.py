"""Fold tensors computed from constants alone into ``aten.full`` when all their elements are equal.

IREE 3.13 miscompiles a reduction whose input is an elementwise function of a splat constant
that the importers left unfolded (``full_like(x, 2.0).exp().sum(-1)``, ``(~zeros_like(m,
dtype=torch.bool)).float().sum(-1)``): the program sums one element instead of the whole row
(``exp(2)`` instead of ``4 * exp(2)``), under every flag set tried, because its code generator
treats the broadcast value as a single element. Such tensors come from models written for
optional inputs (TimesFM 2.5's running statistics over an all-valid padding mask). The values
are known before the program runs, so they are computed here with PyTorch's CPU kernels and
the graph gets a ``full`` of the result, which both importers and IREE handle as a splat; the
reduction of a splat ``full`` is computed correctly.

Like Inductor's uniform-value folding (``constant_fold_uniform_value``), written here because
importing Inductor's pass loads its code generators into every compiling process.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from .passes import is_random

_aten = torch.ops.aten

# constructors whose result does not depend on their tensor argument's values, only its shape
_LIKE = {_aten.zeros_like.default, _aten.ones_like.default, _aten.full_like.default}
_CONSTRUCTORS = {_aten.full.default, _aten.zeros.default, _aten.ones.default,
                 _aten.scalar_tensor.default, _aten.arange.default, _aten.arange.start,
                 _aten.arange.start_step} | _LIKE
_UNSIGNED = (torch.uint8, torch.uint16, torch.uint32, torch.uint64)
_HOST = torch.device("cpu")
# folding computes the values on the host: larger constants stay in the program
MAX_ELEMENTS = 1 << 22


def _on_host(value):
    if isinstance(value, torch.device):
        return _HOST
    if isinstance(value, list | tuple):
        return type(value)(_on_host(v) for v in value)
    return value


def _evaluate(node: fx.Node, known: dict[fx.Node, torch.Tensor]) -> torch.Tensor | None:
    """The node's value from the known values of its tensor arguments, or None."""
    if node.target in _LIKE:
        template = node.args[0].meta.get("val") if isinstance(node.args[0], fx.Node) else None
        if not isinstance(template, torch.Tensor):
            return None
        first = torch.empty_strided(template.shape, template.stride(), dtype=template.dtype)
        rest = node.args[1:]
    else:
        first, rest = None, node.args

    missing = False

    def arg(a):
        nonlocal missing
        if isinstance(a, fx.Node):
            if a not in known:
                missing = True
                return None
            return known[a]
        if isinstance(a, list | tuple):
            return type(a)(arg(x) for x in a)
        return _on_host(a)

    args = tuple(arg(a) for a in rest)
    kwargs = {k: arg(v) for k, v in node.kwargs.items()}
    if missing:
        return None
    if first is not None:
        args = (first, *args)
    out = node.target(*args, **kwargs)
    return out if isinstance(out, torch.Tensor) else None


def _foldable(node: fx.Node) -> bool:
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    if is_random(node) or node.target._schema.is_mutable:
        return False
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and not val.is_complex() and val.numel() <= MAX_ELEMENTS \
        and not any(isinstance(s, torch.SymInt) for s in val.shape)


def _uniform(value: torch.Tensor) -> bool:
    if value.numel() == 0:
        return False
    flat = value.reshape(-1)
    return bool(torch.equal(flat, flat[:1].expand_as(flat)))


def fold_uniform_constants(gm: fx.GraphModule) -> int:
    """Replace each tensor that depends on no graph input and holds one value throughout (and is
    used by a node that does depend on inputs, or is an output) by ``aten.full`` of that value.
    Returns the number of nodes replaced."""
    graph = gm.graph
    known: dict[fx.Node, torch.Tensor] = {}  # values whose users are still to be visited
    constant: set[fx.Node] = set()
    pending: dict[fx.Node, int] = {}
    fills: dict[fx.Node, object] = {}

    def settle(node: fx.Node) -> None:
        """Every user of ``node`` was visited: replace it if it is a frontier or a reduction (the
        reductions are what IREE miscompiles: a frontier that is a strided view cannot be
        replaced by a ``full``), drop its value."""
        value, val = known.pop(node), node.meta["val"]
        reduction = torch.Tag.reduction in node.target.tags
        if node.target in _CONSTRUCTORS or (all(u in constant for u in node.users) and not reduction):
            return  # already a constructor, or only feeds other folded values
        if val.dtype not in _UNSIGNED and val.is_contiguous() and _uniform(value):
            fills[node] = value.reshape(-1)[0].item()

    # the values are real host tensors: computed outside the tracing modes AOTAutograd left on
    with torch.utils._python_dispatch._disable_current_modes(), torch.no_grad():
        for node in graph.nodes:
            if _foldable(node):
                try:
                    value = _evaluate(node, known)
                except Exception:  # noqa: BLE001 - an op the host cannot evaluate stays in the program
                    value = None
                if value is not None and tuple(value.shape) == tuple(node.meta["val"].shape):
                    known[node] = value
                    constant.add(node)
                    pending[node] = len(node.users)
                    if not node.users:
                        del pending[node]
                        settle(node)
            for arg in node.all_input_nodes:
                if arg in pending:
                    pending[arg] -= 1
                    if not pending[arg]:
                        del pending[arg]
                        settle(arg)
    for node, fill in fills.items():
        val = node.meta["val"]
        with graph.inserting_before(node):
            full = graph.call_function(
                _aten.full.default, (list(val.shape), fill),
                {"dtype": val.dtype, "layout": torch.strided, "device": val.device, "pin_memory": False})
        full.meta.update(node.meta)
        node.replace_all_uses_with(full)
    if fills:
        graph.eliminate_dead_code()
        graph.lint()
        gm.recompile()
    return len(fills)
