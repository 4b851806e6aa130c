"""Running kernels: launches, SPMD grids, allocation accounting and instruction issue.

``nki.jit`` wraps a Python kernel in a :class:`Kernel`. Calling it (or ``kernel[grid]``) with
numpy arrays -- or going through :func:`simulate` / :func:`simulate_kernel` -- runs every
program of the grid, in order, inside a :class:`Launch`. The kernel body executes eagerly:
each NKI call checks the hardware rules, computes its result with numpy and is charged to an
engine of the physical core its program runs on (program ``p`` runs on core ``p % lnc``).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import os
import sys
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from torchneuron.runtime.target import TARGETS, Target, target_from_env

from . import dtypes
from .blas_threads import single_threaded_blas
from .rules import NKIRuleError, check, user_location
from .tiles import Buffer, MemoryRegion, NkiTensor
from .timing import Profile, Scheduler, vector_seconds

_stack: list[Launch] = []
_last_profile: Profile | None = None


def current() -> Launch:
    """The launch running right now; NKI calls outside a kernel launch are an error."""
    if not _stack:
        raise NKIRuleError(
            "launch",
            "nki",
            "NKI language/ISA calls must run inside a kernel launched with nki.jit / nki.simulate",
        )
    return _stack[-1]


def in_launch() -> bool:
    return bool(_stack)


def last_profile() -> Profile | None:
    """Timing profile of the most recent kernel launch (``None`` before the first)."""
    return _last_profile


def resolve_target(target: Target | str | None = None, lnc: int | None = None) -> Target:
    if target is None:
        tgt = target_from_env()
    elif isinstance(target, Target):
        tgt = target
    else:
        name = str(target).strip().lower()
        if name not in TARGETS:
            raise ValueError(f"unknown target {target!r}; choose one of {sorted(TARGETS)}")
        tgt = target_from_env({**os.environ, "TORCHNEURON_TARGET": name})
    if lnc is not None:
        if lnc not in (1, 2):
            raise ValueError(f"lnc must be 1 or 2, not {lnc!r}")
        tgt = dataclasses.replace(tgt, lnc=lnc)
    return tgt


class Launch:
    """State of one kernel launch: target, grid, current program, memory and scheduler."""

    def __init__(self, target: Target, grid: tuple[int, ...]) -> None:
        self.target = target
        self.grid = grid
        self.program: tuple[int, ...] = tuple(0 for _ in grid)
        self.core = 0
        self.scheduler = Scheduler(target)
        self.sbuf_live = 0
        self.psum_banks_live = 0
        self.sbuf_peak = 0
        self.psum_banks_peak = 0
        self.shared: list[Buffer] = []
        self._shared_next = 0
        self.reduce_regs: dict[tuple[int, str], np.ndarray] = {}

    # ---- memory ---------------------------------------------------------------------------
    @property
    def sbuf_capacity(self) -> int:
        return self.target.sbuf_bytes_per_partition_for_kernels

    def allocate(
        self,
        shape: tuple[int, ...],
        dtype: Any,
        region: MemoryRegion,
        name: str = "",
        pdim: int = 0,
        instruction: str = "nl.ndarray",
        data: np.ndarray | None = None,
    ) -> Buffer:
        dtype = dtypes.normalize(dtype)
        shape = tuple(int(s) for s in shape)
        check(all(s >= 0 for s in shape), "shape-mismatch", instruction, f"negative shape {shape}")
        if region is MemoryRegion.shared_hbm and data is None:
            return self._shared_alloc(shape, dtype, name, instruction)
        if data is None:
            data = dtypes.uninitialized(shape, dtype)
        buf = Buffer(shape, dtype, region, data, name=name, pdim=pdim)
        if region.on_chip:
            self._account(buf, instruction)
        return buf

    def _shared_alloc(
        self, shape: tuple[int, ...], dtype: Any, name: str, instruction: str
    ) -> Buffer:
        # Every SPMD program allocates "the same" shared output tensor: the k-th shared_hbm
        # allocation of each program is one buffer.
        k = self._shared_next
        self._shared_next += 1
        if k < len(self.shared):
            buf = self.shared[k]
            check(
                buf.shape == shape and buf.dtype == dtype,
                "launch",
                instruction,
                f"program {self.program} allocates shared_hbm tensor #{k} as {shape} "
                f"{dtypes.name(dtype)} but program 0 allocated {buf.shape} {dtypes.name(buf.dtype)}",
            )
            return buf
        buf = Buffer(
            shape, dtype, MemoryRegion.shared_hbm, dtypes.uninitialized(shape, dtype), name=name
        )
        self.shared.append(buf)
        return buf

    def _account(self, buf: Buffer, instruction: str) -> None:
        t = self.target
        parts = buf.partitions
        if not (parts <= t.sbuf_partitions):
            raise NKIRuleError(
                "partition-dim-limit",
                instruction,
                f"{buf.region.value} tensor {buf.name} {buf.shape} has {parts} partitions; "
                f"the limit is {t.sbuf_partitions} (partition dim = axis {buf.pdim})",
            )
        bpp = buf.bytes_per_partition
        if buf.region is MemoryRegion.sbuf:
            need = self.sbuf_live + bpp
            if not (need <= self.sbuf_capacity):
                raise NKIRuleError(
                    "sbuf-capacity",
                    instruction,
                    f"allocating {buf.name} {buf.shape} {dtypes.name(buf.dtype)} ({bpp} B per "
                    f"partition) needs {need} B per partition of SBUF but {t.name} leaves kernels "
                    f"{self.sbuf_capacity} B ({self.sbuf_live} B already live)",
                )
            self.sbuf_live = need
            self.sbuf_peak = max(self.sbuf_peak, need)
            weakref.finalize(buf, self._release, buf.id, bpp, 0)
        else:
            bank = t.psum_bank_bytes_per_partition
            banks = max(1, math.ceil(bpp / bank))
            need = self.psum_banks_live + banks
            if not (need <= t.psum_banks):
                raise NKIRuleError(
                    "psum-capacity",
                    instruction,
                    f"allocating {buf.name} {buf.shape} {dtypes.name(buf.dtype)} needs {banks} PSUM "
                    f"bank(s) but only {t.psum_banks - self.psum_banks_live} of {t.psum_banks} "
                    f"({bank} B per partition each) are free",
                )
            self.psum_banks_live = need
            self.psum_banks_peak = max(self.psum_banks_peak, need)
            weakref.finalize(buf, self._release, buf.id, 0, banks)

    def _release(self, buffer_id: int, sbuf_bytes: int, psum_banks: int) -> None:
        self.sbuf_live -= sbuf_bytes
        self.psum_banks_live -= psum_banks
        self.scheduler.forget(buffer_id)

    # ---- instructions ---------------------------------------------------------------------
    def issue(
        self,
        name: str,
        engine: str,
        seconds: float,
        reads: tuple[NkiTensor, ...] | list[NkiTensor] = (),
        writes: tuple[NkiTensor, ...] | list[NkiTensor] = (),
        flops: float = 0.0,
        nbytes: int = 0,
        produces: str | None = None,
    ) -> float:
        """Charge one instruction to ``engine``; return its end time. ``produces`` marks the
        written tiles as fresh results of that kind (for assignment/accumulation)."""
        loc = user_location()
        rec = self.scheduler.issue(
            name,
            engine,
            self.core,
            seconds,
            [t.dep_box() for t in reads if isinstance(t, NkiTensor)],
            [t.dep_box() for t in writes],
            program=self.program,
            flops=flops,
            nbytes=nbytes,
            location=f"{loc.filename}:{loc.lineno}" if loc else "",
        )
        for t in reads:
            if isinstance(t, NkiTensor):
                t._buf.producer = None
        for t in writes:
            t._buf.producer = (rec.end, produces) if produces else None
        return rec.end


# ---- assignment: t[...] = value, t[...] += value ---------------------------------------------
def assign(dst: NkiTensor, value: Any, accumulate: bool = False) -> None:
    """Write ``value`` into the view ``dst`` the way the NKI compiler would."""
    launch = current()
    instr = "tensor assignment"
    if isinstance(value, NkiTensor):
        src = value
        if dst.buffer.is_hbm or src.buffer.is_hbm:
            from .language import _dma

            _dma("nl.store" if dst.buffer.is_hbm else "nl.load", dst, src)
            return
        try:
            np.broadcast_shapes(src.shape, dst.shape)
        except ValueError:
            raise NKIRuleError(
                "shape-mismatch",
                instr,
                f"cannot assign a {list(src.shape)} tile to {dst.name}{list(dst.shape)}",
            ) from None
        prod = src._buf.producer
        vals = src.read(instr)
        if accumulate:
            bank = launch.target.psum_bank_bytes_per_partition
            check(
                dst.free_bytes <= bank,
                "psum-tile-size",
                "nisa.nc_matmul",
                f"accumulation target {dst.name}{list(dst.shape)} holds {dst.free_bytes} B per partition; a PSUM tile holds at most {bank} B",
            )
            vals = dst.read(instr) + np.broadcast_to(vals, dst.shape)
        if prod is not None:
            # the producing instruction wrote straight into dst: no extra instruction
            dst.write(vals, instr)
            bid, box = dst.dep_box()
            launch.scheduler.note_write(bid, box, prod[0])
            src._buf.producer = None
            return
        fs = dst.free_size
        launch.issue(
            "nisa.tensor_copy",
            "vector",
            vector_seconds(launch.target, fs),
            reads=[src],
            writes=[dst],
        )
        dst.write(vals, instr)
        return
    if isinstance(value, (int, float, bool, np.number, np.bool_)) or (
        isinstance(value, np.ndarray)
    ):
        check(
            dst.buffer.on_chip,
            "compute-on-hbm",
            "nisa.memset",
            f"cannot fill HBM tensor {dst.name} from a compute engine; store an SBUF tile instead",
        )
        launch.issue(
            "nisa.memset", "vector", vector_seconds(launch.target, dst.free_size), writes=[dst]
        )
        dst.write(value, instr)
        return
    raise NKIRuleError("unsupported", instr, f"cannot assign a {type(value).__name__} to a tile")


# ---- kernels and launching --------------------------------------------------------------------
def _to_tensor(launch: Launch, obj: Any, name: str, inputs: list) -> Any:
    if isinstance(obj, np.ndarray) or (
        hasattr(obj, "__array__") and not isinstance(obj, NkiTensor)
    ):
        arr = np.asarray(obj)
        dtype = dtypes.normalize(arr.dtype)
        buf = launch.allocate(
            arr.shape, dtype, MemoryRegion.hbm, name=name, data=dtypes.to_storage(arr, dtype).copy()
        )
        inputs.append((obj, buf))
        return NkiTensor(buf)
    if isinstance(obj, (tuple, list)):
        conv = [_to_tensor(launch, o, f"{name}[{i}]", inputs) for i, o in enumerate(obj)]
        return type(obj)(conv)
    return obj


def _to_numpy(launch: Launch, obj: Any, input_bufs: set[int]) -> Any:
    if isinstance(obj, NkiTensor):
        check(
            obj.buffer is MemoryRegion.shared_hbm or obj._buf.root.id in input_bufs,
            "kernel-output-buffer",
            "return",
            f"kernel returns {obj.name} from {obj.buffer.value}; kernel outputs must be allocated "
            "with buffer=nl.shared_hbm",
        )
        return dtypes.from_storage(obj.read("return"), obj.dtype)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to_numpy(launch, o, input_bufs) for o in obj)
    if isinstance(obj, dict):
        return {k: _to_numpy(launch, v, input_bufs) for k, v in obj.items()}
    return obj


def _normalize_grid(grid: Any) -> tuple[int, ...]:
    if grid is None or grid == ():
        return ()
    if not isinstance(grid, tuple):
        grid = (grid,)
    out = []
    for g in grid:
        n = int(g)
        if n < 1:
            raise NKIRuleError(
                "launch", "kernel[grid]", f"grid dimensions must be >= 1, got {grid}"
            )
        out.append(n)
    return tuple(out)


def run(
    func: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    grid: tuple[int, ...] = (),
    target: Target | str | None = None,
    lnc: int | None = None,
) -> tuple[Any, Profile]:
    """Run ``func`` on every program of ``grid``; return (numpy results, profile)."""
    tgt = resolve_target(target, lnc)
    with single_threaded_blas():
        return _run_launch(func, args, kwargs, grid, tgt)


def _run_launch(
    func: Callable[..., Any], args: tuple, kwargs: dict, grid: tuple[int, ...], tgt: Target
) -> tuple[Any, Profile]:
    global _last_profile
    launch = Launch(tgt, grid)
    inputs: list = []
    _stack.append(launch)
    try:
        t_args = tuple(_to_tensor(launch, a, f"arg{i}", inputs) for i, a in enumerate(args))
        t_kwargs = {k: _to_tensor(launch, v, k, inputs) for k, v in kwargs.items()}
        result: Any = None
        programs = list(itertools.product(*(range(g) for g in grid))) if grid else [()]
        for p, pid in enumerate(programs):
            launch.program = pid
            launch.core = p % tgt.lnc
            launch._shared_next = 0
            launch.reduce_regs.clear()
            r = func(*t_args, **t_kwargs)
            if p == 0:
                result = r
        input_ids = {buf.root.id for _, buf in inputs}
        out = _to_numpy(launch, result, input_ids)
        # kernels may write into tensors they were given: copy those back to the caller
        for obj, buf in inputs:
            if buf.written and isinstance(obj, np.ndarray) and obj.flags.writeable:
                np.copyto(
                    obj, dtypes.from_storage(buf.data, buf.dtype).astype(obj.dtype, copy=False)
                )
    finally:
        _stack.pop()
    _last_profile = launch.scheduler.profile
    return out, launch.scheduler.profile


def _torch_args(args: tuple, kwargs: dict) -> bool:
    """Any torch.Tensor among the arguments? (never imports torch itself)"""
    if "torch" not in sys.modules:
        return False
    from .torch_integration import has_torch_tensor

    return has_torch_tensor(args, kwargs)


class Kernel:
    """A jitted NKI kernel. ``kernel[g0, g1]`` sets the SPMD grid; calling it simulates."""

    def __init__(
        self, func: Callable[..., Any], grid: tuple[int, ...] = (), **options: Any
    ) -> None:
        self.func = func
        self.grid = grid
        self.options = options
        functools.update_wrapper(self, func)

    def __getitem__(self, grid: Any) -> Kernel:
        return Kernel(self.func, _normalize_grid(grid), **self.options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if in_launch():  # a kernel calling another kernel: just inline it
            return self.func(*args, **kwargs)
        if _torch_args(args, kwargs):  # torch tensors in, torch tensors out
            from .torch_integration import call_kernel

            return call_kernel(self, *args, **kwargs)
        out, _ = run(self.func, args, kwargs, self.grid, self.options.get("target"))
        return out

    def __repr__(self) -> str:
        g = f"[{', '.join(map(str, self.grid))}]" if self.grid else ""
        return f"<nki kernel {self.func.__name__}{g}>"


def jit(func: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@nki.jit`` / ``@nki.jit(...)``: mark a kernel. Options such as ``mode`` or
    ``platform_target`` are accepted and ignored; ``target="trn3"`` picks the simulated chip."""
    if func is None:
        return lambda f: Kernel(f, **options)
    if isinstance(func, Kernel):
        return func
    return Kernel(func, **options)


