"""The executable cache: memory and disk levels, shared safely between processes.

Key: SHA-256 of the StableHLO text without debug locations, the compiler version, the compile
flags and the target name. On disk (``TORCHNEURON_CACHE_DIR``, default
``~/.cache/torchneuron``) each entry is ``executables/<kk>/<key>.vmfb``::

    TNVMFB1\\n
    {"sha256": ..., "nbytes": ..., "compiler": ..., "flags": [...], "target": ..., "created": ...}\\n
    <vmfb bytes>

written to a temporary file and renamed into place (``os.replace``), so a reader sees a whole
entry or none. A per-key lock file (``fcntl.flock``) is held while one process looks up,
compiles and stores a key, so two processes compiling the same graph compile it once. An entry
whose checksum or length does not match is reported, removed and recompiled — never executed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import metrics, settings

MAGIC = b"TNVMFB1\n"
_SUBDIR = "executables"


def cache_key(stablehlo: str, compiler_version: str, flags: tuple[str, ...], target: str) -> str:
    h = hashlib.sha256()
    for part in (stablehlo, compiler_version, "\x1f".join(flags), target):
        h.update(part.encode())
        h.update(b"\x00")
    return h.hexdigest()


class CorruptEntry(Exception):
    pass


@dataclass
class Lookup:
    payload: bytes
    source: str  # "memory", "disk" or "compiled"


class ExecutableCache:
    """One level of compiled artefacts: ``<cache dir>/<subdir>/<kk>/<key><suffix>`` on disk."""

    def __init__(self, root: Path | None = None, use_disk: bool | None = None,
                 subdir: str = _SUBDIR, suffix: str = ".vmfb"):
        self._root = root
        self._use_disk = use_disk
        self._subdir = subdir
        self._suffix = suffix
        self._memory: dict[str, bytes] = {}
        self._lock = threading.Lock()

    @property
    def root(self) -> Path:
        return (self._root or settings.cache_dir()) / self._subdir

    @property
    def use_disk(self) -> bool:
        return settings.disk_cache_enabled() if self._use_disk is None else self._use_disk

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}{self._suffix}"

    # -- public --------------------------------------------------------------------------

    def get_or_compile(self, key: str, compile_fn: Callable[[], bytes], meta: dict) -> Lookup:
        """The payload for ``key``: from memory, from disk, or ``compile_fn()`` stored in both."""
        with self._lock:
            hit = self._memory.get(key)
        if hit is not None:
            return Lookup(hit, "memory")
        if not self.use_disk:
            payload = compile_fn()
            with self._lock:
                self._memory[key] = payload
            return Lookup(payload, "compiled")
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with _file_lock(path.with_suffix(".lock")):
            payload = self._read_checked(path)
            source = "disk"
            if payload is None:
                payload = compile_fn()
                self._write(path, payload, meta)
                source = "compiled"
        with self._lock:
            self._memory[key] = payload
        return Lookup(payload, source)

    def clear_memory(self) -> None:
        with self._lock:
            self._memory.clear()

    def entries(self) -> list[dict]:
        """Header of every disk entry (plus its path and size on disk)."""
        out = []
        if not self.root.exists():
            return out
        for p in sorted(self.root.glob(f"*/*{self._suffix}")):
            info = {"key": p.stem, "path": str(p), "bytes": p.stat().st_size}
            try:
                info.update(_read_header(p.read_bytes())[0])
            except CorruptEntry as err:
                info["corrupt"] = str(err)
            out.append(info)
        return out

    def clear_disk(self) -> int:
        n = 0
        if self.root.exists():
            for p in self.root.glob("*/*"):
                p.unlink(missing_ok=True)
                n += p.suffix == self._suffix
        return n

    # -- disk level -------------------------------------------------------------------------

    def _read_checked(self, path: Path) -> bytes | None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            header, payload = _read_header(data)
            if len(payload) != header["nbytes"] or hashlib.sha256(payload).hexdigest() != header["sha256"]:
                raise CorruptEntry("checksum or length mismatch")
        except CorruptEntry as err:
            metrics.count("corrupt_cache_entries")
            warnings.warn(
                f"torchneuron: corrupt compile cache entry {path} ({err}); it is discarded and "
                "the graph is recompiled",
                RuntimeWarning,
                stacklevel=2,
            )
            path.unlink(missing_ok=True)
            return None
        return payload

    def _write(self, path: Path, payload: bytes, meta: dict) -> None:
        header = dict(meta, sha256=hashlib.sha256(payload).hexdigest(), nbytes=len(payload),
                      created=time.time())
        blob = MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem[:16]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def _read_header(data: bytes) -> tuple[dict, bytes]:
    if not data.startswith(MAGIC):
        raise CorruptEntry("bad magic")
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        raise CorruptEntry("truncated header")
    try:
        header = json.loads(data[len(MAGIC):end])
        header["nbytes"] = int(header["nbytes"])
        str(header["sha256"])
    except (ValueError, KeyError, TypeError) as err:
        raise CorruptEntry(f"unreadable header: {err}") from None
    return header, data[end + 1:]


@contextlib.contextmanager
def _file_lock(path: Path):
    with open(path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


CACHE = ExecutableCache()
