"""The compiler's knobs: environment variables and ``torch.compile(options=...)``."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path

_TRUE = ("1", "true", "True", "yes", "on")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "0") in _TRUE


def cache_dir() -> Path:
    """``TORCHNEURON_CACHE_DIR``, default ``~/.cache/torchneuron``."""
    d = os.environ.get("TORCHNEURON_CACHE_DIR")
    if d:
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torchneuron"


def disk_cache_enabled() -> bool:
    return os.environ.get("TORCHNEURON_CACHE", "1") not in ("0", "false", "False", "off")


def dump_dir() -> Path | None:
    d = os.environ.get("TORCHNEURON_DUMP_DIR")
    return Path(d) if d else None


def runtime_driver() -> str:
    """IREE HAL driver executing the simulated core's executables (``local-task`` is
    multi-threaded, ``local-sync`` runs on the calling thread with less overhead per call)."""
    return os.environ.get("TORCHNEURON_IREE_DRIVER", "local-task")


@dataclass(frozen=True)
class CompileOptions:
    """``torch.compile(model, backend="neuron", options={...})``."""

    fallback: bool = False  # run a graph eagerly (with a warning) when it fails to compile
    partition: bool = True  # keep nodes that cannot be lowered outside compiled regions

    @classmethod
    def from_user(cls, options: dict | None) -> CompileOptions:
        options = dict(options or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(
                f"unknown option(s) for backend 'neuron': {unknown}; valid options: {sorted(known)}"
            )
        if "fallback" not in options:
            options["fallback"] = _env_flag("TORCHNEURON_COMPILE_FALLBACK")
        return cls(**{k: bool(v) for k, v in options.items()})
