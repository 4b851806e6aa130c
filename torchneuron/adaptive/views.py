"""Views in adaptive eager mode.

A view is built at once (it only describes existing memory) and, when its source is a value of
the window, also recorded, so that later ops on the view refer to it by name (``transpose``,
``slice``, ``view`` …) rather than by raw geometry. PyTorch builds most views with composite
kernels that end in ``as_strided``; in adaptive mode those composite view ops get a device
kernel that runs the same composite (through the Meta key, which aliases the input) and records
the named op, with the inner ``as_strided`` left unrecorded.
"""

from __future__ import annotations

import torch
from torch._C import DispatchKey, DispatchKeySet

from ..runtime import lazy

_META = DispatchKeySet(DispatchKey.Meta)
_has = torch._C._dispatch_has_kernel_for_dispatch_key
_lib: list[torch.library.Library] = []
# same-geometry aliases need no recording (a tensor is matched to its value by geometry), and
# fake tensors call ``detach`` on meta tensors carrying the device's keys: a Python kernel there
# would give the result a Python object before FakeTensor can claim it
_SKIP = frozenset({"detach", "alias", "lift_fresh", "_alias"})


def _named_view_kernel(op, recorder):
    handle = op._handle

    def kernel(*args, **kwargs):
        if lazy.VIEW is None:
            return handle.redispatch_boxed(_META, *args, **kwargs)
        recorder.suppress += 1
        try:
            out = handle.redispatch_boxed(_META, *args, **kwargs)
        finally:
            recorder.suppress -= 1
        recorder.view(op, args, kwargs, out)
        return out

    kernel.__name__ = f"neuron_adaptive_{op.__name__}"
    return kernel


def _composite_views():
    from ..ops.registry import _aten_overloads, _returns_view

    for qualname, name, op in _aten_overloads():
        if name.split(".")[0] in _SKIP or not _returns_view(op) or _has(qualname, "PrivateUse1"):
            continue
        if _has(qualname, "CompositeImplicitAutograd") or not _has(qualname, "CompositeExplicitAutograd"):
            continue
        if any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments):
            continue
        yield name, op


def install(recorder) -> None:
    if _lib:
        return
    lib = torch.library.Library("aten", "IMPL")
    for name, op in _composite_views():
        lib.impl(name, _named_view_kernel(op, recorder), "PrivateUse1")
    _lib.append(lib)
