"""Splitting a graph into compiled regions and nodes that run eagerly on the device.

A node joins a compiled region when the lowering supports it (``lowering.node_lowers``: the
node alone lowers to StableHLO), it is not a random op (``passes.is_random``) and its result
does not depend on how ties are broken (``TIE_ORDER_OPS``: ``topk``, ``sort`` … return the
indices of equal values in an order that is the CPU kernel's algorithm's, which the compiled
code cannot reproduce; an MoE router whose scores tie, as with zero-initialised gates, would pick
other experts than eager mode and the CPU do) and it has no empty tensor among its inputs and results
(``touches_empty_tensor``). Connected
supported nodes are grouped by ``propose_regions`` into ``fused_<n>`` submodules;
every other node stays in the outer graph and runs through the device's eager kernels:
convolutions and strided concatenations (``library.py``) by choice, as library kernels, the rest
because they do not lower. ``Placement`` records where each node ran.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.fx as fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

from . import verdicts
from .library import (
    LibraryKernels,
    concatenations_at_region_entries,
    is_strided_concatenation,
    library_kernels,
)
from .lowering import node_lowers, probe_nodes
from .passes import is_random

REGION_PREFIX = "fused_"

_aten = torch.ops.aten
# selection operators whose index results for tied values follow the host kernel's algorithm
TIE_ORDER_OPS = frozenset({_aten.topk, _aten.sort, _aten.argsort, _aten.kthvalue, _aten.mode,
                           _aten.median, _aten.nanmedian})


def depends_on_tie_order(node: fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and target.overloadpacket in TIE_ORDER_OPS


def touches_empty_tensor(node: fx.Node) -> bool:
    """A node with a zero-element tensor among its inputs or results. IREE 3.13's compiler dies of
    SIGFPE on some of them (``slice_scatter`` of an empty slice, from Swin3D's attention mask:
    ``mask[-2:0] = c``), and each such failure cost a compiler run per half of its region while
    splitting; eagerly, an operator on empty tensors costs next to nothing."""
    return any(v.numel() == 0 for v in _tensor_vals(node))


def _tensor_vals(node: fx.Node) -> list[torch.Tensor]:
    """The traced values of a node's tensor inputs and results."""
    vals = [a.meta.get("val") for a in node.all_input_nodes]
    out = node.meta.get("val")
    vals.extend(out if isinstance(out, (list, tuple)) else [out])
    return [v for v in vals if isinstance(v, torch.Tensor)]


def touches_complex(node: fx.Node) -> bool:
    """A node with a complex tensor among its inputs or results. torch-mlir lowers copies, views,
    concatenations and ``abs`` of complex tensors, but a program's complex buffers do not reach
    IREE as complex (every element of such results came out wrong): the chip has no complex
    arithmetic, and what ``complex_pairs.py`` does not rewrite into float pairs stays eager."""
    return any(v.is_complex() for v in _tensor_vals(node))


class LoweringSupport(OperatorSupportBase):
    """Supported = lowers to StableHLO on its own, is not a random op, does not depend on the
    order of ties, touches no empty tensor or complex tensor and is not left to a library kernel (``library``, a
    predicate of ``library.library_kernels``)."""

    def __init__(self, library: Callable[[fx.Node], bool] | None = None):
        self.library = library or library_kernels()

    def candidate(self, node: fx.Node) -> bool:
        """A node whose support is decided by whether it lowers."""
        return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) \
            and not is_random(node) and not depends_on_tie_order(node) and not touches_empty_tensor(node) \
            and not touches_complex(node) and not self.library(node)

    def is_node_supported(self, submodules, node: fx.Node) -> bool:
        if node.op == "call_function" and node.target is operator.getitem:
            src = node.args[0]
            return isinstance(src, fx.Node) and self.is_node_supported(submodules, src)
        return self.candidate(node) and node_lowers(node)


@dataclass
class Placement:
    regions: dict[str, list[str]] = field(default_factory=dict)  # region -> "node: op" lines
    eager: list[str] = field(default_factory=list)  # outside: not lowerable, random, tie order, alone
    library: list[str] = field(default_factory=list)  # outside the regions: library kernels

    def by_node(self) -> dict[str, str]:
        out = {line.split(":", 1)[0]: region for region, lines in self.regions.items() for line in lines}
        out.update({line.split(":", 1)[0]: "eager" for line in self.eager})
        out.update({line.split(":", 1)[0]: "library" for line in self.library})
        return out

    def format(self) -> str:
        lines = []
        for region, nodes in self.regions.items():
            lines.append(f"compiled region {region} ({len(nodes)} nodes):")
            lines.extend(f"  {n}" for n in nodes)
        lines.append(f"library kernels on the device ({len(self.library)} nodes):")
        lines.extend(f"  {n}" for n in self.library)
        lines.append(f"eager on the device ({len(self.eager)} nodes):")
        lines.extend(f"  {n}" for n in self.eager)
        return "\n".join(lines)


def _describe(node: fx.Node) -> str:
    return f"{node.name}: {node.target}"


def _compute_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]


