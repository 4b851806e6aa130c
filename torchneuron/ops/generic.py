"""The generic device kernel: runs any ATen operator on device memory.

The simulated NeuronCore executes an operator with the CPU's ATen kernel on *host aliases* of
the device tensors (the same bytes, no copy), then maps each result back to the device:

* a result that *is* one of the aliases passed in (in-place and ``out=`` ops) → that device
  tensor (re-pointed if the kernel resized it);
* a result that shares an input's bytes (a view) → a device view with the same geometry;
* anything else is fresh memory the kernel allocated → adopted as a device allocation.

Execution follows the chip's contract: the chip's dtype rules are applied, random ops draw from
the device generator, and an error raised while the kernel *runs* (after its shapes were
checked) is deferred to the next synchronisation point with its context. Shape and argument
errors, which the real stack reports while building the launch, raise at once.
"""

from __future__ import annotations

from time import perf_counter_ns

import torch
from torch.utils._pytree import tree_map

from ..runtime import activity, devices, lazy, rng
from ..runtime.errors import ERRORS, NeuronRuntimeError, launch_blocking, make_context
from ..runtime.storage import (
    empty_device,
    forget_alias,
    fresh_host,
    has_device_memory,
    host,
    repoint,
    view_of,
    wrap_host,
)
from . import dtype_policy, tracking
from .opinfo import OpFacts, facts

_EMULATED = dtype_policy.EMULATED
_NATIVE = dtype_policy.SUPPORTED - dtype_policy.EMULATED
_HOST_COMPUTED = dtype_policy.HOST_COMPUTED
_NOT_FAST = dtype_policy.EMULATED | dtype_policy.HOST_COMPUTED  # dtypes the lean kernels hand to run()

_Tensor = torch.Tensor
_Device = torch.device
_NEURON = "neuron"
_CPU_DEVICE = torch.device("cpu")
_META_DEVICE = torch.device("meta")
_NOT_RECORDED = lazy.NOT_RECORDED


def cross_device_error(a: int, b: int) -> RuntimeError:
    return RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"neuron:{min(a, b)} and neuron:{max(a, b)}!"
    )


def foreign_device_error(index: int, other: _Tensor) -> RuntimeError:
    return RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"neuron:{index} and {other.device}!"
    )


# operators that take host tensors beside device tensors, as on CUDA: copies between devices,
# and indexing, whose index tensors may stay on the host
CROSS_DEVICE_OPS = frozenset({
    "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize", "aten::_to_copy",
    "aten::index.Tensor", "aten::index.Tensor_out", "aten::_unsafe_index.Tensor",
    "aten::index_put_", "aten::index_put", "aten::_index_put_impl_", "aten::_unsafe_index_put",
})


def is_foreign(t: _Tensor) -> bool:
    """A tensor a device operator must not mix with device tensors: one on another device,
    except a 0-d host tensor, which operators take as a number (as CUDA's do)."""
    return t.device.type != _NEURON and (t.dim() != 0 or t.device.type != "cpu")


def check_one_device(f: OpFacts, args, kwargs) -> None:
    """PyTorch's error for an ATen operator given device tensors and host (or other devices')
    tensors: the chip's kernels read device memory only, and a model that forgot a ``.to()``
    must fail here as it would on the hardware (or on CUDA)."""
    if f.qualified in CROSS_DEVICE_OPS or not f.qualified.startswith("aten::"):
        return
    index = foreign = None
    for a in (*args, *kwargs.values()):
        for x in a if type(a) in (list, tuple) else (a,):
            if isinstance(x, _Tensor):
                if x.device.type == _NEURON:
                    index = x.get_device() if index is None else index
                elif foreign is None and is_foreign(x):
                    foreign = x
    if foreign is not None and index is not None:
        raise foreign_device_error(index, foreign)


