"""Calling NKI kernels from PyTorch.

Two entry points:

* **Eager calls on torch tensors.** ``kernel(x, w)`` (or ``kernel[grid](...)``,
  ``nki.simulate(kernel, return_profile=True)(...)``) where any argument is a ``torch.Tensor``
  goes through :func:`call_kernel`: every tensor argument becomes a numpy view of its host
  memory (``torchneuron.runtime.storage.host`` for ``neuron`` tensors; no copy, bf16/fp8 through
  ``ml_dtypes`` views), the kernel runs on the simulator, and every numpy result comes back as a
  torch tensor -- a ``neuron`` tensor adopting the result's memory (``wrap_host``, no copy) when
  any input was on ``neuron``, a CPU tensor otherwise. Kernels that write into an argument
  write straight into the tensor's bytes. Rule violations raise the simulator's
  :class:`~torchneuron.nki.NKIRuleError`.

* **Custom operators.** :func:`nki_op` registers a jitted kernel as a ``torch.library`` custom
  op (schema inferred from the kernel's signature), with a fake implementation so the op
  traces under ``torch.compile``; the returned ``CustomOpDef`` supports ``register_autograd``.
  Inside ``torch.compile(backend="neuron")`` the compiler cannot lower the op, so it stays an
  eager node between compiled regions and runs on the simulator.
"""

from __future__ import annotations

import inspect
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Optional

import ml_dtypes
import numpy as np
import torch

from .simulator import Kernel, run

# torch dtype -> (same-size torch dtype numpy understands, numpy dtype to view it as)
_VIEW_AS: dict[torch.dtype, tuple[torch.dtype, np.dtype]] = {
    torch.bfloat16: (torch.int16, np.dtype(ml_dtypes.bfloat16)),
    torch.float8_e4m3fn: (torch.uint8, np.dtype(ml_dtypes.float8_e4m3fn)),
    torch.float8_e5m2: (torch.uint8, np.dtype(ml_dtypes.float8_e5m2)),
}
# numpy dtype -> (numpy dtype torch.from_numpy accepts, torch dtype to view it as)
_FROM_NP: dict[np.dtype, tuple[np.dtype, torch.dtype]] = {
    np_dt: (np.dtype(np.int16 if t_view == torch.int16 else np.uint8), t_dt)
    for t_dt, (t_view, np_dt) in _VIEW_AS.items()
}


def has_torch_tensor(args: Iterable[Any], kwargs: dict | None = None) -> bool:
    """True if any (possibly nested in a list/tuple) argument is a ``torch.Tensor``.
    Cheap when torch is not imported (the simulator itself never imports it)."""
    torch_mod = sys.modules.get("torch")
    if torch_mod is None:
        return False

    def any_tensor(objs: Iterable[Any]) -> bool:
        for o in objs:
            if isinstance(o, torch_mod.Tensor):
                return True
            if isinstance(o, (list, tuple)) and any_tensor(o):
                return True
        return False

    return any_tensor(args) or (kwargs is not None and any_tensor(kwargs.values()))


_ALIGN = 64  # bytes; what the device allocator guarantees


# ---- torch <-> numpy --------------------------------------------------------------------------
def tensor_to_numpy(t: torch.Tensor) -> np.ndarray:
    """A numpy array aliasing ``t``'s bytes (no copy): the host view of a ``neuron`` tensor, or
    the CPU tensor itself; bf16/fp8 as ``ml_dtypes`` arrays."""
    if t.device.type == "neuron":
        from torchneuron.runtime.storage import host

        h = host(t)
    elif t.device.type == "cpu":
        h = t
    else:
        raise TypeError(f"NKI kernels take cpu or neuron tensors, not {t.device.type} tensors")
    h = h.detach()
    if h.is_conj() or h.is_neg():
        h = h.resolve_conj().resolve_neg()
    view = _VIEW_AS.get(h.dtype)
    if view is not None:
        return h.view(view[0]).numpy().view(view[1])
    return h.numpy()


