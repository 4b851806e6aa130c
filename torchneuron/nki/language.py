"""``nki.language`` (``nl``): tensors, memory, loops, SPMD ids and tile-level math.

Functions here return new tiles (in SBUF unless stated), like NKI's ``nki.language``
convenience API and the legacy ``neuronxcc.nki.language``; each one is charged to the engine
that would run it (Scalar Engine for activation functions, Vector Engine for arithmetic and
reductions, Tensor Engine for ``matmul``/``transpose``, DMA queues for ``load``/``store``).
Legacy indexing helpers (``arange``, ``mgrid``, ``par_dim``, ``mask=``) are here too.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from torchneuron.runtime.target import target_from_env

from . import dtypes as _dt
from . import mathops
from .dtypes import (  # noqa: F401 - re-exported NKI dtypes
    bfloat16,
    bool_,
    float8_e4m3,
    float8_e4m3fn,
    float8_e5m2,
    float16,
    float32,
    int8,
    int16,
    int32,
    int64,
    tfloat32,
    uint8,
    uint16,
    uint32,
    uint64,
)
from .rules import NKIRuleError, check
from .simulator import current
from .tiles import MemoryRegion, NkiTensor, normalize_region, par_dim, parse_shape  # noqa: F401
from .timing import dma_seconds, matmul_seconds, scalar_seconds, vector_seconds

sbuf = MemoryRegion.sbuf
psum = MemoryRegion.psum
hbm = MemoryRegion.hbm
private_hbm = MemoryRegion.private_hbm
shared_hbm = MemoryRegion.shared_hbm

tensor = NkiTensor  # the NKI tensor type (``nl.ndarray`` returns one; also a type annotation)
tile = NkiTensor


class NKIObject:
    """Base class NKI kernels may derive their configuration dataclasses from."""


class _TileSize:
    """``nl.tile_size``: hardware tile limits of the active target."""

    @property
    def _t(self):  # noqa: ANN202
        from .simulator import _stack

        return _stack[-1].target if _stack else target_from_env()

    @property
    def pmax(self) -> int:
        return self._t.sbuf_partitions

    @property
    def psum_fmax(self) -> int:
        return self._t.psum_bank_bytes_per_partition // 4

    @property
    def gemm_stationary_fmax(self) -> int:
        return self._t.pe_array_cols

    @property
    def gemm_moving_fmax(self) -> int:
        return self._t.matmul_moving_fmax

    @property
    def bn_stats_fmax(self) -> int:
        return self._t.bn_stats_fmax

    @property
    def psum_min_align(self) -> int:
        return 4

    @property
    def sbuf_min_align(self) -> int:
        return 1

    @property
    def total_available_sbuf_size(self) -> int:
        return self._t.sbuf_bytes_per_partition_for_kernels


tile_size = _TileSize()


# ---- SPMD -----------------------------------------------------------------------------------
def program_id(axis: int = 0) -> int:
    """Index of the running program along grid ``axis``."""
    launch = current()
    check(
        0 <= axis < len(launch.grid) or (axis == 0 and not launch.grid),
        "launch",
        "nl.program_id",
        f"axis {axis} is out of range for a launch grid of {len(launch.grid)} dimension(s)",
    )
    return launch.program[axis] if launch.grid else 0


def num_programs(axes: int | tuple[int, ...] | None = None) -> int:
    """Number of programs along ``axes`` (all of the grid when ``None``)."""
    launch = current()
    grid = launch.grid or (1,)
    if axes is None:
        return math.prod(grid)
    if isinstance(axes, int):
        axes = (axes,)
    for a in axes:
        check(
            0 <= a < len(grid),
            "launch",
            "nl.num_programs",
            f"axis {a} out of range for grid {grid}",
        )
    return math.prod(grid[a] for a in axes)


def program_ndim() -> int:
    return len(current().grid)


def nc(n: int) -> int:
    """Legacy ``nl.nc(2)``: spread a grid dimension over the NeuronCores of a logical core."""
    return int(n)


def spmd_dim(*sizes: int) -> int:
    return math.prod(int(s) for s in sizes)


# ---- loops ----------------------------------------------------------------------------------
def _range(*args: Any, **_: Any) -> range:
    return builtins.range(*(int(a) for a in args))


def affine_range(*args: Any, **kwargs: Any) -> range:
    """Loop whose iterations are independent (the compiler may pipeline them)."""
    return _range(*args, **kwargs)


def sequential_range(*args: Any, **kwargs: Any) -> range:
    """Loop with a carried dependency between iterations."""
    return _range(*args, **kwargs)


def static_range(*args: Any, **kwargs: Any) -> range:
    """Loop unrolled at compile time."""
    return _range(*args, **kwargs)


# ---- legacy indexing ------------------------------------------------------------------------
def arange(*args: Any) -> np.ndarray:
    """Legacy index vector: ``nl.arange(128)[:, None]`` selects 128 partitions."""
    return np.arange(*args, dtype=np.int64)


mgrid = np.mgrid  # ``i_p, i_f = nl.mgrid[0:128, 0:512]``
ogrid = np.ogrid


def ds(start: int, size: int) -> slice:
    """Dynamic slice ``start:start+size``."""
    return slice(int(start), int(start) + int(size))


# ---- creation -------------------------------------------------------------------------------
def _new(
    shape: Any,
    dtype: Any,
    buffer: Any = sbuf,
    name: str = "",
    instruction: str = "nl.ndarray",
) -> NkiTensor:
    shp, pdim = parse_shape(shape)
    region = normalize_region(buffer)
    buf = current().allocate(
        shp, _dt.normalize(dtype), region, name=name, pdim=pdim, instruction=instruction
    )
    return NkiTensor(buf)


def ndarray(
    shape: Any, dtype: Any, buffer: Any = sbuf, name: str = "", address: Any = None, **_: Any
) -> NkiTensor:
    """Allocate an uninitialised tensor (filled with NaN so reads before writes show)."""
    return _new(shape, dtype, buffer, name)


def empty_like(
    x: NkiTensor, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any
) -> NkiTensor:
    return _new(x.shape, dtype or x.dtype, buffer or x.buffer, name)


def full(
    shape: Any, fill_value: Any, dtype: Any = float32, buffer: Any = sbuf, name: str = "", **_: Any
) -> NkiTensor:
    """Allocate a tensor filled with ``fill_value`` (a memset on the Vector Engine, or a DMA
    for HBM tensors)."""
    t = _new(shape, dtype, buffer, name, "nl.full")
    launch = current()
    if t.buffer.on_chip:
        launch.issue("nl.full", "vector", vector_seconds(launch.target, t.free_size), writes=[t])
    else:
        launch.issue(
            "nl.full", "dma", dma_seconds(launch.target, t.nbytes), writes=[t], nbytes=t.nbytes
        )
    t.write(fill_value, "nl.full")
    return t


def zeros(
    shape: Any, dtype: Any = float32, buffer: Any = sbuf, name: str = "", **kw: Any
) -> NkiTensor:
    return full(shape, 0, dtype, buffer, name, **kw)


def ones(
    shape: Any, dtype: Any = float32, buffer: Any = sbuf, name: str = "", **kw: Any
) -> NkiTensor:
    return full(shape, 1, dtype, buffer, name, **kw)


def zeros_like(
    x: NkiTensor, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any
) -> NkiTensor:
    return full(x.shape, 0, dtype or x.dtype, buffer or x.buffer, name)


def ones_like(
    x: NkiTensor, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any
) -> NkiTensor:
    return full(x.shape, 1, dtype or x.dtype, buffer or x.buffer, name)


def shared_constant(constant: Any, dtype: Any = None, **_: Any) -> NkiTensor:
    """A constant tensor in HBM built from a numpy array at trace time."""
    arr = np.asarray(constant)
    dt = _dt.normalize(dtype or arr.dtype)
    buf = current().allocate(arr.shape, dt, MemoryRegion.hbm, data=_dt.to_storage(arr, dt).copy())
    return NkiTensor(buf)


def shared_identity_matrix(n: int, dtype: Any = bfloat16, **_: Any) -> NkiTensor:
    """An ``n x n`` identity matrix in SBUF (for Tensor Engine transposes)."""
    t = _new((n, n), dtype, sbuf, "identity", "nl.shared_identity_matrix")
    launch = current()
    launch.issue("nisa.iota", "gpsimd", vector_seconds(launch.target, n), writes=[t])
    t.write(np.eye(n), "nl.shared_identity_matrix")
    return t


# ---- operand helpers ------------------------------------------------------------------------
def _is_tile(x: Any) -> bool:
    return isinstance(x, NkiTensor)


def _check_compute_operand(instr: str, x: Any, what: str = "operand") -> None:
    if not _is_tile(x):
        return
    if not (x.buffer.on_chip):
        raise NKIRuleError(
            "compute-on-hbm",
            instr,
            f"{what} {x.name}{list(x.shape)} is in {x.buffer.value}; compute engines only read "
            "SBUF/PSUM -- load it with nl.load / nisa.dma_copy first",
        )
    pmax = current().target.sbuf_partitions
    if not (x.partition_size <= pmax):
        raise NKIRuleError(
            "partition-dim-limit",
            instr,
            f"{what} {x.name}{list(x.shape)} spans {x.partition_size} partitions; the limit is {pmax}",
        )


def _check_compute_dst(instr: str, dst: NkiTensor) -> None:
    _check_compute_operand(instr, dst, "destination")
    if dst.buffer is MemoryRegion.psum:
        bank = current().target.psum_bank_bytes_per_partition
        if not (dst.free_bytes <= bank):
            raise NKIRuleError(
                "psum-tile-size",
                instr,
                f"PSUM tile {dst.name}{list(dst.shape)} holds {dst.free_bytes} B per partition; "
                f"a PSUM tile holds at most {bank} B (one bank)",
            )


_BITVEC = {"bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "invert"}


def check_bitvec(instr: str, opname: str, *xs: Any) -> None:
    """Bitwise operators work on integer tiles only (the engines treat them as bit patterns)."""
    if opname not in _BITVEC:
        return
    for x in xs:
        if _is_tile(x) and _dt.is_float(x.dtype):
            raise NKIRuleError(
                "dtype",
                instr,
                f"bitwise operator {opname} needs integer tiles but {x.name} is {_dt.name(x.dtype)}",
            )


def _value(x: Any, instr: str, mask: np.ndarray | None = None, shape: tuple | None = None) -> Any:
    """Operand values in float32/int storage: tiles are read (masked when shapes agree)."""
    if _is_tile(x):
        m = (
            mask
            if (mask is not None and shape is not None and tuple(x.shape) == tuple(shape))
            else None
        )
        return x.read(instr, m)
    if isinstance(x, (np.ndarray, list)):
        return np.asarray(x)
    return x


def _mask_array(mask: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    if mask is None:
        return None
    m = np.asarray(mask)
    if m.dtype != bool:
        m = m != 0
    return np.broadcast_to(m, shape)


def _out_dtype(dtype: Any, *xs: Any) -> Any:
    if dtype is not None:
        return _dt.normalize(dtype)
    tiles = [x.dtype for x in xs if _is_tile(x)]
    return _dt.promote(*tiles) if tiles else float32


def _bshape(instr: str, *xs: Any) -> tuple[int, ...]:
    shapes = [tuple(x.shape) if _is_tile(x) else np.shape(x) for x in xs]
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise NKIRuleError(
            "shape-mismatch", instr, f"operand shapes {shapes} do not broadcast"
        ) from None


def _free(shape: tuple[int, ...]) -> int:
    return math.prod(shape[1:]) if len(shape) > 1 else 1


def _emit(
    instr: str,
    engine: str,
    seconds: float,
    values: Any,
    shape: tuple[int, ...],
    dtype: Any,
    reads: list[Any],
    mask: np.ndarray | None = None,
    buffer: MemoryRegion = sbuf,
    kind: str = "compute",
) -> NkiTensor:
    out = _new(shape, dtype, buffer, instruction=instr)
    current().issue(
        instr, engine, seconds, reads=[r for r in reads if _is_tile(r)], writes=[out], produces=kind
    )
    out.write(np.broadcast_to(values, shape), instr, mask)
    return out


# ---- elementwise math -----------------------------------------------------------------------
def _unary(name: str) -> Callable[..., NkiTensor]:
    op = mathops.lookup(name)
    assert op is not None
    engine = "scalar" if op.kind == "act" else "vector"

    def fn(x: Any, dtype: Any = None, mask: Any = None, **_: Any) -> NkiTensor:
        instr = f"nl.{name}"
        _check_compute_operand(instr, x)
        check_bitvec(instr, op.name, x)
        shape = _bshape(instr, x)
        m = _mask_array(mask, shape)
        vals = op(_value(x, instr, m, shape))
        launch = current()
        secs = (
            scalar_seconds(launch.target, _free(shape))
            if engine == "scalar"
            else vector_seconds(launch.target, _free(shape))
        )
        return _emit(instr, engine, secs, vals, shape, _out_dtype(dtype, x), [x], m)

    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = f"Element-wise ``{name}`` of a tile (Scalar/Vector Engine)."
    fn._nki_op = name  # type: ignore[attr-defined]
    return fn


def _binary(name: str) -> Callable[..., NkiTensor]:
    op = mathops.lookup(name)
    assert op is not None

    def fn(x: Any, y: Any, dtype: Any = None, mask: Any = None, **_: Any) -> NkiTensor:
        instr = f"nl.{name}"
        _check_compute_operand(instr, x)
        _check_compute_operand(instr, y)
        check_bitvec(instr, op.name, x, y)
        shape = _bshape(instr, x, y)
        m = _mask_array(mask, shape)
        vals = op(_value(x, instr, m, shape), _value(y, instr, m, shape))
        n_tiles = builtins.sum(
            1 for v in (x, y) if _is_tile(v) and _free(tuple(v.shape)) > 1
        )  # [P,1] vectors and scalars ride along as tensor_scalar operands
        launch = current()
        secs = vector_seconds(launch.target, *([_free(shape)] * builtins.max(n_tiles, 1)))
        return _emit(instr, "vector", secs, vals, shape, _out_dtype(dtype, x, y), [x, y], m)

    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = f"Element-wise ``{name}`` of two tiles, or a tile and a scalar (Vector Engine)."
    fn._nki_op = name  # type: ignore[attr-defined]
    return fn


exp = _unary("exp")
log = _unary("log")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
relu = _unary("relu")
gelu = _unary("gelu")
gelu_apprx_tanh = _unary("gelu_apprx_tanh")
silu = _unary("silu")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
reciprocal = _unary("reciprocal")
abs = _unary("abs")  # noqa: A001 - NKI name
negative = _unary("negative")
sign = _unary("sign")
square = _unary("square")
sin = _unary("sin")
cos = _unary("cos")
tan = _unary("tan")
arctan = _unary("arctan")
erf = _unary("erf")
softplus = _unary("softplus")
mish = _unary("mish")
floor = _unary("floor")
ceil = _unary("ceil")
trunc = _unary("trunc")
identity = _unary("identity")
logical_not = _unary("logical_not")
invert = _unary("invert")
bitwise_not = invert

add = _binary("add")
subtract = _binary("subtract")
multiply = _binary("multiply")
divide = _binary("divide")
maximum = _binary("maximum")
minimum = _binary("minimum")
power = _binary("power")
mod = _binary("mod")
fmod = _binary("fmod")
abs_max = _binary("abs_max")
abs_min = _binary("abs_min")
equal = _binary("equal")
not_equal = _binary("not_equal")
greater = _binary("greater")
greater_equal = _binary("greater_equal")
less = _binary("less")
less_equal = _binary("less_equal")
logical_and = _binary("logical_and")
logical_or = _binary("logical_or")
logical_xor = _binary("logical_xor")
bitwise_and = _binary("bitwise_and")
bitwise_or = _binary("bitwise_or")
bitwise_xor = _binary("bitwise_xor")
left_shift = _binary("left_shift")
right_shift = _binary("right_shift")


def _bypass(x: Any) -> Any:
    return x


bypass = _bypass  # ``op1=nl.bypass``: no second operator
bypass._nki_op = "bypass"  # type: ignore[attr-defined]


def where(
    condition: Any, x: Any, y: Any, dtype: Any = None, mask: Any = None, **_: Any
) -> NkiTensor:
    """``x`` where ``condition`` is non-zero, else ``y`` (Vector Engine)."""
    instr = "nl.where"
    for v in (condition, x, y):
        _check_compute_operand(instr, v)
    shape = _bshape(instr, condition, x, y)
    m = _mask_array(mask, shape)
    c = np.asarray(_value(condition, instr, m, shape))
    vals = np.where(c != 0, _value(x, instr, m, shape), _value(y, instr, m, shape))
    n = builtins.sum(1 for v in (condition, x, y) if _is_tile(v))
    secs = vector_seconds(current().target, *([_free(shape)] * builtins.max(n, 1)))
    return _emit(instr, "vector", secs, vals, shape, _out_dtype(dtype, x, y), [condition, x, y], m)


def copy(x: Any, dtype: Any = None, mask: Any = None, **_: Any) -> NkiTensor:
    """Copy a tile into a new SBUF tile, casting to ``dtype`` (e.g. PSUM -> SBUF)."""
    instr = "nl.copy"
    _check_compute_operand(instr, x)
    shape = _bshape(instr, x)
    m = _mask_array(mask, shape)
    secs = vector_seconds(current().target, _free(shape))
    return _emit(
        instr, "vector", secs, _value(x, instr, m, shape), shape, _out_dtype(dtype, x), [x], m
    )


copy._nki_op = "copy"  # type: ignore[attr-defined]


def broadcast_to(x: NkiTensor, shape: Any, **_: Any) -> NkiTensor:
    """Broadcast a tile (``[1, F]`` across partitions or ``[P, 1]`` along the free axis)."""
    instr = "nl.broadcast_to"
    _check_compute_operand(instr, x)
    shape = tuple(int(s) for s in shape)
    try:
        vals = np.broadcast_to(x.read(instr), shape)
    except ValueError:
        raise NKIRuleError(
            "shape-mismatch", instr, f"cannot broadcast {x.shape} to {shape}"
        ) from None
    secs = vector_seconds(current().target, _free(shape))
    return _emit(instr, "vector", secs, vals, shape, x.dtype, [x])


# ---- reductions -----------------------------------------------------------------------------
def reduce_axes(instr: str, ndim: int, axis: Any) -> tuple[int, ...]:
    """Validate reduction axes: free axes only, the trailing contiguous ones."""
    if axis is None:
        axes = tuple(range(1, ndim))
    elif isinstance(axis, (int, np.integer)):
        axes = (int(axis),)
    else:
        axes = tuple(int(a) for a in axis)
    axes = tuple(sorted(a + ndim if a < 0 else a for a in axes))
    check(
        builtins.all(0 <= a < ndim for a in axes),
        "reduce-axis",
        instr,
        f"axis {axis} is out of range for a tile of rank {ndim}",
    )
    check(
        0 not in axes,
        "reduce-axis",
        instr,
        f"axis {axis} includes the partition axis 0; reduce across partitions with a matmul "
        "against ones or nisa.tensor_partition_reduce",
    )
    check(
        len(axes) > 0 and axes == tuple(range(ndim - len(axes), ndim)),
        "reduce-axis",
        instr,
        f"axes {list(axes)} must be the last contiguous free axes of a rank-{ndim} tile",
    )
    return axes


def _reduction(
    name: str, opname: str, post: Callable[[np.ndarray, int], np.ndarray] | None = None
) -> Callable[..., NkiTensor]:
    op = mathops.lookup(opname)
    assert op is not None

    def fn(
        x: NkiTensor,
        axis: Any,
        dtype: Any = None,
        keepdims: bool = False,
        mask: Any = None,
        **_: Any,
    ) -> NkiTensor:
        instr = f"nl.{name}"
        _check_compute_operand(instr, x)
        axes = reduce_axes(instr, x.ndim, axis)
        m = _mask_array(mask, tuple(x.shape))
        vals = np.asarray(x.read(instr, m), dtype=np.float32 if _dt.is_float(x.dtype) else None)
        r = op.reduce(vals, axis=axes, keepdims=keepdims)
        if post is not None:
            r = post(r, math.prod(x.shape[a] for a in axes))
        shape = tuple(r.shape)
        secs = vector_seconds(current().target, x.free_size)
        return _emit(instr, "vector", secs, r, shape, _out_dtype(dtype, x), [x])

    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = f"``{name}`` over free ``axis`` (one or more trailing axes), Vector Engine."
    fn._nki_op = opname  # type: ignore[attr-defined]
    return fn


sum = _reduction("sum", "add")  # noqa: A001
max = _reduction("max", "maximum")  # noqa: A001
min = _reduction("min", "minimum")  # noqa: A001
prod = _reduction("prod", "multiply")
all = _reduction("all", "logical_and")  # noqa: A001
any = _reduction("any", "logical_or")  # noqa: A001
mean = _reduction("mean", "add", post=lambda r, n: r / n)
mean._nki_op = None  # type: ignore[attr-defined]


def var(
    x: NkiTensor, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Any = None, **_: Any
) -> NkiTensor:
    """Population variance over free ``axis`` (Vector Engine, two passes)."""
    instr = "nl.var"
    _check_compute_operand(instr, x)
    axes = reduce_axes(instr, x.ndim, axis)
    vals = x.read(instr).astype(np.float32)
    r = np.var(vals, axis=axes, keepdims=keepdims)
    secs = vector_seconds(current().target, x.free_size, x.free_size)
    return _emit(instr, "vector", secs, r, tuple(r.shape), _out_dtype(dtype, x), [x])


def softmax(x: NkiTensor, axis: Any = -1, dtype: Any = None, **_: Any) -> NkiTensor:
    """Softmax over free ``axis`` built from max / exp / sum / divide instructions."""
    m = max(x, axis=axis, keepdims=True)
    e = exp(subtract(x, m))
    s = sum(e, axis=axis, keepdims=True)
    return divide(e, s, dtype=dtype)


# ---- data movement --------------------------------------------------------------------------
def _oob_mask(instr: str, dst: NkiTensor, src: Any, mask: Any) -> np.ndarray:
    """``oob_mode.skip``: the elements whose indirect indices are in bounds (and ``mask``)."""
    shape = tuple(dst.shape)
    m = np.ones(shape, dtype=bool) if mask is None else np.array(_mask_array(mask, shape))
    for v in (dst, src):
        if _is_tile(v) and hasattr(v, "in_bounds"):
            ok = v.in_bounds()
            if ok.shape != shape:
                if ok.size != m.size:
                    raise NKIRuleError(
                        "shape-mismatch", instr, f"source {list(src.shape)} and destination {list(shape)} differ"
                    )
                ok = ok.reshape(shape)
            m &= ok
    return m


def _dma(
    instr: str, dst: NkiTensor, src: Any, mask: Any = None, rmw: Any = None, oob_skip: bool = False
) -> None:
    """One DMA transfer ``dst <- src`` (HBM<->SBUF, SBUF<->SBUF, HBM<->HBM). Views indexed by
    SBUF tiles are indirect (gather/scatter) transfers that also wait for their index tiles;
    with ``oob_skip`` their out-of-bounds elements are skipped instead of being an error."""
    launch = current()
    if oob_skip:
        check(rmw is None, "unsupported", instr, "dst_rmw_op needs oob_mode.error")
        mask = _oob_mask(instr, dst, src, mask)
    if _is_tile(src):
        if not (src.buffer is not MemoryRegion.psum and dst.buffer is not MemoryRegion.psum):
            raise NKIRuleError(
                "dma-buffer",
                instr,
                f"DMA cannot move {src.buffer.value} -> {dst.buffer.value}; copy PSUM tiles to SBUF "
                "with nisa.tensor_copy / nl.copy first",
            )
        shape = tuple(dst.shape)
        m = _mask_array(mask, shape)
        if tuple(src.shape) != shape:
            if src.size == dst.size and math.prod(shape) == src.size and m is None:
                vals = src.read(instr).reshape(shape)
            else:
                try:
                    np.broadcast_shapes(src.shape, shape)
                except ValueError:
                    raise NKIRuleError(
                        "shape-mismatch",
                        instr,
                        f"source {src.name}{list(src.shape)} and destination {dst.name}{list(dst.shape)} differ",
                    ) from None
                vals = np.broadcast_to(src.read(instr), shape)
        else:
            vals = src.read(instr, m)
        nbytes = src.size * src.itemsize
    else:
        vals = np.asarray(src)
        shape = tuple(dst.shape)
        m = _mask_array(mask, shape)
        nbytes = dst.nbytes
    if dst.buffer.on_chip:
        pmax = launch.target.sbuf_partitions
        if not (dst.partition_size <= pmax):
            raise NKIRuleError(
                "partition-dim-limit",
                instr,
                f"destination {dst.name}{list(dst.shape)} spans {dst.partition_size} partitions; the limit is {pmax}",
            )
    if _is_tile(src) and src.buffer.on_chip:
        pmax = launch.target.sbuf_partitions
        if not (src.partition_size <= pmax):
            raise NKIRuleError(
                "partition-dim-limit",
                instr,
                f"source {src.name}{list(src.shape)} spans {src.partition_size} partitions; the limit is {pmax}",
            )
    scatter_add = False
    if rmw is not None:
        op = mathops.lookup(rmw)
        check(
            op is not None and op.name == "add", "unsupported", instr, f"dst_rmw_op={rmw!r}: only add is supported"
        )
        scatter_add = hasattr(dst, "scatter_add")  # indirect destination: duplicates accumulate
        if not scatter_add:
            vals = op(dst.read(instr), vals)
    if m is not None:
        nbytes = int(np.count_nonzero(m)) * (src.itemsize if _is_tile(src) else dst.itemsize)
    reads = [src] if _is_tile(src) else []
    if rmw is not None:
        reads.append(dst)
    for v in (src, dst):
        if _is_tile(v):
            reads.extend(v._index_tiles)
    launch.issue(
        instr, "dma", dma_seconds(launch.target, nbytes), reads=reads, writes=[dst], nbytes=nbytes
    )
    exact = rmw is None and _is_tile(src) and src.dtype == dst.dtype
    if scatter_add:
        dst.scatter_add(vals, instr, m)
        return
    dst.write(vals, instr, m, exact=exact)


def load(src: NkiTensor, dtype: Any = None, mask: Any = None, **_: Any) -> NkiTensor:
    """DMA a tensor from HBM into a new SBUF tile."""
    instr = "nl.load"
    check(_is_tile(src), "dma-buffer", instr, f"cannot load a {type(src).__name__}")
    check(
        src.buffer.is_hbm,
        "dma-buffer",
        instr,
        f"nl.load reads HBM, but {src.name} is in {src.buffer.value}",
    )
    out = _new(src.shape, dtype or src.dtype, sbuf, instruction=instr)
    _dma(instr, out, src, mask)
    out._buf.producer = (current().scheduler.profile.records[-1].end, "load")
    return out


def store(dst: NkiTensor, value: Any, mask: Any = None, **_: Any) -> None:
    """DMA an SBUF tile into an HBM tensor (a PSUM tile is copied to SBUF first)."""
    instr = "nl.store"
    check(
        _is_tile(dst) and dst.buffer.is_hbm,
        "dma-buffer",
        instr,
        f"nl.store writes HBM, but the destination is in "
        f"{dst.buffer.value if _is_tile(dst) else type(dst).__name__}",
    )
    if _is_tile(value):
        _check_compute_operand(instr, value, "value")
        if value.buffer is MemoryRegion.psum:
            value = copy(value)
    _dma(instr, dst, value, mask)


def load_transpose2d(src: NkiTensor, dtype: Any = None, mask: Any = None, **_: Any) -> NkiTensor:
    """DMA a 2-D HBM tensor ``[A, B]`` into an SBUF tile ``[B, A]`` (a DMA transpose)."""
    instr = "nl.load_transpose2d"
    check(src.buffer.is_hbm, "dma-buffer", instr, f"{src.name} is in {src.buffer.value}, not HBM")
    check(src.ndim == 2, "shape-mismatch", instr, f"expects a 2-D tensor, got {src.shape}")
    out = _new((src.shape[1], src.shape[0]), dtype or src.dtype, sbuf, instruction=instr)
    launch = current()
    vals = src.read(instr).T
    m = _mask_array(mask, out.shape)
    launch.issue(
        instr,
        "dma",
        dma_seconds(launch.target, src.nbytes),
        reads=[src],
        writes=[out],
        nbytes=src.nbytes,
    )
    out.write(vals, instr, m)
    return out


# ---- Tensor Engine --------------------------------------------------------------------------
def check_matmul(
    instr: str, stationary: NkiTensor, moving: NkiTensor, dst: NkiTensor | None
) -> None:
    """The Tensor Engine's layout rules for ``dst = stationary.T @ moving``."""
    t = current().target
    for what, x in (("stationary", stationary), ("moving", moving)):
        check(_is_tile(x), "matmul-operand-buffer", instr, f"{what} operand must be a tile")
        if x.buffer is not MemoryRegion.sbuf:
            raise NKIRuleError(
                "matmul-operand-buffer",
                instr,
                f"{what} operand {x.name}{list(x.shape)} is in {x.buffer.value}; Tensor Engine reads SBUF",
            )
    if not (stationary.ndim == 2):
        raise NKIRuleError(
            "matmul-stationary-size",
            instr,
            f"stationary must be 2-D, got {stationary.shape}",
        )
    k, m = stationary.shape
    if not (k <= t.pe_array_rows and m <= t.pe_array_cols):
        raise NKIRuleError(
            "matmul-stationary-size",
            instr,
            f"stationary tile {stationary.name}{list(stationary.shape)} exceeds "
            f"{t.pe_array_rows} x {t.pe_array_cols} (contraction x free)",
        )
    if not (moving.partition_size <= t.pe_array_rows and moving.free_size <= t.matmul_moving_fmax):
        raise NKIRuleError(
            "matmul-moving-size",
            instr,
            f"moving tile {moving.name}{list(moving.shape)} exceeds {t.pe_array_rows} partitions x "
            f"{t.matmul_moving_fmax} free elements",
        )
    if not (moving.partition_size == k):
        raise NKIRuleError(
            "matmul-contraction",
            instr,
            f"stationary {list(stationary.shape)} and moving {list(moving.shape)} must share the "
            "contraction size on the partition dim (dst = stationary.T @ moving)",
        )
    if dst is None:
        return
    if dst.buffer is not MemoryRegion.psum:
        raise NKIRuleError(
            "matmul-output-buffer",
            instr,
            f"destination {dst.name}{list(dst.shape)} is in {dst.buffer.value}; matmul writes PSUM",
        )
    if dst.dtype not in (float32, bfloat16):
        raise NKIRuleError(
            "matmul-output-dtype",
            instr,
            f"destination {dst.name} is {_dt.name(dst.dtype)}; PSUM accumulates float32",
        )
    bank = t.psum_bank_bytes_per_partition
    if not (dst.free_bytes <= bank):
        raise NKIRuleError(
            "psum-tile-size",
            instr,
            f"PSUM tile {dst.name}{list(dst.shape)} holds {dst.free_bytes} B per partition; a PSUM "
            f"tile holds at most {bank} B (one bank, {bank // 4} float32)",
        )


