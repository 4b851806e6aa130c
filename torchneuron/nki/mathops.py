"""The math operators NKI instructions apply, as numpy functions on float32 (or int) arrays.

Each operator has a name (``add``, ``exp``, ...), a numpy implementation and a kind:
``act`` functions are Scalar Engine activation functions, ``alu`` operators are Vector Engine
arithmetic/bitwise/compare operators (these also reduce). ``nki.language`` builds its functions
from this table, and ``nisa`` instructions accept any of them -- or the equivalent numpy ufunc
(``np.add``, ``np.exp``...) -- as ``op=``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


def erf(x: np.ndarray) -> np.ndarray:
    """Error function (Abramowitz & Stegun 7.1.26 refined; |error| < 1.5e-7)."""
    x = np.asarray(x, dtype=np.float64)
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (
        ((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592
    ) * t * np.exp(-a * a)
    return (s * y).astype(np.float32)


def _f(fn: Callable[[np.ndarray], Any]) -> Callable[[np.ndarray], np.ndarray]:
    def g(x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(fn(np.asarray(x, dtype=np.float32)), dtype=np.float32)

    return g


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": _f(np.exp),
    "log": _f(np.log),
    "tanh": _f(np.tanh),
    "sigmoid": _f(_sigmoid),
    "relu": _f(lambda x: np.maximum(x, 0.0)),
    "gelu": _f(_gelu),
    "gelu_apprx_tanh": _f(_gelu_tanh),
    "silu": _f(lambda x: x * _sigmoid(x)),
    "sqrt": _f(np.sqrt),
    "rsqrt": _f(lambda x: 1.0 / np.sqrt(x)),
    "reciprocal": _f(lambda x: 1.0 / x),
    "abs": _f(np.abs),
    "negative": _f(np.negative),
    "sign": _f(np.sign),
    "square": _f(np.square),
    "sin": _f(np.sin),
    "cos": _f(np.cos),
    "tan": _f(np.tan),
    "arctan": _f(np.arctan),
    "erf": _f(erf),
    "softplus": _f(_softplus),
    "mish": _f(lambda x: x * np.tanh(_softplus(x))),
    "floor": _f(np.floor),
    "ceil": _f(np.ceil),
    "trunc": _f(np.trunc),
    "copy": _f(lambda x: x),
    "identity": _f(lambda x: x),
}


def _cmp(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], np.ndarray]:
    return lambda a, b: np.asarray(fn(a, b)).astype(np.float32)


def _int_op(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def g(a: Any, b: Any) -> Any:
        a = np.asarray(a)
        b = np.asarray(b)
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            a = a.astype(np.int64)
            b = b.astype(np.int64)
        return fn(a, b)

    return g


BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "power": np.power,
    "mod": np.mod,
    "fmod": np.fmod,
    "abs_max": lambda a, b: np.maximum(np.abs(a), np.abs(b)),
    "abs_min": lambda a, b: np.minimum(np.abs(a), np.abs(b)),
    "equal": _cmp(np.equal),
    "not_equal": _cmp(np.not_equal),
    "greater": _cmp(np.greater),
    "greater_equal": _cmp(np.greater_equal),
    "less": _cmp(np.less),
    "less_equal": _cmp(np.less_equal),
    "logical_and": _cmp(lambda a, b: np.logical_and(a != 0, b != 0)),
    "logical_or": _cmp(lambda a, b: np.logical_or(a != 0, b != 0)),
    "logical_xor": _cmp(lambda a, b: np.logical_xor(a != 0, b != 0)),
    "bitwise_and": _int_op(np.bitwise_and),
    "bitwise_or": _int_op(np.bitwise_or),
    "bitwise_xor": _int_op(np.bitwise_xor),
    "left_shift": _int_op(np.left_shift),
    "right_shift": _int_op(np.right_shift),
}

# reduction implementations for the operators that reduce
REDUCE: dict[str, Callable[..., Any]] = {
    "add": np.sum,
    "multiply": np.prod,
    "maximum": np.max,
    "minimum": np.min,
    "subtract": lambda x, axis, keepdims=False: np.negative(
        np.sum(x, axis=axis, keepdims=keepdims)
    ),
    "bitwise_and": lambda x, axis, keepdims=False: np.bitwise_and.reduce(
        np.asarray(x).astype(np.int64), axis=axis, keepdims=keepdims
    ),
    "bitwise_or": lambda x, axis, keepdims=False: np.bitwise_or.reduce(
        np.asarray(x).astype(np.int64), axis=axis, keepdims=keepdims
    ),
    "bitwise_xor": lambda x, axis, keepdims=False: np.bitwise_xor.reduce(
        np.asarray(x).astype(np.int64), axis=axis, keepdims=keepdims
    ),
    "logical_and": lambda x, axis, keepdims=False: np.all(x != 0, axis=axis, keepdims=keepdims),
    "logical_or": lambda x, axis, keepdims=False: np.any(x != 0, axis=axis, keepdims=keepdims),
    "abs_max": lambda x, axis, keepdims=False: np.max(np.abs(x), axis=axis, keepdims=keepdims),
}

# names under which kernels refer to operators -> canonical operator name
ALIASES = {
    "max": "maximum",
    "min": "minimum",
    "sum": "add",
    "prod": "multiply",
    "true_divide": "divide",
    "sub": "subtract",
    "mul": "multiply",
    "negative": "negative",
    "bitwise_not": "invert",
    "all": "logical_and",
    "any": "logical_or",
    "rsqrt": "rsqrt",
    "identity": "identity",
}


@dataclass(frozen=True)
class Op:
    name: str
    kind: str  # "act" (Scalar Engine activation function) or "alu" (Vector Engine operator)
    unary: Callable[[np.ndarray], np.ndarray] | None = None
    binary: Callable[[Any, Any], Any] | None = None

    def reduce(self, x: np.ndarray, axis: Any, keepdims: bool = False) -> np.ndarray:
        fn = REDUCE.get(self.name)
        if fn is None:
            raise ValueError(f"operator {self.name} cannot reduce")
        with np.errstate(all="ignore"):
            return np.asarray(fn(x, axis=axis, keepdims=keepdims))

    def __call__(self, *args: Any) -> Any:
        with np.errstate(all="ignore"):
            if len(args) == 1 and self.unary is not None:
                return self.unary(args[0])
            if len(args) == 2 and self.binary is not None:
                return self.binary(*args)
        raise TypeError(f"operator {self.name} does not take {len(args)} operand(s)")


def lookup(op: Any) -> Op | None:
    """Resolve ``op`` (an ``nl`` function, a numpy ufunc or a name) to an :class:`Op`."""
    if op is None:
        return None
    if isinstance(op, Op):
        return op
    name = getattr(op, "_nki_op", None)
    if name is None:
        name = getattr(op, "__name__", None) if not isinstance(op, str) else op
    if not isinstance(name, str):
        return None
    name = ALIASES.get(name, name)
    if name in ("bypass",):
        return None
    if name in UNARY and name in BINARY:
        return Op(name, "alu", UNARY[name], BINARY[name])
    if name in UNARY:
        return Op(name, "act", unary=UNARY[name])
    if name in BINARY:
        return Op(name, "alu", binary=BINARY[name])
    if name == "invert":
        return Op(name, "alu", unary=lambda x: np.invert(np.asarray(x).astype(np.int64)))
    if name == "logical_not":
        return Op(name, "alu", unary=lambda x: (np.asarray(x) == 0).astype(np.float32))
    return None
