"""``nki.isa`` (``nisa``): one function per NeuronCore instruction, current dialect.

Every instruction takes its destination first (``nisa.nc_matmul(dst, stationary, moving)``),
checks the hardware rules, computes with numpy into ``dst`` and is charged to its engine.
The legacy dialect (instructions returning new tiles) lives in :mod:`.legacy`.
"""

from __future__ import annotations

import builtins
import enum
import math
from typing import Any

import numpy as np

from . import dtypes as _dt
from . import mathops
from .language import (
    _check_compute_dst,
    _check_compute_operand,
    _dma,
    _is_tile,
    _mask_array,
    check_bitvec,
    check_matmul,
    matmul_family,
    reduce_axes,
)
from .rules import NKIRuleError, check
from .simulator import current
from .tiles import MemoryRegion, NkiTensor
from .timing import gpsimd_seconds, matmul_seconds, scalar_seconds, vector_seconds


class engine(enum.Enum):  # noqa: N801 - NKI spelling
    unknown = "unknown"
    tensor = "tensor"
    vector = "vector"
    scalar = "scalar"
    gpsimd = "gpsimd"
    dma = "dma"
    sync = "sync"


# legacy engine constants
tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
dma_engine = engine.dma
unknown_engine = engine.unknown


class reduce_cmd(enum.Enum):  # noqa: N801
    idle = "idle"
    reset = "reset"
    reduce = "reduce"
    reset_reduce = "reset_reduce"


_ReduceCmd = reduce_cmd


class dge_mode(enum.Enum):  # noqa: N801
    unknown = "unknown"
    none = "none"
    swdge = "swdge"
    hwdge = "hwdge"


class oob_mode(enum.Enum):  # noqa: N801
    error = "error"
    skip = "skip"


class matmul_perf_mode(enum.Enum):  # noqa: N801
    none = "none"
    double_row = "double_row"


class nc_version(enum.Enum):  # noqa: N801
    gen2 = 2
    gen3 = 3
    gen4 = 4


def get_nc_version() -> nc_version:
    """NeuronCore generation of the simulated target (trn2: gen3, trn3: gen4)."""
    from .simulator import _stack, resolve_target

    t = _stack[-1].target if _stack else resolve_target()
    return {"trn2": nc_version.gen3, "trn3": nc_version.gen4}.get(t.name, nc_version.gen3)


# ---- helpers --------------------------------------------------------------------------------
def _engine_name(e: Any, default: str) -> str:
    if e is None:
        return default
    if isinstance(e, engine):
        e = e.value
    e = str(e)
    return default if e in ("unknown", "") else e


def _op(instr: str, op: Any, what: str = "op") -> mathops.Op:
    o = mathops.lookup(op)
    if o is None:
        raise NKIRuleError("unsupported", instr, f"{what}={op!r} is not a supported operator")
    return o


def _read(x: Any, instr: str, mask: np.ndarray | None = None) -> Any:
    if _is_tile(x):
        return x.read(instr, mask if mask is not None and mask.shape == tuple(x.shape) else None)
    return x


def _vector_operand(instr: str, x: Any, p: int, what: str) -> Any:
    """A scalar or one value per partition (``[P, 1]``), as something that broadcasts."""
    if not _is_tile(x):
        if isinstance(x, (np.ndarray, list)) and np.size(x) != 1:
            raise NKIRuleError("operand-shape", instr, f"{what} must be a scalar or a [P, 1] tile")
        return x
    _check_compute_operand(instr, x, what)
    if not (x.partition_size in (p, 1) and x.free_size == 1):
        raise NKIRuleError(
            "operand-shape",
            instr,
            f"{what} {x.name}{list(x.shape)} must be a scalar or one value per partition ([{p}, 1])",
        )
    v = x.read(instr).reshape(x.partition_size, *([1] * 1))
    return v


def _bcast_vec(v: Any, ndim: int) -> Any:
    if isinstance(v, np.ndarray) and v.ndim >= 1 and ndim > 2:
        return v.reshape(v.shape[0], *([1] * (ndim - 1)))
    return v


def _same_shape(instr: str, dst: NkiTensor, *xs: Any) -> None:
    for x in xs:
        if _is_tile(x):
            if not (x.size == dst.size
                and (tuple(x.shape) == tuple(dst.shape) or x.partition_size == dst.partition_size)):
                raise NKIRuleError(
                    "shape-mismatch",
                    instr,
                    f"operand {x.name}{list(x.shape)} and destination {dst.name}{list(dst.shape)} differ",
                )


