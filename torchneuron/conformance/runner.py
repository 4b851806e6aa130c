"""Runs one conformance case: an OpInfo op on CPU and on ``neuron``, compared.

Every sample is generated on CPU under a fixed seed and moved to the device with *the same
sizes, strides and storage offset* (see :func:`copy_exact`), so non-contiguous, expanded and
offset samples reach the device exactly as the CPU kernel sees them. A sample the CPU itself
rejects is not applicable; a case with no applicable sample raises :class:`NotApplicable`.
A mismatch raises :class:`AssertionError` naming the sample.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.utils._pytree import tree_flatten, tree_map

from .cases import DTYPES, Case, kind, ops

NEURON = torch.device("neuron")
SAMPLE_SEED = 0
RNG_SEED = 1234

# Per result dtype (rtol, atol): torch.testing.assert_close's defaults; integer and bool results
# compare exactly. float64 is computed as float32 on the chip (DESIGN §dtype policy) and every
# emulated step rounds to float32, so float64 results get float32 precision with room for a
# short chain of such roundings.
_DEFAULT_TOL = {
    torch.float32: (1.3e-6, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float16: (1e-3, 1e-5),
    torch.float64: (1e-5, 1e-5),
}
# Ops that compute in float64 whatever their inputs: on the chip every step rounds to float32,
# so even their float32 results (gradients) get the float64-as-float32 tolerance.
_FLOAT64_INTERNALLY = frozenset({"float_power"})
# OpInfo test names whose per-op tolerance overrides describe what our variants check.
_TOL_TESTS = frozenset(
    {None, "test_compare_cpu", "test_variant_consistency_eager", "test_noncontiguous_samples", "test_out"}
)


class NotApplicable(Exception):  # noqa: N818 - a verdict, not an error
    """No sample of the case is accepted by the CPU for this variant/dtype."""


# ---- tolerances ------------------------------------------------------------------------------
def tolerance(op, dtype: torch.dtype, grad: bool = False) -> tuple[float, float]:
    """OpInfo's own per-op CPU tolerance override for the case's dtype, ``(0, 0)`` if none.

    :func:`compare` uses the larger of this and the result dtype's default."""
    from torch.testing._internal.common_device_type import toleranceOverride

    rtol, atol = _DEFAULT_TOL[torch.float64] if op.name in _FLOAT64_INTERNALLY else (0.0, 0.0)
    tests = _TOL_TESTS | ({"test_fn_grad", "test_fn_gradgrad"} if grad else set())
    for info in getattr(op, "decorators", ()):
        device = getattr(info, "device_type", None)
        devices = device if isinstance(device, (tuple, list)) else (device,)
        if not (None in devices or "cpu" in devices) or getattr(info, "test_name", None) not in tests:
            continue
        for dec in getattr(info, "decorators", ()):
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                tol = dec.d[dtype]
                rtol, atol = max(rtol, tol.rtol), max(atol, tol.atol)
    return rtol, atol


# ---- moving samples to the device ------------------------------------------------------------
def copy_exact(tree, device: torch.device | str = NEURON, memo: dict | None = None):
    """Copy every CPU tensor in ``tree`` to ``device`` keeping sizes, strides, storage offset,
    the bytes outside the view, aliasing (tensors sharing a storage share the copy) and
    ``requires_grad`` (as leaves). For ``neuron``, ``device="cpu"`` arguments become ``neuron``."""
    memo = {} if memo is None else memo
    device = torch.device(device)
    to_neuron = device.type == "neuron"

    def move(x):
        if isinstance(x, torch.Tensor):
            if x.device.type != "cpu" or x.layout != torch.strided:
                return x
            src = x.detach()
            st = src.untyped_storage()
            flat = memo.get((st.data_ptr(), src.dtype))
            if flat is None:
                n = st.nbytes() // src.element_size()
                flat = torch.empty(0, dtype=src.dtype).set_(st, 0, (n,), (1,)).to(device, copy=True)
                memo[(st.data_ptr(), src.dtype)] = flat
            d = flat.as_strided(src.shape, src.stride(), src.storage_offset()).detach()
            return d.requires_grad_(x.requires_grad)
        if to_neuron and isinstance(x, torch.device) and x.type == "cpu":
            return NEURON
        if to_neuron and isinstance(x, str) and x == "cpu":
            return "neuron"
        return x

    return tree_map(move, tree)