class _Unwrap:
    """Replaces device tensors by host aliases and remembers which alias stands for which.

    ``index`` is the core the operator runs on: its device tensors' core (they must agree, as
    on any multi-device backend), else the core a factory-style ``device=`` argument names."""

    __slots__ = ("by_ptr", "by_id", "emulate", "fresh", "index", "foreign")

    def __init__(self, fresh: bool):
        self.by_ptr: dict[int, _Tensor] = {}
        self.by_id: dict[int, tuple[_Tensor, _Tensor]] = {}
        self.emulate = False
        self.fresh = fresh
        self.index: int | None = None
        self.foreign: _Tensor | None = None  # a tensor of another device (see ``is_foreign``)

    def _on(self, index: int) -> None:
        if self.index is None:
            self.index = index
        elif index != self.index:
            raise cross_device_error(index, self.index)

    def one(self, a):
        if type(a) is _Tensor or isinstance(a, _Tensor):
            if a.device.type != _NEURON:
                if self.foreign is None and is_foreign(a):
                    self.foreign = a
                return a
            self._on(a.get_device())
            h = fresh_host(a) if self.fresh else host(a)
            self.by_id[id(h)] = (h, a)
            if h.untyped_storage().nbytes():
                self.by_ptr.setdefault(h.untyped_storage().data_ptr(), a)
            if a.dtype in dtype_policy.EMULATED:
                self.emulate = True
            return h
        if type(a) in (list, tuple):
            return type(a)(self.one(x) for x in a)
        if type(a) is _Device and a.type == _NEURON:
            if self.index is None:
                self.index = devices.index_of(a)
            return _CPU_DEVICE  # factory-style ops: the kernel allocates on the host
        return a


def _to_device(r, unwrap: _Unwrap):
    if isinstance(r, _Tensor):
        if r.device.type != "cpu":
            return r
        hit = unwrap.by_id.get(id(r))
        if hit is not None and hit[0] is r:
            return hit[1]
        st = r.untyped_storage()
        if st.nbytes():
            base = unwrap.by_ptr.get(st.data_ptr())
            if base is not None:
                return view_of(base, r)
        if r.dtype not in dtype_policy.STORABLE:
            dtype_policy.check_supported(r.dtype)
        return wrap_host(r, index=unwrap.index or 0)
    if type(r) in (list, tuple):
        return type(r)(_to_device(x, unwrap) for x in r)
    return r


def _fix_written(f: OpFacts, args, kwargs, hargs, hkwargs) -> None:
    """After an in-place/out op, re-point device tensors whose host alias was resized."""
    for w in f.written:
        if isinstance(w, int):
            if w >= len(args):
                continue
            d, h = args[w], hargs[w]
        else:
            if w not in kwargs:
                continue
            d, h = kwargs[w], hkwargs[w]
        if isinstance(d, _Tensor) and isinstance(h, _Tensor):
            _sync_metadata(d, h)
        elif isinstance(d, (list, tuple)):
            for dd, hh in zip(d, h, strict=False):
                if isinstance(dd, _Tensor) and isinstance(hh, _Tensor):
                    _sync_metadata(dd, hh)


def _sync_metadata(d: _Tensor, h: _Tensor) -> None:
    if d.device.type != _NEURON:
        return
    same_storage = h.untyped_storage().data_ptr() == d.untyped_storage().data_ptr() and (
        h.untyped_storage().nbytes() == d.untyped_storage().nbytes()
    )
    if same_storage and h.shape == d.shape and h.stride() == d.stride() and h.storage_offset() == d.storage_offset():
        return
    # the kernel restrided or reallocated the alias it was given: the cached alias (if it was
    # that object) no longer describes the storage's original geometry
    forget_alias(d)
    if same_storage:
        repoint(d, None, h.shape, h.stride(), h.storage_offset())
    else:
        from ..runtime import state

        block = state.allocator(d.get_device()).adopt(h.untyped_storage())
        repoint(d, block, h.shape, h.stride(), h.storage_offset())


def _meta(a):
    if isinstance(a, _Tensor) and a.device.type == _NEURON:
        return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
    if type(a) is _Device and a.type == _NEURON:
        return _META_DEVICE
    return a


def _deferred_outputs(op, args, kwargs, f: OpFacts, err: BaseException):
    """Outputs with the right metadata for an op whose kernel failed while running.

    Raises at once (as the CPU would) when the failure is a shape/argument error, i.e. the
    op's meta function rejects the inputs too.
    """
    try:
        margs = tree_map(_meta, args)
        mkwargs = tree_map(_meta, kwargs)
        mout = op(*margs, **mkwargs)
    except Exception:
        raise err from None
    index = core_of(args, kwargs)

    def realise(m):
        if isinstance(m, _Tensor):
            # new device memory of the right geometry, filled with NaN (floats) or zeros
            t = empty_device(m.shape, m.stride(), m.dtype, index)
            if t.numel():
                host(t).fill_(float("nan") if m.dtype.is_floating_point else 0)
            return t
        if type(m) in (list, tuple):
            return type(m)(realise(x) for x in m)
        return m

    if f.inplace_or_out:
        # results of in-place / out= ops are the written arguments themselves
        written = []
        for w in f.written:
            if isinstance(w, int) and w < len(args):
                written.append(args[w])
            elif isinstance(w, str) and w in kwargs:
                written.append(kwargs[w])
        if len(written) == 1 and not isinstance(mout, (list, tuple)):
            return written[0]
        if isinstance(mout, tuple) and len(written) == len(mout):
            return tuple(written)
    return realise(mout)


