"""Generate the operator-placement table from what the compiler can lower to StableHLO.

    python -m torchneuron.tools.op_support [--samples 2] [--ops NAME ...]

For every entry of PyTorch's OpInfo database and every dtype in {float32, bfloat16, float16,
int32, int64, bool} the CPU supports, a few samples are traced with fake tensors (forward, and
backward in float32 for differentiable ops), which yields the ATen overloads that reach a
backend. Each overload-with-dtype is placed on the device when its node lowers to StableHLO —
directly, or after the decompositions the compiler applies — and on the CPU otherwise.
The result is ``torchneuron/data/op_support.json`` (read by ``ops/placement.py``, so eager,
adaptive eager and compile mode agree) and the human-readable ``docs/op_support.md``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import operator
import os
import sys
import warnings
from collections import defaultdict
from pathlib import Path

import torch
import torch.fx as fx

DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.bool)
_SKIP_TARGETS = {operator.getitem}


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def _first_dtype(node: fx.Node) -> str | None:
    for a in node.all_input_nodes:
        v = a.meta.get("val")
        if isinstance(v, torch.Tensor):
            return _dtype_name(v.dtype)
    v = node.meta.get("val")
    if isinstance(v, torch.Tensor):
        return _dtype_name(v.dtype)
    if isinstance(v, (list, tuple)):
        for t in v:
            if isinstance(t, torch.Tensor):
                return _dtype_name(t.dtype)
    return None


_verdicts: dict[str, bool] = {}
_state_dir: Path | None = None


def _node_supported(node: fx.Node) -> bool:
    """Lowers as a single node, or decomposes (as the compiler would) into nodes that do.

    torch-mlir can abort the process on some inputs (an LLVM fatal error): the key being probed
    is written to ``pending`` first, so the parent process can mark it unsupported and resume.
    """
    from torchneuron.compiler.lowering import _key, crashes_lowering

    if crashes_lowering(node):
        # a property of this sample (a ``dim`` on a 0-d tensor), not of the overload and dtypes:
        # caching it under the overload's key would judge every later sample by it
        return False
    key = repr(_key(node))
    hit = _verdicts.get(key)
    if hit is None:
        if _state_dir is not None:
            (_state_dir / "pending").write_text(key)
        hit = _verdicts[key] = _probe(node)
        if _state_dir is not None:
            with open(_state_dir / "verdicts.jsonl", "a") as f:
                f.write(json.dumps([key, hit]) + "\n")
    return hit


def _probe(node: fx.Node) -> bool:
    from torchneuron.compiler.lowering import node_lowers, single_node_graph
    from torchneuron.compiler.passes import decompositions

    if node_lowers(node):
        return True
    table = decompositions()
    if node.target not in table:
        return False
    try:
        gm = single_node_graph(node)
        from torch.fx.experimental.proxy_tensor import make_fx

        # fresh meta tensors: the node's values belong to the first trace's fake mode
        inputs = [
            torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
            for v in (p.meta["val"] for p in gm.graph.nodes if p.op == "placeholder")
        ]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dgm = make_fx(gm, decomposition_table=table, tracing_mode="fake")(*inputs)
    except Exception:  # noqa: BLE001 - a decomposition that cannot be traced does not help
        return False
    for n in dgm.graph.nodes:
        if n.op == "call_function" and n.target not in _SKIP_TARGETS:
            if not node_lowers(n):
                return False
    return True


def _trace(fn, args) -> fx.GraphModule | None:
    from torch.fx.experimental.proxy_tensor import make_fx

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return make_fx(fn, tracing_mode="fake")(*args)
    except Exception:  # noqa: BLE001 - samples the tracer cannot handle are skipped
        return None


def _sample_graphs(opinfo, dtype, samples: int):
    sample_iter = opinfo.sample_inputs("cpu", dtype, requires_grad=False)
    for i, s in enumerate(sample_iter):
        if i >= samples:
            break
        args = [s.input, *s.args]
        kwargs = dict(s.kwargs)
        tensor_pos = [j for j, a in enumerate(args) if isinstance(a, torch.Tensor)]
        if not tensor_pos:
            continue
        tensors = [args[j] for j in tensor_pos]

        def fwd(*ts, _args=args, _pos=tensor_pos, _kwargs=kwargs):
            call = list(_args)
            for j, t in zip(_pos, ts, strict=True):
                call[j] = t
            return opinfo.op(*call, **_kwargs)

        gm = _trace(fwd, tensors)
        if gm is not None:
            yield gm
        if dtype == torch.float32 and opinfo.supports_autograd:
            def fwd_bwd(*ts, _fwd=fwd):
                ts = [t.detach().requires_grad_(t.is_floating_point()) for t in ts]
                out = _fwd(*ts)
                outs = [o for o in (out if isinstance(out, (list, tuple)) else [out])
                        if isinstance(o, torch.Tensor) and o.requires_grad]
                if not outs:
                    return out
                diff = [t for t in ts if t.requires_grad]
                return torch.autograd.grad(sum(o.float().sum() for o in outs), diff, allow_unused=True)

            gm = _trace(fwd_bwd, tensors)
            if gm is not None:
                yield gm


def _start_memory_watchdog() -> None:
    import threading
    import time

    page = os.sysconf("SC_PAGE_SIZE")

    def watch() -> None:
        while True:
            with open("/proc/self/statm") as f:
                rss = int(f.read().split()[1]) * page
            if rss > WORKER_RSS_LIMIT:
                print(f"\nprobe exceeded {WORKER_RSS_LIMIT >> 30} GiB of memory", file=sys.stderr, flush=True)
                os._exit(3)
            time.sleep(0.2)

    threading.Thread(target=watch, daemon=True).start()


def _entries(only: list[str] | None):
    from torch.testing._internal.common_methods_invocations import op_db

    return [o for o in op_db if not only or o.name in only]


WORKER_RSS_LIMIT = 8 * 1024**3  # resident bytes a probing worker may use


def _worker(state_dir: Path, samples: int, only: list[str] | None) -> None:
    """Probe the OpInfo entries from the recorded position on, appending records.

    A watchdog ends the worker when its resident memory passes ``WORKER_RSS_LIMIT`` (some
    lowerings materialise huge constants); the parent marks that probe unsupported and resumes.
    """
    global _state_dir
    _state_dir = state_dir
    _start_memory_watchdog()
    vfile = state_dir / "verdicts.jsonl"
    if vfile.exists():
        for line in vfile.read_text().splitlines():
            if line.strip():
                k, v = json.loads(line)
                _verdicts[k] = v
    entries = _entries(only)
    progress_file = state_dir / "progress"
    start = int(progress_file.read_text()) if progress_file.exists() else 0
    for k in range(start, len(entries)):
        opinfo = entries[k]
        print(f"\r[{k + 1}/{len(entries)}] {opinfo.name:<40}", end="", file=sys.stderr, flush=True)
        records = _probe_entry(opinfo, samples)
        with open(state_dir / "records.jsonl", "a") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
        progress_file.write_text(str(k + 1))
    print(file=sys.stderr)


def _probe_entry(opinfo, samples: int) -> list[list]:
    """[overload, dtype, lowers, opinfo name] for every backend node of the entry's samples."""
    records: list[list] = []
    supported = opinfo.supported_dtypes("cpu")
    for dtype in DTYPES:
        if dtype not in supported:
            continue
        try:
            graphs = list(_sample_graphs(opinfo, dtype, samples))
        except Exception:  # noqa: BLE001 - OpInfo sample generators can fail for exotic dtypes
            continue
        for gm in graphs:
            for node in gm.graph.nodes:
                if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
                    continue
                qualified = node.target.name()  # "aten::add.Tensor", "aten::sum"
                d = _first_dtype(node)
                if d is not None:
                    records.append([qualified, d, _node_supported(node), opinfo.name])
    return records


