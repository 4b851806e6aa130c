"""The recording window of adaptive eager mode.

While adaptive mode is on, device operations are *recorded* instead of executed: each returns
at once tensors with the right sizes, strides and dtype (computed by the op's meta function,
cached per signature) over freshly allocated device memory, exactly what the eager kernel would
have returned, and an entry is appended to the window. The window is a program in launch order:

* **values** — every tensor the program mentions: a *placeholder* (device memory that existed
  before the window, read or written by it) or an output of a recorded op;
* **nodes** — the ops, with their arguments as templates in which tensors are ``Ref``\\ s to
  values. In-place ops and views are recorded as such (not functionalised here): AOTAutograd
  does that when the window is compiled.

Tensors are matched to values by their *geometry* — storage block, offset, sizes, strides,
dtype — so any Python object describing the same bytes (a detached alias, an autograd-saved
tensor) resolves to the same value. A tensor over memory the window produced or wrote, but with
a geometry the window has not seen, cannot be expressed in the program: the op is not recorded,
and because the eager kernel then reads device bytes, the window flushes first.

The window's *signature* (ops, scalar arguments, value wiring, placeholder geometries and
aliasing) is built as ops are recorded; the executor caches compiled windows under it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch
from torch._C._profiler import gather_traceback

from ..runtime.storage import storage_block

_Tensor = torch.Tensor
_SCALARS = (int, bool, str, complex, type(None), torch.dtype, torch.device, torch.memory_format, torch.layout)


class NotRecordable(Exception):
    """The op cannot be expressed in the window; it runs eagerly (after a flush)."""


class Ref:
    """A tensor argument of a recorded op: value number ``i`` of the window."""

    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i

    def __repr__(self) -> str:
        return f"%{self.i}"


@dataclass
class BlockUse:
    """How the window uses one device allocation."""

    block: weakref.ref
    produced: bool = False  # allocated by the window for an op's output
    written: bool = False  # written by a recorded in-place op
    keys: list = field(default_factory=list)  # geometries of it that resolve to values


@dataclass
class Output:
    """Device memory allocated for a recorded op's result: written when the window runs,
    if the memory is still alive then."""

    value: int
    block: weakref.ref
    size: tuple
    stride: tuple
    dtype: torch.dtype


@dataclass
class Node:
    op: torch._ops.OpOverload
    args: tuple
    kwargs: dict
    outs: tuple  # value numbers of the results (None for non-tensor results)
    single: bool  # the op returns one tensor (not a tuple/list)
    traceback: object  # where the op was launched (symbolised only if it fails)
    is_view: bool = False


@dataclass
class IndexCheck:
    """An index tensor that the compiled program cannot bounds-check: checked on the host
    before the window runs (``index`` is a placeholder, so its bytes are final by then)."""

    op: str
    index: _Tensor
    bound: int
    negative_ok: bool


class Window:
    def __init__(self) -> None:
        self.placeholders: list[_Tensor] = []
        self.ph_values: list[int] = []
        self.ph_set: set[int] = set()
        self.ph_alias: dict[int, int] = {}  # block id → first placeholder over it (aliasing)
        self.metas: list[tuple] = []  # per value: (sizes, strides, dtype)
        self.nodes: list[Node] = []
        self.by_key: dict[tuple, int] = {}
        self.blocks: dict[int, BlockUse] = {}
        self.outputs: list[Output] = []
        self.checks: list[IndexCheck] = []
        self.sig: list = []
        self.floats: list[float] = []
        self.random = False
        self.core: int | None = None  # the logical core whose work the window holds

    # ---- values ------------------------------------------------------------------------------
    def _use(self, t: _Tensor) -> tuple[tuple, BlockUse | None, object]:
        block = storage_block(t.untyped_storage())
        if block is None:
            raise NotRecordable("a device tensor without device memory")
        bid = id(block)
        use = self.blocks.get(bid)
        if use is not None and use.block() is not block:  # a dead block's id, reused
            for k in use.keys:
                self.by_key.pop(k, None)
            del self.blocks[bid]
            use = None
        return (bid, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype), use, block

    def ref(self, t: _Tensor) -> int:
        """The value ``t`` stands for, adding a placeholder for memory the window has not used."""
        key, use, block = self._use(t)
        if use is not None:
            v = self.by_key.get(key)
            if v is not None:
                return v
            if use.produced or use.written:
                raise NotRecordable("an alias of recorded work that the window cannot express")
        else:
            use = self.blocks[key[0]] = BlockUse(weakref.ref(block))
        v = len(self.metas)
        self.metas.append((key[2], key[3], key[4]))
        alias = self.ph_alias.setdefault(key[0], len(self.placeholders))
        self.placeholders.append(t)
        self.ph_values.append(v)
        self.ph_set.add(v)
        self.sig.append(("p", key[1], key[2], key[3], key[4], alias))
        self.by_key[key] = v
        use.keys.append(key)
        return v

    def _bind(self, t: _Tensor, v: int, produced: bool) -> None:
        # (a block id reused after its block died was already forgotten by ``_use``)
        key, use, block = self._use(t)
        if use is None:
            use = self.blocks[key[0]] = BlockUse(weakref.ref(block), produced=produced)
        self.by_key[key] = v
        use.keys.append(key)

    def unwritten_placeholder(self, t: _Tensor) -> bool:
        """``t`` is memory from before the window that the window has not written."""
        key, use, _ = self._use(t)
        if use is None:
            return True  # not used yet: it will become a placeholder
        v = self.by_key.get(key)
        return v is not None and v in self.ph_set and not use.written and not use.produced

    def mark_written(self, t: _Tensor) -> None:
        key, use, _ = self._use(t)
        if use is not None:
            use.written = True

    # ---- templates -----------------------------------------------------------------------------
    def template(self, a, sig: list, mkey: list):
        """``a`` with tensors replaced by ``Ref``\\ s; ``sig``/``mkey`` receive typed items for the
        window signature and for the meta-result cache."""
        if isinstance(a, _Tensor):
            if a.device.type != "neuron":
                raise NotRecordable("a host tensor argument")
            v = self.ref(a)
            sig.append(v)
            mkey.append(self.metas[v])
            return Ref(v)
        ta = type(a)
        if ta in (list, tuple):
            sig.append(ta)
            mkey.append(ta)
            out = tuple(self.template(x, sig, mkey) for x in a)
            sig.append(len(a))
            mkey.append(len(a))
            return out
        if ta is float:
            # floats are kept apart from the signature: a window that differs from a cached one
            # only in float values (a learning rate, a bias correction) is the same program
            sig.append(float)
            self.floats.append(a)
            mkey.append((ta, a))
            return a
        if ta in _SCALARS:
            item = (ta, a)
            sig.append(item)
            mkey.append(item)
            return a
        raise NotRecordable(f"an argument of type {ta.__name__}")

    # ---- recording -----------------------------------------------------------------------------
    def add_node(self, op, targs, tkwargs, sig: list, results, single: bool, is_view: bool) -> None:
        """Append ``op``; ``results`` are its output tensors (or None) in schema order, ``single``
        says whether the op returns one tensor rather than a sequence."""
        outs = []
        for r in results:
            if r is None:
                outs.append(None)
                continue
            v = len(self.metas)
            self.metas.append((tuple(r.shape), tuple(r.stride()), r.dtype))
            outs.append(v)
        self.nodes.append(Node(op, targs, tkwargs, tuple(outs), single,
                               gather_traceback(True, False, False), is_view))
        self.sig.append((op, tuple(sig)))
        for r, v in zip(results, outs, strict=True):
            if r is None:
                continue
            if is_view:
                self._bind(r, v, produced=False)
            else:
                self._bind(r, v, produced=True)
                block = storage_block(r.untyped_storage())
                self.outputs.append(Output(v, weakref.ref(block), tuple(r.shape), tuple(r.stride()), r.dtype))
