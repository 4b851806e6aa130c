"""The cross-process barrier of the shared-memory collectives (``shm_sync.cpp``): build and load.

Built like the other native modules (``make install`` ahead of time, otherwise at first use,
cached under ``TORCHNEURON_CACHE_DIR``/native). Without it — no compiler, ``TORCHNEURON_NATIVE=0``
— the ``neuron`` process group moves every byte over gloo; :func:`status` says why.
"""

from __future__ import annotations

import os
from pathlib import Path

SOURCE = Path(__file__).with_name("shm_sync.cpp")
MODULE = "_neuron_shm"

_state: dict = {"loaded": False, "reason": "not attempted", "module": None}


def build(force: bool = False) -> Path:
    from . import build as build_native

    return build_native(force=force, source=SOURCE, module=MODULE)


def module():
    """The loaded C++ module, or None (not buildable, or switched off)."""
    from . import load_once

    off = os.environ.get("TORCHNEURON_NATIVE", "1") in ("0", "false", "False", "off")
    return load_once(_state, SOURCE, MODULE, "disabled by TORCHNEURON_NATIVE=0" if off else None)


def status() -> dict:
    """``{"loaded": bool, "reason": str}``."""
    return {k: _state[k] for k in ("loaded", "reason")}


__all__ = ["build", "module", "status"]
