"""Normal PyTorch use on `neuron`: views, in-place, out=, copies, autograd, Parameters."""

from __future__ import annotations

import pytest
import torch
from support.compare import assert_close


def test_views_share_memory_with_real_strides():
    x = torch.arange(24.0).reshape(4, 6)
    d = x.to("neuron")
    v = d.t()[1:3, ::2]
    ref = x.t()[1:3, ::2]
    assert v.stride() == ref.stride() and v.storage_offset() == ref.storage_offset()
    assert v.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()
    v.mul_(-1)  # writes through the view into d
    ref.mul_(-1)
    assert_close(d, x)
    assert_close(d.view(2, 12).narrow(1, 3, 4), x.view(2, 12).narrow(1, 3, 4))
    assert_close(d.unfold(1, 2, 2), x.unfold(1, 2, 2))
    assert_close(d.expand(2, 4, 6).sum(0), x.expand(2, 4, 6).sum(0))
    assert_close(d.view(torch.int32), x.view(torch.int32))
    assert_close(torch.diagonal(d), torch.diagonal(x))
    parts = d.split(2, dim=1)
    assert all(p.untyped_storage().data_ptr() == d.untyped_storage().data_ptr() for p in parts)


def test_inplace_and_out_variants_write_into_given_storage():
    a = torch.randn(5, 3)
    d = a.to("neuron")
    ptr = d.data_ptr()
    d.add_(1).mul_(2).clamp_(min=0)
    a.add_(1).mul_(2).clamp_(min=0)
    assert d.data_ptr() == ptr
    assert_close(d, a)
    out = torch.empty(5, 3, device="neuron")
    optr = out.data_ptr()
    torch.add(d, 1, out=out)
    assert out.data_ptr() == optr
    assert_close(out, a + 1)
    # out= with the wrong size is resized, as on CPU
    small = torch.empty(0, device="neuron")
    torch.mul(d, d, out=small)
    assert small.shape == (5, 3)
    assert_close(small, a * a)
    vals, idx = torch.empty(0, device="neuron"), torch.empty(0, dtype=torch.long, device="neuron")
    torch.max(d, dim=1, out=(vals, idx))
    ref_v, ref_i = torch.max(a, dim=1)
    assert_close(vals, ref_v)
    assert_close(idx, ref_i)


def test_metadata_inplace_ops():
    a = torch.randn(2, 3)
    d = a.to("neuron")
    d.t_()
    assert d.shape == (3, 2) and d.stride() == (1, 3)
    assert_close(d, a.t())
    d.unsqueeze_(0).squeeze_(0)
    assert_close(d, a.t())
    r = torch.randn(4, device="neuron")
    r.resize_(2, 5)
    assert r.shape == (2, 5)
    r.zero_()
    assert r.sum().item() == 0.0


def test_copies_across_devices_and_dtypes():
    a = torch.randn(3, 4)
    d = torch.empty(3, 4, device="neuron")
    d.copy_(a)
    assert_close(d, a)
    back = torch.empty(3, 4)
    back.copy_(d)
    assert torch.equal(back, a)
    h = d.to(torch.float16)
    assert h.dtype == torch.float16 and h.device.type == "neuron"
    assert_close(h, a.half())
    nb = a.to("neuron", non_blocking=True)
    torch.neuron.synchronize()
    assert torch.equal(nb.cpu(), a)
    pinned = a.pin_memory() if torch.cuda.is_available() else a
    assert torch.equal(pinned.to("neuron", non_blocking=True).to("cpu", non_blocking=True), a)
    # device to device copy into a strided view
    dst = torch.zeros(4, 3, device="neuron")
    dst.t().copy_(d)
    assert_close(dst, a.t())


def test_autograd_data_parameter_requires_grad():
    w = torch.nn.Parameter(torch.randn(3, 3).to("neuron"))
    assert isinstance(w, torch.nn.Parameter) and w.device.type == "neuron"
    x = torch.randn(2, 3, device="neuron").requires_grad_()
    y = (x @ w).tanh().sum()
    gx, gw = torch.autograd.grad(y, (x, w))
    xc, wc = x.detach().cpu().requires_grad_(), w.detach().cpu().requires_grad_()
    rx, rw = torch.autograd.grad((xc @ wc).tanh().sum(), (xc, wc))
    assert_close(gx, rx)
    assert_close(gw, rw)
    d = w.data
    assert d.data_ptr() == w.data_ptr() and not d.requires_grad
    d.fill_(0.5)
    assert w.sum().item() == 4.5
    w.data = torch.ones(2, device="neuron")
    assert w.shape == (2,) and w.sum().item() == 2.0


def test_unsupported_dtype_is_refused_clearly():
    with pytest.raises(TypeError, match="neuron does not support torch.float8_e5m2fnuz"):
        torch.zeros(2, dtype=torch.float8_e5m2fnuz).to("neuron")
    with pytest.raises(TypeError, match="Keep this tensor on the CPU"):
        torch.empty(2, dtype=torch.float8_e4m3fnuz, device="neuron")
    assert (torch.ones(2, device="neuron") + 1).sum().item() == 4.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int8, torch.int16, torch.int32, torch.uint8, torch.bool])
