"""NKI-compatible kernel language with a checking, timing NeuronCore simulator.

Write kernels against ``torchneuron.nki`` exactly as against AWS's ``nki`` package::

    from torchneuron import nki
    import torchneuron.nki.language as nl
    import torchneuron.nki.isa as nisa

    @nki.jit
    def add(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        ...
        return out

    out = add(x, y)                                    # numpy in, numpy out (simulated)
    out, prof = nki.simulate(add, target="trn2", return_profile=True)(x, y)
    print(prof.summary())

Both dialects run: the current one (``nki.isa`` calls take ``dst`` first) and the legacy one
(``neuronxcc.nki``: ``nl.arange``/``mgrid`` indexing, ``mask=``, ISA calls returning tiles).
Set ``TORCHNEURON_NKI_ALIAS=1`` or call :func:`install_aliases` so that ``import nki`` and
``import neuronxcc.nki`` resolve here. See docs/nki.md.
"""

from __future__ import annotations

import os as _os

from . import isa, language, legacy, typing
from .aliases import install_aliases, uninstall_aliases
from .rules import RULES, NKIRuleError
from .simulator import Kernel, jit, last_profile, simulate, simulate_kernel
from .tiles import MemoryRegion, NkiTensor
from .timing import InstructionRecord, Profile


def baremetal(kernel=None, **options):  # noqa: ANN001, ANN201
    """Legacy ``@nki.baremetal``: here the same as ``@nki.jit`` (runs on the simulator)."""
    return jit(kernel, **options)


class _Latency:
    def __init__(self, seconds: float) -> None:
        self._us = seconds * 1e6

    def get_latency_percentile(self, percentile: int = 50) -> float:
        """Estimated latency in microseconds (deterministic: every percentile is the same)."""
        return self._us


class _BenchmarkResult:
    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.nc_latency = _Latency(profile.duration)


class _BenchmarkedKernel(Kernel):
    benchmark_result: _BenchmarkResult | None = None

    def __getitem__(self, grid):  # noqa: ANN001, ANN204
        k = _BenchmarkedKernel(self.func, Kernel.__getitem__(self, grid).grid, **self.options)
        return k

    def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204
        out, prof = simulate(Kernel(self.func, self.grid, **self.options), return_profile=True)(
            *args, **kwargs
        )
        self.benchmark_result = _BenchmarkResult(prof)
        return out


def benchmark(kernel=None, **options):  # noqa: ANN001, ANN201
    """Legacy ``@nki.benchmark(warmup=..., iters=...)``: runs once on the simulator and
    reports the timing model's estimate via ``kernel.benchmark_result.nc_latency``."""
    if kernel is None:
        return lambda k: _BenchmarkedKernel(getattr(k, "func", k), **options)
    return _BenchmarkedKernel(getattr(kernel, "func", kernel), **options)


def profile(kernel=None, **options):  # noqa: ANN001, ANN201
    """Legacy ``@nki.profile``: runs on the simulator; read ``nki.last_profile()``."""
    return jit(kernel, **options)


__all__ = [
    "RULES",
    "InstructionRecord",
    "Kernel",
    "MemoryRegion",
    "NKIRuleError",
    "NkiTensor",
    "Profile",
    "baremetal",
    "benchmark",
    "install_aliases",
    "isa",
    "jit",
    "language",
    "last_profile",
    "legacy",
    "profile",
    "simulate",
    "simulate_kernel",
    "typing",
    "uninstall_aliases",
]

if _os.environ.get("TORCHNEURON_NKI_ALIAS", "").strip().lower() in ("1", "true", "yes"):
    install_aliases()
