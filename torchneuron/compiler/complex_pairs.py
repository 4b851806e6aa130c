"""complex64 arithmetic rewritten as float32 pairs, so that it compiles.

The NeuronCore has no complex arithmetic, and torch-mlir lowers no complex op: every complex
node stayed in eager mode and ran through the CPU fallback. Rotary embeddings written with
complex numbers (Llama 4, DeepSeek-V2: ``view_as_complex(x) * polar(1, θ)`` then
``view_as_real``) sent two products per layer to the host, forward and backward.

:func:`complex_as_pairs` gives every complex64 value the rewrite can follow a float32 "pair"
twin, its ``view_as_real`` layout (a trailing dimension of 2: real, imaginary), and rewrites the
ops on it: ``view_as_complex`` is its input, ``view_as_real`` its pair, products are expanded
into real arithmetic, views act on the pair with the trailing dimension kept. A complex value
that comes from outside the rewrite (a graph input, an op it does not know) gets its pair as a
``view_as_real`` view; where a complex value is still needed (a graph output, an op it does not
know) it is rebuilt as a ``view_as_complex`` view of the pair. Those views run on the device
(complex tensors live in device memory), and the arithmetic between them compiles.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import fx
from torch._guards import detect_fake_mode

from .fourier import FFT_RULES

_aten = torch.ops.aten

_PAIR_DTYPE = {torch.complex64: torch.float32}
_KEPT_META = ("stack_trace", "nn_module_stack", "source_fn_stack", "from_node", "seq_nr")


def _val(a):
    return a.meta.get("val") if isinstance(a, fx.Node) else None


def _is_complex(a) -> bool:
    v = _val(a)
    return isinstance(v, torch.Tensor) and v.dtype in _PAIR_DTYPE


class _Rewrite:
    def __init__(self, gm: fx.GraphModule):
        self.graph = gm.graph
        self.pairs: dict[fx.Node, fx.Node] = {}
        self.at: fx.Node | None = None  # the node being rewritten: new nodes go before it
        self.emitted: list[fx.Node] = []  # what the rewrite of ``at`` added so far
        # factories (arange, full) take no tensor: their values are traced in the graph's fake mode
        self.fake_mode = detect_fake_mode([n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"])

    def _insert(self, place, target, args, kwargs) -> fx.Node:
        """``target(*args, **kwargs)`` inserted at ``place`` (an ``inserting_*`` context), its
        traced value computed on the arguments' ones."""
        vals = fx.node.map_arg((args, kwargs), lambda n: n.meta["val"])
        with self.fake_mode if self.fake_mode is not None else contextlib.nullcontext():
            val = target(*vals[0], **vals[1])
        with place:
            node = self.graph.call_function(target, args, kwargs)
        node.meta["val"] = val
        return node

    def emit(self, target, *args, **kwargs) -> fx.Node:
        """A node of the rewrite of ``at``, before it."""
        node = self._insert(self.graph.inserting_before(self.at), target, args, kwargs)
        node.meta.update({k: v for k, v in self.at.meta.items() if k in _KEPT_META})
        self.emitted.append(node)
        return node

    def pair(self, z: fx.Node) -> fx.Node:
        """The float pair of complex ``z``; a ``view_as_real`` view for a value from outside."""
        p = self.pairs.get(z)
        if p is None:
            where = z
            if z.op == "placeholder":  # after the last placeholder: inputs stay first
                where = [n for n in self.graph.nodes if n.op == "placeholder"][-1]
            if z.meta["val"].is_conj():  # a conjugate view: the pair of what it conjugates, imaginary negated
                base = self._after(where, _aten._conj.default, z)
                plain = self._after(base, _aten.view_as_real.default, base)
                re = self._after(plain, _aten.select.int, plain, -1, 0)
                im = self._after(re, _aten.select.int, plain, -1, 1)
                negated = self._after(im, _aten.neg.default, im)
                p = self._after(negated, _aten.stack.default, [re, negated], -1)
            else:
                p = self._after(where, _aten.view_as_real.default, z)
            self.pairs[z] = p
        return p

    def _after(self, where: fx.Node, target, *args) -> fx.Node:
        return self._insert(self.graph.inserting_after(where), target, args, {})

    def parts(self, z: fx.Node) -> tuple[fx.Node, fx.Node]:
        p = self.pair(z)
        return self.emit(_aten.select.int, p, -1, 0), self.emit(_aten.select.int, p, -1, 1)

    def stack(self, re: fx.Node, im: fx.Node) -> fx.Node:
        return self.emit(_aten.stack.default, [re, im], -1)


