"""Where PyTorch 2.14's Python code needs the backend's help for an out-of-tree device.

Each adjustment is narrow: it only changes behaviour for the ``neuron`` device and defers to
PyTorch's own function otherwise.

* ``torch.accelerator.synchronize/current_stream/set_stream``: the C++ bridge for Python device
  guards answers these itself (a no-op or "Backend doesn't support synchronizing"), so they
  are pointed at the neuron queue.
* storage moves (``UntypedStorage.to("neuron")``, used by ``torch.load``): PyTorch allocates
  the target with ``torch.UntypedStorage(n, device=...)``, which needs a C++ allocator; for
  ``neuron`` the storage comes from the device allocator instead.
* ``Module.to("neuron")``: PyTorch only swaps parameter data in place (keeping identity, so
  tied weights stay tied) between its own dense backends; for a PrivateUse1 device it makes a
  new Parameter per module, silently untying shared weights. The ties are restored.
* printing a device tensor formats it on the host (``_tensor_str`` would otherwise run its
  float64 statistics on the device and trip the 32-bit dtype warning).
"""

from __future__ import annotations

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
            return nd.synchronize(device if not isinstance(device, int) else None)
        return orig_sync(device)

    def current_stream(device=None, /):
        if _is_neuron(device):
            return nd.current_stream()
        return orig_cur(device)

    def set_stream(stream, /):
        if stream.device_type == _NEURON_TYPE:
            return nd.set_stream(stream)
        return orig_set(stream)

    for f, o in ((synchronize, orig_sync), (current_stream, orig_cur), (set_stream, orig_set)):
        f.__doc__ = o.__doc__
        f.__wrapped__ = o  # type: ignore[attr-defined]
    acc.synchronize, acc.current_stream, acc.set_stream = synchronize, current_stream, set_stream


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

    def _str(self, *, tensor_contents=None):
        if tensor_contents is None and self.device.type == "neuron" and self.layout == torch.strided:
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

    def _apply(self, fn, recurse=True):
        if getattr(tls, "depth", 0) or not recurse:
            return orig(self, fn, recurse)
        shared = _shared_slots(self, "param"), _shared_slots(self, "buffer")
        tls.depth = 1
        try:
            result = orig(self, fn, recurse)
        finally:
            tls.depth = 0
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


def install() -> None:
    global _done
    if _done:
        return
    _patch_accelerator()
    _patch_storage_to()
    _patch_printing()
    _patch_module_apply()
    _done = True
