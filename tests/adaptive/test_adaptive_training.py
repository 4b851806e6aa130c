"""20 training steps of the three reference models in adaptive mode follow eager mode, and a
training loop stops compiling after its first iterations."""

from __future__ import annotations

import copy

import pytest
import torch
from support.reference_models import batches, loss_fn, make

import torchneuron
from torchneuron import adaptive


def _train(model, kind, mode, steps=20, opt_cls=torch.optim.AdamW, **opt_kw):
    model = model.to("neuron")
    opt = opt_cls(model.parameters(), lr=1e-2, **opt_kw)
    losses, compiled = [], []
    with torchneuron.execution_mode(mode):
        for x, y in batches(kind, steps):
            x, y = x.to("neuron"), y.to("neuron")
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(kind, model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            compiled.append(adaptive.get_metrics()["windows_compiled"])
    return losses, model, compiled


@pytest.mark.parametrize("kind", ["mlp", "cnn", "transformer"])
def test_adaptive_training_matches_eager(kind):
    torch.manual_seed(0)
    base = make(kind)
    eager_losses, eager_model, _ = _train(copy.deepcopy(base), kind, "eager", opt_cls=torch.optim.SGD, momentum=0.9)
    adaptive.reset_metrics()
    lazy_losses, lazy_model, compiled = _train(copy.deepcopy(base), kind, "adaptive", opt_cls=torch.optim.SGD,
                                               momentum=0.9)
    # fp32 throughout; the fused programs may sum in another order: ~1e-6 relative per step,
    # compounded over 20 steps
    torch.testing.assert_close(torch.tensor(lazy_losses), torch.tensor(eager_losses), rtol=1e-4, atol=1e-5)
    for (n, pe), (_, pl) in zip(eager_model.named_parameters(), lazy_model.named_parameters(), strict=True):
        torch.testing.assert_close(pl.detach().cpu(), pe.detach().cpu(), rtol=1e-4, atol=1e-5, msg=n)
    for (n, be), (_, bl) in zip(eager_model.named_buffers(), lazy_model.named_buffers(), strict=True):
        torch.testing.assert_close(bl.cpu(), be.cpu(), rtol=1e-4, atol=1e-5, msg=n)
    m = adaptive.get_metrics()
    assert m["windows_fused"] > 0
    # steady state: the iterations after the first two compile nothing
    assert compiled[-1] == compiled[1], compiled


def test_adamw_steady_state_compiles_nothing():
    torch.manual_seed(0)
    adaptive.reset_metrics()
    losses, _, compiled = _train(make("transformer"), "transformer", "adaptive", steps=6)
    assert compiled[-1] == compiled[1], compiled
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("opt", ["adamw", "sgd-schedule"])
def test_optimizer_floats_are_lifted_so_the_step_stays_fused(opt):
    # AdamW's bias corrections and a scheduled learning rate change every step: the optimizer
    # window is compiled once with those floats as inputs, never recompiled nor replayed
    torch.manual_seed(0)
    base = make("mlp")

    def run(mode):
        model = copy.deepcopy(base).to("neuron")
        if opt == "adamw":
            o = torch.optim.AdamW(model.parameters(), lr=1e-2)
            sched = None
        else:
            o = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            sched = torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.7)
        losses, compiled = [], []
        with torchneuron.execution_mode(mode):
            for x, y in batches("mlp", 8):
                o.zero_grad(set_to_none=True)
                loss = loss_fn("mlp", model(x.to("neuron")), y.to("neuron"))
                loss.backward()
                o.step()
                if sched is not None:
                    sched.step()
                losses.append(loss.item())
                compiled.append(adaptive.get_metrics()["windows_compiled"])
        return losses, model, compiled

    eager_losses, eager_model, _ = run("eager")
    adaptive.reset_metrics()
    adaptive.CACHE.clear()  # earlier tests may have compiled the same windows
    lazy_losses, lazy_model, compiled = run("adaptive")
    torch.testing.assert_close(torch.tensor(lazy_losses), torch.tensor(eager_losses), rtol=1e-5, atol=1e-6)
    for pe, pl in zip(eager_model.parameters(), lazy_model.parameters(), strict=True):
        torch.testing.assert_close(pl.detach().cpu(), pe.detach().cpu(), rtol=1e-5, atol=1e-6)
    m = adaptive.get_metrics()
    assert compiled[-1] == compiled[1], compiled
    assert m["windows_lifted"] >= 1 and m["windows_replayed"] == 0 and m["windows_varying_floats"] == 0, m


