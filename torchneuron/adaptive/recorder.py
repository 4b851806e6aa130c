"""Deciding, per launch, whether an op is recorded into the window, and recording it.

Recorded: ops that read tensors and return fresh ones (random ones included: the window keeps
their order on the device generator), in-place ops that write only their positional tensor
arguments, device-to-device copies and casts, and views of values the window knows. Not
recorded (they run eagerly, which flushes the window first because they read device bytes):
ops whose result shape depends on data, ``out=`` variants, ops that change a tensor's metadata,
ops with an explicit ``Generator``, ops with host tensors or non-tensor results, and indexing
ops whose indices were computed inside the window (their bounds could not be checked before
the fused program runs; see ``IndexCheck``).
"""

from __future__ import annotations

import threading

import torch

from ..ops import tracking
from ..ops.generic import core_of, reads_host_computed
from ..ops.opinfo import RANDOM, facts
from ..runtime import lazy
from . import metrics
from .window import IndexCheck, NotRecordable, Ref, Window

aten = torch.ops.aten
_NOT = lazy.NOT_RECORDED

# indexing ops: (position of the indexed tensor, position of the index tensor(s), dim argument
# position or None for dim 0, negative indices allowed)
_INDEXING = {
    "aten::embedding": (0, 1, None, False),
    "aten::index_select": (0, 2, 1, False),
    "aten::gather": (0, 2, 1, False),
    "aten::index": (0, 1, "list", True),
}
# ops that index with data the window could not check: always eager
_UNCHECKED = frozenset({
    "aten::index_put", "aten::index_put_", "aten::_index_put_impl", "aten::_index_put_impl_",
    "aten::index_add", "aten::index_add_", "aten::index_copy", "aten::index_copy_",
    "aten::index_fill", "aten::index_fill_", "aten::scatter", "aten::scatter_",
    "aten::scatter_add", "aten::scatter_add_", "aten::scatter_reduce", "aten::scatter_reduce_",
    "aten::take", "aten::put", "aten::put_", "aten::embedding_dense_backward",
    "aten::_embedding_bag", "aten::embedding_bag", "aten::_embedding_bag_forward_only",
    "aten::nll_loss_forward", "aten::nll_loss2d_forward", "aten::nll_loss_backward",
    "aten::nll_loss2d_backward", "aten::multi_margin_loss", "aten::multilabel_margin_loss_forward",
    "aten::_unsafe_index", "aten::_unsafe_index_put", "aten::searchsorted", "aten::bucketize",
    "aten::_foreach_copy_", "aten::_foreach_copy",
})

FUNCTIONAL, INPLACE = 1, 2


def classify(op) -> int | None:
    f = facts(op)
    if f.sync_point or f.metadata_mutating or f.name in _UNCHECKED:
        return None
    if not f.written:
        return None if f.returns_alias else FUNCTIONAL
    if f.overload.startswith("out") or any(not isinstance(w, int) for w in f.written):
        return None
    if not f.returns_self_or_none and not op._schema.name.startswith("aten::_foreach"):
        return None
    return INPLACE


