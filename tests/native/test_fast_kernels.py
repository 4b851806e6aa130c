"""The C++ eager kernels (torchneuron/native/fast_kernels.cpp): same results and the same device
contract as the Python kernels they stand in for, and they really serve the calls."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torchneuron
import torchneuron.profiler
from torchneuron import NeuronRuntimeError
from torchneuron.native import fast
from torchneuron.runtime import state
from torchneuron.runtime.storage import block_of, host

pytestmark = pytest.mark.skipif(fast.module() is None, reason=f"C++ fast kernels not built: {fast.status()}")


def _served(fn):
    """Run ``fn``; the operators the C++ path served (name -> calls) and fn's result."""
    fast.clear_counts()
    out = fn()
    return fast.counts(), out


def test_hot_ops_are_served_without_python():
    a = torch.randn(8, 8, device="neuron")
    b = torch.randn(8, 8, device="neuron")
    counts, _ = _served(lambda: (a + b, a.relu(), a @ b, torch.cat([a, b]), a.sum(), a.add_(b)))
    for name in ("aten::add.Tensor", "aten::relu", "aten::mm", "aten::cat", "aten::sum", "aten::add_.Tensor"):
        assert counts.get(name) == 1, (name, counts)
    # and the placement report still sees them
    torchneuron.clear_op_tracking()
    a + b
    assert torchneuron.get_executed_ops()["aten::add.Tensor"] == 1


def test_fresh_results_are_exact_device_allocations(no_garbage):
    torch.neuron.synchronize()
    a = torch.randn(100, 30, device="neuron")
    before = torch.neuron.memory_allocated()
    stats0 = torch.neuron.memory_stats()
    c = a * 2
    assert c.device.type == "neuron" and fast.owns(c.untyped_storage())
    assert torch.neuron.memory_allocated() == before + 100 * 30 * 4
    assert torch.neuron.max_memory_allocated() >= before + 100 * 30 * 4
    assert torch.neuron.memory_reserved() >= torch.neuron.memory_allocated()
    assert torch.neuron.memory_stats()["allocation.all.allocated"] == stats0["allocation.all.allocated"] + 1
    assert c.untyped_storage().nbytes() == 100 * 30 * 4
    assert c.data_ptr() == c.untyped_storage().data_ptr() != 0
    del c
    assert torch.neuron.memory_allocated() == before


def test_python_code_reads_fast_results(no_garbage):
    a = torch.arange(12.0, device="neuron").reshape(3, 4)
    c = a + 1  # C++-adopted storage
    h = host(c)  # the Python side's view of its bytes
    assert h.device.type == "cpu" and torch.equal(h, torch.arange(1.0, 13.0).reshape(3, 4))
    block = block_of(c)
    assert not block.counted and block.nbytes == 48
    assert "tensor([[ 1.,  2.,  3.,  4.]" in repr(c)
    assert torch.equal(c.cpu(), torch.arange(1.0, 13.0).reshape(3, 4))
    # FSDP2-style storage resize keeps the bytes and the accounts
    before = torch.neuron.memory_allocated()
    d = a * 1
    st_ = d.untyped_storage()
    st_.resize_(0)
    assert torch.neuron.memory_allocated() == before
    st_.resize_(48)
    assert torch.neuron.memory_allocated() == before + 48
    d.copy_(a)
    assert torch.equal(d.cpu(), a.cpu())


_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.bool, torch.uint8]
_OPS = {
    "add": lambda x, y: x + y,
    "mul": lambda x, y: x * y,
    "where": lambda x, y: torch.where(x > y, x, y),
    "maximum": lambda x, y: torch.maximum(x, y),
    "cat": lambda x, y: torch.cat([x, y], dim=-1),
    "sum0": lambda x, y: x.sum(0),
    "clone_t": lambda x, y: x.t().clone(),
    "index_select": lambda x, y: x.index_select(0, torch.zeros(3, dtype=torch.long, device=x.device)),
    "inplace_mul": lambda x, y: x.clone().mul_(y),
    "eq": lambda x, y: x == y,
}


