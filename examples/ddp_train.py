"""DDP training on the ``neuron`` device.

    torchrun --nproc-per-node=2 examples/ddp_train.py

One NeuronCore per process; the c10d backend ``neuron`` moves gradients with gloo's transport
over host aliases of the device tensors (no device<->host copies).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import torchneuron.distributed  # noqa: F401  registers the c10d backend "neuron"


def main() -> None:
    dist.init_process_group("neuron")  # env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("neuron")
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(dev))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    w_true = torch.randn(32, 1, generator=torch.Generator().manual_seed(42))
    for step in range(50):
        x = torch.randn(16, 32, generator=g)
        y = x @ w_true
        loss = nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0 or step == 49:
            avg = loss.detach().clone()
            dist.all_reduce(avg, op=dist.ReduceOp.AVG)
            if rank == 0:
                print(f"step {step:3d}  loss {avg.item():.4f}  (world size {world})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
