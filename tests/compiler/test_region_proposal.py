"""``partition.propose_regions``: supported nodes grouped so that fusing each group leaves the
graph acyclic, checked on random graphs against a direct search for cycles and by running the
fused graph."""

from __future__ import annotations

import operator

import torch
import torch.fx as fx
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

from torchneuron.compiler.partition import propose_regions

_OPS = (torch.add, torch.mul, torch.sub)


@st.composite
def graphs(draw):
    """A random DAG of binary ops over two inputs, and which of its nodes are supported."""
    g = fx.Graph()
    values = [g.placeholder("a"), g.placeholder("b")]
    supported = set()
    for k in range(draw(st.integers(1, 30))):
        x = values[draw(st.integers(0, len(values) - 1))]
        y = values[draw(st.integers(0, len(values) - 1))]
        node = g.call_function(_OPS[k % 3], (x, y))
        if draw(st.booleans()):
            supported.add(node.name)
        values.append(node)
    tails = [v for v in values[2:] if not v.users] or values[-1:]
    g.output(tuple(tails))
    return fx.GraphModule(torch.nn.Module(), g), supported


def _contracted_is_acyclic(gm: fx.GraphModule, regions: list[dict]) -> bool:
    rep = {n: ("r", k) for k, group in enumerate(regions) for n in group}
    edges: dict[object, set] = {}
    for n in gm.graph.nodes:
        for i in n.all_input_nodes:
            a, b = rep.get(i, i), rep.get(n, n)
            if a != b:
                edges.setdefault(a, set()).add(b)
    state: dict[object, int] = {}  # 1 = on the stack, 2 = done

    def cyclic(v) -> bool:
        state[v] = 1
        for w in edges.get(v, ()):
            if state.get(w) == 1 or (w not in state and cyclic(w)):
                return True
        state[v] = 2
        return False

    return not any(v not in state and cyclic(v) for v in list(edges))


@settings(max_examples=300, deadline=None)
@given(graphs())
def test_fused_regions_never_form_a_cycle_and_compute_the_same(case):
    gm, supported = case
    regions = propose_regions(gm, lambda n: n.name in supported)
    seen = set()
    for group in regions:
        assert all(n.name in supported for n in group)
        assert sum(1 for n in group if n.target is not operator.getitem) > 1
        assert not seen & set(group)
        seen |= set(group)
    assert _contracted_is_acyclic(gm, regions)
    a, b = torch.randn(3), torch.randn(3)
    expected = gm(a, b)
    fused = fuse_by_partitions(gm, regions) if regions else gm
    for got, want in zip(fused(a, b), expected, strict=True):
        torch.testing.assert_close(got, want)


def _chain_graph():
    """a -> u (unsupported) -> c, and a -> c directly: {a, c} fused would be a cycle."""
    g = fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(torch.add, (x, x))
    a2 = g.call_function(torch.mul, (a, a))
    u = g.call_function(torch.sub, (a2, x))
    c = g.call_function(torch.add, (a2, u))
    c2 = g.call_function(torch.mul, (c, c))
    g.output((c2,))
    return fx.GraphModule(torch.nn.Module(), g)


def test_a_path_through_an_outside_node_cuts_the_component():
    gm = _chain_graph()
    regions = propose_regions(gm, lambda n: n.op == "call_function" and n.target is not torch.sub)
    assert [sorted(n.name for n in group) for group in regions] == [["add", "mul"], ["add_1", "mul_1"]]


def test_a_fully_supported_graph_is_one_region():
    gm = _chain_graph()
    (group,) = propose_regions(gm, lambda n: n.op == "call_function")
    assert len(group) == 5


def test_a_multi_output_node_stays_with_its_getitems():
    """var_mean's two results feed regions of two levels: the node and both getitems must stay in
    one region (a region boundary passes tensors, not the tuple)."""
    g = fx.Graph()
    x = g.placeholder("x")
    s = g.call_function(torch.relu, (x,))
    s2 = g.call_function(torch.exp, (s,))
    u = g.call_function(torch.sub, (s2, x))  # outside: what follows it is a level higher
    vm = g.call_function(torch.var_mean, (x,))
    v = g.call_function(operator.getitem, (vm, 0))
    m = g.call_function(operator.getitem, (vm, 1))
    a = g.call_function(torch.add, (v, u))
    a2 = g.call_function(torch.mul, (a, a))
    b = g.call_function(torch.mul, (m, s2))
    g.output((a2, b))
    gm = fx.GraphModule(torch.nn.Module(), g)
    regions = propose_regions(gm, lambda n: n.op == "call_function" and n.target is not torch.sub)
    where = {n: k for k, group in enumerate(regions) for n in group}
    assert where[v] == where[vm] == where[m]
    assert _contracted_is_acyclic(gm, regions)
    t = torch.randn(5)
    torch.testing.assert_close(fuse_by_partitions(gm, regions)(t), gm(t))
