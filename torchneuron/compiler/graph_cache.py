"""Compiled graphs that start warm in a new process, by default: AOTAutograd's cache.

With torchneuron's executable cache a new process compiles no program again, but it still traces
every frame's forward and backward graphs (AOTAutograd), partitions them and runs torchneuron's
passes: most of a warm first step. PyTorch's AOTAutograd cache stores the outcome of all that,
keyed by Dynamo's graph, the inputs' metadata and the configuration. A backend takes part by
handing AOTAutograd ``SerializableAOTDispatchCompiler`` compilers; in the *bundled* form
(``torch._functorch.config.bundled_autograd_cache``) an entry holds the compiled graphs
themselves: :class:`NeuronOutputCode`, the graph ``graph_compiler.compile_graph`` returned,
pickled with its programs' ``.vmfb`` bytes and rebuilt — programs loaded, nothing traced or
compiled — in the next process.

The key does not name the backend or its options, so each compilation runs with
``torch.compiler.config.cache_key_tag`` naming torchneuron's version, its compiler's sources,
the IREE compiler, the target, the compile options and the ``TORCHNEURON_*`` environment
(:func:`key_tag`); the parts of the key that only Inductor's code generators need (importing them
all, hashing Triton) are left out (``graph_cache_key.py``: about 1 s of a warm start). Forward and backward are compiled together
(``force_non_lazy_backward_lowering``) so that one entry holds both. Entries live in
``<TORCHINDUCTOR_CACHE_DIR>/aotautograd`` (default ``/tmp/torchinductor_<user>``); a graph
loaded from there is counted as ``graphs_loaded`` in ``get_metrics()`` and keeps the placement
it was compiled with. Each stored graph carries the SHA-256 of its pickled bytes: a mismatch (a
corrupt entry) is warned about, the entry removed and the graph compiled again, never executed; an
entry PyTorch cannot unpickle (truncated) is a cache miss for PyTorch, compiled and written again.
Off with ``TORCHNEURON_GRAPH_CACHE=0``, while ``TORCHNEURON_DUMP_DIR`` is
set (a loaded graph has nothing to dump) and with ``torch.compiler.config.force_disable_caches``;
``torchneuron cache clear --graphs`` empties it.
Dynamo's own work per frame (bytecode analysis, guards) is still done; the opt-in caching
precompile (``precompile.py``) stores that too.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import os
import pickle
import shutil
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch._inductor.output_code import OutputCode

from . import graph_cache_key, metrics, settings
from .settings import CompileOptions


def enabled() -> bool:
    """Whether compiled graphs are stored in and loaded from AOTAutograd's cache."""
    if os.environ.get("TORCHNEURON_GRAPH_CACHE", "1") in ("0", "false", "False", "off"):
        return False
    from . import verify

    return settings.dump_dir() is None and not verify.enabled() and not torch.compiler.config.force_disable_caches


def directory() -> Path:
    """Where AOTAutograd keeps its entries (``<TORCHINDUCTOR_CACHE_DIR>/aotautograd``), Inductor's
    and torchneuron's alike."""
    from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache

    return Path(AOTAutogradCache._get_tmp_dir())


def clear() -> int:
    """Remove every entry of AOTAutograd's cache (Inductor's too: the entries do not say whose they
    are without loading them); the number removed."""
    d = directory()
    n = sum(1 for _ in d.iterdir()) if d.is_dir() else 0
    shutil.rmtree(d, ignore_errors=True)
    return n


@functools.cache
def _sources() -> str:
    from . import verdicts

    return verdicts.fingerprint()  # torch, torch-mlir and the compiler package's sources


def key_tag(options: CompileOptions) -> str:
    """What AOTAutograd's cache key must name for a stored graph to be what this process would
    compile: torchneuron's version and compiler sources, the IREE compiler, the target, the options
    and every ``TORCHNEURON_*`` variable (over-keying only costs a compilation)."""
    import torchneuron

    from ..runtime import state
    from .executable import compiler_version

    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("TORCHNEURON_"))
    h = hashlib.sha256(repr((options, env)).encode()).hexdigest()[:16]
    return f"torchneuron-{torchneuron.__version__}/{_sources()}/{compiler_version()}/{state.target().name}/{h}"


