"""Compilation metrics: per graph and totals (``get_metrics()`` / ``reset_metrics()``)."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field

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


_graphs: dict[str, GraphRecord] = {}
_totals = {"graphs_compiled": 0, "cache_hits": 0, "cache_misses": 0, "compile_seconds": 0.0,
           "fallbacks": 0, "corrupt_cache_entries": 0, "eager_after_split": 0, "lowering_cache_hits": 0,
           # caching precompile (precompile.py): graphs rebuilt from Dynamo's cache, time to rebuild and save
           "precompiled_graphs_loaded": 0, "precompile_load_seconds": 0.0, "precompile_save_seconds": 0.0}


def new_graph(graph_id: str, kind: str) -> GraphRecord:
    rec = GraphRecord(graph_id, kind, model=settings.model_name())
    with _lock:
        _graphs[graph_id] = rec
    return rec


def count(name: str, amount: float = 1) -> None:
    with _lock:
        _totals[name] += amount


def get_metrics() -> dict:
    """Totals since the last reset plus one entry per compiled graph, as plain data."""
    with _lock:
        out = dict(_totals)
        out["graphs"] = {gid: asdict(rec) for gid, rec in _graphs.items()}
    return out


def reset_metrics() -> None:
    with _lock:
        _graphs.clear()
        for k in _totals:
            _totals[k] = 0.0 if isinstance(_totals[k], float) else 0
