"""Checking every compiled region against eager execution (``TORCHNEURON_VERIFY_REGIONS``).

A debugging mode for compiled code that gives wrong numbers, in the spirit of PyTorch's accuracy
minifier (``TORCHDYNAMO_REPRO_LEVEL=4``) but per region and without leaving the program: with
``TORCHNEURON_VERIFY_REGIONS=1`` each compiled region of a graph also runs its own FX graph on the
device's eager kernels, on the same inputs, at every call, and the two results are compared
(tolerance by dtype, :data:`RTOL`). On the first mismatch of a region its nodes are bisected:
prefixes of the region are compiled (the rest of it eager) until the shortest prefix whose result
differs is found, and its last node — the first one the compiled code gets wrong — is reported with
the user's source line. The mismatch is warned about and listed in
``torchneuron.compiler.get_metrics()["mismatched_regions"]`` (``["region_mismatches"]`` counts the
differing calls); the compiled result is used either way,
so the program runs as it would without the check. ``TORCHNEURON_VERIFY_REGIONS=raise`` raises
:class:`RegionMismatchError` instead.

The check compares the compiler (lowering, torch-mlir, IREE) with the eager kernels on the graph the
compiler was given: a rewrite of the FX passes before partitioning is in both and is not checked
here (the sweep's end-to-end comparison with the CPU covers it). Compiled graphs are not stored in
or loaded from AOTAutograd's cache while the check is on (``graph_cache.enabled``).
"""

from __future__ import annotations

import operator
import os
import warnings
from dataclasses import asdict, dataclass

import torch
import torch.fx as fx
from torch.utils._pytree import tree_map

from . import metrics

_MODES = {"0": None, "": None, "false": None, "off": None, "1": "warn", "true": "warn", "on": "warn",
          "warn": "warn", "raise": "raise"}

# Largest error accepted, relative to the reference's largest magnitude (at least 1). Float32: the
# compiled and eager kernels sum in different orders and approximate exp/tanh/erf differently (errors of
# 1e-6–1e-5 of the scale in reductions over thousands of elements). Half types: a fused region keeps
# intermediates in float32 where the eager kernels round each op's result (bf16: 2^-8 per op).
RTOL = {torch.float32: 1e-4, torch.float64: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}
# A difference beyond RTOL is then judged against the region evaluated in float64 on the host, as
# PyTorch's accuracy checks do (``torch._dynamo.utils.same(..., fp64_ref)``): in an ill-conditioned
# graph (a BatchNorm over a nearly constant channel: rsqrt(var + eps) amplifies the last bit of var
# 10^7 times) eager float32 is as far from it as compiled code, and that is not a compiler bug.
MULTIPLIER = 4


def mode() -> str | None:
    """``None`` (off), ``"warn"`` or ``"raise"``, from ``TORCHNEURON_VERIFY_REGIONS``."""
    value = os.environ.get("TORCHNEURON_VERIFY_REGIONS", "0").strip().lower()
    if value not in _MODES:
        raise ValueError(f"TORCHNEURON_VERIFY_REGIONS={value!r}: expected 0, 1 (warn) or raise")
    return _MODES[value]


def enabled() -> bool:
    return mode() is not None


class RegionMismatchError(AssertionError):
    """A compiled region's result differs from the eager kernels' (``TORCHNEURON_VERIFY_REGIONS=raise``)."""


@dataclass
class RegionMismatch:
    graph: str  # graph id (``get_metrics()["graphs"]``)
    kind: str  # forward, backward, inference
    region: str
    output: int  # index of the first differing output of the region
    detail: str  # what differs (error and tolerance, NaN placement, dtype or shape)
    node: str | None = None  # the first node the compiled code gets wrong (bisection), if found
    op: str | None = None
    source: str | None = None  # the user's source line of that node
    # that node's own result is within rounding of the eager kernels': the region amplifies rounding
    # (ill-conditioned), nothing is computed wrong
    amplified: bool = False
    reproducer: str | None = None  # the saved inputs and graph (TORCHNEURON_DUMP_DIR)

    def describe(self) -> str:
        text = (f"compiled region {self.graph}/{self.region} ({self.kind}) differs from the eager kernels "
                f"in output {self.output}: {self.detail}")
        if self.node is not None:
            text += f"; first differing node {self.node} ({self.op})"
            if self.source:
                text += f" at {self.source}"
        if self.reproducer:
            text += f"; inputs and graph saved in {self.reproducer}"
        if self.amplified:
            text += ("; that node's own result matches the eager kernels' within rounding: the rest of the "
                     "region amplifies float rounding (ill-conditioned), not a wrong result")
        return text


def _flat(out) -> list:
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _flat(o)]
    return [out]


