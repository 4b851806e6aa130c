"""The FX pass pipeline between AOTAutograd and the lowering to StableHLO.

* **Decompositions** — AOTAutograd traces with :data:`DECOMPOSITIONS`: PyTorch's core ATen
  decompositions as torch-mlir expects them, plus the overloads torch-mlir does not legalise
  itself (``aten.squeeze.dims``), plus per-tensor forms of the ``_foreach_*`` ops
  (``foreach.py``), ``convolution_backward`` as convolutions when convolutions are compiled
  rather than left to library kernels (``convolution.py``, ``library.py``), and max
  pooling with ``ceil_mode`` made explicit (``pooling.py``: torch-mlir pads the window on the
  wrong side), and ``as_strided`` calls that only reshape as views (``views.py``: IREE cannot
  compile torch-mlir's gather for them). Functionalisation is AOTAutograd's own.
* **Random ops** — operators tagged ``nondeterministic_seeded`` (``rand_like`` from dropout,
  ``bernoulli``, ``randn`` …) are never compiled: they stay outside compiled regions, run on the
  device's eager kernels and so draw from the device generator (``torch.neuron.manual_seed``),
  and their results enter the compiled regions as inputs. A random ``*_like`` op fills its result
  in memory order, so :func:`random_like_in_eager_layout` gives it a template with the layout
  eager mode has (a compiled region returns ``x.transpose(1, 2)`` contiguous): the same seed
  then draws the same numbers into the same elements as in eager mode.
* **Devices** — :func:`strip_device_args` turns ``device=neuron`` arguments of factory ops
  (``full``, ``arange``, ``scalar_tensor`` …) into the host device, which is what the lowering
  understands; in StableHLO every value lives on the executable's device.
* **Pooling strides** — :func:`fill_default_strides` writes out the default stride of pooling
  ops (``stride=[]`` means "the kernel size"), which torch-mlir otherwise lowers as stride 1.
* **Negative indices** — :func:`wrap_negative_indices` maps negative index tensors of
  advanced indexing (``x[:, [-1]]``, Falcon's fused QKV split) to ``i + size``, as PyTorch
  does; the lowering's gather would clamp them to 0.
* **Comparisons with a float scalar** — :func:`compare_in_promoted_dtype` converts an integer
  or boolean operand to the dtype PyTorch compares in (``int_tensor >= 0.5`` is a float
  comparison): torch-mlir's folder crashes on the implicit form when the operand is a constant.
* **Uniform constants** — ``constant_folding.py`` replaces a tensor computed from constants
  alone whose elements are all equal by ``aten.full`` (IREE miscompiles reductions of unfolded
  elementwise functions of splat constants).
* **Outputs** — :func:`split_outputs` removes outputs that are not computed by the graph
  (``None`` gradients of non-differentiable inputs, constants, inputs returned as they are,
  repeated outputs) before lowering and returns the recipe that restores them afterwards.
* **Dtype policy** — the chip computes float64 as float32 and int64 as int32: compiled regions
  are built with IREE's input demotion flags and inputs/outputs cross the executable boundary in
  the narrow type, the declared dtype restored on the way out (see ``executable.py``).
  ``TORCHNEURON_EXACT_DTYPES=1`` compiles with the exact dtypes, like eager.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.fx as fx

from ..ops import dtype_policy

_aten = torch.ops.aten

# Overloads decomposed before lowering, on top of torch-mlir's table.
EXTRA_DECOMPOSED = [_aten.squeeze.dims]


@functools.cache
def decompositions(convolution_backward: bool = True) -> dict:
    """AOTAutograd's decomposition table; ``convolution_backward=False`` keeps
    ``aten.convolution_backward`` whole (for the library convolutions of ``library.py``)."""
    from torch._decomp import get_decompositions
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    from .antialiasing import antialiasing_decompositions
    from .attention import attention_decompositions
    from .convolution import convolution_decompositions
    from .diagonal_and_roll import diagonal_and_roll_decompositions
    from .distances import distance_decompositions
    from .extrema import extrema_decompositions
    from .foreach import foreach_decompositions
    from .gcd import gcd_decompositions
    from .grid_sampling import grid_sampling_decompositions
    from .histogram import histogram_decompositions
    from .hypot import hypot_decompositions
    from .integer_inputs import integer_input_decompositions
    from .masked_scatter import masked_scatter_decompositions
    from .modulo import modulo_decompositions
    from .padding import padding_decompositions
    from .pooling import pooling_decompositions
    from .scans import scan_decompositions
    from .scatter_reduction import scatter_reduction_decompositions
    from .special_functions import special_function_decompositions
    from .triangular_solve import triangular_solve_decompositions
    from .upsampling import upsampling_decompositions
    from .views import view_decompositions

    table = dict(get_decomposition_table())
    table.update(get_decompositions(EXTRA_DECOMPOSED))
    table.update(foreach_decompositions())
    if convolution_backward:
        table.update(convolution_decompositions())
    table.update(pooling_decompositions())
    table.update(padding_decompositions())
    table.update(view_decompositions())
    table.update(histogram_decompositions())
    table.update(upsampling_decompositions())
    table.update(antialiasing_decompositions())
    table.update(grid_sampling_decompositions())
    table.update(triangular_solve_decompositions())
    table.update(attention_decompositions())
    table.update(integer_input_decompositions())
    table.update(modulo_decompositions())
    table.update(extrema_decompositions())
    table.update(hypot_decompositions())
    table.update(masked_scatter_decompositions())
    table.update(scan_decompositions())
    table.update(gcd_decompositions())
    table.update(scatter_reduction_decompositions())
    table.update(diagonal_and_roll_decompositions())
    table.update(special_function_decompositions())
    table.update(distance_decompositions())
    return table


def is_random(node: fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags


def random_like_in_eager_layout(gm: fx.GraphModule) -> int:
    """Give each random ``*_like`` op (``randn_like`` …) an ``empty_strided`` template with the
    shape and strides its input has in eager mode (the traced ones) instead of that input, whose
    layout may be a compiled region's; only the template's geometry is read. Returns the count."""
    graph = gm.graph
    changed = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or not is_random(node) or not node.target.__name__.split(".")[0].endswith("_like"):
            continue
        src = node.args[0] if node.args else None
        val = src.meta.get("val") if isinstance(src, fx.Node) else None
        if not isinstance(val, torch.Tensor) or val.is_contiguous():
            continue  # a region's results are contiguous: same layout
        with graph.inserting_before(node):
            template = graph.call_function(
                _aten.empty_strided.default, (list(val.shape), list(val.stride())),
                {"dtype": val.dtype, "device": val.device})
        template.meta["val"] = val
        node.replace_input_with(src, template)
        changed += 1
    if changed:
        graph.lint()
        gm.recompile()
    return changed


_HOST = torch.device("cpu")


def strip_device_args(gm: fx.GraphModule) -> None:
    """Replace ``neuron`` device arguments by the host device, in place."""

    def fix(a):
        if isinstance(a, torch.device) and a.type != "cpu":
            return _HOST
        if isinstance(a, (list, tuple)):
            return type(a)(fix(x) for x in a)
        return a

    for node in gm.graph.nodes:
        if node.op == "call_function":
            node.args = fix(node.args)
            node.kwargs = {k: fix(v) for k, v in node.kwargs.items()}


# advanced indexing: op -> position of its list of index tensors (entry d indexes dim d)
_INDEXING = {
    _aten.index.Tensor: 1,
    _aten._unsafe_index.Tensor: 1,
    _aten.index_put.default: 1,
    _aten._unsafe_index_put.default: 1,
}


def wrap_negative_indices(gm: fx.GraphModule) -> int:
    """Rewrite each integer index tensor ``i`` of an advanced-indexing node into
    ``where(i < 0, i + size, i)``; returns the number of index tensors rewritten."""
    graph = gm.graph
    changed = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _INDEXING:
            continue
        pos = _INDEXING[node.target]
        base = node.args[0].meta.get("val") if isinstance(node.args[0], fx.Node) else None
        indices = list(node.args[pos])
        vals = [i.meta.get("val") if isinstance(i, fx.Node) else None for i in indices]
        if base is None or any(v is not None and v.dtype in (torch.bool, torch.uint8) for v in vals):
            continue  # boolean masks span several dims (and never lower: data-dependent shape)
        before = changed
        for d, (idx, val) in enumerate(zip(indices, vals, strict=True)):
            if val is None or val.is_floating_point() or d >= base.dim():
                continue
            size = base.shape[d]
            with graph.inserting_before(node):
                negative = graph.call_function(_aten.lt.Scalar, (idx, 0))
                shifted = graph.call_function(_aten.add.Tensor, (idx, size))
                fixed = graph.call_function(_aten.where.self, (negative, shifted, idx))
            negative.meta["val"] = _aten.lt.Scalar(val, 0)
            shifted.meta["val"] = _aten.add.Tensor(val, size)
            fixed.meta["val"] = _aten.where.self(negative.meta["val"], shifted.meta["val"], val)
            indices[d] = fixed
            changed += 1
        if changed != before:
            args = list(node.args)
            args[pos] = indices
            node.args = tuple(args)
    if changed:
        graph.lint()
        gm.recompile()
    return changed


_SLICES = (_aten.slice.Tensor, _aten.slice_scatter.default)


def clamp_slice_ends(gm: fx.GraphModule) -> int:
    """Give slices (``x[:, 8:]`` is ``slice(x, 1, 8, 2**63 - 1)``) an ``end`` no larger than the
    dimension: torch-mlir grew past 20 GB lowering a ``slice_scatter`` whose end was 2**63 - 1
    (Falcon's backward). Returns the number of slices changed."""
    changed = 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in _SLICES:
            continue
        names = [a.name for a in node.target._schema.arguments]
        values = dict(zip(names, node.args, strict=False)) | dict(node.kwargs)
        base = values["self"].meta.get("val") if isinstance(values.get("self"), fx.Node) else None
        dim, end = values.get("dim", 0), values.get("end")
        if base is None or not isinstance(dim, int) or not isinstance(end, int):
            continue
        size = base.shape[dim]
        if isinstance(size, int) and end > size:
            pos = names.index("end")
            if pos < len(node.args):
                node.args = node.args[:pos] + (size,) + node.args[pos + 1:]
            else:
                node.kwargs = {**node.kwargs, "end": size}
            changed += 1
    if changed:
        gm.recompile()
    return changed


_SCALAR_COMPARISONS = (_aten.eq.Scalar, _aten.ne.Scalar, _aten.lt.Scalar, _aten.le.Scalar,
                       _aten.gt.Scalar, _aten.ge.Scalar)


def compare_in_promoted_dtype(gm: fx.GraphModule) -> int:
    """Convert the integer or boolean tensor of a comparison with a float scalar
    (``int_tensor >= 0.5``) to the dtype PyTorch computes the comparison in (the default float
    dtype; ``torch.result_type``), explicitly: torch-mlir's folder crashes (SIGSEGV) on such a
    comparison when the tensor is a constant (``full_like(x, 0, dtype=torch.int64) >= 0.5``,
    TimesFM 2.5's running statistics). Returns the number of comparisons changed."""
    graph = gm.graph
    changed = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _SCALAR_COMPARISONS or len(node.args) < 2:
            continue
        tensor, scalar = node.args[0], node.args[1]
        val = tensor.meta.get("val") if isinstance(tensor, fx.Node) else None
        if not isinstance(scalar, float) or not isinstance(val, torch.Tensor) or val.is_floating_point() \
                or val.is_complex():
            continue
        dtype = torch.result_type(val, scalar)
        with graph.inserting_before(node):
            cast = graph.call_function(torch.ops.prims.convert_element_type.default, (tensor, dtype))
        cast.meta["val"] = val.to(dtype)
        node.args = (cast, scalar, *node.args[2:])
        changed += 1
    if changed:
        graph.lint()
        gm.recompile()
    return changed


# ops whose float arguments become constants of the computed dtype, besides the pointwise ones
_FILLS = (_aten.full.default, _aten.full_like.default, _aten.new_full.default, _aten.fill.Scalar,
          _aten.scalar_tensor.default, _aten.where.ScalarOther, _aten.where.ScalarSelf, _aten.where.Scalar)


def _scalar_dtype(node: fx.Node) -> torch.dtype:
    """The dtype a float argument of ``node`` is converted to: the result's if floating, else that
    of a floating tensor operand (a comparison), else the default float dtype it promotes to."""
    out = node.meta.get("val")
    if isinstance(out, torch.Tensor) and out.is_floating_point():
        return out.dtype
    for a in node.all_input_nodes:
        v = a.meta.get("val")
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v.dtype
    return torch.get_default_dtype()


def round_float_scalars(gm: fx.GraphModule) -> int:
    """Round each Python float argument of a pointwise op (and of a fill) to the nearest value of the
    dtype it is converted to, as ATen does: torch-mlir turns the float into an f64 constant and a
    ``stablehlo.convert``, which IREE 3.13 folds by rounding toward zero (``x * 0.857142857…`` used
    0.857142806 instead of 0.857142866, one float32 ulp low; the source position of an
    ``align_corners`` resize then fell from 6 to 5.9999995 and its index from 6 to 5, found by
    ``TORCHNEURON_VERIFY_REGIONS`` on CSATv2). A value the dtype holds exactly converts exactly in
    any rounding mode. float64 computations round to float32, as the chip computes them, unless
    ``TORCHNEURON_EXACT_DTYPES`` keeps them float64. Returns the arguments changed."""
    changed = 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if torch.Tag.pointwise not in node.target.tags and node.target not in _FILLS:
            continue
        dtype = _scalar_dtype(node)
        if dtype == torch.float64 and not dtype_policy.exact():
            dtype = torch.float32  # computed as float32 by the chip (ops/dtype_policy.py), eager and compiled
        if dtype in (torch.float64, torch.complex128) or not dtype.is_floating_point:
            continue

        def rounded(a, dtype=dtype):
            nonlocal changed
            if type(a) is not float or not math.isfinite(a):
                return a
            r = torch.tensor(a, dtype=torch.float64).to(dtype).item()
            changed += r != a
            return r

        node.args = tuple(rounded(a) for a in node.args)
        node.kwargs = {k: rounded(v) for k, v in node.kwargs.items()}
    if changed:
        gm.recompile()
    return changed


def fill_default_strides(gm: fx.GraphModule) -> int:
    """Give pooling nodes whose ``stride`` is empty/absent their kernel size as stride."""
    changed = 0
    for node in gm.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        names = [a.name for a in target._schema.arguments]
        if "stride" not in names or "kernel_size" not in names:
            continue
        si, ki = names.index("stride"), names.index("kernel_size")
        args = list(node.args)
        stride = args[si] if si < len(args) else node.kwargs.get("stride", [])
        kernel = args[ki] if ki < len(args) else node.kwargs.get("kernel_size")
        if stride or kernel is None:
            continue
        if si < len(args):
            args[si] = list(kernel)
            node.args = tuple(args)
        elif len(args) == si:
            node.args = (*args, list(kernel))
            node.kwargs = {k: v for k, v in node.kwargs.items() if k != "stride"}
        else:
            node.kwargs = {**node.kwargs, "stride": list(kernel)}
        changed += 1
    if changed:
        gm.recompile()
    return changed


def bool_inputs_as_bytes(gm: fx.GraphModule) -> int:
    """Let boolean inputs cross the executable's boundary as int8 (the same bytes: callers pass
    a zero-copy ``view(torch.int8)``) and convert them to bool inside the program.

    IREE 3.13's data tiling cannot pack an i1 program argument ("'iree_codegen.load_from_buffer'
    op buffer and tensor shapes must be compatible": the buffer is i1, the loaded tensor i8),
    e.g. the causal mask adaptive eager passes into its forward window."""
    changed = 0
    for node in [n for n in gm.graph.nodes if n.op == "placeholder"]:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.dtype != torch.bool or not node.users:
            continue
        with gm.graph.inserting_after(node):
            as_bool = gm.graph.call_function(torch.ops.prims.convert_element_type.default, (node, torch.bool))
        node.replace_all_uses_with(as_bool, delete_user_cb=lambda user, new=as_bool: user is not new)
        as_bool.meta.update(node.meta)
        node.meta["val"] = val.view(torch.int8)
        if "tensor_meta" in node.meta:  # what torch-mlir's importer reads the type from
            node.meta["tensor_meta"] = node.meta["tensor_meta"]._replace(dtype=torch.int8)
        changed += 1
    if changed:
        gm.recompile()
    return changed


# --- outputs that are not computed -----------------------------------------------------------


@dataclass(frozen=True)
class OutputSlot:
    kind: str  # "computed", "input", "constant"
    index: int = -1  # computed: index among computed outputs; input: placeholder index
    value: object = None  # constant


@dataclass(frozen=True)
class OutputRecipe:
    slots: tuple[OutputSlot, ...]
    as_tuple: bool  # the original graph returned a tuple/list (vs a single value)

    def restore(self, inputs, computed):
        vals = []
        for s in self.slots:
            if s.kind == "computed":
                vals.append(computed[s.index])
            elif s.kind == "input":
                vals.append(inputs[s.index])
            else:
                vals.append(s.value)
        return tuple(vals) if self.as_tuple else vals[0]


def split_outputs(gm: fx.GraphModule) -> OutputRecipe:
    """Rewrite ``gm`` in place to return only the distinct tensors it computes (as a tuple).

    Returns how to rebuild the original outputs from the graph's inputs and the new outputs.
    """
    out_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    orig = out_node.args[0]
    as_tuple = isinstance(orig, (tuple, list))
    values = list(orig) if as_tuple else [orig]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    ph_index = {n: i for i, n in enumerate(placeholders)}
    computed: list[fx.Node] = []
    position: dict[fx.Node, int] = {}
    slots = []
    for v in values:
        if isinstance(v, fx.Node) and v.op == "placeholder":
            slots.append(OutputSlot("input", ph_index[v]))
        elif isinstance(v, fx.Node):
            if v not in position:
                position[v] = len(computed)
                computed.append(v)
            slots.append(OutputSlot("computed", position[v]))
        else:
            slots.append(OutputSlot("constant", value=v))
    out_node.args = (tuple(computed),)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return OutputRecipe(tuple(slots), as_tuple)


def drop_unused_placeholders(gm: fx.GraphModule) -> list[int]:
    """Remove placeholders nothing reads; returns the indices of those kept."""
    kept = []
    for i, n in enumerate([n for n in gm.graph.nodes if n.op == "placeholder"]):
        if n.users:
            kept.append(i)
        else:
            gm.graph.erase_node(n)
    gm.recompile()
    return kept


def output_vals(gm: fx.GraphModule) -> list:
    out_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    return [n.meta.get("val") for n in out_node.args[0]]


def placeholder_vals(gm: fx.GraphModule) -> list:
    return [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
