"""Short random sequences of OpInfo samples, recorded into one window and fused, give the
results of eager mode (hypothesis draws the ops, the samples and what is done with each result:
kept, fed into an elementwise op, viewed, or written in place)."""

from __future__ import annotations

import functools
import os

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchneuron
from torchneuron.conformance.runner import compare, copy_exact, samples, tolerance

# float32 OpInfo entries spanning the op families of a model: elementwise, reductions,
# normalisation, matrix products, shape and view ops, indexing, in-place variants
OPS = (
    "add", "sub", "mul", "div", "abs", "exp", "log1p", "sin", "tanh", "sigmoid", "rsqrt", "pow",
    "maximum", "clamp", "where", "lerp", "addcmul", "addcdiv", "sum", "mean", "amax", "var",
    "cumsum", "softmax", "log_softmax", "nn.functional.gelu", "nn.functional.silu",
    "nn.functional.layer_norm", "matmul", "mm", "bmm", "addmm", "cat", "stack", "transpose",
    "permute", "reshape", "flatten", "narrow", "select", "expand", "tril", "masked_fill",
    "index_select", "gather", "flip", "roll", "t", "unsqueeze",
)
FOLLOW_UPS = ("keep", "neg", "mul2", "view", "transpose", "add_")


@functools.cache
def _db():
    from torch.testing._internal.common_methods_invocations import op_db

    by_name = {}
    for op in op_db:
        if op.variant_test_name == "" and op.name in OPS and op.name not in by_name:
            by_name[op.name] = op
    return by_name


@functools.cache
def _samples(name: str):
    return samples(_db()[name], torch.float32, False, 4)


def _follow(out, how: str):
    if not isinstance(out, torch.Tensor) or not out.is_floating_point() or how == "keep":
        return out
    if how == "neg":
        return -out
    if how == "mul2":
        return out * 2
    if how == "view":
        return out.reshape(-1)
    if how == "transpose":
        return out.transpose(0, -1) if out.dim() >= 2 else out
    # in place: on the result itself, or on a copy when the result is a view (an expanded view
    # cannot be written)
    return out.add_(1) if out._base is None else out.clone().add_(1)


def _program(steps, device):
    outs = []
    for name, k, how in steps:
        op = _db()[name]
        sample = _samples(name)[k % len(_samples(name))]
        inp, args, kwargs = copy_exact((sample.input, sample.args, sample.kwargs), device)
        outs.append(_follow(op(inp, *args, **kwargs), how))
    return outs


@settings(max_examples=int(os.environ.get("TORCHNEURON_SEQUENCE_EXAMPLES", "40")), deadline=None,
          derandomize=os.environ.get("TORCHNEURON_SEQUENCE_EXAMPLES") is None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.tuples(st.sampled_from(sorted(OPS)), st.integers(0, 3), st.sampled_from(FOLLOW_UPS)),
                min_size=2, max_size=5))
def test_random_op_sequences_match_eager(steps):
    steps = [s for s in steps if s[0] in _db()]
    eager = _program(steps, "neuron")
    eager_host = [_host(o) for o in eager]
    with torchneuron.execution_mode("adaptive"):
        lazy = _program(steps, "neuron")
        lazy_host = [_host(o) for o in lazy]  # copies to the host: the window runs here
    for (name, _, how), e, lz in zip(steps, eager_host, lazy_host, strict=True):
        compare(lz, e, tolerance(_db()[name], torch.float32), f"{name} then {how}", where=False)


def _host(o):
    if isinstance(o, torch.Tensor):
        return o.detach().cpu()
    if isinstance(o, (list, tuple)):
        return type(o)(_host(x) for x in o)
    return o