def difference(got: torch.Tensor, ref: torch.Tensor) -> str | None:
    """Why ``got`` (compiled) does not match ``ref`` (eager), or ``None`` if it does."""
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return f"{got.dtype}{list(got.shape)} against {ref.dtype}{list(ref.shape)}"
    if got.numel() == 0:
        return None
    a, b = got.detach().cpu(), ref.detach().cpu()
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    if not a.is_floating_point():
        wrong = a != b
        n = int(wrong.sum())
        if not n:
            return None
        i = int(wrong.flatten().nonzero()[0])
        return f"{n} of {a.numel()} {got.dtype} elements differ (first at flat index {i}: {a.flatten()[i].item()} against {b.flatten()[i].item()})"
    a, b = a.double(), b.double()
    nan_a, nan_b = a.isnan(), b.isnan()
    if not torch.equal(nan_a, nan_b):
        return f"NaN in {int(nan_a.sum())} elements compiled against {int(nan_b.sum())} eager ({got.dtype}{list(got.shape)})"
    inf_a, inf_b = a.isinf(), b.isinf()
    if not torch.equal(inf_a, inf_b) or not torch.equal(a[inf_a], b[inf_b]):
        return f"infinities differ: {int(inf_a.sum())} elements compiled against {int(inf_b.sum())} eager"
    finite = ~(nan_b | inf_b)
    if not bool(finite.any()):
        return None
    err = float((a[finite] - b[finite]).abs().max())
    scale = max(1.0, float(b[finite].abs().max()))
    tol = RTOL.get(got.dtype, 1e-4) * scale
    if err <= tol:
        return None
    return f"max error {err:.4g} (tolerance {tol:.3g}, reference scale {scale:.4g}, {got.dtype}{list(got.shape)})"


def _widened(v):
    """A value of the float64 evaluation: tensors on the host, floating ones in float64 (complex in
    complex128), floating dtype arguments float64, devices the host."""
    if isinstance(v, torch.Tensor):
        v = v.detach().cpu()
        if v.is_complex():
            return v.to(torch.complex128)
        return v.double() if v.is_floating_point() else v
    if isinstance(v, torch.dtype):
        return torch.complex128 if v.is_complex else (torch.float64 if v.is_floating_point else v)
    if isinstance(v, torch.device):
        return torch.device("cpu")
    return v


class _Float64(fx.Interpreter):
    def run_node(self, n: fx.Node):
        if n.op != "call_function":
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        args, kwargs = tree_map(_widened, (args, kwargs))
        return n.target(*args, **kwargs)


def float64_reference(region: fx.GraphModule, args) -> list | None:
    """The region's graph evaluated on the host in float64, its outputs flattened; ``None`` if some op
    cannot run that way."""
    try:
        with torch.no_grad():
            return _flat(_Float64(region).run(*[_widened(a) for a in args]))
    except Exception:  # noqa: BLE001 -- then a difference is judged without it
        return None


def _excused(got: torch.Tensor, ref: torch.Tensor, exact: torch.Tensor) -> bool:
    """Whether a difference between compiled and eager results is rounding both share, judged against
    ``exact``, the float64 evaluation: the compiled error is at most :data:`MULTIPLIER` times the eager
    kernels' own (or the tolerance); an integer derived from floats is at most 1 off; a boolean that
    differs from eager's agrees with the float64 evaluation."""
    if not isinstance(exact, torch.Tensor) or exact.shape != got.shape:
        return False
    a, b, t = got.detach().cpu(), ref.detach().cpu(), exact
    if a.is_complex():
        a, b, t = torch.view_as_real(a), torch.view_as_real(b), torch.view_as_real(t)
    a, b, t = a.double(), b.double(), t.double()
    if got.dtype == torch.bool:  # a comparison of floats: where compiled and eager disagree, compiled is exact
        return bool(((a == b) | (a == t)).all())
    if not got.is_floating_point() and not got.is_complex():
        return bool(((a - t).abs() <= 1).all())
    if not torch.equal(a.isnan(), t.isnan()) or not torch.equal(a.isinf(), t.isinf()):
        return False
    finite = t.isfinite() & b.isfinite()
    if not bool(finite.any()):
        return True
    compiled_err = float((a[finite] - t[finite]).abs().max())
    eager_err = float((b[finite] - t[finite]).abs().max())
    tol = RTOL.get(got.dtype, 1e-4) * max(1.0, float(b[finite].abs().max()))
    return compiled_err <= max(MULTIPLIER * eager_err, tol)