def test_channels_last_views_in_backward_stay_fused():
    """ConvNeXt blocks: layer norm and the MLP over channels-last views (permute). The gradient
    leaving one block's permuted layer norm reaches the previous block's ``Linear`` through a
    ``view`` recorded with the eager kernel's strides, impossible with those of PyTorch's
    decomposition of ``native_layer_norm_backward`` that the compiler traces with."""
    from torchvision.models.convnext import CNBlock

    torch.manual_seed(0)
    base = torch.nn.Sequential(CNBlock(16, 0.5, 0.0), CNBlock(16, 0.5, 0.0))
    x = torch.randn(2, 16, 4, 4)
    grads = {}
    for mode in ("eager", "adaptive"):
        adaptive.reset_metrics()
        model = copy.deepcopy(base).to("neuron")
        with torchneuron.execution_mode(mode):
            model(x.to("neuron")).sum().backward()
        grads[mode] = [p.grad.cpu() for p in model.parameters()]
    m = adaptive.get_metrics()
    assert m["windows_fused"] >= 1 and m["windows_non_fusable"] == 0, m["failures"]
    for ge, ga in zip(grads["eager"], grads["adaptive"], strict=True):
        torch.testing.assert_close(ga, ge, rtol=1e-4, atol=1e-5)


def test_attention_backward_window_stays_fused():
    """torchvision ViT: ``nn.MultiheadAttention`` runs SDPA's CPU flash-attention kernel, whose
    log-sum-exp result its backward reads. PyTorch's decomposition gave the attention weights in
    its place, so every window passing it on failed to run fused (the sweep's four ViTs)."""
    torch.manual_seed(0)
    base = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    x = torch.randn(2, 5, 16)
    grads = {}
    for mode in ("eager", "adaptive"):
        adaptive.reset_metrics()
        model = copy.deepcopy(base).to("neuron")
        with torchneuron.execution_mode(mode):
            model(x.to("neuron")).square().sum().backward()
        grads[mode] = [p.grad.cpu() for p in model.parameters()]
    m = adaptive.get_metrics()
    assert m["windows_fused"] >= 1 and m["windows_non_fusable"] == 0, m["failures"]
    for ge, ga in zip(grads["eager"], grads["adaptive"], strict=True):
        torch.testing.assert_close(ga, ge, rtol=1e-4, atol=1e-5)


def test_permuted_as_strided_buffer_keeps_its_strides_in_a_window():
    """Longformer's and LED's backward (``as_strided``'s autograd formula) write the gradient into
    an ``as_strided`` view of a zero buffer in ``[T, B*H, D]`` order and reshape it, through two
    transposes, into ``[T, B, H*D]``: a ``view`` only those strides allow. The compiler's gather
    form of ``as_strided`` gave the view contiguous strides and the window failed to fuse."""
    torch.manual_seed(0)
    bh, t, d = 4, 6, 3
    src, w = torch.randn(bh, t, d), torch.randn(2 * d, 5)

    def f(src, w):
        buf = src.new_zeros(bh * t * d)
        v = buf.as_strided((bh, 1, t, d), (d, bh * t * d, bh * d, 1))
        v.copy_(src.unsqueeze(1))
        out = v.reshape(bh, t, d).reshape(2, 2, t, d).transpose(1, 2).transpose(0, 1).reshape(t, 2, 2 * d)
        return out @ w

    adaptive.reset_metrics()
    with torchneuron.execution_mode("adaptive"):
        got = f(src.to("neuron"), w.to("neuron")).cpu()
    m = adaptive.get_metrics()
    assert m["windows_fused"] >= 1 and m["windows_non_fusable"] == 0, m["failures"]
    torch.testing.assert_close(got, f(src, w), rtol=1e-5, atol=1e-5)
