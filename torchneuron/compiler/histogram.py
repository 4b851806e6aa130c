"""``aten.histc`` as comparisons and a sum, for a range fixed in the program.

torch-mlir does not lower ``histc``; it was the sweep's most common fallback (65 mixture-of-experts
models count the tokens routed to each expert with ``torch.histc(ids, bins=E, min=0, max=E-1)``).

ATen's CPU kernel (``histogram_histc_out``) takes the bin edges ``linspace(min, max, bins + 1)``
in the input's dtype, whose first and last edges are ``min`` and ``max`` rounded to that dtype,
skips the elements outside ``[min, max]`` (NaN among them) and puts each other element ``x`` in
bin ``int((x - min) * bins / (max - min))``, computed in the input's dtype one operation after
the other, the bin ``bins`` (``x == max``) folded into the last bin. :func:`histc_as_counts`
computes that position the same way, compares it with every bin index and sums the matches.
The counts are summed exactly and then converted to the result's dtype (ATen adds them up in
the input's dtype: in float16 and bfloat16 the two differ once a bin holds more elements than
the dtype counts exactly, 2048 and 256).

Integer inputs are counted as float32 and the counts returned in the input's dtype, as the
device's eager kernel does (``ops/registry.py``: accelerators accept them, the CPU does not).
A range taken from the data (``min == max``, the default) is left to the op: ATen picks it and
checks it on the host. The device's eager kernel makes the same choice per call
(``fixed_range``): on the device for a fixed range, on the CPU for the data's.
"""

from __future__ import annotations

import math

import torch

_aten = torch.ops.aten


def histc_as_counts(x: torch.Tensor, bins: int = 100, min: float = 0, max: float = 0):  # noqa: A002 - ATen's names
    dtype = x.dtype if x.is_floating_point() else torch.float32
    if not fixed_range(dtype, bins, min, max):
        return NotImplemented
    counted = x if x.dtype == dtype else _aten._to_copy.default(x, dtype=dtype)
    lo, hi = float(min), float(max)
    left = _aten.scalar_tensor.default(lo, dtype=dtype, device=x.device)
    right = _aten.scalar_tensor.default(hi, dtype=dtype, device=x.device)
    width = _aten.sub.Tensor(right, left)
    flat = _aten.view.default(counted, [-1]) if counted.is_contiguous() else _aten.reshape.default(counted, [-1])
    scaled = _aten.div.Tensor(_aten.mul.Tensor(_aten.sub.Tensor(flat, left),
                                               _aten.scalar_tensor.default(bins, dtype=dtype, device=x.device)), width)
    position = _aten._to_copy.default(scaled, dtype=torch.int32)  # truncation, as ATen's static_cast
    position = _aten.where.self(_aten.eq.Scalar(position, bins), _aten.scalar_tensor.default(
        bins - 1, dtype=torch.int32, device=x.device), position)
    inside = _aten.logical_and.default(_aten.ge.Tensor(flat, left), _aten.le.Tensor(flat, right))
    index = _aten.arange.start(0, bins, dtype=torch.int32, device=x.device)
    hits = _aten.logical_and.default(_aten.eq.Tensor(_aten.unsqueeze.default(position, 1), index),
                                     _aten.unsqueeze.default(inside, 1))
    counts = _aten.sum.dim_IntList(_aten._to_copy.default(hits, dtype=torch.int32), [0])
    return _aten._to_copy.default(counts, dtype=x.dtype)


def fixed_range(dtype: torch.dtype, bins: int, min: float, max: float) -> bool:  # noqa: A002
    """Whether ``histc`` in ``dtype`` counts over a range the call fixes: ``min < max``, both finite
    and still ordered once rounded to ``dtype`` (else ATen takes the range from the data, raises,
    or divides by zero)."""
    from torch.utils._python_dispatch import _disable_current_modes

    lo, hi = float(min), float(max)
    if not (bins > 0 and math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        return False
    with _disable_current_modes():  # plain host arithmetic, also while a graph is being traced
        return bool(torch.tensor(lo, dtype=dtype) < torch.tensor(hi, dtype=dtype))


def histogram_decompositions() -> dict:
    return {_aten.histc.default: histc_as_counts}


__all__ = ["fixed_range", "histc_as_counts", "histogram_decompositions"]
