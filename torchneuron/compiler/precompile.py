"""Compiled models that start warm in a new process: the neuron backend under Dynamo's caching
precompile (``TORCHNEURON_PRECOMPILE=1``, opt-in).

Without it, a new process finds every executable in torchneuron's disk cache (nothing is compiled
again) but still pays Dynamo's bytecode analysis, AOTAutograd's joint tracing and partitioning,
and torchneuron's own passes: most of a warm first step. PyTorch 2.14's *caching precompile*
(``torch._dynamo.config.caching_precompile``) stores all of that: Dynamo's transformed bytecode
and guards per function, and the backend's compiled forward/backward graphs (AOTAutograd's
bundled cache, which the backend uses by default: ``graph_cache.py``, whose
:class:`~torchneuron.compiler.graph_cache.NeuronOutputCode` is the stored form of a compiled
graph). With caching precompile a new process also skips Dynamo's work on the frame.

With the switch on, :func:`enable` (called when the backend is first looked up, i.e. by
``torch.compile(..., backend="neuron")`` before it wraps the model) turns on caching precompile,
compiles the backward graph together with the forward one (so that one save holds both) and tags
AOTAutograd's cache keys with torchneuron's version, the compiler's version and the target (the
keys ignore the backend otherwise; ``graph_cache.storing`` adds the options and sources per
compilation). After a newly compiled frame first runs, its package is
written to PyTorch's dynamo cache (``<TORCHINDUCTOR_CACHE_DIR>/dynamo``, default
``/tmp/torchinductor_<user>/dynamo``); ``torch.compile`` then loads it in the next process.

PyTorch 2.14 keys a package by the compiled function's qualified name and first line only
(``CompilePackage.source_id_from_fn``): two models whose ``forward`` is the same function (two
``nn.Sequential``, two configurations of one Hugging Face class), or two scripts' ``step``
functions on the same line, would share an entry, and Dynamo cannot recompile a frame after a
package load (a guard failure then ends in ``AssertionError: Name '__builtins_dict___0' already
exists in scope``). :func:`enable` therefore adds the function's file and, for a module's
``forward``, the module's structure (its ``repr``, class and parameter/buffer shapes, dtypes and
devices) to that key, and starts Dynamo's counter of generated global names at a random offset
in each process, so that a frame recompiled after a load (a new input shape) does not reuse a
name the loaded package already installed, which is what that error is. See docs/compile.md for
what remains; ``torchneuron cache clear --precompile`` removes the packages.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import secrets
import shutil
import time
import warnings
from pathlib import Path

import torch

from . import metrics
from .graph_cache import NeuronOutputCode

_TRUE = ("1", "true", "True", "yes", "on")


def requested() -> bool:
    """``TORCHNEURON_PRECOMPILE=1``."""
    return os.environ.get("TORCHNEURON_PRECOMPILE", "0") in _TRUE


def cache_tag() -> str:
    """What AOTAutograd's cache keys must include for torchneuron's compiled graphs to be reused:
    torchneuron's version, the compiler's version and the target."""
    import torchneuron

    from ..runtime import state
    from .executable import compiler_version

    return f"torchneuron-{torchneuron.__version__}/{compiler_version()}/{state.target().name}"


_enabled = False


def enable() -> None:
    """Turn on Dynamo's caching precompile for the neuron backend (idempotent)."""
    global _enabled
    if _enabled:
        return
    import torch._dynamo.config as dynamo_config
    import torch._functorch.config as functorch_config

    _key_packages_by_model()
    _unique_global_names()
    NeuronOutputCode.on_first_run = _after_first_run
    dynamo_config.caching_precompile = True
    functorch_config.bundled_autograd_cache = True
    functorch_config.force_non_lazy_backward_lowering = True  # one save holds forward and backward
    tag = cache_tag()
    current = torch.compiler.config.cache_key_tag
    if tag not in current:
        torch.compiler.config.cache_key_tag = f"{current}|{tag}" if current else tag
    _enabled = True


def module_fingerprint(module: torch.nn.Module) -> str:
    """What tells two models with the same ``forward`` apart: class, structure and the shapes,
    dtypes and devices of their parameters and buffers."""
    h = hashlib.sha256()
    h.update(f"{type(module).__module__}.{type(module).__qualname__}\n{module!r}\n".encode())
    for name, t in (*module.named_parameters(), *module.named_buffers()):
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}:{t.device}\n".encode())
    return h.hexdigest()


def _key_packages_by_model() -> None:
    """Make Dynamo's package key name the file and, for a module's ``forward``, the model."""
    from torch._dynamo.eval_frame import innermost_fn
    from torch._dynamo.package import CompilePackage

    original = CompilePackage.source_id_from_fn
    if getattr(original, "_torchneuron", False):
        return

    def source_id_from_fn(fn) -> str:
        key = original(fn)
        inner = innermost_fn(fn)
        code = getattr(inner, "__code__", None)
        extra = [getattr(code, "co_filename", "")]
        owner = getattr(inner, "__self__", None)
        if isinstance(owner, torch.nn.Module):
            extra.append(module_fingerprint(owner))
        return hashlib.sha256("\n".join([key, *extra]).encode()).hexdigest()

    source_id_from_fn._torchneuron = True  # type: ignore[attr-defined]
    CompilePackage.source_id_from_fn = staticmethod(source_id_from_fn)  # type: ignore[method-assign]


def _unique_global_names() -> None:
    """Dynamo names the globals it installs in a module ``<prefix>_<n>`` from a process-wide
    counter starting at 0; a loaded package installs the names of the process that saved it,
    so a frame compiled after the load gets ``__builtins_dict___0`` again and Dynamo stops with
    "already exists in scope". Counting from a random 40-bit offset keeps the names of different
    processes apart."""
    from torch._dynamo import bytecode_transformation

    bytecode_transformation._unique_id_counter = itertools.count(secrets.randbits(40))


def enabled() -> bool:
    return _enabled


def dynamo_cache_dir() -> Path:
    """Where PyTorch keeps the packages (``<TORCHINDUCTOR_CACHE_DIR>/dynamo``)."""
    from torch._dynamo.package import DynamoCache

    return Path(DynamoCache.path_prefix())


def clear() -> int:
    """Remove every stored package; the number removed."""
    d = dynamo_cache_dir()
    n = sum(1 for _ in d.iterdir()) if d.is_dir() else 0
    shutil.rmtree(d, ignore_errors=True)
    return n


def _after_first_run(code: NeuronOutputCode) -> None:
    """A newly compiled graph ran: its frame's package is complete (the forward runs first)."""
    if code.kind != "backward":
        _save()


def _save() -> None:
    """Write the packages of the frames compiled so far."""
    from torch._dynamo.precompile_context import PrecompileContext

    t0 = time.perf_counter()
    try:
        PrecompileContext.save_to_dynamo_cache()
    except Exception as err:  # noqa: BLE001 - storing is an optimisation: the step must go on
        warnings.warn(f"torchneuron: the compiled frames could not be stored for the next process "
                      f"(TORCHNEURON_PRECOMPILE): {type(err).__name__}: {err}", RuntimeWarning, stacklevel=3)
    metrics.count("precompile_save_seconds", time.perf_counter() - t0)