def _as_dst_shape(vals: Any, dst: NkiTensor) -> Any:
    a = np.asarray(vals)
    if a.shape != tuple(dst.shape) and a.size == dst.size:
        return a.reshape(dst.shape)
    return a


def _psum_flags_reset(t: Any) -> None:
    """Reading a PSUM tile with another engine closes its matmul accumulation group."""
    if _is_tile(t) and t.buffer is MemoryRegion.psum and t._buf.acc_open is not None:
        if t._adv is None:
            t._buf.acc_open[t._np_basic_key()] = False


def _issue(
    instr: str,
    eng: str,
    secs: float,
    reads: list[Any],
    dst: NkiTensor | list[NkiTensor],
    flops: float = 0.0,
) -> None:
    writes = dst if isinstance(dst, list) else [dst]
    if eng == "gpsimd":
        for t in (*reads, *writes):
            if _is_tile(t) and t.buffer is MemoryRegion.psum:
                raise NKIRuleError(
                    "gpsimd-psum",
                    instr,
                    f"{t.name}{list(t.shape)} is in PSUM; the GpSimd Engine reads and writes SBUF only "
                    "(use the Vector or Scalar Engine, or copy the tile to SBUF first)",
                )
    for r in reads:
        if eng != "tensor":
            _psum_flags_reset(r)
    current().issue(
        instr, eng, secs, reads=[r for r in reads if _is_tile(r)], writes=writes, flops=flops
    )


def _elementwise_seconds(eng: str, free: int, inputs: int = 1) -> float:
    t = current().target
    if eng == "scalar":
        return scalar_seconds(t, free)
    if eng == "gpsimd":
        return gpsimd_seconds(t, free * inputs)
    return vector_seconds(t, *([free] * builtins.max(inputs, 1)))


# ---- Tensor Engine --------------------------------------------------------------------------
def nc_matmul(
    dst: NkiTensor,
    stationary: NkiTensor,
    moving: NkiTensor,
    is_stationary_onezero: bool = False,
    is_moving_onezero: bool = False,
    is_transpose: bool = False,
    accumulate: bool | None = None,
    tile_position: Any = (),
    tile_size: Any = (),
    perf_mode: Any = None,
    name: str | None = None,
    *,
    mask: Any = None,
) -> None:
    """``dst (PSUM, fp32) = stationary.T @ moving``. ``accumulate=None`` overwrites the first
    time a PSUM location is written in an accumulation group and adds afterwards; a group
    closes when another engine reads the tile."""
    instr = "nisa.nc_matmul"
    check_matmul(instr, stationary, moving, dst)
    k, m = stationary.shape
    s = np.asarray(stationary.read(instr), dtype=np.float32)
    mv = np.asarray(moving.read(instr), dtype=np.float32).reshape(k, -1)
    n = mv.shape[1]
    if is_transpose:
        res = mv.T @ s  # with an identity stationary: the transpose of moving
        out_shape = (n, m)
    else:
        res = s.T @ mv
        out_shape = (m,) + tuple(moving.shape[1:])
    if tuple(dst.shape) != out_shape and dst.size != math.prod(out_shape):
        raise NKIRuleError(
            "shape-mismatch",
            instr,
            f"destination {dst.name}{list(dst.shape)} does not hold the {list(out_shape)} result "
            f"of stationary {list(stationary.shape)}.T @ moving {list(moving.shape)}",
        )
    res = res.reshape(dst.shape)
    msk = _mask_array(mask, tuple(dst.shape))
    flags = dst._buf.acc_open
    reads = [stationary, moving]
    if accumulate is None and flags is not None and dst._adv is None:
        key = dst._np_basic_key()
        open_ = flags[key]
        if open_.all():
            reads.append(dst)
            vals = dst.read(instr) + res
        elif not open_.any():
            vals = res
        else:
            reads.append(dst)
            vals = np.where(open_, dst.read(instr) + res, res)
        flags[key] = True
    elif accumulate:
        vals = dst.read(instr) + res
        reads.append(dst)
    else:
        vals = res
        if flags is not None and dst._adv is None:
            flags[dst._np_basic_key()] = True
    t = current().target
    secs = matmul_seconds(t, n, matmul_family(stationary, moving))
    current().issue(instr, "tensor", secs, reads=reads, writes=[dst], flops=2.0 * k * m * n)
    dst.write(vals, instr, msk)


