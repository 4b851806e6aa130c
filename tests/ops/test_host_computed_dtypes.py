"""Complex and uint16/32/64 tensors: held in device memory, computed by the CPU fallback."""

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

DEV = "neuron"


def _quiet():
    w = warnings.catch_warnings()
    w.__enter__()
    warnings.simplefilter("ignore")
    return w


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128, torch.uint16, torch.uint32, torch.uint64])
def test_round_trip_is_bit_exact(dtype):
    src = (torch.randn(5, 3, dtype=torch.complex128) * 100).to(dtype) if dtype.is_complex else \
        torch.arange(15, dtype=torch.int64).reshape(5, 3).to(dtype) * 4097
    d = src.to(DEV)
    assert d.device.type == "neuron" and d.dtype == dtype
    assert torch.equal(d.cpu(), src)
    assert torch.equal(d[1:, ::2].cpu(), src[1:, ::2])  # views stay on the device


def test_fft_of_float_runs_via_fallback_and_is_tracked(monkeypatch):
    from torchneuron.ops import fallback

    monkeypatch.setattr(fallback, "_warned", set())  # warned once per process: maybe by an earlier test
    x = torch.randn(4, 16)
    d = x.to(DEV)
    torchneuron.clear_op_tracking()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        f = torch.fft.rfft(d)
        back = torch.fft.irfft(f, n=16)
    assert f.device.type == "neuron" and f.dtype == torch.complex64
    torch.testing.assert_close(f.cpu(), torch.fft.rfft(x), rtol=1.3e-6, atol=1e-5)
    torch.testing.assert_close(back.cpu(), x, rtol=1.3e-6, atol=1e-5)
    fallback = torchneuron.get_fallback_ops()
    assert fallback.get("aten::_fft_r2c") == 1 and fallback.get("aten::_fft_c2r") == 1
    assert "aten::_fft_r2c" not in torchneuron.get_executed_ops()
    msgs = [str(m.message) for m in w if "CPU fallback" in str(m.message)]
    assert any("aten::_fft_r2c" in m and "float32" in m for m in msgs)
    t = torchneuron.transfer_stats()
    assert t["host_to_device_bytes"] >= f.nbytes and t["device_to_host_bytes"] >= d.nbytes


def test_allocating_complex_memory_is_no_fallback():
    """``x.to(torch.complex64)`` allocates with ``empty_like`` and converts with ``copy_``: only
    the conversion is host work."""
    d = torch.randn(4, 3).to(DEV)
    torchneuron.clear_op_tracking()
    w = _quiet()
    try:
        e = torch.empty_like(d, dtype=torch.complex64)
        n = d.new_empty((2, 5), dtype=torch.complex64)
        z = d.to(torch.complex64)
    finally:
        w.__exit__(None, None, None)
    assert e.dtype == n.dtype == torch.complex64 and e.device.type == n.device.type == "neuron"
    assert torch.equal(z.cpu(), d.cpu().to(torch.complex64))
    fallback = torchneuron.get_fallback_ops()
    assert not {"aten::empty_like", "aten::new_empty", "aten::empty.memory_format", "aten::empty_strided"} & set(
        fallback), fallback


def test_conjugate_views_keep_their_meaning():
    x = torch.randn(3, 4, dtype=torch.complex64)
    c = x.to(DEV).conj()
    assert c.is_conj()
    w = _quiet()
    try:
        assert torch.equal(c.cpu(), x.conj())
        assert torch.equal((c * 2).cpu(), x.conj() * 2)
        assert torch.equal(c.resolve_conj().cpu(), x.conj().resolve_conj())
        assert torch.equal(torch.view_as_real(c.resolve_conj()).cpu(), torch.view_as_real(x.conj().resolve_conj()))
    finally:
        w.__exit__(None, None, None)


def _rotary(q, freqs):
    """LLaMA's reference rotary embedding: complex multiplication of query pairs."""
    qc = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
    return torch.view_as_real(qc * freqs).flatten(-2).type_as(q)


def test_complex_rotary_embedding_trains_like_cpu():
    torch.manual_seed(0)
    q = torch.randn(2, 8, 4, 16, requires_grad=True)
    t = torch.arange(8, dtype=torch.float32)
    freqs = torch.polar(torch.ones(8, 8), torch.outer(t, 1.0 / 10000 ** (torch.arange(0, 16, 2) / 16)))[:, None, :]
    ref = _rotary(q, freqs)
    (ref ** 2).sum().backward()
    qd = q.detach().to(DEV).requires_grad_()
    w = _quiet()
    try:
        fd = torch.polar(torch.ones(8, 8, device=DEV), torch.outer(t.to(DEV), 1.0 / 10000 ** (torch.arange(0, 16, 2, device=DEV) / 16)))[:, None, :]
        out = _rotary(qd, fd)
        (out ** 2).sum().backward()
    finally:
        w.__exit__(None, None, None)
    assert out.device.type == "neuron" and out.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(qd.grad.cpu(), q.grad, rtol=1e-5, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    op=st.sampled_from(["mul", "add", "abs", "angle", "exp", "sum", "conj_mul"]),
    seed=st.integers(0, 2**16),
)
def test_complex_ops_match_cpu(shape, op, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*shape, dtype=torch.complex64, generator=g)
    b = torch.randn(*shape, dtype=torch.complex64, generator=g)
    fns = {
        "mul": lambda x, y: x * y, "add": lambda x, y: x + y, "abs": lambda x, y: x.abs(),
        "angle": lambda x, y: x.angle(), "exp": lambda x, y: x.exp(), "sum": lambda x, y: x.sum(0),
        "conj_mul": lambda x, y: x.conj() * y,
    }
    w = _quiet()
    try:
        got = fns[op](a.to(DEV), b.to(DEV))
    finally:
        w.__exit__(None, None, None)
    assert got.device.type == "neuron"
    torch.testing.assert_close(got.cpu(), fns[op](a, b), rtol=1.3e-6, atol=1e-5)


def test_error_mode_refuses_complex_compute_and_keeps_the_device():
    code = (
        "import torch, torchneuron\n"
        "x = torch.randn(4, 8, device='neuron')\n"
        "c = torch.randn(3, dtype=torch.complex64).to('neuron')\n"  # storing is no compute
        "for f in (lambda: torch.fft.rfft(x), lambda: c * 2):\n"
        "    try:\n"
        "        f()\n"
        "    except torchneuron.NeuronFallbackError as e:\n"
        "        print('ERR', str(e).split(' is not')[0])\n"
        "print((x + 1).shape, c.cpu().shape)\n"
    )
    env = dict(os.environ, TORCHNEURON_FALLBACK="error")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "ERR Operator 'aten::_fft_r2c'" in r.stdout
    assert "ERR Operator 'aten::mul.Tensor'" in r.stdout or "ERR Operator 'aten::mul.Scalar'" in r.stdout
    assert r.stdout.strip().endswith("torch.Size([4, 8]) torch.Size([3])")


def test_adaptive_eager_leaves_complex_work_to_the_fallback():
    from torchneuron import adaptive

    x = torch.randn(4, 16)
    d = x.to(DEV)
    w = _quiet()
    try:
        with adaptive.execution_mode("adaptive"):
            y = torch.fft.rfft(d * 2).abs() + 1
            z = y.cpu()
    finally:
        w.__exit__(None, None, None)
    torch.testing.assert_close(z, torch.fft.rfft(x * 2).abs() + 1, rtol=1e-5, atol=1e-5)
