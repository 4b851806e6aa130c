"""Decompositions of the functional ``_foreach_*`` ops into per-tensor ATen ops.

PyTorch has no decompositions for them and torch-mlir does not lower them, so an optimizer step
(in a compiled graph, or an adaptive-eager window) would otherwise run each foreach op eagerly,
out of place after functionalisation: a full extra copy of the parameters per op. Decomposed,
the per-tensor ops lower and fuse, and the updates are written back in place.

``_foreach_<op>.<overload>(xs, ys | scalars | scalar, …)`` becomes, for every index ``i``,
``aten.<op>(xs[i], ys[i] | scalars[i] | scalar, …)`` (the overload is resolved from the
arguments); ``addcmul``/``addcdiv`` take their scalar as ``value=``.
"""

from __future__ import annotations

import torch

_aten = torch.ops.aten
_VALUE_KW = {"addcmul", "addcdiv"}
_SKIP_OVERLOADS = {"Tensor"}  # addcmul/addcdiv.Tensor: a 1-D tensor of scalars read on the host


def _per_index(base: str, schema):
    packet = getattr(_aten, base)
    list_args = [i for i, a in enumerate(schema.arguments) if isinstance(a.type, torch._C.ListType)]

    def decomposition(*args, **kwargs):
        n = len(args[0])
        outs = []
        for i in range(n):
            call = [a[i] if j in list_args and j < len(args) else a for j, a in enumerate(args)]
            kw = dict(kwargs)
            if base in _VALUE_KW and len(call) > 3:
                kw["value"] = call.pop(3)
            outs.append(packet(*call, **kw))
        return outs

    return decomposition


def foreach_decompositions() -> dict:
    table = {}
    names = {q.split("::", 1)[1].split(".")[0] for q in torch._C._dispatch_get_all_op_names()
             if q.startswith("aten::_foreach_")}
    for name in sorted(names):
        if name.endswith("_"):
            continue  # functional forms only: in-place ones are functionalised first
        base = name[len("_foreach_"):]
        if not hasattr(_aten, base) or base in ("copy", "norm", "max", "zero"):
            continue
        packet = getattr(_aten, name)
        for overload in packet.overloads():
            if overload in _SKIP_OVERLOADS and base in _VALUE_KW:
                continue
            op = getattr(packet, overload)
            rets = op._schema.returns
            if len(rets) == 1 and isinstance(rets[0].type, torch._C.ListType) and not overload.endswith("out"):
                table[op] = _per_index(base, op._schema)
    return table
