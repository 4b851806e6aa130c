"""Device tensors over host memory.

A ``neuron`` tensor has a genuine device storage: its ``nbytes`` is the allocation's size and
its ``data_ptr`` is the address of the host buffer that plays the role of HBM (the simulated
chip shares the host's address space). The storage does not own the buffer; the allocator's
:class:`~torchneuron.runtime.memory.Block`, kept in the storage's Python ``__dict__``, does, so
the bytes live exactly as long as the last tensor, view or shallow copy using the storage.

``host(t)`` gives a CPU tensor aliasing ``t``'s bytes with ``t``'s sizes, strides and offset
(no copy), which is what kernels compute on. ``wrap_host(h)`` adopts a CPU tensor that a kernel
produced as a new device allocation (no copy). ``view_of(base, h)`` makes a device view of
``base`` with the geometry of ``h``, a host view of ``base``'s bytes.

A tensor lives on the core whose allocator owns its block (``block.allocator.index``); the
functions that make new memory take the core's index (default ``neuron:0``).
"""

from __future__ import annotations

import torch
from torch._C import DispatchKey, DispatchKeySet

from ..native import fast
from . import lazy, state
from .memory import Block, round_size

_CPU_KEYS = DispatchKeySet(DispatchKey.CPU)
_META_KEYS = DispatchKeySet(DispatchKey.Meta)
_set_storage = torch.ops.aten.set_.source_Storage_storage_offset
_as_strided = torch.ops.aten.as_strided.default
_create_empty = torch._C._acc.create_empty_tensor
_construct_storage = torch._C._construct_storage_from_data_pointer
_BLOCK = "_neuron_block"


def _shell(dtype: torch.dtype, index: int) -> torch.Tensor:
    """A 0-byte ``neuron:index`` tensor, to be pointed at device memory."""
    if index == 0:
        return _create_empty((0,), dtype)
    from ..native import _state as native_state

    return native_state["module"].empty(dtype, index)  # other cores exist only with the hooks


def _device_storage_for(block: Block) -> torch.UntypedStorage:
    st = _construct_storage(block.host.data_ptr(), block.allocator.device, block.nbytes)
    st.__dict__[_BLOCK] = block
    return st


def device_tensor(block: Block, dtype: torch.dtype, size, stride, offset: int = 0) -> torch.Tensor:
    """A new ``neuron`` tensor over ``block`` (on the block's core) with the given geometry."""
    t = _shell(dtype, block.allocator.index)
    _set_storage._handle.redispatch_boxed(_CPU_KEYS, t, _device_storage_for(block), offset, size, stride)
    return t


def repoint(t: torch.Tensor, block: Block | None, size, stride, offset: int) -> None:
    """Change ``t`` in place to ``size``/``stride``/``offset`` over ``block`` (or its own storage)."""
    st = t.untyped_storage() if block is None else _device_storage_for(block)
    _set_storage._handle.redispatch_boxed(_CPU_KEYS, t, st, offset, size, stride)


def storage_block(st: torch.UntypedStorage) -> Block | None:
    """The block behind a device storage, or None if it has no device memory (a fake tensor's).

    Storages whose memory the C++ kernels adopted (``torchneuron.native.fast``) own their bytes
    themselves (through the kernel's CPU result storage); the first time Python code needs their
    bytes they get a block over that CPU storage, not counted (the C++ accounts hold them)."""
    block = st.__dict__.get(_BLOCK)
    if block is None:
        hs = fast.host_storage(st)  # the kernel's result storage: host aliases keep it alive
        if hs is None:
            hs = _foreign_alias(st)
        if hs is not None:
            nbytes = st.nbytes()
            block = Block(hs, nbytes, round_size(nbytes), state.allocator(st.device.index or 0), cacheable=False,
                          counted=False)
            st.__dict__[_BLOCK] = block
    return block


def _foreign_alias(st: torch.UntypedStorage) -> torch.UntypedStorage | None:
    """A host storage over the bytes of a device storage that PyTorch's C++ code made from a device
    pointer (``at::from_blob``: ``torch.save``'s legacy format, DLPack), or None (a fake one).

    Such a storage aliases memory a block owns without that block; the owner outlives the call
    that made it, as ``from_blob``'s contract requires, and the alias is not counted twice."""
    if st.device.type != "neuron":
        return None
    try:
        ptr, nbytes = st.data_ptr(), st.nbytes()
    except (RuntimeError, NotImplementedError):
        return None
    if ptr == 0 or nbytes == 0:
        return None
    return _construct_storage(ptr, torch.device("cpu"), nbytes)


def has_device_memory(t: torch.Tensor) -> bool:
    """A real device tensor, not a fake/functional/meta one seen while tracing."""
    try:
        return storage_block(t.untyped_storage()) is not None
    except (RuntimeError, NotImplementedError, TypeError):
        return False


def block_of(t: torch.Tensor) -> Block:
    block = storage_block(t.untyped_storage())
    if block is None:
        raise RuntimeError(
            f"neuron tensor of shape {tuple(t.shape)} has no device memory attached; it was not "
            "created by torchneuron (internal error, please report)"
        )
    return block