def generate(samples: int = 2, only: list[str] | None = None, state_dir: Path | None = None) -> dict:
    """Run the probing in a worker process, restarting it past any probe that aborts it."""
    import subprocess
    import tempfile

    state = Path(state_dir or tempfile.mkdtemp(prefix="op_support_"))
    state.mkdir(parents=True, exist_ok=True)
    crashes = 0
    while True:
        cmd = [sys.executable, "-m", "torchneuron.tools.op_support", "--worker", str(state), "--samples", str(samples)]
        if only:
            cmd += ["--ops", *only]
        if subprocess.run(cmd).returncode == 0:
            break
        pending = (state / "pending").read_text() if (state / "pending").exists() else None
        if pending is None:
            raise RuntimeError("op_support worker failed before probing anything")
        crashes += 1
        print(f"\nprobe aborted the compiler, marked unsupported: {pending}", file=sys.stderr)
        with open(state / "verdicts.jsonl", "a") as f:
            f.write(json.dumps([pending, False]) + "\n")
        if crashes > 200:
            raise RuntimeError("too many compiler aborts")
    return aggregate(state / "records.jsonl")


# Operators the runtime itself implements (memory, copies, metadata, synchronisation): they are
# not computations the compiler places, they exist on every device.
RUNTIME_OPS = frozenset({
    "aten::_local_scalar_dense", "aten::copy_", "aten::_to_copy", "aten::resize_",
    "aten::resize_as_", "aten::set_", "aten::zero_", "aten::fill_.Scalar", "aten::fill_.Tensor",
    "aten::sym_size.int", "aten::_efficientzerotensor", "aten::new_zeros", "aten::new_empty",
    "aten::new_empty_strided", "aten::empty_like", "aten::empty.memory_format", "aten::empty_strided",
})