def _unwrap(kernel: Any) -> tuple[Callable[..., Any], tuple[int, ...]]:
    if isinstance(kernel, Kernel):
        return kernel.func, kernel.grid
    if callable(kernel):
        return kernel, ()
    raise TypeError(f"{kernel!r} is not a kernel")


def simulate(
    kernel: Any,
    target: Target | str | None = None,
    return_profile: bool = False,
    lnc: int | None = None,
) -> Callable[..., Any]:
    """``nki.simulate(kernel)(*arrays)``: run ``kernel`` on the simulator; with
    ``return_profile=True`` the call returns ``(results, Profile)``."""
    func, grid = _unwrap(kernel)

    def call(*args: Any, **kwargs: Any) -> Any:
        if _torch_args(args, kwargs):  # torch tensors in, torch tensors out
            from .torch_integration import call_kernel

            return call_kernel(
                Kernel(func, grid), *args, target=target, lnc=lnc,
                return_profile=return_profile, **kwargs,
            )
        out, prof = run(func, args, kwargs, grid, target, lnc)
        return (out, prof) if return_profile else out

    return call


def simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """Legacy entry point: ``nki.simulate_kernel(kernel[grid], *arrays)``."""
    func, grid = _unwrap(kernel)
    out, _ = run(func, args, kwargs, grid)
    return out
