"""Inference graphs: no_grad / eval models compile one graph and match eager."""

from __future__ import annotations

import torch
from helpers import DEVICE, twin
from models import SmallCNN, TinyLM

from torchneuron.compiler import get_metrics


def test_cnn_inference_matches_eager():
    compiled_model, eager_model = twin(SmallCNN().eval())
    compiled = torch.compile(compiled_model, backend="neuron")
    x = torch.randn(2, 3, 16, 16, device=DEVICE)
    with torch.no_grad():
        out = compiled(x)
        ref = eager_model(x)
    assert out.device.type == DEVICE
    torch.testing.assert_close(out.cpu(), ref.cpu(), atol=1e-4, rtol=1e-4)
    kinds = [g["kind"] for g in get_metrics()["graphs"].values()]
    assert kinds == ["inference"]


def test_lm_inference_repeated_calls_do_not_recompile():
    compiled_model, eager_model = twin(TinyLM(sdpa=False).eval())
    compiled = torch.compile(compiled_model, backend="neuron")
    with torch.no_grad():
        for _ in range(3):
            idx = torch.randint(0, 64, (2, 16), device=DEVICE)
            torch.testing.assert_close(compiled(idx).cpu(), eager_model(idx).cpu(), atol=1e-4, rtol=1e-4)
    assert get_metrics()["graphs_compiled"] == 1


def test_float64_is_computed_as_float32_and_dtype_restored():
    lin = torch.nn.Linear(8, 4).double()
    w, b = lin.weight.detach().float(), lin.bias.detach().float()
    compiled_model, _ = twin(lin)
    compiled = torch.compile(compiled_model, backend="neuron")
    x = torch.randn(3, 8, dtype=torch.float64)
    with torch.no_grad():
        out = compiled(x.to(DEVICE))
    assert out.dtype == torch.float64
    ref32 = torch.nn.functional.linear(x.float(), w, b)
    torch.testing.assert_close(out.cpu(), ref32.double(), atol=1e-6, rtol=1e-6)


def test_int64_arithmetic_keeps_its_dtype():
    def f(a, b):
        return (a * 3 + b).sum(-1)

    a = torch.arange(12, device=DEVICE).view(3, 4)
    b = torch.ones(3, 4, dtype=torch.long, device=DEVICE)
    out = torch.compile(f, backend="neuron")(a, b)
    assert out.dtype == torch.int64
    assert out.cpu().tolist() == f(a.cpu(), b.cpu()).tolist()
