"""The device hooks PyTorch's Python PrivateUse1 hook class cannot express (a small C++ module).

PyTorch 2.14's Python hooks (``torch._C._acc.PrivateUse1Hooks``) forward only ``is_built``,
``is_available`` and ``has_primary_context`` to Python. The rest have no Python route:

* ``getPinnedMemoryAllocator`` / ``isPinnedPtr`` — DDP's Reducer stages its used-parameter map
  in pinned host memory on PrivateUse1 devices (``find_unused_parameters=True``,
  ``static_graph=True``), and ``pin_memory=True`` anywhere (DataLoader) needs it;
* ``resizePrivateUse1Bytes`` — ``UntypedStorage.resize_`` on a ``neuron`` storage, which FSDP2
  uses to free and re-allocate unsharded parameters;
* the device guard — a device count above 1 and a per-thread current core (the Python guard's
  count is fixed at 1 and its current device at 0), and ``empty(dtype, index)``, the tensor
  shell of a ``neuron:index`` tensor (see :mod:`torchneuron.runtime.devices`);
* ``getNewGenerator`` / ``getDefaultGenerator`` — ``torch.Generator(device="neuron")`` (diffusers
  pipelines and many scripts pass one as ``generator=``), ``torch.neuron.default_generators``
  and ``torch.accelerator``'s RNG functions. A neuron generator is a shell around a CPU
  generator that holds its state (:func:`host_generator`), since the device's random kernels are
  the host's; core ``i``'s default one wraps :func:`torchneuron.runtime.rng.generator` ``(i)``.

``neuron_hooks.cpp`` (next to this file) implements one C++ hook object that keeps the
Python hook object as the authority for its three methods and adds the rest; the storage
resize calls back into :func:`_resize_storage` below, so device memory stays owned and
accounted by the Python caching allocator. PyTorch accepts a single hook registration per
process, so the C++ object must be registered *before* the Python one: ``torchneuron``'s
registration calls :func:`install` first.

Build: with the C++ compiler (``CXX`` or ``c++``/``g++``) at first use, cached by a hash of the
source, torch version, Python version and flags under ``TORCHNEURON_CACHE_DIR``/``native``
(a build already in the default ``~/.cache/torchneuron/native`` is used as it is); ``make
install`` builds it ahead of time (``python -m torchneuron.native build``, which also builds the
C++ eager kernels of :mod:`torchneuron.native.fast`). Without a compiler (or with ``TORCHNEURON_NATIVE=0``)
the device runs with the Python hooks alone and :func:`status` says why; the operations that
need the missing hooks then fail with PyTorch's "implement getPinnedMemoryAllocator /
resizePrivateUse1Bytes / getNewGenerator" error, and ``torchneuron.distributed`` warns once when a process group
is created.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("neuron_hooks.cpp")
MODULE = "_neuron_hooks"
CXXFLAGS = ["-O2", "-shared", "-fPIC", "-std=c++20", "-DTORCH_API_INCLUDE_EXTENSION_H"]

_state: dict = {"installed": False, "reason": "not attempted", "path": None, "module": None}


# ---- status -------------------------------------------------------------------------------------
def available() -> bool:
    """Whether the native hooks are registered in this process."""
    return bool(_state["installed"])


def status() -> dict:
    """``{"installed": bool, "reason": str, "path": str | None}``."""
    return {k: _state[k] for k in ("installed", "reason", "path")}


def pinned_stats() -> dict:
    """Live pinned host memory handed out by the hooks' allocator (bytes, blocks, allocations)."""
    mod = _state["module"]
    if mod is None:
        return {"bytes": 0, "blocks": 0, "allocations": 0}
    return mod.pinned_stats()


def host_generator(g: torch.Generator) -> torch.Generator:
    """The CPU generator that holds the state of the neuron generator ``g`` (shared, not copied).

    The host kernels that execute the device's random operators take it in place of ``g``.
    """
    mod = _state["module"]
    if mod is None or not _state["installed"]:
        raise RuntimeError(missing_message("a neuron torch.Generator"))
    return mod.host_generator(g)


def default_generator(index: int = 0) -> torch.Generator:
    """Core ``index``'s default generator (``torch.neuron.default_generators[index]``)."""
    if not _state["installed"]:
        raise RuntimeError(missing_message("torch.neuron.default_generators"))
    return _state["module"].default_generator(index)


