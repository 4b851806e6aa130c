"""Running a flushed window: fused through the compile pipeline, or replayed op by op.

A window becomes an FX graph (placeholders = memory from before the window, nodes = the
recorded ops in launch order, outputs = the results whose memory is still alive). That graph
goes through the same pipeline as ``torch.compile(backend="neuron")`` — AOTAutograd
(functionalisation of the in-place ops and views, write-back of mutated placeholders), the
partitioner (lowerable regions are fused and compiled through StableHLO and IREE, the rest run
as eager device ops), the executable cache — and is cached under the window's signature, so a
training loop compiles its windows once and then only looks them up.

Results are written into the device memory the recorder handed out; results nobody references
any more are not outputs of the graph at all (the compiler removes their computation if nothing
else needs it). A window that fails to compile or to run is replayed op by op with the eager
kernels and its signature is remembered as non-fusable. Errors keep the eager contract: index
tensors are bounds-checked before a fused window runs, and any failure sends the window to the
op-by-op replay, where the eager kernels defer the earliest error with its op and with the stack
from which the op was launched.
"""

from __future__ import annotations

import contextlib
import operator
import warnings

import torch
import torch.fx as fx
from torch._C._profiler import symbolize_tracebacks

from ..compiler.executable import results_into_destinations
from ..runtime import errors
from ..runtime.storage import _flat, host
from . import lifting, metrics
from .window import Ref, Window

_NON_FUSABLE = object()
_MAX_FLOAT_VARIANTS = 1


class WindowCache:
    def __init__(self) -> None:
        self.entries: dict[tuple, dict] = {}  # structure → {float values → program}
        self.lifted: dict[tuple, tuple] = {}  # structure → (lifted positions, program, attempts)

    def clear(self) -> None:
        self.entries.clear()
        self.lifted.clear()


CACHE = WindowCache()


def _fx_args(a, env):
    if isinstance(a, Ref):
        return env[a.i]
    if type(a) is tuple:
        return tuple(_fx_args(x, env) for x in a)
    return a


_VIEW = torch.ops.aten.view.default
_RESHAPE = torch.ops.aten.reshape.default


def _views_as_reshapes(w: Window) -> set[int]:
    """The ``view`` nodes the graph may express as ``reshape``: views of values computed in the
    window whose alias group (the value, its views, the views of those …) no op writes to.

    The recorder decided "view" with the strides the eager kernels give; when the window is
    traced again for compilation, PyTorch's decompositions may give an intermediate other
    strides (``native_layer_norm_backward`` keeps its input's permuted layout, the kernel returns
    it contiguous), where that view is impossible. Intermediate layouts are the compiler's
    business, and without a write through the alias a reshape computes the same values. Used
    only for a window whose tracing failed on such a view (``_compile_window``)."""
    root: dict[int, int] = {}  # value -> the value it is a view of, transitively
    written: set[int] = set()
    for n in w.nodes:
        schema = n.op._schema
        for arg, a in zip(schema.arguments, n.args, strict=False):
            if arg.alias_info is not None and arg.alias_info.is_write and isinstance(a, Ref):
                written.add(root.get(a.i, a.i))
        if n.is_view and n.args and isinstance(n.args[0], Ref):
            base = root.get(n.args[0].i, n.args[0].i)
            for v in n.outs:
                if v is not None:
                    root[v] = base
    placeholders = set(w.ph_values)
    out = set()
    for k, n in enumerate(w.nodes):
        if n.op is _VIEW and isinstance(n.args[0], Ref):
            base = root.get(n.args[0].i, n.args[0].i)
            if base not in placeholders and base not in written:
                out.add(k)
    return out


def build_graph(w: Window, live: list[int], lifted: set[int] | None = None,
                reshape_views: bool = False) -> fx.GraphModule:
    """The window as an FX graph: placeholders for its memory from before, its ops in launch
    order, the values ``live`` as outputs. ``lifted`` (indices into ``w.floats``): those floats
    become further placeholders, after the window's own (see ``lifting.py``).
    ``reshape_views``: see :func:`_views_as_reshapes`."""
    by_node = lifting.lift_sites(w, lifted) if lifted else {}
    reshapes = _views_as_reshapes(w) if reshape_views else set()
    g = fx.Graph()
    env: dict[int, fx.Node] = {}
    for i, v in enumerate(w.ph_values):
        env[v] = g.placeholder(f"p{i}")
    floats = {i: g.placeholder(f"f{i}") for i in sorted(lifted or ())}
    for k, n in enumerate(w.nodes):
        args = _fx_args(n.args, env)
        kwargs = {k2: _fx_args(v, env) for k2, v in n.kwargs.items()}
        mine = by_node.get(k)
        if mine:
            node = lifting.emit(g, n.op, args, kwargs, {p: floats[i] for p, i in mine.items()})
        else:
            node = g.call_function(_RESHAPE if k in reshapes else n.op, args, kwargs)
        node.meta["window_index"] = k
        if n.single:
            if n.outs and n.outs[0] is not None:
                env[n.outs[0]] = node
        else:
            for j, v in enumerate(n.outs):
                if v is not None:
                    env[v] = g.call_function(operator.getitem, (node, j))
    g.output(tuple(env[v] for v in live))
    return fx.GraphModule(torch.nn.Module(), g)


