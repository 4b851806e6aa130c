"""Tensors and tiles: allocations in a memory region and the views kernels index into them.

A :class:`Buffer` is one allocation (HBM tensor, SBUF or PSUM tile) holding a numpy array in
the storage dtype (see :mod:`.dtypes`). A :class:`NkiTensor` is a view of a buffer: the whole
of it, a basic slice (``t[0:128, k, :]``) or, for the legacy dialect, an advanced index built
from ``nl.arange``/``nl.mgrid`` arrays. Views know the box of the buffer they touch, which the
timing model uses to order instructions, and check every access against the buffer bounds.
"""

from __future__ import annotations

import enum
import itertools
import math
from typing import Any

import numpy as np

from . import dtypes
from .rules import NKIRuleError, check

_ids = itertools.count(1)


class MemoryRegion(enum.Enum):
    """Where a tensor lives: on-chip SBUF/PSUM or device memory (HBM)."""

    sbuf = "sbuf"
    psum = "psum"
    hbm = "hbm"
    private_hbm = "private_hbm"
    shared_hbm = "shared_hbm"

    @property
    def is_hbm(self) -> bool:
        return self in (MemoryRegion.hbm, MemoryRegion.private_hbm, MemoryRegion.shared_hbm)

    @property
    def on_chip(self) -> bool:
        return not self.is_hbm

    def __repr__(self) -> str:
        return f"nl.{self.value}"


def normalize_region(buffer: Any) -> MemoryRegion:
    if isinstance(buffer, MemoryRegion):
        return buffer
    if isinstance(buffer, str):
        try:
            return MemoryRegion(buffer)
        except ValueError:
            pass
    # allocator objects of the legacy dialect (e.g. ncc.sbuf.mod_alloc(...)) carry a region
    region = getattr(buffer, "region", None)
    if isinstance(region, MemoryRegion):
        return region
    raise NKIRuleError("launch", "nl.ndarray", f"unknown buffer {buffer!r}")


class par_dim:  # noqa: N801 - NKI spelling
    """Marks the partition dimension inside a shape (legacy dialect: ``(4, nl.par_dim(128), 512)``)."""

    def __init__(self, size: int) -> None:
        self.size = int(size)

    def __index__(self) -> int:
        return self.size

    def __int__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"par_dim({self.size})"


def parse_shape(shape: Any) -> tuple[tuple[int, ...], int]:
    """Return ``(shape, partition_axis)`` from a shape that may contain a ``par_dim``."""
    if isinstance(shape, (int, np.integer, par_dim)):
        shape = (shape,)
    dims: list[int] = []
    pdim = 0
    for i, d in enumerate(shape):
        if isinstance(d, par_dim):
            pdim = i
        dims.append(int(d))
    return tuple(dims), pdim


class Buffer:
    """One allocation. ``root`` is the allocation whose memory this one shares (reshapes)."""

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: Any,
        region: MemoryRegion,
        data: np.ndarray,
        name: str = "",
        pdim: int = 0,
        root: Buffer | None = None,
    ) -> None:
        self.id = next(_ids)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.region = region
        self.data = data
        self.name = name or f"t{self.id}"
        self.pdim = pdim
        self._root = root  # None: this buffer is its own root (no self-reference cycle)
        self.written = False
        # fresh result of an instruction: (instruction end time, kind) until first consumed
        self.producer: tuple[float, str] | None = None
        # PSUM accumulation groups (nc_matmul accumulate=None): True where a group is open
        self.acc_open: np.ndarray | None = (
            np.zeros(self.shape, dtype=bool) if region is MemoryRegion.psum else None
        )

    @property
    def root(self) -> Buffer:
        return self._root if self._root is not None else self

    @property
    def bytes_per_partition(self) -> int:
        if not self.shape:
            return dtypes.itemsize(self.dtype)
        n = math.prod(self.shape) // max(self.shape[self.pdim], 1)
        return n * dtypes.itemsize(self.dtype)

    @property
    def partitions(self) -> int:
        return self.shape[self.pdim] if self.shape else 1

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {self.shape}, {dtypes.name(self.dtype)}, {self.region.value})"


# A view index is either basic -- one entry per buffer dim, an int (dropped dim) or a
# (start, step, count) triple (kept dim) -- or advanced: one int array per buffer dim, all
# broadcast to the view shape, possibly out of bounds (checked on access, under the mask).
Basic = tuple  # tuple[int | tuple[int, int, int], ...]


