"""Compiling StableHLO into the simulated chip's executable format and running it.

The executable is an IREE ``.vmfb`` flatbuffer built for the host CPU (``llvm-cpu``), playing
the role of a NEFF. It runs on device memory: each input ``neuron`` tensor is passed to the
runtime through DLPack on its host alias (``storage.host``), so IREE reads the device bytes in
place; each result buffer comes back through DLPack and is adopted as a new device allocation
(``storage.wrap_host``). No byte is copied unless an input is not dense (it is compacted) or
its dtype is one the chip computes in a narrower type (int64/float64, converted at the boundary).
The C++ module of the eager fast path makes the aliases and adopts the results while it is on
(``host_aliases``, ``adopt_results`` in ``native/fast_kernels.cpp``): in Python that cost 5-15 us
a value, ~9 ms of ResNet-18's ~90 ms training step with its 34 program calls; what it leaves
(a cast, a misaligned view, a result beyond the memory capacity) takes the Python path.
"""

from __future__ import annotations

import re
import signal
import statistics
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

import torch

from ..native import fast
from ..ops import dtype_policy
from ..runtime import activity, devices
from ..runtime.errors import NeuronRuntimeError
from ..runtime.host_threads import release_openmp_workers
from ..runtime.storage import host, wrap_host
from . import settings

BASE_FLAGS = ("--iree-llvmcpu-target-cpu=host",)
# im2col turns convolutions into matmuls: ~4x faster ResNet-18 inference than IREE's direct
# NCHW convolutions on this host (measured, IREE 3.13). IREE 3.13's im2col rewrite miscompiles
# grouped convolutions (a depthwise 3x3 conv fails with "'linalg.batch_matvec' op inferred
# input/output operand #1 has shape's dimension #0 to be 64, but found 16"), so a module with a
# grouped convolution is compiled without it.
IM2COL_FLAG = "--iree-global-opt-use-im2col-for-convs"
# Data tiling with microkernels: matmuls run on packed (mmt4d) tiles. Training programs of the
# GPT-2-style LM of bench/compile.py: backward 160 -> 98 ms, forward 70 -> 53 ms (IREE 3.13, this
# host). IREE rejects it for some programs; those are compiled again without it (see
# ``compile_stablehlo``). Programs with convolutions leave it out: with im2col it made ResNet-18
# inference slower (243 against 202 ms). TORCHNEURON_DATA_TILING=0 leaves it out everywhere.
# Two of IREE's code-generation guards reject some tiled dispatches of training programs (a
# 33 KiB stack frame; a 16 KiB vector); the task system's workers have 128 KiB stacks.
# Data tiling starts in IREE's global optimization phase: ``--iree-opt-data-tiling`` picks the
# dispatch-creation path, which in IREE 3.13 miscompiles a batched matmul whose right-hand
# side is ``k - k.mean(-1)`` transposed, for most widths of k other than 1, 2, 4, 8, 16 (errors
# of ~40 in outputs of ~10: MViT's pooled attention after its key norm); the global
# optimization path computes it exactly (tests/compiler/test_data_tiling.py).
TILING_FLAGS = ("--iree-global-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=all",
                "--iree-llvmcpu-stack-allocation-limit=65536", "--iree-llvmcpu-fail-on-large-vector=false")
_GROUPED_CONV = re.compile(r"(feature|batch)_group_count = (\d+)")
# the chip computes float64 as float32 and int64 as int32 (ops/dtype_policy.py)
DEMOTE_FLAGS = ("--iree-input-demote-f64-to-f32", "--iree-input-demote-i64-to-i32")
_NARROW = {torch.float64: torch.float32, torch.int64: torch.int32}
_DLPACK_CPU = 1
_ALIGNMENT = 64


def compiler_version() -> str:
    from iree.compiler.version import VERSION

    return VERSION