def matmul_family(a: NkiTensor, b: NkiTensor) -> str:
    fams = {_dt.matmul_family(a.dtype), _dt.matmul_family(b.dtype)}
    return "fp32" if "fp32" in fams else ("bf16" if "bf16" in fams else "fp8")


def matmul(
    x: NkiTensor, y: NkiTensor, transpose_x: bool = False, mask: Any = None, **_: Any
) -> NkiTensor:
    """``x @ y`` into a new float32 PSUM tile. With ``transpose_x=True`` ``x`` is given as
    ``[K, M]`` (the Tensor Engine's stationary layout); otherwise it is transposed first."""
    instr = "nl.matmul"
    launch = current()
    check(_is_tile(x) and _is_tile(y), "matmul-operand-buffer", instr, "operands must be tiles")
    if transpose_x:
        stationary_vals = x.read(instr)
        stat = x
    else:
        check(x.ndim == 2, "matmul-stationary-size", instr, f"x must be 2-D, got {x.shape}")
        check(
            x.buffer is MemoryRegion.sbuf,
            "matmul-operand-buffer",
            instr,
            f"x {x.name} is in {x.buffer.value}; Tensor Engine reads SBUF",
        )
        xt = _new((x.shape[1], x.shape[0]), x.dtype, sbuf, instruction=instr)
        fam = _dt.matmul_family(x.dtype)
        launch.issue(
            "nl.matmul(transpose x)",
            "tensor",
            matmul_seconds(launch.target, x.shape[0], fam),
            reads=[x],
            writes=[xt],
        )
        xt.write(x.read(instr).T, instr)
        stat = xt
        stationary_vals = xt.read(instr)
    check_matmul(instr, stat, y, None)
    k, m = stat.shape
    out_shape = (m,) + tuple(y.shape[1:])
    mv = y.read(instr).reshape(k, -1)
    res = (stationary_vals.astype(np.float32).T @ mv.astype(np.float32)).reshape(out_shape)
    n = y.free_size
    secs = matmul_seconds(launch.target, n, matmul_family(stat, y))
    out = _new(out_shape, float32, psum, instruction=instr)
    check_matmul(instr, stat, y, out)
    launch.issue(
        instr,
        "tensor",
        secs,
        reads=[stat, y],
        writes=[out],
        flops=2.0 * k * m * n,
        produces="matmul",
    )
    out.write(res, instr, _mask_array(mask, out_shape))
    return out