class Recorder:
    """Owns the current window and records launches into it (thread-safe)."""

    def __init__(self, flush, limit: int):
        self.lock = threading.RLock()
        self.window = Window()
        self.limit = limit
        self._flush = flush
        self._kinds: dict = {}
        self._meta: dict = {}
        self.suppress = 0  # > 0 while a recorded view op builds its result from other views

    # ---- entry points (installed as lazy.RECORDER) --------------------------------------------
    def __call__(self, op, args, kwargs):
        kind = self._kinds.get(op, 0)
        if kind == 0:
            kind = self._kinds[op] = classify(op)
        if kind is None:
            return _NOT
        with self.lock:
            w = self.window
            n_floats = len(w.floats)
            try:
                result = self._record(w, op, kind, args, kwargs)
            except NotRecordable as why:
                del w.floats[n_floats:]  # the floats of recorded nodes only, in node order
                metrics.count("ops_not_recordable")
                metrics.note_eager(f"{op._schema.name}: {why}")
                return _NOT
            if len(w.nodes) >= self.limit:
                self._flush("size limit")
            return result

    def view(self, op, args, kwargs, out) -> None:
        """After a view op ran: if its source is a window value, record the view too."""
        if self.suppress:
            return
        with self.lock:
            w = self.window
            src = args[0] if args else None
            if not isinstance(src, torch.Tensor):
                return
            if src.device.type == "neuron":
                if w.core is None or not w.nodes:  # an empty window takes the core of its first op
                    w.core = src.get_device()
                elif src.get_device() != w.core:
                    return  # a view of another core's memory: not part of this window
            # a view of memory from before the window is recorded too (its source becomes a
            # placeholder): the fused program then reads the source, e.g. a weight, in place
            # instead of a strided copy of it
            sig: list = []
            n_floats = len(w.floats)
            try:
                targs = tuple(w.template(a, sig, []) for a in args)
                tkw = {k: w.template(v, sig, []) for k, v in kwargs.items()}
            except NotRecordable:
                del w.floats[n_floats:]
                return
            single = not isinstance(out, (list, tuple))
            w.add_node(op, targs, tkw, sig, (out,) if single else list(out), single, is_view=True)
            metrics.count("views_recorded")

    # ---- recording -------------------------------------------------------------------------------
    def _record(self, w: Window, op, kind: int, args, kwargs):
        f = facts(op)
        if f.generator_name is not None:
            g = kwargs.get(f.generator_name) if f.generator_pos is None or f.generator_pos >= len(args) \
                else args[f.generator_pos]
            if g is not None:
                raise NotRecordable("an explicit generator")
        if kind == FUNCTIONAL and f.name not in RANDOM and not _has_tensor(args, kwargs):
            # a factory (arange, full …) reads no device memory: it runs at once, in any order
            raise NotRecordable("a factory")
        if reads_host_computed(args, kwargs):
            raise NotRecordable("a dtype only the CPU fallback computes")
        core = core_of(args, kwargs, None)  # a window holds one core's work (a launched rank's)
        if core is not None:
            if w.core is None or not w.nodes:  # an empty window takes the core of its first op
                w.core = core
            elif core != w.core:
                raise NotRecordable("work on another core than the window's")
        sig: list = []
        mkey: list = [op]
        targs = tuple(w.template(a, sig, mkey) for a in args)
        tkw = {k: w.template(v, sig, mkey) for k, v in kwargs.items()} if kwargs else {}
        check = _INDEXING.get(f.name)
        if check is not None:
            self._index_check(w, f.name, check, args, targs)
        meta = self._meta_result(op, targs, tkw, tuple(mkey), w, kind)
        tracking.executed(f.qualified)  # it runs on the device, fused or replayed
        if kind == FUNCTIONAL:
            single = not isinstance(meta, (list, tuple))
            metas = (meta,) if single else meta
            outs = [None if m is None else _allocate(m, w.core or 0) for m in metas]
            w.add_node(op, targs, tkw, sig, outs, single, is_view=False)
            if f.name in RANDOM:
                w.random = True
            metrics.count("ops_recorded")
            return outs[0] if single else type(meta)(outs)
        # in-place: the written arguments are the results
        w.add_node(op, targs, tkw, sig, (), False, is_view=False)
        for pos in f.written:
            a = args[pos]
            for t in (a if isinstance(a, (list, tuple)) else (a,)):
                if isinstance(t, torch.Tensor):
                    w.mark_written(t)
        if f.name in RANDOM:
            w.random = True
        metrics.count("ops_recorded")
        if not op._schema.returns:
            return None
        return args[0]

    def _index_check(self, w: Window, name: str, check, args, targs) -> None:
        src_pos, idx_pos, dim_pos, neg = check
        src = args[src_pos]
        if dim_pos == "list":
            items = [(d, t) for d, t in enumerate(args[idx_pos]) if t is not None]
        else:
            dim = 0 if dim_pos is None else args[dim_pos]
            items = [(dim, args[idx_pos])]
        for d, idx in items:
            if not isinstance(idx, torch.Tensor) or idx.dtype in (torch.bool, torch.uint8):
                raise NotRecordable("a boolean mask index")
            if not w.unwritten_placeholder(idx):
                raise NotRecordable("indices computed by recorded work")
            bound = src.shape[d] if src.dim() else 1
            w.checks.append(IndexCheck(name, idx, bound, neg))

    def _meta_result(self, op, targs, tkw, mkey: tuple, w: Window, kind: int):
        """The results' geometry (from the op's meta function, cached); for in-place ops the
        meta run only checks the arguments, as the kernel would before launch."""
        try:
            hit = self._meta.get(mkey, _NOT)
        except TypeError:  # an unhashable scalar
            raise NotRecordable("unhashable argument") from None
        if hit is not _NOT:
            if hit is None:
                raise NotRecordable("no meta result")
            return _instantiate(hit)
        metas = w.metas

        def to_meta(a):
            if isinstance(a, Ref):
                size, stride, dtype = metas[a.i]
                return torch.empty_strided(size, stride, dtype=dtype, device="meta")
            if type(a) is tuple:
                return tuple(to_meta(x) for x in a)
            if type(a) is torch.device and a.type == "neuron":
                return torch.device("meta")
            return a

        try:
            out = op(*[to_meta(a) for a in targs], **{k: to_meta(v) for k, v in tkw.items()})
            desc = _describe(out) if kind == FUNCTIONAL else ("inplace",)
        except Exception:  # noqa: BLE001 - the eager kernel reports the op's own error
            desc = None
        self._meta[mkey] = desc
        if desc is None:
            raise NotRecordable("no meta result")
        return _instantiate(desc)


def _has_tensor(args, kwargs) -> bool:
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            return True
        if type(a) in (list, tuple) and any(isinstance(x, torch.Tensor) for x in a):
            return True
    return False


def _describe(out):
    if isinstance(out, torch.Tensor):
        from ..ops import dtype_policy

        if out.dtype not in dtype_policy.SUPPORTED:  # computed by the CPU fallback, or refused
            raise TypeError(f"{out.dtype} is not computed on the device")
        return ("t", tuple(out.shape), tuple(out.stride()), out.dtype)
    if isinstance(out, (list, tuple)) and all(isinstance(o, torch.Tensor) for o in out):
        return (type(out), tuple(_describe(o) for o in out))
    return None  # a non-tensor result: the host must see the data


class _M:
    __slots__ = ("shape", "stride", "dtype")

    def __init__(self, shape, stride, dtype):
        self.shape, self.stride, self.dtype = shape, stride, dtype


def _instantiate(desc):
    if desc[0] == "inplace":
        return None
    if desc[0] == "t":
        return _M(desc[1], desc[2], desc[3])
    return desc[0](_instantiate(d) for d in desc[1])


def _allocate(m: _M, core: int) -> torch.Tensor:
    from ..runtime.storage import empty_device

    return empty_device(list(m.shape), list(m.stride), m.dtype, core)
