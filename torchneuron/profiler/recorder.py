"""Device-activity recording: what the simulated NeuronCore did while a profiler is active.

A :class:`Session` collects one :class:`DeviceEvent` per device operation (eager kernel, CPU
fallback, host<->device copy) and, optionally, the allocator's allocations and frees. While at
least one session is open a single fan-out recorder is installed with
``torchneuron.runtime.activity.set_recorder``; when the last one closes it is removed, so a
process with no active profiler pays nothing beyond the device's one ``RECORDER is None`` check
per operation (see ``tests/profiler/test_recorder.py``).

Each event keeps only metadata (shape, dtype, bytes) of its inputs and outputs, never the
tensors themselves, so recording does not extend any buffer's lifetime.

Not hooked yet (no runtime hook exists): graph compilation, compiled-executable launches and
NKI kernel launches. They will appear here as kinds ``"compile"``, ``"executable"`` and
``"nki"`` once the runtime reports them through the same ``record`` call.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from ..runtime import activity, devices, state
from ..runtime import queue as _queue

_Tensor = torch.Tensor
_SCALARS = (bool, int, float, str, type(None))


class TensorMeta(NamedTuple):
    """Shape, dtype and byte size of one tensor an operation read or wrote."""

    shape: tuple
    dtype: torch.dtype
    nbytes: int

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


def _meta(t: torch.Tensor) -> TensorMeta:
    return TensorMeta(t.shape, t.dtype, t.nbytes)


def _summarise(value, depth: int = 0):
    """Tensors become TensorMeta, lists recurse once, small scalars are kept, the rest is None."""
    if isinstance(value, _Tensor):
        return _meta(value)
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, (list, tuple)) and depth == 0:
        return tuple(_summarise(v, 1) for v in value)
    if isinstance(value, torch.dtype):
        return value
    return None


def tensors_of(values) -> list[TensorMeta]:
    """Every TensorMeta in a summarised argument list (one level of nesting)."""
    out: list[TensorMeta] = []
    for v in values:
        if isinstance(v, TensorMeta):
            out.append(v)
        elif isinstance(v, tuple):
            out.extend(x for x in v if isinstance(x, TensorMeta))
    return out


@dataclass(slots=True)
class DeviceEvent:
    """One device operation on the device timeline.

    ``start_ns``/``end_ns`` are ``time.perf_counter_ns`` values (the device's host clock);
    ``seq`` numbers the session's events in launch order; ``name`` is the ATen operator that
    launched it (the correlation to the framework op, matched in traces by name, thread and
    time); ``tid`` is the launching thread's native id; ``stream`` the current stream's id.
    """

    seq: int
    kind: str
    name: str
    start_ns: int
    end_ns: int
    stream: int
    tid: int
    inputs: tuple
    outputs: tuple
    # filled in by the cost model on demand
    _cost: object = field(default=None, repr=False)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def input_tensors(self) -> list[TensorMeta]:
        return tensors_of(self.inputs)

    @property
    def output_tensors(self) -> list[TensorMeta]:
        return tensors_of(self.outputs)

    @property
    def bytes_moved(self) -> int:
        return sum(t.nbytes for t in self.input_tensors) + sum(t.nbytes for t in self.output_tensors)

    def cost(self, target=None):
        """The cost model's :class:`~torchneuron.profiler.cost_model.OpCost` for this event."""
        from .cost_model import op_cost

        if target is not None:
            return op_cost(self, target)
        if self._cost is None:
            self._cost = op_cost(self, state.target())
        return self._cost

    @property
    def flops(self) -> int:
        return self.cost().flops


@dataclass(slots=True)
class MemoryEvent:
    """An allocation or free on the session's core: ``allocated``/``reserved`` are the totals after it."""

    t_ns: int
    action: str  # "alloc" | "free"
    nbytes: int
    allocated: int
    reserved: int


class Session:
    """Collects device (and optionally memory) events between :meth:`start` and :meth:`stop`."""

    def __init__(self, memory: bool = True) -> None:
        self.events: list[DeviceEvent] = []
        self.memory: list[MemoryEvent] = []
        self.record_memory = memory
        self.start_ns = 0
        self.end_ns = 0
        self.active = False
        self.target = state.target()
        # the core whose memory is recorded and whose name the trace shows: the current one (a
        # launched rank's own core); operations of every core of the process are recorded
        self.core = devices.current()
        # time.time_ns() - time.perf_counter_ns(), to place events on a wall-clock trace
        self.wall_offset_ns = 0
        self._seq = 0

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Session:
        if not self.active:
            self.wall_offset_ns = _wall_offset_ns()
            self.start_ns = time.perf_counter_ns()
            _attach(self)
            self.active = True
        return self

    def stop(self) -> Session:
        if self.active:
            _detach(self)
            self.active = False
            self.end_ns = time.perf_counter_ns()
        return self

    def __enter__(self) -> Session:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- collection (called by the fan-out recorder) -----------------------------------------
    def _add(self, kind, name, inputs, outputs, start_ns, end_ns, stream, tid) -> None:
        self._seq += 1
        self.events.append(DeviceEvent(self._seq, kind, name, start_ns, end_ns, stream, tid, inputs, outputs))

    def _mem(self, ev: MemoryEvent) -> None:
        if self.record_memory:
            self.memory.append(ev)


def _wall_offset_ns() -> int:
    """Offset from the perf_counter clock to the wall clock, sampled tightly (best of 5)."""
    best = None
    for _ in range(5):
        a = time.perf_counter_ns()
        w = time.time_ns()
        b = time.perf_counter_ns()
        if best is None or b - a < best[0]:
            best = (b - a, w - (a + b) // 2)
    return best[1]


class _Fanout:
    """The one recorder installed while any session is open."""

    def __init__(self) -> None:
        self.sessions: list[Session] = []
        self.allocator = None

    def record(self, kind, name, inputs, outputs, start_ns, end_ns) -> None:
        ins = tuple(_summarise(a) for a in inputs)
        if isinstance(outputs, (list, tuple)):
            outs = tuple(_summarise(o, 1) for o in outputs)
        else:
            outs = (_summarise(outputs, 1),)
        stream = _queue.current_stream().stream_id
        tid = threading.get_native_id()
        for s in self.sessions:
            s._add(kind, name, ins, outs, start_ns, end_ns, stream, tid)

    def on_memory(self, action: str, nbytes: int, allocated: int) -> None:
        ev = MemoryEvent(time.perf_counter_ns(), action, nbytes, allocated, self.allocator.reserved)
        for s in self.sessions:
            s._mem(ev)


_lock = threading.Lock()
_FANOUT = _Fanout()


def _attach(session: Session) -> None:
    with _lock:
        if not _FANOUT.sessions:
            _FANOUT.allocator = state.allocator(session.core)
            activity.set_recorder(_FANOUT)
            _FANOUT.allocator.add_observer(_FANOUT.on_memory)
        _FANOUT.sessions.append(session)


def _detach(session: Session) -> None:
    with _lock:
        if session in _FANOUT.sessions:
            _FANOUT.sessions.remove(session)
        if not _FANOUT.sessions:
            if activity.RECORDER is _FANOUT:
                activity.set_recorder(None)
            if _FANOUT.allocator is not None:
                _FANOUT.allocator.remove_observer(_FANOUT.on_memory)


def is_recording() -> bool:
    """True while any profiling session is collecting device activity."""
    return bool(_FANOUT.sessions)


def record(memory: bool = True) -> Session:
    """A session to use as a context manager: ``with record() as s: ...; s.events``."""
    return Session(memory=memory)


__all__ = ["DeviceEvent", "MemoryEvent", "Session", "TensorMeta", "is_recording", "record"]
