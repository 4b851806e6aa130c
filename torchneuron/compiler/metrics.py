"""Compilation metrics: per graph and totals (``get_metrics()`` / ``reset_metrics()``)."""

from __future__ import annotations

import itertools
import threading
from dataclasses import asdict, dataclass, field, replace

from . import settings

_lock = threading.Lock()


@dataclass
class GraphRecord:
    graph_id: str
    kind: str  # "forward", "backward" or "inference"
    nodes: int = 0
    compiled_nodes: int = 0
    eager_nodes: int = 0  # outside the compiled regions: not lowerable, random, or a lone node
    library_nodes: int = 0  # outside the compiled regions: library kernels (library.py)
    regions: int = 0
    programs: int = 0  # executables the regions were compiled into (linker.py links many into one)
    pass_seconds: float = 0.0
    lowering_seconds: float = 0.0
    compile_seconds: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0
    lowering_hits: int = 0  # regions whose StableHLO came from the lowering cache (lowering_cache.py)
    fallback: bool = False
    split_regions: int = 0  # regions that failed as a whole and were split in halves
    eager_after_split: int = 0  # nodes left eager because they failed even on their own
    placement: dict[str, str] = field(default_factory=dict)  # node name -> region | "eager" | "library"
    model: str | None = None  # settings.set_model_name() in effect when the graph was compiled
    loaded: bool = False  # rebuilt from a stored compiled graph (graph_cache.py), not compiled here


_graphs: dict[str, GraphRecord] = {}
_totals = {"graphs_compiled": 0, "cache_hits": 0, "cache_misses": 0, "compile_seconds": 0.0,
           "fallbacks": 0, "corrupt_cache_entries": 0, "eager_after_split": 0, "lowering_cache_hits": 0,
           # graphs rebuilt from AOTAutograd's cache (graph_cache.py) or a precompile package, time to
           # rebuild them; time to save precompile packages (precompile.py)
           "graphs_loaded": 0, "graph_load_seconds": 0.0, "precompile_save_seconds": 0.0,
           # calls of compiled regions whose result differed from the eager kernels' (verify.py)
           "region_mismatches": 0}
_mismatched_regions: list[dict] = []  # the first mismatch of each region (verify.RegionMismatch)


def new_graph(graph_id: str, kind: str) -> GraphRecord:
    rec = GraphRecord(graph_id, kind, model=settings.model_name())
    with _lock:
        _graphs[graph_id] = rec
    return rec


def graph_record(graph_id: str | None) -> GraphRecord | None:
    with _lock:
        return _graphs.get(graph_id) if graph_id is not None else None


_loaded_ids = itertools.count()


def loaded_graph(stored: GraphRecord | None, kind: str, seconds: float) -> GraphRecord:
    """Record a graph rebuilt from a stored one: its stored record (placement, regions …)
    under a new id, marked ``loaded``, with nothing compiled or looked up in this process."""
    rec = replace(stored, cache_hits=0, cache_misses=0, lowering_hits=0, pass_seconds=0.0,
                  lowering_seconds=0.0, compile_seconds=0.0) if stored is not None else GraphRecord("", kind)
    rec.graph_id, rec.loaded, rec.model = f"l{next(_loaded_ids)}", True, settings.model_name()
    with _lock:
        _graphs[rec.graph_id] = rec
        _totals["graphs_loaded"] += 1
        _totals["graph_load_seconds"] += seconds
    return rec


def count(name: str, amount: float = 1) -> None:
    with _lock:
        _totals[name] += amount


def get_metrics() -> dict:
    """Totals since the last reset plus one entry per compiled graph, as plain data."""
    with _lock:
        out = dict(_totals)
        out["graphs"] = {gid: asdict(rec) for gid, rec in _graphs.items()}
        out["mismatched_regions"] = [dict(m) for m in _mismatched_regions]
    return out


def reset_metrics() -> None:
    with _lock:
        _graphs.clear()
        _mismatched_regions.clear()
        for k in _totals:
            _totals[k] = 0.0 if isinstance(_totals[k], float) else 0


def add_region_mismatch(mismatch: dict) -> None:
    with _lock:
        _mismatched_regions.append(mismatch)
