"""Views recomputed in the backward graph instead of saved by the forward graph.

AOTAutograd's default partitioner saves every forward value the backward reads. A view such as
``permute(weight, [1, 0])`` (a linear layer's transposed weight) is free in eager PyTorch, but as
an output of a compiled forward program it is a tensor the program writes: the GPT-2-style LM of
``bench/compile.py`` wrote every transposed weight (3.7 M floats, 1.8 ms of its 30 ms forward
program in IREE's transpose dispatches) only for the backward to read it once.

:func:`partition` moves such views to the backward before partitioning: a forward view chain the
backward reads is copied in front of its first backward user, and the backward users read the
copy, when its root (a graph input or a forward value) is no smaller than the view or is saved
anyway. The forward then saves the root instead, which costs no more bytes: a graph input is
passed through, a saved value was saved already, and a reshape, transpose or expansion is as
large as its root or larger; a narrowing view (a slice) of a value not otherwise saved stays
saved. Inductor's min-cut partitioner treats views as free to recompute for the same reason;
the min-cut partitioner itself was measured slower for us (it also recomputes pointwise work in
the backward, docs/performance.md).
"""

from __future__ import annotations

import torch
import torch.fx as fx
from torch._functorch.partitioners import (
    _has_tag_is_forward,
    _is_fwd_seed_offset,
    _is_primal,
    _is_tangent,
    default_partition,
)


def _is_view(node: fx.Node) -> bool:
    return (node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
            and node.target.is_view and isinstance(node.meta.get("val"), torch.Tensor))


def _nbytes(node: fx.Node) -> int:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return -1
    return val.numel() * val.element_size()


def _forward_nodes(graph: fx.Graph) -> set[fx.Node]:
    """The joint graph's forward nodes, delimited as ``default_partition`` delimits them."""
    last = None
    for node in graph.nodes:
        if _has_tag_is_forward(node) or _is_primal(node) or _is_fwd_seed_offset(node):
            last = node
    forward: set[fx.Node] = set()
    for node in graph.nodes:
        if not _is_tangent(node) and node.op != "output":
            forward.add(node)
        if node is last:
            break
    return forward


def _view_chain(node: fx.Node, forward: set[fx.Node]) -> list[fx.Node] | None:
    """The root and the views from it to ``node`` (root first), if every link is a forward view
    whose only tensor argument is the previous link."""
    chain = []
    while _is_view(node) and node in forward:
        tensors = node.all_input_nodes
        if len(tensors) != 1:
            return None
        chain.append(node)
        node = tensors[0]
    if not chain:
        return None
    chain.append(node)
    return chain[::-1]


def recompute_views_in_backward(graph: fx.Graph) -> int:
    """Rewrite the joint ``graph`` (see the module docstring); returns the views moved."""
    forward = _forward_nodes(graph)

    def backward_users(node: fx.Node) -> list[fx.Node]:
        # the output node returns forward values too (user outputs): not a backward use here
        return [u for u in node.users if u not in forward and u.op != "output"]

    def used_by_backward(node: fx.Node) -> bool:
        return bool(backward_users(node))

    position = {n: i for i, n in enumerate(graph.nodes)}
    moved = 0
    for node in list(graph.nodes):
        if node not in forward or not _is_view(node) or not used_by_backward(node):
            continue
        chain = _view_chain(node, forward)
        if chain is None:
            continue
        root = chain[0]
        if root.op == "placeholder" and not _is_primal(root):
            continue
        if not (used_by_backward(root) or _nbytes(node) >= _nbytes(root)):
            continue  # saving the root instead of a narrowing view would keep more bytes
        users = backward_users(node)
        first = min(users, key=position.__getitem__)
        copies: dict[fx.Node, fx.Node] = {root: root}
        with graph.inserting_before(first):
            for link in chain[1:]:
                copy = graph.node_copy(link, copies.__getitem__)
                copy.meta = dict(link.meta)
                copy.meta.pop("partitioner_tag", None)
                copies[link] = copy
        for user in users:
            user.replace_input_with(node, copies[node])
        moved += 1
    if moved:
        graph.lint()
    return moved


def partition(joint_module: fx.GraphModule, joint_inputs, **kwargs):
    """AOTAutograd's ``default_partition`` after :func:`recompute_views_in_backward`."""
    if recompute_views_in_backward(joint_module.graph):
        joint_module.recompile()
    return default_partition(joint_module, joint_inputs, **kwargs)
