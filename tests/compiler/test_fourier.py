"""Fourier transforms compiled as DFT matrix products (``compiler/fourier.py``) and the complex ops
around them (``compiler/complex_pairs.py``): results and gradients against CPU, nothing on the host."""

from __future__ import annotations

import pytest
import torch

import torchneuron
from torchneuron.compiler import get_metrics
from torchneuron.compiler.fourier import MAX_LENGTH

DEVICE = "neuron"


def _run(fn, *shapes, seed=0):
    """``fn`` compiled on the device and eager on the CPU: outputs and input gradients compared
    (float32 DFT products round like sums of n terms: 1e-4 relative to each output's scale)."""
    g = torch.Generator().manual_seed(seed)
    cpu = [torch.randn(*s, generator=g, requires_grad=True) for s in shapes]
    dev = [c.detach().to(DEVICE).requires_grad_() for c in cpu]
    torchneuron.clear_op_tracking()
    out = torch.compile(fn, backend="neuron")(*dev)
    ref = fn(*cpu)
    scale = max(1.0, ref.abs().max().item())
    torch.testing.assert_close(out.cpu(), ref, atol=1e-4 * scale, rtol=1e-4)
    (out * torch.linspace(-1, 1, out.shape[-1], device=out.device)).sum().backward()
    (ref * torch.linspace(-1, 1, ref.shape[-1])).sum().backward()
    for d, c in zip(dev, cpu, strict=True):
        torch.testing.assert_close(d.grad.cpu(), c.grad, atol=1e-4 * max(1.0, c.grad.abs().max().item()), rtol=1e-4)
    return dict(torchneuron.get_fallback_ops())


def fnet_mixing(x):  # FNet: real part of a 2-D transform over (sequence, hidden)
    return torch.fft.fft(torch.fft.fft(x, dim=-1), dim=-2).real


def autocorrelation(q, k):  # Autoformer: irfft(rfft(q) * conj(rfft(k)))
    qf, kf = torch.fft.rfft(q, dim=1), torch.fft.rfft(k, dim=1)
    return torch.fft.irfft(qf * torch.conj(kf), n=q.shape[1], dim=1)


def spectrogram_synthesis(m, p):  # vocoder heads: polar magnitude/phase, then an inverse real transform
    z = torch.polar(torch.exp(m).clamp(max=1e2), p)
    return torch.fft.irfft(z * 1j + z / 3, n=2 * m.shape[-1] - 2, dim=-1) + torch.sgn(z).real.sum(-1, keepdim=True)


@pytest.mark.parametrize(("fn", "shapes"), [
    (fnet_mixing, [(1, 7, 12)]),  # an odd and an even length
    (autocorrelation, [(2, 15, 4), (2, 15, 4)]),
    (spectrogram_synthesis, [(2, 3, 9), (2, 3, 9)]),
])
def test_transforms_compile_onto_the_device(fn, shapes):
    assert _run(fn, *shapes) == {}  # no CPU fallback, forward or backward
    eager = [n for g in get_metrics()["graphs"].values() for n, where in g["placement"].items()
             if where == "eager" and "fft" in n]
    assert eager == []


def test_normalisations_and_full_spectra():
    """Each of ATen's normalisations, a two-dimensional one-sided spectrum, a full complex transform of
    a real input and an inverse real transform to an odd length, in one graph."""
    def spectra(x):
        a = torch.view_as_real(torch.fft.rfft2(x, norm="ortho")).sum((-1, -2))
        b = torch.fft.irfft(torch.fft.fft(x, norm="forward"), n=9, norm="forward").sum(-1)
        c = torch.view_as_real(torch.fft.fftn(x.to(torch.complex64), dim=(0, 2))).sum((-1, -2))
        return a + b + c

    assert _run(spectra, (3, 10, 12)) == {}


def test_transform_longer_than_the_limit_stays_eager():
    """A transform whose DFT matrices would be too large runs on its CPU fallback, still correctly."""
    fallbacks = _run(lambda x: torch.fft.rfft(x).abs(), (2, MAX_LENGTH + 2))
    assert "aten::_fft_r2c" in fallbacks