def numpy_to_tensor(a: Any, device: torch.device) -> Any:
    """A torch tensor adopting the numpy result ``a`` (no copy), on ``device``."""
    if isinstance(a, np.generic):
        a = np.asarray(a)
    if not isinstance(a, np.ndarray):
        return a
    if any(s < 0 for s in a.strides) or not a.flags.writeable:
        a = np.array(a)
    if device.type == "neuron" and a.ctypes.data % _ALIGN:
        # device memory must be 64-byte aligned (compiled executables import it zero-copy);
        # numpy's allocator only guarantees 16: one copy into a torch (64-aligned) allocation
        conv = _FROM_NP.get(a.dtype)
        t_dtype = conv[1] if conv is not None else torch.from_numpy(a[:0].copy()).dtype
        h = torch.empty(a.shape, dtype=t_dtype)
        np.copyto(tensor_to_numpy(h), a)
        from torchneuron.runtime.storage import wrap_host

        return wrap_host(h, index=device.index or 0)
    conv = _FROM_NP.get(a.dtype)
    if conv is not None:
        h = torch.from_numpy(a.view(conv[0])).view(conv[1])
    else:
        h = torch.from_numpy(a)
    if device.type == "neuron":
        from torchneuron.runtime.storage import wrap_host

        return wrap_host(h, index=device.index or 0)
    return h


def _convert_args(obj: Any, host_inputs: list) -> Any:
    if isinstance(obj, torch.Tensor):
        arr = tensor_to_numpy(obj)
        host_inputs.append(arr)
        return arr
    if isinstance(obj, (list, tuple)):
        return type(obj)(_convert_args(o, host_inputs) for o in obj)
    return obj