def _dim(node: fx.Node, d: int, extra: int = 0) -> int:
    """A dimension of complex ``node``'s value as a non-negative index (pairs add one at the end)."""
    n = node.meta["val"].dim() + extra
    return d + n if d < 0 else d


# each rule returns the pair of the node's complex result (or, for view_as_real, the float result
# itself), or None when it does not apply to these arguments
_Rule = Callable[[_Rewrite, fx.Node], "fx.Node | None"]


def _view_as_complex(r: _Rewrite, node: fx.Node):
    return node.args[0]


def _view_as_real(r: _Rewrite, node: fx.Node):
    return r.pair(node.args[0])


def _polar(r: _Rewrite, node: fx.Node):
    magnitude, angle = node.args
    return r.stack(r.emit(_aten.mul.Tensor, magnitude, r.emit(_aten.cos.default, angle)),
                   r.emit(_aten.mul.Tensor, magnitude, r.emit(_aten.sin.default, angle)))


def _complex(r: _Rewrite, node: fx.Node):
    re, im = node.args
    shape = list(node.meta["val"].shape)
    return r.stack(r.emit(_aten.expand.default, re, shape), r.emit(_aten.expand.default, im, shape))


def _real_operand(a) -> bool:
    v = _val(a)
    if isinstance(a, fx.Node):
        return isinstance(v, torch.Tensor) and not v.dtype.is_complex
    return isinstance(a, (int, float)) and not isinstance(a, bool)


def _complex_constant(k):
    """A complex number, also where the backward of a product by one conjugated it in the graph
    (``_conj(1j)``: a 0-d complex128 tensor on the host); anything else as it is."""
    if isinstance(k, fx.Node) and k.target is _aten._conj.default and isinstance(k.args[0], complex):
        return k.args[0].conjugate()
    return k


def _mul(r: _Rewrite, node: fx.Node):
    a, b = node.args[:2]
    if _is_complex(a) and _is_complex(b):
        ar, ai = r.parts(a)
        br, bi = r.parts(b)
        re = r.emit(_aten.sub.Tensor, r.emit(_aten.mul.Tensor, ar, br), r.emit(_aten.mul.Tensor, ai, bi))
        im = r.emit(_aten.add.Tensor, r.emit(_aten.mul.Tensor, ar, bi), r.emit(_aten.mul.Tensor, ai, br))
        return r.stack(re, im)
    z, k = (a, b) if _is_complex(a) else (b, a)
    k = _complex_constant(k)
    if isinstance(k, complex):  # by a complex number c: (c.real·re − c.imag·im, c.real·im + c.imag·re)
        re, im = r.parts(z)
        return r.stack(r.emit(_aten.sub.Tensor, r.emit(_aten.mul.Tensor, re, k.real), r.emit(_aten.mul.Tensor, im, k.imag)),
                       r.emit(_aten.add.Tensor, r.emit(_aten.mul.Tensor, im, k.real), r.emit(_aten.mul.Tensor, re, k.imag)))
    if not _real_operand(k):
        return None
    if isinstance(k, fx.Node):  # a real tensor scales both parts: broadcast it over the pair dimension
        k = r.emit(_aten.unsqueeze.default, k, -1)
    return r.emit(_aten.mul.Tensor, r.pair(z), k)


def _add_sub(target):
    def rule(r: _Rewrite, node: fx.Node):
        a, b = node.args[:2]
        if not (_is_complex(a) and _is_complex(b)) or node.kwargs.get("alpha", 1) != 1:
            return None
        return r.emit(target, r.pair(a), r.pair(b))

    return rule


