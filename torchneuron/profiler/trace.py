"""Chrome-trace output: device tracks, flows from ATen ops, estimated track, memory counter.

Kineto cannot be extended from Python, so the device activity recorded by a
:class:`~torchneuron.profiler.recorder.Session` is merged into the JSON Kineto wrote:

* process ``neuron:0`` (pid :data:`DEVICE_PID`), one thread per stream: one ``X`` event per
  device op, with its kind, bytes, flops, shapes, the ATen op it came from (its ``External id``
  and autograd ``Sequence number``) and the cost model's estimate;
* flow arrows (``ph`` ``s`` -> ``f``, ``bp: e``, same ``id`` and ``bind_id``, ``cat``
  ``neuron_launch``) from each ATen op on the CPU thread to its device activity;
* process ``estimated trn2`` (pid ``DEVICE_PID + 1``): the same ops priced by the cost model and
  laid out on the in-order queue (an op starts when launched or when the previous one ends);
* counter ``neuron:0 memory`` (``ph: C``): allocated and reserved bytes after every
  allocation and free.

Time base: Kineto stamps events with the wall clock in microseconds relative to
``baseTimeNanoseconds``; device events use ``perf_counter_ns`` and are shifted by the offset
between the two clocks sampled when the session started.
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
from collections import defaultdict

from .recorder import Session

DEVICE_PID = 7_000_000  # pid of the "neuron:0" process in merged traces
ESTIMATE_PID = DEVICE_PID + 1
_TOL_US = 1.0


def _shape_str(ts) -> list:
    out = []
    for t in ts:
        out.append(list(t.shape) if hasattr(t, "shape") else None)
    return out


class _CpuOps:
    """ATen ops (``cat == cpu_op``) of a Kineto trace, indexed per thread for matching."""

    def __init__(self, trace_events: list[dict]) -> None:
        per_tid: dict = defaultdict(list)
        for e in trace_events:
            if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation") and "ts" in e:
                per_tid[e.get("tid")].append(e)
        self.per_tid = {}
        self.starts = {}
        for tid, evs in per_tid.items():
            evs.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
            self.per_tid[tid] = evs
            self.starts[tid] = [e["ts"] for e in evs]

    def match(self, tid, name: str, ts: float, end: float) -> dict | None:
        """The innermost cpu_op on ``tid`` (any thread if unknown) named ``name`` containing
        [ts, end]; else the innermost containing cpu_op."""
        tids = [tid] if tid in self.per_tid else list(self.per_tid)
        best_any = None
        for t in tids:
            evs, starts = self.per_tid[t], self.starts[t]
            i = bisect.bisect_right(starts, ts + _TOL_US) - 1
            scanned = 0
            while i >= 0 and scanned < 400:
                e = evs[i]
                if e["ts"] + e.get("dur", 0) + _TOL_US >= end and e.get("cat") == "cpu_op":
                    if e["name"] == name:
                        return e
                    if best_any is None:
                        best_any = e
                i -= 1
                scanned += 1
        return best_any


def device_trace_events(
    session: Session,
    base_ns: int = 0,
    cpu_pid=None,
    cpu_ops: _CpuOps | None = None,
    flow_id_start: int = 1 << 40,
) -> list[dict]:
    """Chrome-trace events for one session (device track, flows, estimate, memory)."""
    tgt = session.target
    off = session.wall_offset_ns - base_ns if base_ns else -session.start_ns

    def us(t_ns: int) -> float:
        return (t_ns + off) / 1e3

    out: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": DEVICE_PID, "tid": 0, "args": {"name": f"neuron:{session.core}"}},
        {"ph": "M", "name": "process_labels", "pid": DEVICE_PID, "tid": 0,
         "args": {"labels": f"{tgt.generation} NeuronCore (simulated)"}},
        {"ph": "M", "name": "process_sort_index", "pid": DEVICE_PID, "tid": 0, "args": {"sort_index": DEVICE_PID}},
        {"ph": "M", "name": "process_name", "pid": ESTIMATE_PID, "tid": 0, "args": {"name": f"estimated {tgt.name}"}},
        {"ph": "M", "name": "process_sort_index", "pid": ESTIMATE_PID, "tid": 0, "args": {"sort_index": ESTIMATE_PID}},
        {"ph": "M", "name": "thread_name", "pid": ESTIMATE_PID, "tid": 0, "args": {"name": "in-order queue (cost model)"}},
    ]
    streams = sorted({e.stream for e in session.events}) or [0]
    for s in streams:
        out.append({"ph": "M", "name": "thread_name", "pid": DEVICE_PID, "tid": s, "args": {"name": f"stream {s}"}})
    flow = flow_id_start
    est_end = None
    for ev in session.events:
        c = ev.cost(tgt)
        ts, end = us(ev.start_ns), us(ev.end_ns)
        args = {
            "seq": ev.seq, "kind": ev.kind, "stream": ev.stream, "device": f"neuron:{session.core}",
            "bytes": c.bytes, "flops": c.flops, "category": c.category, "engine": c.engine,
            "input_shapes": _shape_str(ev.input_tensors),
            "input_dtypes": [str(t.dtype).replace("torch.", "") for t in ev.input_tensors],
            "output_shapes": _shape_str(ev.output_tensors),
            f"estimated {tgt.name} us": round(c.time_s * 1e6, 4), "bound": c.bound,
        }
        cpu = cpu_ops.match(ev.tid, ev.name, ts, end) if cpu_ops is not None else None
        if cpu is not None:
            a = cpu.get("args", {})
            args["cpu_op"] = cpu["name"]
            for k in ("External id", "Sequence number", "Record function id"):
                if k in a:
                    args[k] = a[k]
        out.append({"ph": "X", "cat": f"neuron_{ev.kind}", "name": ev.name, "pid": DEVICE_PID,
                    "tid": ev.stream, "ts": ts, "dur": max(end - ts, 0.001), "args": args})
        if cpu is not None:
            flow += 1
            cpu_end = cpu["ts"] + cpu.get("dur", 0)
            s_ts = min(max(ts, cpu["ts"]), cpu_end)
            out.append({"ph": "s", "id": flow, "bind_id": flow, "cat": "neuron_launch", "name": "neuron_launch",
                        "pid": cpu["pid"] if cpu_pid is None else cpu_pid, "tid": cpu["tid"], "ts": s_ts})
            out.append({"ph": "f", "bp": "e", "id": flow, "bind_id": flow, "cat": "neuron_launch",
                        "name": "neuron_launch", "pid": DEVICE_PID, "tid": ev.stream, "ts": ts})
        est_ts = ts if est_end is None else max(ts, est_end)
        dur = c.time_s * 1e6
        if dur > 0:
            est_end = est_ts + dur
            out.append({"ph": "X", "cat": "neuron_estimate", "name": ev.name, "pid": ESTIMATE_PID, "tid": 0,
                        "ts": est_ts, "dur": dur,
                        "args": {"seq": ev.seq, "category": c.category, "engine": c.engine, "bound": c.bound,
                                 "flops": c.flops, "bytes": c.bytes, "compute_us": c.compute_s * 1e6,
                                 "memory_us": c.memory_s * 1e6, "fixed_us": c.fixed_s * 1e6}})
    for m in session.memory:
        out.append({"ph": "C", "name": f"neuron:{session.core} memory", "pid": DEVICE_PID, "tid": 0, "ts": us(m.t_ns),
                    "args": {"allocated_bytes": m.allocated, "reserved_bytes": m.reserved}})
    return out


def _read(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def _write(path: str, data: dict) -> None:
    opener = gzip.open if path.endswith(".gz") else open
    tmp = path + ".tmp"
    with opener(tmp, "wt") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def merge_into_trace(path: str, sessions: list[Session]) -> dict:
    """Add the sessions' device activity to the Chrome-trace JSON at ``path`` (in place)."""
    data = _read(path)
    events = data.setdefault("traceEvents", [])
    base_ns = int(data.get("baseTimeNanoseconds", 0))
    cpu = _CpuOps(events)
    flow = 1 << 40
    for s in sessions:
        extra = device_trace_events(s, base_ns=base_ns, cpu_ops=cpu, flow_id_start=flow)
        flow += len(extra)
        events.extend(extra)
    data.setdefault("deviceProperties", []).append(_device_properties(sessions))
    _write(path, data)
    return data


def _device_properties(sessions: list[Session]) -> dict:
    tgt = sessions[0].target if sessions else None
    from ..runtime import state

    tgt = tgt or state.target()
    return {"id": 0, "name": tgt.device_name, "totalGlobalMem": tgt.hbm_bytes,
            "backend": "neuron", "target": tgt.name}


def write_trace(session: Session, path: str) -> dict:
    """A standalone Chrome trace of one session (no Kineto events; times from session start)."""
    data = {"schemaVersion": 1, "displayTimeUnit": "ms",
            "traceEvents": device_trace_events(session),
            "deviceProperties": [_device_properties([session])]}
    _write(path, data)
    return data


__all__ = ["DEVICE_PID", "ESTIMATE_PID", "device_trace_events", "merge_into_trace", "write_trace"]