def compile_flags(stablehlo: str = "") -> tuple[str, ...]:
    """IREE flags for a module (its StableHLO text decides whether im2col is safe)."""
    grouped = any(int(m.group(2)) > 1 for m in _GROUPED_CONV.finditer(stablehlo))
    flags = BASE_FLAGS if grouped else BASE_FLAGS + (IM2COL_FLAG,)
    if settings.data_tiling() and "stablehlo.convolution" not in stablehlo:
        flags += TILING_FLAGS
    return flags if dtype_policy.exact() else flags + DEMOTE_FLAGS


def boundary_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype in which a tensor of ``dtype`` crosses the executable's boundary."""
    if dtype_policy.exact():
        return dtype
    return _NARROW.get(dtype, dtype)


class IreeCompileError(RuntimeError):
    def __init__(self, message: str, log: str, seconds: float = 0.0, killed: bool = False):
        super().__init__(message)
        self.log = log
        self.seconds = seconds
        # the compiler was stopped from outside (the OOM killer's SIGKILL, a timeout): may not recur;
        # a crash of its own (SIGFPE, SIGSEGV, SIGABRT …) recurs for the same input
        self.killed = killed


@dataclass
class CompileResult:
    vmfb: bytes
    log: str
    seconds: float


def compile_stablehlo(text: str, flags: tuple[str, ...]) -> CompileResult:
    """``iree.compiler.compile_str(text, target_backends=["llvm-cpu"], input_type="stablehlo",
    extra_args=flags)``, run so that the compiler's diagnostics are captured into the log.

    When ``flags`` ask for data tiling and IREE fails with it, the program is compiled again
    without it; the log holds both attempts. The result depends only on the text and flags, so
    it is cached under them like any other."""
    try:
        return _run_compiler(text, flags)
    except IreeCompileError as tiled_err:
        plain = tuple(f for f in flags if f not in TILING_FLAGS)
        if plain == flags:
            raise
        note = tiled_err.log + "[data tiling failed for this program; compiled again without it]\n"
        try:
            result = _run_compiler(text, plain)
        except IreeCompileError as err:
            raise IreeCompileError(str(err), note + err.log, killed=err.killed) from None
        return CompileResult(result.vmfb, note + result.log, result.seconds + tiled_err.seconds)


def _run_compiler(text: str, flags: tuple[str, ...]) -> CompileResult:
    from iree.compiler.tools.core import CompilerOptions, build_compile_command_line
    from iree.compiler.tools.debugging import TempFileSaver

    options = CompilerOptions(target_backends=["llvm-cpu"], input_type="stablehlo", extra_args=list(flags))
    with TempFileSaver.implicit() as tfs:
        cmd = build_compile_command_line("-", tfs, options)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, input=text.encode(), capture_output=True, check=False)
    seconds = time.perf_counter() - t0
    log = "$ " + " ".join(cmd) + "\n" + proc.stderr.decode(errors="replace")
    log += f"\n[exit {proc.returncode}, {seconds:.3f} s]\n"
    if proc.returncode != 0:
        first = next((ln for ln in proc.stderr.decode(errors="replace").splitlines() if "error" in ln), "")
        if proc.returncode < 0:
            first = f"the compiler died of signal {-proc.returncode} ({_signal_name(-proc.returncode)})"
        raise IreeCompileError(f"IREE compilation failed: {first.strip()}", log, seconds,
                               killed=-proc.returncode in _STOPPED_FROM_OUTSIDE)
    return CompileResult(proc.stdout, log, seconds)


# signals that stop the compiler from outside; any other is a crash of the compiler's own
_STOPPED_FROM_OUTSIDE = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"


class _Staging(threading.local):
    active = False


# set by adaptive eager while a fused window runs: its results are copied into the buffers the
# recorder allocated (the chip writes them there directly), so they are staging, not memory
_staging = _Staging()


@contextmanager
def results_into_destinations():
    prev = _staging.active
    _staging.active = True
    try:
        yield
    finally:
        _staging.active = prev