def _conj(r: _Rewrite, node: fx.Node):
    re, im = r.parts(node.args[0])
    return r.stack(re, r.emit(_aten.neg.default, im))


def _same(target):
    """An op that acts on both parts alike with the arguments it has (clone, neg)."""
    def rule(r: _Rewrite, node: fx.Node):
        return r.emit(target, r.pair(node.args[0]), *node.args[1:], **node.kwargs)

    return rule


def _magnitude(r: _Rewrite, z: fx.Node) -> fx.Node:
    """|z| as sqrt(re² + im²) (overflows to inf above ~1.8e19 where ATen's hypot would not)."""
    re, im = r.parts(z)
    squares = r.emit(_aten.add.Tensor, r.emit(_aten.mul.Tensor, re, re), r.emit(_aten.mul.Tensor, im, im))
    return r.emit(_aten.sqrt.default, squares)


def _abs(r: _Rewrite, node: fx.Node):
    return _magnitude(r, node.args[0])  # a real result: the node's users take it


def _sgn(r: _Rewrite, node: fx.Node):
    """z / |z|, and 0 where z is 0."""
    z = node.args[0]
    magnitude = r.emit(_aten.unsqueeze.default, _magnitude(r, z), -1)
    quotient = r.emit(_aten.div.Tensor, r.pair(z), magnitude)
    return r.emit(_aten.where.ScalarSelf, r.emit(_aten.eq.Scalar, magnitude, 0), 0.0, quotient)


def _div(r: _Rewrite, node: fx.Node):
    """A complex value divided by a real tensor or number (both parts divided)."""
    z, k = node.args[:2]
    if not _is_complex(z) or not _real_operand(k) or node.kwargs.get("rounding_mode") is not None:
        return None
    if isinstance(k, fx.Node):
        k = r.emit(_aten.unsqueeze.default, k, -1)
    return r.emit(_aten.div.Tensor, r.pair(z), k)


def _where(r: _Rewrite, node: fx.Node):
    condition, a, b = node.args
    if not (_is_complex(a) and _is_complex(b)) or not isinstance(condition, fx.Node):
        return None
    return r.emit(_aten.where.self, r.emit(_aten.unsqueeze.default, condition, -1), r.pair(a), r.pair(b))


def _scalar_tensor(r: _Rewrite, node: fx.Node):
    value = complex(node.args[0])
    device = node.kwargs.get("device", node.meta["val"].device)
    return r.emit(_aten.stack.default,
                  [r.emit(_aten.scalar_tensor.default, value.real, dtype=torch.float32, device=device),
                   r.emit(_aten.scalar_tensor.default, value.imag, dtype=torch.float32, device=device)])


def _unsqueeze(r: _Rewrite, node: fx.Node):
    z, d = node.args
    return r.emit(_aten.unsqueeze.default, r.pair(z), _dim(z, d, extra=1))


def _squeeze_dims(r: _Rewrite, node: fx.Node):
    z, dims = node.args
    dims = [dims] if isinstance(dims, int) else dims
    return r.emit(_aten.squeeze.dims, r.pair(z), [_dim(z, d) for d in dims])


def _reshaped(target):
    def rule(r: _Rewrite, node: fx.Node):
        z, shape = node.args
        return r.emit(target, r.pair(z), [*shape, 2])

    return rule


def _permute(r: _Rewrite, node: fx.Node):
    z, dims = node.args
    n = z.meta["val"].dim()
    return r.emit(_aten.permute.default, r.pair(z), [_dim(z, d) for d in dims] + [n])


def _transpose(r: _Rewrite, node: fx.Node):
    z, d0, d1 = node.args
    return r.emit(_aten.transpose.int, r.pair(z), _dim(z, d0), _dim(z, d1))


def _along_dim(target):
    """slice / select: the dimension argument (second) made non-negative, the rest unchanged."""
    def rule(r: _Rewrite, node: fx.Node):
        z, d, *rest = node.args
        return r.emit(target, r.pair(z), _dim(z, d), *rest)

    return rule


