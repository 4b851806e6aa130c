"""``torch.Generator(device="neuron")`` and ``torch.neuron.default_generators``.

A neuron generator holds a CPU generator's state (the device's random kernels are the host's),
so every draw is compared with a CPU generator seeded the same way. The generators need the
native hooks; one subprocess checks that without them the old, explicit error remains.
"""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import torchneuron.native as native
from torchneuron.runtime import rng

DEV = torch.device("neuron")
needs_native = pytest.mark.skipif(not native.available(), reason=f"native hooks: {native.status()}")


def _cpu(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# each case draws with `g` into tensors on `device`
_DRAWS = {
    "randn": lambda d, g: torch.randn(3, 5, device=d, generator=g),
    "rand": lambda d, g: torch.rand(7, device=d, generator=g),
    "randint": lambda d, g: torch.randint(0, 100, (9,), device=d, generator=g),
    "randperm": lambda d, g: torch.randperm(20, device=d, generator=g),
    "normal_": lambda d, g: torch.empty(6, device=d).normal_(2.0, 0.5, generator=g),
    "uniform_": lambda d, g: torch.empty(6, device=d).uniform_(-1, 1, generator=g),
    "exponential_": lambda d, g: torch.empty(6, device=d).exponential_(generator=g),
    "bernoulli": lambda d, g: torch.bernoulli(torch.full((8,), 0.3, device=d), generator=g),
    "multinomial": lambda d, g: torch.multinomial(
        torch.tensor([0.1, 0.2, 0.3, 0.4], device=d), 12, replacement=True, generator=g),
    "normal_tensor": lambda d, g: torch.normal(torch.zeros(4, device=d), 1.0, generator=g),
}


@needs_native
def test_generator_api_matches_a_cpu_generator():
    g = torch.Generator(device="neuron")
    assert g.device == torch.device("neuron", 0) and torch.Generator(DEV).device == g.device
    assert g.initial_seed() == torch.Generator().initial_seed() == 67280421310721  # as CUDA's
    assert g.manual_seed(42) is g and g.initial_seed() == 42
    state = g.get_state()
    assert state.device.type == "cpu" and state.dtype == torch.uint8
    assert torch.equal(state, _cpu(42).get_state())  # the same Mersenne Twister state
    first = torch.rand(4, device=DEV, generator=g)
    assert g.set_state(state) is g
    assert torch.equal(torch.rand(4, device=DEV, generator=g).cpu(), first.cpu())
    s = g.seed()  # a fresh non-deterministic seed
    assert g.initial_seed() == s
    n = torch.neuron.device_count()
    with pytest.raises(RuntimeError, match=f"neuron:{n} does not exist"):
        torch.Generator(device=f"neuron:{n}")


@needs_native
@pytest.mark.parametrize("name", sorted(_DRAWS))
def test_draws_equal_a_cpu_generator_with_the_same_seed(name):
    draw = _DRAWS[name]
    g = torch.Generator(device="neuron").manual_seed(1234)
    out = draw(DEV, g)
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), draw("cpu", _cpu(1234)), rtol=0, atol=0)
    again = draw(DEV, g)  # the stream moved on, as a CPU generator's does
    c = _cpu(1234)
    draw("cpu", c)
    torch.testing.assert_close(again.cpu(), draw("cpu", c), rtol=0, atol=0)


@needs_native
def test_reproducible_and_independent_of_the_default_generators():
    torch.manual_seed(0)
    dev_state, cpu_state = torch.neuron.get_rng_state(), torch.get_rng_state()
    g1 = torch.Generator(device="neuron").manual_seed(5)
    g2 = torch.Generator(device="neuron").manual_seed(5)
    a = torch.randn(100, device=DEV, generator=g1)
    b = torch.randn(100, device=DEV, generator=g2)
    assert torch.equal(a.cpu(), b.cpu())
    assert not torch.equal(torch.randn(100, device=DEV, generator=g1).cpu(), a.cpu())
    # neither the device's default stream nor the CPU's moved
    assert torch.equal(torch.neuron.get_rng_state(), dev_state)
    assert torch.equal(torch.get_rng_state(), cpu_state)
    # and a user generator is not disturbed by the default one
    g1.manual_seed(5)
    torch.randn(50, device=DEV)
    assert torch.equal(torch.randn(100, device=DEV, generator=g1).cpu(), a.cpu())


@needs_native
def test_default_generator_is_the_device_stream():
    gens = torch.neuron.default_generators
    assert isinstance(gens, tuple) and len(gens) == torch.neuron.device_count() == 4  # trn2, LNC=2
    assert [g.device for g in gens] == [torch.device("neuron", i) for i in range(4)]
    d = gens[0]
    assert d.device == torch.device("neuron", 0) and torch.neuron.default_generators[0] is d
    assert torch._C._accelerator_getDefaultGenerator(0) is d
    torch.neuron.manual_seed(77)
    assert d.initial_seed() == 77
    d.manual_seed(78)
    assert torch.neuron.initial_seed() == 78
    assert torch.equal(d.get_state(), torch.neuron.get_rng_state())
    torch.manual_seed(3)  # seeds every device's default generator
    assert d.initial_seed() == 3
    # drawing through it explicitly or implicitly is the same stream
    d.manual_seed(9)
    x = torch.randn(4, device=DEV, generator=d)
    torch.neuron.manual_seed(9)
    assert torch.equal(torch.randn(4, device=DEV).cpu(), x.cpu())
    assert native.host_generator(d) is rng.generator()  # no copy: the same CPU generator


