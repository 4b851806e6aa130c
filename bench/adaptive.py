"""Adaptive eager against plain eager and torch.compile, measured in one run.

Trains the GPT-2-style LM of ``bench/compile.py`` (4 layers, d=256, 4 heads, seq 128, batch 4,
AdamW) on the ``neuron`` device and prints the median training-step time (forward, loss,
backward, optimizer step, ``loss.item()``) in plain eager, adaptive eager and compile mode
(``torch.compile(model, backend="neuron")``), the ratios the goals are stated in (eager /
adaptive, goal ≥ 1.5; adaptive / compile, goal ≤ 1.3), the peak device memory a steady-state step
adds above the resting state (parameters, optimizer state) in each mode (goal: adaptive ≤
eager), how many windows adaptive mode compiled after its warm-up steps (goal: 0) and that the
losses agree. The three modes step in turn, so that load on the machine affects all alike.

    python bench/adaptive.py [--steps 8] [--warmup 3]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "compiler"))
from models import TinyLM  # noqa: E402

import torchneuron  # noqa: E402
from torchneuron import adaptive  # noqa: E402


class Trainer:
    """One copy of the model and its optimizer, stepped in one execution mode."""

    def __init__(self, mode: str, model: torch.nn.Module, x, y):
        self.mode = mode
        self.model = copy.deepcopy(model).to("neuron").train()
        self.x, self.y = x.to("neuron"), y.to("neuron")
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.fwd = torch.compile(self.model, backend="neuron") if mode == "compile" else self.model
        self.times: list[float] = []
        self.peaks: list[int] = []
        self.losses: list[float] = []

    def step(self, timed: bool) -> None:
        with torchneuron.execution_mode("adaptive" if self.mode == "adaptive" else "eager"):
            torch.neuron.synchronize()
            base = torch.neuron.memory_allocated()
            torch.neuron.reset_peak_memory_stats()
            t0 = time.perf_counter()
            self.opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(self.fwd(self.x).flatten(0, 1), self.y.flatten())
            loss.backward()
            self.opt.step()
            self.losses.append(loss.item())
            if timed:
                self.times.append(time.perf_counter() - t0)
                self.peaks.append(torch.neuron.max_memory_allocated() - base)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    vocab, seq = 2048, 128
    model = TinyLM(vocab=vocab, d=256, heads=4, layers=4, seq=seq, sdpa=False)
    idx = torch.randint(0, vocab, (4, seq + 1), generator=torch.Generator().manual_seed(0))
    x, y = idx[:, :-1], idx[:, 1:]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads; GPT-2-style LM "
          f"(4x256, seq {seq}, batch 4), AdamW; median of {args.steps} steps after {args.warmup} warm-up")
    adaptive.reset_metrics()
    trainers = {mode: Trainer(mode, model, x, y) for mode in ("eager", "adaptive", "compile")}
    for _ in range(args.warmup):
        for t in trainers.values():
            t.step(timed=False)
    compiled_before = adaptive.get_metrics()["windows_compiled"]
    for _ in range(args.steps):  # interleaved, so that load on the machine hits all modes alike
        for t in trainers.values():
            t.step(timed=True)
    compiled_after = adaptive.get_metrics()["windows_compiled"] - compiled_before
    med = {m: statistics.median(t.times) for m, t in trainers.items()}
    peak = {m: max(t.peaks) for m, t in trainers.items()}
    for m, t in trainers.items():
        print(f"{m:9} {med[m] * 1e3:8.1f} ms/step   step peak {peak[m] / 2**20:7.1f} MiB above the "
              f"resting state   final loss {t.losses[-1]:.5f}")
    e, a, c = med["eager"], med["adaptive"], med["compile"]
    print(f"eager / adaptive   {e / a:5.2f}  (goal >= 1.5)")
    print(f"adaptive / compile {a / c:5.2f}  (goal <= 1.3)")
    print(f"step peak memory adaptive / eager {peak['adaptive'] / peak['eager']:.3f}  (goal <= 1.0); "
          f"compile / eager {peak['compile'] / peak['eager']:.3f}")
    print(f"windows compiled after warm-up: {compiled_after}  (goal 0)")
    le, la = trainers["eager"].losses, trainers["adaptive"].losses
    worst = max(abs(b - a) / abs(a) for a, b in zip(le, la, strict=True))
    print(f"largest relative loss difference adaptive vs eager over {len(le)} steps: {worst:.2e}")
    m = adaptive.get_metrics()
    print("adaptive metrics:", {k: v for k, v in m.items() if k not in ("failures",)})


if __name__ == "__main__":
    main()