def first_difference(got, ref, exact: list | None = None, skip: frozenset[int] = frozenset()) -> tuple[int, str] | None:
    """The first output of a region that differs, as (index, reason). With ``exact`` (the float64
    evaluation) a difference the eager kernels' own rounding explains is not one; outputs in ``skip``
    (uninitialised memory) are not compared."""
    gots, refs = _flat(got), _flat(ref)
    if len(gots) != len(refs):
        return 0, f"{len(gots)} outputs compiled against {len(refs)} eager"
    for i, (g, r) in enumerate(zip(gots, refs, strict=True)):
        if i in skip or not (isinstance(g, torch.Tensor) and isinstance(r, torch.Tensor)):
            continue
        why = difference(g, r)
        if why is not None and exact is not None and _excused(g, r, exact[i]):
            continue
        if why is not None:
            return i, why
    return None


_EMPTY = {torch.ops.aten.empty.memory_format, torch.ops.aten.empty_like.default, torch.ops.aten.empty_strided.default,
          torch.ops.aten.new_empty.default, torch.ops.aten.new_empty_strided.default,
          torch.ops.aten.empty_permuted.default}


def uninitialised_outputs(region: fx.GraphModule) -> frozenset[int]:
    """Outputs that are ``empty`` allocations (or views of one): their bytes are whatever the memory
    held (e.g. a buffer an eager random op fills next), not results to compare."""
    out = next(n for n in region.graph.nodes if n.op == "output")
    found = set()
    for i, a in enumerate(_flat(out.args[0])):
        while isinstance(a, fx.Node) and a.op == "call_function" and getattr(a.target, "is_view", False):
            a = a.args[0]
        if isinstance(a, fx.Node) and a.target in _EMPTY:
            found.add(i)
    return frozenset(found)


class VerifiedRegion(torch.nn.Module):
    """A compiled region that runs its eager graph beside it at every call and compares."""

    def __init__(self, name: str, compiled: torch.nn.Module, eager: fx.GraphModule, record: metrics.GraphRecord,
                 compile_regions, dump=None):
        super().__init__()
        self.region = name
        self.compiled = compiled
        self.eager = eager
        self._record = record
        self._dump = dump  # GraphDump: where a mismatch's reproducer goes (TORCHNEURON_DUMP_DIR)
        self._compile_regions = compile_regions  # graph_compiler._compile_regions (for the bisection)
        self._first: RegionMismatch | None = None
        self._skip = uninitialised_outputs(eager)

    def forward(self, *args):
        ref = self.eager(*args)
        got = self.compiled(*args)
        if first_difference(got, ref, skip=self._skip) is not None:
            exact = float64_reference(self.eager, args)
            diff = first_difference(got, ref, exact, self._skip)
            if diff is not None:
                self._mismatch(args, ref, exact, *diff)
        return got

    def _mismatch(self, args, ref, exact: list | None, output: int, detail: str) -> None:
        metrics.count("region_mismatches")
        if self._first is not None:  # reported (and bisected) at its first mismatch
            if mode() == "raise" and not self._first.amplified:
                raise RegionMismatchError(self._first.describe())
            return
        mismatch = RegionMismatch(self._record.graph_id, self._record.kind, self.region, output, detail)
        self._first = mismatch
        node = first_bad_node(self.eager, args, ref, exact, self._skip, self._record, self._compile_regions)
        if node is not None:
            from .lowering import source_location

            mismatch.node, mismatch.op, mismatch.source = node.name, str(node.target), source_location(node)
            mismatch.amplified = not node_differs(self.eager, node, args, self._record, self._compile_regions)
        self._save_reproducer(args, mismatch)
        metrics.add_region_mismatch(asdict(mismatch))
        if mode() == "raise" and not mismatch.amplified:
            raise RegionMismatchError(mismatch.describe())
        warnings.warn(f"torchneuron: {mismatch.describe()}", RuntimeWarning, stacklevel=2)


    def _save_reproducer(self, args, mismatch: RegionMismatch) -> None:
        """With ``TORCHNEURON_DUMP_DIR``: ``<region>.mismatch.pt`` beside the region's dumps, holding the
        mismatch, the region's graph (as a ``GraphModule`` and as code) and its inputs on the host, for a
        bug report: ``torch.load(path, weights_only=False)``, then ``d["module"](*d["inputs"])`` runs it."""
        if self._dump is None or not self._dump.enabled:
            return
        inputs = [a.detach().cpu() if isinstance(a, torch.Tensor) else a for a in args]
        path = self._dump.dir / f"{self.region}.mismatch.pt"
        torch.save({"mismatch": asdict(mismatch), "module": self.eager, "graph": self.eager.code, "inputs": inputs},
                   path)
        mismatch.reproducer = str(path)