def partition(gm: fx.GraphModule, *, enabled: bool = True,
              library: Callable[[fx.Node], bool] | None = None) -> tuple[fx.GraphModule, Placement]:
    """``gm`` with its lowerable parts fused into ``fused_<n>`` submodules, and the placement.

    With ``enabled=False`` the whole graph becomes one region (lowering failures then surface
    as compilation errors instead of eager nodes); ``library`` picks the nodes left to library
    kernels (default: ``library.library_kernels()``, convolutions and strided concatenations).
    """
    if not enabled:
        outer = _whole_graph_region(gm)
    else:
        library = library or library_kernels()
        if isinstance(library, LibraryKernels) and library.concatenations:
            library = _with_entry_concatenations(gm, library)
        groups = _regions(gm, library)
        verdicts.flush()  # the probes' verdicts, for later processes
        outer = fuse_by_partitions(gm, groups, prefix=REGION_PREFIX) if groups else gm
    placement = Placement()
    for name, sub in outer.named_children():
        if name.startswith(REGION_PREFIX) and isinstance(sub, fx.GraphModule):
            placement.regions[name] = [_describe(n) for n in _compute_nodes(sub)]
    for n in _compute_nodes(outer):  # (a whole-graph region leaves none outside)
        (placement.library if library is not None and library(n) else placement.eager).append(_describe(n))
    return outer, placement


def _regions(gm: fx.GraphModule, library: Callable[[fx.Node], bool]) -> list[dict[fx.Node, None]]:
    """The regions of ``gm``'s supported nodes, ``library``'s nodes left out."""
    support = LoweringSupport(library)
    probe_nodes([n for n in gm.graph.nodes if support.candidate(n)])  # in batches, before the partitioner asks
    return propose_regions(gm, lambda n: support.is_node_supported({}, n))


def _with_entry_concatenations(gm: fx.GraphModule, library: LibraryKernels) -> Callable[[fx.Node], bool]:
    """``library`` with only the strided concatenations that sit at a region's entry when the
    regions are proposed with every concatenation compiled (``library.concatenations_at_region_entries``)."""
    if not any(is_strided_concatenation(n) for n in gm.graph.nodes):
        return library
    base = library.without_concatenations()
    entries = {n.name for n in concatenations_at_region_entries(_regions(gm, base))}  # by name: fusing copies the nodes
    return lambda node: base(node) or (node.name in entries and is_strided_concatenation(node))


def propose_regions(gm: fx.GraphModule, supported: Callable[[fx.Node], bool]) -> list[dict[fx.Node, None]]:
    """The supported nodes grouped into regions such that fusing each region into one node
    leaves the graph acyclic, in time linear in the graph's size.

    PyTorch's ``CapabilityBasedPartitioner`` keeps each node's transitive users and tries
    merges pairwise with a search for cycles: quadratic, 170 s on DenseNet-121's backward graph
    (1638 nodes, densely connected). Here each node gets a *level*, in graph order: a node
    outside the regions has the greatest level of its inputs; a supported node the greatest
    level of its supported inputs and one more than the greatest of its other inputs. Then, in
    reverse order, a supported node rises to the lowest level of its users (graph outputs
    aside; the users of its ``getitem`` nodes, which stay with it) if that is higher, so that
    what only feeds a region (a parameter's reshape, a running statistic's update) joins it.
    A region is the set of supported nodes of one level. No edge lowers the level and every
    edge into a region from outside it raises it (an edge between supported nodes of two
    levels, or from an outside node), so a cycle through a fused region would end at a higher
    level than it started at: the fused graph has no cycle. Regions of one computing node
    (``getitem`` does not count) are dropped, as a node alone is not worth an executable call.
    """
    nodes = list(gm.graph.nodes)
    ok = {n for n in nodes if supported(n)}
    level: dict[fx.Node, int] = {}
    for n in nodes:  # the lowest level each node can have
        if n in ok:
            level[n] = max((level[i] if i in ok else level[i] + 1 for i in n.all_input_nodes), default=0)
        else:
            level[n] = max((level[i] for i in n.all_input_nodes), default=0)
    for n in reversed(nodes):  # supported nodes rise as far as their users allow (into their region)
        if n in ok and n.target is not operator.getitem:
            # a multi-output node and its getitems move together: a region passes tensors, not tuples
            users = [u for w in n.users for u in (w.users if w.target is operator.getitem else (w,))]
            caps = [level[w] for w in users if w.op != "output"]
            if caps:
                level[n] = max(level[n], min(caps))
            for w in n.users:
                if w.target is operator.getitem:
                    level[w] = level[n]
    regions: dict[int, dict[fx.Node, None]] = {}
    for n in nodes:
        if n in ok:
            regions.setdefault(level[n], {})[n] = None
    return [group for group in regions.values()
            if sum(1 for n in group if n.target is not operator.getitem) > 1]


class _Named(OperatorSupportBase):
    def __init__(self, names: set[str]):
        self.names = names

    def is_node_supported(self, submodules, node: fx.Node) -> bool:
        if node.op != "call_function":
            return False
        if node.target is operator.getitem:
            src = node.args[0]
            return isinstance(src, fx.Node) and src.name in self.names
        return node.name in self.names


def split_by_names(gm: fx.GraphModule, names: set[str], prefix: str) -> fx.GraphModule:
    """``gm`` with the nodes named in ``names`` fused into ``<prefix><n>`` submodules."""
    partitioner = CapabilityBasedPartitioner(gm, _Named(names), allows_single_node_partition=True)
    return partitioner.fuse_partitions(partitioner.propose_partitions(), prefix=prefix)


def _whole_graph_region(gm: fx.GraphModule) -> fx.GraphModule:
    nodes = {n: None for n in gm.graph.nodes if n.op == "call_function"}
    if not nodes:
        return gm
    return fuse_by_partitions(gm, [nodes], prefix=REGION_PREFIX)
