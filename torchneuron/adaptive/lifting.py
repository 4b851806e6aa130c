"""Float arguments that change between runs of the same window become program inputs.

An optimizer step is the same program every iteration except for a few floats (Adam's bias
corrections, a scheduled learning rate). Compiling it once per value would cost more than it
saves, so once a window's structure has been seen with other float values, the floats that
differ are *lifted*: each becomes a 0-dimensional float32 device tensor fed to the program, and
the op that took it is rewritten to an equivalent one taking a tensor:

* a number passed for a ``Tensor`` argument (``x * lr`` reaches the device as ``mul.Tensor``) →
  the 0-d tensor in its place;
* ``op.Scalar`` → ``op.Tensor`` (``mul``, ``div``, ``_foreach_mul_`` …) for the scalar operand;
* ``op.ScalarList`` → ``op.List`` with one 0-d tensor per scalar (``_foreach_div_`` …);
* ``_foreach_addcdiv(_)``/``_foreach_addcmul(_)`` with a lifted value or ``ScalarList`` → the
  products with the scalars first, then the op with value 1;
* an ``alpha=`` that is lifted → the other operand multiplied by it, then the op without it.

A 0-d float32 tensor takes part in type promotion as a Python float does (a dimensioned operand
of the same category keeps its dtype), so results keep eager mode's dtypes. Ops outside these
rules are not lifted: the window then runs op by op.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from .window import Window

aten = torch.ops.aten


class CannotLift(Exception):  # noqa: N818 - a verdict
    pass


def float_sites(w: Window) -> list[tuple[int, tuple]]:
    """(node index, path) of every float argument, in the order ``Window.template`` met them."""
    sites: list[tuple[int, tuple]] = []

    def walk(k, a, path):
        if type(a) is float:
            sites.append((k, path))
        elif type(a) is tuple:
            for i, x in enumerate(a):
                walk(k, x, (*path, i))

    for k, n in enumerate(w.nodes):
        for i, a in enumerate(n.args):
            walk(k, a, (i,))
        for name, v in n.kwargs.items():
            walk(k, v, (name,))
    return sites


def _overload(op, name: str):
    return getattr(op.overloadpacket, name, None)


def _replace(args: tuple, path: tuple, value):
    """``args`` with the element at ``path`` (positions into nested tuples) replaced."""
    i = path[0]
    if len(path) == 1:
        return (*args[:i], value, *args[i + 1:])
    return (*args[:i], _replace(args[i], path[1:], value), *args[i + 1:])


def emit(g: fx.Graph, op, args: tuple, kwargs: dict, lifted: dict) -> fx.Node:
    """Emit ``op`` with the lifted floats (``lifted``: path → placeholder node) as tensors."""
    name = op._overloadname
    schema_args = op._schema.arguments
    # alpha=: multiply the operand it scales, then drop it
    alpha = next((p for p in lifted if p == ("alpha",) or (len(p) == 1 and isinstance(p[0], int)
                  and p[0] < len(schema_args) and schema_args[p[0]].name == "alpha")), None)
    if alpha is not None:
        scale = lifted.pop(alpha)
        if alpha == ("alpha",):
            kwargs = {k: v for k, v in kwargs.items() if k != "alpha"}
        else:
            args = args[:alpha[0]]
        other = args[1]
        if isinstance(other, (list, tuple)):
            other = g.call_function(aten._foreach_mul.Tensor, (other, scale))
        else:
            other = g.call_function(aten.mul.Tensor, (other, scale))
        args = (args[0], other, *args[2:])
    if not lifted:
        return g.call_function(op, args, kwargs)
    positions = {p[0] for p in lifted}
    if len(positions) != 1 or any(isinstance(p[0], str) for p in lifted):
        raise CannotLift(f"{op}: several lifted arguments")
    pos = positions.pop()
    if name.endswith("ScalarList"):
        values = list(args[pos])
        for p, node in lifted.items():
            values[p[1]] = node
        for j, v in enumerate(values):
            if isinstance(v, float):  # a scalar of the list that does not vary
                values[j] = g.call_function(aten.scalar_tensor.default, (v,), {"dtype": torch.float32})
        base = op.overloadpacket.__name__
        if base.startswith("_foreach_addc"):  # addcdiv / addcmul: t1 * s first, then value 1
            scaled = g.call_function(aten._foreach_mul.List, (args[1], values))
            target = _overload(op, "Scalar")
            if target is None:
                raise CannotLift(f"{op}: no Scalar overload")
            return g.call_function(target, (args[0], scaled, args[2], 1), kwargs)
        target = _overload(op, name.replace("ScalarList", "List"))
        if target is None:
            raise CannotLift(f"{op}: no List overload")
        return g.call_function(target, _replace(args, (pos,), values), kwargs)
    if len(lifted) != 1:
        raise CannotLift(f"{op}: several lifted floats")
    (path, node), = lifted.items()
    if len(path) != 1:
        raise CannotLift(f"{op}: a float inside a list")
    arg_name = schema_args[pos].name
    if op.overloadpacket.__name__.startswith("_foreach_addc") and name == "Scalar":
        # value=s: t1 * s first, then value 1 (the Tensor overload wants host scalars)
        scaled = g.call_function(aten._foreach_mul.Tensor, (args[1], node))
        return g.call_function(op, (args[0], scaled, args[2], 1), kwargs)
    if str(schema_args[pos].type) == "Tensor":
        target = op  # a Python number passed for a Tensor argument (``x * 0.5`` is mul.Tensor)
    elif name.endswith("Scalar"):
        target = _overload(op, name[: -len("Scalar")] + "Tensor")
    else:
        target = None
    if target is None or len(target._schema.arguments) != len(schema_args) \
            or str(target._schema.arguments[pos].type) != "Tensor":
        raise CannotLift(f"{op}: no tensor overload for {arg_name}")
    return g.call_function(target, _replace(args, (pos,), node), kwargs)


def lift_sites(w: Window, positions: set[int]) -> dict[int, dict[tuple, int]]:
    """For the floats at ``positions`` (indices into ``w.floats``): node index → {argument
    path → float index}, for ``executor.build_graph``."""
    sites = float_sites(w)
    if len(sites) != len(w.floats):
        raise CannotLift("float bookkeeping out of step")
    by_node: dict[int, dict[tuple, int]] = {}
    for i in sorted(positions):
        k, path = sites[i]
        by_node.setdefault(k, {})[path] = i
    return by_node


def optimizer_floats(w: Window) -> set[int]:
    """Positions of the floats of in-place ``_foreach_*`` ops (an optimizer step) that can be
    lifted. Their values change every step (bias corrections, schedules), so such windows are
    compiled with them lifted from the first time, not only once a second value is seen."""
    sites = float_sites(w)
    if len(sites) != len(w.floats):
        return set()
    out: set[int] = set()
    scratch = fx.Graph()
    for i, (k, path) in enumerate(sites):
        op = w.nodes[k].op
        if not (op.overloadpacket.__name__.startswith("_foreach_") and op.overloadpacket.__name__.endswith("_")):
            continue
        n = w.nodes[k]
        try:
            # the op's other floats stay constants in this probe: one float at a time
            emit(scratch, op, _probe_args(n.args), dict(n.kwargs), {path: scratch.placeholder(f"x{i}")})
        except (CannotLift, IndexError, TypeError):
            continue
        out.add(i)
    return out


def _probe_args(args):
    """``args`` with value references replaced by placeholders' stand-ins (for ``emit`` checks)."""
    from .window import Ref

    def conv(a):
        if isinstance(a, Ref):
            return None
        if type(a) is tuple:
            return tuple(conv(x) for x in a)
        return a

    return conv(args)


def float_inputs(values: list[float]) -> list[torch.Tensor]:
    """0-d float32 device tensors holding ``values`` (one host-to-device copy)."""
    # one 64-byte row per value: each 0-d view starts on the alignment the runtime imports
    rows = torch.zeros(len(values), 16, dtype=torch.float32)
    rows[:, 0] = torch.tensor(values, dtype=torch.float32)
    rows = rows.to("neuron")
    return [rows[i, 0] for i in range(len(values))]