def _compiled_prefix(region: fx.GraphModule, names: set[str], record: metrics.GraphRecord, compile_regions):
    """``region`` with the nodes in ``names`` compiled (as regions of their own) and the rest eager."""
    from .dump import GraphDump
    from .graph_compiler import _copy
    from .partition import REGION_PREFIX, split_by_names

    prefix = f"{REGION_PREFIX}verify_"
    work = split_by_names(_copy(region), names, prefix)
    parts = [(n, m) for n, m in work.named_children() if n.startswith(prefix) and isinstance(m, fx.GraphModule)]
    scratch = metrics.GraphRecord(f"{record.graph_id}/verify", record.kind, model=record.model)
    for name, module in compile_regions(parts, scratch, GraphDump.off()).items():
        setattr(work, name, module)
    work.recompile()
    return work


def node_differs(region: fx.GraphModule, node: fx.Node, args, record: metrics.GraphRecord, compile_regions) -> bool:
    """Whether ``node``'s own result differs from the eager kernels' when the region up to it is
    compiled (judged like a region's outputs, float64 evaluation included)."""
    from .graph_compiler import _copy

    head = _copy(region)
    nodes = list(head.graph.nodes)
    last = next(n for n in nodes if n.name == node.name)
    values = [u for u in last.users if u.target is operator.getitem] or [last]
    output = next(n for n in nodes if n.op == "output")
    output.args = (tuple(values),)
    head.graph.eliminate_dead_code()
    head.recompile()
    try:
        interpreter = fx.Interpreter(head, garbage_collect_values=False)
        ref = interpreter.run(*args)
        compiled = _compiled_prefix(head, {n.name for n in head.graph.nodes if n.op == "call_function"}, record,
                                    compile_regions)
        got = compiled(*args)
    except Exception:  # noqa: BLE001 -- cannot tell: counted as a difference
        return True
    if last.target in _SUMS and _within_summation_rounding(last, interpreter.env, got, ref):
        return False
    return first_difference(got, ref, float64_reference(head, args), uninitialised_outputs(head)) is not None


_SUMS = {torch.ops.aten.sum.dim_IntList, torch.ops.aten.sum.default, torch.ops.aten.mean.dim, torch.ops.aten.mean.default}


def _within_summation_rounding(node: fx.Node, env: dict, got, ref) -> bool:
    """A sum's rounding error grows with the sum of its terms' magnitudes, not with its result: IREE
    sums float32 in a different order than ATen's cascade, and over thousands of terms that cancel
    (a BatchNorm's backward) the two differ by more than the tolerance of the result. Whether the
    compiled sum is within that tolerance of the sum of magnitudes (the same reduction of ``|x|``)."""
    terms = env.get(node.args[0]) if isinstance(node.args[0], fx.Node) else None
    if not isinstance(terms, torch.Tensor) or not terms.is_floating_point():
        return False
    magnitudes = node.target(terms.abs(), *node.args[1:], **node.kwargs)
    g, r = _flat(got)[0], _flat(ref)[0]
    err = (g.detach().cpu().double() - r.detach().cpu().double()).abs()
    bound = RTOL.get(r.dtype, 1e-4) * magnitudes.detach().cpu().double().clamp(min=1.0)
    return bool((err <= bound).all())


def first_bad_node(region: fx.GraphModule, args, ref, exact: list | None, skip: frozenset[int],
                   record: metrics.GraphRecord, compile_regions) -> fx.Node | None:
    """The last node of the shortest prefix of ``region`` (in graph order) whose compiled form makes the
    region's result differ from ``ref``: the first node the compiler gets wrong. ``None`` when no prefix
    reproduces the difference (it needs nodes compiled together that a prefix splits apart) or a
    prefix fails to compile."""
    nodes = [n for n in region.graph.nodes if n.op == "call_function"]

    def differs(k: int) -> bool:
        out = _compiled_prefix(region, {n.name for n in nodes[:k]}, record, compile_regions)(*args)
        return first_difference(out, ref, exact, skip) is not None

    try:
        if not nodes or not differs(len(nodes)):
            return None
        lo, hi = 1, len(nodes)
        while lo < hi:
            mid = (lo + hi) // 2
            if differs(mid):
                hi = mid
            else:
                lo = mid + 1
    except Exception as err:  # noqa: BLE001 -- the mismatch is still reported, without the node
        warnings.warn(f"torchneuron: could not bisect region {record.graph_id}: {type(err).__name__}: {err}",
                      RuntimeWarning, stacklevel=2)
        return None
    return nodes[lo - 1]


def verified(compiled: dict[str, torch.nn.Module], regions: dict[str, fx.GraphModule], record: metrics.GraphRecord,
             compile_regions, dump=None) -> dict[str, torch.nn.Module]:
    """Each compiled region wrapped in a :class:`VerifiedRegion` (regions left as eager graphs stay)."""
    return {name: module if module is regions.get(name) else
            VerifiedRegion(name, module, regions[name], record, compile_regions, dump)
            for name, module in compiled.items()}
