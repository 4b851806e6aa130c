"""The devices' random number generators.

Random kernels of a simulated core draw from a CPU ``torch.Generator`` owned by that core (not
the CPU default generator), so ``torch.neuron.manual_seed`` and the CPU seed are independent, as
on a real accelerator, and ``torch.manual_seed`` seeds both. Each logical core has its own
(``neuron:1``'s stream is not ``neuron:0``'s), as each CUDA device has.

With the native device hooks (:mod:`torchneuron.native`), ``torch.Generator(device="neuron")``
makes a generator on a core whose state is held by a CPU generator of its own; a core's
default generator (``torch.neuron.default_generators[i]``) is a neuron generator around the one
below. The host kernels that run random operators receive that CPU generator
(:func:`host_generator`), so a neuron generator seeded with ``s`` draws the numbers a CPU
generator seeded with ``s`` draws, just as the device generator does.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

DEFAULT_SEED = 67280421310721  # the same default as CUDA's generators


def _new() -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(DEFAULT_SEED)
    return g


_generators: list[torch.Generator] = [_new()]


def init(count: int) -> list[torch.Generator]:
    """One generator per core (called once by the registration, before any is used)."""
    while len(_generators) < count:
        _generators.append(_new())
    return _generators[:count]


def generator(index: int = 0) -> torch.Generator:
    """The CPU generator holding core ``index``'s stream."""
    return _generators[index]


def host_generator(g: torch.Generator) -> torch.Generator:
    """The generator a host kernel takes for the generator ``g`` passed to a device operator:
    the CPU generator behind a neuron generator (same state, not a copy); any other as is."""
    if g.device.type == "neuron":
        from ..native import host_generator as unwrap

        return unwrap(g)
    return g


_defaults: tuple[torch.Generator, ...] | None = None


def default_generators() -> tuple[torch.Generator, ...]:
    """One default neuron generator per core, as ``torch.cuda.default_generators``.
    Needs the native hooks; core ``i``'s state is ``generator(i)``'s."""
    global _defaults
    if _defaults is None:
        from ..native import default_generator
        from .devices import count

        _defaults = tuple(default_generator(i) for i in range(count()))
    return _defaults


@contextmanager
def as_cpu_default(index: int = 0):
    """Run host kernels that draw from the CPU default generator on core ``index``'s stream of
    random numbers instead (the CPU generator's own state is left as it was)."""
    cpu = torch.default_generator
    g = _generators[index]
    if g is cpu:  # inside drawing_from_host: already the same stream
        yield
        return
    saved = cpu.get_state()
    cpu.set_state(g.get_state())
    try:
        yield
    finally:
        g.set_state(cpu.get_state())
        cpu.set_state(saved)


@contextmanager
def drawing_from_host(index: int = 0):
    """Core ``index``'s random kernels draw from the CPU default generator while inside: host and
    device draws then form one stream in program order, as in a run on the CPU. A checking aid
    for programs that draw on both (VITS draws its duration noise on the host, its prior noise on
    the device) — with separate streams, the same seed gives the two runs different numbers."""
    saved = _generators[index]
    _generators[index] = torch.default_generator
    try:
        yield
    finally:
        _generators[index] = saved


def manual_seed(seed: int, index: int = 0) -> None:
    _generators[index].manual_seed(int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def seed(index: int = 0) -> int:
    return _generators[index].seed()


def initial_seed(index: int = 0) -> int:
    return _generators[index].initial_seed()


def get_state(index: int = 0) -> torch.Tensor:
    return _generators[index].get_state()


def set_state(state: torch.Tensor, index: int = 0) -> None:
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8:
        raise TypeError("RNG state must be a torch.ByteTensor (as returned by get_rng_state)")
    _generators[index].set_state(state.cpu())