def nc_transpose(
    dst: NkiTensor,
    data: NkiTensor,
    engine: Any = None,
    name: str | None = None,
    *,
    mask: Any = None,
) -> None:
    """``dst = data.T`` for a 2-D tile: Tensor Engine (<= 128 x 128, into PSUM) or Vector
    Engine (<= 32 x 32)."""
    instr = "nisa.nc_transpose"
    _check_compute_operand(instr, data, "data")
    _check_compute_operand(instr, dst, "destination")
    check(data.ndim == 2, "transpose-size", instr, f"expects a 2-D tile, got {data.shape}")
    t = current().target
    p, f = data.shape
    eng = _engine_name(engine, "tensor" if dst.buffer is MemoryRegion.psum else "vector")
    if eng == "tensor":
        if not (p <= t.pe_array_rows and f <= t.pe_array_cols):
            raise NKIRuleError(
                "transpose-size",
                instr,
                f"Tensor Engine transposes at most {t.pe_array_rows} x {t.pe_array_cols}, got {list(data.shape)}",
            )
        if data.buffer is not MemoryRegion.sbuf:
            raise NKIRuleError(
                "matmul-operand-buffer",
                instr,
                f"data {data.name} is in {data.buffer.value}; Tensor Engine reads SBUF",
            )
        if dst.buffer is not MemoryRegion.psum:
            raise NKIRuleError(
                "matmul-output-buffer",
                instr,
                f"destination {dst.name} is in {dst.buffer.value}; Tensor Engine writes PSUM",
            )
        secs = matmul_seconds(t, p, _dt.matmul_family(data.dtype))
    else:
        if not (p <= 32 and f <= 32):
            raise NKIRuleError(
                "transpose-size",
                instr,
                f"Vector Engine transposes at most 32 x 32, got {list(data.shape)}",
            )
        secs = vector_seconds(t, f)
    if not (tuple(dst.shape) == (f, p)):
        raise NKIRuleError(
            "shape-mismatch",
            instr,
            f"destination {list(dst.shape)} is not {[f, p]}",
        )
    _issue(instr, eng, secs, [data], dst)
    dst.write(data.read(instr).T, instr, _mask_array(mask, (f, p)))


# ---- Scalar Engine --------------------------------------------------------------------------
def activation(
    dst: NkiTensor,
    op: Any,
    data: NkiTensor,
    bias: Any = None,
    scale: Any = 1.0,
    reduce_op: Any = None,
    reduce_res: NkiTensor | None = None,
    reduce_cmd: Any = reduce_cmd.idle,
    name: str | None = None,
    *,
    mask: Any = None,
) -> None:
    """``dst = op(data * scale + bias)`` on the Scalar Engine; optionally also sum the result
    along the free axes into ``reduce_res`` (one value per partition)."""
    instr = "nisa.activation"
    f = _op(instr, op)
    check(f.unary is not None, "unsupported", instr, f"{f.name} is not an activation function")
    _check_compute_operand(instr, data, "data")
    _check_compute_dst(instr, dst)
    _same_shape(instr, dst, data)
    p = data.partition_size
    msk = _mask_array(mask, tuple(data.shape))
    x = np.asarray(_read(data, instr, msk), dtype=np.float32)
    sc = _bcast_vec(_vector_operand(instr, scale, p, "scale"), x.ndim)
    reads: list[Any] = [data]
    if bias is not None:
        b = _bcast_vec(_vector_operand(instr, bias, p, "bias"), x.ndim)
        reads.append(bias)
    else:
        b = 0.0
    if _is_tile(scale):
        reads.append(scale)
    y = f.unary(x * sc + b)
    targets = [dst]
    if reduce_res is not None or reduce_op is not None:
        r_op = _op(instr, reduce_op or "add", "reduce_op")
        red = r_op.reduce(y.reshape(p, -1), axis=1, keepdims=False).astype(np.float32)
        launch = current()
        regs_key = (launch.core, "act")
        cmd = reduce_cmd if isinstance(reduce_cmd, _ReduceCmd) else _ReduceCmd.idle
        regs = launch.reduce_regs.get(regs_key, np.zeros(p, np.float32))
        if cmd is _ReduceCmd.reduce and regs.shape[0] == p:
            regs = regs + red
        elif cmd is _ReduceCmd.reset:
            regs = np.zeros(p, np.float32)
        else:
            regs = red
        launch.reduce_regs[regs_key] = regs
        if reduce_res is not None:
            _check_compute_dst(instr, reduce_res)
            if not (reduce_res.partition_size == p and reduce_res.free_size == 1):
                raise NKIRuleError(
                    "operand-shape",
                    instr,
                    f"reduce_res {reduce_res.name}{list(reduce_res.shape)} must be [{p}, 1]",
                )
            targets.append(reduce_res)
    secs = scalar_seconds(current().target, data.free_size, reduce=reduce_res is not None)
    _issue(instr, "scalar", secs, reads, targets)
    dst.write(_as_dst_shape(y, dst), instr, msk)
    if reduce_res is not None:
        reduce_res.write(regs.reshape(reduce_res.shape), instr)


