"""The C++ fast path of the device's eager kernels (``fast_kernels.cpp``): build and load.

The module runs the plain operators' host kernels on device memory without entering Python and
keeps the device's memory accounts (see the C++ source's header). It is built like the device
hooks (``make install`` ahead of time, otherwise at first use, cached under
``TORCHNEURON_CACHE_DIR``/native). Without a compiler, with ``TORCHNEURON_NATIVE=0`` or with
``TORCHNEURON_NATIVE_KERNELS=0`` every operator runs through its Python kernel, which gives the
same results more slowly; :func:`status` says which is in use and why.
"""

from __future__ import annotations

import os
from pathlib import Path

SOURCE = Path(__file__).with_name("fast_kernels.cpp")
MODULE = "_neuron_fast"
_OFF = ("0", "false", "False", "off")

_state: dict = {"loaded": False, "reason": "not attempted", "module": None}


def _disabled_by_env() -> str | None:
    for var in ("TORCHNEURON_NATIVE", "TORCHNEURON_NATIVE_KERNELS"):
        if os.environ.get(var, "1") in _OFF:
            return f"disabled by {var}=0"
    return None


def build(force: bool = False) -> Path:
    from . import build as build_native

    return build_native(force=force, source=SOURCE, module=MODULE)


def module():
    """The loaded C++ module, or None (not buildable, or switched off)."""
    from . import load_once

    return load_once(_state, SOURCE, MODULE, _disabled_by_env())


def status() -> dict:
    """``{"loaded": bool, "reason": str, "operators": int}``."""
    return {k: _state[k] for k in ("loaded", "reason")} | {"operators": len(_registered)}


# ---- the operators it serves ---------------------------------------------------------------------
_registered: set[str] = set()
_keep: list = []


def register(kernels: dict, meta: bool = False) -> set[str]:
    """Serve the aten overloads ``{name: python_kernel}`` from C++ on PrivateUse1.

    Each Python kernel is registered under PrivateUse2, where the C++ kernel sends the calls it
    does not take itself. ``meta``: the operators are views or geometry changes, which C++
    answers with their Meta kernels. Returns the names served (empty without the module)."""
    import torch

    mod = module()
    if mod is None or not kernels:
        return set()
    lib = torch.library.Library("aten", "IMPL")
    for name, kernel in kernels.items():
        lib.impl(name, kernel, "PrivateUse2")
    mod.register(list(kernels), meta)
    _keep.append(lib)
    _registered.update(kernels)
    from ..runtime import activity, lazy

    lazy.ON_CHANGE = activity.ON_CHANGE = refresh
    refresh()
    return set(kernels)


def refresh() -> None:
    """Switch the C++ path on unless something must see every operation in Python: adaptive
    eager recording or pending recorded work, a profiler's activity recorder, memory observers."""
    mod = _state["module"]
    if mod is None or not _registered:
        return
    from ..runtime import activity, lazy, state

    observed = any(a.observers for a in state.allocators().values())
    mod.set_enabled(lazy.RECORDER is None and lazy.FLUSH is None and activity.RECORDER is None and not observed)


def boundary():
    """The C++ module for compiled programs' inputs and results (``host_aliases``,
    ``adopt_results``; each answers None while the fast path is off), or None without it."""
    return _state["module"] if _registered else None


def counts() -> dict[str, int]:
    """``{"aten::name.overload": calls}`` that ran on the C++ path since the last clear."""
    mod = _state["module"]
    if mod is None:
        return {}
    return {("aten::" + k): v for k, v in mod.counts().items()}


def clear_counts() -> None:
    mod = _state["module"]
    if mod is not None:
        mod.clear_counts()


def owns(storage) -> bool:
    """Whether ``storage`` (a neuron storage) holds memory the C++ path adopted."""
    mod = _state["module"]
    return mod is not None and mod.owns(storage)


def host_storage(storage):
    """The CPU storage that owns the bytes of a neuron storage the C++ path adopted, or None."""
    mod = _state["module"]
    return None if mod is None else mod.host_storage(storage)


__all__ = ["boundary", "build", "clear_counts", "counts", "host_storage", "module", "owns", "refresh", "register", "status"]
