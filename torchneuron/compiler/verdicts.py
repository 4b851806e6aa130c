"""Whether a node signature lowers to StableHLO, remembered across processes.

The partitioner asks, for every node, whether it lowers on its own (``lowering.node_lowers``);
answering means a torch-mlir import of a one-node graph, 20–50 ms each, about a second for a
transformer's forward graph. The answers depend only on the node's signature (op, dtypes,
shapes, other arguments), the torch-mlir and PyTorch versions and the compiler's own code, so
they are kept in a JSON file next to the executable cache, named after a fingerprint of all of
these (a change to any of them starts a new file). New verdicts are written once per
partitioned graph, merged with what other processes wrote under a file lock, replacing the file
atomically. ``TORCHNEURON_CACHE=0`` keeps them in memory only.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from functools import cache
from pathlib import Path

import torch

from . import settings
from .cache import _file_lock

_lock = threading.Lock()
_loaded: dict[str, bool] | None = None
_loaded_from: Path | None = None
_pending: dict[str, bool] = {}


@cache
def fingerprint() -> str:
    from importlib.metadata import PackageNotFoundError, version

    h = hashlib.sha256()
    try:
        h.update(version("torch-mlir").encode())
    except PackageNotFoundError:
        h.update(b"torch-mlir ?")
    h.update(torch.__version__.encode())
    here = Path(__file__).parent
    for p in sorted(here.glob("*.py")):  # decompositions and passes decide what lowers
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def path() -> Path:
    return settings.cache_dir() / f"node_verdicts-{fingerprint()}.json"


def _read(p: Path) -> dict[str, bool]:
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return {}  # missing or damaged: the verdicts are found again
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, bool)} \
        if isinstance(data, dict) else {}


def _table() -> dict[str, bool]:
    global _loaded, _loaded_from
    p = path() if settings.disk_cache_enabled() else None
    if _loaded is None or p != _loaded_from:
        _loaded = _read(p) if p is not None else {}
        _loaded_from = p
    return _loaded


def get(key: tuple) -> bool | None:
    with _lock:
        return _table().get(repr(key))


def put(key: tuple, ok: bool) -> None:
    """Remember a verdict in this process; :func:`flush` writes what is new to disk."""
    with _lock:
        _table()[repr(key)] = ok
        _pending[repr(key)] = ok


def flush() -> None:
    """Merge the verdicts found since the last flush into the file (once per partitioned graph:
    the file is rewritten whole, so not once per probe)."""
    with _lock:
        p = _loaded_from
        new = dict(_pending)
        _pending.clear()
    if p is None or not new:
        return
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with _file_lock(p.with_suffix(".lock")):
            merged = _read(p)
            merged.update(new)
            fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".verdicts-")
            with os.fdopen(fd, "w") as f:
                json.dump(merged, f, sort_keys=True)
            os.replace(tmp, p)
    except OSError:
        return  # a read-only cache directory: the verdicts stay in this process
    with _lock:
        _table().update(merged)  # what other processes found meanwhile


def clear() -> int:
    """Forget the remembered verdicts (all fingerprints); returns the files removed."""
    global _loaded
    with _lock:
        _loaded = None
        _pending.clear()
    n = 0
    for p in settings.cache_dir().glob("node_verdicts-*.json"):
        p.unlink(missing_ok=True)
        n += 1
    return n