def activation_reduce(
    dst: NkiTensor,
    op: Any,
    data: NkiTensor,
    reduce_op: Any,
    reduce_res: NkiTensor,
    bias: Any = None,
    scale: Any = 1.0,
    name: str | None = None,
    *,
    mask: Any = None,
) -> None:
    """``activation`` plus a free-axis reduction of its result into ``reduce_res``."""
    activation(
        dst,
        op,
        data,
        bias=bias,
        scale=scale,
        reduce_op=reduce_op,
        reduce_res=reduce_res,
        reduce_cmd=reduce_cmd.reset_reduce,
        mask=mask,
    )


# ---- Vector Engine --------------------------------------------------------------------------
def tensor_tensor(
    dst: NkiTensor,
    data1: NkiTensor,
    data2: NkiTensor,
    op: Any,
    engine: Any = None,
    name: str | None = None,
    *,
    mask: Any = None,
) -> None:
    """``dst = op(data1, data2)`` element-wise (Vector Engine, or GpSimd)."""
    instr = "nisa.tensor_tensor"
    o = _op(instr, op)
    check(o.binary is not None, "unsupported", instr, f"{o.name} is not a binary operator")
    for x, w in ((data1, "data1"), (data2, "data2")):
        check(_is_tile(x), "operand-shape", instr, f"{w} must be a tile")
        _check_compute_operand(instr, x, w)
    _check_compute_dst(instr, dst)
    check_bitvec(instr, o.name, data1, data2, dst)
    _same_shape(instr, dst, data1, data2)
    if not (tuple(data1.shape) == tuple(data2.shape)):
        raise NKIRuleError(
            "shape-mismatch",
            instr,
            f"data1 {list(data1.shape)} and data2 {list(data2.shape)} differ",
        )
    msk = _mask_array(mask, tuple(dst.shape))
    vals = o.binary(_read(data1, instr, msk), _read(data2, instr, msk))
    eng = _engine_name(engine, "vector")
    _issue(instr, eng, _elementwise_seconds(eng, data1.free_size, 2), [data1, data2], dst)
    dst.write(_as_dst_shape(vals, dst), instr, msk)


def _apply_scalar(o: mathops.Op, x: Any, operand: Any, reverse: bool) -> Any:
    return o.binary(operand, x) if reverse else o.binary(x, operand)


def tensor_scalar(
    dst: NkiTensor,
    data: NkiTensor,
    op0: Any,
    operand0: Any,
    reverse0: bool = False,
    op1: Any = None,
    operand1: Any = None,
    reverse1: bool = False,
    engine: Any = None,
    name: str | None = None,
    *,
    mask: Any = None,
) -> None:
    """``dst = (data op0 operand0) op1 operand1`` with scalar or ``[P, 1]`` operands."""
    instr = "nisa.tensor_scalar"
    _check_compute_operand(instr, data, "data")
    _check_compute_dst(instr, dst)
    _same_shape(instr, dst, data)
    p = data.partition_size
    msk = _mask_array(mask, tuple(data.shape))
    x = _read(data, instr, msk)
    o0 = _op(instr, op0, "op0")
    check_bitvec(instr, o0.name, data, dst)
    v0 = _bcast_vec(_vector_operand(instr, operand0, p, "operand0"), x.ndim)
    y = _apply_scalar(o0, x, v0, reverse0)
    reads: list[Any] = [data, operand0]
    o1 = mathops.lookup(op1)
    if o1 is not None:
        v1 = _bcast_vec(_vector_operand(instr, operand1, p, "operand1"), x.ndim)
        y = _apply_scalar(o1, y, v1, reverse1)
        reads.append(operand1)
    eng = _engine_name(engine, "vector")
    _issue(instr, eng, _elementwise_seconds(eng, data.free_size), reads, dst)
    dst.write(_as_dst_shape(y, dst), instr, msk)