def core_of(args, kwargs, default: int | None = 0) -> int | None:
    """The core an operator with these arguments runs on (see ``_Unwrap.index``; ``default``
    when it names none); raises PyTorch's device error for device tensors on two cores."""
    u = _Unwrap(False)
    for a in (*args, *kwargs.values()):
        for x in a if type(a) in (list, tuple) else (a,):
            if isinstance(x, _Tensor) and x.device.type == _NEURON:
                u._on(x.get_device())
    if u.index is None:
        for a in (*args, *kwargs.values()):
            if type(a) is _Device and a.type == _NEURON:
                return devices.index_of(a)
        return default
    return u.index


def _fast_unwrap(a, flags: list):
    """The lean kernels' unwrapping: ``neuron:0`` work only (``flags`` gets an entry for anything
    else, which the general path then runs)."""
    if isinstance(a, _Tensor):
        if a.is_cpu or a.device.type != _NEURON:
            if is_foreign(a):
                flags.append(True)  # the general path raises PyTorch's device error
            return a
        if a.dtype in _NOT_FAST or a.get_device():
            flags.append(True)
        return host(a)
    if type(a) in (list, tuple):
        return type(a)(_fast_unwrap(x, flags) for x in a)
    if type(a) is _Device and a.type == _NEURON:
        if a.index or (a.index is None and devices.current()):
            flags.append(True)
        return _CPU_DEVICE
    return a


def functional_kernel(op: torch._ops.OpOverload):
    """A kernel for an op that only reads its inputs and returns fresh tensors.

    Such outputs cannot alias an input, so no aliasing bookkeeping is needed: inputs become
    host aliases, outputs are adopted as device memory. Anything unusual (an emulated dtype,
    an error) takes the general path.
    """
    f = facts(op)
    qualified = f.qualified
    call = op._op
    counter = tracking._executed

    def kernel(*args, **kwargs):
        if lazy.RECORDER is not None:
            r = lazy.RECORDER(op, args, kwargs)
            if r is not _NOT_RECORDED:
                return r
        counter[qualified] += 1
        flags: list = []
        hargs = [_fast_unwrap(a, flags) for a in args]
        if kwargs:
            hkwargs = {k: _fast_unwrap(v, flags) for k, v in kwargs.items()}
        else:
            hkwargs = kwargs
        if flags:
            counter[qualified] -= 1
            return run(op, args, kwargs)
        try:
            if activity.RECORDER is None:
                out = call(*hargs, **hkwargs)
            else:
                t0 = perf_counter_ns()
                out = call(*hargs, **hkwargs)
                activity.RECORDER.record("kernel", qualified, hargs, out, t0, perf_counter_ns())
        except Exception as err:  # noqa: BLE001 - every kernel error follows the queue's contract
            return _on_error(op, f, args, kwargs, err)
        if isinstance(out, _Tensor):
            dt = out.dtype
            if dt not in _NATIVE:
                if dt in _EMULATED:
                    _narrow_outputs(out, _Unwrap(False))
                else:
                    _host_computed_results(f, args, kwargs, out)
            return wrap_host(out)
        if type(out) in (list, tuple):
            _host_computed_results(f, args, kwargs, out)
            if _has_emulated_output(out):
                _narrow_outputs(out, _Unwrap(False))
            return type(out)(wrap_host(o) if isinstance(o, _Tensor) else o for o in out)
        return out

    kernel.__name__ = f"neuron_{op.__name__}"
    return _geometry_only(kernel) if qualified in GEOMETRY_ONLY else kernel


