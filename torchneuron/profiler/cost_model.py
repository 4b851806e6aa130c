"""Roofline cost model: how long each device operation would take on the configured target.

Every hardware figure comes from :mod:`torchneuron.runtime.target` (``state.target()``);
every *modelling* assumption is in :data:`ASSUMPTIONS` below, documented in one place
(also reproduced in ``docs/profiling.md``). For one operation::

    compute_s = work / engine_rate          (Tensor Engine: flops / (peak(dtype) * tile_util))
    memory_s  = bytes read + written / HBM bandwidth
    time_s    = max(compute_s, memory_s) + fixed_s
    bound     = "compute" if compute_s >= memory_s else "memory"

Categories and engines:

==============  ===============  ==================================================
category        engine           work
==============  ===============  ==================================================
matmul          tensor           2*M*K*N (mm, addmm, bmm, baddbmm, mv, dot, ...)
conv            tensor           2 * out numel * Cin/groups * prod(kernel)
attention       tensor           QK^T and PV matmuls (4*B*H*L*S*E); backward 2.5x
reduction       vector           input elements (sum, mean, softmax, norms, losses)
elementwise     vector|scalar    output elements (activations/transcendentals: scalar)
data_movement   dma|gpsimd       bytes only (cat, clone, index, gather/scatter: gpsimd)
random          gpsimd           output elements
transfer        dma              host<->device link (h2d, d2h) or HBM (d2d)
collective      link             ring algorithm over NeuronLink (in node) or EFA
cpu_fallback    host             inputs to host + outputs back over the host link,
                                 plus the measured host time
allocation      none             nothing: empty/resize/views do no device work
==============  ===============  ==================================================
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from ..runtime.target import Target

#: Every modelling assumption of the cost model (hardware figures live in target.py).
ASSUMPTIONS: dict[str, tuple[object, str]] = {
    "tensor_tile_k": (128, "matmul contraction is tiled to the PE array rows (partitions): K padded to a multiple"),
    "tensor_tile_m": (128, "stationary operand tiled to the PE array columns: M padded to a multiple"),
    "tensor_min_moving": (64, "one matmul instruction costs at least 64 moving columns (max(N, 64) cycles)"),
    "tensor_efficiency": (1.0, "fraction of the dtype's dense peak reached by well-shaped matmuls"),
    "fp32_matmul_family": ("fp32", "float32 matmuls run at the published FP32 peak (operands not cast)"),
    "attention_backward_factor": (2.5, "SDPA backward = 5 matmuls vs 2 forward"),
    "attention_causal": (False, "masking is not exploited: causal attention is charged as dense"),
    "lanes": (128, "Vector/Scalar/GpSimd engines process one element per partition per cycle"),
    "vector_fixed_cycles": ("target.nki_costs.vector_fixed_cycles", "per Vector Engine instruction"),
    "scalar_min_cycles": ("target.nki_costs.scalar_min_cycles", "per Scalar Engine instruction"),
    "gpsimd_fixed_cycles": ("target.nki_costs.gpsimd_fixed_cycles", "per GpSimd instruction"),
    "free_size_per_instruction": (2048, "elements per partition handled by one vector/scalar instruction"),
    "engines_per_logical_core": ("target.lnc", "a logical core has LNC physical cores' engines, working in parallel"),
    "memory_traffic": ("inputs + outputs", "every input is read once and every output written once from/to HBM; no SBUF reuse across ops"),
    "fixed_cost_per_op": ("target.dma_fixed_cost_s", "each device op pays one DMA fixed cost (its transfers overlap on the 16 DMA queues)"),
    "host_link": ("target.host_link_bandwidth_per_chip / logical cores", "host<->device copies and CPU fallbacks cross PCIe"),
    "collective_algorithm": ("ring", "all-reduce moves 2(n-1)/n of the data per rank; gather/scatter (n-1)/n"),
    "collective_link": ("NeuronLink within a node, EFA across nodes", "per logical core share of the chip's link"),
    "overlap": ("none between ops", "ops run back to back on the one in-order queue; no inter-op overlap"),
}


def A(key: str):
    return ASSUMPTIONS[key][0]


@dataclass(frozen=True, slots=True)
class OpCost:
    category: str
    engine: str
    flops: int
    bytes: int
    compute_s: float
    memory_s: float
    fixed_s: float
    time_s: float
    bound: str  # "compute" | "memory" | "fixed" | "none" | "host"


# ---- classification ----------------------------------------------------------------------
_MATMUL = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "mv", "addmv", "dot", "vdot",
           "_addmm_activation", "linear", "_scaled_mm", "addr", "outer", "ger"}
_CONV = {"convolution", "convolution_overrideable", "_convolution", "conv2d", "conv1d", "conv3d",
         "convolution_backward", "convolution_backward_overrideable", "conv_transpose2d"}
_REDUCTION = re.compile(
    r"^(sum|mean|amax|amin|max|min|prod|var|std|var_mean|std_mean|norm|linalg_vector_norm|"
    r"_softmax|softmax|_log_softmax|log_softmax|_softmax_backward_data|_log_softmax_backward_data|"
    r"native_layer_norm|native_layer_norm_backward|native_group_norm|native_group_norm_backward|"
    r"native_batch_norm|native_batch_norm_backward|_native_batch_norm_legit.*|batch_norm.*|"
    r"_fused_rms_norm.*|logsumexp|argmax|argmin|cumsum|cumprod|any|all|count_nonzero|"
    r"nll_loss.*|mse_loss.*|cross_entropy.*|binary_cross_entropy.*|topk|sort|median|mode|"
    r"_fused_adam.*|_fused_adamw.*|_foreach_norm)(_|$)"
)
_SCALAR = re.compile(
    r"^(relu|gelu|silu|sigmoid|tanh|exp|exp2|expm1|log|log2|log10|log1p|sqrt|rsqrt|erf|erfc|"
    r"erfinv|softplus|mish|hardswish|hardsigmoid|elu|selu|celu|leaky_relu|sin|cos|tan|pow|"
    r"reciprocal|logit|gelu_backward|silu_backward|sigmoid_backward|tanh_backward|"
    r"threshold_backward|softplus_backward|elu_backward|glu|prelu)(_|$)"
)
_MOVEMENT = re.compile(
    r"^(copy|clone|cat|stack|contiguous|_to_copy|repeat|expand_copy|permute_copy|"
    r"transpose_copy|_unsafe_view|flip|roll|constant_pad_nd|pad|narrow_copy|split_copy|"
    r"_reshape_copy|fill|zero|zeros|ones|full|zeros_like|ones_like|full_like|tril|triu|"
    r"masked_fill|where)(_|$)"
)
_GATHER = re.compile(
    r"^(index|index_select|gather|scatter|scatter_add|scatter_reduce|index_put|index_add|"
    r"index_copy|embedding|embedding_dense_backward|embedding_backward|take|masked_select|"
    r"masked_scatter|nonzero|_index_put_impl|put|unique.*|bincount|histc|searchsorted|"
    r"arange|linspace|iota|one_hot)(_|$)"
)
_RANDOM = re.compile(r"^(normal|uniform|bernoulli|random|randn|rand|randint|randperm|"
                     r"multinomial|exponential|geometric|cauchy|log_normal|native_dropout)(_|$)")
_ALLOC = re.compile(r"^(empty|empty_strided|empty_like|new_empty|new_empty_strided|resize|"
                    r"resize_as|set|as_strided|view|_reshape_alias|alias|detach|lift_fresh|"
                    r"_local_scalar_dense|item|is_nonzero|_has_compatible_shallow_copy_type)(_|$)")
_COLLECTIVE = re.compile(r"(all_reduce|allreduce|all_gather|allgather|reduce_scatter|"
                         r"broadcast|all_to_all|alltoall|send|recv|barrier)")


def _base(name: str) -> str:
    """'aten::addmm.out' -> 'addmm'; 'c10d::allreduce_' -> 'allreduce_'."""
    n = name.split("::", 1)[-1]
    return n.split(".", 1)[0]


def classify(kind: str, name: str) -> tuple[str, str]:
    """(category, engine) of one device op."""
    if kind.startswith("copy_"):
        return "transfer", "dma"
    if kind == "fallback":
        return "cpu_fallback", "host"
    if kind == "compile":
        return "compile", "host"
    ns = name.split("::", 1)[0] if "::" in name else ""
    b = _base(name)
    if ns in ("c10d", "_c10d_functional", "c10d_functional") or (ns != "aten" and _COLLECTIVE.search(b)):
        return "collective", "link"
    if "scaled_dot_product" in b or b.startswith("_flash_attention") or b.startswith("_efficient_attention"):
        return "attention", "tensor"
    bs = b.rstrip("_")
    if bs in _MATMUL:
        return "matmul", "tensor"
    if bs in _CONV or b.startswith("convolution") or b.startswith("cudnn_convolution"):
        return "conv", "tensor"
    if _ALLOC.match(b):
        return "allocation", "none"
    if _REDUCTION.match(b):
        return "reduction", "vector"
    if _RANDOM.match(b):
        return "random", "gpsimd"
    if _GATHER.match(b):
        return "data_movement", "gpsimd"
    if _MOVEMENT.match(b):
        return "data_movement", "dma"
    if _SCALAR.match(b):
        return "elementwise", "scalar"
    return "elementwise", "vector"


def dtype_family(dtype: torch.dtype) -> str:
    if dtype in (torch.bfloat16,):
        return "bf16"
    if dtype == torch.float16:
        return "fp16"
    if "float8" in str(dtype):
        return "fp8"
    if dtype in (torch.float32, torch.float64, torch.complex64, torch.complex128):
        return "fp32"
    return "bf16"  # integer matmuls: charge the bf16 rate


# ---- flops --------------------------------------------------------------------------------
def _numel(shape) -> int:
    return math.prod(shape) if shape else 1


def matmul_dims(name: str, ins) -> tuple[int, int, int, int] | None:
    """(batch, M, K, N) of a matmul-family op from its input shapes, or None."""
    b = _base(name).rstrip("_")
    offset = 1 if b in ("addmm", "baddbmm", "addbmm", "addmv", "_addmm_activation", "addr") else 0
    if len(ins) < offset + 2:
        return None
    a, w = ins[offset].shape, ins[offset + 1].shape
    if b in ("dot", "vdot"):
        return 1, 1, a[0] if a else 1, 1
    if b in ("addr", "outer", "ger"):
        return 1, a[0], 1, w[0]
    if len(w) == 1:  # mv
        return _numel(a[:-2]), a[-2] if len(a) >= 2 else 1, a[-1], 1
    if b == "linear":  # weight is [N, K]
        return _numel(a[:-1]) // max(1, a[-2] if len(a) >= 2 else 1), (a[-2] if len(a) >= 2 else 1), a[-1], w[0]
    batch = _numel(a[:-2]) if len(a) > 2 else 1
    m = a[-2] if len(a) >= 2 else 1
    k = a[-1]
    n = w[-1]
    if b == "addbmm":  # sums the batch into one [M, N]
        return batch, m, k, n
    return batch, m, k, n


def attention_dims(name: str, ins) -> tuple[int, int, int, int, int] | None:
    """(B*H, L, S, E, Ev) of an SDPA op."""
    ts = [t for t in ins if len(t.shape) >= 3]
    start = 1 if "backward" in name else 0
    if len(ts) < start + 3:
        return None
    q, k, v = ts[start].shape, ts[start + 1].shape, ts[start + 2].shape
    return _numel(q[:-2]), q[-2], k[-2], q[-1], v[-1]


def flops_of(kind: str, name: str, category: str, inputs, outputs, raw_inputs=()) -> int:
    ins, outs = inputs, outputs
    if category == "matmul":
        d = matmul_dims(name, ins)
        if d is None:
            return 0
        batch, m, k, n = d
        return 2 * batch * m * k * n
    if category == "conv":
        if "backward" in name:
            if len(ins) < 3:
                return 0
            grad_out, weight = ins[0], ins[2]
            mask = next((v for v in raw_inputs if isinstance(v, tuple) and v and all(isinstance(x, bool) for x in v)), (True, True, True))
            n_mm = int(bool(mask[0])) + int(bool(mask[1]))
            return 2 * n_mm * grad_out.numel * _numel(weight.shape[1:])
        if len(ins) < 2 or not outs:
            return 0
        return 2 * outs[0].numel * _numel(ins[1].shape[1:])
    if category == "attention":
        d = attention_dims(name, ins)
        if d is None:
            return 0
        bh, length, s, e, ev = d
        f = 2 * bh * length * s * e + 2 * bh * length * s * ev
        if "backward" in name:
            f = int(f * A("attention_backward_factor"))
        return f
    if category == "reduction":
        return sum(t.numel for t in ins[:1]) or sum(t.numel for t in outs)
    if category in ("elementwise", "random"):
        return sum(t.numel for t in outs[:1]) or sum(t.numel for t in ins[:1])
    return 0


# ---- time ---------------------------------------------------------------------------------
def _tile_util(batch: int, m: int, k: int, n: int) -> float:
    """Fraction of the PE array doing useful work once M, K are padded to tiles and each
    instruction costs at least ``tensor_min_moving`` columns."""
    tk, tm, nmin = A("tensor_tile_k"), A("tensor_tile_m"), A("tensor_min_moving")
    if m * k * n == 0:
        return 1.0
    kp = math.ceil(k / tk) * tk
    mp = math.ceil(m / tm) * tm
    np_ = max(n, nmin)
    return (m * k * n) / (mp * kp * np_)


def _dtype_of(ins, outs) -> torch.dtype:
    for t in list(ins) + list(outs):
        if t.dtype.is_floating_point:
            return t.dtype
    return (ins or outs)[0].dtype if (ins or outs) else torch.float32


def engine_rate(target: Target, engine: str) -> float:
    """Elements per second one logical core's engine of that kind processes."""
    clocks = target.clocks
    hz = {"vector": clocks.vector_hz, "scalar": clocks.scalar_hz, "gpsimd": clocks.gpsimd_hz}[engine]
    return A("lanes") * hz * target.lnc