def _is_array_like(x: Any) -> bool:
    return isinstance(x, (np.ndarray, list)) and np.ndim(x) > 0


def _as_int(x: Any) -> int | None:
    if isinstance(x, (bool, np.bool_)):
        return None
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "iu":
        return int(x)
    if hasattr(x, "__index__") and not isinstance(x, np.ndarray):
        try:
            return int(x.__index__())
        except TypeError:
            return None
    return None


class NkiTensor:
    """A tensor or tile as kernels see it: ``shape``, ``dtype``, ``buffer``, indexing, math."""

    __array_priority__ = 1000  # numpy scalars defer to our operators

    def __init__(
        self,
        buf: Buffer,
        index: Basic | None = None,
        adv: tuple[np.ndarray, ...] | None = None,
    ) -> None:
        self._buf = buf
        self._adv = adv
        if adv is not None:
            self._basic = None
            self.shape = tuple(int(s) for s in np.broadcast_shapes(*(a.shape for a in adv)))
        else:
            self._basic = index if index is not None else tuple((0, 1, n) for n in buf.shape)
            self.shape = tuple(d[2] for d in self._basic if isinstance(d, tuple))
        self._assigned = False  # set on the view returned by an in-place operator

    # ---- metadata ---------------------------------------------------------------------
    @property
    def dtype(self) -> Any:
        return self._buf.dtype

    @property
    def buffer(self) -> MemoryRegion:
        return self._buf.region

    @property
    def name(self) -> str:
        return self._buf.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return dtypes.itemsize(self.dtype)

    @property
    def partition_size(self) -> int:
        return self.shape[0] if self.shape else 1

    @property
    def free_size(self) -> int:
        """Elements per partition of this tile."""
        return math.prod(self.shape[1:]) if len(self.shape) > 1 else 1

    @property
    def free_bytes(self) -> int:
        return self.free_size * self.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"NkiTensor({self.name}, shape={self.shape}, dtype={dtypes.name(self.dtype)}, buffer={self.buffer.value})"

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        raise TypeError("the truth value of an NKI tile is ambiguous inside a kernel")

    @property
    def is_full(self) -> bool:
        """True when this view is the whole buffer, in order."""
        if self._basic is None:
            return False
        return all(
            isinstance(d, tuple) and d[0] == 0 and d[1] == 1 and d[2] == n
            for d, n in zip(self._basic, self._buf.shape, strict=True)
        )

    # ---- indexing -----------------------------------------------------------------------
    def _normalize_key(self, key: Any) -> list[Any]:
        if not isinstance(key, tuple):
            key = (key,)
        key = tuple(getattr(k, "_nki_index", k) for k in key)
        n_ell = sum(1 for k in key if k is Ellipsis)
        if n_ell > 1:
            raise NKIRuleError("out-of-bounds", "indexing", "more than one Ellipsis")
        real = [k for k in key if k is not None]
        if len(real) - n_ell > self.ndim:
            raise NKIRuleError(
                "out-of-bounds",
                "indexing",
                f"{len(real) - n_ell} indices for a tensor of rank {self.ndim} {self.shape}",
            )
        if any(k is None for k in key):
            raise NKIRuleError("unsupported", "indexing", "None/newaxis in a tensor index")
        out: list[Any] = []
        for k in key:
            if k is Ellipsis:
                out.extend([slice(None)] * (self.ndim - (len(key) - 1)))
            else:
                out.append(k)
        out.extend([slice(None)] * (self.ndim - len(out)))
        return out

    def __getitem__(self, key: Any) -> NkiTensor:
        items = self._normalize_key(key)
        tiles = [k for k in items if isinstance(k, NkiTensor)]
        if tiles:
            items = self._indirect_items(items)
        if self._adv is None and not any(_is_array_like(k) for k in items):
            return self._basic_index(items)
        view = self._advanced_index(items)
        if tiles:
            view._index_tiles = (*self._index_tiles, *tiles)
        return view

    _index_tiles: tuple[NkiTensor, ...] = ()  # SBUF tiles holding this view's indices

    def _indirect_items(self, items: list[Any]) -> list[Any]:
        """Indirect DMA: an integer SBUF tile in the index of an HBM tensor supplies dynamic
        indices (``x[idx_tile, 0:512]`` with ``idx_tile [P, 1]`` gathers P rows). The values
        are read when the view is made, as the DMA's descriptor generation would."""
        out = []
        for k in items:
            if not isinstance(k, NkiTensor):
                out.append(k)
                continue
            if not self._buf.region.is_hbm:
                raise NKIRuleError(
                    "unsupported",
                    "indexing",
                    f"only HBM tensors can be indexed by a tile (indirect DMA); {self.name} is in "
                    f"{self._buf.region.value}",
                )
            if k.buffer is not MemoryRegion.sbuf:
                raise NKIRuleError(
                    "dma-buffer", "indexing", f"indirect DMA reads its indices from SBUF, not {k.buffer.value}"
                )
            if dtypes.is_float(k.dtype):
                raise NKIRuleError(
                    "dtype", "indexing", f"index tile {k.name} is {dtypes.name(k.dtype)}; indices are integers"
                )
            out.append(np.asarray(k.read("indirect index"), dtype=np.int64))
        return out

    def _basic_index(self, items: list[Any]) -> NkiTensor:
        new: list[Any] = []
        it = iter(items)
        vdim = 0
        for d in self._basic:
            if not isinstance(d, tuple):
                new.append(d)
                continue
            start, step, count = d
            k = next(it)
            i = _as_int(k)
            if i is not None:
                if i < 0:
                    i += count
                if not (0 <= i < count):
                    raise NKIRuleError(
                        "out-of-bounds",
                        "indexing",
                        f"index {k} is out of bounds for axis {vdim} of size {count} (tensor {self.name} {self.shape})",
                    )
                new.append(start + step * i)
            elif isinstance(k, slice):
                s0, s1, st = k.start, k.stop, k.step
                st = 1 if st is None else int(st)
                if st == 0:
                    raise NKIRuleError("out-of-bounds", "indexing", "slice step 0")
                if st > 0:
                    a = 0 if s0 is None else int(s0)
                    b = count if s1 is None else int(s1)
                    a = a + count if a < 0 else a
                    b = b + count if b < 0 else b
                    if not (0 <= a <= count and 0 <= b <= count):
                        raise NKIRuleError(
                            "out-of-bounds",
                            "indexing",
                            f"slice {a}:{b} is out of bounds for axis {vdim} of size {count} (tensor {self.name} {self.shape})",
                        )
                    n = max(0, -(-(b - a) // st))
                else:
                    a, b, st2 = k.indices(count)
                    n = len(range(a, b, st2))
                new.append((start + step * a, step * st, n))
            else:
                raise NKIRuleError("unsupported", "indexing", f"index of type {type(k).__name__}")
            vdim += 1
        return NkiTensor(self._buf, tuple(new))

    def _index_arrays(self) -> tuple[np.ndarray, ...]:
        """This view as advanced index arrays (one per buffer dim) of the view's shape."""
        if self._adv is not None:
            return self._adv
        kept = [d for d in self._basic if isinstance(d, tuple)]
        nk = len(kept)
        arrays: list[np.ndarray] = []
        j = 0
        for d in self._basic:
            if isinstance(d, tuple):
                start, step, count = d
                shape = [1] * nk
                shape[j] = count
                arrays.append((start + step * np.arange(count)).reshape(shape))
                j += 1
            else:
                arrays.append(np.array(d))
        return tuple(np.broadcast_to(a, self.shape) for a in arrays)

    def _advanced_index(self, items: list[Any]) -> NkiTensor:
        # Turn the key into arrays over this view's index space, then compose.
        n_free = sum(1 for k in items if _as_int(k) is None)
        nd = max([np.ndim(k) for k in items if _is_array_like(k)] + [n_free, 1])
        coords: list[np.ndarray] = []
        pos = 0
        for axis, k in enumerate(items):
            size = self.shape[axis]
            i = _as_int(k)
            if i is not None:
                coords.append(np.array(i + size if i < 0 else i))
                continue
            if isinstance(k, slice):
                a, b, st = k.indices(size)
                if k.stop is not None and int(k.stop) > size:
                    raise NKIRuleError(
                        "out-of-bounds",
                        "indexing",
                        f"slice stop {k.stop} is out of bounds for axis {axis} of size {size}",
                    )
                shape = [1] * nd
                shape[min(pos, nd - 1)] = -1
                coords.append(np.arange(a, b, st).reshape(shape))
            else:
                arr = np.asarray(k)
                if arr.dtype.kind not in "iu":
                    raise NKIRuleError(
                        "unsupported", "indexing", f"index array of dtype {arr.dtype}"
                    )
                coords.append(arr.astype(np.int64))
            pos += 1
        shape = np.broadcast_shapes(*(c.shape for c in coords))
        coords = [np.broadcast_to(c, shape) for c in coords]
        if self._adv is None and all(
            isinstance(d, tuple) for d in self._basic
        ):  # fast path: map view coords to buffer coords
            out = []
            kept = [d for d in self._basic if isinstance(d, tuple)]
            for (start, step, _), c in zip(kept, coords, strict=True):
                out.append(start + step * c)
            # keep view-space coordinates for bounds checks against the view's shape
            return _AdvancedView(self._buf, tuple(out), tuple(coords), self.shape)
        base = self._index_arrays()
        # each index array maps view coords -> buffer coords; look them up where in bounds
        inb = np.ones(shape, dtype=bool)
        for c, n in zip(coords, self.shape, strict=True):
            inb &= (c >= 0) & (c < n)
        safe = [np.where(inb, c, 0) for c in coords]
        out = tuple(np.where(inb, b[tuple(safe)], -(10**9)) for b in base)
        return _AdvancedView(self._buf, out, tuple(coords), self.shape)

    # ---- region of the buffer touched (for the timing model) --------------------------
    def dep_box(self) -> tuple[int, tuple[tuple[int, int], ...]]:
        """``(root buffer id, box)``: a bounding box in root-buffer coordinates."""
        buf = self._buf
        if buf.root is not buf:
            return buf.root.id, tuple((0, n) for n in buf.root.shape)
        if self._adv is not None:
            box = []
            for a, n in zip(self._adv, buf.shape, strict=True):
                if a.size == 0:
                    box.append((0, 0))
                else:
                    box.append((max(0, int(a.min())), min(n, int(a.max()) + 1)))
            return buf.id, tuple(box)
        box = []
        for d in self._basic:
            if isinstance(d, tuple):
                start, step, count = d
                if count == 0:
                    box.append((start, start))
                else:
                    last = start + step * (count - 1)
                    box.append((min(start, last), max(start, last) + 1))
            else:
                box.append((d, d + 1))
        return buf.id, tuple(box)

    # ---- data access ------------------------------------------------------------------
    def _np_basic_key(self) -> tuple[Any, ...]:
        key: list[Any] = []
        for d in self._basic:
            if isinstance(d, tuple):
                start, step, count = d
                stop = start + step * count
                key.append(slice(start, stop if stop >= 0 else None, step))
            else:
                key.append(d)
        return tuple(key)

    def read(self, instruction: str = "read", mask: np.ndarray | None = None) -> np.ndarray:
        """The values of this view, in the storage dtype (NaN where ``mask`` is False)."""
        if self._adv is None:
            vals = self._buf.data[self._np_basic_key()]
            if mask is not None:
                vals = np.where(np.broadcast_to(mask, self.shape), vals, _fill(vals.dtype))
            return vals
        return self._read_advanced(instruction, mask)

    def _read_advanced(self, instruction: str, mask: np.ndarray | None) -> np.ndarray:
        raise AssertionError("basic views have no advanced read")

    def write(
        self,
        values: Any,
        instruction: str = "write",
        mask: np.ndarray | None = None,
        exact: bool = False,
    ) -> None:
        """Round ``values`` to this tile's dtype and store them (only where ``mask``).
        ``exact``: the values are already representable in this dtype (same-dtype copies)."""
        if exact:
            vals = np.asarray(values, dtype=self._buf.data.dtype)
        else:
            vals = dtypes.to_storage(values, self.dtype)
        if vals.shape != self.shape:
            try:
                vals = np.broadcast_to(vals, self.shape)
            except ValueError:
                raise NKIRuleError(
                    "shape-mismatch",
                    instruction,
                    f"cannot write a value of shape {np.shape(values)} into {self.name}{list(self.shape)}",
                ) from None
        self._buf.written = True
        if self._adv is None:
            if mask is None:
                self._buf.data[self._np_basic_key()] = vals
            else:
                np.copyto(
                    self._buf.data[self._np_basic_key()],
                    vals,
                    where=np.broadcast_to(mask, self.shape),
                )
            return
        self._write_advanced(vals, instruction, mask)

    def _write_advanced(self, vals: np.ndarray, instruction: str, mask: np.ndarray | None) -> None:
        raise AssertionError("basic views have no advanced write")

    # ---- reshaping ----------------------------------------------------------------------
    def reshape(self, *shape: Any) -> NkiTensor:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        new_shape, pdim = parse_shape(shape)
        if -1 in new_shape:
            known = math.prod(s for s in new_shape if s != -1)
            new_shape = tuple(self.size // known if s == -1 else s for s in new_shape)
        check(
            math.prod(new_shape) == self.size,
            "shape-mismatch",
            "reshape",
            f"cannot reshape {self.shape} into {new_shape}",
        )
        check(
            self.is_full,
            "unsupported",
            "reshape",
            "only whole tensors can be reshaped in this simulator (slice after reshaping)",
        )
        buf = self._buf
        alias = Buffer(
            new_shape,
            buf.dtype,
            buf.region,
            buf.data.reshape(new_shape),
            name=buf.name,
            pdim=pdim,
            root=buf.root,
        )
        alias.acc_open = buf.acc_open.reshape(new_shape) if buf.acc_open is not None else None
        alias._keepalive = buf  # type: ignore[attr-defined]
        return NkiTensor(alias)

    # ---- operators (delegate to nki.language) -------------------------------------------
    def _lang(self):  # noqa: ANN202
        from . import language

        return language

    def __add__(self, o: Any) -> NkiTensor:
        return self._lang().add(self, o)

    def __radd__(self, o: Any) -> NkiTensor:
        return self._lang().add(o, self)

    def __sub__(self, o: Any) -> NkiTensor:
        return self._lang().subtract(self, o)

    def __rsub__(self, o: Any) -> NkiTensor:
        return self._lang().subtract(o, self)

    def __mul__(self, o: Any) -> NkiTensor:
        return self._lang().multiply(self, o)

    def __rmul__(self, o: Any) -> NkiTensor:
        return self._lang().multiply(o, self)

    def __truediv__(self, o: Any) -> NkiTensor:
        return self._lang().divide(self, o)

    def __rtruediv__(self, o: Any) -> NkiTensor:
        return self._lang().divide(o, self)

    def __pow__(self, o: Any) -> NkiTensor:
        return self._lang().power(self, o)

    def __neg__(self) -> NkiTensor:
        return self._lang().negative(self)

    def __abs__(self) -> NkiTensor:
        return self._lang().abs(self)

    def __lt__(self, o: Any) -> NkiTensor:
        return self._lang().less(self, o)

    def __le__(self, o: Any) -> NkiTensor:
        return self._lang().less_equal(self, o)

    def __gt__(self, o: Any) -> NkiTensor:
        return self._lang().greater(self, o)

    def __ge__(self, o: Any) -> NkiTensor:
        return self._lang().greater_equal(self, o)

    def __and__(self, o: Any) -> NkiTensor:
        return self._lang().bitwise_and(self, o)

    def __or__(self, o: Any) -> NkiTensor:
        return self._lang().bitwise_or(self, o)

    def __xor__(self, o: Any) -> NkiTensor:
        return self._lang().bitwise_xor(self, o)

    def __matmul__(self, o: Any) -> NkiTensor:
        return self._lang().matmul(self, o)

    def _inplace(self, fn: Any, o: Any) -> NkiTensor:
        from .simulator import assign

        if (
            self.buffer is MemoryRegion.psum
            and isinstance(o, NkiTensor)
            and o._buf.producer is not None
            and o._buf.producer[1] == "matmul"
            and fn == "add"
        ):
            assign(self, o, accumulate=True)
        else:
            assign(self, getattr(self._lang(), fn)(self, o))
        self._assigned = True
        return self

    def __iadd__(self, o: Any) -> NkiTensor:
        return self._inplace("add", o)

    def __isub__(self, o: Any) -> NkiTensor:
        return self._inplace("subtract", o)

    def __imul__(self, o: Any) -> NkiTensor:
        return self._inplace("multiply", o)

    def __itruediv__(self, o: Any) -> NkiTensor:
        return self._inplace("divide", o)

    def __setitem__(self, key: Any, value: Any) -> None:
        from .simulator import assign

        view = self[key]
        if isinstance(value, NkiTensor) and value._assigned and value._buf is self._buf:
            value._assigned = False
            return
        assign(view, value)


class _AdvancedView(NkiTensor):
    """A view through index arrays (legacy ``nl.arange``/``nl.mgrid`` indexing)."""

    def __init__(
        self,
        buf: Buffer,
        adv: tuple[np.ndarray, ...],
        view_coords: tuple[np.ndarray, ...],
        view_shape: tuple[int, ...],
    ) -> None:
        super().__init__(buf, adv=tuple(np.asarray(a, dtype=np.int64) for a in adv))
        self._view_coords = view_coords
        self._view_shape = view_shape

    def _checked(self, instruction: str, mask: np.ndarray | None) -> tuple[np.ndarray, tuple]:
        sel = np.ones(self.shape, dtype=bool) if mask is None else np.broadcast_to(mask, self.shape)
        spaces = (
            (self._view_coords, self._view_shape, "tensor view"),
            (self._adv, self._buf.shape, "tensor"),
        )
        for coords, shape, what in spaces:
            for axis, (c, n) in enumerate(zip(coords, shape, strict=True)):
                c = np.broadcast_to(c, self.shape)
                bad = sel & ((c < 0) | (c >= n))
                if bad.any():
                    val = int(c[bad].flat[0])
                    shown = "" if val < -(10**8) else f" {val}"
                    raise NKIRuleError(
                        "out-of-bounds",
                        instruction,
                        f"index{shown} is out of bounds for axis {axis} of size {n} "
                        f"({what} {self.name} {tuple(shape)}); mask the access or shrink the tile",
                    )
        idx = tuple(np.broadcast_to(a, self.shape)[sel] for a in self._adv)
        return sel, idx

    def _read_advanced(self, instruction: str, mask: np.ndarray | None) -> np.ndarray:
        sel, idx = self._checked(instruction, mask)
        out = np.full(self.shape, _fill(self._buf.data.dtype), dtype=self._buf.data.dtype)
        out[sel] = self._buf.data[idx]
        return out

    def _write_advanced(self, vals: np.ndarray, instruction: str, mask: np.ndarray | None) -> None:
        sel, idx = self._checked(instruction, mask)
        self._buf.data[idx] = vals[sel]

    def scatter_add(self, vals: Any, instruction: str, mask: np.ndarray | None) -> None:
        """``dst[idx] += vals`` with every duplicate index accumulating (the DMA engines
        serialise duplicate offsets), rounded to the tensor's dtype afterwards."""
        sel, idx = self._checked(instruction, mask)
        data = self._buf.data
        v = np.broadcast_to(np.asarray(vals, dtype=data.dtype), self.shape)[sel]
        np.add.at(data, idx, v)
        data[idx] = dtypes.to_storage(data[idx], self.dtype)
        self._buf.written = True

    def in_bounds(self) -> np.ndarray:
        """Where this view's indices lie inside the view and the tensor (``oob_mode.skip``)."""
        ok = np.ones(self.shape, dtype=bool)
        for coords, shape in ((self._view_coords, self._view_shape), (self._adv, self._buf.shape)):
            for c, n in zip(coords, shape, strict=True):
                c = np.broadcast_to(c, self.shape)
                ok &= (c >= 0) & (c < n)
        return ok

    def dep_box(self) -> tuple[int, tuple[tuple[int, int], ...]]:
        buf = self._buf
        if buf.root is not buf:
            return buf.root.id, tuple((0, n) for n in buf.root.shape)
        box = []
        for a, n in zip(self._adv, buf.shape, strict=True):
            ok = a[(a >= 0) & (a < n)]
            box.append((int(ok.min()), int(ok.max()) + 1) if ok.size else (0, 0))
        return buf.id, tuple(box)

    def __getitem__(self, key: Any) -> NkiTensor:
        items = self._normalize_key(key)
        view = NkiTensor._advanced_index(self, items)
        return view


def _fill(dt: np.dtype) -> Any:
    if dt.kind == "f":
        return np.nan
    if dt.kind == "b":
        return False
    return np.iinfo(dt).min
