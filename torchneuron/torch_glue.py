"""Where PyTorch 2.14's Python code needs the backend's help for an out-of-tree device.

Each adjustment is narrow: it only changes behaviour for the ``neuron`` device and defers to
PyTorch's own function otherwise.

* ``torch.accelerator.synchronize/current_stream/set_stream``: the C++ bridge for Python device
  guards answers these itself (a no-op or "Backend doesn't support synchronizing"), so they
  are pointed at the neuron queue.
* storage allocation (``torch.UntypedStorage(n, device="neuron")``, used by ``torch.load``,
  ``storage.clone()`` and so ``copy.deepcopy``): PyTorch allocates it with the device's C++
  allocator, which a Python backend cannot provide (the process would crash); for ``neuron``
  the storage comes from the device allocator instead.
* ``Tensor.pin_memory()`` while ``neuron`` is the accelerator and the native hooks
  (``torchneuron.native``, which provide a pinned allocator) are not built: page-locked staging
  memory needs a C++ pinned allocator; the simulated device's memory *is* host memory, so a
  plain host copy is what pinning would achieve (DataLoader's ``pin_memory=True`` keeps working).
* Dynamo: frames of the device's own kernels and runtime are never traced (they run when
  compiled code falls back to eager, and would otherwise be compiled themselves). torchneuron
  does not import Dynamo itself (it would add ~1.1 s to ``import torch``): the rule is added
  right after ``torch._dynamo.trace_rules`` is first imported, by a one-shot import hook.
* ``Module.to("neuron")``: PyTorch only swaps parameter data in place (keeping identity, so
  tied weights stay tied and optimizers built earlier stay valid) between its own dense
  backends; for a PrivateUse1 device it makes a new Parameter per module. The original
  Parameter objects are given the moved data (``swap_tensors``), which also keeps ties.
* printing a device tensor formats it on the host (``_tensor_str`` would otherwise run its
  float64 statistics on the device and trip the 32-bit dtype warning).
* backward runs on the calling thread: PyTorch runs a PrivateUse1 backward on a device thread of
  its own, whose host kernels would start a second OpenMP team and leave libgomp throttled for the
  rest of the process (docs/architecture.md has the measurements). Multithreaded backward is
  turned off (``torch.autograd.set_multithreading_enabled(False)``, thread-local) in the thread
  that imports torchneuron, unless a CUDA device is present.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

import torch

_NEURON_TYPE = int(torch._C._autograd.DeviceType.PrivateUse1)
_done = False


def _is_neuron(d) -> bool:
    if d is None or isinstance(d, int):
        return True
    return torch.device(d).type == "neuron"


def _patch_accelerator() -> None:
    from . import device as nd

    acc = torch.accelerator
    orig_sync, orig_cur, orig_set = acc.synchronize, acc.current_stream, acc.set_stream

    def synchronize(device=None, /):
        if _is_neuron(device):
            return nd.synchronize(device)
        return orig_sync(device)

    def current_stream(device=None, /):
        if _is_neuron(device):
            return nd.current_stream(device)
        return orig_cur(device)

    def set_stream(stream, /):
        if stream.device_type == _NEURON_TYPE:
            return nd.set_stream(stream)
        return orig_set(stream)

    for f, o in ((synchronize, orig_sync), (current_stream, orig_cur), (set_stream, orig_set)):
        f.__doc__ = o.__doc__
        f.__wrapped__ = o  # type: ignore[attr-defined]
    acc.synchronize, acc.current_stream, acc.set_stream = synchronize, current_stream, set_stream


def _patch_storage_new() -> None:
    storage_cls = torch.UntypedStorage
    orig_new = storage_cls.__new__

    def __new__(cls, *args, device=None, **kwargs):
        if device is not None and cls is storage_cls and len(args) == 1 and isinstance(args[0], int) and not kwargs:
            d = device if isinstance(device, torch.device) else torch.device(device)
            if d.type == "neuron":
                return torch.empty(args[0], dtype=torch.uint8, device=d).untyped_storage()
        if device is not None:
            kwargs["device"] = device
        return orig_new(cls, *args, **kwargs)

    storage_cls.__new__ = __new__  # type: ignore[method-assign]


def _patch_pin_memory() -> None:
    orig = torch.Tensor.pin_memory

    def pin_memory(self, *args, **kwargs):
        try:
            return orig(self, *args, **kwargs)
        except (NotImplementedError, RuntimeError) as err:
            if "getPinnedMemoryAllocator" not in str(err) or self.device.type != "cpu":
                raise
            return self.clone(memory_format=torch.contiguous_format)

    pin_memory.__doc__ = orig.__doc__
    pin_memory.__wrapped__ = orig  # type: ignore[attr-defined]
    torch.Tensor.pin_memory = pin_memory  # type: ignore[method-assign]


def skip_in_dynamo(rules=None) -> None:
    """Keep Dynamo out of the device's kernels and runtime (``rules``: Dynamo's ``trace_rules``)."""
    if rules is None:
        import torch._dynamo.trace_rules as rules

    for mod in ("torchneuron.ops", "torchneuron.runtime", "torchneuron.profiler"):
        rules.add(mod)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``callback(module)`` right after the module ``name`` is first executed (once).

    torchneuron does not import Dynamo (about 1.1 s, most of what it would add to ``import
    torch``); what it must tell Dynamo is told when something else imports it."""

    def __init__(self, name: str, callback) -> None:
        self.name = name
        self.callback = callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # the other finders locate the module
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute, callback = spec.loader.exec_module, self.callback

        def exec_module(module) -> None:
            execute(module)
            callback(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def after_import(name: str, callback) -> None:
    """``callback(module)`` once ``name`` is imported: now if it already is, else right after."""
    if name in sys.modules:
        callback(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, callback))