# ---- comparison --------------------------------------------------------------------------------
def compare(dev, ref, tol: tuple[float, float], what: str, values: bool = True, where: bool = True) -> None:
    """``dev`` (device result) matches ``ref`` (CPU result): structure, device, dtype, shape, values."""
    if isinstance(ref, torch.Tensor):
        assert isinstance(dev, torch.Tensor), f"{what}: expected a tensor, got {type(dev).__name__}"
        want_device = "neuron" if ref.device.type == "cpu" else ref.device.type
        assert not where or dev.device.type == want_device, f"{what}: result on {dev.device}, expected {want_device}"
        assert dev.dtype == ref.dtype, f"{what}: dtype {dev.dtype}, expected {ref.dtype}"
        assert dev.shape == ref.shape, f"{what}: shape {tuple(dev.shape)}, expected {tuple(ref.shape)}"
        if values:
            rtol, atol = _DEFAULT_TOL.get(ref.dtype, (0.0, 0.0))
            rtol, atol = max(rtol, tol[0]), max(atol, tol[1])
            torch.testing.assert_close(
                dev.detach().cpu(), ref.detach(), rtol=rtol, atol=atol, equal_nan=True,
                check_device=False, msg=lambda m: f"{what}: {m}",
            )
        return
    if isinstance(ref, (list, tuple)):
        assert isinstance(dev, (list, tuple)) and len(dev) == len(ref), (
            f"{what}: expected a sequence of {len(ref)}, got {type(dev).__name__}"
        )
        for i, (d, r) in enumerate(zip(dev, ref, strict=True)):
            compare(d, r, tol, f"{what}[{i}]", values, where)
        return
    if isinstance(ref, dict):
        assert isinstance(dev, dict) and dev.keys() == ref.keys(), f"{what}: dict keys differ"
        for k in ref:
            compare(dev[k], ref[k], tol, f"{what}[{k!r}]", values, where)
        return
    if not values:
        return
    if isinstance(ref, float) and isinstance(dev, float) and math.isnan(ref) and math.isnan(dev):
        return
    if isinstance(ref, (int, float, complex)) and not isinstance(ref, bool):
        rtol, atol = _DEFAULT_TOL[torch.float64] if isinstance(ref, float) else (0.0, 0.0)
        torch.testing.assert_close(
            dev, ref, rtol=max(rtol, tol[0]), atol=max(atol, tol[1]), msg=lambda m: f"{what}: {m}"
        )
        return
    assert dev == ref, f"{what}: {dev!r} != {ref!r}"


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _exact_equal(a, b, what: str) -> None:
    for x, y in zip(_tensors(a), _tensors(b), strict=True):
        assert torch.equal(x.detach().cpu(), y.detach().cpu()), f"{what}: not reproducible under torch.neuron.manual_seed"


# ---- samples -----------------------------------------------------------------------------------
def samples(op, dtype: torch.dtype, requires_grad: bool, limit: int) -> list:
    torch.manual_seed(SAMPLE_SEED)
    out = []
    for s in op.sample_inputs("cpu", dtype, requires_grad=requires_grad):
        if any(t.layout != torch.strided for t in _tensors((s.input, s.args, s.kwargs))):
            continue  # sparse / nested samples: the device has strided tensors only
        out.append(s)
        if len(out) >= limit:
            break
    return out


def _call(fn: Callable, sample, **extra):
    return fn(sample.input, *sample.args, **sample.kwargs, **extra)