def scalar_tensor_tensor(
    dst: NkiTensor,
    data: NkiTensor,
    op0: Any,
    operand0: Any,
    op1: Any,
    operand1: NkiTensor,
    reverse0: bool = False,
    reverse1: bool = False,
    name: str | None = None,
    *,
    mask: Any = None,
) -> None:
    """``dst = (data op0 operand0) op1 operand1``; ``operand1`` is a full tile."""
    instr = "nisa.scalar_tensor_tensor"
    _check_compute_operand(instr, data, "data")
    _check_compute_operand(instr, operand1, "operand1")
    _check_compute_dst(instr, dst)
    _same_shape(instr, dst, data, operand1)
    p = data.partition_size
    msk = _mask_array(mask, tuple(data.shape))
    x = _read(data, instr, msk)
    v0 = _bcast_vec(_vector_operand(instr, operand0, p, "operand0"), x.ndim)
    y = _apply_scalar(_op(instr, op0, "op0"), x, v0, reverse0)
    y = _apply_scalar(_op(instr, op1, "op1"), y, _read(operand1, instr, msk), reverse1)
    _issue(
        instr,
        "vector",
        _elementwise_seconds("vector", data.free_size, 2),
        [data, operand0, operand1],
        dst,
    )
    dst.write(_as_dst_shape(y, dst), instr, msk)


def tensor_reduce(
    dst: NkiTensor,
    op: Any,
    data: NkiTensor,
    axis: Any,
    negate: bool = False,
    keepdims: bool = False,
    name: str | None = None,
    *,
    mask: Any = None,
) -> None:
    """Reduce ``data`` with ``op`` over trailing free ``axis`` into ``dst``."""
    instr = "nisa.tensor_reduce"
    o = _op(instr, op)
    _check_compute_operand(instr, data, "data")
    _check_compute_dst(instr, dst)
    axes = reduce_axes(instr, data.ndim, axis)
    msk = _mask_array(mask, tuple(data.shape))
    x = _read(data, instr, msk)
    r = o.reduce(np.asarray(x), axis=axes, keepdims=keepdims)
    if negate:
        r = -r
    check(
        r.size == dst.size and r.shape[0] == dst.partition_size,
        "shape-mismatch",
        instr,
        f"destination {dst.name}{list(dst.shape)} does not hold the {list(r.shape)} result",
    )
    _issue(instr, "vector", _elementwise_seconds("vector", data.free_size), [data], dst)
    dst.write(_as_dst_shape(r, dst), instr)


def tensor_partition_reduce(
    dst: NkiTensor, op: Any, data: NkiTensor, name: str | None = None, *, mask: Any = None
) -> None:
    """Reduce ``data`` across partitions into a ``[1, F]`` tile (GpSimd Engine)."""
    instr = "nisa.tensor_partition_reduce"
    o = _op(instr, op)
    _check_compute_operand(instr, data, "data")
    _check_compute_dst(instr, dst)
    r = o.reduce(np.asarray(data.read(instr)), axis=0, keepdims=True)
    check(
        r.size == dst.size,
        "shape-mismatch",
        instr,
        f"destination {list(dst.shape)} is not {list(r.shape)}",
    )
    secs = gpsimd_seconds(current().target, data.free_size + data.partition_size)
    _issue(instr, "gpsimd", secs, [data], dst)
    dst.write(_as_dst_shape(r, dst), instr)