def _cat(r: _Rewrite, node: fx.Node):
    zs = node.args[0]
    d = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if not all(_is_complex(z) for z in zs):
        return None
    return r.emit(_aten.cat.default, [r.pair(z) for z in zs], _dim(zs[0], d))


def _zeros_like(r: _Rewrite, node: fx.Node):
    """``full_like`` with 0 (``zeros_like``): zeros of the pair's shape; other values would fill
    the imaginary part too."""
    z, value = (node.args[0], 0) if node.target is _aten.zeros_like.default else node.args[:2]
    if value != 0:
        return None
    return r.emit(_aten.full_like.default, _template(r, z), 0, **_like_kwargs(node))


def _empty_like(r: _Rewrite, node: fx.Node):
    return r.emit(_aten.empty_like.default, _template(r, node.args[0]), **_like_kwargs(node))


def _template(r: _Rewrite, z: fx.Node) -> fx.Node:
    """What a ``*_like`` of ``z`` with a complex result takes the geometry from: a real ``z``
    itself, viewed with the pair dimension; a complex one's pair."""
    if _is_complex(z):
        return r.pair(z)
    return r.emit(_aten.expand.default, r.emit(_aten.unsqueeze.default, z, -1), [*z.meta["val"].shape, 2])


def _like_kwargs(node: fx.Node) -> dict:
    kept = {k: v for k, v in node.kwargs.items() if k in ("pin_memory",)}
    return {**kept, "dtype": _PAIR_DTYPE[node.meta["val"].dtype], "memory_format": torch.contiguous_format}


def _new_zeros(r: _Rewrite, node: fx.Node):
    template, size = node.args[:2]
    if _is_complex(template):
        template = r.pair(template)
    device = node.kwargs.get("device", node.meta["val"].device)
    return r.emit(_aten.new_zeros.default, template, [*size, 2], dtype=_PAIR_DTYPE[node.meta["val"].dtype],
                  device=device)


def _slice_scatter(r: _Rewrite, node: fx.Node):
    z, src, *rest = node.args
    if not _is_complex(src):
        return None
    given = {**dict(zip(("dim", "start", "end", "step"), rest, strict=False)), **node.kwargs}
    return r.emit(_aten.slice_scatter.default, r.pair(z), r.pair(src), _dim(z, given.get("dim", 0)),
                  given.get("start"), given.get("end"), given.get("step", 1))


def _copy(r: _Rewrite, node: fx.Node):
    z, src = node.args[:2]
    if not (_is_complex(z) and _is_complex(src)):
        return None
    return r.emit(_aten.copy.default, r.pair(z), r.pair(src))


RULES: dict[object, _Rule] = {
    _aten.full_like.default: _zeros_like,
    _aten.zeros_like.default: _zeros_like,
    _aten.empty_like.default: _empty_like,
    _aten.new_zeros.default: _new_zeros,
    _aten.slice_scatter.default: _slice_scatter,
    _aten.copy.default: _copy,
    _aten.view_as_complex.default: _view_as_complex,
    _aten.view_as_real.default: _view_as_real,
    _aten.polar.default: _polar,
    _aten.complex.default: _complex,
    _aten.mul.Tensor: _mul,
    _aten.mul.Scalar: _mul,
    _aten.add.Tensor: _add_sub(_aten.add.Tensor),
    _aten.sub.Tensor: _add_sub(_aten.sub.Tensor),
    _aten._conj.default: _conj,
    _aten.conj_physical.default: _conj,
    _aten.clone.default: _same(_aten.clone.default),
    _aten.alias.default: _same(_aten.alias.default),
    _aten.abs.default: _abs,
    _aten.sgn.default: _sgn,
    _aten.div.Tensor: _div,
    _aten.div.Scalar: _div,
    _aten.where.self: _where,
    _aten.scalar_tensor.default: _scalar_tensor,
    _aten.neg.default: _same(_aten.neg.default),
    _aten.unsqueeze.default: _unsqueeze,
    _aten.squeeze.dim: _squeeze_dims,
    _aten.squeeze.dims: _squeeze_dims,
    _aten.view.default: _reshaped(_aten.view.default),
    _aten._unsafe_view.default: _reshaped(_aten._unsafe_view.default),
    _aten.reshape.default: _reshaped(_aten.reshape.default),
    _aten.expand.default: _reshaped(_aten.expand.default),
    _aten.permute.default: _permute,
    _aten.transpose.int: _transpose,
    _aten.slice.Tensor: _along_dim(_aten.slice.Tensor),
    _aten.select.int: _along_dim(_aten.select.int),
    _aten.cat.default: _cat,
    **FFT_RULES,  # fourier.py: transforms as DFT matrix products
}