class _Runtime:
    """One IREE instance and HAL device per process (the simulated NeuronCore)."""

    def __init__(self, driver: str):
        import iree.runtime as ir
        from iree._runtime_libs import _runtime

        # executables live as long as Dynamo's caches, i.e. until interpreter shutdown, which
        # nanobind would otherwise report as leaks
        getattr(_runtime, "disable_leak_checker", lambda: None)()
        self.ir = ir
        self.config = ir.Config(driver)
        self.instance = self.config.vm_instance
        self.device = self.config.device
        self.driver = driver
        self.threaded = driver == "local-task"  # programs run on IREE's own worker threads


@cache
def _runtime(driver: str) -> _Runtime:
    return _Runtime(driver)


class _Context:
    """A program loaded into one runtime (driver): its module in a VM context."""

    def __init__(self, rt: _Runtime, vmfb: bytes):
        ir = rt.ir
        self.rt = rt
        self.module = ir.VmModule.copy_buffer(rt.instance, vmfb)
        self.context = ir.VmContext(rt.instance, modules=[ir.create_hal_module(rt.instance, rt.device), self.module])


# With TORCHNEURON_IREE_DRIVER=auto (the default) a program is loaded into both drivers and each
# function's first calls alternate between them; after _TIMED_CALLS timed calls on each (the first
# call of each is not timed: IREE loads the code lazily) the driver with the lower median keeps
# that function. Measured on ResNet-18 (bench/compile.py --only resnet): its many small regions
# (batch norm, ReLU, additions between library convolutions) run faster on the calling thread
# (`local-sync`, inference 30.7 against 48.3 ms), the LM's large matmuls on IREE's worker threads
# (`local-task`). Both drivers run the same compiled code: the results are the same whichever is
# chosen.
_AUTO_DRIVERS = ("local-task", "local-sync")
_TIMED_CALLS = 3


class Program:
    """A ``.vmfb`` loaded for execution: one VM context per driver, shared by its functions
    (a program linked from many regions holds one function per region, ``linker.py``)."""

    def __init__(self, vmfb: bytes, name: str = "program"):
        driver = settings.runtime_driver()
        drivers = _AUTO_DRIVERS if driver == "auto" else (driver,)
        self.name = name
        self.vmfb = vmfb
        self.contexts = [_Context(_runtime(d), vmfb) for d in drivers]
        self.lock = threading.Lock()  # a VM context is not re-entrant

    def __reduce__(self):
        # pickled as its bytes: loading it again in another process is the whole rebuild
        # (caching precompile, precompile.py)
        return (Program, (self.vmfb, self.name))


class _Loaded:
    """One function of a program in one driver's context, with its timed calls."""

    def __init__(self, ctx: _Context, function: str, name: str):
        self.rt = ctx.rt
        self.context = ctx.context
        self.function = ctx.module.lookup_function(function)
        if self.function is None:
            raise RuntimeError(f"executable {name} has no function {function!r}")
        self.seconds: list[float] = []  # timed calls while the driver is being chosen