# Ops whose tensor arguments (besides the input) must stay on the CPU by their contract.
_HOST_ARGS = frozenset({"tensor_split"})


def _moved(sample, device, op_name: str = ""):
    if op_name in _HOST_ARGS and torch.device(device).type == "neuron":
        inp = copy_exact(sample.input, device)
        args, kwargs = copy_exact((sample.args, sample.kwargs), "cpu")
    else:
        inp, args, kwargs = copy_exact((sample.input, sample.args, sample.kwargs), device)
    return type(sample)(inp, args=args, kwargs=kwargs, output_process_fn_grad=sample.output_process_fn_grad)


def _dev(sample):
    """A fresh device copy of the sample, with the CPU sample's exact layout."""
    return _moved(sample, NEURON, _CURRENT_OP[0])


_CURRENT_OP = [""]


def _clone(sample):
    """A fresh CPU copy of the sample, with its exact layout (the reference run may mutate it)."""
    return _moved(sample, "cpu")


# ---- variants ----------------------------------------------------------------------------------
def _seeded(fn: Callable):
    torch.neuron.manual_seed(RNG_SEED)
    return fn()


def _forward(op, s, tol, nature: str, what: str, fn: Callable | None = None) -> bool:
    fn = fn or op
    cpu_s = _clone(s)
    try:
        ref = _call(fn, cpu_s)
    except Exception:
        return False
    dev_s = _dev(s)
    got = _seeded(lambda: _call(fn, dev_s))
    compare(got, ref, tol, what, values=nature == "deterministic")
    if nature == "deterministic":
        # ops that write their inputs (in-place variants, max_norm=...) write the same values
        compare(
            _tensors((dev_s.input, dev_s.args, dev_s.kwargs)),
            _tensors((cpu_s.input, cpu_s.args, cpu_s.kwargs)), tol, f"{what} inputs after the call",
            where=False,  # (arguments that must stay on the host stay there)
        )
    elif nature == "random":
        again = _seeded(lambda: _call(fn, _dev(s)))
        _exact_equal(got, again, what)
    return True


def _out(op, s, tol, nature: str, what: str) -> bool:
    try:
        ref = _call(op, _clone(s))
        refs = list(ref) if isinstance(ref, (tuple, list)) else [ref]
        if not refs or not all(isinstance(r, torch.Tensor) for r in refs):
            return False
        cpu_out = [torch.empty_like(r) for r in refs]
        cpu_ptrs = [t.data_ptr() for t in cpu_out]
        cpu_res = _call(op, _clone(s), out=cpu_out[0] if not isinstance(ref, (tuple, list)) else tuple(cpu_out))
    except Exception:
        return False
    values = nature == "deterministic"
    single = not isinstance(ref, (tuple, list))
    # 1. an out= tensor of the right shape: written in place, same storage
    dev_out = [torch.empty_like(r, device=NEURON) for r in refs]
    ptrs = [t.data_ptr() for t in dev_out]
    got = _seeded(lambda: _call(op, _dev(s), out=dev_out[0] if single else tuple(dev_out)))
    if cpu_res is not None:  # (ops such as split_with_sizes_copy.out return nothing)
        got_list = [got] if single else list(got)
        assert len(got_list) == len(dev_out) and all(g is o for g, o in zip(got_list, dev_out, strict=True)), (
            f"{what}: out= did not return the given out tensor(s)"
        )
    for t, p, c, cp in zip(dev_out, ptrs, cpu_out, cpu_ptrs, strict=True):
        if c.data_ptr() == cp:
            assert t.data_ptr() == p, f"{what}: out= tensor moved to new storage although its shape fits"
    compare(dev_out, cpu_out, tol, what, values)
    # 2. an empty out= tensor: resized to the result (where the CPU kernel resizes it too)
    try:
        cpu_empty = [torch.empty(0, dtype=r.dtype) for r in refs]
        _call(op, _clone(s), out=cpu_empty[0] if single else tuple(cpu_empty))
    except Exception:
        return True
    dev_empty = [torch.empty(0, dtype=r.dtype, device=NEURON) for r in refs]
    _seeded(lambda: _call(op, _dev(s), out=dev_empty[0] if single else tuple(dev_empty)))
    compare(dev_empty, cpu_empty, tol, f"{what} (resized out=)", values)
    return True


