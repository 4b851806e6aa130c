"""``torch.distributed`` on the ``neuron`` device: the c10d backend named ``neuron``.

Importing this package registers the backend (cheap: ``torch.distributed`` is already loaded by
``import torch``, and the backend implementation is imported on first use). After that::

    torch.distributed.init_process_group("neuron")   # neuron and CPU tensors
    torch.distributed.init_process_group()           # default device map: neuron -> "neuron"
    torch.distributed.init_process_group("cpu:gloo,neuron:neuron")

See ``docs/distributed.md``.
"""

from __future__ import annotations

__all__ = ["register", "is_registered", "BACKEND_NAME"]

BACKEND_NAME = "neuron"
_registered = False


def _create(dist_backend_opts, backend_options):
    from .backend import create_backend

    return create_backend(dist_backend_opts, backend_options)


def register() -> None:
    """Register the c10d backend ``neuron`` (idempotent).

    Serves both as the import-time hook and as the ``torch.distributed.backends`` entry point
    (torch calls it lazily from ``init_process_group("neuron")``).
    """
    global _registered
    if _registered:
        return
    import torch.distributed as dist

    if not dist.is_available():  # a torch build without distributed support
        return
    # The backend handles neuron tensors (gloo on host aliases) and CPU tensors (plain gloo), so
    # that ``init_process_group("neuron")`` also serves barrier(), object collectives and CPU
    # tensors. Registering "cpu" does not change the CPU default (gloo stays the CPU default);
    # "neuron" becomes the default backend of the neuron device.
    dist.Backend.register_backend(
        BACKEND_NAME, _create, extended_api=True, devices=["neuron", "cpu"]
    )
    _registered = True


def is_registered() -> bool:
    return _registered


register()