def _flat(block: Block, dtype: torch.dtype) -> torch.Tensor:
    flat = block.flats.get(dtype)
    if flat is None:
        flat = torch.empty(0, dtype=dtype)
        flat.set_(block.host)
        block.flats[dtype] = flat
    return flat


def host(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor aliasing the device tensor's bytes and geometry (no copy)."""
    if lazy.FLUSH is not None:
        lazy.FLUSH()  # recorded work (adaptive eager) runs before anyone reads device bytes
    block = t.untyped_storage().__dict__.get(_BLOCK)
    if block is None:
        block = block_of(t)
    key = (t.dtype, t.shape, t.stride(), t.storage_offset())
    if block.alias_key == key:
        h = block.alias
    else:
        h = _flat(block, t.dtype).as_strided(t.shape, t.stride(), t.storage_offset())
        block.alias_key = key
        block.alias = h
    if t.is_conj() or t.is_neg():
        return _with_view_bits(h, t)
    return h  # type: ignore[return-value]


def _with_view_bits(h: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A new alias object of ``h`` carrying ``like``'s lazy conjugate / negative bits (a
    ``conj()`` view reads as conjugated values; the bits live on the tensor, not the bytes)."""
    h = h.as_strided(h.shape, h.stride(), h.storage_offset())
    if like.is_conj():
        torch._C._set_conj(h, True)
    if like.is_neg():
        torch._C._set_neg(h, True)
    return h


def forget_alias(t: torch.Tensor) -> None:
    """Drop the cached host alias of ``t``'s storage (a kernel changed the alias's geometry)."""
    block = t.untyped_storage().__dict__.get(_BLOCK)
    if block is not None:
        block.alias_key = None
        block.alias = None


def fresh_host(t: torch.Tensor) -> torch.Tensor:
    """Like :func:`host`, but a new alias object that the caller may restride in place."""
    if lazy.FLUSH is not None:
        lazy.FLUSH()
    h = _flat(block_of(t), t.dtype).as_strided(t.shape, t.stride(), t.storage_offset())
    return _with_view_bits(h, t) if t.is_conj() or t.is_neg() else h


_set_boxed = _set_storage._handle.redispatch_boxed
_allocator = None


def wrap_host(h: torch.Tensor, counted: bool = True, index: int = 0) -> torch.Tensor:
    """Adopt the host tensor ``h`` (computed by a kernel) as device memory of core ``index``,
    without a copy (``counted=False``: a staging buffer outside the memory statistics, see
    ``adopt``)."""
    global _allocator
    if index:
        alloc = state.allocator(index)
    else:
        if _allocator is None:
            _allocator = state.allocator()
        alloc = _allocator
    hs = h.untyped_storage()
    nbytes = hs.nbytes()
    block = alloc.adopt(hs, nbytes, counted)
    dtype = h.dtype
    t = _create_empty((0,), dtype) if not index else _shell(dtype, index)
    st = _construct_storage(hs.data_ptr(), alloc.device, nbytes)
    st.__dict__[_BLOCK] = block
    size, stride, offset = h.shape, h.stride(), h.storage_offset()
    _set_boxed(_CPU_KEYS, t, st, offset, size, stride)
    if h.is_conj() or h.is_neg():  # a lazily conjugated / negated result keeps its bits
        torch._C._set_conj(t, h.is_conj())
        torch._C._set_neg(t, h.is_neg())
        return t
    # the adopted tensor itself is the natural host alias of the new device tensor
    block.alias_key = (dtype, size, stride, offset)
    block.alias = h
    return t


def empty_device(size, stride, dtype: torch.dtype, index: int = 0) -> torch.Tensor:
    """An uninitialised tensor on core ``index`` with the given geometry, from its caching
    allocator."""
    if all(s > 0 for s in size):
        numel_span = 1 + sum((s - 1) * st for s, st in zip(size, stride, strict=True))
    else:
        numel_span = 0
    nbytes = numel_span * torch._utils._element_size(dtype)
    block = state.allocator(index).allocate(nbytes)
    return device_tensor(block, dtype, size, stride, 0)


def view_of(base: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """A device view of ``base``'s storage with the geometry of the host view ``h``."""
    if h.dtype != base.dtype:
        base = _retyped(base, h.dtype)
    v = _as_strided._handle.redispatch_boxed(_META_KEYS, base, h.shape, h.stride(), h.storage_offset())
    if h.is_conj() != v.is_conj():
        torch._C._set_conj(v, h.is_conj())
    if h.is_neg() != v.is_neg():
        torch._C._set_neg(v, h.is_neg())
    return v


def _retyped(base: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A device tensor sharing ``base``'s storage but with another element type (offset 0)."""
    t = _shell(dtype, base.device.index or 0)
    _set_storage._handle.redispatch_boxed(_CPU_KEYS, t, base.untyped_storage(), 0, (0,), (1,))
    return t