# factories that read only their input's geometry. FakeTensor's fallback for an op whose meta
# check raises builds real inputs with ``zeros_like(fake_tensor)`` (``run_fallback_kernel``):
# such a fake input has no device memory, and needs none
GEOMETRY_ONLY = frozenset({"aten::empty_like", "aten::zeros_like", "aten::ones_like", "aten::full_like"})


def _geometry_only(kernel):
    def geometry_only_kernel(self, *args, **kwargs):
        if isinstance(self, _Tensor) and self.device.type == _NEURON and not has_device_memory(self):
            self = torch.empty_strided(self.shape, self.stride(), dtype=self.dtype, device=self.device)
        return kernel(self, *args, **kwargs)

    geometry_only_kernel.__name__ = kernel.__name__
    return geometry_only_kernel


def inplace_kernel(op: torch._ops.OpOverload):
    """A kernel for an in-place op that writes only into ``self`` and returns it.

    The host kernel writes straight into the device memory through the alias; in-place ops
    never resize ``self``, so nothing needs re-pointing.
    """
    f = facts(op)
    qualified = f.qualified
    call = op._op
    counter = tracking._executed
    returns_self = bool(op._schema.returns)

    def kernel(*args, **kwargs):
        if lazy.RECORDER is not None:
            r = lazy.RECORDER(op, args, kwargs)
            if r is not _NOT_RECORDED:
                return r
        counter[qualified] += 1
        flags: list = []
        hargs = [_fast_unwrap(a, flags) for a in args]
        hkwargs = {k: _fast_unwrap(v, flags) for k, v in kwargs.items()} if kwargs else kwargs
        if flags:
            counter[qualified] -= 1
            return run(op, args, kwargs)
        try:
            if activity.RECORDER is None:
                call(*hargs, **hkwargs)
            else:
                t0 = perf_counter_ns()
                call(*hargs, **hkwargs)
                activity.RECORDER.record("kernel", qualified, hargs, hargs[0], t0, perf_counter_ns())
        except Exception as err:  # noqa: BLE001 - every kernel error follows the queue's contract
            return _on_error(op, f, args, kwargs, err)
        d, h = args[0], hargs[0]
        if isinstance(d, _Tensor) and h.shape != d.shape:
            _sync_metadata(d, h)  # a few legacy in-place ops (addbmm_ …) resize self
        return args[0] if returns_self else None

    kernel.__name__ = f"neuron_{op.__name__}"
    return kernel


def with_device_generator(f: OpFacts, hargs: tuple, hkwargs: dict, index: int = 0):
    """Random ops draw from core ``index``'s generator: fill in a ``generator`` argument left
    None, and give the host kernel the CPU generator behind an explicit ``neuron`` generator."""
    if f.generator_name is not None:
        if f.generator_pos is not None and f.generator_pos < len(hargs):
            g = hargs[f.generator_pos]
            g = rng.generator(index) if g is None else rng.host_generator(g)
            hargs = hargs[: f.generator_pos] + (g,) + hargs[f.generator_pos + 1:]
        else:
            g = hkwargs.get(f.generator_name)
            hkwargs[f.generator_name] = rng.generator(index) if g is None else rng.host_generator(g)
    return hargs, hkwargs


def call_host(op, f: OpFacts, hargs, hkwargs, index: int = 0):
    """Run the host kernel; kernels with no generator argument see core ``index``'s stream."""
    if f.random_without_generator:
        with rng.as_cpu_default(index):
            return op(*hargs, **hkwargs)
    return op(*hargs, **hkwargs)


# allocations compute nothing: device memory holds complex and uint16/32/64 tensors
_ALLOCATIONS = frozenset({"aten::empty.memory_format", "aten::empty_strided", "aten::empty_like",
                          "aten::new_empty", "aten::new_empty_strided"})


def _host_computed_results(f: OpFacts, args, kwargs, out) -> None:
    """Results of a dtype the chip cannot compute (complex, uint16/32/64) from inputs it holds
    natively: account the op as a CPU fallback (not an allocation: ``empty_like(x,
    dtype=torch.complex64)``, as ``x.to(torch.complex64)`` starts); refuse dtypes device memory
    cannot hold."""
    outs = out if type(out) in (list, tuple) else (out,)
    host_computed = False
    for o in outs:
        if isinstance(o, _Tensor) and o.dtype not in dtype_policy.SUPPORTED:
            dtype_policy.check_supported(o.dtype)
            host_computed = True
    if host_computed and f.qualified not in _ALLOCATIONS:
        from .fallback import account_host_results

        account_host_results(f, args, kwargs, out)