class Executable:
    """One function of a loaded program: call it with device tensors, get device tensors back.
    ``program`` may be the ``.vmfb`` itself (a program of its own)."""

    def __init__(self, program: Program | bytes, in_dtypes: list[torch.dtype], out_dtypes: list[torch.dtype],
                 name: str = "region", function: str = "main"):
        if not isinstance(program, Program):
            program = Program(program, name)
        self.name = name
        self.program = program
        self._args = (list(in_dtypes), list(out_dtypes), name, function)
        self._candidates = [_Loaded(ctx, function, name) for ctx in program.contexts]
        self._calls = 0
        self._in_cast = [boundary_dtype(d) if boundary_dtype(d) != d else None for d in in_dtypes]
        self._out_dtypes = list(out_dtypes)
        self._lock = program.lock

    def __reduce__(self):
        return (Executable, (self.program, *self._args))

    @property
    def driver(self) -> str | None:
        """The IREE driver running this executable (None while it is still being chosen)."""
        return self._candidates[0].rt.driver if len(self._candidates) == 1 else None

    def _next(self) -> _Loaded:
        return self._candidates[self._calls % len(self._candidates)]

    def _timed(self, loaded: _Loaded, seconds: float) -> None:
        """Account one call while choosing; keep the faster driver once all have been timed."""
        if self._calls >= len(self._candidates):  # not the first call of this driver
            loaded.seconds.append(seconds)
        self._calls += 1
        if all(len(c.seconds) >= _TIMED_CALLS for c in self._candidates):
            self._candidates = [min(self._candidates, key=lambda c: statistics.median(c.seconds))]

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        with self._lock:
            return self._call(self._next(), inputs)

    def _call(self, loaded: _Loaded, inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
        ir, device = loaded.rt.ir, loaded.rt.device
        to_dlpack = torch.utils.dlpack.to_dlpack
        args = ir.VmVariantList(len(inputs))
        keep = []  # host tensors that the runtime reads must outlive the call
        core = -1  # the results go to the core of the device inputs
        native = fast.boundary()
        marshalled = native.host_aliases(inputs) if native is not None else None
        if marshalled is not None:  # the C++ path: aliases of the inputs IREE reads as they are
            aliases, core = marshalled
        else:
            aliases = [None] * len(inputs)
        for t, cast, h in zip(inputs, self._in_cast, aliases, strict=True):
            if h is not None and cast is None:
                keep.append(h)
                args.push_ref(device.from_dlpack_capsule(to_dlpack(h)))
                continue
            if t.device.type == "neuron":
                h = host(t)
                if core < 0:
                    core = t.get_device()
            else:
                h = t
            if h.dtype is torch.bool:
                h = h.view(torch.int8)  # passes.bool_inputs_as_bytes: the program reads bytes
            elif cast is not None:
                h = h.to(cast)
            if not h.is_contiguous():
                h = h.contiguous()
            elif h.numel() == 0:
                h = h.new_empty(h.shape)  # an empty view keeps its base's strides, which IREE rejects
            elif h.data_ptr() % _ALIGNMENT:
                h = h.clone()  # IREE imports host buffers aligned to 64 bytes only (a view's offset)
            keep.append(h)
            args.push_ref(device.from_dlpack_capsule(to_dlpack(h)))
        results = ir.VmVariantList(len(self._out_dtypes))
        if loaded.rt.threaded:
            release_openmp_workers()  # IREE's workers get both cores (runtime/host_threads.py)
        t0 = time.perf_counter_ns()
        try:
            loaded.context.invoke(loaded.function, args, results)
        except Exception as err:  # noqa: BLE001 - report the executable that failed
            raise NeuronRuntimeError(f"compiled executable {self.name} failed on the device: {err}") from err
        if len(self._candidates) > 1:
            self._timed(loaded, (time.perf_counter_ns() - t0) * 1e-9)
        outs = []
        # IREE returns one buffer for results that are one value (two ``zeros_like`` folded into one
        # splat) and an argument's own buffer for a result that is that argument: each output must own
        # its memory, or writing to one changes the other
        taken = {h.data_ptr() for h in keep if h.numel()}
        hosts = []
        for i, dtype in enumerate(self._out_dtypes):
            view = results.get_as_object(i, ir.HalBufferView)
            h = torch.from_dlpack(device.create_dlpack_capsule(view, _DLPACK_CPU, 0))
            if h.dtype != dtype:
                h = h.to(dtype)  # dtype restored after 32-bit compute
            elif h.numel():
                if h.data_ptr() in taken:
                    h = h.clone()
                taken.add(h.data_ptr())
            hosts.append(h)
        index = core if core >= 0 else devices.current()
        adopted = native.adopt_results(hosts, index) if native is not None and not _staging.active else None
        for i, h in enumerate(hosts):
            o = adopted[i] if adopted is not None else None
            outs.append(o if o is not None else wrap_host(h, counted=not _staging.active, index=index))
        if activity.RECORDER is not None:
            activity.RECORDER.record("executable", self.name, tuple(keep), [host(o) for o in outs], t0, time.perf_counter_ns())
        return outs
