"""Installs the device's kernels into PyTorch's dispatcher under the PrivateUse1 key.

Every ATen overload that reaches a backend kernel gets a direct PrivateUse1 registration (the
generic device kernel unless a dedicated one exists): a registered kernel costs about a
microsecond to enter, a boxed Python fallback tens of microseconds, and functional structured
ops would otherwise run as ``empty`` + ``op.out`` (two trips). View-producing composite ops
keep PyTorch's composite kernels, which build the view through ``as_strided``. Operators of
other namespaces (torchvision, custom ops) reach the generic kernel through the boxed fallback.
"""

from __future__ import annotations

import torch

from ..native import fast
from ..runtime import lazy
from . import attention, autocast, compute_kernels, fallback, generic, memory_ops, placement
from .opinfo import facts

_libs: list[torch.library.Library] = []
_has = torch._C._dispatch_has_kernel_for_dispatch_key


def _histc(device_kernel, cpu_kernel):
    """``histc`` on the device when the call fixes its range (it compiles for the chip:
    ``compiler/histogram.py``), on the CPU when the range comes from the data (the host reads
    the data to pick it). Integer tensors: accelerators accept them (transformers' MoE routing
    relies on it), the host kernel does not; counted in float32, returned in the input's dtype."""

    def histc(self, bins=100, min=0, max=0):
        from ..compiler.histogram import fixed_range  # (not at ``import torch``)

        counted = self if self.is_floating_point() else self.to(torch.float32)
        kernel = device_kernel if fixed_range(counted.dtype, bins, min, max) else cpu_kernel
        out = kernel(counted, bins, min, max)
        return out if counted is self else out.to(self.dtype)

    return histc


def _boxed_fallback(keyset, op, *args, **kwargs):
    return generic.run(op, args, kwargs)


# dtypes whose tensors the C++ fast kernels take (others go to the Python kernel)
_FAST_DTYPES = frozenset({"float32", "bfloat16", "float16", "int8", "int16", "int32", "int64", "uint8", "bool",
                          "float8_e4m3fn", "float8_e5m2", "float64"})


def _plain_device_op(op) -> bool:
    """An operator the C++ fast kernels can serve: on the device for every dtype they take,
    functional with fresh results or in-place on its first argument only."""
    f = facts(op)
    cpu = placement.cpu_dtypes(f.qualified)
    return cpu is not True and not (cpu & _FAST_DTYPES) and (f.plain_functional or f.plain_inplace)


def _kernel_for(op):
    """The device kernel, the CPU-fallback kernel, or a dtype-dependent choice of the two."""
    f = facts(op)
    cpu = placement.cpu_dtypes(f.qualified)
    if not cpu or _returns_view(op) or f.metadata_mutating:  # metadata ops stay on the device
        return _generic_kernel(op)
    if cpu is True:
        return fallback.fallback_kernel(op)
    return placement.placed_kernel(op, _generic_kernel(op), fallback.fallback_kernel(op), cpu)


def _generic_kernel(op):
    f = facts(op)
    if f.plain_functional:
        return generic.functional_kernel(op)
    if f.plain_inplace:
        return generic.inplace_kernel(op)
    run = generic.run
    not_recorded = lazy.NOT_RECORDED

    def kernel(*args, **kwargs):
        if lazy.RECORDER is not None:  # adaptive eager
            r = lazy.RECORDER(op, args, kwargs)
            if r is not not_recorded:
                return r
        return run(op, args, kwargs)

    kernel.__name__ = f"neuron_{op.__name__}"
    return kernel


def _returns_view(op) -> bool:
    return any(r.alias_info is not None and not r.alias_info.is_write for r in op._schema.returns)


def _wants_generic(qualname: str, op) -> bool:
    if _has(qualname, "PrivateUse1") or _has(qualname, "CompositeImplicitAutograd"):
        return False
    if _has(qualname, "CompositeExplicitAutograd"):
        # composite view ops build their views through as_strided; keep them
        return not _returns_view(op)
    return True


def _aten_overloads():
    for qualname in torch._C._dispatch_get_all_op_names():
        if not qualname.startswith("aten::"):
            continue
        name = qualname[len("aten::"):]
        base, _, overload = name.partition(".")
        packet = getattr(torch.ops.aten, base, None)
        if packet is None:
            continue
        try:
            op = getattr(packet, overload or "default")
        except AttributeError:
            continue
        yield qualname, name, op


def _install_served(impl, kernels: dict, meta: bool) -> None:
    """The C++ fast kernels serve ``kernels`` when built (the Python kernels then sit behind
    them); otherwise the Python kernels go straight onto PrivateUse1."""
    served = fast.register(kernels, meta=meta)
    for name, kernel in kernels.items():
        if name not in served:
            impl.impl(name, kernel, "PrivateUse1")


def install() -> None:
    if _libs:
        return
    impl = torch.library.Library("aten", "IMPL")
    dedicated: set[str] = set()
    for table in (memory_ops.KERNELS, compute_kernels.KERNELS):
        for name, fn in table.items():
            impl.impl(name, fn, "PrivateUse1")
            dedicated.add(name)
    views: dict[str, object] = {}
    for ops, make in ((memory_ops.VIEW_OPS, memory_ops._meta_view),
                      (memory_ops.INPLACE_VIEW_OPS, memory_ops._meta_inplace_view)):
        for op in ops:
            overload = op._overloadname
            name = op._schema.name.split("::", 1)[1] + ("" if overload == "default" else f".{overload}")
            views[name] = make(op)
            dedicated.add(name)
    _install_served(impl, views, meta=True)
    plain: dict[str, object] = {}
    for qualname, name, op in _aten_overloads():
        if name in dedicated or not _wants_generic(qualname, op):
            continue
        kernel = _kernel_for(op)
        if name == "histc":  # placed per call, by its range (the table's dtypes aside)
            kernel = _histc(_generic_kernel(op), fallback.fallback_kernel(op))
        elif _plain_device_op(op):
            plain[name] = kernel  # served from C++ (when built); this kernel takes what C++ cannot
            continue
        impl.impl(name, kernel, "PrivateUse1")
    _install_served(impl, plain, meta=False)
    boxed = torch.library.Library("_", "IMPL")
    boxed.fallback(_boxed_fallback, dispatch_key="PrivateUse1", with_keyset=True)
    _libs.extend([impl, boxed])
    autocast.install()
    attention.install()
