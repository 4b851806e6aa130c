"""The device's random number generator.

Random kernels of the simulated core draw from one CPU ``torch.Generator`` owned by
the device (not the CPU default generator), so ``torch.neuron.manual_seed`` and the CPU seed are
independent, as on a real accelerator, and ``torch.manual_seed`` seeds both.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

DEFAULT_SEED = 67280421310721  # the same default as CUDA's generators

_generator = torch.Generator()
_generator.manual_seed(DEFAULT_SEED)


def generator() -> torch.Generator:
    return _generator


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