@contextlib.contextmanager
def storing(options: CompileOptions) -> Iterator[None]:
    """Around one AOTAutograd compilation: the bundled cache, one entry for forward and backward,
    the key tagged with :func:`key_tag` (added to a tag the user set) and computed without
    Inductor's code-generator and Triton hashes (``graph_cache_key.py``)."""
    import torch._functorch.config as functorch_config

    current = torch.compiler.config.cache_key_tag
    tag = key_tag(options)
    with functorch_config.patch(bundled_autograd_cache=True, force_non_lazy_backward_lowering=True), \
            torch.compiler.config.patch(cache_key_tag=f"{current}|{tag}" if current else tag), \
            graph_cache_key.keyed_for_neuron():
        yield


class NeuronOutputCode(OutputCode):
    """A graph compiled by torchneuron, in the form AOTAutograd's bundled cache stores.

    ``fn`` is the callable ``compile_graph`` returned (a GraphModule whose regions call compiled
    programs), ``record`` its metrics record. Serialised, ``fn`` is pickled — programs as their
    ``.vmfb`` bytes — and :meth:`post_compile` loads it again. ``on_first_run`` is called once,
    after the first call of a newly compiled graph (caching precompile saves then)."""

    on_first_run: Callable[[NeuronOutputCode], None] | None = None

    def __init__(self, fn: Any, kind: str, record: metrics.GraphRecord | None):
        super().__init__()
        self._boxed_call = True
        self.fn = fn
        self.kind = kind
        self.record = record
        self.blob: bytes | None = None
        self.digest: str | None = None  # SHA-256 of ``blob``
        self._ran = False

    def __call__(self, inputs: list) -> Any:
        args = list(inputs)
        inputs.clear()  # boxed calling convention: the callee owns (and frees) the inputs
        out = self.fn(*args)
        if not self._ran:
            self._ran = True
            if NeuronOutputCode.on_first_run is not None:
                NeuronOutputCode.on_first_run(self)
        return out

    def prepare_for_serialization(self) -> None:
        # runs on a shallow copy of this object: the live ``fn`` stays with the original. AOTAutograd
        # saves inside its fake mode: a tensor constant's bytes must be read as real ones
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():
            self.blob = pickle.dumps(self.fn)
        self.digest = hashlib.sha256(self.blob).hexdigest()
        self.fn = None

    def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
        if self.fn is None and self.blob is not None:  # loaded from a cache
            if self.digest != hashlib.sha256(self.blob).hexdigest():
                removed = _remove_entries_holding(self.digest)
                warnings.warn(
                    f"torchneuron: corrupt compile cache entry in AOTAutograd's cache {directory()} "
                    f"(checksum mismatch of a stored {self.kind} graph); it is discarded ({removed} "
                    "file removed) and the graph compiled again", RuntimeWarning, stacklevel=2)
                # AOTAutograd treats an error while rebuilding an entry as a cache bypass and compiles
                raise CorruptGraphEntry(f"stored {self.kind} graph fails its checksum")
            t0 = time.perf_counter()
            self.fn = pickle.loads(self.blob)
            self._ran = True  # nothing new to save
            metrics.loaded_graph(self.record, self.kind, time.perf_counter() - t0)

    def set_triton_bundle(self, triton_bundle: Any) -> None:
        return None


class CorruptGraphEntry(RuntimeError):
    """A stored compiled graph whose bytes do not match their checksum."""


def _remove_entries_holding(digest: str | None) -> int:
    """Remove the AOTAutograd cache files that hold a stored graph with this checksum (the
    corrupt entry being loaded: AOTAutograd does not tell its path); the number removed."""
    if not digest or not directory().is_dir():
        return 0
    needle, n = digest.encode(), 0
    for path in directory().glob("*/*"):
        with contextlib.suppress(OSError):
            if path.is_file() and needle in path.read_bytes():
                path.unlink()
                n += 1
    return n


def serializable_compiler(kind: str, compile_fn):
    """``compile_fn(gm, example_inputs)`` as an AOTAutograd compiler whose results the bundled
    cache can store."""
    from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler

    def compiler(gm: torch.fx.GraphModule, example_inputs):
        fn = compile_fn(gm, example_inputs)
        record = metrics.graph_record(getattr(fn, "torchneuron_graph_id", None))
        return NeuronOutputCode(fn, kind, copy.deepcopy(record))

    return SerializableAOTDispatchCompiler(OutputCode, compiler)
