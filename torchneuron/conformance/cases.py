"""Which (op, variant, dtype) cases the conformance suite runs, and the CI shard.

An op is identified by its OpInfo ``name`` plus ``.variant_test_name`` when it has one
(``"div.floor_rounding"``). Enumeration only reads OpInfo metadata; samples are generated when
a case runs, so collecting all cases stays fast.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}
VARIANTS = ("forward", "out", "inplace", "noncontig", "grad")

# Ops whose values are random or uninitialised: compare shape/dtype/device (and, for random
# ones, reproducibility under torch.neuron.manual_seed), never values.
_RANDOM = re.compile(
    r"(^|[._])(rand|randn|randint|normal|bernoulli|multinomial|uniform|exponential|cauchy|"
    r"geometric|log_normal|poisson)(_like|\.|$)|dropout|rrelu"
)
_UNINITIALISED = re.compile(r"(^|\.)(new_)?empty(_like|_strided|_permuted)?$")
_NOT_RANDOM = frozenset(
    {
        "native_dropout_backward",  # the mask is an input
        "nn.functional.feature_alpha_dropout.without_train",  # identity outside training
        "signal.windows.exponential",  # a window shape, not a distribution
    }
)

# Hot ops always in the CI shard (the list).
HOT_OPS = (
    "add", "mul", "matmul", "mm", "bmm", "addmm", "softmax", "log_softmax",
    "nn.functional.layer_norm", "nn.functional.embedding", "nn.functional.cross_entropy",
    "nn.functional.conv2d", "nn.functional.scaled_dot_product_attention", "sum", "mean", "cat",
    "index_select", "gather", "scatter", "where", "topk", "sort",
)
SHARD_EVERY = 12  # plus every SHARD_EVERY-th op by sorted name


@dataclass(frozen=True)
class Case:
    op: str
    variant: str
    dtype: str

    @property
    def id(self) -> str:
        return f"{self.op}-{self.variant}-{self.dtype}"


def op_key(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


@cache
def ops() -> dict[str, object]:
    """OpInfo entries by key (imports the OpInfo database: a few seconds)."""
    from torch.testing._internal.common_methods_invocations import op_db

    return {op_key(op): op for op in op_db}


def kind(key: str) -> str:
    """``"uninitialised"``, ``"random"`` or ``"deterministic"``."""
    if _UNINITIALISED.search(key):
        return "uninitialised"
    if _RANDOM.search(key) and key not in _NOT_RANDOM:
        return "random"
    return "deterministic"


def _variants(op, key: str) -> list[str]:
    out = ["forward"]
    if op.supports_out:
        out.append("out")
    if op.inplace_variant is not None:
        out.append("inplace")
    if kind(key) == "deterministic":
        out.append("noncontig")
        if op.supports_autograd:
            out.append("grad")
    return out


def cases_for(key: str) -> list[Case]:
    op = ops()[key]
    supported = op.supported_dtypes("cpu")
    result = []
    for variant in _variants(op, key):
        if variant == "grad":
            if torch.float32 in op.supported_backward_dtypes("cpu") and torch.float32 in supported:
                result.append(Case(key, variant, "float32"))
            continue
        result.extend(Case(key, variant, name) for name, dt in DTYPES.items() if dt in supported)
    return result


def shard_ops() -> list[str]:
    """The CI shard: every SHARD_EVERY-th op by sorted key plus the hot ops (deterministic)."""
    keys = sorted(ops())
    chosen = set(keys[::SHARD_EVERY]) | {k for k in HOT_OPS if k in ops()}
    return sorted(chosen)


def all_cases(full: bool) -> list[Case]:
    keys = sorted(ops()) if full else shard_ops()
    return [c for k in keys for c in cases_for(k)]