@settings(max_examples=60, deadline=None)
@given(
    op=st.sampled_from(sorted(_OPS)),
    dtype=st.sampled_from(_DTYPES),
    rows=st.integers(1, 6),
    cols=st.integers(1, 6),
    transposed=st.booleans(),
)
def test_matches_cpu(op, dtype, rows, cols, transposed):
    if dtype == torch.bool and op in ("add", "mul", "sum0", "inplace_mul"):
        return  # bool arithmetic: not what this checks
    g = torch.Generator().manual_seed(rows * 7 + cols)
    x = (torch.randn(rows, cols, generator=g) * 4).to(dtype)
    y = (torch.randn(rows, cols, generator=g) * 4).to(dtype)
    if transposed:  # non-contiguous operands
        x, y = x.t().contiguous().t(), y.t().contiguous().t()
    fn = _OPS[op]
    want = fn(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # int64 results are computed as int32 (warned once)
        got = fn(x.to("neuron"), y.to("neuron"))
    assert got.device.type == "neuron" and got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want)  # the same host kernels: exact


def test_views_and_aliasing_inputs():
    x = torch.arange(10.0, device="neuron")
    x[5:].add_(x[:5])  # in-place operands sharing one storage share one host storage
    ref = torch.arange(10.0)
    ref[5:].add_(ref[:5])
    assert torch.equal(x.cpu(), ref)
    x[1:].add_(x[:-1])  # partial overlap: the host kernel refuses it, as on the CPU
    with pytest.raises(NeuronRuntimeError, match="single memory location"):
        torch.neuron.synchronize()
    v = x.view(2, 5).t()  # views answered by the Meta kernels share the storage
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert torch.equal(v.cpu(), ref.view(2, 5).t())
    u = torch.ops.aten._unsafe_view(x * 1, (5, 2))  # a result over its input's bytes
    assert torch.equal(u.cpu(), ref.view(5, 2))


def test_in_place_on_int64_runs_once():
    n = torch.zeros((), dtype=torch.long, device="neuron")
    for _ in range(3):
        n.add_(1)  # BatchNorm's num_batches_tracked
    assert n.item() == 3


def test_int64_results_keep_the_dtype_policy(monkeypatch):
    from torchneuron.ops import dtype_policy

    monkeypatch.setattr(dtype_policy, "_warned", set())  # the warning is once per process
    x = torch.tensor([2**31 - 1, 1], dtype=torch.int32, device="neuron")
    with pytest.warns(UserWarning, match="computed as int32"):
        s = x.sum()  # int64 result, computed by 32-bit hardware
    assert s.dtype == torch.int64 and s.item() == -(2**31)


def test_in_place_int64_keeps_the_dtype_policy(monkeypatch):
    # the C++ path leaves in-place float64/int64 ops to Python, which computes them as 32-bit
    # values like the functional ones (abs_ on int64 values beyond int32 wrapped only there)
    from torchneuron.ops import dtype_policy

    monkeypatch.setattr(dtype_policy, "_warned", set())
    t = torch.tensor([2**31 - 1, 5], dtype=torch.int64, device="neuron")
    with pytest.warns(UserWarning, match="computed as int32"):
        t.add_(1)
    assert t.dtype == torch.int64 and t.tolist() == [-(2**31), 6]
    assert t.add(0).tolist() == t.tolist()  # functional and in-place agree


def test_kernel_errors_are_deferred():
    w = torch.randn(10, 4, device="neuron")
    idx = torch.tensor([1, 11], device="neuron")
    out = w.index_select(0, idx)  # no raise at the call
    assert out.shape == (2, 4)
    with pytest.raises(NeuronRuntimeError, match="index_select"):
        torch.neuron.synchronize()
    assert (w + 1).sum().item() == pytest.approx((w.cpu() + 1).sum().item(), rel=1e-5)