def test_native_dtypes_round_trip_and_compute(dtype):
    src = (torch.arange(12) % 5).to(dtype)
    d = src.to("neuron")
    assert d.dtype == dtype
    assert torch.equal(d.cpu(), src)
    if dtype != torch.bool:
        assert torch.equal((d + d).cpu(), src + src)


def test_printing_matches_pytorch_accelerator_format():
    t = torch.tensor([1.0, 2.0], device="neuron", dtype=torch.float16)
    assert repr(t) == "tensor([1., 2.], device='neuron:0', dtype=torch.float16)"
    g = torch.ones(2, device="neuron", requires_grad=True) * 2
    assert repr(g) == "tensor([2., 2.], device='neuron:0', grad_fn=<MulBackward0>)"
    assert repr(torch.arange(3, device="neuron")) == "tensor([0, 1, 2], device='neuron:0')"


def test_deepcopy_and_storage_allocation_on_device():
    import copy

    m = torch.nn.Linear(3, 3).to("neuron")
    m2 = copy.deepcopy(m)  # clones storages: must not need a C++ allocator
    assert m2.weight.device.type == "neuron" and m2.weight.data_ptr() != m.weight.data_ptr()
    assert torch.equal(m2.weight.cpu(), m.weight.cpu())
    s = torch.UntypedStorage(16, device="neuron")
    assert s.device.type == "neuron" and s.nbytes() == 16
    assert torch.UntypedStorage(8).device.type == "cpu"


def test_pin_memory_works_with_neuron_as_accelerator():
    x = torch.arange(6.0)
    p = x.pin_memory()
    assert torch.equal(p, x) and p.data_ptr() != x.data_ptr()
    assert torch.equal(p.to("neuron", non_blocking=True).cpu(), x)


def test_legacy_inplace_resize_and_out_resize_keep_geometry():
    o = torch.zeros(5, device="neuron")
    torch.add(torch.ones(1, 5, device="neuron"), 1, out=torch.empty(0, device="neuron"))
    a, b = torch.randn(10), torch.randn(10, 5)
    m = torch.empty(0, device="neuron")
    torch.matmul(a.to("neuron"), b.to("neuron"), out=m)
    assert m.shape == (5,) and m.cpu().shape == (5,)
    torch.testing.assert_close(m.cpu(), a @ b)
    o.resize_(1, 5)
    assert o.cpu().shape == (1, 5)
    d = torch.randn(1)
    x1, x2 = torch.randn(5, 5, 5), torch.randn(5, 5, 10)
    dd = d.to("neuron")
    dd.addbmm_(x1.to("neuron"), x2.to("neuron"))
    ref = d.clone().addbmm_(x1, x2)
    assert dd.shape == ref.shape
    torch.testing.assert_close(dd.cpu(), ref)


def test_efficient_zero_tensor_in_backward():
    x = torch.randn(3, device="neuron", requires_grad=True)
    (g,) = torch.autograd.grad(torch.sgn(x).sum(), x)
    assert g.device.type == "neuron" and g.abs().sum().item() == 0.0


def test_printing_fake_device_tensors_does_not_touch_memory():
    # Dynamo's debug logs print fake tensors: formatting must not try to copy them to the host
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        t = torch.empty(2, 3, device="neuron")
        assert repr(t) == "FakeTensor(..., device='neuron:0', size=(2, 3))"


@pytest.mark.parametrize("native", [True, False], ids=["cpp-kernels", "python-kernels"])
def test_host_tensors_beside_device_tensors_raise_as_on_cuda(native):
    """A model that forgot a ``.to()`` fails on the chip (and on CUDA); the simulated device must
    not quietly compute with the host tensor. 0-d host tensors are numbers, index tensors may stay
    on the host, and copies cross devices."""
    from torchneuron.native import fast

    mod = fast.module()
    if native and mod is None:
        pytest.skip(f"C++ fast kernels not built: {fast.status()}")
    if mod is not None and not native:
        mod.set_enabled(False)
    try:
        x = torch.randn(3, 4, device="neuron")
        w = torch.randn(3, 4)
        mixed = {
            "add": lambda: x + w,
            "inplace": lambda: x.clone().mul_(w),
            "mm": lambda: x @ w.T,
            "linear": lambda: torch.nn.functional.linear(x, w),
            "cat": lambda: torch.cat([x, w]),
            "embedding": lambda: torch.nn.functional.embedding(torch.tensor([0, 2]), x),
            "fallback": lambda: torch.nextafter(x, w),  # nextafter falls back to the CPU
        }
        for fn in mixed.values():
            with pytest.raises(RuntimeError, match="same device, but found at least two devices, neuron:0 and cpu"):
                fn()
            assert_close(x * 2, x.cpu() * 2)  # nothing pending, the device still works
        assert_close(x * torch.tensor(2.0), x.cpu() * 2)  # a 0-d host tensor is a number
        assert_close(torch.where(x > 0, x, torch.tensor(0.0)), torch.where(x.cpu() > 0, x.cpu(), 0.0))
        idx = torch.tensor([2, 0])
        assert_close(x[idx], x.cpu()[idx])  # host indices, as on CUDA
        y = x.clone()
        y[idx] = torch.tensor(5.0)
        ref = x.cpu().clone()
        ref[idx] = 5.0
        assert_close(y, ref)
        assert_close(x.clone().copy_(w), w)  # copies cross devices
    finally:
        fast.refresh()  # the C++ path as the runtime's state wants it