@needs_native
def test_host_side_draws_and_diffusers_randn_tensor():
    # a CPU sample from a neuron generator gives the device's numbers (diffusers samples on the
    # CPU for `neuron` targets, whatever the generator's device)
    g = torch.Generator(device="neuron").manual_seed(0)
    cpu = torch.randn(2, 3, generator=g)
    assert cpu.device.type == "cpu" and torch.equal(cpu, torch.randn(2, 3, generator=_cpu(0)))
    t = torch.zeros(4).normal_(generator=g.manual_seed(1))
    assert torch.equal(t, torch.zeros(4).normal_(generator=_cpu(1)))

    # diffusers' own idiom: torch.Generator(device).manual_seed(0) then torch.randn(..., device)
    g = torch.Generator(DEV).manual_seed(0)
    x = torch.randn((1, 4, 8, 8), generator=g, device=DEV)
    assert x.device == torch.device("neuron", 0)
    assert torch.equal(x.cpu(), torch.randn((1, 4, 8, 8), generator=_cpu(0)))
    torch_utils = pytest.importorskip("diffusers.utils.torch_utils")
    y = torch_utils.randn_tensor((1, 4, 8, 8), generator=torch.Generator(DEV).manual_seed(0),
                                 device=DEV)
    assert y.device.type == "neuron" and torch.equal(y.cpu(), x.cpu())


@needs_native
def test_clone_pickle_and_deepcopy_keep_the_state():
    g = torch.Generator(device="neuron").manual_seed(11)
    torch.rand(5, device=DEV, generator=g)
    for other in (g.clone_state(), copy.deepcopy(g), pickle.loads(pickle.dumps(g))):
        assert other is not g and other.device == g.device
        assert other.initial_seed() == 11 and torch.equal(other.get_state(), g.get_state())
        assert native.host_generator(other) is not native.host_generator(g)  # independent
    c = g.clone_state()
    assert torch.equal(torch.rand(5, device=DEV, generator=c).cpu(),
                       torch.rand(5, device=DEV, generator=g).cpu())
    assert g.get_offset() == 0  # a Mersenne Twister has no Philox offset
    with pytest.raises(RuntimeError, match="no offset"):
        g.set_offset(3)


@needs_native
def test_adaptive_eager_runs_explicit_generators_in_order():
    import torchneuron

    g = torch.Generator(device="neuron")
    with torchneuron.execution_mode("adaptive"):
        g.manual_seed(2)
        a = torch.randn(6, device=DEV) * 2  # recorded
        b = torch.randn(6, device=DEV, generator=g) + a  # explicit generator: runs eagerly
        c = torch.empty(6, device=DEV).uniform_(generator=g)
        b, c = b.cpu(), c.cpu()
    ref = _cpu(2)
    torch.testing.assert_close(b - a.cpu(), torch.randn(6, generator=ref))
    assert torch.equal(c, torch.empty(6).uniform_(generator=ref))


@needs_native
def test_a_neuron_generator_is_not_a_cpu_generator_for_host_code():
    with pytest.raises(TypeError, match="expected a neuron generator"):
        native.host_generator(torch.Generator())


def test_without_native_hooks_the_error_stays_explicit():
    code = textwrap.dedent("""
        import torch
        try:
            torch.Generator(device="neuron")
        except NotImplementedError as e:
            print("GEN", "getNewGenerator" in str(e))
        print("ATTR", hasattr(torch.neuron, "default_generators"))
        try:
            torch.neuron.default_generators
        except AttributeError as e:
            print("WHY", "TORCHNEURON_NATIVE=0" in str(e))
        g = torch.Generator().manual_seed(0)  # CPU generators keep working on the device
        x = torch.randn(3, device="neuron", generator=g).cpu()
        print("CPU", torch.equal(x, torch.randn(3, generator=torch.Generator().manual_seed(0))))
    """)
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, TORCHNEURON_NATIVE="0", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["GEN", "True", "ATTR", "False", "WHY", "True", "CPU", "True"]


def test_drawing_from_host_makes_one_stream_in_program_order():
    """Host and device draws interleaved, as VITS draws them: inside ``drawing_from_host`` they
    are the numbers a CPU run draws (``rand_like`` too: it has no generator argument); the
    device stream itself is left as it was."""

    def draws(device):
        a = torch.randn(3)
        b = torch.randn(4, device=device)
        c = torch.rand_like(b)
        return torch.cat([a, b.cpu(), c.cpu()])

    torch.manual_seed(0)
    ref = draws("cpu")
    torch.neuron.manual_seed(5)
    before = rng.get_state()
    with rng.drawing_from_host():
        torch.manual_seed(0)
        got = draws(DEV)
    assert torch.equal(got, ref)
    assert rng.generator(0) is not torch.default_generator
    assert torch.equal(rng.get_state(), before)