def _inplace(op, s, tol, nature: str, what: str) -> bool:
    fn = op.inplace_variant
    cpu_s = _clone(s)
    cpu_ptr = cpu_s.input.data_ptr()
    try:
        ref = _call(fn, cpu_s)
    except Exception:
        return False
    dev_s = _dev(s)
    ptr = dev_s.input.data_ptr()
    got = _seeded(lambda: _call(fn, dev_s))
    assert got is dev_s.input, f"{what}: the in-place variant did not return self"
    if cpu_s.input.data_ptr() == cpu_ptr:  # (some CPU kernels resize or restride self)
        assert dev_s.input.data_ptr() == ptr, f"{what}: the in-place variant moved self to new storage"
    compare(got, ref, tol, what, values=nature == "deterministic")
    if nature == "random":
        again_s = _dev(s)
        _seeded(lambda: _call(fn, again_s))
        _exact_equal(dev_s.input, again_s.input, what)
    return True


def _grad_run(s, op, grad_outputs):
    out = s.output_process_fn_grad(_call(op, s))
    outs = [t for t in _tensors(out) if t.requires_grad]
    inputs = [t for t in _tensors((s.input, s.args, s.kwargs)) if t.requires_grad]
    if not outs or not inputs:
        return None, outs
    gos = grad_outputs(outs)
    return torch.autograd.grad(outs, inputs, gos, allow_unused=True), outs


def _grad(op, s, tol, what: str) -> bool:
    cache: list[torch.Tensor] = []

    def cpu_grads(outs):
        g = torch.Generator().manual_seed(RNG_SEED)
        cache[:] = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in outs]
        return cache

    try:
        ref, ref_outs = _grad_run(_clone(s), op, cpu_grads)
    except Exception:
        return False
    if ref is None:
        return False
    dev_s = _dev(s)
    got, _ = _grad_run(dev_s, op, lambda outs: [c.to(NEURON) for c in cache])
    assert got is not None, f"{what}: no differentiable output on the device"
    for i, (g, r) in enumerate(zip(got, ref, strict=True)):
        if r is None:
            assert g is None, f"{what}: grad[{i}] is defined on the device but not on CPU"
            continue
        assert g is not None, f"{what}: grad[{i}] is None on the device"
        compare(g, r, tol, f"{what} grad[{i}]")
    return True


def run_case(case: Case, limit: int = 16) -> int:
    """Run ``case``; returns the number of samples checked. Raises on a mismatch."""
    op = ops()[case.op]
    _CURRENT_OP[0] = op.name
    dtype = DTYPES[case.dtype]
    nature = kind(case.op)
    grad = case.variant == "grad"
    tol = tolerance(op, dtype, grad=grad)
    checked = 0
    for i, s in enumerate(samples(op, dtype, requires_grad=grad, limit=limit)):
        what = f"sample {i} ({s.name or 'unnamed'})"
        if case.variant == "forward":
            ok = _forward(op, s, tol, nature, what)
        elif case.variant == "noncontig":
            ok = _forward(op, s.noncontiguous(), tol, nature, what + " non-contiguous")
        elif case.variant == "out":
            ok = _out(op, s, tol, nature, what)
        elif case.variant == "inplace":
            ok = _inplace(op, s, tol, nature, what)
        else:
            ok = _grad(op, s, tol, what)
        checked += ok
    if not checked:
        raise NotApplicable(f"no sample of {case.op} is accepted by the CPU for {case.variant}/{case.dtype}")
    return checked
