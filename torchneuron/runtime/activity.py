"""Device-activity recording hook for profilers.

While a profiler is active it installs a recorder with ``set_recorder``; every device
operation then reports ``record(kind, name, inputs, outputs, start_ns, end_ns)`` with the host
views of its inputs and outputs (shapes, dtypes and bytes can be read from them) and its start
and end on the host clock. ``kind`` is one of ``"kernel"`` (an eager device kernel),
``"fallback"`` (a CPU-fallback op), ``"copy_h2d"`` / ``"copy_d2h"`` / ``"copy_d2d"``.
With no recorder installed the cost is one global lookup per operation.
"""

from __future__ import annotations

from typing import Protocol


class Recorder(Protocol):
    def record(self, kind: str, name: str, inputs: tuple, outputs: object, start_ns: int, end_ns: int) -> None: ...


RECORDER: Recorder | None = None
ON_CHANGE = None  # called after the recorder changes (the C++ fast kernels stand aside while set)


def set_recorder(recorder: Recorder | None) -> Recorder | None:
    """Install ``recorder`` (or remove it with ``None``); returns the previous one."""
    global RECORDER
    previous, RECORDER = RECORDER, recorder
    if ON_CHANGE is not None:
        ON_CHANGE()
    return previous
