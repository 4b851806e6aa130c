"""Generate the operator-placement table from what the compiler can lower to StableHLO.

    python -m torchneuron.tools.op_support [--samples 2] [--ops NAME ...]

For every entry of PyTorch's OpInfo database and every dtype in {float32, bfloat16, float16,
int32, int64, bool} the CPU supports, a few samples are traced with fake tensors (forward, and
backward in float32 for differentiable ops), which yields the ATen overloads that reach a
backend. Each overload-with-dtype is placed on the device when its node lowers to StableHLO —
directly, or after the decompositions the compiler applies — and on the CPU otherwise.
The result is ``torchneuron/data/op_support.json`` (read by ``ops/placement.py``, so eager,
adaptive eager and compile mode agree) and the human-readable ``docs/op_support.md``.

The verdicts depend only on the compiler and the OpInfo samples, never on the machine's load
or the probing order: every torch-mlir call runs in a forked child with a CPU-time (not
wall-clock) and memory budget, a crash is the verdict of that one graph, verdicts are kept
per node signature (op, arguments, shapes) and combined per overload+dtype with "any sample
lowers", and decompositions are functionalised as AOTAutograd does. A worker that dies is
restarted from ``--state``; a probe is recorded as unsupported only when it kills the worker
twice. ``--state DIR`` makes a run resumable (run the same command again after an interruption).
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


_verdicts: dict[str, bool] = {}  # signature -> lowers (this sample's node exactly)
_key_lowers: set[str] = set()  # (op, dtypes) keys some probed sample lowered
_state_dir: Path | None = None

# CPU seconds a single lowering may use before it counts as a failure. CPU time, not wall
# time: on a loaded machine a wall-clock budget turned slow-but-fine lowerings into verdicts
# of "unsupported", so the table depended on what else the machine was doing.
LOWERING_CPU_SECONDS = 600
LOWERING_MEMORY_BYTES = 8 * 1024**3  # address space a lowering may add (some blow up)


def _signature(node: fx.Node) -> str:
    """The node as the lowering sees it: op, every argument (tensors by dtype, shape and
    stride) and its outputs. Two nodes with equal signatures lower alike."""

    def arg(a):
        if isinstance(a, fx.Node):
            return arg(a.meta.get("val"))
        if isinstance(a, torch.Tensor):
            return ("T", str(a.dtype), tuple(a.shape), tuple(a.stride()) if a.layout == torch.strided else None)
        if isinstance(a, (list, tuple)):
            return tuple(arg(x) for x in a)
        if isinstance(a, dict):
            return tuple(sorted((k, arg(v)) for k, v in a.items()))
        return repr(a)

    return repr((str(node.target), arg(node.args), arg(node.kwargs), arg(node.meta.get("val"))))


def _node_supported(node: fx.Node) -> bool | None:
    """Lowers as a single node, or decomposes (as the compiler would) into nodes that do.

    Verdicts are kept per signature (op, arguments, shapes), never for a whole (op, dtypes)
    key from one sample: the overload+dtype is placed on the device when any of its samples
    lowers (``aggregate``), whatever order the samples are probed in. Once one sample of a
    key lowered, further samples of that key cannot change the outcome and are not probed.

    Every torch-mlir call runs in a forked child (``_lowers_isolated``), so a crash or a memory
    blow-up is that sample's verdict and the direct lowering crashing does not prevent the
    decomposition from being tried. The worker still writes the signature being probed to
    ``pending`` (cleared after the probe), so an abort of the worker itself is attributed to
    the probe under way and to nothing else.
    """
    from torchneuron.compiler.lowering import _key, crashes_lowering

    if crashes_lowering(node):
        # a property of this sample (a ``dim`` on a 0-d tensor), never handed to torch-mlir
        # by the compiler either: it says nothing about the overload and dtypes (None)
        return None
    if _touches_empty_tensor(node):
        # a sample with no elements (OpInfo lists ``unfold`` on a batch of 0 first): whether
        # torch-mlir lowers a computation over nothing says nothing about the op either
        return None
    key = repr(_key(node))
    if key in _key_lowers:
        return True
    sig = _signature(node)
    hit = _verdicts.get(sig)
    if hit is None:
        hit = _remember(sig, key, lambda: _probe(node))
    if hit:
        _key_lowers.add(key)
    return hit


def _touches_empty_tensor(node: fx.Node) -> bool:
    """One of the node's tensor inputs has no elements.

    Inputs only: results without elements are often auxiliary (batch norm in eval mode returns
    empty saved statistics, ``_batch_norm_with_update`` an empty reserve) and say nothing about
    the sample. Sizes only when they are known: a data-dependent size (``nonzero``,
    ``masked_select``) is an unbacked symbol, not an empty tensor."""
    from torchneuron.compiler.lowering import _tensor_vals

    vals = [a.meta.get("val") for a in node.all_input_nodes]
    return any(isinstance(n := t.numel(), int) and n == 0 for v in vals for t in _tensor_vals(v))


def _remember(sig: str, key: str, compute) -> bool:
    if _state_dir is not None:
        (_state_dir / "pending").write_text(json.dumps([sig, key]))
    hit = _verdicts[sig] = bool(compute())
    if _state_dir is not None:
        with open(_state_dir / "verdicts.jsonl", "a") as f:
            f.write(json.dumps([sig, hit, key]) + "\n")
        (_state_dir / "pending").unlink(missing_ok=True)
    return hit


def _lowers(node: fx.Node) -> bool:
    """This node alone lowers to StableHLO (exactly this signature; cached)."""
    from torchneuron.compiler.lowering import _tensor_vals, crashes_lowering, single_node_graph

    if not _tensor_vals(node.meta.get("val")) or crashes_lowering(node):
        return False
    sig = "lower:" + _signature(node)
    hit = _verdicts.get(sig)
    if hit is None:
        try:
            gm = single_node_graph(node)
        except Exception:  # noqa: BLE001 - e.g. a non-tensor input: not a device computation
            hit = _verdicts[sig] = False
        else:
            hit = _verdicts[sig] = _lowers_isolated(gm)
    return hit


def _lowers_isolated(gm: fx.GraphModule) -> bool:
    """``lower(gm)`` in a forked child with a CPU-time and memory budget: a segfault, an LLVM
    abort, a runaway allocation or an endless loop in torch-mlir is a failed lowering of this
    graph, the same on a quiet and on a busy machine (no wall-clock timeout)."""
    import resource
    import signal

    from torchneuron.compiler.lowering import lower

    with open("/proc/self/statm") as f:
        vm = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        ok = b"0"
        try:
            os.close(r)
            torch.set_num_threads(1)  # GNU OpenMP is not fork-safe (see lowering._enter_child)
            resource.setrlimit(resource.RLIMIT_AS, (vm + LOWERING_MEMORY_BYTES,) * 2)
            used = resource.getrusage(resource.RUSAGE_SELF)
            cpu = int(used.ru_utime + used.ru_stime) + LOWERING_CPU_SECONDS
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
            try:
                lower(gm, name="probe")
                ok = b"1"
            except Exception:  # noqa: BLE001 - any failure means "does not lower"
                ok = b"0"
            os.write(w, ok)
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as inp:
        data = inp.read()  # EOF when the child exits, however it exits
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.environ.get("TORCHNEURON_OP_SUPPORT_VERBOSE"):
        why = signal.Signals(os.WTERMSIG(status)).name
        print(f"\n  torch-mlir died ({why}) lowering {gm.graph}", file=sys.stderr)
    return data == b"1"


def _decomposed(node: fx.Node) -> fx.GraphModule | None:
    """The node after the compiler's decompositions, functionalised as AOTAutograd hands
    graphs to the compiler (decompositions written with in-place ops, e.g. ``mish_backward``'s
    ``sub_``, reach the lowering as their functional forms); None when none applies."""
    from torch.func import functionalize
    from torch.fx.experimental.proxy_tensor import make_fx

    from torchneuron.compiler.lowering import single_node_graph
    from torchneuron.compiler.passes import decompositions

    table = decompositions()
    if node.target not in table:
        return None
    try:
        gm = single_node_graph(node)
        # fresh meta tensors: the node's values belong to the first trace's fake mode
        inputs = [
            torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
            for v in (p.meta["val"] for p in gm.graph.nodes if p.op == "placeholder")
        ]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dgm = make_fx(gm, decomposition_table=table, tracing_mode="fake")(*inputs)
            if any(n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                   and n.target._schema.is_mutable for n in dgm.graph.nodes):
                # (only then: the functionalisation pass rejects prims' view ops)
                dgm = make_fx(functionalize(dgm, remove="mutations"), tracing_mode="fake")(*inputs)
            return dgm
    except Exception:  # noqa: BLE001 - a decomposition that cannot be traced does not help
        return None


def _probe(node: fx.Node) -> bool:
    if _lowers(node):
        return True
    dgm = _decomposed(node)
    if dgm is None:
        return False
    for n in dgm.graph.nodes:
        if n.op == "call_function" and n.target not in _SKIP_TARGETS:
            if not _lowers(n):
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


def _sample_graphs(opinfo, dtype):
    """Per OpInfo sample (in OpInfo's order), the graphs it traces to: forward, and forward
    plus backward in float32 for differentiable ops. Samples with an input tensor without
    elements are passed over (``unfold`` lists 40 with a batch of 0 first): they say nothing
    about the op, and would use up the samples looked at."""
    for s in opinfo.sample_inputs("cpu", dtype, requires_grad=False):
        tensors = [a for a in (s.input, *s.args, *s.kwargs.values()) if isinstance(a, torch.Tensor)]
        if any(t.numel() == 0 for t in tensors):
            continue
        yield list(_graphs_of(opinfo, dtype, s))


def _graphs_of(opinfo, dtype, s):
    args = [s.input, *s.args]
    kwargs = dict(s.kwargs)
    tensor_pos = [j for j, a in enumerate(args) if isinstance(a, torch.Tensor)]
    if not tensor_pos:
        return
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
                sig, hit, key = json.loads(line)
                _verdicts[sig] = hit
                if hit:
                    _key_lowers.add(key)
    _warm_up()
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


SAMPLES_LOOKED_AT = 4  # per requested sample: how far past unjudgeable samples to look ...
UNJUDGED_ALLOWANCE = 8  # ... and at least this many past the quota (amax's first 4 are 0-d)


def _warm_up() -> None:
    """Import and initialise torch-mlir once in the worker, so that each forked probe does not
    pay for it again (0.2 s instead of 0.5-0.9 s a probe)."""
    from torchneuron.compiler.lowering import lower

    gm = _trace(torch.neg, [torch.ones(2)])
    if gm is not None:
        try:
            lower(gm, name="warm_up")
        except Exception:  # noqa: BLE001 - only a warm-up: the probes report failures
            pass


def _probe_entry(opinfo, samples: int) -> list[list]:
    """[overload, dtype, lowers, opinfo name] for every backend node of the entry's samples.

    ``samples`` counts the samples that were judged: a sample with a node the compiler never
    hands to torch-mlir (``crashes_lowering``: reductions over a dim of a 0-d tensor, which
    OpInfo lists first), or a node over a tensor without elements (``unfold``'s first samples
    have a batch of 0), is recorded as unjudged (``None``) for that node and does not use up
    the quota, so ``amax`` is judged on real reductions and ``im2col`` on real images; at most ``SAMPLES_LOOKED_AT`` times
    ``samples`` (at least ``samples + UNJUDGED_ALLOWANCE``) samples are looked at. The samples
    looked at depend only on the OpInfo database, never on timing.
    """
    records: list[list] = []
    supported = opinfo.supported_dtypes("cpu")
    for dtype in DTYPES:
        if dtype not in supported:
            continue
        judged = looked = 0
        try:
            for graphs in _sample_graphs(opinfo, dtype):
                if judged >= samples or looked >= max(samples * SAMPLES_LOOKED_AT, samples + UNJUDGED_ALLOWANCE):
                    break
                looked += 1
                complete = True
                for gm in graphs:
                    for node in gm.graph.nodes:
                        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
                            continue
                        qualified = node.target.name()  # "aten::add.Tensor", "aten::sum"
                        d = _first_dtype(node)
                        if d is not None:
                            ok = _node_supported(node)
                            complete = complete and ok is not None
                            records.append([qualified, d, ok, opinfo.name])
                if graphs and complete:
                    judged += 1
        except Exception:  # noqa: BLE001 - OpInfo sample generators can fail for exotic dtypes
            continue
    return records


WORKER_DEATHS_PER_PROBE = 2  # a probe is judged "aborts the worker" after this many deaths


def record_worker_death(state: Path, deaths: dict[str, int]) -> bool:
    """Account for a worker that died; True when the run should give up.

    The lowering itself runs in a child of the worker, so the worker rarely dies; when it does
    (its memory watchdog, the kernel's OOM killer on a busy machine, a crash in tracing), the
    probe named in ``pending`` is retried once before it is recorded as unsupported, and a
    death outside any probe is retried without blaming anything (the stale ``pending`` of an
    earlier probe used to be marked unsupported for a death that had nothing to do with it).
    """
    pf = state / "pending"
    pending = json.loads(pf.read_text()) if pf.exists() else None
    name = pending[0] if pending else ""
    deaths[name] += 1
    if pending is None:
        print("\nop_support worker died outside a probe: resuming", file=sys.stderr)
        return deaths[name] > 5
    if deaths[name] < WORKER_DEATHS_PER_PROBE:
        print(f"\nop_support worker died probing {name}: retrying it", file=sys.stderr)
        return False
    print(f"\nprobe aborted the worker {deaths[name]} times, marked unsupported: {name}", file=sys.stderr)
    with open(state / "verdicts.jsonl", "a") as f:
        f.write(json.dumps([name, False, pending[1]]) + "\n")
    pf.unlink()
    return sum(deaths.values()) > 200


def generate(samples: int = 2, only: list[str] | None = None, state_dir: Path | None = None) -> dict:
    """Run the probing in a worker process, restarting it past any probe that aborts it."""
    import subprocess
    import tempfile

    state = Path(state_dir or tempfile.mkdtemp(prefix="op_support_"))
    state.mkdir(parents=True, exist_ok=True)
    deaths: dict[str, int] = defaultdict(int)  # pending probe (or "" outside one) -> worker deaths
    while True:
        cmd = [sys.executable, "-m", "torchneuron.tools.op_support", "--worker", str(state), "--samples", str(samples)]
        if only:
            cmd += ["--ops", *only]
        if subprocess.run(cmd).returncode == 0:
            break
        if record_worker_death(state, deaths):
            raise RuntimeError(f"the op_support worker keeps dying (state in {state})")
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


def _overload(qualified: str):
    """The OpOverload named ``ns::name.overload``, or None."""
    ns_name, _, overload = qualified.partition(".")
    ns, _, name = ns_name.partition("::")
    packet = getattr(getattr(torch.ops, ns, None), name, None)
    return getattr(packet, overload or "default", None) if packet is not None else None


def _is_random(qualified: str) -> bool:
    """Random ops: the compiler keeps them out of compiled regions on purpose (they draw from
    the device generator eagerly), so they run on the device in every mode."""
    op = _overload(qualified)
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


# Operators that move or describe memory without computing on its elements: they serve every
# dtype device memory holds, including those the chip has no arithmetic for.
MEMORY_OPS = frozenset({
    "aten::copy_", "aten::_to_copy", "aten::resize_", "aten::resize_as_", "aten::set_",
    "aten::sym_size.int", "aten::new_empty", "aten::new_empty_strided", "aten::empty_like",
    "aten::empty.memory_format", "aten::empty_strided",
})


def apply_dtype_rule(ops: dict) -> dict:
    """The chip's dtype rule on top of the lowering verdicts: complex and uint16/32/64 have no
    arithmetic on the NeuronCore, so every overload but views and memory operators runs them
    through the CPU fallback (as the eager runtime does, whatever the compiler could lower)."""
    from torchneuron.ops import registry
    from torchneuron.ops.dtype_policy import HOST_COMPUTED

    host_only = {_dtype_name(d) for d in HOST_COMPUTED}
    out = {}
    for q, v in ops.items():
        v = dict(v)
        op = _overload(q)
        if q not in MEMORY_OPS and not (op is not None and registry._returns_view(op)):
            moved = set(v["device_dtypes"]) & host_only
            v["device_dtypes"] = sorted(set(v["device_dtypes"]) - moved)
            v["cpu_dtypes"] = sorted(set(v["cpu_dtypes"]) | moved)
        out[q] = v
    return out


def aggregate(records_file: Path) -> dict:
    return aggregate_records(json.loads(line) for line in records_file.read_text().splitlines())


def aggregate_records(records) -> dict:
    """Per overload and dtype: on the device when at least one probed sample lowers (placement
    cannot depend on argument values), in-place/``out=`` overloads judged by their functional
    counterpart, runtime operators always on the device."""
    verdicts: dict[str, dict[str, bool]] = defaultdict(dict)
    seen_from: dict[str, set[str]] = defaultdict(set)
    for qualified, d, ok, name in records:
        if ok is None:
            # a sample the compiler never hands to torch-mlir (see _probe_entry): no evidence
            # either way; a dtype seen only in such samples is left out of the table, like an
            # overload no sample reached (a dim of a 0-d tensor is no verdict on the overload)
            continue
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
    return apply_dtype_rule(ops)


def merge_records(old: list, new: list, reprobed: set[str]) -> list:
    """The evidence of a full run with the records of the OpInfo entries ``reprobed`` replaced
    by ``new``. Merging at the record level keeps the table's rule (a dtype is on the device when
    any sample of any entry lowers): replacing an overload's dtype verdicts with those of the
    re-probed entries alone would forget what the other entries showed (``stft``'s samples alone
    would move ``index_add_`` float32 to the CPU)."""
    return [r for r in old if r[3] not in reprobed] + list(new)


def write(ops: dict, json_path: Path, md_path: Path, command: str) -> None:
    import torch_mlir  # noqa: F401 - the version is part of the provenance

    from torchneuron.compiler.executable import compiler_version

    meta = {
        "generated": _dt.date.today().isoformat(),
        "command": command,
        "torch": torch.__version__,
        "compiler": compiler_version(),
        "rule": "an overload+dtype runs on the NeuronCore when it lowers to StableHLO "
        "(directly or after the compiler's decompositions); unlisted overloads run on the device; "
        "complex and uint16/32/64 run through the CPU fallback except in views and memory operators",
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
        "here were not reached by PyTorch's OpInfo samples and run on the device. Complex and",
        "uint16/32/64 tensors live in device memory but the chip has no arithmetic for them:",
        "every overload except views and memory operators runs them through the CPU fallback.",
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
                   help="with --ops and --records: re-probe those entries, replace their records in "
                        "the full run's records and rebuild the table from all of them")
    p.add_argument("--records", type=Path,
                   help="with --merge: records.jsonl of the full run (from its --state folder); "
                        "updated in place")
    p.add_argument("--reapply-rules", action="store_true",
                   help="re-apply the dtype rule to the existing table (no probing)")
    p.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.merge and (not args.ops or args.records is None or not args.records.exists()):
        p.error("--merge needs --ops and --records RECORDS (the full run's records.jsonl, in its "
                "--state folder): a table alone does not say which entry showed which verdict")
    if args.reapply_rules:
        old = json.loads(args.json.read_text())
        ops = apply_dtype_rule(old["ops"])
        command = old["meta"]["command"]
        again = "python -m torchneuron.tools.op_support --reapply-rules"
        if again not in command:
            command = f"{command}` then `{again}"
        write(ops, args.json, args.md, command)
        print(f"wrote {args.json} and {args.md}: {len(ops)} overloads")
        return 0
    os.environ.setdefault("TORCHNEURON_FALLBACK", "silent")
    if args.worker:
        _worker(args.worker, args.samples, args.ops)
        return 0
    command = "python -m torchneuron.tools.op_support" + (f" --samples {args.samples}" if args.samples != 2 else "")
    if args.merge:
        import tempfile

        state = Path(tempfile.mkdtemp(prefix="op_support_merge_"))
        generate(samples=args.samples, only=args.ops, state_dir=state)
        old_records = [json.loads(x) for x in args.records.read_text().splitlines() if x.strip()]
        new_records = [json.loads(x) for x in (state / "records.jsonl").read_text().splitlines() if x.strip()]
        combined = merge_records(old_records, new_records, {r[3] for r in new_records} | set(args.ops))
        args.records.write_text("".join(json.dumps(r) + "\n" for r in combined))
        ops = aggregate_records(combined)
        old = json.loads(args.json.read_text())
        command = f"{old['meta']['command']}` then `{command} --merge --records RECORDS --ops {' '.join(args.ops)}"
    else:
        ops = generate(samples=args.samples, only=args.ops, state_dir=args.state)
    write(ops, args.json, args.md, command)
    print(f"wrote {args.json} and {args.md}: {len(ops)} overloads")
    return 0


if __name__ == "__main__":
    sys.exit(main())