def tensor_scalar_reduce(
    dst: NkiTensor,
    data: NkiTensor,
    op0: Any,
    operand0: Any,
    reduce_op: Any,
    reduce_res: NkiTensor,
    reverse0: bool = False,
    name: str | None = None,
    *,
    mask: Any = None,
    **_: Any,
) -> None:
    """``dst = data op0 operand0`` and ``reduce_res = reduce_op(dst)`` over the free axes."""
    instr = "nisa.tensor_scalar_reduce"
    _check_compute_operand(instr, data, "data")
    _check_compute_dst(instr, dst)
    _check_compute_dst(instr, reduce_res)
    p = data.partition_size
    x = data.read(instr)
    y = _apply_scalar(
        _op(instr, op0),
        x,
        _bcast_vec(_vector_operand(instr, operand0, p, "operand0"), x.ndim),
        reverse0,
    )
    red = _op(instr, reduce_op, "reduce_op").reduce(
        np.asarray(y).reshape(p, -1), axis=1, keepdims=True
    )
    check(
        reduce_res.partition_size == p and reduce_res.free_size == 1,
        "operand-shape",
        instr,
        f"reduce_res {reduce_res.name}{list(reduce_res.shape)} must be [{p}, 1]",
    )
    _issue(
        instr,
        "vector",
        _elementwise_seconds("vector", data.free_size),
        [data, operand0],
        [dst, reduce_res],
    )
    dst.write(_as_dst_shape(y, dst), instr)
    reduce_res.write(red.reshape(reduce_res.shape), instr)


def tensor_copy(
    dst: NkiTensor, src: NkiTensor, engine: Any = None, name: str | None = None, *, mask: Any = None
) -> None:
    """Copy ``src`` into ``dst`` on-chip, casting to ``dst.dtype`` (e.g. PSUM -> SBUF)."""
    instr = "nisa.tensor_copy"
    _check_compute_operand(instr, src, "src")
    _check_compute_dst(instr, dst)
    _same_shape(instr, dst, src)
    msk = _mask_array(mask, tuple(dst.shape))
    eng = _engine_name(engine, "vector")
    _issue(instr, eng, _elementwise_seconds(eng, src.free_size), [src], dst)
    dst.write(_as_dst_shape(_read(src, instr, msk), dst), instr, msk)


def memset(
    dst: NkiTensor, value: Any, engine: Any = None, name: str | None = None, *, mask: Any = None
) -> None:
    """Fill ``dst`` with ``value``."""
    instr = "nisa.memset"
    _check_compute_dst(instr, dst)
    eng = _engine_name(engine, "vector")
    _issue(instr, eng, _elementwise_seconds(eng, dst.free_size), [], dst)
    dst.write(value, instr, _mask_array(mask, tuple(dst.shape)))


def reciprocal(
    dst: NkiTensor, data: NkiTensor, name: str | None = None, *, mask: Any = None
) -> None:
    """``dst = 1 / data`` (Vector Engine)."""
    instr = "nisa.reciprocal"
    _check_compute_operand(instr, data, "data")
    _check_compute_dst(instr, dst)
    _same_shape(instr, dst, data)
    msk = _mask_array(mask, tuple(dst.shape))
    with np.errstate(all="ignore"):
        y = 1.0 / np.asarray(_read(data, instr, msk), dtype=np.float32)
    _issue(instr, "vector", _elementwise_seconds("vector", data.free_size), [data], dst)
    dst.write(_as_dst_shape(y, dst), instr, msk)


def bn_stats(dst: NkiTensor, data: NkiTensor, name: str | None = None, *, mask: Any = None) -> None:
    """Per-partition (count, mean, variance*count) of the even and the odd elements of
    ``data`` -> ``dst[P, 6]``; aggregate with :func:`bn_aggr`."""
    instr = "nisa.bn_stats"
    t = current().target
    _check_compute_operand(instr, data, "data")
    _check_compute_dst(instr, dst)
    check(
        data.free_size <= t.bn_stats_fmax,
        "bn-stats-size",
        instr,
        f"data {data.name}{list(data.shape)} has {data.free_size} elements per partition; "
        f"bn_stats reads at most {t.bn_stats_fmax}",
    )
    p = data.partition_size
    check(
        dst.partition_size == p and dst.free_size == 6,
        "shape-mismatch",
        instr,
        f"destination must be [{p}, 6], got {list(dst.shape)}",
    )
    x = np.asarray(data.read(instr), dtype=np.float64).reshape(p, -1)
    out = np.zeros((p, 6))
    for j, part in enumerate((x[:, 0::2], x[:, 1::2])):
        n = part.shape[1]
        mean = part.mean(axis=1) if n else np.zeros(p)
        m2 = ((part - mean[:, None]) ** 2).sum(axis=1) if n else np.zeros(p)
        out[:, 3 * j : 3 * j + 3] = np.stack([np.full(p, n), mean, m2], axis=1)
    _issue(instr, "vector", _elementwise_seconds("vector", data.free_size), [data], dst)
    dst.write(out.reshape(dst.shape), instr)


