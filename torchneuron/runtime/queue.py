"""The hardware queue of the simulated NeuronCore, and the streams and events on it.

TorchNeuron documents that non-default streams share one hardware queue: ordering is kept,
there is no concurrency between streams. The simulated core executes each operation when it is
launched, in launch order, so every stream is trivially ordered on the one queue; a stream is a
label carried by the work (the profiler shows it) and an event is a point on the queue.
Synchronisation points raise the earliest deferred device error (see ``errors``).
"""

from __future__ import annotations

import itertools
import threading
import time
from contextlib import contextmanager

import torch

from . import devices, lazy
from .errors import ERRORS

_DEVICE_TYPE = int(torch._C._autograd.DeviceType.PrivateUse1)
_ids = itertools.count(1)


class _Queue:
    def __init__(self) -> None:
        self.launched = 0  # operations put on the queue since start
        self.last_stream_id = 0

    def synchronize(self) -> None:
        ERRORS.raise_pending()


QUEUE = _Queue()


class Stream(torch.Stream):
    """A ``neuron`` stream. All streams are ordered on the device's single hardware queue."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        stream_id = kwargs.get("stream_id")
        if stream_id is None:
            stream_id = next(_ids)
        index = kwargs.get("device_index")
        if index is None:
            if device is not None and not isinstance(device, int):
                dev = torch.device(device)
                if dev.type != "neuron":
                    raise ValueError(f"a neuron Stream needs a neuron device, got {dev}")
            index = devices.index_of(device)
        self = super().__new__(cls, stream_id=stream_id, device_index=index, device_type=_DEVICE_TYPE)
        self._priority = priority
        return self

    def __init__(self, device=None, priority: int = 0, **kwargs):
        pass

    @property
    def priority(self) -> int:
        return self._priority

    def query(self) -> bool:
        return True  # the simulated queue completes work at launch

    def synchronize(self) -> None:
        QUEUE.synchronize()

    def wait_event(self, event: Event) -> None:
        if not isinstance(event, Event):
            raise TypeError(f"wait_event expects a torch.neuron.Event, got {type(event).__name__}")
        # Work launched on this stream after this call is ordered after the event: the queue
        # is in order, so nothing else is needed.

    def wait_stream(self, stream: Stream) -> None:
        if not isinstance(stream, torch.Stream):
            raise TypeError(f"wait_stream expects a stream, got {type(stream).__name__}")
        self.wait_event(stream.record_event())

    def record_event(self, event: Event | None = None) -> Event:
        event = Event() if event is None else event
        event.record(self)
        return event

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, torch.Stream)
            and other.stream_id == self.stream_id
            and other.device_type == self.device_type
            and other.device_index == self.device_index
        )

    def __hash__(self) -> int:
        return hash((self.stream_id, self.device_index, _DEVICE_TYPE))

    def __repr__(self) -> str:
        return (f"torch.neuron.Stream(device=neuron:{self.device_index} stream_id={self.stream_id} "
                f"priority={self._priority})")


_default_streams: dict[int, Stream] = {}
_tls = threading.local()


def default_stream(device=None) -> Stream:
    """The default stream of ``device``'s core (the current core's by default)."""
    index = devices.index_of(device)
    s = _default_streams.get(index)
    if s is None:
        s = _default_streams.setdefault(index, Stream(stream_id=0, device_index=index))
    return s


def _current_streams() -> dict[int, Stream]:
    streams = getattr(_tls, "streams", None)
    if streams is None:
        streams = _tls.streams = {}
    return streams


def current_stream(device=None) -> Stream:
    """The calling thread's current stream on ``device``'s core (the current core's by default)."""
    index = devices.index_of(device)
    s = _current_streams().get(index)
    return s if s is not None else default_stream(index)


def set_stream(stream: torch.Stream | None) -> None:
    """Make ``stream`` the calling thread's current stream on its core."""
    if stream is None:
        return
    if not isinstance(stream, Stream):
        if getattr(stream, "device_type", None) != _DEVICE_TYPE:
            raise ValueError(f"set_stream: {stream} is not a neuron stream")
        stream = Stream(stream_id=stream.stream_id, device_index=stream.device_index)
    if lazy.FLUSH is not None and stream != current_stream(stream.device_index):
        lazy.FLUSH()  # adaptive eager: recorded work keeps the order of the stream it was launched on
    _current_streams()[stream.device_index] = stream
    if stream.device_index != devices.current():
        devices.set_current(stream.device_index)  # as torch.cuda.set_stream: its core becomes current


@contextmanager
def stream(s: torch.Stream | None):
    """Context manager that makes ``s`` the current stream (``None`` is a no-op)."""
    if s is None:
        yield
        return
    prev_src = current_stream()  # the current core's stream, restored last (and the core with it)
    prev_dst = current_stream(s.device_index)
    set_stream(s)
    try:
        yield
    finally:
        set_stream(prev_dst)
        set_stream(prev_src)


class Event:
    """A point on the device queue. ``elapsed_time`` is in milliseconds of device time."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        if interprocess:
            raise NotImplementedError("interprocess events are not supported on the simulated device")
        self.enable_timing = enable_timing
        self.blocking = blocking
        self._time: float | None = None
        self._stream: Stream | None = None

    def record(self, stream: Stream | None = None) -> None:
        self._stream = stream if stream is not None else current_stream()
        self._time = time.perf_counter()

    def query(self) -> bool:
        return True

    def wait(self, stream: Stream | None = None) -> None:
        (stream if stream is not None else current_stream()).wait_event(self)

    def synchronize(self) -> None:
        QUEUE.synchronize()

    def elapsed_time(self, end_event: Event) -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with enable_timing=True to measure elapsed time")
        if self._time is None or end_event._time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time")
        return (end_event._time - self._time) * 1000.0

    def __repr__(self) -> str:
        state = "recorded" if self._time is not None else "unrecorded"
        return f"torch.neuron.Event({state}, enable_timing={self.enable_timing})"
