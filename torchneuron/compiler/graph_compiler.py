"""Compiling one AOTAutograd graph (forward, backward or inference) for the device.

The graph is partitioned (``partition.py``); each ``fused_<n>`` region is lowered to
StableHLO (``lowering.py``); the regions are linked into one module, one function per region
(``linker.py``), compiled or fetched from the cache (``cache.py``) as one program, and each is
replaced in the outer graph by a :class:`CompiledRegion` that runs its function on device
memory (``executable.py``). The outer graph — region calls plus the nodes that did not lower — is an
ordinary ``GraphModule`` whose eager nodes run on the device's kernels.
"""

from __future__ import annotations

import itertools
import json
import operator
import time
import warnings

import torch
import torch.fx as fx

from ..runtime import activity, state
from . import metrics, settings, verify
from .cache import CACHE, cache_key
from .complex_pairs import complex_as_pairs
from .constant_folding import fold_uniform_constants
from .dump import GraphDump
from .errors import NeuronCompilationError
from .executable import (
    Executable,
    IreeCompileError,
    Program,
    compile_flags,
    compile_stablehlo,
    compiler_version,
)
from .linker import LinkError, link
from .lowering import Lowered, LoweringError, first_failing_node, source_location
from .lowering_cache import lower_region
from .partition import REGION_PREFIX, partition, split_by_names
from .passes import (
    bool_inputs_as_bytes,
    clamp_slice_ends,
    compare_in_promoted_dtype,
    drop_unused_placeholders,
    fill_default_strides,
    output_vals,
    placeholder_vals,
    random_like_in_eager_layout,
    round_float_scalars,
    split_outputs,
    wrap_negative_indices,
)
from .settings import CompileOptions

_graph_ids = itertools.count()


class PreparedRegion:
    """A region's graph rewritten for the executable boundary and lowered to StableHLO.

    ``lowered`` is None when the region returns nothing the executable must compute (its
    outputs are all inputs or views of them, restored by ``recipe``)."""

    def __init__(self, name: str, sub: fx.GraphModule, record: metrics.GraphRecord, dump: GraphDump):
        self.name = name
        t0 = time.perf_counter()
        self.recipe = split_outputs(sub)
        self.kept = drop_unused_placeholders(sub)
        bool_inputs_as_bytes(sub)
        round_float_scalars(sub)
        in_vals, out_vals = placeholder_vals(sub), output_vals(sub)
        self.in_dtypes = [v.dtype for v in in_vals]
        self.out_dtypes = [v.dtype for v in out_vals]
        record.pass_seconds += time.perf_counter() - t0
        dump.graph(f"{name}.fx.txt", sub)
        self.lowered: Lowered | None = None
        self.flags: tuple[str, ...] = ()
        if not out_vals:
            return
        t0 = time.perf_counter()
        try:
            lowered, lowered_from = lower_region(sub)
        except LoweringError as err:
            bad = first_failing_node(sub)
            raise NeuronCompilationError(
                f"region {name} of graph {record.graph_id} could not be lowered to StableHLO: {err}",
                op=str(bad.target) if bad is not None else None,
                location=source_location(bad) if bad is not None else None,
                dump_dir=str(dump) or None,
            ) from err
        record.lowering_seconds += time.perf_counter() - t0
        if lowered_from != "compiled":
            record.lowering_hits += 1
            metrics.count("lowering_cache_hits")
        dump.write(f"{name}.stablehlo.mlir", lowered.text_with_locations)
        self.lowered = lowered
        self.flags = compile_flags(lowered.text)


class CompiledRegion(torch.nn.Module):
    """A fused region of the graph, executed as one function of a compiled program."""

    def __init__(self, prepared: PreparedRegion, executable: Executable | None):
        super().__init__()
        self.region = prepared.name
        self._recipe = prepared.recipe
        self._kept = prepared.kept
        self.executable = executable

    def forward(self, *args):
        computed = self.executable(*[args[i] for i in self._kept]) if self.executable else []
        return self._recipe.restore(args, computed)


