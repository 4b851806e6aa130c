"""Eager overhead of the simulated NeuronCore against CPU eager, measured in one run.

Prints, for 20 common small ops, the median host time per call on ``neuron`` and on the CPU
and their ratio; then the training-step time of the demo's GPT (d=128, 4 layers, 4 heads) on
both and the step ratio (neuron / CPU eager). CPU and device rounds alternate so that both see
the same machine load. Goals (issue 2): per-op ≤ 5× CPU eager, step ratio ≤ 1.15.

    python bench/eager_overhead.py [--repeat 7] [--number 2000] [--steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from torchneuron.demo.model import GPT, GPTConfig


def _ops(dev: str) -> dict[str, Callable[[], object]]:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, 64, generator=g).to(dev)
    b = torch.randn(64, 64, generator=g).to(dev)
    v = torch.randn(64, generator=g).to(dev)
    idx = torch.randint(0, 64, (32,), generator=g).to(dev)
    w = torch.randn(64, generator=g).to(dev)
    mask = (torch.randn(64, 64, generator=g) > 0).to(dev)
    buf = torch.empty(64, 64).to(dev)
    return {
        "add": lambda: a + b,
        "mul_scalar": lambda: a * 2.0,
        "div": lambda: a / b,
        "add_ (in-place)": lambda: buf.add_(a),
        "relu": lambda: F.relu(a),
        "gelu": lambda: F.gelu(a),
        "tanh": lambda: torch.tanh(a),
        "exp": lambda: torch.exp(a),
        "sum": lambda: a.sum(),
        "mean(dim)": lambda: a.mean(dim=1),
        "softmax": lambda: torch.softmax(a, dim=-1),
        "layer_norm": lambda: F.layer_norm(a, (64,), w, v),
        "mm": lambda: a @ b,
        "addmm (linear)": lambda: F.linear(a, b, v),
        "view": lambda: a.view(32, 128),
        "transpose": lambda: a.t(),
        "cat": lambda: torch.cat([a, b]),
        "index_select": lambda: a.index_select(0, idx),
        "where": lambda: torch.where(mask, a, b),
        "clone": lambda: a.clone(),
    }


def _pair_median_us(fa: Callable[[], object], fb: Callable[[], object], number: int, repeat: int) -> tuple[float, float]:
    """Median µs per call of ``fa`` and ``fb``, measured in alternating rounds so that both
    see the same machine load."""
    for _ in range(min(number, 200)):
        fa()
        fb()
    ra, rb = [], []
    for _ in range(repeat):
        for fn, runs in ((fa, ra), (fb, rb)):
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            runs.append((time.perf_counter() - t0) / number * 1e6)
    return statistics.median(ra), statistics.median(rb)


def make_step(dev: str, batch: int, ctx: int) -> Callable[[int], float]:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=256, context=ctx)).to(dev)  # the demo's model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, 256, (batch, ctx + 1), generator=g) for _ in range(4)]

    def one(i: int) -> float:
        seq = data[i % len(data)].to(dev)
        x, y = seq[:, :-1], seq[:, 1:]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss.item()  # a synchronisation point, as in a real loop that logs

    return one


def step_times(steps: int, batch: int, ctx: int) -> tuple[float, float]:
    """Median training-step time on CPU and on neuron, steps alternating between the two."""
    cpu, dev = make_step("cpu", batch, ctx), make_step("neuron", batch, ctx)
    for i in range(3):
        cpu(i)
        dev(i)
    tc, tn = [], []
    for i in range(steps):
        for fn, times in ((cpu, tc), (dev, tn)):
            t0 = time.perf_counter()
            fn(i)
            times.append(time.perf_counter() - t0)
    return statistics.median(tc), statistics.median(tn)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--number", type=int, default=2000)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--ctx", type=int, default=64)
    args = p.parse_args(argv)
    torch.set_num_threads(torch.get_num_threads())
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, device {torch.neuron.get_device_name()}")
    cpu_ops, dev_ops = _ops("cpu"), _ops("neuron")
    ratios = []
    print(f"\n{'op':<18}{'cpu µs':>10}{'neuron µs':>12}{'ratio':>8}")
    for name in cpu_ops:
        c, n = _pair_median_us(cpu_ops[name], dev_ops[name], args.number, args.repeat)
        ratios.append(n / c)
        print(f"{name:<18}{c:>10.2f}{n:>12.2f}{n / c:>8.2f}")
    print(f"{'median ratio':<40}{statistics.median(ratios):>8.2f}")
    print(f"{'worst ratio':<40}{max(ratios):>8.2f}   (goal ≤ 5)")
    c, n = step_times(args.steps, args.batch, args.ctx)
    print(f"\ntransformer training step (d=128, 4 layers, batch {args.batch}, ctx {args.ctx}):")
    print(f"  cpu eager {c * 1e3:8.2f} ms   neuron {n * 1e3:8.2f} ms   ratio {n / c:.3f}   (goal ≤ 1.15)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