# Kernels the device uses to implement a composite the compiler lowers by other means: they are
# judged by the composite (scaled_dot_product_attention lowers through its math path).
IMPLEMENTATION_OPS = frozenset({
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
})


def _is_random(qualified: str) -> bool:
    """Random ops: the compiler keeps them out of compiled regions on purpose (they draw from
    the device generator eagerly), so they run on the device in every mode."""
    ns_name, _, overload = qualified.partition(".")
    ns, _, name = ns_name.partition("::")
    packet = getattr(getattr(torch.ops, ns, None), name, None)
    op = getattr(packet, overload or "default", None) if packet is not None else None
    return op is not None and torch.Tag.nondeterministic_seeded in op.tags


def functional_counterpart(qualified: str) -> str | None:
    """The functional overload the compiler turns an in-place or ``out=`` overload into."""
    ns_name, _, overload = qualified.partition(".")
    ns, _, name = ns_name.partition("::")
    if name.endswith("_") and not name.endswith("__"):
        return f"{ns}::{name[:-1]}" + (f".{overload}" if overload else "")
    if overload == "out":
        # the functional overload with the same arguments minus ``out``
        packet = getattr(torch.ops.aten, name, None) if ns == "aten" else None
        out_args = None
        if packet is not None:
            out_args = [a.name for a in packet.out._schema.arguments if not a.kwarg_only]
            for ov in packet.overloads():
                if ov == "out":
                    continue
                args = [a.name for a in getattr(packet, ov)._schema.arguments if not a.kwarg_only]
                if args == out_args:
                    return f"{ns}::{name}" + ("" if ov == "default" else f".{ov}")
        return f"{ns}::{name}"
    if overload.endswith("_out"):
        return f"{ns}::{name}.{overload[:-4]}"
    return None


def aggregate(records_file: Path) -> dict:
    """Per overload and dtype: on the device when at least one probed sample lowers (placement
    cannot depend on argument values), in-place/``out=`` overloads judged by their functional
    counterpart, runtime operators always on the device."""
    verdicts: dict[str, dict[str, bool]] = defaultdict(dict)
    seen_from: dict[str, set[str]] = defaultdict(set)
    for line in records_file.read_text().splitlines():
        qualified, d, ok, name = json.loads(line)
        verdicts[qualified][d] = verdicts[qualified].get(d, False) or ok
        seen_from[qualified].add(name)
    for qualified, per in verdicts.items():
        base = functional_counterpart(qualified)
        for d in per:
            if qualified in RUNTIME_OPS or qualified in IMPLEMENTATION_OPS or _is_random(qualified):
                per[d] = True
            elif not per[d] and base is not None and verdicts.get(base, {}).get(d):
                per[d] = True
    ops = {}
    for qualified in sorted(verdicts):
        per = verdicts[qualified]
        dev = sorted(d for d, ok in per.items() if ok)
        host = sorted(d for d, ok in per.items() if not ok)
        ops[qualified] = {
            "device_dtypes": dev,
            "cpu_dtypes": host,
            "seen_in": sorted(seen_from[qualified])[:5],
        }
    return ops


