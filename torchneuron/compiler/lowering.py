"""FX → StableHLO through torch-mlir, and the question "does this node lower?".

``lower(gm)`` imports a functional ATen graph whose placeholders carry fake tensors in
``meta["val"]`` with ``torch_mlir.fx.stateless_fx_import(gm, output_type="stablehlo")`` and
returns the StableHLO text twice: without debug locations (the cache key is computed on it) and
with them (for dumps and error messages, which then point at the user's source lines).

``node_lowers(node)`` answers for the partitioner: a node is supported when a graph made of
that node alone lowers to StableHLO. Answers are cached per (op, input dtypes, output dtypes).
"""

from __future__ import annotations

import faulthandler
import operator
import os
import pickle
import re
import resource
import select
import signal
import threading
import time
from dataclasses import dataclass

import torch
import torch.fx as fx

from . import verdicts
from .passes import strip_device_args

_RESIDUAL_TORCH = re.compile(r"\btorch\.(aten|prim|prims|operator|constant|vtensor)\b|!torch\.")


class LoweringError(RuntimeError):
    pass


@dataclass
class Lowered:
    text: str  # StableHLO without debug locations
    text_with_locations: str


def lower(gm: fx.GraphModule, name: str = "main", isolate: bool = False) -> Lowered:
    """StableHLO for ``gm`` (whose device arguments are rewritten in place, see passes).

    ``isolate=True`` (compiled regions): torch-mlir runs in a forked child process with a
    memory and time budget, so that a crash, a hang or a memory blow-up in its pass pipeline
    (seen on some transformer backward graphs: 20 GB and growing) becomes a ``LoweringError``
    instead of taking the user's process down."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and crashes_lowering(node):
            raise LoweringError(
                f"{node.target} reduces a 0-dimensional tensor over a dimension; torch-mlir "
                "crashes or hangs on such graphs, so the op runs eagerly"
            )
    strip_device_args(gm)
    if isolate and _isolation_enabled():
        return _lower_in_child(gm, name)
    return _lower_here(gm, name)


def _lower_here(gm: fx.GraphModule, name: str) -> Lowered:
    from torch_mlir import fx as mlir_fx
    from torch_mlir import ir
    from torch_mlir.dialects import torch as torch_d
    from torch_mlir.extras.fx_importer import FxImporter

    # MLIR diagnostics are collected (and reported in the error) instead of printed
    diagnostics: list[str] = []
    context = ir.Context()
    torch_d.register_dialect(context)
    context.attach_diagnostic_handler(lambda d: diagnostics.append(f"{d.location}: {d.message}") or True)
    try:
        module = mlir_fx.stateless_fx_import(
            gm, output_type="stablehlo", model_name=name, fx_importer=FxImporter(context=context)
        )
    except Exception as err:  # noqa: BLE001 - torch-mlir raises several error types
        detail = diagnostics[0] if diagnostics else _summarise(str(err))
        raise LoweringError(detail) from err
    fence_scatters(module)
    fence_wide_fusions(module)
    op = module.operation
    text = op.get_asm(enable_debug_info=False)
    if _RESIDUAL_TORCH.search(text):
        left = sorted(set(re.findall(r"torch\.[a-z_]+\.[A-Za-z0-9_.]+", text)))
        raise LoweringError(f"torch ops left after lowering to StableHLO: {', '.join(left[:5])}")
    return Lowered(text, op.get_asm(enable_debug_info=True))


def _optimization_barrier(value, where, location):
    """A ``stablehlo.optimization_barrier`` of ``value`` at insertion point ``where``: IREE does not
    fuse across it, and the value passes through unchanged."""
    from torch_mlir import ir

    with where, location:
        return ir.Operation.create("stablehlo.optimization_barrier", results=[value.type], operands=[value])


def fence_scatters(module) -> int:
    """An optimization barrier on every used ``stablehlo.scatter`` result; returns how many.

    IREE 3.13 fuses a scatter into the dispatch of its consumer and keeps the scatter's whole
    result there as a stack temporary: above the stack limit the program fails to compile
    (VOLO's ``F.fold``, an ``index_put`` with accumulation followed by a crop: 150 KB). The
    barrier keeps each scatter in a dispatch of its own, whose result goes to memory as it
    would when the consumer is not fused; values are unchanged."""
    from torch_mlir import ir

    scatters: list = []

    def visit(op):
        if op.name == "stablehlo.scatter":
            scatters.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    fenced = 0
    for op in scatters:
        for result in op.results:
            if not any(True for _ in result.uses):
                continue
            barrier = _optimization_barrier(result, ir.InsertionPoint.after(op), op.location)
            result.replace_all_uses_except(barrier.result, barrier)
            fenced += 1
    return fenced


# Ops that IREE fuses into one elementwise dispatch with their producers and consumers; a
# dispatch reads every buffer at the leaves of such a tree.
_FUSABLE = frozenset(f"stablehlo.{n}" for n in (
    "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "negate", "abs",
    "exponential", "exponential_minus_one", "log", "log_plus_one", "sqrt", "rsqrt", "tanh", "logistic",
    "power", "sine", "cosine", "floor", "ceil", "round_nearest_even", "sign", "clamp", "select",
    "compare", "convert", "and", "or", "not", "xor", "slice", "reshape", "broadcast_in_dim",
    "transpose", "pad", "concatenate", "reverse", "dynamic_slice"))
# IREE's CPU runtime refuses a dispatch with more than 32 buffer bindings (``binding count 41 >
# 32`` when the program loads); a fused tree is fenced well below that, its results included.
FUSION_INPUT_LIMIT = 16


def fence_wide_fusions(module, limit: int = FUSION_INPUT_LIMIT) -> int:
    """Optimization barriers that keep elementwise trees of more than ``limit`` input buffers
    out of one dispatch; returns how many.

    DenseNet's backward adds up the gradient of each feature map from slices of every later
    layer's input gradient: one sum of 40+ slices of distinct buffers, which IREE 3.13 fuses
    into one dispatch that compiles but cannot be loaded (more than 32 bindings). The program
    was then halved again and again until each piece loaded (DenseNet-161's backward: 18
    programs, 134 s of compilation). Walking the function in order, each value with a single
    elementwise user carries the set of buffers its elementwise tree reads (other values are
    written to memory and read as one buffer); where an op's set would exceed ``limit``, its
    widest operand is fenced and counts as one buffer.
    Values are unchanged: the partial sum goes to memory instead of staying in registers."""
    fenced = 0
    for func in module.body.operations:
        if func.regions and func.regions[0].blocks:
            fenced += _fence_block(func.regions[0].blocks[0], limit)
    return fenced


def _fence_block(block, limit: int) -> int:
    from torch_mlir import ir

    fenced = 0
    leaves: dict = {}  # value -> frozenset of the buffers its fused tree reads

    def reads(value) -> frozenset:
        return leaves.get(value, frozenset([value]))

    for op in list(block.operations):
        if op.name in ("stablehlo.constant", "stablehlo.iota", "arith.constant"):
            for result in op.results:
                leaves[result] = frozenset()  # folded into the dispatch, not a buffer
            continue
        if op.name not in _FUSABLE:
            continue
        while True:
            operands = list(op.operands)
            union = frozenset().union(*(reads(v) for v in operands))
            if len(union) <= limit:
                break
            widest = max(operands, key=lambda v: len(reads(v)))
            if len(reads(widest)) <= 1:
                break  # only distinct buffers: nothing left to fence
            barrier = _optimization_barrier(widest, ir.InsertionPoint(op), op.location)
            for i, v in enumerate(operands):
                if v == widest:
                    op.operands[i] = barrier.result
            fenced += 1
        for result in op.results:
            users = [u.owner for u in result.uses]
            # a value with several users, or one outside the elementwise set, is written to
            # memory: its consumers read it as one buffer
            if not union or (len(users) == 1 and users[0].name in _FUSABLE):
                leaves[result] = union  # (computed from constants alone: folded, no buffer)
    return fenced


def _isolation_enabled() -> bool:
    return os.environ.get("TORCHNEURON_LOWERING_ISOLATION", "1") not in ("0", "false", "False") \
        and hasattr(os, "fork")


def _budget() -> tuple[float, int]:
    seconds = float(os.environ.get("TORCHNEURON_LOWERING_TIMEOUT", "300"))
    gib = float(os.environ.get("TORCHNEURON_LOWERING_MEMORY_GIB", "8"))
    return seconds, int(gib * 2**30)


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _enter_child(limit: int) -> None:
    """The start of a forked lowering child whose address space may reach ``limit`` bytes."""
    # GNU OpenMP is not fork-safe: a parallel region here would wait forever for the parent's
    # worker threads (torch-mlir builds as_strided index tensors with ATen)
    torch.set_num_threads(1)
    faulthandler.disable()  # a crash here is reported by the parent, not dumped twice
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _lower_in_child(gm: fx.GraphModule, name: str) -> Lowered:
    seconds, extra = _budget()
    limit = _address_space() + extra  # the child may grow its address space by ``extra``
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: lower, send the result, leave without running any cleanup
        code = 0
        try:
            os.close(r)
            _enter_child(limit)
            try:
                payload = pickle.dumps(("ok", _lower_here(gm, name)))
            except LoweringError as err:
                payload = pickle.dumps(("error", str(err)))
            except MemoryError:
                payload = pickle.dumps(("error", "torch-mlir ran out of its memory budget"))
            with os.fdopen(w, "wb") as out:
                out.write(payload)
        except BaseException:  # noqa: BLE001 - the parent reports a missing result
            code = 1
        os._exit(code)
    os.close(w)
    chunks: list[bytes] = []
    deadline = time.monotonic() + seconds
    with os.fdopen(r, "rb") as inp:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([inp], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise LoweringError(f"torch-mlir did not finish lowering within {seconds:.0f} s "
                                    "(TORCHNEURON_LOWERING_TIMEOUT)")
            chunk = os.read(inp.fileno(), 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        if os.WIFSIGNALED(status):
            why = signal.Signals(os.WTERMSIG(status)).name
            raise LoweringError(f"torch-mlir crashed while lowering ({why}; memory budget "
                                f"{extra / 2**30:.0f} GiB, TORCHNEURON_LOWERING_MEMORY_GIB)")
        raise LoweringError(f"torch-mlir's lowering process exited with status {os.WEXITSTATUS(status)}")
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "error":
        raise LoweringError(value)
    return value


def _summarise(message: str) -> str:
    for line in message.splitlines():
        if "error" in line.lower() and line.strip():
            return line.strip()
    return message.strip().splitlines()[0] if message.strip() else "lowering failed"


# --- which nodes lower --------------------------------------------------------------------

_cache: dict[tuple, bool] = {}
_cache_lock = threading.Lock()


def _tensor_vals(v) -> list:
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (list, tuple)):
        return [x for x in v if isinstance(x, torch.Tensor)]
    return []


def _describe_arg(a) -> object:
    if isinstance(a, fx.Node):
        return tuple((str(t.dtype), tuple(t.shape)) for t in _tensor_vals(a.meta.get("val")))
    if isinstance(a, (list, tuple)):
        return tuple(_describe_arg(x) for x in a)
    return repr(a)


def _key(node: fx.Node) -> tuple:
    """The node's signature: op, tensor dtypes and shapes, and its other arguments — whether
    torch-mlir lowers a node can depend on all of them (a ceil-mode pool lowers for one input
    size and not another; batch norm on some shapes only)."""
    args = tuple(_describe_arg(a) for a in node.args)
    kwargs = tuple(sorted((k, _describe_arg(v)) for k, v in node.kwargs.items()))
    outs = tuple((str(t.dtype), tuple(t.shape)) for t in _tensor_vals(node.meta.get("val")))
    return (str(node.target), args, kwargs, outs)


def single_node_graph(node: fx.Node) -> fx.GraphModule:
    """A graph computing ``node`` alone from placeholders standing for its tensor inputs."""
    return probe_graph([node])


def probe_graph(nodes: list[fx.Node]) -> fx.GraphModule:
    """A graph computing each of ``nodes`` on its own, from placeholders standing for its tensor
    inputs: the nodes share nothing, so it lowers exactly when each of them does."""
    g = fx.Graph()
    outs: list[fx.Node] = []
    inputs = 0
    for node in nodes:
        env: dict[fx.Node, fx.Node] = {}
        for a in node.all_input_nodes:
            val = a.meta.get("val")
            if not isinstance(val, torch.Tensor):
                raise LoweringError(f"input {a.name} of {node.name} is not a tensor")
            p = g.placeholder(f"arg{inputs}")
            inputs += 1
            p.meta["val"] = val
            env[a] = p
        new = g.node_copy(node, lambda n, env=env: env[n])
        val = node.meta.get("val")
        if isinstance(val, (list, tuple)):
            for i, v in enumerate(val):
                if isinstance(v, torch.Tensor):
                    gi = g.call_function(operator.getitem, (new, i))
                    gi.meta["val"] = v
                    outs.append(gi)
        else:
            outs.append(new)
    g.output(tuple(outs))
    return fx.GraphModule(torch.nn.Module(), g)


# shape ops with a ``dim`` that torch-mlir lowers on 0-d tensors (checked one by one)
_SAFE_ON_0D = frozenset({
    torch.ops.aten.unsqueeze.default, torch.ops.aten.squeeze.dim, torch.ops.aten.squeeze.dims,
})


def crashes_lowering(node: fx.Node) -> bool:
    """An op that takes a ``dim`` and is applied to a 0-dimensional tensor: torch-mlir 20261001
    segfaults (``amax(x, [0], True)``, ``var``, ``logsumexp``) or hangs (``_softmax``) lowering
    these, taking the process with it, so they are never handed to it."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or target in _SAFE_ON_0D:
        return False
    if not any(a.name == "dim" for a in target._schema.arguments):
        return False
    first = node.args[0] if node.args else None
    val = first.meta.get("val") if isinstance(first, fx.Node) else None
    return isinstance(val, torch.Tensor) and val.dim() == 0


def _known(key: tuple) -> bool | None:
    """The verdict for ``key`` found in this process or by an earlier one (None: unknown)."""
    with _cache_lock:
        hit = _cache.get(key)
    if hit is None:
        hit = verdicts.get(key)
        if hit is not None:
            with _cache_lock:
                _cache[key] = hit
    return hit


def _remember(key: tuple, ok: bool) -> None:
    with _cache_lock:
        _cache[key] = ok
    verdicts.put(key, ok)


def _probed(node: fx.Node) -> bool:
    return bool(_tensor_vals(node.meta.get("val"))) and not crashes_lowering(node)


def node_lowers(node: fx.Node) -> bool:
    if not _probed(node):
        return False
    key = _key(node)
    hit = _known(key)
    if hit is None:
        _probe_batch([(key, node)])
        hit = _known(key)
    return bool(hit)


# Probing nodes together: one torch-mlir import of a graph of up to PROBE_BATCH independent nodes
# costs far less than one import per node (DenseNet-121's inference graph, 2251 nodes, fresh
# verdicts: ~10 ms per single-node probe). A batch that does not lower is probed node by node in
# one forked child that reports each verdict as it finds it (``_lower_each_in_child``); halving
# the batch instead cost up to 127 forks for a batch of mostly failing nodes (one adaptive window
# of bailing_hybrid: 131 s of partitioning). Probes run in forked children with the lowering's
# memory and time budget: a single node of Falcon's backward graph made torch-mlir grow past
# 20 GB in-process; a fork costs ~0.2 s.
PROBE_BATCH = 64


def probe_nodes(nodes: list[fx.Node]) -> None:
    """Find (and remember) whether each of ``nodes`` lowers, probing them in batches, so that
    ``node_lowers`` answers them from its cache."""
    pending: dict[tuple, fx.Node] = {}
    for node in nodes:
        if _probed(node):
            key = _key(node)
            if key not in pending and _known(key) is None:
                pending[key] = node
    batch = list(pending.items())
    for start in range(0, len(batch), PROBE_BATCH):
        _probe_batch(batch[start:start + PROBE_BATCH])


def _probe_batch(batch: list[tuple[tuple, fx.Node]]) -> None:
    try:
        lower(probe_graph([node for _, node in batch]), name="probe", isolate=True)
    except Exception:  # noqa: BLE001 - some node in the batch does not lower
        if len(batch) == 1:
            _remember(batch[0][0], False)
            return
        for (key, _), ok in zip(batch, _lower_each_isolated([node for _, node in batch]), strict=True):
            _remember(key, ok)
        return
    for key, _ in batch:
        _remember(key, True)


def _lower_each_isolated(nodes: list[fx.Node]) -> list[bool]:
    """Whether each node lowers on its own (``probe_graph([node])`` in a child process, as
    ``lower(isolate=True)`` judges it), in as few forked children as crashes allow: a child
    lowers one node after the other and reports each verdict; after a crash, a hang or memory
    exhaustion the rest go to a new child, and a node is judged to fail only when it was the
    first one of its child (the failure is its own, not left behind by an earlier node)."""
    verdicts: list[bool] = []
    while len(verdicts) < len(nodes):
        found = _lower_each_in_child(nodes[len(verdicts):])
        verdicts.extend(found)
        if not found:  # the child's first node crashed, hung or ran out of memory
            verdicts.append(False)
    return verdicts


def _lower_each_in_child(nodes: list[fx.Node]) -> list[bool]:
    """Verdicts for a prefix of ``nodes``, from one forked child (a byte per node); the prefix
    ends early when the child crashed, exceeded the time per node or ran out of memory."""
    seconds, extra = _budget()
    limit = _address_space() + extra
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: a verdict byte per node; stop at the first memory exhaustion
        code = 0
        try:
            os.close(r)
            _enter_child(limit)
            for node in nodes:
                try:
                    lower(probe_graph([node]), name="probe")
                    verdict = b"1"
                except MemoryError:
                    break  # maybe left by an earlier node: the parent asks a new child
                except Exception:  # noqa: BLE001 - the node does not lower
                    verdict = b"0"
                os.write(w, verdict)
        except BaseException:  # noqa: BLE001 - the parent sees the verdicts it got
            code = 1
        os._exit(code)
    os.close(w)
    got = bytearray()
    with os.fdopen(r, "rb") as inp:
        while len(got) < len(nodes):
            # the time budget is per node: it restarts with each verdict
            if not select.select([inp], [], [], seconds)[0]:
                os.kill(pid, signal.SIGKILL)
                break
            chunk = os.read(inp.fileno(), 4096)
            if not chunk:
                break
            got += chunk
    os.waitpid(pid, 0)
    return [b == ord("1") for b in got]


def first_failing_node(gm: fx.GraphModule) -> fx.Node | None:
    """The first call_function node of ``gm`` that does not lower on its own."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is not operator.getitem and not node_lowers(node):
            return node
    return None


def source_location(node: fx.Node) -> str | None:
    """The innermost user frame recorded for ``node`` ("file:line in fn\\n    code")."""
    trace = node.meta.get("stack_trace")
    if not trace:
        return None
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)', trace)
    if not frames:
        return trace.strip().splitlines()[-1]
    # the innermost frame outside PyTorch itself: under torch.set_default_device the recorded
    # trace ends in the default-device mode's __torch_function__ (torch/utils/_device.py)
    user = [fr for fr in frames if not os.path.realpath(fr[0]).startswith(_TORCH_DIR)]
    f, line, fn, code = (user or frames)[-1]
    return f"{f}:{line} in {fn}: {code.strip()}"


_TORCH_DIR = os.path.realpath(os.path.dirname(torch.__file__)) + os.sep