# A program that IREE rejects is remembered in the cache as this marker plus the error, so that a
# warm start goes straight to the smaller programs that did compile (see _link_or_bisect and
# _compile_or_split) instead of running the failing compilations again (Swin3D-S: ~500 of them).
_FAILED = b"torchneuron: compilation failed\n"


def _program(label: str, what: str, text: str, text_with_locations: str, flags: tuple[str, ...],
             record: metrics.GraphRecord, dump: GraphDump) -> bytes:
    """The ``.vmfb`` of a StableHLO module, from the cache or compiled now. ``label`` names the
    dump files, ``what`` the program in errors. A rejection is cached like a result, unless the
    compiler was stopped from outside (out of memory, a timeout), which may not recur."""
    target = state.target().name
    key = cache_key(text, compiler_version(), flags, target)
    log: list[str] = []
    meta = {"compiler": compiler_version(), "flags": list(flags), "target": target,
            "graph": record.graph_id, "region": label, "model": record.model}

    def failure(message: str, compile_log: str) -> NeuronCompilationError:
        dump.write(f"{label}.compile.log", compile_log)
        return NeuronCompilationError(f"{what} of graph {record.graph_id}: {message}",
                                      location=_first_location(compile_log), dump_dir=str(dump) or None)

    def compile_now() -> bytes:
        t_start = time.perf_counter_ns()
        try:
            # the text with locations: compiler diagnostics then name the user's source line
            result = compile_stablehlo(text_with_locations, flags)
        except IreeCompileError as err:
            record.compile_seconds += err.seconds
            metrics.count("compile_seconds", err.seconds)
            if not err.killed:
                meta["failed"] = str(err)
                return _FAILED + json.dumps({"error": str(err), "log": err.log}).encode()
            raise failure(str(err), err.log) from err
        if activity.RECORDER is not None:
            activity.RECORDER.record("compile", label, (), None, t_start, time.perf_counter_ns())
        log.append(result.log)
        record.compile_seconds += result.seconds
        metrics.count("compile_seconds", result.seconds)
        return result.vmfb

    lookup = CACHE.get_or_compile(key, compile_now, meta)
    if lookup.source == "compiled":
        record.cache_misses += 1
        metrics.count("cache_misses")
    else:
        record.cache_hits += 1
        metrics.count("cache_hits")
        log.append(f"cache hit ({lookup.source}), key {key}\n")
    if lookup.payload.startswith(_FAILED):
        remembered = json.loads(lookup.payload[len(_FAILED):])
        raise failure(remembered["error"], "".join(log) + remembered["log"])
    dump.write(f"{label}.compile.log", "".join(log))
    dump.write(f"{label}.vmfb", lookup.payload)
    return lookup.payload


def _alone(prepared: PreparedRegion, record: metrics.GraphRecord, dump: GraphDump) -> CompiledRegion:
    """The region compiled as a program of its own."""
    if prepared.lowered is None:
        return CompiledRegion(prepared, None)
    name = prepared.name
    vmfb = _program(name, f"region {name}", prepared.lowered.text, prepared.lowered.text_with_locations,
                    prepared.flags, record, dump)
    program = _load(vmfb, f"{record.graph_id}/{name}", f"region {name}", record, dump)
    return CompiledRegion(prepared, Executable(program, prepared.in_dtypes, prepared.out_dtypes,
                                               name=f"{record.graph_id}/{name}"))


def _load(vmfb: bytes, name: str, what: str, record: metrics.GraphRecord, dump: GraphDump) -> Program:
    """The program loaded into the runtime. IREE checks some limits only when the module's
    initialisers run (a dispatch of a linked DenseNet-161 backward program had 41 bindings,
    more than the HAL's 32): such a program is treated like one that failed to compile."""
    try:
        program = Program(vmfb, name)
    except Exception as err:  # noqa: BLE001 - IREE reports load failures with several types
        raise NeuronCompilationError(f"{what} of graph {record.graph_id} could not be loaded: "
                                     f"{type(err).__name__}: {err}", dump_dir=str(dump) or None) from err
    record.programs += 1
    return program