def transpose(x: NkiTensor, dtype: Any = None, mask: Any = None, **_: Any) -> NkiTensor:
    """Swap the partition and free axes of a 2-D tile (Tensor Engine, or Vector Engine for
    tiles up to 32 x 32)."""
    instr = "nl.transpose"
    _check_compute_operand(instr, x)
    check(x.ndim == 2, "transpose-size", instr, f"expects a 2-D tile, got {x.shape}")
    launch = current()
    t = launch.target
    p, f = x.shape
    check(
        p <= t.pe_array_rows and f <= t.pe_array_cols,
        "transpose-size",
        instr,
        f"tile {x.name}{list(x.shape)} exceeds {t.pe_array_rows} x {t.pe_array_cols}",
    )
    if p <= 32 and f <= 32:
        eng, secs = "vector", vector_seconds(t, f)
    else:
        eng, secs = "tensor", matmul_seconds(t, p, _dt.matmul_family(x.dtype))
    return _emit(
        instr,
        eng,
        secs,
        x.read(instr).T,
        (f, p),
        _out_dtype(dtype, x),
        [x],
        _mask_array(mask, (f, p)),
    )


# ---- debugging ------------------------------------------------------------------------------
def device_print(prefix: str, x: Any = None, **_: Any) -> None:
    """Print a tensor's values (or any value) from inside the kernel."""
    if _is_tile(x):
        val = _dt.from_storage(x.read("nl.device_print"), x.dtype)
        print(prefix, val)
    else:
        print(prefix, x)
