"""PyTorch's OpenMP team is ended before a program runs on IREE's worker threads."""

import os

import pytest
import torch

from torchneuron.compiler import executable
from torchneuron.runtime import host_threads


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.fixture
def two_omp_threads():
    prev = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(prev)


needs_libgomp = pytest.mark.skipif(host_threads._loaded_libgomp() is None, reason="torch is not using GNU OpenMP")


@needs_libgomp
def test_release_ends_the_openmp_team_and_the_next_region_starts_one(two_omp_threads):
    x = torch.randn(512, 512)
    (x @ x).sum()  # a parallel region: the team's worker exists and spins/waits for work
    before = _threads()
    assert host_threads.release_openmp_workers()
    assert _threads() == before - 1  # the one worker of a 2-thread team is gone
    y = x @ x  # ATen still runs in parallel, on a new team
    assert _threads() == before
    torch.testing.assert_close(y, x.double().mm(x.double()).float(), rtol=1e-4, atol=1e-3)


@needs_libgomp
def test_release_can_be_turned_off(monkeypatch, two_omp_threads):
    monkeypatch.setenv("TORCHNEURON_RELEASE_OPENMP", "0")
    host_threads._pause.cache_clear()
    try:
        x = torch.randn(512, 512)
        (x @ x).sum()
        before = _threads()
        assert not host_threads.release_openmp_workers()
        assert _threads() == before
    finally:
        host_threads._pause.cache_clear()


@pytest.mark.parametrize("driver, released", [("local-task", 1), ("local-sync", 0)])
def test_programs_on_iree_workers_release_the_team_first(monkeypatch, driver, released):
    monkeypatch.setenv("TORCHNEURON_IREE_DRIVER", driver)
    calls = []
    monkeypatch.setattr(executable, "release_openmp_workers", lambda: calls.append(1) or True)
    torch._dynamo.reset()
    f = torch.compile(lambda a, b: (a @ b).relu() + 1, backend="neuron")
    a, b = torch.randn(32, 16), torch.randn(16, 8)
    out = f(a.to("neuron"), b.to("neuron"))
    torch.testing.assert_close(out.cpu(), (a @ b).relu() + 1, rtol=1e-5, atol=1e-5)
    assert len(calls) == released
