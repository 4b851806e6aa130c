"""20 training steps on `neuron` follow the CPU loss trajectory (MLP, CNN, transformer)."""

from __future__ import annotations

import copy

import pytest
import torch
from support.reference_models import batches, loss_fn, make


def _train(kind, device, steps=20, amp=None, opt_cls=torch.optim.AdamW, **opt_kw):
    torch.manual_seed(0)
    model = make(kind)
    return _train_model(model, kind, device, steps, amp, opt_cls, **opt_kw)


def _train_model(model, kind, device, steps, amp, opt_cls, **opt_kw):
    model = model.to(device)
    opt = opt_cls(model.parameters(), lr=1e-2, **opt_kw)
    losses = []
    for x, y in batches(kind, steps):
        x, y = x.to(device), y.to(device)
        opt.zero_grad(set_to_none=True)
        if amp is not None:
            with torch.autocast(device, dtype=amp):
                loss = loss_fn(kind, model(x), y)
        else:
            loss = loss_fn(kind, model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


@pytest.mark.parametrize("kind", ["mlp", "cnn", "transformer"])
def test_fp32_training_matches_cpu(kind):
    torch.manual_seed(0)
    base = make(kind)
    cpu_losses, _ = _train_model(copy.deepcopy(base), kind, "cpu", 20, None, torch.optim.AdamW)
    dev_losses, _ = _train_model(copy.deepcopy(base), kind, "neuron", 20, None, torch.optim.AdamW)
    # fp32 throughout: only the order of floating-point sums may differ (attention may take
    # another algorithm), so the trajectories agree to ~1e-5 relative
    torch.testing.assert_close(torch.tensor(dev_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-5)
    assert dev_losses[-1] < dev_losses[0]


@pytest.mark.parametrize("kind", ["mlp", "cnn", "transformer"])
def test_fp32_parameters_match_cpu_after_sgd(kind):
    # Parameters are compared after SGD: Adam divides by sqrt(v) and so turns rounding noise
    # in gradients that are zero in exact arithmetic (e.g. attention key biases) into full
    # learning-rate steps, on the CPU as much as on the device.
    torch.manual_seed(0)
    base = make(kind)
    _, cpu_model = _train_model(copy.deepcopy(base), kind, "cpu", 20, None, torch.optim.SGD, momentum=0.9)
    _, dev_model = _train_model(copy.deepcopy(base), kind, "neuron", 20, None, torch.optim.SGD, momentum=0.9)
    for (n, p_cpu), (_, p_dev) in zip(cpu_model.named_parameters(), dev_model.named_parameters(), strict=True):
        torch.testing.assert_close(p_dev.detach().cpu(), p_cpu.detach(), rtol=1e-4, atol=1e-5, msg=n)
    for (n, b_cpu), (_, b_dev) in zip(cpu_model.named_buffers(), dev_model.named_buffers(), strict=True):
        torch.testing.assert_close(b_dev.cpu(), b_cpu, rtol=1e-4, atol=1e-5, msg=n)


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_bf16_autocast_training_tracks_cpu_autocast(kind):
    torch.manual_seed(0)
    base = make(kind)
    cpu_losses, _ = _train_model(copy.deepcopy(base), kind, "cpu", 20, torch.bfloat16, torch.optim.AdamW)
    dev_losses, _ = _train_model(copy.deepcopy(base), kind, "neuron", 20, torch.bfloat16, torch.optim.AdamW)
    # bf16 has an 8-bit mantissa (relative step 2**-8 ≈ 0.4%); the two autocast policies
    # agree on which ops run in bf16, so trajectories stay within a few ulps of each other
    torch.testing.assert_close(torch.tensor(dev_losses), torch.tensor(cpu_losses), rtol=3e-2, atol=3e-2)
    assert dev_losses[-1] < dev_losses[0]


def test_tied_weights_stay_tied():
    torch.manual_seed(0)
    m = make("transformer").to("neuron")
    assert m.head.weight is m.tok.weight
    _train_model(m, "transformer", "neuron", 2, None, torch.optim.SGD)
    assert m.head.weight is m.tok.weight
    assert m.head.weight.data_ptr() == m.tok.weight.data_ptr()


def test_optimizer_built_before_to_device_trains_the_model():
    """``Module.to("neuron")`` keeps the Parameter objects (as ``.cuda()`` does), so an optimizer
    built on the CPU parameters updates the model on the device, and moving back keeps them too."""
    torch.manual_seed(0)
    cpu_model = make("mlp")
    dev_model = copy.deepcopy(cpu_model)
    params = list(dev_model.parameters())
    opt = torch.optim.AdamW(dev_model.parameters(), lr=1e-2)
    dev_model.to("neuron")
    assert all(a is b for a, b in zip(dev_model.parameters(), params, strict=True))
    assert all(p.device.type == "neuron" for p in params)
    cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=1e-2)
    x = torch.randn(8, 32)
    for model, o, inp in ((dev_model, opt, x.to("neuron")), (cpu_model, cpu_opt, x)):
        for _ in range(3):
            o.zero_grad()
            model(inp).square().mean().backward()
            o.step()
    for a, b in zip(dev_model.parameters(), cpu_model.parameters(), strict=True):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-5, atol=1e-6)
    dev_model.to("cpu")
    assert all(a is b and a.device.type == "cpu" for a, b in zip(dev_model.parameters(), params, strict=True))
