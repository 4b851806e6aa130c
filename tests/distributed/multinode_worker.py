"""One rank of the two-"node" torchrun test: DDP training, parameters written as JSON.

Run by ``torchrun --nnodes=2 --node-rank=N --nproc-per-node=1 ... multinode_worker.py OUTDIR``.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import torchneuron.distributed  # noqa: F401

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_cases import LOCAL_BATCH, STEPS, Net, _data  # noqa: E402

DEV = torch.device("neuron")


def main(outdir: str) -> None:
    dist.init_process_group("neuron")
    r, w = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0 if r == 0 else 1234)  # DDP must broadcast rank 0's weights
    model = DDP(Net().to(DEV))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        x, y = _data(step, 0, w)
        sl = slice(r * LOCAL_BATCH, (r + 1) * LOCAL_BATCH)
        opt.zero_grad()
        nn.functional.mse_loss(model(x[sl].to(DEV)), y[sl].to(DEV)).backward()
        opt.step()
    result = {
        "rank": r, "world": w, "node_rank": int(os.environ["GROUP_RANK"]),
        "local_rank": int(os.environ["LOCAL_RANK"]), "backend": dist.get_backend(),
        "params": {k: v.detach().cpu().tolist() for k, v in model.module.state_dict().items()},
    }
    with open(os.path.join(outdir, f"rank{r}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
