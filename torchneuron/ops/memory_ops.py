"""Kernels that define device memory itself: allocation, copies, views, metadata changes.

These cannot go through the generic kernel: they create or re-describe device memory, move
bytes between host and device, or (``.item()``) are synchronisation points.
"""

from __future__ import annotations

from time import perf_counter_ns

import torch
from torch._C import DispatchKey, DispatchKeySet

from ..runtime import activity, devices, lazy, state
from ..runtime.errors import ERRORS
from ..runtime.storage import block_of, device_tensor, empty_device, host, repoint, wrap_host
from . import dtype_policy, tracking

aten = torch.ops.aten
_META = DispatchKeySet(DispatchKey.Meta)
_CPU = DispatchKeySet(DispatchKey.CPU)


def _contiguous_strides(size, memory_format) -> list[int]:
    size = list(size)
    if memory_format == torch.channels_last and len(size) == 4:
        n, c, h, w = size
        return [h * w * c, 1, w * c, c]
    if memory_format == torch.channels_last_3d and len(size) == 5:
        n, c, d, h, w = size
        return [d * h * w * c, 1, h * w * c, w * c, c]
    strides = [1] * len(size)
    acc = 1
    for i in range(len(size) - 1, -1, -1):
        strides[i] = acc
        acc *= max(size[i], 1)
    return strides