# the rewrite pays off only where there is complex arithmetic to compile
_ARITHMETIC = {_aten.polar.default, _aten.complex.default, _aten.mul.Tensor, _aten.mul.Scalar, _aten.add.Tensor, _aten.sub.Tensor,
               _aten._conj.default, _aten.conj_physical.default, _aten.neg.default,
               _aten._fft_r2c.default, _aten._fft_c2c.default, _aten._fft_c2r.default, _aten.abs.default,
               _aten.sgn.default, _aten.div.Tensor, _aten.div.Scalar}


def _touches_complex(node: fx.Node) -> bool:
    return _is_complex(node) or any(_is_complex(a) for a in node.all_input_nodes)


def complex_as_pairs(gm: fx.GraphModule) -> int:
    """Rewrite the graph's complex64 arithmetic as float32 pairs; returns the nodes rewritten."""
    graph = gm.graph
    if not any(n.op == "call_function" and n.target in _ARITHMETIC and _touches_complex(n) for n in graph.nodes):
        return 0
    r = _Rewrite(gm)
    rewritten: list[fx.Node] = []
    for node in list(graph.nodes):
        rule = RULES.get(node.target) if node.op == "call_function" else None
        if rule is None or not _touches_complex(node):
            continue
        out = node.meta.get("val")
        if isinstance(out, torch.Tensor) and out.dtype.is_complex and out.dtype not in _PAIR_DTYPE:
            continue  # complex128 and complex32 stay as they are
        if any(_val(a) is not None and _val(a).dtype.is_complex and not _is_complex(a)
               and not isinstance(_complex_constant(a), complex) for a in node.all_input_nodes):
            continue
        r.at = node
        r.emitted = []
        try:
            result = rule(r, node)
        except Exception:  # noqa: BLE001 - e.g. a view the pair's strides do not allow: left as it is
            result = None
        if result is None:
            for dead in reversed(r.emitted):
                graph.erase_node(dead)
            continue
        if _is_complex(node):
            r.pairs[node] = result
        else:  # a real result (view_as_real, _fft_c2r): its users take it itself
            node.replace_all_uses_with(result)
        rewritten.append(node)
    # a rewritten complex value still used as complex (output, op not rewritten): a view of its pair
    done = set(rewritten)
    for node in rewritten:
        outside = [u for u in node.users if u not in done]
        if not outside or not _is_complex(node):
            continue
        pair = r.pairs[node]
        if node.meta["val"].is_conj():
            # a conjugate view stays one (a later view_as_real of it, or of the _conj of it in the
            # backward graph, depends on the flag): the conjugate of the view of its base's pair
            re = r._after(pair, _aten.select.int, pair, -1, 0)
            im = r._after(re, _aten.select.int, pair, -1, 1)
            negated = r._after(im, _aten.neg.default, im)
            base = r._after(negated, _aten.stack.default, [re, negated], -1)
            as_complex = r._after(base, _aten.view_as_complex.default, base)
            whole = r._after(as_complex, _aten._conj.default, as_complex)
        else:
            whole = r._after(pair, _aten.view_as_complex.default, pair)
        whole.meta.update({k: v for k, v in node.meta.items() if k in _KEPT_META})
        node.replace_all_uses_with(whole, delete_user_cb=lambda u: u not in done)
    for node in reversed(rewritten):
        if not node.users:
            graph.erase_node(node)
    graph.lint()
    gm.recompile()
    return len(rewritten)


__all__ = ["RULES", "complex_as_pairs"]
