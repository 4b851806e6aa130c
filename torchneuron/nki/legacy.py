"""The legacy ISA dialect (``neuronxcc.nki.isa``): instructions return new tiles.

``nisa.nc_matmul(stationary, moving)`` returns a float32 PSUM tile that kernels accumulate with
``psum[...] += ...``; every other instruction returns a new SBUF tile of the optional ``dtype``
(default: the input's) and accepts ``mask=``. Each one allocates its result and runs the
current-dialect instruction from :mod:`.isa` on it, so rules and timing are shared.
``neuronxcc.nki.language`` is :mod:`.language` itself: it already returns tiles and understands
``nl.arange``/``nl.mgrid`` indexing, ``mask=`` and ``nl.par_dim``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import isa as _isa
from . import language as _nl
from .isa import (  # noqa: F401 - shared enums and helpers
    dge_mode,
    dma_copy,
    dma_engine,
    dma_transpose,
    get_nc_version,
    gpsimd_engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    scalar_engine,
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from .language import _is_tile
from .rules import check
from .simulator import current
from .tiles import NkiTensor


def _fresh(t: NkiTensor, kind: str = "compute") -> NkiTensor:
    rec = current().scheduler.profile.records[-1]
    t._buf.producer = (rec.end, kind)
    return t


def _out(shape: Any, dtype: Any, like: Any = None, buffer: Any = _nl.sbuf) -> NkiTensor:
    dt = dtype if dtype is not None else (like.dtype if _is_tile(like) else _nl.float32)
    return _nl.ndarray(tuple(shape), dt, buffer=buffer)


def nc_matmul(
    stationary: NkiTensor,
    moving: NkiTensor,
    is_stationary_onezero: bool = False,
    is_moving_onezero: bool = False,
    is_transpose: bool = False,
    mask: Any = None,
    **_: Any,
) -> NkiTensor:
    """``stationary.T @ moving`` as a new float32 PSUM tile (accumulate with ``+=``)."""
    _nl.check_matmul("nisa.nc_matmul", stationary, moving, None)
    m = stationary.shape[1]
    shape = (moving.free_size, stationary.shape[0]) if is_transpose else (m, *moving.shape[1:])
    dst = _out(shape, _nl.float32, buffer=_nl.psum)
    _isa.nc_matmul(dst, stationary, moving, is_transpose=is_transpose, accumulate=False, mask=mask)
    return _fresh(dst, "matmul")


def nc_transpose(
    data: NkiTensor, engine: Any = None, mask: Any = None, dtype: Any = None, **_: Any
) -> NkiTensor:
    """``data.T``: on the Tensor Engine into PSUM, or the Vector Engine (<= 32 x 32) into SBUF."""
    p, f = data.shape
    eng = _isa._engine_name(engine, "tensor" if (p > 32 or f > 32) else "vector")
    buf = _nl.psum if eng == "tensor" else _nl.sbuf
    dst = _out(
        (f, p),
        dtype if dtype is not None else (_nl.float32 if eng == "tensor" else None),
        data,
        buf,
    )
    _isa.nc_transpose(dst, data, engine=eng, mask=mask)
    return _fresh(dst)


def activation(
    op: Any,
    data: NkiTensor,
    bias: Any = None,
    scale: Any = 1.0,
    reduce_op: Any = None,
    reduce_res: Any = None,
    reduce_cmd: Any = _isa.reduce_cmd.idle,
    mask: Any = None,
    dtype: Any = None,
    **_: Any,
) -> NkiTensor:
    dst = _out(data.shape, dtype, data)
    _isa.activation(
        dst,
        op,
        data,
        bias=bias,
        scale=scale,
        reduce_op=reduce_op,
        reduce_res=reduce_res,
        reduce_cmd=reduce_cmd,
        mask=mask,
    )
    return _fresh(dst)


def activation_reduce(
    op: Any,
    data: NkiTensor,
    reduce_op: Any = None,
    reduce_res: Any = None,
    bias: Any = None,
    scale: Any = 1.0,
    mask: Any = None,
    dtype: Any = None,
    **_: Any,
) -> NkiTensor:
    dst = _out(data.shape, dtype, data)
    _isa.activation_reduce(dst, op, data, reduce_op, reduce_res, bias=bias, scale=scale, mask=mask)
    return _fresh(dst)


def tensor_tensor(
    data1: NkiTensor,
    data2: NkiTensor,
    op: Any,
    dtype: Any = None,
    mask: Any = None,
    engine: Any = None,
    **_: Any,
) -> NkiTensor:
    dst = _out(
        data1.shape, dtype if dtype is not None else _nl._out_dtype(None, data1, data2), data1
    )
    _isa.tensor_tensor(dst, data1, data2, op, engine=engine, mask=mask)
    return _fresh(dst)


def tensor_scalar(
    data: NkiTensor,
    op0: Any,
    operand0: Any,
    reverse0: bool = False,
    op1: Any = None,
    operand1: Any = None,
    reverse1: bool = False,
    dtype: Any = None,
    mask: Any = None,
    engine: Any = None,
    **_: Any,
) -> NkiTensor:
    dst = _out(data.shape, dtype, data)
    _isa.tensor_scalar(
        dst, data, op0, operand0, reverse0, op1, operand1, reverse1, engine=engine, mask=mask
    )
    return _fresh(dst)


def scalar_tensor_tensor(
    data: NkiTensor,
    op0: Any,
    operand0: Any,
    op1: Any,
    operand1: NkiTensor,
    reverse0: bool = False,
    reverse1: bool = False,
    dtype: Any = None,
    mask: Any = None,
    **_: Any,
) -> NkiTensor:
    dst = _out(data.shape, dtype, data)
    _isa.scalar_tensor_tensor(
        dst, data, op0, operand0, op1, operand1, reverse0, reverse1, mask=mask
    )
    return _fresh(dst)


def tensor_reduce(
    op: Any,
    data: NkiTensor,
    axis: Any,
    mask: Any = None,
    dtype: Any = None,
    negate: bool = False,
    keepdims: bool = False,
    **_: Any,
) -> NkiTensor:
    axes = _nl.reduce_axes("nisa.tensor_reduce", data.ndim, axis)
    shape = (
        tuple(1 if i in axes else s for i, s in enumerate(data.shape))
        if keepdims
        else tuple(s for i, s in enumerate(data.shape) if i not in axes)
    )
    dst = _out(shape, dtype, data)
    _isa.tensor_reduce(dst, op, data, axes, negate=negate, keepdims=keepdims, mask=mask)
    return _fresh(dst)


def tensor_partition_reduce(
    op: Any, data: NkiTensor, mask: Any = None, dtype: Any = None, **_: Any
) -> NkiTensor:
    dst = _out((1, *data.shape[1:]), dtype, data)
    _isa.tensor_partition_reduce(dst, op, data)
    return _fresh(dst)


def tensor_copy(
    src: NkiTensor, mask: Any = None, dtype: Any = None, engine: Any = None, **_: Any
) -> NkiTensor:
    dst = _out(src.shape, dtype, src)
    _isa.tensor_copy(dst, src, engine=engine, mask=mask)
    return _fresh(dst)


def memset(
    shape: Any, value: Any, dtype: Any, mask: Any = None, engine: Any = None, **_: Any
) -> NkiTensor:
    dst = _out(shape, dtype)
    _isa.memset(dst, value, engine=engine, mask=mask)
    return _fresh(dst)


def reciprocal(data: NkiTensor, dtype: Any = None, mask: Any = None, **_: Any) -> NkiTensor:
    dst = _out(data.shape, dtype, data)
    _isa.reciprocal(dst, data, mask=mask)
    return _fresh(dst)


def iota(expr: Any, dtype: Any, mask: Any = None, **_: Any) -> NkiTensor:
    """Materialise an index expression built from ``nl.arange``/``nl.mgrid`` (GpSimd)."""
    vals = np.asarray(expr)
    check(
        vals.ndim >= 1, "shape-mismatch", "nisa.iota", "iota needs an index expression of rank >= 1"
    )
    if vals.ndim == 1:
        vals = vals[:, None]
    dst = _out(vals.shape, dtype)
    from .timing import gpsimd_seconds

    launch = current()
    launch.issue("nisa.iota", "gpsimd", gpsimd_seconds(launch.target, dst.free_size), writes=[dst])
    dst.write(vals, "nisa.iota", _nl._mask_array(mask, tuple(dst.shape)))
    return _fresh(dst)


def affine_select(
    pred: Any,
    on_true_tile: NkiTensor,
    on_false_value: Any,
    mask: Any = None,
    dtype: Any = None,
    **_: Any,
) -> NkiTensor:
    """``on_true_tile`` where the affine predicate (from ``nl.arange``/``mgrid`` indices)
    holds, else ``on_false_value`` (GpSimd)."""
    instr = "nisa.affine_select"
    _nl._check_compute_operand(instr, on_true_tile, "on_true_tile")
    p = np.broadcast_to(np.asarray(pred), on_true_tile.shape)
    dst = _out(on_true_tile.shape, dtype, on_true_tile)
    from .timing import gpsimd_seconds

    launch = current()
    launch.issue(
        instr,
        "gpsimd",
        gpsimd_seconds(launch.target, dst.free_size),
        reads=[on_true_tile],
        writes=[dst],
    )
    dst.write(
        np.where(p, on_true_tile.read(instr), np.float32(on_false_value)),
        instr,
        _nl._mask_array(mask, tuple(dst.shape)),
    )
    return _fresh(dst)


def bn_stats(data: NkiTensor, mask: Any = None, dtype: Any = None, **_: Any) -> NkiTensor:
    dst = _out((data.partition_size, 6), dtype, data)
    _isa.bn_stats(dst, data)
    return _fresh(dst)


def bn_aggr(data: NkiTensor, mask: Any = None, dtype: Any = None, **_: Any) -> NkiTensor:
    dst = _out((data.partition_size, 2), dtype, data)
    _isa.bn_aggr(dst, data)
    return _fresh(dst)


def max8(src: NkiTensor, mask: Any = None, dtype: Any = None, **_: Any) -> NkiTensor:
    dst = _out((src.partition_size, 8), dtype, src)
    _isa.max8(dst, src)
    return _fresh(dst)


def nc_find_index8(
    data: NkiTensor, vals: NkiTensor, mask: Any = None, dtype: Any = None, **_: Any
) -> NkiTensor:
    dst = _out((data.partition_size, 8), dtype if dtype is not None else _nl.uint32)
    _isa.nc_find_index8(dst, data, vals)
    return _fresh(dst)


engine = _isa.engine
reduce_cmd = _isa.reduce_cmd


def __getattr__(name: str) -> Any:
    if not name.startswith("_") and hasattr(_isa, name):
        raise AttributeError(
            f"nisa.{name} is only available in the current (dst-first) dialect: import nki.isa"
        )
    raise AttributeError(name)
