"""Run one (model, mode) check.

:func:`check` does the work in-process; :class:`Worker` runs checks in a child process (``python
-m torchneuron.sweep.runner --worker``) that is reused across models and respawned after a crash
or a timeout, so a segfault or a hang costs one record, not the sweep.
"""

from __future__ import annotations

import copy
import json
import os
import select
import subprocess
import sys
import tempfile
import time
import traceback

CAUSES = ("missing op", "numerics", "compile error", "timeout", "crash", "cpu reference", "build")


def _flatten(out) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict) or hasattr(out, "to_tuple"):
        vals = out.values() if isinstance(out, dict) else out.to_tuple()
        return [t for v in vals for t in _flatten(v)]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in _flatten(v)]
    return []


def _loss(out):
    ts = [t for t in _flatten(out) if t.is_floating_point() and t.requires_grad]
    if not ts:
        raise RuntimeError("model output has no differentiable floating-point tensor")
    total = ts[0].float().pow(2).mean()
    for t in ts[1:]:
        total = total + t.float().pow(2).mean()
    return total


def _to(obj, device):
    import torch

    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in obj.items()}


def _first_line(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {msg[0] if msg else ''}"[:300]


def _classify(exc: BaseException, stage: str) -> str:
    text = f"{type(exc).__name__} {exc}".lower()
    if stage == "compile" or "dynamo" in text or "inductor" in text or "backendcompilerfailed" in text:
        return "compile error"
    if isinstance(exc, NotImplementedError) or "not implemented" in text or "not supported" in text \
            or "could not run" in text or "no kernel" in text or "does not support" in text:
        return "missing op"
    return "crash"


def check(suite: str, name: str, mode: str, *, rtol: float = 1e-3, atol: float = 1e-3) -> dict:
    """Build, move to neuron, forward (vs CPU), one training step; return a result record."""
    import torch

    import torchneuron

    from . import registry

    rec = {"model": name, "suite": suite, "mode": mode, "status": "fail", "cause": None, "error": None,
           "fallback_ops": {}, "seconds": 0.0, "peak_bytes": 0, "max_abs_err": None}
    t0 = time.perf_counter()
    stage = "build"
    torchneuron.clear_op_tracking()
    torch.neuron.reset_peak_memory_stats()
    try:
        torch.manual_seed(0)
        model, inputs = registry.build(suite, name)
        model.eval()
        stage = "cpu reference"
        with torch.no_grad():
            ref = [t.detach().float() for t in _flatten(model(**inputs)) if t.is_floating_point()]
        stage = "to device"
        dev_model = copy.deepcopy(model)
        torchneuron.clear_op_tracking()
        torch.neuron.reset_peak_memory_stats()
        dev_model = dev_model.to("neuron")
        dev_inputs = _to(inputs, "neuron")
        run = dev_model
        if mode == "compile":
            stage = "compile"
            torch._dynamo.reset()
            run = torch.compile(dev_model, backend="neuron")
        if mode == "adaptive":
            torchneuron.adaptive.reset_metrics()
            torchneuron.set_execution_mode("adaptive")
        stage = "compile" if mode == "compile" else "forward"
        with torch.no_grad():
            got = [t.detach().float().cpu() for t in _flatten(run(**dev_inputs)) if t.is_floating_point()]
        stage = "numerics"
        if len(got) != len(ref):
            raise AssertionError(f"output count differs: neuron {len(got)} vs cpu {len(ref)}")
        err = 0.0
        for g, r in zip(got, ref, strict=True):
            if g.shape != r.shape:
                raise AssertionError(f"output shape differs: neuron {tuple(g.shape)} vs cpu {tuple(r.shape)}")
            if g.numel():
                scale = max(1.0, float(r.abs().max()))
                e = float((g - r).abs().max())
                if not (e == e):  # NaN
                    e = float("inf")
                err = max(err, e / scale)
                if not torch.allclose(g, r, rtol=rtol, atol=atol * scale, equal_nan=True):
                    rec["max_abs_err"] = e
                    raise AssertionError(f"outputs differ from CPU: max abs err {e:.3g} (scale {scale:.3g})")
        rec["max_abs_err"] = err
        stage = "compile" if mode == "compile" else "train step"
        dev_model.train()
        opt = torch.optim.SGD(dev_model.parameters(), lr=1e-3)
        opt.zero_grad()
        _loss(run(**dev_inputs)).backward()
        opt.step()
        torch.neuron.synchronize() if hasattr(torch.neuron, "synchronize") else None
        if mode == "adaptive":
            torchneuron.set_execution_mode("eager")
            m = torchneuron.adaptive.get_metrics()
            rec["adaptive"] = {k: m[k] for k in ("windows", "windows_fused", "windows_replayed",
                                                 "windows_non_fusable", "ops_recorded", "ops_not_recordable")}
            if m["windows_non_fusable"]:
                raise RuntimeError(f"adaptive eager could not fuse a window: {m['failures'][0]}")
        rec["status"] = "pass"
    except Exception as exc:  # noqa: BLE001 -- every failure becomes a record
        if mode == "adaptive":
            torchneuron.set_execution_mode("eager")
        if stage in ("build", "cpu reference"):
            rec["status"] = "skip"  # does not run on CPU either: not counted against the device
            rec["cause"] = stage
        elif stage == "numerics":
            rec["cause"] = "numerics"
        else:
            rec["cause"] = _classify(exc, stage)
        rec["stage"] = stage
        rec["error"] = _first_line(exc)
        if os.environ.get("TORCHNEURON_SWEEP_TRACEBACK"):
            traceback.print_exc()
    finally:
        try:
            rec["fallback_ops"] = dict(torchneuron.get_fallback_ops())
            rec["peak_bytes"] = int(torch.neuron.max_memory_allocated())
        except Exception:
            pass
        rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec


# ----------------------------------------------------------------------------- worker process

def _worker_main() -> None:
    """Read ``{"suite", "model", "mode"}`` lines on stdin; write one record per line on the result fd."""
    import warnings

    warnings.simplefilter("ignore")
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints from models go to the log, not the result stream
    import torch  # noqa: F401  -- autoloads torchneuron

    torch.set_num_threads(int(os.environ.get("TORCHNEURON_SWEEP_THREADS", "1")))
    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        task = json.loads(line)
        rec = check(task["suite"], task["model"], task["mode"])
        out.write(json.dumps(rec) + "\n")


class Worker:
    """A reusable child process; :meth:`run` returns a record, or a timeout/crash record."""

    def __init__(self, timeout: float = 180.0):
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile("w+", prefix="sweep-worker-", suffix=".log", delete=False)

    def _start(self) -> None:
        self.log.seek(0)
        self.log.truncate()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torchneuron.sweep.runner", "--worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1,
        )
        if not self._readline(300.0):
            raise RuntimeError(f"sweep worker failed to start: {self._tail()}")

    def _readline(self, timeout: float):
        assert self.proc is not None and self.proc.stdout is not None
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            return None
        return self.proc.stdout.readline()  # "" at EOF: the worker died

    def _tail(self) -> str:
        try:
            self.log.flush()
            with open(self.log.name, errors="replace") as f:
                lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
            return lines[-1][:300] if lines else ""
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None

    def run(self, suite: str, name: str, mode: str) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        t0 = time.perf_counter()
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"suite": suite, "model": name, "mode": mode}) + "\n")
            self.proc.stdin.flush()
            line = self._readline(self.timeout)
        except (BrokenPipeError, OSError):
            line = ""  # the worker is gone
        if line:
            return json.loads(line)
        timed_out = line is None
        if not timed_out:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        rc = self.proc.poll()
        tail = self._tail()
        self.stop()
        base = {"model": name, "suite": suite, "mode": mode, "status": "fail", "fallback_ops": {},
                "seconds": round(time.perf_counter() - t0, 3), "peak_bytes": 0}
        if timed_out:
            return {**base, "cause": "timeout", "error": f"no result after {self.timeout:.0f}s"}
        return {**base, "cause": "crash", "error": f"worker exited with {rc}: {tail}"[:300]}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


if __name__ == "__main__":
    if "--worker" in sys.argv:
        _worker_main()
