"""``torch.autocast("neuron", dtype=torch.bfloat16 | torch.float16)``.

PyTorch ships autocast rules in C++ for its built-in devices only, so the ``AutocastPrivateUse1``
key gets them here, with the same three policies as CUDA's autocast:

* lower precision — matmuls, convolutions, attention: floating inputs cast to the autocast dtype;
* float32 — ops that lose too much in 16 bits (losses, norms, exp/log, softmax …): run in fp32;
* promote — ops mixing inputs: cast to the widest floating dtype among them.

Every other op falls through to the next dispatch key unchanged.
"""

from __future__ import annotations

import torch
from torch._C import DispatchKey, DispatchKeySet

_KEY = "AutocastPrivateUse1"
_EXCLUDE = DispatchKeySet(DispatchKey.AutocastPrivateUse1)

LOWER_PRECISION = [
    "_convolution", "_convolution.deprecated", "conv1d", "conv2d", "conv3d", "conv1d.padding",
    "conv2d.padding", "conv3d.padding", "conv_tbc", "conv_transpose1d", "conv_transpose2d.input",
    "conv_transpose3d.input", "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum",
    "mm", "mv", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
    "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell", "scaled_dot_product_attention",
    "_scaled_dot_product_attention_math",
]
FP32 = [
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar",
    "softplus", "layer_norm", "native_layer_norm", "group_norm", "frobenius_norm.dim",
    "nuclear_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss",
    "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss",
    "mse_loss", "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss",
    "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "dist",
    "pdist", "cdist", "renorm", "logsumexp", "rms_norm", "cross_entropy_loss",
]
FP32_SET_OPT_DTYPE = [
    "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum",
    "linalg_vector_norm", "sum", "sum.dim_IntList",
]
PROMOTE = [
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sampler", "index_put",
    "tensordot", "scatter_add", "vdot", "stack", "cat",
]

_libs: list[torch.library.Library] = []


def _cast(x, dtype: torch.dtype):
    if isinstance(x, torch.Tensor):
        if x.is_floating_point() and x.dtype != dtype and x.device.type == "neuron":
            return x.to(dtype)
        return x
    if type(x) in (list, tuple):
        return type(x)(_cast(v, dtype) for v in x)
    return x


def _widest(args) -> torch.dtype | None:
    widest = None
    for a in args:
        items = a if type(a) in (list, tuple) else (a,)
        for t in items:
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.device.type == "neuron":
                widest = t.dtype if widest is None else torch.promote_types(widest, t.dtype)
    return widest


def _lower(op):
    def kernel(*args, **kwargs):
        dt = torch.get_autocast_dtype("neuron")
        args, kwargs = _cast(args, dt), {k: _cast(v, dt) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*args, **kwargs)

    return kernel


def _fp32(op):
    def kernel(*args, **kwargs):
        args, kwargs = _cast(args, torch.float32), {k: _cast(v, torch.float32) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*args, **kwargs)

    return kernel


def _fp32_set_opt_dtype(op):
    has_dtype = any(a.name == "dtype" for a in op._schema.arguments)

    def kernel(*args, **kwargs):
        first = args[0] if args else None
        if (
            has_dtype
            and kwargs.get("dtype") is None
            and isinstance(first, torch.Tensor)
            and first.dtype in (torch.float16, torch.bfloat16)
        ):
            kwargs = dict(kwargs, dtype=torch.float32)
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*args, **kwargs)

    return kernel


def _promote(op):
    def kernel(*args, **kwargs):
        dt = _widest(list(args) + list(kwargs.values()))
        if dt is not None:
            args, kwargs = _cast(args, dt), {k: _cast(v, dt) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*args, **kwargs)

    return kernel


def _resolve(name: str):
    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return None
    return getattr(packet, overload or "default", None)


def install() -> None:
    if _libs:
        return
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, dispatch_key=_KEY)
    lib = torch.library.Library("aten", "IMPL")
    for names, wrap in ((LOWER_PRECISION, _lower), (FP32, _fp32), (FP32_SET_OPT_DTYPE, _fp32_set_opt_dtype), (PROMOTE, _promote)):
        for name in names:
            op = _resolve(name)
            if op is None:
                continue
            lib.impl(name, wrap(op), _KEY)
    _libs.extend([fallthrough, lib])