_MAX_SPLIT_DEPTH = 10


def _compile_or_split(name: str, sub: fx.GraphModule, record: metrics.GraphRecord, dump: GraphDump,
                      depth: int = 0, prepared: PreparedRegion | None = None) -> torch.nn.Module:
    """A compiled region; if the region fails to lower or compile as a whole although each of
    its nodes lowers on its own (torch-mlir and IREE have combination bugs, and IREE rejects
    some ops only after lowering), its nodes are split in two halves, each compiled (or split
    again) on its own; what still fails runs eagerly on the device, as a plain graph."""
    try:
        # on a copy: PreparedRegion rewrites its graph's inputs and outputs before lowering
        return _alone(prepared or PreparedRegion(name, _copy(sub), record, dump), record, dump)
    except NeuronCompilationError as err:
        return _split(name, sub, record, dump, err, depth)


def _split(name: str, sub: fx.GraphModule, record: metrics.GraphRecord, dump: GraphDump,
           err: NeuronCompilationError, depth: int) -> torch.nn.Module:
    nodes = [n for n in sub.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]
    record.split_regions += 1
    dump.write(f"{name}.split.log", f"{err}\n")
    if len(nodes) <= 1 or depth >= _MAX_SPLIT_DEPTH:
        record.eager_after_split += len(nodes)
        metrics.count("eager_after_split", len(nodes))
        return sub
    half = len(nodes) // 2
    work = _copy(sub)
    for part in (range(half), range(half, len(nodes))):
        names = {nodes[i].name for i in part}
        work = split_by_names(work, names, prefix=f"{REGION_PREFIX}h{part.start}_")
    for child, mod in list(work.named_children()):
        if child.startswith(REGION_PREFIX) and isinstance(mod, fx.GraphModule):
            setattr(work, child, _compile_or_split(f"{name}.{child}", mod, record, dump, depth + 1))
    work.recompile()
    return work


def _compile_regions(regions: list[tuple[str, fx.GraphModule]], record: metrics.GraphRecord,
                     dump: GraphDump) -> dict[str, torch.nn.Module]:
    """Each region compiled, the regions that share compiler flags linked into one program;
    a region that fails on its own is split (``_compile_or_split``)."""
    out: dict[str, torch.nn.Module] = {}
    groups: dict[tuple[str, ...], list[tuple[fx.GraphModule, PreparedRegion]]] = {}
    for name, sub in regions:
        try:
            prepared = PreparedRegion(name, _copy(sub), record, dump)
        except NeuronCompilationError as err:
            out[name] = _split(name, sub, record, dump, err, 0)
            continue
        if prepared.lowered is None:
            out[name] = CompiledRegion(prepared, None)
        else:
            groups.setdefault(prepared.flags, []).append((sub, prepared))
    labels = itertools.count()
    for members in groups.values():
        out.update(_link_or_bisect(members, record, dump, labels))
    return out


