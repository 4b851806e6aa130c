"""Small models used by the compiler tests and the benchmark."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, d_in=32, hidden=64, d_out=10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, d_out))

    def forward(self, x):
        return self.net(x)


class SmallCNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, stride=2)
        self.bn2 = nn.BatchNorm2d(16)
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(x, 2)
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


class GroupedCNN(nn.Module):
    """Depthwise-separable and grouped convolutions (MobileNet/ShuffleNet/ResNeXt blocks),
    a transposed convolution and a 1-D convolution."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, stride=2, groups=8, bias=False)
        self.pointwise = nn.Conv2d(8, 16, 1)
        self.grouped = nn.Conv2d(16, 16, 3, padding=2, dilation=2, groups=4)
        self.up = nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.conv1d = nn.Conv1d(8, 8, 5, padding=2, groups=2)
        self.head = nn.Linear(8, classes)

    def forward(self, x):
        x = F.relu(self.stem(x))
        x = F.relu(self.pointwise(self.depthwise(x)))
        x = F.relu(self.grouped(x))
        x = F.relu(self.up(x))
        x = self.conv1d(x.flatten(2))
        return self.head(x.mean(2))


class Block(nn.Module):
    def __init__(self, d, heads, dropout=0.0, sdpa=True):
        super().__init__()
        self.heads = heads
        self.sdpa = sdpa
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.dropout = dropout

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               dropout_p=self.dropout if self.training else 0.0)
        else:  # the same attention written out
            scores = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
            a = F.dropout(scores.softmax(-1), self.dropout, self.training) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + F.dropout(self.mlp(self.ln2(x)), self.dropout, self.training)


class TinyLM(nn.Module):
    """A GPT-2-style decoder: token + position embeddings, pre-norm blocks, tied head."""

    def __init__(self, vocab=64, d=32, heads=4, layers=2, seq=16, dropout=0.0, sdpa=True):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads, dropout, sdpa) for _ in range(layers))
        self.ln = nn.LayerNorm(d)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x) @ self.tok.weight.t()
