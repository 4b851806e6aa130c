"""torchneuron: a native PyTorch backend for AWS Trainium, on a simulated NeuronCore by default.

Installing the package is enough: PyTorch loads it through the ``torch.backends`` entry point
when ``torch`` is imported, which renames the PrivateUse1 device to ``neuron``, installs the
device's kernels and exposes ``torch.neuron``.
"""

from __future__ import annotations


def _autoload() -> None:
    """Entry point called by ``import torch`` (group ``torch.backends``).

    Defined before anything is imported: when ``import torchneuron`` comes first, importing
    torch runs this entry point while this module is still initialising; registration then
    happens at the end of this module instead.
    """
    register = globals().get("_register")
    if register is not None:
        register()


import threading  # noqa: E402

import torch  # noqa: E402

__version__ = "0.1.0"

from .ops.tracking import (  # noqa: E402
    clear_op_tracking,
    get_executed_ops,
    get_fallback_ops,
    transfer_stats,
)
from .runtime.errors import NeuronFallbackError, NeuronRuntimeError  # noqa: E402

__all__ = [
    "nki_op",
    "set_execution_mode",
    "get_execution_mode",
    "execution_mode",
    "Estimate",
    "estimate",
    "NeuronFallbackError",
    "NeuronRuntimeError",
    "transfer_stats",
    "clear_op_tracking",
    "get_executed_ops",
    "get_fallback_ops",
    "is_registered",
]

_lock = threading.Lock()
_registered = False


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


def _register() -> None:
    global _registered
    with _lock:
        if _registered:
            return
        from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

        current = torch._C._get_privateuse1_backend_name()
        if current not in ("privateuseone", "neuron"):
            raise RuntimeError(
                f"torchneuron cannot register: the PrivateUse1 device is already named {current!r} "
                "by another backend in this process"
            )
        from . import device as neuron_module

        if current == "privateuseone":
            hooks = _Hooks()
            from . import native  # C++ hooks around `hooks` (pinned memory, storage resize)

            native.install(hooks)  # before the Python hooks: one registration per process
            _setup_privateuseone_for_python_backend(
                "neuron", backend_module=neuron_module, hook=hooks, device_guard=_Guard()
            )
        from .ops import registry  # kernels refer to the `neuron` device: import after renaming

        registry.install()
        from . import torch_glue

        torch_glue.install()
        from .profiler import integration  # torch.profiler sees the device from the start

        integration.install()
        from . import distributed  # noqa: F401  registers the c10d backend "neuron" (~1 ms)
        _registered = True
    from . import adaptive

    adaptive.from_environment()  # TORCHNEURON_ADAPTIVE_EAGER=1


def is_registered() -> bool:
    return _registered


def __getattr__(name: str):
    # imported on first use: none of these is needed to run the device
    if name in ("estimate", "Estimate"):
        from . import profiler

        return getattr(profiler, name)
    if name in ("set_execution_mode", "get_execution_mode", "execution_mode"):
        from . import adaptive

        return getattr(adaptive, name)
    if name == "nki_op":
        from .nki.torch_integration import nki_op

        return nki_op
    raise AttributeError(f"module 'torchneuron' has no attribute {name!r}")


_register()