def _convert_results(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, (np.ndarray, np.generic)):
        return numpy_to_tensor(obj, device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_convert_results(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: _convert_results(v, device) for k, v in obj.items()}
    return obj


def _result_device(args: Iterable[Any]) -> torch.device:
    for a in args:
        if isinstance(a, torch.Tensor) and a.device.type == "neuron":
            return torch.device("neuron", 0)
        if isinstance(a, (list, tuple)) and _result_device(a).type == "neuron":
            return torch.device("neuron", 0)
    return torch.device("cpu")


def _host_views(objs: Any) -> tuple:
    out = []
    for o in objs if isinstance(objs, (list, tuple)) else (objs,):
        if isinstance(o, torch.Tensor):
            if o.device.type == "neuron":
                from torchneuron.runtime.storage import host

                out.append(host(o))
            else:
                out.append(o)
    return tuple(out)


def call_kernel(
    kernel: Any,
    *args: Any,
    target: Any = None,
    lnc: int | None = None,
    return_profile: bool = False,
    **kwargs: Any,
) -> Any:
    """Run ``kernel`` (a jitted kernel, ``kernel[grid]`` or a plain kernel function) on torch
    tensors; see the module docstring. With ``return_profile=True`` returns
    ``(results, Profile)``."""
    if isinstance(kernel, Kernel):
        func, grid = kernel.func, kernel.grid
        if target is None:
            target = kernel.options.get("target")
    else:
        func, grid = kernel, ()
    device = _result_device((*args, *kwargs.values()))
    host_inputs: list = []
    np_args = tuple(_convert_args(a, host_inputs) for a in args)
    np_kwargs = {k: _convert_args(v, host_inputs) for k, v in kwargs.items()}

    from torchneuron.runtime import activity

    t0 = time.perf_counter_ns()
    out, prof = run(func, np_args, np_kwargs, grid, target, lnc)
    result = _convert_results(out, device)
    if activity.RECORDER is not None:
        name = getattr(func, "__name__", repr(func))
        activity.RECORDER.record(
            "nki",
            name,
            _host_views((*args, *kwargs.values())),
            _host_views(result),
            t0,
            time.perf_counter_ns(),
        )
    return (result, prof) if return_profile else result


# ---- custom operators -------------------------------------------------------------------------
_SCALAR_TYPES = (bool, int, float, str)


def _annotation_for(name: str, param: inspect.Parameter, arg_types: dict[str, Any]) -> Any:
    if name in arg_types:
        return arg_types[name]
    if param.default is inspect.Parameter.empty:
        return torch.Tensor
    d = param.default
    if d is None:
        return Optional[torch.Tensor]  # noqa: UP007, UP045 (infer_schema wants typing.Optional)
    if isinstance(d, _SCALAR_TYPES):
        return type(d)
    raise TypeError(
        f"cannot infer the schema type of argument {name!r} (default {d!r}); "
        f"pass arg_types={{{name!r}: ...}} to nki_op"
    )


def _signature_for(
    func: Callable[..., Any], arg_types: dict[str, Any], num_outputs: int
) -> inspect.Signature:
    sig = inspect.signature(func)
    params = []
    for name, p in sig.parameters.items():
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise TypeError(f"nki_op kernels cannot take *args/**kwargs ({func.__name__})")
        params.append(p.replace(annotation=_annotation_for(name, p, arg_types)))
    if num_outputs == 0:
        ret: Any = None
    elif num_outputs == 1:
        ret = torch.Tensor
    else:
        ret = tuple[tuple(torch.Tensor for _ in range(num_outputs))]  # type: ignore[misc]
    return inspect.Signature(params, return_annotation=ret)


def _default_fake(num_outputs: int, like: int | str) -> Callable[..., Any]:
    def fake(*args: Any, **kwargs: Any) -> Any:
        if isinstance(like, str):
            ref = kwargs[like]
        else:
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            ref = tensors[like]
        outs = tuple(torch.empty_like(ref) for _ in range(num_outputs))
        if num_outputs == 0:
            return None
        return outs[0] if num_outputs == 1 else outs

    return fake


def nki_op(
    name: str,
    kernel: Any = None,
    *,
    mutates_args: str | Sequence[str] = (),
    fake: Callable[..., Any] | None = None,
    num_outputs: int = 1,
    like: int | str = 0,
    arg_types: dict[str, Any] | None = None,
    schema: str | None = None,
    grid: Any = None,
    target: Any = None,
    backward: Callable[..., Any] | None = None,
    setup_context: Callable[..., Any] | None = None,
    device_types: Any = None,
) -> Any:
    """Register a ``@nki.jit`` kernel as the custom operator ``torch.ops.<ns>.<name>``.

    Use as ``nki_op("ns::name", kernel, ...)`` or as a decorator ``@nki_op("ns::name", ...)``
    on a jitted kernel (or a plain kernel function). Returns the ``torch.library``
    ``CustomOpDef``: call it like a function, and use ``.register_autograd`` /
    ``.register_fake`` on it as with any custom op.

    Schema: inferred from the kernel's Python signature -- parameters without a default are
    ``Tensor``; parameters with a ``bool``/``int``/``float``/``str`` default take that type;
    a ``None`` default means ``Tensor?``. Override per argument with ``arg_types={"n": int}``
    or give the whole ``schema`` string. ``num_outputs`` (default 1) is the number of tensors
    the kernel returns (0 for a kernel that only writes into ``mutates_args``).

    Fake (meta) implementation, used by ``torch.compile`` and FakeTensor tracing: pass
    ``fake=fn`` (called with fake tensors, returns ``torch.empty(...)`` outputs with the right
    shapes/dtypes), or rely on the default: every output is ``torch.empty_like`` of the
    ``like``-th tensor argument (an int index among the tensor arguments, or a parameter name;
    default the first tensor), which fits element-wise, normalisation and softmax kernels.

    ``grid`` launches the kernel as ``kernel[grid]``; it may be a callable receiving the op's
    arguments and returning the grid. ``backward``/``setup_context`` are forwarded to
    ``register_autograd``.
    """

    def register(k: Any) -> Any:
        kern = k if isinstance(k, Kernel) else Kernel(getattr(k, "func", k))
        func = kern.func
        sig = _signature_for(func, dict(arg_types or {}), num_outputs)

        def impl(*args: Any, **kwargs: Any) -> Any:
            launch = kern
            if grid is not None:
                g = grid(*args, **kwargs) if callable(grid) else grid
                launch = kern[g]
            out = call_kernel(launch, *args, target=target, **kwargs)
            if num_outputs == 0:
                return None
            if num_outputs > 1:
                return tuple(out)
            return out[0] if isinstance(out, (tuple, list)) else out

        impl.__signature__ = sig  # type: ignore[attr-defined]
        impl.__name__ = func.__name__
        impl.__qualname__ = func.__qualname__
        impl.__doc__ = func.__doc__
        impl.__module__ = func.__module__
        op = torch.library.custom_op(
            name,
            mutates_args=mutates_args,
            device_types=device_types,
            schema=schema,
        )(impl)
        op.register_fake(fake if fake is not None else _default_fake(num_outputs, like))
        if backward is not None:
            op.register_autograd(backward, setup_context=setup_context)
        op.kernel = kern  # type: ignore[attr-defined]
        return op

    if kernel is not None:
        return register(kernel)
    return register


__all__ = ["call_kernel", "has_torch_tensor", "nki_op", "numpy_to_tensor", "tensor_to_numpy"]