def empty_memory_format(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    index = devices.index_of(device)
    dtype = dtype or torch.get_default_dtype()
    dtype_policy.check_supported(dtype)
    if any(s < 0 for s in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {list(size)}")
    mf = memory_format or torch.contiguous_format
    return empty_device(list(size), _contiguous_strides(size, mf), dtype, index)


def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    index = devices.index_of(device)
    dtype = dtype or torch.get_default_dtype()
    dtype_policy.check_supported(dtype)
    if any(s < 0 for s in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {list(size)}")
    return empty_device(list(size), list(stride), dtype, index)


def _src_host(src: torch.Tensor) -> torch.Tensor:
    return host(src) if src.device.type == "neuron" else src


def copy_(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    if lazy.RECORDER is not None and self.device.type == "neuron" and src.device == self.device:
        r = lazy.RECORDER(aten.copy_.default, (self, src, non_blocking), {})
        if r is not lazy.NOT_RECORDED:
            return r
    tracking.executed("aten::copy_")
    t0 = perf_counter_ns()
    if self.device.type == "neuron":
        dtype_policy.check_supported(self.dtype)
        kind = "copy_d2d" if src.device.type == "neuron" else "copy_h2d"
        if kind == "copy_h2d":
            tracking.transfer("host_to_device", src.nbytes)
        dst = host(self)
        if self.numel():
            dst.copy_(_src_host(src))
    else:
        # device -> host: the host must see finished device work (a synchronisation point)
        ERRORS.raise_pending()
        kind = "copy_d2h"
        tracking.transfer("device_to_host", src.nbytes)
        dst = self
        self.copy_(_src_host(src))
    if activity.RECORDER is not None:
        activity.RECORDER.record(kind, "aten::copy_", (src,), dst, t0, perf_counter_ns())
    return self


def _copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    return copy_(dst, src, non_blocking)


def _copy_from_and_resize(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    if dst.shape != src.shape:
        resize_(dst, src.shape)
    return copy_(dst, src)


def _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    if lazy.RECORDER is not None and self.device.type == "neuron" and (
        device is None or (torch.device(device).type == "neuron" and devices.index_of(device) == self.get_device())
    ):
        kw = {k: v for k, v in (("dtype", dtype), ("layout", layout), ("device", device),
                                ("pin_memory", pin_memory), ("memory_format", memory_format)) if v is not None}
        r = lazy.RECORDER(aten._to_copy.default, (self,), kw)
        if r is not lazy.NOT_RECORDED:
            return r
    tracking.executed("aten::_to_copy")
    target = torch.device(device) if device is not None else self.device
    dtype = dtype or self.dtype
    src = _src_host(self)
    t0 = perf_counter_ns()
    if target.type == "neuron":
        index = devices.index_of(target)
        dtype_policy.check_supported(dtype)
        kind = "copy_d2d" if self.device.type == "neuron" else "copy_h2d"
        if kind == "copy_h2d":
            tracking.transfer("host_to_device", self.nbytes)
        if memory_format in (None, torch.preserve_format):
            out = src.to(dtype=dtype, copy=True)
        else:
            out = src.to(dtype=dtype, memory_format=memory_format, copy=True)
        if self.device.type == "neuron" and out.dtype in dtype_policy.EMULATED and out.dtype != self.dtype and not dtype_policy.exact():
            dtype_policy.narrow_output_(out)
        result = wrap_host(out, index=index)
    else:
        ERRORS.raise_pending()
        kind = "copy_d2h"
        tracking.transfer("device_to_host", self.nbytes)
        kw = {} if memory_format in (None, torch.preserve_format) else {"memory_format": memory_format}
        out = src.to(device=target, dtype=dtype, copy=True, **kw)
        result = out = out.pin_memory() if pin_memory else out
    if activity.RECORDER is not None:
        activity.RECORDER.record(kind, "aten::_to_copy", (src,), out, t0, perf_counter_ns())
    return result


def local_scalar_dense(self: torch.Tensor):
    ERRORS.raise_pending()
    tracking.executed("aten::_local_scalar_dense")
    tracking.transfer("device_to_host", self.element_size())
    h = host(self)
    if activity.RECORDER is None:
        return h.item()
    t0 = perf_counter_ns()
    value = h.item()
    activity.RECORDER.record("copy_d2h", "aten::_local_scalar_dense", (h,), h, t0, perf_counter_ns())
    return value


# ---- views: same storage, new geometry (the Meta kernels compute it) ------------------------
def _meta_view(op):
    handle = op._handle

    def kernel(*args, **kwargs):
        out = handle.redispatch_boxed(_META, *args, **kwargs)
        if lazy.VIEW is not None:
            lazy.VIEW(op, args, kwargs, out)  # adaptive eager: views of recorded values
        return out

    return kernel


VIEW_OPS = (
    aten.view.default,
    aten.as_strided.default,
    aten._reshape_alias.default,
    aten.unfold.default,
    aten.view_as_real.default,
    aten.view_as_complex.default,
)


# ---- metadata-changing in-place ops -----------------------------------------------------------
def _meta_inplace_view(op):
    """``as_strided_``, ``transpose_`` …: new geometry for the tensor itself, no bytes touched.

    The Meta kernel sets the sizes and strides (as every backend's kernel does); this also
    serves tensors that have no device memory, such as the wrappers AOTAutograd's
    functionalisation re-strides while tracing. Recorded work (adaptive eager) is flushed
    first: it was recorded against the old geometry."""
    handle = op._handle

    def kernel(*args, **kwargs):
        if lazy.FLUSH is not None:
            lazy.FLUSH()
        return handle.redispatch_boxed(_META, *args, **kwargs)

    return kernel


INPLACE_VIEW_OPS = (
    aten.as_strided_.default,
    aten.detach_.default,
    aten.squeeze_.default,
    aten.squeeze_.dim,
    aten.squeeze_.dims,
    aten.unsqueeze_.default,
    aten.transpose_.default,
    aten.t_.default,
)


def resize_(self: torch.Tensor, size, memory_format=None) -> torch.Tensor:
    size = list(size)
    if any(s < 0 for s in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {size}")
    strides = _contiguous_strides(size, memory_format or torch.contiguous_format)
    numel = 1
    for s in size:
        numel *= s
    need = (self.storage_offset() + numel) * self.element_size() if numel else 0
    have = self.untyped_storage().nbytes()
    if need <= have:
        repoint(self, None, size, strides, self.storage_offset())
        return self
    block = state.allocator(self.get_device()).allocate(need)
    if have:
        torch.empty(0, dtype=torch.uint8).set_(block.host)[:have].copy_(
            torch.empty(0, dtype=torch.uint8).set_(block_of(self).host)[:have]
        )
    repoint(self, block, size, strides, self.storage_offset())
    return self


def resize_as_(self, the_template, *, memory_format=None):
    return resize_(self, the_template.shape, memory_format)


def set_source_tensor(self: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    return set_source_storage_offset(self, source.untyped_storage(), source.storage_offset(), source.shape, source.stride())


def set_source_storage(self: torch.Tensor, source) -> torch.Tensor:
    n = source.nbytes() // self.element_size()
    return set_source_storage_offset(self, source, 0, [n], [1])


def set_source_storage_offset(self, source, storage_offset, size, stride=()):
    if not stride:
        stride = _contiguous_strides(size, torch.contiguous_format)
    if source.device.type != "neuron":
        raise RuntimeError(
            f"Attempted to set the storage of a neuron tensor to a storage on {source.device}; "
            "move the data with .to('neuron') first"
        )
    aten.set_.source_Storage_storage_offset._handle.redispatch_boxed(_CPU, self, source, storage_offset, size, stride)
    return self


def set_empty(self: torch.Tensor) -> torch.Tensor:
    blk = state.allocator(self.get_device()).allocate(0)
    repoint(self, blk, [0], [1], 0)
    return self


def efficientzerotensor(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """Autograd's "known to be zero" tensor: on the device, real zeros (no ZeroTensor key)."""
    t = empty_memory_format(size, dtype=dtype, device=device)
    if t.numel():
        host(t).zero_()
    return t


def record_stream(self, stream) -> None:
    return None  # one in-order queue: nothing to track


def _pin_memory(self, device=None):
    raise RuntimeError("pin_memory() is for CPU tensors; this tensor is already on neuron")


def is_pinned(self, device=None) -> bool:
    return False


KERNELS = {
    "empty.memory_format": empty_memory_format,
    "empty_strided": empty_strided,
    "copy_": copy_,
    "_copy_from": _copy_from,
    "_copy_from_and_resize": _copy_from_and_resize,
    "_to_copy": _to_copy,
    "_local_scalar_dense": local_scalar_dense,
    "resize_": resize_,
    "resize_as_": resize_as_,
    "set_.source_Tensor": set_source_tensor,
    "set_.source_Storage": set_source_storage,
    "set_.source_Storage_storage_offset": set_source_storage_offset,
    "set_": set_empty,
    "record_stream": record_stream,
    "_efficientzerotensor": efficientzerotensor,
}

__all__ = ["KERNELS", "VIEW_OPS", "device_tensor"]
