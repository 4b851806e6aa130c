"""``torchneuron check script.py [args]``: run a user's script on the simulated device and report
where its operators ran.

The script runs as ``__main__`` (``runpy``) with operator tracking cleared first.  Reported:

* placement: ATen operator calls on the NeuronCore vs. CPU fallbacks, per operator;
* for every fallback operator, the call sites that caused it -- the innermost frame in the user's
  code (the script's directory), else the innermost frame outside torch/torchneuron;
* compilation: ``torch.compile`` frames, graphs and graph breaks (with reasons) from
  ``torch._dynamo``'s counters, and the neuron compiler's metrics (graphs compiled, regions,
  nodes left eager, compile seconds, cache hits).

``--default-device neuron`` makes factory calls without a device allocate on ``neuron``
(``torch.set_default_device``); a script that picks ``torch.accelerator.current_accelerator()``
already gets ``neuron``.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import sysconfig
import traceback
from collections import Counter, defaultdict

from ..compiler import verify
from ..compiler.verify import RegionMismatch

_LIB_DIRS = tuple({os.path.realpath(p) for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"],
                                                 sysconfig.get_paths()["platlib"])})


def _show(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _pkg_dir(mod) -> str:
    return os.path.realpath(os.path.dirname(mod.__file__))


class _Sites:
    """Wraps ``torchneuron.ops.tracking.fell_back`` to record each fallback's call site."""

    def __init__(self, script: str):
        import torch

        import torchneuron

        self.user_dir = os.path.realpath(os.path.dirname(os.path.abspath(script)))
        self.internal = (_pkg_dir(torch), _pkg_dir(torchneuron))
        self.sites: dict[str, Counter] = defaultdict(Counter)
        self._cache: dict[str, str] = {}

    def _kind(self, filename: str) -> str:
        k = self._cache.get(filename)
        if k is None:
            path = os.path.realpath(filename) if not filename.startswith("<") else filename
            if path.startswith(self.internal):
                k = "internal"
            elif path.startswith(self.user_dir + os.sep) and not path.startswith(_LIB_DIRS):
                k = "user"
            elif filename.startswith("<") or path.startswith(_LIB_DIRS):
                k = "library"
            else:
                k = "user"
            self._cache[filename] = k
        return k

    def site(self) -> str:
        f = sys._getframe(2)
        library = None
        while f is not None:
            kind = self._kind(f.f_code.co_filename)
            if kind == "user":
                return f"{_show(f.f_code.co_filename)}:{f.f_lineno} ({f.f_code.co_name})"
            if kind == "library" and library is None:
                library = f"{f.f_code.co_filename}:{f.f_lineno} ({f.f_code.co_name})"
            f = f.f_back
        return library or "<unknown>"

    def install(self):
        from torchneuron.ops import tracking

        orig = tracking.fell_back

        def fell_back(name: str) -> None:
            orig(name)
            self.sites[name][self.site()] += 1

        tracking.fell_back = fell_back
        return lambda: setattr(tracking, "fell_back", orig)


def _compile_stats() -> dict:
    out: dict = {}
    try:
        from torch._dynamo.utils import counters

        stats = counters.get("stats", {})
        reasons: Counter = Counter()
        for r, n in counters.get("graph_break", {}).items():
            reasons[(r.strip().splitlines() or [""])[0]] += n
        out["dynamo"] = {
            "frames_compiled": int(stats.get("unique_graphs", 0)),
            "calls_captured": int(stats.get("calls_captured", 0)),
            "graph_breaks": int(sum(counters.get("graph_break", {}).values())),
            "graph_break_reasons": dict(reasons.most_common(10)),
        }
    except Exception:  # noqa: BLE001 -- no dynamo
        pass
    try:
        from torchneuron.compiler.metrics import get_metrics

        m = get_metrics()
        graphs = m.pop("graphs", {})
        m["regions"] = sum(g.get("regions", 0) for g in graphs.values())
        m["eager_nodes"] = sum(g.get("eager_nodes", 0) for g in graphs.values())
        m["library_nodes"] = sum(g.get("library_nodes", 0) for g in graphs.values())
        m["graphs"] = len(graphs)
        out["neuron_compiler"] = m
    except Exception:  # noqa: BLE001
        pass
    return out


def _reset_compile_stats() -> None:
    try:
        from torch._dynamo.utils import counters

        counters.clear()
    except Exception:  # noqa: BLE001
        pass
    try:
        from torchneuron.compiler.metrics import reset_metrics

        reset_metrics()
    except Exception:  # noqa: BLE001
        pass