def _compile(gm: fx.GraphModule, inputs: list[torch.Tensor]):
    """AOTAutograd and the compile pipeline, as for ``torch.compile(backend="neuron")``."""
    from ..compiler.backend import compile_with_aot_autograd
    from ..compiler.settings import CompileOptions

    with torch.no_grad(), _python_dispatch_allowed():
        return compile_with_aot_autograd(gm, inputs, CompileOptions(fallback=False, partition=True))


def _python_dispatch_allowed():
    """The dispatcher's thread-local key sets of an ordinary eager call for tracing a window.

    A window can be flushed from inside PyTorch's C++ code that excludes the Python dispatch key,
    e.g. ``t[rows, cols] = v`` with tuples of 0-d tensors (UDOP) reads each index with ``item()``,
    a synchronisation point; FakeTensor's tracing refuses to start there ("you set no_dispatch()").
    Tracing the window's graph touches no user tensor, so the exclusion is lifted for it alone."""
    exclude = torch._C._dispatch_tls_local_exclude_set()
    if not exclude.has(torch._C.DispatchKey.Python):
        return contextlib.nullcontext()
    return torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(),
                                           exclude.remove(torch._C.DispatchKey.Python))


_IMPOSSIBLE_VIEW = "Cannot view a tensor with shape"


class _ResultMismatch(Exception):
    """A compiled window's result does not have the shape its recorded op gave (a decomposition
    whose results differ from the kernel's, as PyTorch's of ``_scaled_dot_product_flash_attention_for_cpu``
    did before ``compiler/attention.py``): the window runs op by op instead."""


def _check_results(live, results) -> None:
    for o, r in zip(live, results, strict=True):
        if tuple(r.shape) != tuple(o.size):
            raise _ResultMismatch(f"value %{o.value}: the program gives shape {tuple(r.shape)}, "
                                  f"the recorded op {tuple(o.size)}")


def _compile_window(w: Window, live: list[int], inputs: list, lifted: set[int] | None = None):
    """The window compiled; traced again with views of intermediates as reshapes when PyTorch's
    decompositions made one of the recorded views impossible."""
    try:
        return _compile(build_graph(w, live, lifted), inputs)
    except Exception as err:  # noqa: BLE001 - any other failure is the caller's to report
        if _IMPOSSIBLE_VIEW not in str(err):
            raise
    return _compile(build_graph(w, live, lifted, reshape_views=True), inputs)


class _Replay(fx.Interpreter):
    """Runs the window's ops one by one on the eager kernels, with each op's launch stack."""

    def __init__(self, gm: fx.GraphModule, w: Window):
        super().__init__(gm)
        self._w = w

    def run_node(self, n: fx.Node):
        k = n.meta.get("window_index")
        if k is None:
            return super().run_node(n)
        errors.set_replay_stack(_LazyStack(self._w.nodes[k].traceback))
        try:
            return super().run_node(n)
        finally:
            errors.set_replay_stack(None)


class _LazyStack(list):
    """The launch stack of a recorded op, symbolised when an error context asks for it."""

    def __init__(self, tb):
        super().__init__()
        self._tb = tb
        self._done = False

    def _fill(self) -> None:
        if not self._done:
            self._done = True
            import traceback

            frames = symbolize_tracebacks([self._tb])[0]
            self.extend(traceback.FrameSummary(f["filename"], f["line"], f["name"]) for f in reversed(frames))

    def __iter__(self):
        self._fill()
        return super().__iter__()

    def __len__(self) -> int:
        self._fill()
        return super().__len__()

    def __getitem__(self, i):
        self._fill()
        return super().__getitem__(i)


_MAX_LIFT_ATTEMPTS = 2


