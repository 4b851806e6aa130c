"""The compiler's knobs: environment variables and ``torch.compile(options=...)``."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields
from pathlib import Path

_TRUE = ("1", "true", "True", "yes", "on")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "0") in _TRUE


def _env_on(name: str) -> bool:
    """A switch that is on unless set to 0, false or off."""
    return os.environ.get(name, "1") not in ("0", "false", "False", "off")


def cache_dir() -> Path:
    """``TORCHNEURON_CACHE_DIR``, default ``~/.cache/torchneuron``."""
    d = os.environ.get("TORCHNEURON_CACHE_DIR")
    if d:
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torchneuron"


def disk_cache_enabled() -> bool:
    return _env_on("TORCHNEURON_CACHE")


def data_tiling() -> bool:
    """Whether programs are compiled with IREE's data tiling (``TORCHNEURON_DATA_TILING``,
    default on)."""
    return _env_on("TORCHNEURON_DATA_TILING")


def recompute_views() -> bool:
    """Whether views of parameters and of saved values are recomputed in the backward graph
    instead of saved by the forward graph (``saved_views.py``; ``TORCHNEURON_RECOMPUTE_VIEWS=0``
    saves them as AOTAutograd's default partitioner does)."""
    return _env_on("TORCHNEURON_RECOMPUTE_VIEWS")


def link_regions() -> bool:
    """Whether a graph's compiled regions are linked into one program (``linker.py``;
    ``TORCHNEURON_LINK_REGIONS=0`` compiles a program per region)."""
    return _env_on("TORCHNEURON_LINK_REGIONS")


def dump_dir() -> Path | None:
    d = os.environ.get("TORCHNEURON_DUMP_DIR")
    return Path(d) if d else None


_model_name: str | None = None


def set_model_name(name: str | None) -> None:
    """Name the model whose graphs are compiled from now on (``None`` clears the name).

    The name is recorded with every graph compiled afterwards (``get_metrics()["graphs"][id]
    ["model"]``), on the disk cache entries those graphs create (``meta["model"]``), and, with
    ``TORCHNEURON_DUMP_DIR`` set, their dumps go to ``<dump dir>/<name>/``.
    """
    global _model_name
    if name is not None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"model name must be a non-empty string or None, got {name!r}")
        name = name.strip()
    _model_name = name


def model_name() -> str | None:
    return _model_name


def model_dir_name(name: str) -> str:
    """``name`` as one path component (``org/model`` -> ``org_model``)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")
    return safe or "model"


def runtime_driver() -> str:
    """IREE HAL driver executing the simulated core's executables: ``local-task`` is
    multi-threaded, ``local-sync`` runs on the calling thread with less overhead per call, and
    ``auto`` (the default) times an executable's first calls on both and keeps the faster one
    (``executable.py``)."""
    driver = os.environ.get("TORCHNEURON_IREE_DRIVER", "auto")
    if driver not in ("auto", "local-task", "local-sync"):
        raise ValueError(f"TORCHNEURON_IREE_DRIVER={driver!r}: expected auto, local-task or local-sync")
    return driver


@dataclass(frozen=True)
class CompileOptions:
    """``torch.compile(model, backend="neuron", options={...})``."""

    fallback: bool = False  # run a graph eagerly (with a warning) when it fails to compile
    partition: bool = True  # keep nodes that cannot be lowered outside compiled regions
    # convolutions run as the device's library kernels between compiled regions (library.py)
    library_convolutions: bool = True
    # concatenations of 3+ tensors into strided slices run as the device's copy kernel (library.py)
    library_concatenations: bool = True

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
        for name in ("library_convolutions", "library_concatenations"):
            if name not in options:
                options[name] = _env_on(f"TORCHNEURON_{name.upper()}")
        return cls(**{k: bool(v) for k, v in options.items()})

    @property
    def uses_library_convolutions(self) -> bool:
        """Convolutions are left to library kernels (only a partitioned graph has outside nodes)."""
        return self.partition and self.library_convolutions

    @property
    def library_kernels(self):
        """The predicate of the nodes left to library kernels (``library.library_kernels``)."""
        from .library import library_kernels

        return library_kernels(self.library_convolutions, self.library_concatenations)