# ---- build --------------------------------------------------------------------------------------
def _cache_roots() -> list[Path]:
    """Where built modules are looked for: under ``TORCHNEURON_CACHE_DIR`` (built there when
    missing everywhere), then the default cache, which ``make install`` fills — a process given
    a private compile cache (tests, sweeps) need not rebuild the same module."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    default = Path(base) / "torchneuron" / "native"
    d = os.environ.get("TORCHNEURON_CACHE_DIR")
    if d and Path(d) / "native" != default:
        return [Path(d) / "native", default]
    return [default]


def _compiler() -> str | None:
    cxx = os.environ.get("CXX")
    if cxx:
        return shutil.which(cxx)
    for name in ("c++", "g++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _torch_dirs() -> tuple[Path, Path]:
    root = Path(torch.__file__).resolve().parent
    return root / "include", root / "lib"


def _key(cxx: str, source: Path = SOURCE) -> str:
    h = hashlib.sha256()
    h.update(source.read_bytes())
    h.update(repr((torch.__version__, sys.version, sysconfig.get_platform(), cxx, CXXFLAGS,
                   torch.compiled_with_cxx11_abi(), str(_torch_dirs()[0]))).encode())
    return h.hexdigest()[:20]


def _command(cxx: str, out: Path, source: Path = SOURCE) -> list[str]:
    inc, lib = _torch_dirs()
    abi = int(torch.compiled_with_cxx11_abi())
    return [
        cxx, *CXXFLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        f"-I{inc}", f"-I{sysconfig.get_paths()['include']}",
        str(source), "-o", str(out),
        f"-L{lib}", "-lc10", "-ltorch_cpu", "-ltorch_python", f"-Wl,-rpath,{lib}",
    ]


def build(force: bool = False, source: Path = SOURCE, module: str = MODULE) -> Path:
    """Compile ``source`` (default ``neuron_hooks.cpp``) into the cache as extension module
    ``module`` (once per source/torch/Python); its path."""
    cxx = _compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler found (set CXX or install g++)")
    key = _key(cxx, source)
    name = f"{module}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"
    if not force:
        for root in _cache_roots():
            if (root / key / name).exists():
                return root / key / name
    target_dir = _cache_roots()[0] / key
    target = target_dir / name
    target_dir.mkdir(parents=True, exist_ok=True)
    import fcntl

    with open(target_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # ranks started together build once
        try:
            if target.exists() and not force:
                return target
            fd, tmp = tempfile.mkstemp(dir=target_dir, suffix=".so.tmp")
            os.close(fd)
            try:
                proc = subprocess.run(_command(cxx, Path(tmp), source), capture_output=True, text=True)
                if proc.returncode != 0:
                    raise RuntimeError(
                        f"building {source.name} failed ({' '.join(_command(cxx, Path(tmp), source))}):\n"
                        + (proc.stderr or proc.stdout)[-3000:]
                    )
                os.replace(tmp, target)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target


def _load(path: Path, module: str = MODULE):
    spec = importlib.util.spec_from_file_location(f"torchneuron.native.{module}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_once(state: dict, source: Path, module: str, disabled: str | None):
    """The extension ``module`` built from ``source``, loaded once into ``state`` (``loaded``,
    ``reason``, ``module``); None when ``disabled`` names why it is switched off, or when it
    cannot be built or loaded (``state["reason"]`` says why)."""
    if state["loaded"] or state["reason"] != "not attempted":
        return state["module"]
    if disabled is not None:
        state["reason"] = disabled
        return None
    try:
        state["module"] = _load(build(source=source, module=module), module)
    except Exception as e:  # noqa: BLE001  (no compiler, failed build, ABI mismatch ...)
        state["reason"] = f"{type(e).__name__}: {e}"
        return None
    state["loaded"] = True
    state["reason"] = "loaded"
    return state["module"]


# ---- the storage resize, called by the C++ hook ---------------------------------------------------
def _resize_storage(st: torch.UntypedStorage, nbytes: int) -> int:
    """Give the neuron storage ``st`` ``nbytes`` bytes; returns the new host address (0 if none).

    The old allocation's first ``min(old, new)`` bytes are kept (``resize_`` semantics). The
    storage's :class:`~torchneuron.runtime.memory.Block` is replaced, so the old bytes return to
    the allocator and ``memory_allocated`` stays exact; the C++ hook then re-points the same
    StorageImpl, which every view of it shares.
    """
    from ..runtime import lazy, state
    from ..runtime import storage as rs

    if lazy.FLUSH is not None:
        lazy.FLUSH()  # recorded work must land in the old bytes before they move
    d = st.__dict__
    old = rs.storage_block(st)
    if nbytes == 0:
        d.pop(rs._BLOCK, None)
        return 0
    block = state.allocator(st.device.index or 0).allocate(nbytes)
    if old is not None:
        n = min(old.nbytes, nbytes)
        if n:
            rs._flat(block, torch.uint8)[:n].copy_(rs._flat(old, torch.uint8)[:n])
    d[rs._BLOCK] = block
    return block.host.data_ptr()


# ---- install ------------------------------------------------------------------------------------
def install(python_hooks) -> bool:
    """Build (or find) and register the C++ hooks around ``python_hooks``; False if impossible.

    Must run before ``torch.utils.backend_registration`` registers the Python hooks.
    """
    if _state["installed"]:
        return True
    if os.environ.get("TORCHNEURON_NATIVE", "1") in ("0", "false", "False", "off"):
        _state["reason"] = "disabled by TORCHNEURON_NATIVE=0"
        return False
    from ..runtime import devices, rng, state

    try:
        count = devices.configured_count(state.target())
    except ValueError:
        count = 1  # a bad TORCHNEURON_TARGET / _LNC: raised with its message where the target is used
    try:
        path = build()
        mod = _load(path)
        ok = mod.install(python_hooks, _resize_storage, rng.init(count), _synchronize,
                         devices.default_index(count))
    except Exception as e:  # noqa: BLE001  (no compiler, failed build, ABI mismatch ...)
        _state["reason"] = f"{type(e).__name__}: {e}"
        return False
    _state["path"] = str(path)
    _state["module"] = mod
    if not ok:
        _state["reason"] = "PrivateUse1 hooks were already registered by someone else"
        return False
    _state["installed"] = True
    _state["reason"] = "installed"
    devices.attach(mod)
    return True


def _synchronize(index: int) -> None:
    """The device guard's ``synchronizeDevice`` (``torch.accelerator.synchronize``, streams)."""
    from ..runtime.queue import QUEUE

    QUEUE.synchronize()


def missing_message(feature: str) -> str:
    return (
        f"{feature} needs torchneuron's native device hooks (pinned host memory, storage "
        f"resize and device generators), which are not installed in this process: {_state['reason']}. Install a C++ "
        "compiler (g++) and re-import, or run `python -m torchneuron.native build`."
    )


__all__ = ["available", "status", "build", "install", "pinned_stats", "missing_message",
           "host_generator", "default_generator"]
