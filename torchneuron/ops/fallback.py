"""The CPU-fallback policy: operators the NeuronCore cannot run execute on the host.

As on the real chip, an operator that is not placed on the device (see ``placement``) makes an
explicit round trip: its device inputs are copied to host memory (a synchronisation point: the
host must see finished device work), the CPU kernel runs, and its results are copied into new
device memory, or back into the device tensors an in-place / ``out=`` op writes. The copies
are counted (``transfer_stats()``), each operator warns once
(``Operator 'aten::X' executed via CPU fallback``) and is tracked by ``get_fallback_ops()``.
``TORCHNEURON_FALLBACK=error`` turns a fallback into an error naming the op and its dtypes.
"""

from __future__ import annotations

import os
import warnings
from time import perf_counter_ns

import torch
from torch.utils._pytree import tree_map

from ..runtime import activity
from ..runtime.errors import ERRORS, NeuronFallbackError, user_stack
from ..runtime.storage import host, wrap_host
from . import dtype_policy, tracking
from .generic import call_host, check_one_device, core_of, with_device_generator
from .opinfo import facts

_warned: set[str] = set()

__all__ = ["NeuronFallbackError", "fallback_kernel", "policy", "run"]


def policy() -> str:
    value = os.environ.get("TORCHNEURON_FALLBACK", "warn").strip().lower() or "warn"
    if value not in ("warn", "error", "silent"):
        raise ValueError(f"TORCHNEURON_FALLBACK={value!r}: use 'warn' (default), 'silent' or 'error'")
    return value


def _dtypes(args, kwargs) -> list[str]:
    seen: list[str] = []

    def visit(a):
        if isinstance(a, torch.Tensor):
            d = str(a.dtype).removeprefix("torch.")
            if d not in seen:
                seen.append(d)
        return a

    tree_map(visit, (args, kwargs))
    return seen


def _to_host(a, whole_storage: bool = False):
    """An explicit host copy of a device tensor (the host works on its own data).

    ``whole_storage``: copy the tensor's entire storage and rebuild the same view on it, for
    ops such as ``as_strided`` that address memory outside the view.
    """
    if isinstance(a, torch.Tensor) and a.device.type == "neuron":
        h = host(a)
        if not whole_storage:
            tracking.transfer("device_to_host", a.nbytes)
            if h.is_contiguous() or torch._debug_has_internal_overlap(h) == 1:  # 1: overlaps
                return h.clone()
            # the same strides and offset as on the device: some CPU kernels' low-precision
            # results depend on the layout and alignment (batch norm in bfloat16 differs by one
            # bf16 ulp), so the host copy has the device's exact geometry
            span = 1 + sum((n - 1) * st for n, st in zip(h.shape, h.stride(), strict=True)) if h.numel() else 0
            buf = torch.empty(h.storage_offset() + span, dtype=h.dtype)
            return buf.as_strided(h.shape, h.stride(), h.storage_offset()).copy_(h)
        st = h.untyped_storage()
        tracking.transfer("device_to_host", st.nbytes())
        copy = torch.UntypedStorage(st.nbytes())
        copy.copy_(st)
        return torch.empty(0, dtype=a.dtype).set_(copy, h.storage_offset(), h.shape, h.stride())
    if isinstance(a, torch.device) and a.type == "neuron":
        return torch.device("cpu")
    return a


def _to_device(r, index: int = 0):
    if isinstance(r, torch.Tensor) and r.device.type == "cpu":
        dtype_policy.check_supported(r.dtype)  # the result must be representable on the device
        tracking.transfer("host_to_device", r.nbytes)
        return wrap_host(r.clone() if r._is_view() else r, index=index)
    return r


