"""Run numpy's BLAS single-threaded while a kernel simulates.

A simulated kernel issues thousands of small matmuls (128 x 128 x 512); with a multi-threaded
OpenBLAS each one pays thread hand-off costs and, on a busy machine, contention that makes the
simulation several times slower. Like ``threadpoolctl``, this finds the OpenBLAS numpy loaded
and pins it to one thread for the duration of a launch, restoring the previous setting after.
Without a recognised OpenBLAS it does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
from collections.abc import Iterator

_UNPROBED = object()
_api: object = _UNPROBED  # (get, set) of the OpenBLAS numpy uses, or None


def _probe() -> tuple[object, object] | None:
    import numpy as np

    base = os.path.dirname(os.path.dirname(np.__file__))
    candidates = glob.glob(os.path.join(base, "numpy.libs", "*openblas*")) + glob.glob(
        os.path.join(os.path.dirname(np.__file__), ".libs", "*openblas*")
    )
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix in ("scipy_openblas_", "openblas_", ""):
            for suffix in ("64_", ""):
                getter = getattr(lib, f"{prefix}get_num_threads{suffix}", None)
                setter = getattr(lib, f"{prefix}set_num_threads{suffix}", None)
                if getter is not None and setter is not None:
                    getter.restype = ctypes.c_int
                    setter.argtypes = [ctypes.c_int]
                    return getter, setter
    return None


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    global _api
    if _api is _UNPROBED:
        _api = _probe()
    if _api is None:
        yield
        return
    getter, setter = _api  # type: ignore[misc]
    before = getter()  # type: ignore[operator]
    setter(1)  # type: ignore[operator]
    try:
        yield
    finally:
        setter(before)  # type: ignore[operator]
