"""Every built-in optimizer, with its for-loop, foreach and fused implementations, on `neuron`."""

from __future__ import annotations

import copy
import inspect

import pytest
import torch

OPTIMIZERS = [
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
    (torch.optim.Adam, {"lr": 1e-2}),
    (torch.optim.AdamW, {"lr": 1e-2, "amsgrad": True}),
    (torch.optim.Adamax, {"lr": 1e-2}),
    (torch.optim.NAdam, {"lr": 1e-2}),
    (torch.optim.RAdam, {"lr": 1e-2}),
    (torch.optim.Adagrad, {"lr": 1e-1}),
    (torch.optim.Adadelta, {"lr": 1.0}),
    (torch.optim.RMSprop, {"lr": 1e-2, "momentum": 0.5}),
    (torch.optim.Rprop, {"lr": 1e-2}),
    (torch.optim.ASGD, {"lr": 1e-2}),
    (torch.optim.Adafactor, {"lr": 1e-2}),
]
if hasattr(torch.optim, "Muon"):
    OPTIMIZERS.append((torch.optim.Muon, {"lr": 1e-2}))


def _variants(cls):
    params = inspect.signature(cls.__init__).parameters
    out = [("forloop", {"foreach": False} if "foreach" in params else {})]
    if "foreach" in params:
        out.append(("foreach", {"foreach": True}))
    if "fused" in params and cls in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.Adagrad):
        out.append(("fused", {"fused": True}))
    return out


CASES = [(cls, kw, name, vkw) for cls, kw in OPTIMIZERS for name, vkw in _variants(cls)]


@pytest.mark.parametrize(("cls", "kw", "variant", "vkw"), CASES, ids=[f"{c.__name__}-{v}" for c, _, v, _ in CASES])
def test_optimizer_matches_cpu(cls, kw, variant, vkw):
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 6, bias=False))
    data = [(torch.randn(4, 6), torch.randn(4, 6)) for _ in range(5)]
    results = {}
    for dev in ("cpu", "neuron"):
        model = copy.deepcopy(base).to(dev)
        if cls is getattr(torch.optim, "Muon", None):
            params = [p for p in model.parameters() if p.ndim == 2]
        else:
            params = list(model.parameters())
        opt = cls(params, **kw, **(vkw if dev == "neuron" else {}))
        for x, y in data:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev)).backward()
            opt.step()
        results[dev] = [p.detach().cpu() for p in model.parameters()]
        if dev == "neuron":
            for state in opt.state.values():
                for v in state.values():
                    if isinstance(v, torch.Tensor) and v.dim() > 0:
                        assert v.device.type == "neuron"
    for p_dev, p_cpu in zip(results["neuron"], results["cpu"], strict=True):
        # fp32; foreach/fused kernels reorder a few operations: agree to ~1e-5 relative
        torch.testing.assert_close(p_dev, p_cpu, rtol=1e-4, atol=1e-5)


def test_lr_scheduler_and_grad_clipping():
    model = torch.nn.Linear(4, 4).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    for _ in range(3):
        opt.zero_grad()
        (model(torch.randn(2, 4, device="neuron")) * 100).sum().backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        assert norm.device.type == "neuron" and norm.item() > 1.0
        total = torch.sqrt(sum(p.grad.pow(2).sum() for p in model.parameters()))
        assert total.item() == pytest.approx(1.0, rel=1e-4)
        opt.step()
        sched.step()
    assert sched.get_last_lr()[0] < 0.1