def _link_or_bisect(members: list[tuple[fx.GraphModule, PreparedRegion]], record: metrics.GraphRecord,
                    dump: GraphDump, labels: itertools.count) -> dict[str, torch.nn.Module]:
    """The regions linked into one program (``linker.py``), one function per distinct region.
    If IREE rejects the linked program or cannot load it, each half is linked on its own, down
    to single regions (which are split further if they fail alone)."""
    if len(members) == 1 or not settings.link_regions():
        return {p.name: _compile_or_split(p.name, sub, record, dump, prepared=p) for sub, p in members}
    functions: dict[str, tuple[str, str]] = {}  # StableHLO without locations -> (function, with locations)
    for _, p in members:
        functions.setdefault(p.lowered.text, (p.name, p.lowered.text_with_locations))
    label = f"program{next(labels)}"
    names = [p.name for _, p in members]
    try:
        text = link([(function, plain) for plain, (function, _) in functions.items()])
        text_with_locations = link(list(functions.values()))
        dump.write(f"{label}.stablehlo.mlir", text_with_locations)
        what = f"program {label} (regions {', '.join(names)})"
        vmfb = _program(label, what, text, text_with_locations, members[0][1].flags, record, dump)
        program = _load(vmfb, f"{record.graph_id}/{label}", what, record, dump)
    except (NeuronCompilationError, LinkError) as err:
        dump.write(f"{label}.split.log", f"{err}\n")
        half = len(members) // 2
        return {**_link_or_bisect(members[:half], record, dump, labels),
                **_link_or_bisect(members[half:], record, dump, labels)}
    dump.write(f"{label}.functions.txt",
               "".join(f"{p.name}: @{functions[p.lowered.text][0]}\n" for _, p in members))
    return {p.name: CompiledRegion(p, Executable(program, p.in_dtypes, p.out_dtypes,
                                                 name=f"{record.graph_id}/{p.name}",
                                                 function=functions[p.lowered.text][0]))
            for _, p in members}


def _first_location(log: str) -> str | None:
    for line in log.splitlines():
        if "error:" in line:
            return line.split("error:", 1)[0].strip().rstrip(":") or None
    return None


def _copy(gm: fx.GraphModule) -> fx.GraphModule:
    graph = fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return fx.GraphModule(gm, graph)


def compile_graph(gm: fx.GraphModule, kind: str, options: CompileOptions):
    """A callable running ``gm`` (an AOTAutograd graph) on the device, compiled."""
    graph_id = f"g{next(_graph_ids)}"
    record = metrics.new_graph(graph_id, kind)
    record.nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")
    dump = GraphDump(graph_id, kind)
    dump.graph("graph.fx.txt", gm)
    try:
        t0 = time.perf_counter()
        work = _copy(gm)
        complex_as_pairs(work)
        fill_default_strides(work)
        wrap_negative_indices(work)
        clamp_slice_ends(work)
        compare_in_promoted_dtype(work)
        fold_uniform_constants(work)
        random_like_in_eager_layout(work)
        outer, placement = partition(work, enabled=options.partition, library=options.library_kernels)
        record.pass_seconds += time.perf_counter() - t0
        regions = [(name, sub) for name, sub in outer.named_children()
                   if name.startswith(REGION_PREFIX) and isinstance(sub, fx.GraphModule)]
        if options.partition:
            compiled = _compile_regions(regions, record, dump)
        else:  # one whole-graph region, whose failure is the graph's
            compiled = {name: _alone(PreparedRegion(name, _copy(sub), record, dump), record, dump)
                        for name, sub in regions}
        if verify.enabled():  # TORCHNEURON_VERIFY_REGIONS: each region checked against its eager graph
            compiled = verify.verified(compiled, dict(regions), record, _compile_regions, dump)
        for name, module in compiled.items():
            setattr(outer, name, module)
    except Exception as err:
        if not options.fallback:
            if isinstance(err, NeuronCompilationError):
                raise
            raise NeuronCompilationError(
                f"graph {graph_id} ({kind}) failed to compile: {type(err).__name__}: {err}",
                dump_dir=str(dump) or None,
            ) from err
        warnings.warn(
            f"torchneuron: graph {graph_id} ({kind}) failed to compile and runs eagerly on the "
            f"device instead (fallback option): {str(err).splitlines()[0]}",
            RuntimeWarning,
            stacklevel=2,
        )
        record.fallback = True
        metrics.count("fallbacks")
        gm.torchneuron_graph_id = graph_id
        return gm
    record.regions = len(placement.regions)
    record.compiled_nodes = sum(len(v) for v in placement.regions.values())
    record.eager_nodes = len(placement.eager)
    record.library_nodes = len(placement.library)
    record.placement = placement.by_node()
    dump.write("placement.txt", placement.format())
    metrics.count("graphs_compiled")
    outer.recompile()
    outer.torchneuron_graph_id = graph_id  # graph_cache.py stores the record with the graph
    return outer
