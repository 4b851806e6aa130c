"""Compiling one AOTAutograd graph (forward, backward or inference) for the device.

The graph is partitioned (``partition.py``); each ``fused_<n>`` region is lowered to
StableHLO (``lowering.py``), compiled or fetched from the cache (``cache.py``) and replaced in
the outer graph by a :class:`CompiledRegion` that runs the executable on device memory
(``executable.py``). The outer graph — region calls plus the nodes that did not lower — is an
ordinary ``GraphModule`` whose eager nodes run on the device's kernels.
"""

from __future__ import annotations

import itertools
import operator
import time
import warnings

import torch
import torch.fx as fx

from ..runtime import activity, state
from . import metrics
from .cache import CACHE, cache_key
from .dump import GraphDump
from .errors import NeuronCompilationError
from .executable import (
    Executable,
    IreeCompileError,
    compile_flags,
    compile_stablehlo,
    compiler_version,
)
from .lowering import LoweringError, first_failing_node, source_location
from .lowering_cache import lower_region
from .partition import REGION_PREFIX, partition, split_by_names
from .passes import (
    bool_inputs_as_bytes,
    drop_unused_placeholders,
    fill_default_strides,
    output_vals,
    placeholder_vals,
    split_outputs,
    wrap_negative_indices,
)
from .settings import CompileOptions

_graph_ids = itertools.count()


class CompiledRegion(torch.nn.Module):
    """A fused region of the graph, executed as one compiled executable."""

    def __init__(self, name: str, sub: fx.GraphModule, record: metrics.GraphRecord, dump: GraphDump):
        super().__init__()
        self.region = name
        t0 = time.perf_counter()
        self._recipe = split_outputs(sub)
        self._kept = drop_unused_placeholders(sub)
        bool_inputs_as_bytes(sub)
        in_vals, out_vals = placeholder_vals(sub), output_vals(sub)
        record.pass_seconds += time.perf_counter() - t0
        dump.graph(f"{name}.fx.txt", sub)
        self.executable: Executable | None = None
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
        flags = compile_flags(lowered.text)
        target = state.target().name
        key = cache_key(lowered.text, compiler_version(), flags, target)
        log: list[str] = []

        def compile_now() -> bytes:
            t_start = time.perf_counter_ns()
            try:
                # the text with locations: compiler diagnostics then name the user's source line
                result = compile_stablehlo(lowered.text_with_locations, flags)
                if activity.RECORDER is not None:
                    activity.RECORDER.record("compile", name, (), None, t_start, time.perf_counter_ns())
            except IreeCompileError as err:
                dump.write(f"{name}.compile.log", err.log)
                raise NeuronCompilationError(
                    f"region {name} of graph {record.graph_id}: {err}",
                    location=_first_location(err.log),
                    dump_dir=str(dump) or None,
                ) from err
            log.append(result.log)
            record.compile_seconds += result.seconds
            metrics.count("compile_seconds", result.seconds)
            return result.vmfb

        meta = {"compiler": compiler_version(), "flags": list(flags), "target": target,
                "graph": record.graph_id, "region": name, "model": record.model}
        lookup = CACHE.get_or_compile(key, compile_now, meta)
        if lookup.source == "compiled":
            record.cache_misses += 1
            metrics.count("cache_misses")
        else:
            record.cache_hits += 1
            metrics.count("cache_hits")
            log.append(f"cache hit ({lookup.source}), key {key}\n")
        dump.write(f"{name}.compile.log", "".join(log))
        dump.write(f"{name}.vmfb", lookup.payload)
        self.key = key
        self.executable = Executable(
            lookup.payload,
            [v.dtype for v in in_vals],
            [v.dtype for v in out_vals],
            name=f"{record.graph_id}/{name}",
        )

    def forward(self, *args):
        computed = self.executable(*[args[i] for i in self._kept]) if self.executable else []
        return self._recipe.restore(args, computed)


_MAX_SPLIT_DEPTH = 10


def _compile_or_split(name: str, sub: fx.GraphModule, record: metrics.GraphRecord, dump: GraphDump,
                      depth: int = 0) -> torch.nn.Module:
    """A compiled region; if the region fails to lower or compile as a whole although each of
    its nodes lowers on its own (torch-mlir and IREE have combination bugs, and IREE rejects
    some ops only after lowering), its nodes are split in two halves, each compiled (or split
    again) on its own; what still fails runs eagerly on the device, as a plain graph."""
    try:
        # on a copy: CompiledRegion rewrites its graph's inputs and outputs before lowering
        return CompiledRegion(name, _copy(sub), record, dump)
    except NeuronCompilationError as err:
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
        fill_default_strides(work)
        wrap_negative_indices(work)
        outer, placement = partition(work, enabled=options.partition, library=options.library_convolutions)
        record.pass_seconds += time.perf_counter() - t0
        for name, sub in list(outer.named_children()):
            if name.startswith(REGION_PREFIX) and isinstance(sub, fx.GraphModule):
                region = _compile_or_split(name, sub, record, dump) if options.partition \
                    else CompiledRegion(name, sub, record, dump)
                setattr(outer, name, region)
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
        return gm
    record.regions = len(placement.regions)
    record.compiled_nodes = sum(len(v) for v in placement.regions.values())
    record.eager_nodes = len(placement.eager)
    record.library_nodes = len(placement.library)
    record.placement = placement.by_node()
    dump.write("placement.txt", placement.format())
    metrics.count("graphs_compiled")
    outer.recompile()
    return outer
