"""The execution-mode switch: plain eager (default) or adaptive eager.

``TORCHNEURON_ADAPTIVE_EAGER=1`` starts a process in adaptive mode;
``torchneuron.set_execution_mode("adaptive" | "eager")`` switches, and
``torchneuron.execution_mode(mode)`` is a context manager. Leaving adaptive mode runs the pending
window. ``TORCHNEURON_ADAPTIVE_WINDOW`` caps the ops in one window (default 2048).
"""

from __future__ import annotations

import os
from contextlib import contextmanager

from ..runtime import lazy
from . import executor, views
from .recorder import Recorder

MODES = ("eager", "adaptive")
_state = {"mode": "eager"}
_recorder: Recorder | None = None


def _limit() -> int:
    raw = os.environ.get("TORCHNEURON_ADAPTIVE_WINDOW", "2048")
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"TORCHNEURON_ADAPTIVE_WINDOW must be a positive integer, got {raw!r}") from None
    if n < 1:
        raise ValueError(f"TORCHNEURON_ADAPTIVE_WINDOW must be a positive integer, got {raw!r}")
    return n


def flush(reason: str = "explicit") -> None:
    """Run the work recorded so far (a no-op in eager mode or with an empty window)."""
    rec = _recorder
    if rec is None:
        return
    with rec.lock:
        w = rec.window
        if not w.nodes:
            return
        rec.window = type(w)()
        lazy.FLUSH = None
        lazy.RECORDER = lazy.VIEW = None  # the window's own launches run eagerly
        lazy.changed()
        try:
            executor.run_window(w, reason)
        finally:
            if _state["mode"] == "adaptive":
                lazy.RECORDER = _record
                lazy.VIEW = rec.view
                lazy.changed()


def _sync_flush() -> None:
    flush("sync")


def _record(op, args, kwargs):
    r = _recorder(op, args, kwargs)
    if r is not lazy.NOT_RECORDED and lazy.FLUSH is None and _recorder.window.nodes:
        lazy.FLUSH = _sync_flush
        lazy.changed()
    return r


def set_execution_mode(mode: str) -> None:
    """``"adaptive"``: record device ops and run them fused at synchronisation points;
    ``"eager"``: run each op at launch (the default)."""
    global _recorder
    if mode not in MODES:
        raise ValueError(f"unknown execution mode {mode!r}; expected one of {MODES}")
    if mode == _state["mode"]:
        return
    if mode == "adaptive":
        if _recorder is None:
            _recorder = Recorder(flush, _limit())
        views.install(_recorder)
        _state["mode"] = "adaptive"
        lazy.RECORDER = _record
        lazy.VIEW = _recorder.view
        lazy.changed()
    else:
        _state["mode"] = "eager"
        lazy.RECORDER = None
        lazy.VIEW = None
        lazy.changed()
        flush("mode switch")


def get_execution_mode() -> str:
    return _state["mode"]


@contextmanager
def execution_mode(mode: str):
    """Run the block in ``mode``; the previous mode comes back afterwards (pending work of an
    adaptive block runs when it ends)."""
    prev = get_execution_mode()
    set_execution_mode(mode)
    try:
        yield
    finally:
        set_execution_mode(prev)


def from_environment() -> None:
    if os.environ.get("TORCHNEURON_ADAPTIVE_EAGER", "0") not in ("", "0", "false", "False"):
        set_execution_mode("adaptive")