def _engine_fixed_cycles(target: Target, engine: str) -> float:
    c = target.nki_costs
    return {"vector": c.vector_fixed_cycles, "scalar": 0, "gpsimd": c.gpsimd_fixed_cycles}[engine]


def host_link_bandwidth(target: Target) -> float:
    return target.host_link_bandwidth_per_chip / target.logical_cores_per_chip


def collective_time(target: Target, name: str, nbytes: int, world_size: int) -> float:
    """Ring-algorithm time of one collective of ``nbytes`` (per rank) over ``world_size`` ranks."""
    if world_size <= 1:
        return 0.0
    per_node = target.chips_per_node * target.logical_cores_per_chip
    if world_size <= per_node:
        bw = target.chip_to_chip_bandwidth / target.logical_cores_per_chip
    else:
        bw = target.efa_bandwidth_per_node / per_node
    b = _base(name)
    frac = (world_size - 1) / world_size
    factor = 2 * frac if ("reduce" in b and "scatter" not in b) else frac
    if "all_gather" in b or "allgather" in b:
        nbytes = nbytes * world_size
    return factor * nbytes / bw


def _world_size() -> int:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_world_size()
    except Exception:  # noqa: BLE001
        pass
    return 1


def cost(kind: str, name: str, inputs, outputs, target: Target, raw_inputs=(), host_s: float = 0.0) -> OpCost:
    """Cost of one op from its kind, ATen name and input/output TensorMeta lists."""
    category, engine = classify(kind, name)
    ins = [t for t in inputs if hasattr(t, "nbytes")]
    outs = [t for t in outputs if hasattr(t, "nbytes")]
    nbytes = sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs)
    flops = flops_of(kind, name, category, ins, outs, raw_inputs)
    hbm = target.hbm_bandwidth
    fixed = target.dma_fixed_cost_s
    compute = 0.0
    memory = nbytes / hbm
    if category == "allocation":
        return OpCost(category, engine, 0, 0, 0.0, 0.0, 0.0, 0.0, "none")
    if category == "transfer":
        moved = sum(t.nbytes for t in outs) or sum(t.nbytes for t in ins)
        if kind == "copy_d2d":
            memory = 2 * moved / hbm
        else:
            memory = moved / host_link_bandwidth(target)
        return OpCost(category, engine, 0, moved, 0.0, memory, fixed, memory + fixed, "memory")
    if category == "cpu_fallback":
        memory = nbytes / host_link_bandwidth(target)
        return OpCost(category, engine, flops, nbytes, host_s, memory, fixed, host_s + memory + fixed, "host")
    if category == "collective":
        payload = sum(t.nbytes for t in ins)
        t = collective_time(target, name, payload, _world_size())
        return OpCost(category, engine, 0, payload, 0.0, t, fixed, t + fixed, "memory")
    if engine == "tensor":
        dt = _dtype_of(ins, outs)
        fam = dtype_family(dt)
        peak = target.peak_flops(fam) * A("tensor_efficiency")
        util = 1.0
        if category == "matmul":
            d = matmul_dims(name, ins)
            if d:
                util = _tile_util(*d)
        elif category == "attention":
            d = attention_dims(name, ins)
            if d:
                bh, length, s, e, ev = d
                util = 0.5 * (_tile_util(bh, length, e, s) + _tile_util(bh, length, s, ev))
        compute = flops / (peak * max(util, 1e-6))
    elif engine in ("vector", "scalar", "gpsimd"):
        elems = sum(t.numel for t in ins) or sum(t.numel for t in outs)
        if category == "data_movement":
            elems = sum(t.numel for t in outs)
        rate = engine_rate(target, engine)
        per_instr = A("lanes") * A("free_size_per_instruction")
        n_instr = max(1, math.ceil(elems / per_instr))
        hz = {"vector": target.clocks.vector_hz, "scalar": target.clocks.scalar_hz, "gpsimd": target.clocks.gpsimd_hz}[engine]
        cycles_fixed = _engine_fixed_cycles(target, engine) * n_instr / target.lnc
        compute = elems / rate + cycles_fixed / hz
        if engine == "scalar":
            compute = max(compute, target.nki_costs.scalar_min_cycles / hz)
    # engine "dma": pure data movement, compute stays 0
    t = max(compute, memory)
    bound = "compute" if compute >= memory and compute > 0 else "memory"
    return OpCost(category, engine, flops, nbytes, compute, memory, fixed, t + fixed, bound)


def op_cost(event, target: Target) -> OpCost:
    """Cost of one recorded :class:`~torchneuron.profiler.recorder.DeviceEvent`."""
    return cost(event.kind, event.name, event.input_tensors, event.output_tensors, target,
                raw_inputs=event.inputs, host_s=event.duration_ns * 1e-9 if event.kind == "fallback" else 0.0)


def ridge_point(target: Target, dtype_family_: str = "bf16") -> float:
    """Arithmetic intensity (flop/byte) above which a Tensor Engine op is compute bound."""
    return target.peak_flops(dtype_family_) * A("tensor_efficiency") / target.hbm_bandwidth


__all__ = ["ASSUMPTIONS", "OpCost", "classify", "cost", "op_cost", "ridge_point", "dtype_family"]
