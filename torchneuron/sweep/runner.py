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


def has_nan(out) -> bool:
    """Whether a model output (tensors, model outputs, dicts, lists) holds a floating NaN, which is
    never a meaningful CPU reference."""
    import torch

    return any(t.is_floating_point() and bool(torch.isnan(t).any()) for t in _flatten(out))


def _loss(out, kind: str = "square"):
    if kind == "sum":  # torchvision detection in train mode: a dict of losses
        if not isinstance(out, dict) or not out:
            raise RuntimeError(f"expected a dict of losses in train mode, got {type(out).__name__}")
        return sum(v.float() for v in out.values())
    ts = [t for t in _flatten(out) if t.is_floating_point() and t.requires_grad]
    if not ts:
        raise RuntimeError("model output has no differentiable floating-point tensor")
    total = _mean_square(ts[0])
    for t in ts[1:]:
        total = total + _mean_square(t)
    return total


def _mean_square(t):
    """The mean of ``t``'s squares; over its finite elements where some are not (Grounding-DINO's
    logits are -inf at masked text positions, on the CPU as on the device: their square made the
    loss infinite), so that the training step still trains what the model computes."""
    import torch

    t = t.float()
    finite = torch.isfinite(t.detach())
    if bool(finite.all()):
        return t.pow(2).mean()
    kept = torch.where(finite, t, torch.zeros((), dtype=t.dtype, device=t.device))
    return kept.pow(2).sum() / finite.sum().clamp_min(1)