def _lifted(w: Window, structure: tuple, floats: tuple, seen: tuple, live) -> tuple[object, list]:
    """The program of ``structure`` with its varying floats as inputs, and those inputs."""
    varying = {i for i, (a, b) in enumerate(zip(floats, seen, strict=True)) if a != b}
    positions, entry, attempts = CACHE.lifted.get(structure, (frozenset(), None, 0))
    if entry is None or not varying <= positions:
        if attempts >= _MAX_LIFT_ATTEMPTS:
            metrics.count("windows_varying_floats")
            return _NON_FUSABLE, []
        positions = frozenset(positions | varying)
        try:
            inputs = lifting.float_inputs([floats[i] for i in sorted(positions)])
            entry = _compile_window(w, [o.value for o in live], [*w.placeholders, *inputs], set(positions))
            metrics.count("windows_compiled")
            metrics.count("windows_lifted")
        except Exception as err:  # noqa: BLE001 - it runs op by op instead
            entry = _NON_FUSABLE
            metrics.note_failure(f"lifting floats: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
        CACHE.lifted[structure] = (positions, entry, attempts + 1)
    if entry is _NON_FUSABLE:
        metrics.count("windows_varying_floats")
        return _NON_FUSABLE, []
    metrics.count("window_cache_hits")
    return entry, lifting.float_inputs([floats[i] for i in sorted(positions)])


def _checks_pass(w: Window) -> bool:
    for c in w.checks:
        h = host(c.index)
        if h.numel() == 0:
            continue
        lo, hi = torch.aminmax(h)
        if int(hi) >= c.bound or int(lo) < (-c.bound if c.negative_ok else 0):
            return False
    return True


@contextlib.contextmanager
def _as_recorded():
    """Running recorded ops: below autograd and below the version-counter bumps. Each op got
    both when it was recorded, as in eager (autograd saved its inputs at the versions they had
    then); the write-back of a fused window's mutated inputs, or a replayed in-place op, would
    bump the counters of the user's tensors a second time and autograd would take them for
    modified (``... is at version 2; expected version 1``). A window flushed from inside an
    operator (``.item()``) already runs below both; one flushed from outside
    (``torch.neuron.synchronize()``, a host read by a fallback) did not."""
    with torch.no_grad(), torch._C._AutoDispatchBelowADInplaceOrView():
        yield


def run_window(w: Window, reason: str) -> None:
    """Execute the work recorded in ``w`` (recording is off while this runs)."""
    metrics.count("windows")
    metrics.count_reason(reason)
    live = [o for o in w.outputs if o.block() is not None]
    mutates = any(u.written and not u.produced for u in w.blocks.values())
    if not live and not mutates and not w.random and not w.checks:
        metrics.count("windows_dead")  # nothing observable: no result alive, nothing written
        return
    structure = (tuple(w.sig), tuple(o.value for o in live))
    variants = CACHE.entries.get(structure)
    if variants is None:
        variants = CACHE.entries[structure] = {}
    floats = tuple(w.floats)
    entry = variants.get(floats)
    extra: list[torch.Tensor] = []
    gm = None
    if entry is None and not variants and structure not in CACHE.lifted:
        eager_lift = lifting.optimizer_floats(w)
        if eager_lift:
            CACHE.lifted[structure] = (frozenset(eager_lift), None, 0)
    if entry is None and structure in CACHE.lifted:
        entry, extra = _lifted(w, structure, floats, floats, live)
    elif entry is None:
        if len(variants) >= _MAX_FLOAT_VARIANTS:
            # the same program with new float arguments (an optimizer's bias correction): the
            # floats that vary become inputs of one program (lifting.py), else it runs op by op
            entry, extra = _lifted(w, structure, floats, next(iter(variants)), live)
        else:
            try:
                entry = _compile_window(w, [o.value for o in live], w.placeholders)
                metrics.count("windows_compiled")
            except Exception as err:  # noqa: BLE001 - a window that cannot be fused runs op by op
                entry = _NON_FUSABLE
                metrics.count("windows_non_fusable")
                metrics.note_failure(f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
            variants[floats] = entry
    else:
        metrics.count("window_cache_hits")
    results = None
    if entry is not _NON_FUSABLE and (not w.checks or _checks_pass(w)):
        try:
            with _as_recorded(), results_into_destinations():
                results = entry(*w.placeholders, *extra)
            _check_results(live, results)  # before any result is written to its destination
            metrics.count("windows_fused")
        except Exception as err:  # noqa: BLE001
            results = None
            if extra:
                CACHE.lifted[structure] = (CACHE.lifted[structure][0], _NON_FUSABLE, _MAX_LIFT_ATTEMPTS)
            else:
                variants[floats] = _NON_FUSABLE
            metrics.count("windows_non_fusable")
            metrics.note_failure(f"run: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
            if not isinstance(err, _ResultMismatch):  # known and harmless: the replay is exact
                warnings.warn(f"torchneuron adaptive eager: a fused window failed to run and is replayed "
                              f"op by op ({type(err).__name__}: {err})", RuntimeWarning, stacklevel=2)
    if results is None:
        if gm is None:
            gm = build_graph(w, [o.value for o in live])
        metrics.count("windows_replayed")
        with _as_recorded():
            results = _Replay(gm, w).run(*w.placeholders)
    for o, r in zip(live, results, strict=True):
        block = o.block()
        if block is None or not r.numel():
            continue
        dst = _flat(block, o.dtype).as_strided(o.size, o.stride, 0)
        src = host(r)
        if src.data_ptr() != dst.data_ptr():
            dst.copy_(src)