def run_check(script: str, args: list[str] | None = None, *, default_device: str | None = None) -> dict:
    """Run ``script`` and return the placement/fallback/compile report as plain data."""
    import torch

    import torchneuron

    sites = _Sites(script)
    uninstall = sites.install()
    _reset_compile_stats()
    torchneuron.clear_op_tracking()
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [script, *(args or [])]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    status: dict = {"exit_code": 0, "error": None}
    prev_default = torch.get_default_device()
    try:
        if default_device:
            torch.set_default_device(default_device)
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        status["exit_code"] = code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException as exc:  # noqa: BLE001 -- the report is still useful
        status["exit_code"] = 1
        tb = traceback.extract_tb(exc.__traceback__)
        where = next((f"{_show(fr.filename)}:{fr.lineno}" for fr in reversed(tb)
                      if sites._kind(fr.filename) == "user"), None)
        status["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:300]
        status["error_site"] = where
        if isinstance(exc, KeyboardInterrupt):
            raise
    finally:
        if default_device:
            torch.set_default_device(prev_default)
        sys.argv, sys.path[:] = old_argv, old_path
        uninstall()
    executed = torchneuron.get_executed_ops()
    fallback = torchneuron.get_fallback_ops()
    n_dev, n_cpu = sum(executed.values()), sum(fallback.values())
    return {
        "script": script,
        "args": list(args or []),
        **status,
        "device_op_calls": n_dev,
        "fallback_op_calls": n_cpu,
        "device_fraction": (n_dev / (n_dev + n_cpu)) if n_dev + n_cpu else None,
        "device_ops": dict(Counter(executed).most_common()),
        "fallback_ops": {op: {"calls": n, "sites": dict(sites.sites[op].most_common())}
                         for op, n in Counter(fallback).most_common()},
        "transfers": torchneuron.ops.tracking.transfer_stats(),
        "compile": _compile_stats(),
        "verified_regions": verify.enabled(),
    }


def format_report(rep: dict, top: int = 15) -> str:
    lines = [f"torchneuron check: {rep['script']} {' '.join(rep['args'])}".rstrip()]
    if rep["error"]:
        lines.append(f"  script failed: {rep['error']}" + (f" at {rep['error_site']}" if rep.get("error_site") else ""))
    elif rep["exit_code"]:
        lines.append(f"  script exited with {rep['exit_code']}")
    total = rep["device_op_calls"] + rep["fallback_op_calls"]
    lines.append("")
    lines.append(f"Operator placement: {total} ATen op calls, {rep['device_op_calls']} on the NeuronCore, "
                 f"{rep['fallback_op_calls']} CPU fallbacks"
                 + (f" ({100 * rep['device_fraction']:.1f}% on device)" if total else ""))
    if not total:
        lines.append("  no operator ran on neuron: pick the device with torch.accelerator.current_accelerator() "
                     "(or 'neuron'), or run with --default-device neuron")
    if rep["device_ops"]:
        lines.append("  top device ops: " + ", ".join(f"{op} x{n}" for op, n in list(rep["device_ops"].items())[:8]))
    t = rep["transfers"]
    lines.append(f"  host->device copies: {t['host_to_device_count']} ({t['host_to_device_bytes'] / 2**20:.2f} MiB), "
                 f"device->host: {t['device_to_host_count']} ({t['device_to_host_bytes'] / 2**20:.2f} MiB)")
    lines.append("")
    if rep["fallback_ops"]:
        lines.append(f"CPU fallbacks ({len(rep['fallback_ops'])} ops):")
        lines.append(f"  {'op':<44} {'calls':>6}  from")
        for op, d in list(rep["fallback_ops"].items())[:top]:
            sites = list(d["sites"].items())
            first = f"{sites[0][0]} x{sites[0][1]}" if sites else ""
            lines.append(f"  {op:<44} {d['calls']:>6}  {first}")
            for s, n in sites[1:4]:
                lines.append(f"  {'':<44} {'':>6}  {s} x{n}")
            if len(sites) > 4:
                lines.append(f"  {'':<44} {'':>6}  ... {len(sites) - 4} more sites")
    else:
        lines.append("CPU fallbacks: none")
    c = rep["compile"]
    lines.append("")
    d = c.get("dynamo")
    if d and (d["frames_compiled"] or d["graph_breaks"]):
        lines.append(f"torch.compile: {d['frames_compiled']} graphs captured, {d['graph_breaks']} graph breaks")
        for reason, n in d["graph_break_reasons"].items():
            lines.append(f"  break x{n}: {reason[:150]}")
    else:
        lines.append("torch.compile: not used")
    m = c.get("neuron_compiler")
    if m and m.get("graphs"):
        lines.append(f"neuron compiler: {m['graphs']} graphs ({m['graphs_compiled']} compiled, {m['cache_hits']} cache hits), "
                     f"{m['regions']} regions, {m['library_nodes']} library kernels (convolutions), "
                     f"{m['eager_nodes']} nodes left eager, {m['fallbacks']} graph fallbacks, "
                     f"{m['compile_seconds']:.1f} s compiling")
    if rep.get("verified_regions"):
        found = (m or {}).get("mismatched_regions", [])
        wrong = sum(not d["amplified"] for d in found)
        lines.append(f"region check (TORCHNEURON_VERIFY_REGIONS): {wrong} compiled regions compute a wrong result, "
                     f"{len(found) - wrong} amplify float rounding (ill-conditioned); "
                     f"{(m or {}).get('region_mismatches', 0)} calls differed from the eager kernels")
        for d in found[:top]:
            lines.append(f"  {RegionMismatch(**d).describe()}")
    return "\n".join(lines)


def check_script(script: str, args: list[str] | None = None, *, default_device: str | None = None,
                 top: int = 15, as_json: bool = False, out=None) -> int:
    out = out or sys.stdout
    rep = run_check(script, args, default_device=default_device)
    if as_json:
        print(json.dumps(rep, indent=2), file=out)
    else:
        print(format_report(rep, top), file=out)
    return int(rep["exit_code"] or 0)
