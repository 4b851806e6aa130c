"""The hardware rules the simulator enforces, and the error raised when a kernel breaks one.

Every rule has a stable name (``RULES``); :class:`NKIRuleError` carries the rule, the NKI
instruction that broke it and the kernel source line that issued the instruction, and its
message names all three, e.g.::

    [matmul-moving-size] nisa.nc_matmul: moving tile free size 1024 exceeds 512
    (kernel.py:14: nisa.nc_matmul(acc, a, b))
"""

from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass

RULES: dict[str, str] = {
    "partition-dim-limit": "an on-chip tile has at most 128 partitions (its first dimension)",
    "psum-tile-size": "a PSUM tile holds at most 2 KiB per partition (one PSUM bank)",
    "psum-capacity": "live PSUM tensors fit in the PSUM banks (8 x 2 KiB per partition)",
    "sbuf-capacity": "live SBUF tensors fit in the SBUF bytes per partition left to kernels",
    "matmul-stationary-size": "the stationary operand is at most 128 x 128",
    "matmul-moving-size": "the moving operand is at most 128 partitions x 512",
    "matmul-contraction": "stationary and moving share the contraction (partition) size",
    "matmul-operand-buffer": "matmul operands are read from SBUF",
    "matmul-output-buffer": "matmul writes its result into PSUM",
    "matmul-output-dtype": "matmul accumulates into a float32 (or bfloat16) PSUM tile",
    "compute-on-hbm": "compute engines read and write SBUF/PSUM only, never HBM",
    "gpsimd-psum": "the GpSimd Engine cannot access PSUM",
    "dma-buffer": "DMA moves data between HBM and SBUF (not from PSUM)",
    "kernel-output-buffer": "tensors a kernel returns are allocated in shared_hbm",
    "out-of-bounds": "every access lies inside the tensor it indexes",
    "shape-mismatch": "operand and destination shapes agree (or broadcast)",
    "operand-shape": "scalar/vector operands are scalars or one value per partition ([P, 1])",
    "reduce-axis": "reductions run over trailing free axes only, never the partition axis",
    "transpose-size": "Tensor Engine transposes are at most 128 x 128, Vector Engine 32 x 32",
    "bn-stats-size": "bn_stats reads at most 512 elements per partition",
    "dtype": "the instruction supports the operand data types",
    "unsupported": "the operation or argument is valid NKI but not modelled here",
    "launch": "grids, program ids and kernel arguments are well formed",
}


def _package_dir() -> str:
    return os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class SourceLocation:
    filename: str
    lineno: int
    function: str

    @property
    def line(self) -> str:
        return linecache.getline(self.filename, self.lineno).strip()

    def __str__(self) -> str:
        text = self.line
        short = os.path.basename(self.filename)
        return f"{short}:{self.lineno}" + (f": {text}" if text else "")


_in_package: dict[str, bool] = {}  # code file name -> is it part of this package?


def _inside(filename: str) -> bool:
    r = _in_package.get(filename)
    if r is None:
        r = _in_package[filename] = os.path.abspath(filename).startswith(_package_dir() + os.sep)
    return r


def user_location(skip_extra: int = 0) -> SourceLocation | None:
    """The innermost stack frame outside this package: the kernel line issuing the call."""
    frame = sys._getframe(1 + skip_extra)
    while frame is not None:
        code = frame.f_code
        if not _inside(code.co_filename):
            return SourceLocation(code.co_filename, frame.f_lineno, code.co_name)
        frame = frame.f_back
    return None


class NKIRuleError(Exception):
    """A kernel broke a hardware rule. ``rule`` is a key of :data:`RULES`."""

    def __init__(
        self,
        rule: str,
        instruction: str,
        detail: str,
        location: SourceLocation | None = None,
    ) -> None:
        if rule not in RULES:
            raise ValueError(f"unknown NKI rule {rule!r}")
        self.rule = rule
        self.instruction = instruction
        self.detail = detail
        self.location = location if location is not None else user_location()
        self.filename = self.location.filename if self.location else None
        self.lineno = self.location.lineno if self.location else None
        where = f" ({self.location})" if self.location else ""
        super().__init__(f"[{rule}] {instruction}: {detail}{where}")


def check(ok: bool, rule: str, instruction: str, detail: str) -> None:
    """Raise :class:`NKIRuleError` for ``rule`` unless ``ok``."""
    if not ok:
        raise NKIRuleError(rule, instruction, detail)