def _to(obj, device):
    """Move the tensors in nested dicts/lists/tuples to ``device``."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(v, device) for v in obj)
    return obj


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


# random ops whose values feed the compared outputs (ViT-MAE's masking noise, ViLT's patch
# sampling, VITS' duration noise ...): both compared forwards are seeded identically, and these
# ops draw from the host generator (same seed, same stream, whatever the device's generator
# implements for an op) with the result moved to the device.  The training step uses the
# device's own generator.
_RANDOM_FUNCS = {
    "rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "bernoulli",
    "multinomial", "normal", "poisson", "uniform_", "normal_", "bernoulli_", "exponential_", "random_",
    "geometric_", "log_normal_", "cauchy_",
}


def _host_rng_mode():
    import torch
    from torch.overrides import TorchFunctionMode

    def on_device(v) -> bool:
        if isinstance(v, torch.Tensor):
            return v.device.type == "neuron"
        if isinstance(v, (torch.device, str)):
            return torch.device(v).type == "neuron"
        if isinstance(v, (list, tuple)):
            return any(on_device(x) for x in v)
        return False

    def host(v):
        if isinstance(v, torch.Tensor):
            return v.cpu()
        if isinstance(v, (list, tuple)):
            return type(v)(host(x) for x in v)
        return v

    class HostRNG(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            if name not in _RANDOM_FUNCS or not (on_device(args) or on_device(kwargs.get("device"))
                                                 or on_device(list(kwargs.values()))):
                return func(*args, **kwargs)
            hargs = host(args)
            hkw = {k: ("cpu" if k == "device" else host(v)) for k, v in kwargs.items()}
            out = func(*hargs, **hkw)
            if name.endswith("_") and args and isinstance(args[0], torch.Tensor):  # in place
                with torch.no_grad():
                    args[0].copy_(hargs[0])
                return args[0]
            return _to(out, "neuron")

    return HostRNG()


def _finite(ts) -> bool:
    import torch

    return all(bool(torch.isfinite(t).all()) for t in ts if t.is_floating_point() and t.numel())


def _structure(out):
    """The shape of an output that is not compared value by value (detections): types, lengths, keys."""
    import torch

    if isinstance(out, torch.Tensor):
        return "T"
    if isinstance(out, dict):
        return {k: _structure(v) for k, v in out.items()}
    if isinstance(out, (list, tuple)):
        return [_structure(v) for v in out]
    return type(out).__name__


def compare_outputs(got: list, ref: list, *, rtol: float = 1e-3, atol: float = 1e-3) -> dict:
    """Compare the device's outputs ``got`` with the CPU's ``ref`` (float tensors, in order).

    Each output is compared relative to its own largest reference magnitude ``s``:
    ``allclose(g, r, rtol, atol * s)``. Random-init vision models often end in outputs of 1e-6 to
    1e-14 (their eval-mode batch norms never saw data, and each block shrinks the activations); an
    absolute tolerance would accept any result for them. A reference that is all zeros, or whose
    largest value is subnormal (below float32's smallest normal number, which compiled code may flush to
    zero), is compared with ``atol`` itself. Infinities and NaNs of the reference must be reproduced
    exactly and are left out of ``s`` (an infinite scale would accept anything). Returns ``max_abs_err`` (largest absolute difference), ``rel_err``
    (largest difference relative to its output's ``s``) and ``ref_scale`` (the largest ``s``: below
    float32's smallest normal number, nothing was compared relatively);
    raises ``AssertionError`` on a count or shape mismatch. ``mismatch`` is the message of the first
    output outside the tolerance, or None.
    """
    import torch

    if len(got) != len(ref):
        raise AssertionError(f"output count differs: neuron {len(got)} vs cpu {len(ref)}")
    abs_err, rel_err, ref_scale, mismatch = 0.0, 0.0, None, None
    for g, r in zip(got, ref, strict=True):
        if g.shape != r.shape:
            raise AssertionError(f"output shape differs: neuron {tuple(g.shape)} vs cpu {tuple(r.shape)}")
        if not g.numel():
            continue
        # non-finite reference elements (-inf at masked logits) must be matched exactly and do not
        # set the scale: an infinite one would make every finite element pass
        finite = torch.isfinite(r)
        special_differs = not torch.equal(g[~finite].isnan(), r[~finite].isnan()) or not torch.equal(
            g[~finite].nan_to_num(0.0, float("inf"), float("-inf")), r[~finite].nan_to_num(0.0, float("inf"), float("-inf")))
        s = float(r[finite].abs().max()) if bool(finite.any()) else 0.0
        scale = s if s >= torch.finfo(torch.float32).tiny else 1.0
        e = float((g[finite] - r[finite]).abs().max()) if bool(finite.any()) else 0.0
        if not (e == e) or special_differs:  # NaN, or an inf/NaN of the reference not reproduced
            e = float("inf")
        abs_err, rel_err = max(abs_err, e), max(rel_err, e / scale)
        ref_scale = s if ref_scale is None else max(ref_scale, s)
        close = not special_differs and torch.allclose(g[finite], r[finite], rtol=rtol, atol=atol * scale)
        if mismatch is None and not close:
            mismatch = f"outputs differ from CPU: max abs err {e:.3g} (scale {scale:.3g})"
    return {"max_abs_err": abs_err, "rel_err": rel_err, "ref_scale": ref_scale, "mismatch": mismatch}


def check(suite: str, name: str, mode: str, *, rtol: float = 1e-3, atol: float = 1e-3) -> dict:
    """Build, move to neuron, forward (vs CPU), one training step; return a result record."""
    import torch

    import torchneuron
    from torchneuron.compiler import metrics as compiler_metrics
    from torchneuron.compiler import verify
    from torchneuron.runtime.rng import drawing_from_host

    from . import registry

    rec = {"model": name, "suite": suite, "mode": mode, "status": "fail", "cause": None, "error": None,
           "fallback_ops": {}, "seconds": 0.0, "peak_bytes": 0, "max_abs_err": None,
           "rel_err": None, "ref_scale": None}
    t0 = time.perf_counter()
    stage = "build"
    verifying = mode != "eager" and verify.enabled()
    if verifying:
        compiler_metrics.reset_metrics()
    torchneuron.clear_op_tracking()
    torch.neuron.reset_peak_memory_stats()
    try:
        torch.manual_seed(0)
        case = registry.build(suite, name)
        rec["family"] = case.family
        model, inputs = case.model, case.inputs
        compare = case.compare or (lambda m, inp: m(**inp))
        model.eval()
        # the device's copy is taken before any CPU forward: a forward may cache tensors in plain
        # attributes (Mimi's codebooks), which ``.to()`` does not move, as on CUDA
        dev_model = copy.deepcopy(model)
        stage = "cpu reference"
        with torch.no_grad(), _host_rng_mode():
            torch.manual_seed(0)
            ref = [t.detach().float() for t in _flatten(compare(model, inputs)) if t.is_floating_point()]
            ref_full = model(**inputs) if case.compare is not None and case.full_eval else None
        if has_nan(ref):
            # NaN is never a meaningful reference (e.g. attention rows the recipe's mask leaves empty)
            raise FloatingPointError("the CPU reference output has NaN values; nothing to compare")
        stage = "to device"
        torchneuron.clear_op_tracking()
        torch.neuron.reset_peak_memory_stats()
        dev_model = dev_model.to("neuron")
        dev_inputs = _to(inputs, "neuron")
        run = dev_model
        compare_run = compare
        if mode == "compile":
            stage = "compile"
            torch._dynamo.reset()
            run = torch.compile(dev_model, backend="neuron")
            if case.compare is not None:
                # the compared function is compiled as a whole: called on the compiled module it
                # would reach its submodules (``run.backbone``) through attribute access, which
                # returns the original modules, and compare eager kernels instead of compiled code
                compiled_compare = torch.compile(lambda inp: case.compare(dev_model, inp), backend="neuron")

                def compare_run(_m, inp):
                    return compiled_compare(inp)
        if mode == "adaptive":
            torchneuron.adaptive.reset_metrics()
            torchneuron.set_execution_mode("adaptive")
        stage = "compile" if mode == "compile" else "forward"
        # compile mode: no Python mode around the traced call (dynamo would trace it); random ops run
        # on the device's kernels outside the compiled regions, which then draw from the host's stream
        rng = _host_rng_mode() if mode != "compile" else drawing_from_host()
        with torch.no_grad(), rng:
            torch.manual_seed(0)
            got = [t.detach().float().cpu() for t in _flatten(compare_run(run, dev_inputs)) if t.is_floating_point()]
            got_full = run(**dev_inputs) if ref_full is not None else None
        stage = "numerics"
        stats = compare_outputs(got, ref, rtol=rtol, atol=atol)
        mismatch = stats.pop("mismatch")
        rec.update(stats)
        if mismatch:
            raise AssertionError(mismatch)
        if got_full is not None:  # data-dependent outputs (detections): structure and finiteness only
            full = _to(got_full, "cpu")
            if _structure(full) != _structure(ref_full):
                raise AssertionError(f"eval output structure differs: neuron {_structure(full)} vs cpu {_structure(ref_full)}"[:300])
            if not _finite(_flatten(full)):
                raise AssertionError("eval output has non-finite values on neuron")
        stage = "compile" if mode == "compile" else "train step"
        train_inputs = _to(case.train_inputs, "neuron") if case.train_inputs is not None else dev_inputs
        dev_model.train()
        opt = torch.optim.SGD(dev_model.parameters(), lr=1e-3)
        opt.zero_grad()
        try:
            torch.manual_seed(0)  # as the CPU re-run below: same dropout / layer-drop draws
            loss = _loss(run(**train_inputs), case.loss)
            loss.backward()
            if not _finite([loss.detach().cpu()]):
                raise FloatingPointError(f"training loss is {float(loss)} on neuron")
        except Exception as exc:
            # a training step the recipe cannot run on CPU either (e.g. a model that needs labels
            # in train mode) is a skip; anything that only fails on the device stays a failure
            cpu_err = _cpu_train_error(model, case)
            if cpu_err is not None:
                stage = "cpu train step"
                raise cpu_err from exc
            if isinstance(exc, FloatingPointError):
                stage = "numerics"
            raise
        opt.step()
        torch.neuron.synchronize() if hasattr(torch.neuron, "synchronize") else None
        if verifying:  # TORCHNEURON_VERIFY_REGIONS: every compiled region was run beside its eager graph
            stage = "numerics"
            found = compiler_metrics.get_metrics()["mismatched_regions"]
            wrong = [m for m in found if not m["amplified"]]
            rec["region_mismatches"] = len(wrong)
            rec["amplified_regions"] = len(found) - len(wrong)  # ill-conditioned, not wrong (verify.py)
            if wrong:
                raise AssertionError(verify.RegionMismatch(**wrong[0]).describe())
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
        if stage in ("build", "cpu reference", "cpu train step"):
            rec["status"] = "skip"  # does not run on CPU either: not counted against the device
            rec["cause"] = "cpu reference" if stage == "cpu train step" else stage
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


def _cpu_train_error(model, case) -> Exception | None:
    """The error of the same training step on CPU (on a copy), or None if it runs there."""
    import torch

    try:
        m = copy.deepcopy(model).train()
        inputs = case.train_inputs if case.train_inputs is not None else case.inputs
        torch.manual_seed(0)
        loss = _loss(m(**inputs), case.loss)
        loss.backward()
        if not bool(torch.isfinite(loss.detach())):
            return FloatingPointError(f"training loss is {float(loss)} on CPU too")
    except Exception as exc:  # noqa: BLE001
        return exc
    return None


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

    def __init__(self, timeout: float = 180.0, env: dict[str, str] | None = None):
        self.timeout = timeout
        self.env = env  # the workers' environment (default: this process's)
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile("w+", prefix="sweep-worker-", suffix=".log", delete=False)

    def _start(self) -> None:
        self.log.seek(0)
        self.log.truncate()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torchneuron.sweep.runner", "--worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1, env=self.env,
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
