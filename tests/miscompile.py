"""Compiler bugs put there on purpose, to test the region check (``torchneuron/compiler/verify.py``).

The rewrite changes each region's graph on its way to the lowering (``PreparedRegion``), so compiled
code computes something else while the eager graph the check runs beside it is untouched.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.fx as fx

import torchneuron.compiler.graph_compiler as graph_compiler


def miscompile(monkeypatch, rewrite: Callable[[fx.Graph], None]) -> None:
    """Apply ``rewrite`` to every region's graph before it is lowered (undone with ``monkeypatch``)."""
    original = graph_compiler.PreparedRegion.__init__

    def buggy(self, name, sub, record, dump):
        rewrite(sub.graph)
        sub.recompile()
        original(self, name, sub, record, dump)

    monkeypatch.setattr(graph_compiler.PreparedRegion, "__init__", buggy)


def retargeted(source, replacement) -> Callable[[fx.Graph], None]:
    """A rewrite under which every compiled ``source`` op computes ``replacement``."""
    def rewrite(graph: fx.Graph) -> None:
        for n in graph.nodes:
            if n.target is source:
                n.target = replacement

    return rewrite
