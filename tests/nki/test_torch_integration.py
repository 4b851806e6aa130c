"""Calling NKI kernels on torch tensors in eager, and nki_op custom operators."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torchneuron.nki.isa as nisa
import torchneuron.nki.language as nl
from torchneuron import nki
from torchneuron.nki.torch_integration import nki_op, tensor_to_numpy
from torchneuron.runtime import activity
from torchneuron.runtime.storage import host


@nki.jit
def axpy(x, y, alpha=2.0):
    """out = alpha * x + y, for [P, F] tensors with P <= 128."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    tx = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    ty = nl.ndarray(y.shape, y.dtype, buffer=nl.sbuf)
    nisa.dma_copy(tx, x)
    nisa.dma_copy(ty, y)
    r = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(r, tx, nl.multiply, alpha, nl.add, ty)
    nisa.dma_copy(out, r)
    return out


@nki.jit
def scale_inplace(x, alpha=3.0):
    """Writes alpha * x back into its argument (no outputs)."""
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    nisa.tensor_scalar(t, t, nl.multiply, alpha)
    nisa.dma_copy(x, t)


@nki.jit
def too_many_partitions(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)  # 256 partitions: breaks the rule
    nisa.dma_copy(t, x)
    nisa.dma_copy(out, t)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_eager_call_on_neuron_tensors(dtype):
    x = torch.randn(128, 64).to(dtype)
    y = torch.randn(128, 64).to(dtype)
    out = axpy(x.to("neuron"), y.to("neuron"), 0.5)
    assert isinstance(out, torch.Tensor) and out.device.type == "neuron" and out.dtype == dtype
    # the engine computes 0.5 * x + y in fp32 and rounds once on write, like the chip
    ref = (0.5 * x.float() + y.float()).to(dtype)
    torch.testing.assert_close(out.cpu(), ref, rtol=0, atol=0)


def test_eager_call_on_cpu_tensors_returns_cpu_tensors():
    x, y = torch.randn(16, 8), torch.randn(16, 8)
    out = axpy(x, y)
    assert out.device.type == "cpu"
    torch.testing.assert_close(out, 2 * x + y)


def test_grid_and_simulate_with_profile():
    x, y = torch.randn(128, 256, device="neuron"), torch.randn(128, 256, device="neuron")
    out, prof = nki.simulate(axpy, target="trn2", return_profile=True)(x, y)
    assert out.device.type == "neuron"
    assert prof.duration > 0 and nki.last_profile() is prof
    assert prof.instruction_counts()["nisa.scalar_tensor_tensor"] == 1


def test_inputs_are_views_of_device_memory():
    for dtype in (torch.float32, torch.bfloat16, torch.int32):
        t = torch.zeros(4, 32, dtype=dtype, device="neuron")[:, ::2]  # non-contiguous view
        arr = tensor_to_numpy(t)
        assert arr.ctypes.data == host(t).data_ptr()
        assert arr.strides == tuple(s * t.element_size() for s in t.stride())


def test_kernel_writing_into_its_argument_updates_the_tensor():
    x = torch.randn(32, 16, dtype=torch.bfloat16)
    xn = x.to("neuron")
    assert scale_inplace(xn) is None
    torch.testing.assert_close(xn.cpu(), (3 * x.float()).to(torch.bfloat16), rtol=0, atol=0)


def test_rule_violation_raises_simulator_error():
    x = torch.randn(256, 8, device="neuron")
    with pytest.raises(nki.NKIRuleError) as err:
        too_many_partitions(x)
    assert err.value.rule == "partition-dim-limit"


def test_activity_recorder_sees_the_launch():
    seen = []

    class Rec:
        def record(self, kind, name, inputs, outputs, start_ns, end_ns):
            seen.append((kind, name, len(inputs), len(outputs), end_ns >= start_ns))

    prev = activity.set_recorder(Rec())
    try:
        axpy(torch.randn(8, 8, device="neuron"), torch.randn(8, 8, device="neuron"))
    finally:
        activity.set_recorder(prev)
    assert ("nki", "axpy", 2, 1, True) in seen


def test_numpy_calls_unchanged():
    x = np.ones((8, 8), np.float32)
    out = axpy(x, x)
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, 3 * x)


# ---- nki_op ---------------------------------------------------------------------------------
axpy_op = nki_op("tn_nki_test::axpy", axpy)


def _scale_bwd(ctx, grad):
    return axpy_op(grad, torch.zeros_like(grad), ctx.alpha), None


def _scale_setup(ctx, inputs, output):
    ctx.alpha = inputs[1]


@nki_op("tn_nki_test::scale", backward=_scale_bwd, setup_context=_scale_setup)
@nki.jit
def scale_op(x, alpha=1.0):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    nisa.tensor_scalar(t, t, nl.multiply, alpha)
    nisa.dma_copy(out, t)
    return out


scale_inplace_op = nki_op("tn_nki_test::scale_inplace", scale_inplace, mutates_args=("x",), num_outputs=0)


def test_schema_is_inferred_from_the_kernel_signature():
    assert str(axpy_op._opoverload._schema) == "tn_nki_test::axpy(Tensor x, Tensor y, float alpha=2.) -> Tensor"
    assert "Tensor(a0!) x" in str(scale_inplace_op._opoverload._schema)


def test_op_eager_and_registered_under_torch_ops():
    x, y = torch.randn(16, 8, device="neuron"), torch.randn(16, 8, device="neuron")
    out = torch.ops.tn_nki_test.axpy(x, y, 1.5)
    torch.testing.assert_close(out.cpu(), 1.5 * x.cpu() + y.cpu())


def test_op_fake_and_opcheck():
    x, y = torch.randn(16, 8), torch.randn(16, 8)
    torch.library.opcheck(axpy_op, (x, y, 0.5))
    torch.library.opcheck(scale_op, (torch.randn(8, 4, requires_grad=True), 2.0))
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        f = axpy_op(torch.empty(16, 8, dtype=torch.bfloat16), torch.empty(16, 8, dtype=torch.bfloat16))
        assert f.shape == (16, 8) and f.dtype == torch.bfloat16


def test_op_autograd_backward_runs_a_kernel():
    x = torch.randn(16, 8, device="neuron", requires_grad=True)
    scale_op(x, 2.5).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((16, 8), 2.5))


def test_mutating_op():
    x = torch.ones(8, 8, device="neuron")
    scale_inplace_op(x, 2.0)
    torch.testing.assert_close(x.cpu(), torch.full((8, 8), 2.0))