def bn_aggr(dst: NkiTensor, data: NkiTensor, name: str | None = None, *, mask: Any = None) -> None:
    """Combine ``bn_stats`` outputs ``[P, 6k]`` into ``dst[P, 2]`` = (mean, variance)."""
    instr = "nisa.bn_aggr"
    _check_compute_operand(instr, data, "data")
    _check_compute_dst(instr, dst)
    p = data.partition_size
    check(
        data.free_size % 3 == 0,
        "shape-mismatch",
        instr,
        f"data free size {data.free_size} is not a multiple of 3",
    )
    check(
        dst.partition_size == p and dst.free_size == 2,
        "shape-mismatch",
        instr,
        f"destination must be [{p}, 2], got {list(dst.shape)}",
    )
    g = np.asarray(data.read(instr), dtype=np.float64).reshape(p, -1, 3)
    cnt, mean, m2 = g[..., 0], g[..., 1], g[..., 2]
    total = cnt.sum(axis=1)
    with np.errstate(all="ignore"):
        mu = (cnt * mean).sum(axis=1) / total
        var = (m2 + cnt * (mean - mu[:, None]) ** 2).sum(axis=1) / total
    _issue(instr, "vector", _elementwise_seconds("vector", data.free_size), [data], dst)
    dst.write(np.stack([mu, var], axis=1).reshape(dst.shape), instr)


# ---- GpSimd Engine --------------------------------------------------------------------------
def _pattern_values(
    instr: str, dst: NkiTensor, pattern: Any, offset: Any, channel_multiplier: Any
) -> np.ndarray:
    pat = [list(map(int, pr)) for pr in pattern]
    nums = [n for _, n in pat]
    check(
        math.prod(nums) == dst.free_size,
        "shape-mismatch",
        instr,
        f"pattern {pat} makes {math.prod(nums)} elements per partition but {dst.name}{list(dst.shape)} holds {dst.free_size}",
    )
    val = np.zeros(nums, dtype=np.int64)
    for axis, (step, n) in enumerate(pat):
        shape = [1] * len(pat)
        shape[axis] = n
        val = val + step * np.arange(n).reshape(shape)
    p = dst.partition_size
    chan = int(channel_multiplier) * np.arange(p).reshape(p, *([1] * len(pat)))
    full = int(offset) + chan + val[None]
    return full.reshape(dst.shape)


def iota(
    dst: NkiTensor,
    pattern: Any,
    offset: Any = 0,
    channel_multiplier: Any = 0,
    name: str | None = None,
    *,
    mask: Any = None,
) -> None:
    """``dst[c, i...] = offset + c * channel_multiplier + sum(i_k * step_k)`` over
    ``pattern = [[step, num], ...]`` (GpSimd Engine)."""
    instr = "nisa.iota"
    _check_compute_dst(instr, dst)
    vals = _pattern_values(instr, dst, pattern, offset, channel_multiplier)
    _issue(instr, "gpsimd", gpsimd_seconds(current().target, dst.free_size), [], dst)
    dst.write(vals, instr, _mask_array(mask, tuple(dst.shape)))


def affine_select(
    dst: NkiTensor,
    pattern: Any,
    *args: Any,
    name: str | None = None,
    mask: Any = None,
    **kwargs: Any,
) -> None:
    """``dst = on_true_tile`` where ``cmp_op(affine_value, 0)`` holds, else ``on_false_value``;
    ``affine_value = offset + channel * channel_multiplier + sum(i_k * step_k)`` (GpSimd).

    Accepts the NKI 0.3 order ``(dst, pattern, channel_multiplier, on_true_tile,
    on_false_value, cmp_op=nl.equal, offset=0)`` and the earlier
    ``(dst, pattern, offset, channel_multiplier, on_true_tile, on_false_value, cmp_op)``."""
    instr = "nisa.affine_select"
    names_new = ["channel_multiplier", "on_true_tile", "on_false_value", "cmp_op"]
    names_old = ["offset", "channel_multiplier", "on_true_tile", "on_false_value", "cmp_op"]
    old = len(args) >= 4 and not _is_tile(args[1]) and _is_tile(args[2])
    bound = dict(zip(names_old if old else names_new, args, strict=False))
    for k, v in kwargs.items():
        check(k not in bound, "launch", instr, f"argument {k} given twice")
        bound[k] = v
    on_true = bound.get("on_true_tile")
    check(_is_tile(on_true), "operand-shape", instr, "on_true_tile must be a tile")
    _check_compute_operand(instr, on_true, "on_true_tile")
    _check_compute_dst(instr, dst)
    _same_shape(instr, dst, on_true)
    vals = _pattern_values(
        instr, dst, pattern, bound.get("offset", 0), bound.get("channel_multiplier", 0)
    )
    cmp = _op(instr, bound.get("cmp_op", "equal"), "cmp_op")
    pred = np.asarray(cmp.binary(vals, 0)) != 0
    y = np.where(
        pred, on_true.read(instr).reshape(dst.shape), np.float32(bound.get("on_false_value", 0.0))
    )
    _issue(instr, "gpsimd", gpsimd_seconds(current().target, dst.free_size), [on_true], dst)
    dst.write(y, instr, _mask_array(mask, tuple(dst.shape)))


