"""The C++ side of compiled programs' boundary (``host_aliases``, ``adopt_results`` in
torchneuron/native/fast_kernels.cpp): the inputs IREE reads are the device bytes themselves, the
results become exact device allocations, and whatever the C++ path does not take goes through the
Python path, as before."""

from __future__ import annotations

import pytest
import torch

import torchneuron
import torchneuron.profiler
from torchneuron.native import fast
from torchneuron.runtime.storage import block_of

pytestmark = pytest.mark.skipif(fast.module() is None, reason=f"C++ fast kernels not built: {fast.status()}")


def _boundary():
    mod = fast.boundary()
    assert mod is not None
    return mod


def test_aliases_are_the_device_bytes():
    a = torch.randn(4, 16, device="neuron")
    b = torch.arange(6, dtype=torch.int32, device="neuron")
    aliases, core = _boundary().host_aliases([a, b])
    assert core == 0
    for alias, t in zip(aliases, (a, b), strict=True):
        assert alias.device.type == "cpu" and alias.dtype == t.dtype and alias.shape == t.shape
        assert alias.data_ptr() == t.data_ptr()
        torch.testing.assert_close(alias, t.cpu(), rtol=0, atol=0)
    aliases[0].fill_(3.0)  # writes through: the same bytes
    assert torch.equal(a.cpu(), torch.full((4, 16), 3.0))


def test_values_the_runtime_cannot_read_as_they_are_go_to_python():
    base = torch.randn(8, 16, device="neuron")
    values = [
        base.t(),  # not contiguous
        base.reshape(-1)[1:17],  # 4 bytes past a 64-byte boundary
        base[:0],  # empty
        base > 0,  # bool: the program reads bytes
        torch.randn(3),  # a host tensor
        base.conj(),  # fine: real tensors carry no conjugate bit
    ]
    aliases, core = _boundary().host_aliases(values)
    assert aliases[:5] == [None] * 5
    assert aliases[5] is not None and aliases[5].data_ptr() == base.data_ptr()
    assert core == 0
    assert _boundary().host_aliases([torch.ones(2)]) == ([None], -1)


def test_an_alias_keeps_the_device_bytes_alive(no_garbage):
    torch.neuron.synchronize()
    before = torch.neuron.memory_allocated()
    a = torch.arange(32.0, device="neuron")
    (alias,), _ = _boundary().host_aliases([a])
    del a
    assert torch.neuron.memory_allocated() == before + 128  # still held by the alias
    assert torch.equal(alias, torch.arange(32.0))
    del alias
    assert torch.neuron.memory_allocated() == before


def test_results_become_exact_device_allocations(no_garbage):
    torch.neuron.synchronize()
    before = torch.neuron.memory_allocated()
    h = torch.arange(24.0).reshape(4, 6)
    view = torch.arange(40.0)[4:].reshape(6, 6).t()  # an offset, transposed view of its storage
    d, v = _boundary().adopt_results([h, view], 0)
    assert d.device == torch.device("neuron", 0) and fast.owns(d.untyped_storage())
    assert d.data_ptr() == h.data_ptr() and torch.equal(d.cpu(), h)
    assert v.stride() == view.stride() and v.storage_offset() == 4 and torch.equal(v.cpu(), view)
    assert torch.neuron.memory_allocated() == before + 24 * 4 + 40 * 4
    assert not block_of(d).counted  # Python reads it through an uncounted block, as eager results
    del d, v
    assert torch.neuron.memory_allocated() == before


def test_a_result_beyond_the_capacity_is_left_to_python(small_hbm):
    big = torch.empty(80 * 1024 * 1024, dtype=torch.uint8)  # 80 MiB: more than the 64 MiB left
    small = torch.ones(4)
    out = _boundary().adopt_results([big, small], 0)
    assert out[0] is None and out[1] is not None
    with pytest.raises(ValueError, match="no logical core"):
        _boundary().adopt_results([small], -1)


def test_off_while_something_observes_every_operation():
    a = torch.randn(4, device="neuron")
    with torchneuron.profiler.record():
        assert _boundary().host_aliases([a]) is None
        assert _boundary().adopt_results([torch.ones(2)], 0) is None
    with torchneuron.execution_mode("adaptive"):
        assert _boundary().host_aliases([a]) is None
    assert _boundary().host_aliases([a]) is not None


def _compiled_step():
    torch._dynamo.reset()

    def f(x, w, flags):
        y = torch.relu(x @ w)
        return y, y.t(), torch.where(flags, y.sum(0), 0.0), (x > 0).sum()

    x = torch.randn(16, 8)
    w = torch.randn(8, 8)
    flags = torch.rand(8) > 0.5
    ref = f(x, w, flags)
    fn = torch.compile(f, backend="neuron")
    return fn, (x.to("neuron"), w.to("neuron")[:, :], flags.to("neuron")), ref


def _assert_matches(out, ref):
    for got, want in zip(out, ref, strict=True):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def test_compiled_programs_take_the_cpp_path_and_match_the_python_one(no_garbage):
    fn, args, ref = _compiled_step()
    out = fn(*args)
    assert all(fast.owns(o.untyped_storage()) for o in out)
    _assert_matches(out, ref)
    with torchneuron.profiler.record():  # the Python path
        again = fn(*args)
    assert not any(fast.owns(o.untyped_storage()) for o in again)
    _assert_matches(again, ref)
    # the results hold exactly their bytes, whichever path adopted them
    torch.neuron.synchronize()
    m0 = torch.neuron.memory_allocated()
    del out
    m1 = torch.neuron.memory_allocated()
    del again
    m2 = torch.neuron.memory_allocated()
    assert m0 - m1 == m1 - m2 > 0