def merge(table: dict, probed: dict) -> dict:
    """``table`` with the dtype verdicts of ``probed`` replacing its own for the dtypes probed
    again (other dtypes and overloads keep their entries)."""
    out = {k: dict(v) for k, v in table.items()}
    for q, v in probed.items():
        cur = out.setdefault(q, {"device_dtypes": [], "cpu_dtypes": [], "seen_in": []})
        again = set(v["device_dtypes"]) | set(v["cpu_dtypes"])
        cur["device_dtypes"] = sorted((set(cur["device_dtypes"]) - again) | set(v["device_dtypes"]))
        cur["cpu_dtypes"] = sorted((set(cur["cpu_dtypes"]) - again) | set(v["cpu_dtypes"]))
        cur["seen_in"] = sorted(set(cur["seen_in"]) | set(v["seen_in"]))[:5]
    return dict(sorted(out.items()))


def write(ops: dict, json_path: Path, md_path: Path, command: str) -> None:
    import torch_mlir  # noqa: F401 - the version is part of the provenance

    from torchneuron.compiler.executable import compiler_version

    meta = {
        "generated": _dt.date.today().isoformat(),
        "command": command,
        "torch": torch.__version__,
        "compiler": compiler_version(),
        "rule": "an overload+dtype runs on the NeuronCore when it lowers to StableHLO "
        "(directly or after the compiler's decompositions); unlisted overloads run on the device",
    }
    json_path.write_text(json.dumps({"meta": meta, "ops": ops}, indent=1, sort_keys=True) + "\n")
    n_dev = sum(1 for v in ops.values() if v["device_dtypes"] and not v["cpu_dtypes"])
    n_cpu = sum(1 for v in ops.values() if v["cpu_dtypes"] and not v["device_dtypes"])
    n_mixed = len(ops) - n_dev - n_cpu
    lines = [
        "# Operator support on the NeuronCore",
        "",
        f"Generated {meta['generated']} by `{command}` (torch {meta['torch']}, {meta['compiler']}).",
        "",
        "An ATen overload runs on the device for a dtype when the compiler lowers it to StableHLO,",
        "directly or after its decompositions; otherwise it runs on the CPU through an explicit",
        "host round trip (`Operator 'aten::X' executed via CPU fallback`). Overloads not listed",
        "here were not reached by PyTorch's OpInfo samples and run on the device.",
        "",
        f"**{len(ops)} overloads probed: {n_dev} on the device for every probed dtype, "
        f"{n_cpu} on the CPU, {n_mixed} depending on the dtype.**",
        "",
        "| overload | device dtypes | CPU-fallback dtypes |",
        "|---|---|---|",
    ]
    for q, v in ops.items():
        lines.append(f"| `{q}` | {', '.join(v['device_dtypes']) or '—'} | {', '.join(v['cpu_dtypes']) or '—'} |")
    md_path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Generate the operator-placement table.")
    p.add_argument("--samples", type=int, default=2, help="OpInfo samples per (op, dtype)")
    p.add_argument("--ops", nargs="*", help="only these OpInfo names (for a quick look)")
    root = Path(__file__).resolve().parents[2]
    p.add_argument("--json", type=Path, default=root / "torchneuron" / "data" / "op_support.json")
    p.add_argument("--md", type=Path, default=root / "docs" / "op_support.md")
    p.add_argument("--state", type=Path, help="working folder (resumable); default: a new temp folder")
    p.add_argument("--merge", action="store_true",
                   help="with --ops: re-probe those entries and update them in the existing table")
    p.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    os.environ.setdefault("TORCHNEURON_FALLBACK", "silent")
    if args.worker:
        _worker(args.worker, args.samples, args.ops)
        return 0
    ops = generate(samples=args.samples, only=args.ops, state_dir=args.state)
    command = "python -m torchneuron.tools.op_support" + (f" --samples {args.samples}" if args.samples != 2 else "")
    if args.merge:
        if not args.ops:
            p.error("--merge needs --ops")
        old = json.loads(args.json.read_text())
        ops = merge(old["ops"], ops)
        command = f"{old['meta']['command']}` then `{command} --merge --ops {' '.join(args.ops)}"
    write(ops, args.json, args.md, command)
    print(f"wrote {args.json} and {args.md}: {len(ops)} overloads")
    return 0


if __name__ == "__main__":
    sys.exit(main())
