"""The chip's dtype rules.

The NeuronCore computes natively in bf16, fp16, fp32 (and fp8), int8/16/32, uint8 and bool.
As TorchNeuron does, float64 is computed as float32 and int64 as int32, with the requested
output dtype restored (a once-per-process warning says so); ``TORCHNEURON_EXACT_DTYPES=1``
computes exactly as the CPU does.

Complex numbers and the wide unsigned integers (uint16/32/64) have no arithmetic on the chip.
Device memory holds their bytes like any others, and every operator that reads or produces
them runs through the CPU fallback (explicit, counted copies; a warning per operator;
``TORCHNEURON_FALLBACK=error`` makes that an error), so a model with, say, complex rotary
embeddings or an FFT runs and says where. The remaining dtypes (quantized, bit-packed,
sub-byte, the ``fnuz`` float8 variants) cannot be placed on the device: a clear error.
"""

from __future__ import annotations

import os
import warnings

import torch

SUPPORTED = frozenset(
    {
        torch.float32, torch.bfloat16, torch.float16, torch.float64,
        torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool,
        torch.float8_e4m3fn, torch.float8_e5m2,
    }
)
EMULATED = frozenset({torch.float64, torch.int64})
# held in device memory, computed on the host (CPU fallback) by every operator that touches them
HOST_COMPUTED = frozenset(
    {torch.complex32, torch.complex64, torch.complex128, torch.uint16, torch.uint32, torch.uint64}
)
STORABLE = SUPPORTED | HOST_COMPUTED
_warned: set[torch.dtype] = set()


def exact() -> bool:
    return os.environ.get("TORCHNEURON_EXACT_DTYPES", "0") not in ("", "0", "false", "False")


def check_supported(dtype: torch.dtype) -> None:
    """Raise unless device memory can hold ``dtype`` (computed there or through the fallback)."""
    if dtype not in STORABLE:
        raise TypeError(
            f"neuron does not support {dtype}: the NeuronCore has no {str(dtype).removeprefix('torch.')} "
            f"representation. Supported dtypes: bfloat16, float16, float32 (float64 computed as float32), "
            f"int8/16/32 (int64 computed as int32), uint8, bool, float8_e4m3fn, float8_e5m2; complex "
            f"and uint16/32/64 are held in device memory and computed by the CPU fallback. "
            f"Keep this tensor on the CPU."
        )


def host_computed(dtype: torch.dtype) -> bool:
    """Whether operators on ``dtype`` run through the CPU fallback (no arithmetic on the chip)."""
    return dtype in HOST_COMPUTED


def warn_once(dtype: torch.dtype) -> None:
    if dtype in _warned:
        return
    _warned.add(dtype)
    narrow = "float32" if dtype == torch.float64 else "int32"
    warnings.warn(
        f"neuron: {dtype} is computed as {narrow} on the NeuronCore (the result keeps dtype "
        f"{dtype}). Set TORCHNEURON_EXACT_DTYPES=1 to compute exactly as the CPU does.",
        stacklevel=4,
    )


def narrow_input(h: torch.Tensor) -> torch.Tensor:
    """The value a 32-bit compute unit would read: float64 rounded to float32 precision."""
    if h.dtype == torch.float64:
        narrow = h.to(torch.float32).to(torch.float64)
        if not torch.equal(narrow, h):
            warn_once(torch.float64)
        return narrow
    return h


def narrow_output_(h: torch.Tensor) -> None:
    """Round a freshly computed float64 / int64 result to what 32-bit hardware produces."""
    if h.dtype == torch.float64:
        narrow = h.to(torch.float32)
    elif h.dtype == torch.int64:
        narrow = h.to(torch.int32)
    else:
        return
    if not torch.equal(narrow.to(h.dtype), h):  # warn when the 32-bit hardware changes a value
        warn_once(h.dtype)
        h.copy_(narrow)
