"""FSDP2 + tensor parallelism on the ``neuron`` device: a small transformer language model.

    torchrun --nproc-per-node=4 examples/fsdp_tp_train.py            # 2-D mesh: dp=2 x tp=2
    torchrun --nproc-per-node=2 examples/fsdp_tp_train.py --tp 1     # FSDP2 only (dp=2)
    torchrun --nproc-per-node=2 examples/fsdp_tp_train.py --tp 2     # TP only (dp=1)

One NeuronCore per process. The mesh has a data-parallel dimension ``dp`` (FSDP2 shards
parameters, gradients and optimizer state across it) and a tensor-parallel dimension ``tp``
(attention heads and MLP columns are split across it with ``parallelize_module``:
``ColwiseParallel`` for the q/k/v and first MLP projections, ``RowwiseParallel`` for the output
projections). Sequence parallelism is exercised in ``tests/distributed/parallel_cases.py``.
Parameters run in bfloat16 with float32 master weights (``MixedPrecisionPolicy``) unless
``--fp32``; gradients are clipped to ``--clip``. The task (predict the next token of sequences
that count upwards modulo the vocabulary) is learnable, so the loss must fall.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import torchneuron.distributed  # noqa: F401  registers the c10d backend "neuron"


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.head_dim = dim // heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.w1, self.w2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def attention(self, x):
        b, s, _ = x.shape
        q, k, v = (f(x).view(b, s, -1, self.head_dim).transpose(1, 2) for f in (self.wq, self.wk, self.wv))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        out = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.w2(F.gelu(self.w1(self.norm2(x))))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int, seq: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.layers = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


TP_PLAN = {  # per block: heads and MLP columns split across the tp dimension
    "wq": ColwiseParallel(), "wk": ColwiseParallel(), "wv": ColwiseParallel(),
    "wo": RowwiseParallel(), "w1": ColwiseParallel(), "w2": RowwiseParallel(),
}


def clip_grad_norm(params, max_norm: float) -> float:
    """``clip_grad_norm_`` across meshes: FSDP2 + TP gives DTensor gradients on the 2-D mesh
    (TP weights) and on the 1-D ``dp`` mesh (everything else), which one ``torch.stack`` (inside
    ``torch.nn.utils.clip_grad_norm_``) cannot mix; reduce each mesh's norm first."""
    by_mesh: dict = {}
    for p in params:
        if p.grad is not None:
            by_mesh.setdefault(getattr(p.grad, "device_mesh", None), []).append(p.grad)
    total_sq = 0.0
    for grads in by_mesh.values():
        n = torch.nn.utils.get_total_norm(grads)
        n = n.full_tensor() if hasattr(n, "full_tensor") else n
        total_sq += float(n) ** 2
    total = math.sqrt(total_sq)
    coef = min(1.0, max_norm / (total + 1e-6))
    if coef < 1.0:
        for grads in by_mesh.values():
            for g in grads:
                g.mul_(coef)
    return total


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel degree (divides the world size)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--fp32", action="store_true", help="no bf16 mixed precision")
    p.add_argument("--clip", type=float, default=1.0)
    a = p.parse_args()

    dist.init_process_group("neuron")  # env:// from torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world % a.tp == 0, f"--tp {a.tp} must divide the world size {world}"
    dp = world // a.tp
    mesh = init_device_mesh("neuron", (dp, a.tp), mesh_dim_names=("dp", "tp"))
    dev = torch.device("neuron")
    vocab, dim, heads, layers, seq, batch = 64, 64, 4, 2, 32, 8

    torch.manual_seed(0)  # every rank builds the same initial model
    model = TinyLM(vocab, dim, heads, layers, seq).to(dev)
    if a.tp > 1:
        for block in model.layers:
            parallelize_module(block, mesh["tp"], TP_PLAN)
    mp = MixedPrecisionPolicy() if a.fp32 else MixedPrecisionPolicy(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.layers:
        fully_shard(block, mesh=mesh["dp"], mp_policy=mp)
    fully_shard(model, mesh=mesh["dp"], mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, foreach=False)

    dp_rank = mesh.get_coordinate()[0]
    g = torch.Generator().manual_seed(1000 + dp_rank)  # the tp ranks of one dp group share data
    for step in range(a.steps):
        start = torch.randint(0, vocab, (batch, 1), generator=g)
        tokens = (start + torch.arange(seq + 1)) % vocab
        inp, target = tokens[:, :-1].to(dev), tokens[:, 1:].to(dev)
        logits = model(inp)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), target.reshape(-1))
        opt.zero_grad()
        loss.backward()
        norm = clip_grad_norm(model.parameters(), a.clip)
        opt.step()
        if step % 5 == 0 or step == a.steps - 1:
            avg = loss.detach().float().clone()
            dist.all_reduce(avg, op=dist.ReduceOp.AVG)
            if rank == 0:
                print(f"step {step:3d}  loss {avg.item():.4f}  grad-norm {float(norm):.3f}  "
                      f"(dp={dp} x tp={a.tp}, {'fp32' if a.fp32 else 'bf16 params'})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