def test_shape_errors_raise_at_the_call():
    a = torch.randn(2, 3, device="neuron")
    with pytest.raises(RuntimeError, match="size of tensor a"):
        a + torch.randn(4, 5, device="neuron")


def test_result_beyond_capacity_raises_oom(small_hbm):
    before = torch.neuron.memory_allocated()
    big = torch.empty(8 * 1024 * 1024, dtype=torch.float32, device="neuron")  # 32 MiB
    with pytest.raises(torch.OutOfMemoryError, match="tried to allocate 128.00 MiB"):
        big.repeat(4)  # a C++-computed result beyond the 64 MiB left
    del big
    assert torch.neuron.memory_allocated() == before
    assert (torch.ones(4, device="neuron") * 2).sum().item() == 8.0


def test_python_sees_every_op_while_profiling():
    a = torch.randn(4, 4, device="neuron")
    with torchneuron.profiler.record() as session:
        counts, _ = _served(lambda: a + a)
    assert counts == {}
    assert any(e.name == "aten::add.Tensor" for e in session.events)
    assert any(m.action == "alloc" for m in session.memory)
    assert fast.module().enabled()


def test_adaptive_mode_records_instead():
    a = torch.randn(4, 4, device="neuron")
    with torchneuron.execution_mode("adaptive"):
        assert not fast.module().enabled()
        counts, c = _served(lambda: (a + 1) * 2)
        assert counts == {}
        out = c.cpu()
    assert fast.module().enabled()
    torch.testing.assert_close(out, (a.cpu() + 1) * 2)


def test_backward_on_the_device_thread():
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    x = torch.randn(16, 8)
    lin_d = torch.nn.Linear(8, 4).to("neuron")
    lin_d.load_state_dict(lin.state_dict())
    lin(x).tanh().sum().backward()
    fast.clear_counts()
    lin_d(x.to("neuron")).tanh().sum().backward()
    assert fast.counts().get("aten::tanh_backward") == 1
    torch.testing.assert_close(lin_d.weight.grad.cpu(), lin.weight.grad)


def test_switched_off_by_environment():
    code = (
        "import torch\n"
        "from torchneuron.native import fast\n"
        "a = torch.ones(3, device='neuron')\n"
        "print(fast.status()['reason'], (a + a).sum().item(), fast.counts())\n"
    )
    env = dict(os.environ, TORCHNEURON_NATIVE_KERNELS="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["disabled", "by", "TORCHNEURON_NATIVE_KERNELS=0", "6.0", "{}"]


def test_allocator_accounts_are_shared():
    alloc = state.allocator()
    assert type(alloc.accounts).__name__ == "NativeAccounts"


def test_in_place_foreach_keeps_every_tensor_intact():
    # the foreach ops write in place and return nothing: the kernel's argument list was all that
    # held the host aliases, which the geometry check reads after the call. That use-after-free
    # corrupted parameters' sizes only when other threads allocated meanwhile (FSDP2 with gloo in
    # tests/distributed/test_parallel.py caught it); this checks the results stay right.
    torch.manual_seed(0)
    shapes = [(37, 5), (3,), (2, 3, 4), (1,), (64, 64)]
    ref = [torch.randn(s) for s in shapes]
    dev = [t.to("neuron") for t in ref]
    scale = torch.tensor(0.75)
    for step in range(200):
        torch._foreach_mul_(ref, scale)
        torch._foreach_mul_(dev, scale.to("neuron"))
        torch._foreach_add_(ref, 1.0)
        torch._foreach_add_(dev, 1.0)
        churn = [torch.empty(s, device="neuron") for s in shapes]  # reuse freed memory
        del churn
        assert [tuple(t.shape) for t in dev] == shapes, step
    for r, d in zip(ref, dev, strict=True):
        assert d.stride() == r.stride() and d.storage_offset() == 0
        torch.testing.assert_close(d.cpu(), r)
