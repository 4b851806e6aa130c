"""Hooks through which adaptive eager mode (``torchneuron.adaptive``) defers device work.

The kernels consult these slots on every launch, so they are plain module attributes:

* ``RECORDER`` — while adaptive mode records, a callable ``(op, args, kwargs)`` that either
  records the operation and returns its (not yet computed) results, or returns
  ``NOT_RECORDED`` so that the kernel runs it at once;
* ``FLUSH`` — while recorded work is pending, a callable that executes it. Everything that reads
  or writes device bytes on the host (``storage.host``) and every synchronisation point calls it
  first, so nothing ever observes memory whose producing operations have not run.
"""

from __future__ import annotations

from collections.abc import Callable

NOT_RECORDED = object()

# called (if set) after RECORDER / FLUSH change: the C++ fast kernels stand aside while set
ON_CHANGE: Callable[[], None] | None = None


def changed() -> None:
    if ON_CHANGE is not None:
        ON_CHANGE()

RECORDER: Callable | None = None
VIEW: Callable | None = None  # (op, args, kwargs, result) after a view op ran, while recording
FLUSH: Callable[[], None] | None = None
