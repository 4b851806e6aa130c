"""The logical NeuronCores a process drives: how many there are and which one is current.

The simulated instance has as many Trainium chips as its local processes need (at least one):
``neuron:0 .. neuron:N-1`` are the logical cores of those chips (trn2 with LNC=2: 4 per chip,
LNC=1: 8). As with the Neuron runtime, ``NEURON_RT_VISIBLE_CORES`` (``"2"``, ``"0-3"``,
``"0,2"``) or ``NEURON_RT_NUM_CORES`` (``"2"``) choose the cores a process sees; they are
numbered from ``neuron:0`` inside the process. Each core has its own device memory (the
target's per-core HBM), memory statistics and default random generator.

The current core is per thread (``torch.neuron.set_device``, ``torch.accelerator``). A process
started by a launcher (torchrun, ``accelerate launch``) starts on ``neuron:LOCAL_RANK``, the core
its rank drives, which is what those tools expect; otherwise on ``neuron:0``.

Several cores per process need the native device hooks (:mod:`torchneuron.native`), whose device
guard and tensor constructor know device indices; without them the process has ``neuron:0`` only.
"""

from __future__ import annotations

import os
import warnings

import torch

from .target import Target


def _parse_cores(spec: str, available: int) -> int:
    """How many cores ``NEURON_RT_VISIBLE_CORES=spec`` names ("3", "0-3", "0,2,5")."""
    cores: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi) if hi else int(lo)
        if first < 0 or last < first:
            raise ValueError(f"bad core range {part!r}")
        cores.update(range(first, last + 1))
    if not cores:
        raise ValueError("no cores named")
    if max(cores) >= available:
        raise ValueError(f"core {max(cores)} does not exist (the simulated node has {available})")
    return len(cores)


def configured_count(target: Target, environ: dict[str, str] | None = None) -> int:
    """The number of logical cores of this process, from the target and the environment.

    A malformed ``NEURON_RT_VISIBLE_CORES`` / ``NEURON_RT_NUM_CORES`` is reported with a warning
    and ignored (this runs while ``import torch`` loads the backend, where raising would make
    torch itself unusable)."""
    env = os.environ if environ is None else environ
    per_chip = target.logical_cores_per_chip
    node = min(per_chip * target.chips_per_node, 64)  # (the native guard's limit)
    local = env.get("LOCAL_WORLD_SIZE", "")
    chips = 1
    if local.isdigit() and int(local) > per_chip:
        chips = min(-(-int(local) // per_chip), target.chips_per_node)  # enough for every local rank
    default = per_chip * chips
    for var in ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES"):
        spec = env.get(var, "").strip()
        if not spec:
            continue
        try:
            if var == "NEURON_RT_NUM_CORES":
                n = int(spec)
                if not 1 <= n <= node:
                    raise ValueError(f"must be between 1 and {node}")
                return n
            return _parse_cores(spec, node)
        except ValueError as e:
            warnings.warn(f"torchneuron: ignoring {var}={spec!r} ({e}); using {default} cores", stacklevel=2)
    return min(default, node)


def default_index(count: int, environ: dict[str, str] | None = None) -> int:
    """The core a process starts on: its launcher's ``LOCAL_RANK`` (modulo the cores), else 0."""
    env = os.environ if environ is None else environ
    rank = env.get("LOCAL_RANK", "")
    return int(rank) % count if rank.isdigit() else 0


_native = None  # the native hooks module once installed (several cores), else None


def attach(module) -> None:
    """Use the installed native hooks' device guard (called once by the registration)."""
    global _native
    _native = module


def count() -> int:
    return 1 if _native is None else _native.device_count()


def current() -> int:
    return 0 if _native is None else _native.current_device()


def set_current(index: int) -> None:
    if _native is None:
        check(index)
        return
    _native.set_device(index)


def check(index: int) -> int:
    n = count()
    if not 0 <= index < n:
        cores = "neuron:0" if n == 1 else f"neuron:0 .. neuron:{n - 1}"
        hint = "" if _native is not None else " (several cores need the native device hooks: see torchneuron.native)"
        raise RuntimeError(
            f"neuron:{index} does not exist: this process has {n} logical NeuronCore"
            f"{'s' if n > 1 else ''} ({cores}){hint}"
        )
    return index


def index_of(device) -> int:
    """The core index ``device`` names: an int, ``"neuron:1"``, a torch.device; None or an index-less
    ``neuron`` device means the current core."""
    if device is None:
        return current()
    if isinstance(device, int):
        return current() if device == -1 else check(device)
    d = device if isinstance(device, torch.device) else torch.device(device)
    if d.type != "neuron":
        raise ValueError(f"Expected a neuron device, but got: {d}")
    return current() if d.index is None else check(d.index)


_DEVICES: list[torch.device] = []


def device(index: int) -> torch.device:
    """``torch.device("neuron", index)`` (cached)."""
    while len(_DEVICES) <= index:
        _DEVICES.append(torch.device("neuron", len(_DEVICES)))
    return _DEVICES[index]