def _announce(f, args, kwargs) -> None:
    """The policy's first step: refuse (``error``) or warn once per operator (``warn``)."""
    mode = policy()
    if mode == "error":
        raise NeuronFallbackError(
            f"Operator '{f.qualified}' is not supported on the NeuronCore for dtypes "
            f"({', '.join(_dtypes(args, kwargs))}) and TORCHNEURON_FALLBACK=error forbids the CPU "
            "fallback. Unset it (or set 'warn') to run the op on the host."
        )
    if mode == "warn" and f.qualified not in _warned:
        _warned.add(f.qualified)
        message = (
            f"Operator '{f.qualified}' executed via CPU fallback (dtypes: "
            f"{', '.join(_dtypes(args, kwargs))}); it is not supported on the NeuronCore."
        )
        frames = user_stack(limit=1)  # attribute the warning to the user's line
        if frames:
            warnings.warn_explicit(message, UserWarning, frames[-1].filename, frames[-1].lineno or 0)
        else:
            warnings.warn(message, stacklevel=3)


def account_host_results(f, args, kwargs, out) -> None:
    """Book an operator whose inputs the device holds natively but whose result has a dtype
    only the host computes (an FFT or ``torch.complex`` of float tensors …): its host kernel
    already ran on the inputs' bytes, so it is accounted as the fallback it is — the policy
    applies, the op is tracked as a fallback rather than as executed, and the copies it stands
    for (device inputs to the host, results to the device) are counted."""
    _announce(f, args, kwargs)
    tracking.fell_back(f.qualified)
    if tracking._executed.get(f.qualified, 0) > 0:
        tracking._executed[f.qualified] -= 1

    def count(direction: str, device_only: bool):
        def visit(a):
            if isinstance(a, torch.Tensor) and (not device_only or a.device.type == "neuron"):
                tracking.transfer(direction, a.nbytes)
            return a

        return visit

    tree_map(count("device_to_host", True), (args, kwargs))
    tree_map(count("host_to_device", False), out)


def run(op: torch._ops.OpOverload, args: tuple, kwargs: dict):
    f = facts(op)
    check_one_device(f, args, kwargs)
    _announce(f, args, kwargs)
    tracking.fell_back(f.qualified)
    ERRORS.raise_pending()  # the host reads device data: a synchronisation point
    t0 = perf_counter_ns()
    index = core_of(args, kwargs)  # raises for tensors on two cores
    whole = f.name.startswith("aten::as_strided")
    hargs = tree_map(lambda a: _to_host(a, whole), args)
    hkwargs = tree_map(lambda a: _to_host(a, whole), kwargs)
    hargs, hkwargs = with_device_generator(f, tuple(hargs), dict(hkwargs), index)  # device RNG everywhere
    out = call_host(op, f, hargs, hkwargs, index)
    if activity.RECORDER is not None:
        activity.RECORDER.record("fallback", f.qualified, hargs, out, t0, perf_counter_ns())
    # written arguments: copy the host's result back into device memory
    for w in f.written:
        d = args[w] if isinstance(w, int) and w < len(args) else kwargs.get(w) if isinstance(w, str) else None
        h = hargs[w] if isinstance(w, int) and w < len(hargs) else hkwargs.get(w) if isinstance(w, str) else None
        pairs = zip(d, h, strict=False) if isinstance(d, (list, tuple)) else [(d, h)]
        for dd, hh in pairs:
            if isinstance(dd, torch.Tensor) and dd.device.type == "neuron":
                if dd.shape != hh.shape:
                    dd.resize_(hh.shape)
                tracking.transfer("host_to_device", hh.nbytes)
                host(dd).copy_(hh)
    if f.written:
        # results of in-place / out= ops are the written arguments
        written = [args[w] if isinstance(w, int) else kwargs[w] for w in f.written if (isinstance(w, int) and w < len(args)) or (isinstance(w, str) and w in kwargs)]
        if isinstance(out, torch.Tensor) and len(written) == 1:
            return written[0]
        if isinstance(out, tuple) and len(out) == len(written):
            return tuple(written)
    return tree_map(lambda r: _to_device(r, index), out)


def fallback_kernel(op: torch._ops.OpOverload):
    def kernel(*args, **kwargs):
        return run(op, args, kwargs)

    kernel.__name__ = f"neuron_fallback_{op.__name__}"
    return kernel
