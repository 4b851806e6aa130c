"""The ``neuron`` backend of ``torch.compile``.

``torch.compile(model, backend="neuron")`` hands Dynamo's graph to :func:`neuron_backend`,
which runs AOTAutograd (forward and backward graphs for training, one graph for inference)
with the decompositions of ``passes.py`` and compiles each graph with ``graph_compiler``.

Semantics follow TorchNeuron: ``dynamic=True`` is rejected (shapes are specialised and a new
shape compiles a new graph); a ``mode`` other than the default warns and compiles as the default;
``options={"fallback": True}`` / ``TORCHNEURON_COMPILE_FALLBACK=1`` run a graph that fails to
compile eagerly on the device, with a warning.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import warnings
from collections.abc import Iterator, Mapping

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from . import graph_cache, precompile, verify
from .errors import NeuronCompilationError
from .graph_compiler import compile_graph
from .passes import decompositions
from .saved_views import partition as partition_recomputing_views
from .settings import CompileOptions, recompute_views

_DEFAULT_MODES = (None, "default")


def _graph_compiler(kind: str, options: CompileOptions, stored: bool):
    if stored:  # results that AOTAutograd's cache (and Dynamo's caching precompile) can store
        return graph_cache.serializable_compiler(kind, lambda gm, _: compile_graph(gm, kind, options))

    def compiler(gm: torch.fx.GraphModule, example_inputs):
        return make_boxed_func(compile_graph(gm, kind, options))

    return compiler


class _DecompositionTable(Mapping):
    """``passes.decompositions(...)``, built when AOTAutograd first reads it: only to trace a
    graph, which a hit in AOTAutograd's cache skips (building it takes ~0.08 s of a warm first
    step of ~1.3 s). Not callable: AOTAutograd's Dynamo backend calls a callable table at once."""

    def __init__(self, convolution_backward: bool):
        self._convolution_backward = convolution_backward

    def _table(self) -> dict:
        return decompositions(convolution_backward=self._convolution_backward)

    def __getitem__(self, op):
        return self._table()[op]

    def __iter__(self) -> Iterator:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


def compile_with_aot_autograd(gm: torch.fx.GraphModule, example_inputs, options: CompileOptions):
    """AOTAutograd with the neuron compilers, through AOTAutograd's cache unless it is off."""
    # a graph whose regions are checked against eager execution (verify.py) is not stored
    stored = (graph_cache.enabled() or precompile.enabled()) and not verify.enabled()
    backend = aot_autograd(
        fw_compiler=_graph_compiler("forward", options, stored),
        bw_compiler=_graph_compiler("backward", options, stored),
        inference_compiler=_graph_compiler("inference", options, stored),
        decompositions=_DecompositionTable(convolution_backward=not options.uses_library_convolutions),
        **({"partition_fn": partition_recomputing_views} if recompute_views() else {}),
    )
    with graph_cache.storing(options) if stored else contextlib.nullcontext():
        return backend(gm, example_inputs)


def _is_symbolic(x) -> bool:
    if isinstance(x, torch.SymInt | torch.SymFloat | torch.SymBool):
        return True
    if isinstance(x, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in (*x.shape, *x.stride()))
    return False


def _reads_item(node: torch.fx.Node) -> bool:
    return node.op == "call_method" and node.target == "item"


class _PerShape:
    """Dynamo marked some sizes dynamic after seeing a second shape (automatic dynamic
    shapes): compile a specialised graph for each concrete shape, as the chip needs.

    Python floats that changed between calls arrive as 0-d tensor inputs read with ``.item()``
    inside the graph (Dynamo's ``specialize_float=False``); AOTAutograd cannot trace that read
    with static shapes (``DataDependentOutputException``), so each such value is specialised
    too: the read is replaced by the value, which joins the signature."""

    def __init__(self, gm: torch.fx.GraphModule, options: CompileOptions):
        self._gm = gm
        self._options = options
        self._compiled: dict[tuple, object] = {}
        self._lock = threading.Lock()
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self._read = [i for i, ph in enumerate(placeholders) if any(map(_reads_item, ph.users))]

    def _signature(self, args) -> tuple:
        sig = tuple(
            (tuple(a.shape), tuple(a.stride()), a.dtype, a.requires_grad) if isinstance(a, torch.Tensor) else a
            for a in args
        )
        return sig + tuple(args[i].item() for i in self._read)

    def _specialised(self, args) -> torch.fx.GraphModule:
        if not self._read:
            return self._gm
        gm = torch.fx.GraphModule(self._gm, copy.deepcopy(self._gm.graph))
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for i in self._read:
            value = args[i].item()
            for read in [u for u in placeholders[i].users if _reads_item(u)]:
                read.replace_all_uses_with(value)
                gm.graph.erase_node(read)
        gm.recompile()
        return gm

    def __call__(self, *args):
        sig = self._signature(args)
        with self._lock:
            fn = self._compiled.get(sig)
            if fn is None:
                fn = compile_with_aot_autograd(self._specialised(args), list(args), self._options)
                self._compiled[sig] = fn
        return fn(*args)


def neuron_backend(gm: torch.fx.GraphModule, example_inputs, mode: str | None = None,
                   options: dict | None = None):
    """Dynamo backend ``neuron`` (see the module docstring)."""
    if mode not in _DEFAULT_MODES:
        warnings.warn(
            f"torch.compile(backend='neuron', mode={mode!r}): the neuron backend has one "
            "compilation mode; compiling with the default mode",
            UserWarning,
            stacklevel=2,
        )
    opts = CompileOptions.from_user(options)
    if not torch._dynamo.config.assume_static_by_default:
        raise NeuronCompilationError(
            "torch.compile(..., dynamic=True) is not supported by the neuron backend: the "
            "NeuronCore runs shape-specialised executables. Use dynamic=False (or leave it "
            "unset): each new input shape then compiles its own graph",
            advice=False,
        )
    if any(_is_symbolic(x) for x in example_inputs):
        return _PerShape(gm, opts)
    return compile_with_aot_autograd(gm, example_inputs, opts)


if precompile.requested():
    precompile.enable()  # before torch.compile wraps the model: that is when packages load
