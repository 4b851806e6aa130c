"""``torch.profiler`` integration: record neuron activity while a profile with
``ProfilerActivity.PrivateUse1`` runs, merge it into exported traces, and give
``key_averages()`` device time.

:func:`install` wraps four methods, once per process:

* ``torch.profiler.profiler._KinetoProfile.start_trace`` / ``stop_trace``: open / close a
  :class:`~torchneuron.profiler.recorder.Session` when the profile's activities include
  ``ProfilerActivity.PrivateUse1`` (the ``neuron`` device; this build has no ``NEURON`` member);
  sessions are kept on the cycle's ``torch.autograd.profiler.profile`` object, so schedules
  and ``acc_events`` behave as for other devices;
* ``_KinetoProfile.export_chrome_trace`` (used by ``tensorboard_trace_handler`` too): after
  Kineto has written the file, the device events are merged into it (``.json`` or ``.json.gz``);
* ``torch.autograd.profiler.profile._ensure_function_events``: each device op is attached as a
  kernel of the ATen ``FunctionEvent`` that launched it, so ``key_averages()`` tables have
  ``Self NEURON`` / ``NEURON total`` columns.
"""

from __future__ import annotations

import bisect
import functools
import warnings

import torch
import torch.autograd.profiler as _aprof
import torch.profiler.profiler as _tprof
from torch.profiler import ProfilerActivity

from .recorder import Session
from .trace import merge_into_trace

_installed = False
DEVICE_ACTIVITY = ProfilerActivity.PrivateUse1


def _wants_device(prof) -> bool:
    acts = getattr(prof, "activities", None) or ()
    return DEVICE_ACTIVITY in acts


def _sessions_of(prof) -> list[Session]:
    inner = getattr(prof, "profiler", None)
    return list(getattr(inner, "_neuron_sessions", ()) or ())


def install() -> None:
    """Wrap torch.profiler once (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    K = _tprof._KinetoProfile
    orig_start, orig_stop, orig_export = K.start_trace, K.stop_trace, K.export_chrome_trace
    orig_ensure = _aprof.profile._ensure_function_events

    @functools.wraps(orig_start)
    def start_trace(self) -> None:
        orig_start(self)
        if _wants_device(self) and self.profiler is not None:
            s = Session(memory=True).start()
            self._neuron_session = s
            inner = self.profiler
            if not hasattr(inner, "_neuron_sessions") or not getattr(self, "acc_events", False):
                inner._neuron_sessions = []
            inner._neuron_sessions.append(s)

    @functools.wraps(orig_stop)
    def stop_trace(self) -> None:
        s = getattr(self, "_neuron_session", None)
        if s is not None:
            s.stop()
            self._neuron_session = None
        orig_stop(self)

    @functools.wraps(orig_export)
    def export_chrome_trace(self, path: str, use_python_export: bool = False):
        result = orig_export(self, path, use_python_export=use_python_export)
        sessions = _sessions_of(self)
        if sessions and isinstance(path, str):
            merge_into_trace(path, sessions)
        return result

    @functools.wraps(orig_ensure)
    def _ensure_function_events(self):
        fresh = self._function_events is None
        orig_ensure(self)
        sessions = getattr(self, "_neuron_sessions", None)
        if fresh and sessions and self._function_events is not None:
            try:
                attach_device_time(self, sessions)
            except Exception as err:  # noqa: BLE001 - never break the user's profile
                warnings.warn(f"torchneuron: could not attach device time to profiler events: {err!r}", stacklevel=2)

    K.start_trace, K.stop_trace, K.export_chrome_trace = start_trace, stop_trace, export_chrome_trace
    _aprof.profile._ensure_function_events = _ensure_function_events


def attach_device_time(aprof, sessions: list[Session]) -> int:
    """Attach each recorded device op as a kernel of the innermost same-named FunctionEvent
    whose interval contains it; returns how many were attached."""
    results = getattr(aprof, "kineto_results", None)
    if results is None:
        return 0
    start_ns = results.trace_start_ns()
    fes = [fe for fe in aprof._function_events if fe.device_type == torch.autograd.DeviceType.CPU and not fe.is_async]
    by_name: dict[str, list] = {}
    for fe in fes:
        by_name.setdefault(fe.name, []).append(fe)
    for lst in by_name.values():
        lst.sort(key=lambda fe: fe.time_range.start)
    starts = {k: [fe.time_range.start for fe in v] for k, v in by_name.items()}
    n = 0
    tol = 1.0
    for s in sessions:
        off = s.wall_offset_ns - start_ns
        for ev in s.events:
            lst = by_name.get(ev.name)
            if not lst:
                continue
            t0 = (ev.start_ns + off) / 1e3
            t1 = (ev.end_ns + off) / 1e3
            i = bisect.bisect_right(starts[ev.name], t0 + tol) - 1
            lo = max(-1, i - 200)
            while i > lo:
                fe = lst[i]
                if fe.time_range.end + tol >= t1:
                    fe.append_kernel(ev.name, 0, (ev.end_ns - ev.start_ns) / 1e3)
                    fe.is_legacy = True  # device time carried by the CPU event, as torch does for PrivateUse1
                    n += 1
                    break
                i -= 1
    # key_averages() groups by (name, ..., is_legacy): mark every event of a device op's name
    # so that its calls stay in one row
    names = {ev.name for s in sessions for ev in s.events}
    for fe in fes:
        if fe.name in names:
            fe.is_legacy = True
    return n


__all__ = ["DEVICE_ACTIVITY", "attach_device_time", "install"]
