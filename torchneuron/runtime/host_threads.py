"""Handing the host's cores from PyTorch's OpenMP team to IREE's worker threads.

The simulated core runs two kinds of host code: ATen kernels (eager ops, library convolutions,
the optimizer's foreach ops), which run on PyTorch's OpenMP team, and compiled programs on IREE's
``local-task`` driver, which run on IREE's own worker threads. When a compiled program starts
right after an ATen parallel region, GNU OpenMP's worker is still spinning (``GOMP_SPINCOUNT``,
read when libgomp loads) on one of the cores IREE's workers want, and the program runs on fewer
cores than it was scheduled for (docs/performance.md, session 10: ~12 ms of a 97 ms LM training
step). :func:`release_openmp_workers` ends that team (``omp_pause_resource_all(omp_pause_soft)``,
OpenMP 5.0; libgomp frees its thread pool); the next ATen parallel region starts a new one.

Only GNU OpenMP loaded by torch is handled (the Linux wheels'); elsewhere this does nothing.
``TORCHNEURON_RELEASE_OPENMP=0`` turns it off.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from functools import cache

_OMP_PAUSE_SOFT = 1


def _loaded_libgomp() -> str | None:
    """The path of the GNU OpenMP library this process has loaded (torch's), if any."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1]
                if "libgomp" in os.path.basename(path) and path.startswith("/"):
                    return path
    except OSError:
        pass
    return None


@cache
def _pause() -> Callable[[int], int] | None:
    if os.environ.get("TORCHNEURON_RELEASE_OPENMP", "1") == "0":
        return None
    path = _loaded_libgomp()
    if path is None:
        return None
    try:
        fn = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY).omp_pause_resource_all
    except (OSError, AttributeError):  # an older libgomp without OpenMP 5.0's pause
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def release_openmp_workers() -> bool:
    """End PyTorch's OpenMP team so that its idle workers stop spinning; True if it was ended.

    Called from outside any parallel region (libgomp refuses inside one and returns -1)."""
    fn = _pause()
    return fn is not None and fn(_OMP_PAUSE_SOFT) == 0
