"""Training and comparison helpers shared by the compiler tests."""

from __future__ import annotations

import copy

import torch

DEVICE = "neuron"


def twin(model: torch.nn.Module, seed: int = 0):
    """Two identical copies of ``model`` on the device (copied on the host, then moved)."""
    torch.manual_seed(seed)
    ref = copy.deepcopy(model)
    return model.to(DEVICE), ref.to(DEVICE)


def train_compare(model, batches, loss_fn, steps=20, lr=0.05, atol=1e-4, rtol=1e-4, **compile_kw):
    """Train a compiled copy and an eager copy on the device for ``steps`` steps; return the
    per-step losses of both after checking that they and the final weights agree."""
    compiled_model, eager_model = twin(model)
    compiled = torch.compile(compiled_model, backend="neuron", **compile_kw)
    opt_c = torch.optim.SGD(compiled_model.parameters(), lr=lr, momentum=0.9)
    opt_e = torch.optim.SGD(eager_model.parameters(), lr=lr, momentum=0.9)
    losses_c, losses_e = [], []
    for step in range(steps):
        x, y = batches[step % len(batches)]
        for net, opt, losses in ((compiled, opt_c, losses_c), (eager_model, opt_e, losses_e)):
            opt.zero_grad()
            loss = loss_fn(net(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    torch.testing.assert_close(torch.tensor(losses_c), torch.tensor(losses_e), atol=atol, rtol=rtol)
    for (name, pc), pe in zip(compiled_model.named_parameters(), eager_model.parameters(), strict=True):
        torch.testing.assert_close(pc.cpu(), pe.cpu(), atol=atol * 10, rtol=rtol * 10, msg=name)
    return losses_c, losses_e
