"""AOTAutograd's cache key for the graphs torchneuron compiles, without Inductor's code generators.

AOTAutograd keys a stored graph by :class:`AOTAutogradCacheDetails`: what AOTAutograd itself
depends on (the graph, the inputs' metadata, grad and autocast state, its configuration), plus
everything PyTorch's *Inductor* compiler depends on, inherited from Inductor's
``FxGraphHashDetails``. Three of those Inductor parts cost most of a warm start in a new process
(measured on the 4-layer LM of ``bench/compile.py``: 2.3 s warm first step, about 1 s of it here):

* ``init_backend_registration()`` imports every Inductor code generator (C++, Triton, CUTLASS,
  CuTe DSL ...) to hash the custom codegen passes registered for them;
* ``CacheBase.get_system()`` hashes the Triton compiler's sources and libraries (``triton_key``);
* ``torch_key()`` hashes the sources of Inductor itself; and the user-defined Triton kernel check
  imports Inductor's wrapper code generator even when the graph calls no Triton kernel.

None of them says anything about a graph torchneuron compiles: its programs come from torch-mlir
and IREE, never from Inductor's code generators or Triton. :class:`NeuronCacheDetails` keeps
every part of AOTAutograd's own key and every cheap part of Inductor's (its configuration,
custom FX passes and partitioner, deterministic-algorithm and matmul settings, default dtype),
and replaces those three with the torch version (torch's sources are also hashed into
``graph_cache.key_tag`` through the compiler fingerprint). A graph that does call user-defined
Triton kernels, or takes opaque inputs, is keyed by PyTorch's full details, unchanged.

:func:`keyed_for_neuron` puts the class in place for the duration of one AOTAutograd compilation
of the neuron backend (``graph_cache.storing``); Inductor's own compilations are not affected
(Dynamo compiles one frame at a time, under its ``compile_lock``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch._functorch._aot_autograd.autograd_cache import (
    AOTAutogradCacheDetails,
    BypassAOTAutogradCache,
)
from torch._inductor import codecache, config_comms
from torch._inductor import config as inductor_config
from torch._library.opaque_object import is_opaque_symbolic_type
from torch.fx.experimental.proxy_tensor import _coor_enabled
from torch.utils._ordered_set import OrderedSet

_lock = threading.RLock()  # re-entrant: a compilation nested in ours finds our class in place


def _user_triton_kernel_nodes(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph calls a user-defined Triton kernel (whose sources Inductor's key hashes)."""
    from torch._higher_order_ops.triton_kernel_wrap import (
        triton_kernel_wrapper_functional,
        triton_kernel_wrapper_mutation,
    )

    return any(
        module.graph.find_nodes(op="call_function", target=target)
        for module in gm.modules() if isinstance(module, torch.fx.GraphModule)
        for target in (triton_kernel_wrapper_functional, triton_kernel_wrapper_mutation)
    )


class NeuronCacheDetails(AOTAutogradCacheDetails):
    """AOTAutograd's cache details without Inductor's code-generator, Triton and Inductor-source
    hashes (see the module docstring). Pickled into the key: defined at module level."""

    def get_triton_source_codes_from_gm(self, gm: torch.fx.GraphModule) -> list[str]:
        # the base class imports Inductor's wrapper code generator before looking for kernels
        if _user_triton_kernel_nodes(gm) or any(
                next(self._iter_triton_kernels_from_node(node), None) is not None
                for module in gm.modules() if isinstance(module, torch.fx.GraphModule)
                for node in module.graph.nodes):
            return super().get_triton_source_codes_from_gm(gm)
        return []

    def _init_fx_graph_hash_details(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                                    fx_config: dict) -> None:
        if _user_triton_kernel_nodes(gm) or any(is_opaque_symbolic_type(type(x)) for x in example_inputs):
            super()._init_fx_graph_hash_details(gm, example_inputs, fx_config)
            return
        try:  # the graph must be one Inductor's cache could store, as for the full details
            codecache.FxGraphCache._check_can_cache(gm, example_inputs, fx_config)
        except codecache.BypassFxGraphCache as e:
            raise BypassAOTAutogradCache(str(e)) from e
        self.gm = gm
        self.example_inputs = list(example_inputs)
        self.cache_key_tag = torch.compiler.config.cache_key_tag
        self.nested_inductor_config_patches = codecache._collect_nested_region_inductor_config_patches_for_hash(gm)
        self.fx_kwargs = {
            k: codecache.OrderedSetHolder(sorted(v)) if type(v) in (set, OrderedSet) else v
            for k, v in sorted(fx_config.items()) if k not in self.EXCLUDED_KWARGS
        }
        self.deterministic_algorithms_settings = (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.utils.deterministic.fill_uninitialized_memory,  # type: ignore[attr-defined]
        )
        self.default_dtype = torch.get_default_dtype()
        self.cuda_matmul_settings = (
            torch.backends.cuda.matmul.fp32_precision,
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        )
        self.compile_on_one_rank = _coor_enabled()
        self.torch_version = (torch.__version__, torch.version.git_version)
        self.inductor_config = inductor_config.save_config_portable(ignore_private_configs=False,
                                                                    readonly_values=True)
        self.inductor_config_comms = config_comms.save_config_portable(ignore_private_configs=False,
                                                                       readonly_values=True)
        self.pre_grad_custom_pass = self._get_custom_pass_detail(inductor_config.pre_grad_custom_pass)
        self.post_grad_custom_pre_pass = self._get_custom_pass_detail(inductor_config.post_grad_custom_pre_pass)
        self.post_grad_custom_post_pass = self._get_custom_pass_detail(inductor_config.post_grad_custom_post_pass)
        self.joint_custom_pre_pass = self._get_custom_pass_detail(inductor_config.joint_custom_pre_pass)
        self.joint_custom_post_pass = self._get_custom_pass_detail(inductor_config.joint_custom_post_pass)
        self.precompile_enabled = torch._functorch.config.bundled_autograd_cache
        self._custom_partitioner_fn = self._get_custom_partitioner_fn_detail(inductor_config.custom_partitioner_fn)


@contextlib.contextmanager
def keyed_for_neuron() -> Iterator[None]:
    """Within: AOTAutograd's cache keys graphs with :class:`NeuronCacheDetails`."""
    from torch._functorch._aot_autograd import autograd_cache

    with _lock:
        previous = autograd_cache.AOTAutogradCacheDetails
        autograd_cache.AOTAutogradCacheDetails = NeuronCacheDetails
        try:
            yield
        finally:
            autograd_cache.AOTAutogradCacheDetails = previous
