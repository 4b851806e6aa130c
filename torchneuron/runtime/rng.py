"""The device's random number generator.

Random kernels of the simulated core draw from one CPU ``torch.Generator`` owned by
the device (not the CPU default generator), so ``torch.neuron.manual_seed`` and the CPU seed are
independent, as on a real accelerator, and ``torch.manual_seed`` seeds both.

With the native device hooks (:mod:`torchneuron.native`), ``torch.Generator(device="neuron")``
makes a generator on ``neuron:0`` whose state is held by a CPU generator of its own; the device's
default generator (``torch.neuron.default_generators[0]``) is a neuron generator around the one
below. The host kernels that run random operators receive that CPU generator
(:func:`host_generator`), so a neuron generator seeded with ``s`` draws the numbers a CPU
generator seeded with ``s`` draws, just as the device generator does.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

DEFAULT_SEED = 67280421310721  # the same default as CUDA's generators

_generator = torch.Generator()
_generator.manual_seed(DEFAULT_SEED)


def generator() -> torch.Generator:
    return _generator


def host_generator(g: torch.Generator) -> torch.Generator:
    """The generator a host kernel takes for the generator ``g`` passed to a device operator:
    the CPU generator behind a neuron generator (same state, not a copy); any other as is."""
    if g.device.type == "neuron":
        from ..native import host_generator as unwrap

        return unwrap(g)
    return g


_defaults: tuple[torch.Generator, ...] | None = None


def default_generators() -> tuple[torch.Generator, ...]:
    """``(default neuron generator,)``, as ``torch.cuda.default_generators`` (one device).
    Needs the native hooks; its state is :func:`generator`'s."""
    global _defaults
    if _defaults is None:
        from ..native import default_generator

        _defaults = (default_generator(),)
    return _defaults


@contextmanager
def as_cpu_default():
    """Run host kernels that draw from the CPU default generator on the device's stream of
    random numbers instead (the CPU generator's own state is left as it was)."""
    cpu = torch.default_generator
    saved = cpu.get_state()
    cpu.set_state(_generator.get_state())
    try:
        yield
    finally:
        _generator.set_state(cpu.get_state())
        cpu.set_state(saved)


def manual_seed(seed: int) -> None:
    _generator.manual_seed(int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def seed() -> int:
    return _generator.seed()


def initial_seed() -> int:
    return _generator.initial_seed()


def get_state() -> torch.Tensor:
    return _generator.get_state()


def set_state(state: torch.Tensor) -> None:
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8:
        raise TypeError("RNG state must be a torch.ByteTensor (as returned by get_rng_state)")
    _generator.set_state(state.cpu())
