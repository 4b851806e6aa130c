"""DDP on neuron vs a single-process reference, run inside each rank."""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn as nn

DEV = torch.device("neuron")
STEPS = 3
LOCAL_BATCH = 4


class Net(nn.Module):
    def __init__(self, unused: bool = False):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)
        self.unused = nn.Linear(16, 4) if unused else None

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _data(step: int, micro: int, world: int):
    g = torch.Generator().manual_seed(1000 + 17 * step + micro)
    x = torch.randn(world * LOCAL_BATCH, 8, generator=g)
    y = torch.randn(world * LOCAL_BATCH, 4, generator=g)
    return x, y


def _reference(model: nn.Module, micro_steps: int, world: int):
    ref = copy.deepcopy(model).to(DEV)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(STEPS):
        opt.zero_grad()
        for m in range(micro_steps):
            x, y = _data(step, m, world)
            nn.functional.mse_loss(ref(x.to(DEV)), y.to(DEV)).backward()
        opt.step()
    return {k: v.detach().cpu() for k, v in ref.state_dict().items()}


def _max_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def run_ddp(check) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    r, w = dist.get_rank(), dist.get_world_size()
    out: dict = {}

    def train(ddp_kwargs, micro_steps=1, unused=False):
        torch.manual_seed(0)
        base = Net(unused)
        ref = _reference(base, micro_steps, w)
        # each rank starts from different weights: DDP must broadcast rank 0's
        torch.manual_seed(0 if r == 0 else 123)
        model = Net(unused)
        if r == 0:
            model.load_state_dict(base.state_dict())
        ddp = DDP(model.to(DEV), **ddp_kwargs)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        for step in range(STEPS):
            opt.zero_grad()
            for m in range(micro_steps):
                x, y = _data(step, m, w)
                sl = slice(r * LOCAL_BATCH, (r + 1) * LOCAL_BATCH)
                xb, yb = x[sl].to(DEV), y[sl].to(DEV)
                if m < micro_steps - 1:
                    with ddp.no_sync():
                        nn.functional.mse_loss(ddp(xb), yb).backward()
                else:
                    nn.functional.mse_loss(ddp(xb), yb).backward()
            opt.step()
        got = {k: v.detach().cpu() for k, v in ddp.module.state_dict().items()}
        return _max_diff(got, ref)

    for name, kwargs, micro, unused in [
        ("ddp_basic", {}, 1, False),
        ("ddp_small_buckets", {"bucket_cap_mb": 0.0005}, 1, False),
        ("ddp_no_sync", {}, 2, False),
        ("ddp_find_unused", {"find_unused_parameters": True}, 1, True),
        ("ddp_static_graph", {"static_graph": True}, 1, False),
    ]:
        @check(name)
        def _(kwargs=kwargs, micro=micro, unused=unused, name=name):
            d = train(kwargs, micro, unused)
            out[f"{name}_max_diff"] = d
            assert d < 1e-5, d

    return out