def _patch_storage_to() -> None:
    import torch._utils as tu
    import torch.storage as ts

    orig = tu._to

    def _to(self, device, non_blocking=False):
        if isinstance(device, torch.device) and device.type == "neuron" and self.device != device:
            dst = torch.empty(self.nbytes(), dtype=torch.uint8, device=device).untyped_storage()
            dst.copy_(self, non_blocking)
            return dst
        return orig(self, device, non_blocking)

    _to.__wrapped__ = orig  # type: ignore[attr-defined]
    tu._to = _to
    ts._to = _to


def _patch_printing() -> None:
    import torch._tensor_str as tstr

    orig = tstr._str

    from .runtime.storage import has_device_memory

    def _real_device_tensor(t) -> bool:
        # fake, functional and meta tensors seen while tracing have no device memory
        if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.device.type != "neuron":
            return False
        if t.layout != torch.strided or torch._is_functional_tensor(t):
            return False
        return has_device_memory(t)

    def _str(self, *, tensor_contents=None):
        if tensor_contents is None and _real_device_tensor(self):
            # as PyTorch does for xla/lazy/mtia: format the values from a host copy (a
            # synchronisation point); PyTorch still writes the suffixes (device, dtype, grad)
            prefix = "tensor(" if type(self) in (torch.Tensor, torch.nn.Parameter) else f"{type(self).__name__}("
            tensor_contents = tstr._tensor_str(self.detach().cpu(), len(prefix))
        return orig(self, tensor_contents=tensor_contents)

    _str.__wrapped__ = orig  # type: ignore[attr-defined]
    tstr._str = _str


def _patch_module_apply() -> None:
    import threading

    from torch import nn

    orig = nn.Module._apply
    tls = threading.local()

    def _shared_slots(root: nn.Module, kind: str):
        groups: dict[int, list[tuple[nn.Module, str]]] = {}
        for mod in root.modules():
            table = mod._parameters if kind == "param" else mod._buffers
            for name, t in table.items():
                if t is not None:
                    groups.setdefault(id(t), []).append((mod, name))
        return [g for g in groups.values() if len(g) > 1]

    def _keep_identity(before: list[tuple[nn.Module, str, nn.Parameter]]) -> None:
        """Parameters that crossed to or from ``neuron`` become the *same* Python objects again,
        holding the moved data (``torch.utils.swap_tensors``), as ``param.data = ...`` keeps
        them for PyTorch's own backends: an optimizer built before ``model.to("neuron")`` (as
        accelerate's ``prepare(model, optimizer)`` does) keeps updating the model's parameters.
        A parameter that cannot be swapped (e.g. one with weak references) stays a new object."""
        done: dict[int, nn.Parameter] = {}
        for mod, name, old in before:
            new = mod._parameters.get(name)
            if new is None or new is old:
                continue
            if id(old) in done:
                mod._parameters[name] = done[id(old)]
                continue
            if not isinstance(new, nn.Parameter) or "neuron" not in (old.device.type, new.device.type) \
                    or old.device.type == new.device.type:
                continue
            try:
                torch.utils.swap_tensors(old, new)
            except RuntimeError:
                continue
            mod._parameters[name] = done[id(old)] = old

    def _apply(self, fn, recurse=True):
        if getattr(tls, "depth", 0) or not recurse:
            return orig(self, fn, recurse)
        shared = _shared_slots(self, "param"), _shared_slots(self, "buffer")
        before = [(mod, name, p) for mod in self.modules() for name, p in mod._parameters.items() if p is not None]
        tls.depth = 1
        try:
            result = orig(self, fn, recurse)
        finally:
            tls.depth = 0
        _keep_identity(before)
        del before
        for kind, groups in zip(("param", "buffer"), shared, strict=True):
            for group in groups:
                first_mod, first_name = group[0]
                table = first_mod._parameters if kind == "param" else first_mod._buffers
                keep = table[first_name]
                for mod, name in group[1:]:
                    other = mod._parameters if kind == "param" else mod._buffers
                    if other[name] is not keep:
                        other[name] = keep
        return result

    _apply.__wrapped__ = orig  # type: ignore[attr-defined]
    nn.Module._apply = _apply


def _backward_on_calling_thread() -> None:
    if not torch.cuda.is_available():
        torch._C._set_multithreading_enabled(False)


def install() -> None:
    global _done
    if _done:
        return
    _patch_accelerator()
    _patch_storage_new()
    _patch_storage_to()
    _patch_pin_memory()
    _patch_printing()
    _patch_module_apply()
    _backward_on_calling_thread()
    after_import("torch._dynamo.trace_rules", skip_in_dynamo)
    _done = True
