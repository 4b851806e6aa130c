"""accelerate on `neuron`: Accelerator() finds the device; save_state/load_state resumes
bit-exactly, the device's RNG state included. Multi-process launches: test_ecosystem_accelerate_launch.py."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def _setup(seed: int):
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    set_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.Dropout(0.25), nn.GELU(), nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 8, generator=g)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(32, 1, generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
    acc = Accelerator()
    model, opt, loader, sched = acc.prepare(model, opt, loader, sched)
    return acc, model, opt, loader, sched


def _epochs(acc, model, opt, loader, sched, epochs) -> list[float]:
    out = []
    model.train()
    for _ in epochs:
        for x, y in loader:
            # noise drawn from the device generator: resuming must restore it
            noisy = x + 0.01 * torch.randn(x.shape, device=acc.device)
            loss = nn.functional.mse_loss(model(noisy), y)
            acc.backward(loss)
            opt.step()
            sched.step()
            opt.zero_grad()
            out.append(loss.item())
    return out


def test_accelerator_save_load_state_resumes_bit_exactly(tmp_path):
    from accelerate.state import AcceleratorState, GradientState

    acc, model, opt, loader, sched = _setup(seed=0)
    assert acc.device.type == "neuron"
    assert next(model.parameters()).device.type == "neuron"
    initial = [p.detach().cpu().clone() for p in model.parameters()]
    _epochs(acc, model, opt, loader, sched, range(2))
    assert all(not torch.equal(a, p.detach().cpu()) for a, p in zip(initial, model.parameters(), strict=True))
    acc.save_state(str(tmp_path / "ckpt"))
    expected = _epochs(acc, model, opt, loader, sched, range(2, 4))
    expected_params = [p.detach().cpu().clone() for p in model.parameters()]

    states = torch.load(tmp_path / "ckpt" / "random_states_0.pkl", weights_only=False)
    assert "torch_neuron_manual_seed" in states  # written through torch.neuron.get_rng_state_all

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    acc2, model2, opt2, loader2, sched2 = _setup(seed=99)  # different init and RNG on purpose
    torch.rand(5, device="neuron")  # move the device generator away from the saved state
    acc2.load_state(str(tmp_path / "ckpt"))
    resumed = _epochs(acc2, model2, opt2, loader2, sched2, range(2, 4))

    assert resumed == expected
    for a, b in zip(expected_params, model2.parameters(), strict=True):
        assert torch.equal(a, b.detach().cpu())


def test_accelerator_mixed_precision_bf16():
    from accelerate import Accelerator

    acc = Accelerator(mixed_precision="bf16")
    model = acc.prepare(nn.Linear(4, 4))
    x = torch.randn(2, 4, device=acc.device)
    with acc.autocast():
        inner = torch.mm(x, x.t())
    assert inner.device.type == "neuron" and inner.dtype == torch.bfloat16
    out = model(x)  # prepare() wraps forward under autocast, outputs converted back to fp32
    assert out.dtype == torch.float32
    ref = nn.functional.linear(x.bfloat16(), model.weight.bfloat16(), model.bias.bfloat16())
    assert torch.equal(out.cpu(), ref.float().cpu())


def test_prepare_model_and_optimizer_together_trains():
    from accelerate import Accelerator

    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    acc = Accelerator()
    weight = model.weight
    model, opt = acc.prepare(model, opt)
    # the optimizer built on the CPU parameters still holds the model's parameters
    assert model.weight is weight and model.weight.device.type == "neuron"
    assert opt.param_groups[0]["params"][0] is weight
    before = model.weight.detach().cpu().clone()
    acc.backward(model(torch.randn(8, 4, device=acc.device)).pow(2).mean())
    opt.step()
    assert not torch.equal(model.weight.detach().cpu(), before)
