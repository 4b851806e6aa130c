"""NKI data types and how the simulator stores them.

Kernels see numpy dtypes (``nl.bfloat16`` is ``ml_dtypes.bfloat16``, ``nl.float32`` is
``numpy.float32``...). Internally every floating-point tile is stored as float32 holding values
already rounded to the tile's dtype, because NeuronCore engines compute in float32 and only
round when they write; integer tiles are stored in their own dtype. ``tfloat32`` has no numpy
type, so it is the :data:`tfloat32` marker object and is stored as float32 with a 10-bit
mantissa.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np


class _TF32:
    """Marker dtype for tfloat32 (1 sign, 8 exponent, 10 mantissa bits, 4 bytes in memory)."""

    name = "tfloat32"
    itemsize = 4
    kind = "f"

    def __repr__(self) -> str:
        return "tfloat32"

    def __reduce__(self) -> str:
        return "tfloat32"


tfloat32 = _TF32()

bool_ = np.dtype(np.bool_)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
uint64 = np.dtype(np.uint64)
float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)

DType = Any  # a numpy dtype or the tfloat32 marker

_BY_NAME: dict[str, DType] = {
    "bool": bool_,
    "bool_": bool_,
    "int8": int8,
    "int16": int16,
    "int32": int32,
    "int64": int64,
    "uint8": uint8,
    "uint16": uint16,
    "uint32": uint32,
    "uint64": uint64,
    "float16": float16,
    "fp16": float16,
    "float32": float32,
    "fp32": float32,
    "float64": float64,
    "bfloat16": bfloat16,
    "bf16": bfloat16,
    "tfloat32": tfloat32,
    "float8_e4m3": float8_e4m3,
    "float8_e4m3fn": float8_e4m3fn,
    "float8_e5m2": float8_e5m2,
}

_FP8 = {float8_e4m3, float8_e4m3fn, float8_e5m2}


def normalize(dtype: Any) -> DType:
    """Turn whatever a kernel passes as a dtype into a numpy dtype (or :data:`tfloat32`)."""
    if dtype is tfloat32 or isinstance(dtype, _TF32):
        return tfloat32
    if isinstance(dtype, str):
        if dtype in _BY_NAME:
            return _BY_NAME[dtype]
        raise TypeError(f"unknown NKI dtype {dtype!r}")
    if dtype is float:
        return float32
    if dtype is int:
        return int32
    if dtype is bool:
        return bool_
    try:
        return np.dtype(dtype)
    except TypeError:
        name = getattr(dtype, "name", None) or getattr(dtype, "__name__", None)
        if isinstance(name, str) and name in _BY_NAME:
            return _BY_NAME[name]
        raise TypeError(f"unknown NKI dtype {dtype!r}") from None


def is_float(dtype: DType) -> bool:
    return dtype is tfloat32 or np.dtype(dtype).kind == "f" or dtype in _FP8 or dtype == bfloat16


def itemsize(dtype: DType) -> int:
    return 4 if dtype is tfloat32 else np.dtype(dtype).itemsize


def name(dtype: DType) -> str:
    return "tfloat32" if dtype is tfloat32 else np.dtype(dtype).name


def storage_dtype(dtype: DType) -> np.dtype:
    """The numpy dtype the simulator keeps a tile of ``dtype`` in."""
    return np.dtype(np.float32) if is_float(dtype) else np.dtype(dtype)


def numpy_dtype(dtype: DType) -> np.dtype:
    """The numpy dtype handed back to the caller for a tensor of ``dtype``."""
    return np.dtype(np.float32) if dtype is tfloat32 else np.dtype(dtype)


def matmul_family(dtype: DType) -> str:
    """Which Tensor Engine rate applies to operands of ``dtype``: fp32, bf16 or fp8."""
    if dtype == float32:
        return "fp32"
    if dtype in _FP8:
        return "fp8"
    return "bf16"  # bf16, fp16, tf32 run at the 16-bit rate; integers are not matmul operands


def _round_bf16(x: np.ndarray) -> np.ndarray:
    return x.astype(bfloat16).astype(np.float32)


def _round_tf32(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    finite = np.isfinite(x)
    r = (u + np.uint32(0xFFF) + ((u >> np.uint32(13)) & np.uint32(1))) & np.uint32(0xFFFFE000)
    return np.where(finite, r.view(np.float32), x).astype(np.float32)


def to_storage(values: Any, dtype: DType) -> np.ndarray:
    """Round ``values`` to ``dtype`` and return them in the storage dtype."""
    arr = np.asarray(values)
    if is_float(dtype):
        f = arr.astype(np.float32, copy=False)
        if dtype == float32:
            return f
        if dtype is tfloat32:
            return _round_tf32(f)
        if dtype == bfloat16:
            return _round_bf16(f)
        return f.astype(dtype).astype(np.float32)
    if arr.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            arr = np.where(np.isfinite(arr), arr, 0)
            return np.trunc(arr).astype(dtype)
    return arr.astype(dtype)


def from_storage(stored: np.ndarray, dtype: DType) -> np.ndarray:
    """Convert a stored tile back to the dtype the caller expects."""
    return stored.astype(numpy_dtype(dtype))


def uninitialized(shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    """A new allocation: NaN for floating-point tiles, a loud sentinel for integer tiles."""
    st = storage_dtype(dtype)
    if st.kind == "f":
        return np.full(shape, np.nan, dtype=st)
    if st.kind == "b":
        return np.zeros(shape, dtype=st)
    return np.full(shape, np.iinfo(st).min, dtype=st)


def promote(*dtypes: DType) -> DType:
    """NKI type promotion for tile operands: the widest float wins, floats beat integers."""
    floats = [d for d in dtypes if is_float(d)]
    if floats:
        return max(floats, key=lambda d: (itemsize(d), d == float32, d is not tfloat32))
    ints = [np.dtype(d) for d in dtypes]
    return np.result_type(*ints) if ints else float32