def max8(dst: NkiTensor, src: NkiTensor, name: str | None = None, *, mask: Any = None) -> None:
    """The 8 largest values of each partition, in descending order (Vector Engine)."""
    instr = "nisa.max8"
    _check_compute_operand(instr, src, "src")
    _check_compute_dst(instr, dst)
    p = src.partition_size
    check(
        dst.partition_size == p and dst.free_size == 8,
        "shape-mismatch",
        instr,
        f"destination must be [{p}, 8]",
    )
    x = np.asarray(src.read(instr)).reshape(p, -1)
    top = -np.sort(-x, axis=1)[:, :8]
    _issue(instr, "vector", _elementwise_seconds("vector", src.free_size), [src], dst)
    dst.write(top.reshape(dst.shape), instr)


def nc_find_index8(
    dst: NkiTensor, data: NkiTensor, vals: NkiTensor, name: str | None = None, *, mask: Any = None
) -> None:
    """For each of 8 values per partition, the index of its first occurrence in ``data``."""
    instr = "nisa.nc_find_index8"
    _check_compute_operand(instr, data, "data")
    _check_compute_operand(instr, vals, "vals")
    _check_compute_dst(instr, dst)
    p = data.partition_size
    x = np.asarray(data.read(instr)).reshape(p, -1)
    v = np.asarray(vals.read(instr)).reshape(p, -1)[:, :8]
    idx = np.argmax(x[:, None, :] == v[:, :, None], axis=2)
    _issue(instr, "vector", _elementwise_seconds("vector", data.free_size), [data, vals], dst)
    dst.write(idx.reshape(dst.shape), instr)


# ---- DMA ------------------------------------------------------------------------------------
def dma_copy(
    dst: NkiTensor,
    src: NkiTensor,
    dst_rmw_op: Any = None,
    oob_mode: Any = None,
    dge_mode: Any = None,
    name: str | None = None,
    *,
    mask: Any = None,
    **_: Any,
) -> None:
    """Copy ``src`` to ``dst`` on a DMA queue (HBM <-> SBUF, SBUF <-> SBUF, HBM <-> HBM)."""
    check(_is_tile(dst), "dma-buffer", "nisa.dma_copy", "dst must be a tensor")
    skip = getattr(oob_mode, "value", oob_mode) == "skip"
    _dma("nisa.dma_copy", dst, src, mask, rmw=dst_rmw_op, oob_skip=skip)


def dma_transpose(
    dst: NkiTensor, src: NkiTensor, axes: Any = None, name: str | None = None, **_: Any
) -> None:
    """Copy ``src`` into ``dst`` with its two axes swapped, on a DMA queue."""
    instr = "nisa.dma_transpose"
    check(src.ndim == 2, "shape-mismatch", instr, f"expects a 2-D source, got {src.shape}")
    check(
        tuple(dst.shape) == (src.shape[1], src.shape[0]),
        "shape-mismatch",
        instr,
        f"destination {list(dst.shape)} is not the transpose of {list(src.shape)}",
    )
    check(
        src.buffer is not MemoryRegion.psum and dst.buffer is not MemoryRegion.psum,
        "dma-buffer",
        instr,
        "DMA cannot read or write PSUM",
    )
    from .timing import dma_seconds

    launch = current()
    launch.issue(
        instr,
        "dma",
        dma_seconds(launch.target, src.nbytes),
        reads=[src],
        writes=[dst],
        nbytes=src.nbytes,
    )
    dst.write(src.read(instr).T, instr)