def reads_host_computed(args, kwargs) -> bool:
    for a in (*args, *kwargs.values()):
        if isinstance(a, _Tensor):
            if a.dtype in _HOST_COMPUTED and a.device.type == _NEURON:
                return True
        elif type(a) in (list, tuple):
            for x in a:
                if isinstance(x, _Tensor) and x.dtype in _HOST_COMPUTED and x.device.type == _NEURON:
                    return True
    return False


def run(op: torch._ops.OpOverload, args: tuple, kwargs: dict):
    """Execute ``op`` on the simulated core (see module docstring)."""
    if reads_host_computed(args, kwargs):
        from . import fallback  # the chip has no arithmetic for these dtypes

        return fallback.run(op, args, kwargs)
    f = facts(op)
    if f.sync_point:
        ERRORS.raise_pending()
    tracking.executed(f.qualified)
    unwrap = _Unwrap(fresh=f.metadata_mutating)
    hargs = tuple(unwrap.one(a) for a in args)
    hkwargs = {k: unwrap.one(v) for k, v in kwargs.items()} if kwargs else {}
    if unwrap.foreign is not None and unwrap.by_id:
        check_one_device(f, args, kwargs)
    index = unwrap.index or 0
    hargs, hkwargs = with_device_generator(f, hargs, hkwargs, index)
    emulate = unwrap.emulate and not dtype_policy.exact()
    if emulate:
        hargs, hkwargs = _narrow_inputs(f, hargs, hkwargs)
    t0 = perf_counter_ns()
    try:
        out = call_host(op, f, hargs, hkwargs, index)
        if activity.RECORDER is not None:
            activity.RECORDER.record("kernel", f.qualified, hargs, out, t0, perf_counter_ns())
    except Exception as err:  # noqa: BLE001 - every kernel error follows the queue's contract
        return _on_error(op, f, args, kwargs, err)
    if f.inplace_or_out:
        _fix_written(f, args, kwargs, hargs, hkwargs)
    if emulate or _has_emulated_output(out):
        _narrow_outputs(out, unwrap)
    if not f.inplace_or_out:
        _host_computed_results(f, args, kwargs, out)
    return _to_device(out, unwrap)


def _on_error(op, f: OpFacts, args, kwargs, err: BaseException):
    ctx = make_context("eager kernel execution", f.qualified, args, kwargs, err)
    if launch_blocking():
        outs = _deferred_outputs(op, args, kwargs, f, err)  # raises shape errors as-is
        del outs
        raise NeuronRuntimeError(ctx.format(launch_blocking=True), ctx) from err
    outs = _deferred_outputs(op, args, kwargs, f, err)
    ERRORS.record(ctx)
    return outs


def _narrow_inputs(f: OpFacts, hargs, hkwargs):
    written = set(f.written)

    def narrow(i, a):
        if i in written:
            return a
        if isinstance(a, _Tensor):
            return dtype_policy.narrow_input(a)
        if type(a) in (list, tuple):
            return type(a)(dtype_policy.narrow_input(x) if isinstance(x, _Tensor) else x for x in a)
        return a

    hargs = tuple(narrow(i, a) for i, a in enumerate(hargs))
    hkwargs = {k: narrow(k, v) for k, v in hkwargs.items()}
    return hargs, hkwargs


def _has_emulated_output(out) -> bool:
    if isinstance(out, _Tensor):
        return out.dtype in dtype_policy.EMULATED
    if type(out) in (list, tuple):
        return any(isinstance(o, _Tensor) and o.dtype in dtype_policy.EMULATED for o in out)
    return False


def _narrow_outputs(out, unwrap: _Unwrap) -> None:
    if dtype_policy.exact():
        return
    if isinstance(out, _Tensor):
        if out.dtype in dtype_policy.EMULATED and out.device.type == "cpu":
            # a view of an input is not a computed value: leave the input's bytes alone
            st = out.untyped_storage()
            hit = unwrap.by_id.get(id(out))
            is_view = st.nbytes() and st.data_ptr() in unwrap.by_ptr and not (hit and hit[0] is out)
            if not is_view:
                dtype_policy.narrow_output_(out)
    elif type(out) in (list, tuple):
        for o in out:
            _narrow_outputs(o, unwrap)
