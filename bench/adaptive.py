"""Adaptive eager against plain eager and torch.compile, measured in one run.

Trains the GPT-2-style LM of ``bench/compile.py`` (4 layers, d=256, 4 heads, seq 128, batch 4,
AdamW) on the ``neuron`` device and prints the median training-step time (forward, loss,
backward, optimizer step, ``loss.item()``) in plain eager, adaptive eager and compile mode
(``torch.compile(model, backend="neuron")``), the ratios the goals are stated in (eager /
adaptive, goal ≥ 1.5; adaptive / compile, goal ≤ 1.3), the peak device memory of a steady-state
step in eager and adaptive mode (goal: adaptive ≤ eager), how many windows adaptive mode
compiled after its warm-up steps (goal: 0) and that the losses of the three modes agree.

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


def run(mode: str, model: torch.nn.Module, x, y, steps: int, warmup: int):
    torch._dynamo.reset()
    m = copy.deepcopy(model).to("neuron").train()
    xd, yd = x.to("neuron"), y.to("neuron")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    fwd = torch.compile(m, backend="neuron") if mode == "compile" else m
    losses, times = [], []
    compiled_after_warmup = 0
    with torchneuron.execution_mode("adaptive" if mode == "adaptive" else "eager"):
        for i in range(warmup + steps):
            if i == warmup:
                torch.neuron.synchronize()
                torch.neuron.reset_peak_memory_stats()
                compiled_after_warmup = adaptive.get_metrics()["windows_compiled"]
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(fwd(xd).flatten(0, 1), yd.flatten())
            loss.backward()
            opt.step()
            losses.append(loss.item())
            times.append(time.perf_counter() - t0)
        compiled_after_warmup = adaptive.get_metrics()["windows_compiled"] - compiled_after_warmup
    peak = torch.neuron.max_memory_allocated()
    return statistics.median(times[warmup:]), peak, losses, compiled_after_warmup


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
    res = {mode: run(mode, model, x, y, args.steps, args.warmup) for mode in ("eager", "adaptive", "compile")}
    for mode, (t, peak, losses, _) in res.items():
        print(f"{mode:9} {t * 1e3:8.1f} ms/step   peak {peak / 2**20:7.1f} MiB   final loss {losses[-1]:.5f}")
    e, a, c = (res[m][0] for m in ("eager", "adaptive", "compile"))
    print(f"eager / adaptive   {e / a:5.2f}  (goal >= 1.5)")
    print(f"adaptive / compile {a / c:5.2f}  (goal <= 1.3)")
    print(f"peak memory adaptive / eager {res['adaptive'][1] / res['eager'][1]:.3f}  (goal <= 1.0)")
    print(f"windows compiled after warm-up: {res['adaptive'][3]}  (goal 0)")
    worst = max(abs(la - le) / abs(le) for la, le in zip(res["adaptive"][2], res["eager"][2], strict=True))
    print(f"largest relative loss difference adaptive vs eager over {len(res['eager'][2])} steps: {worst:.2e}")
    m = adaptive.get_metrics()
    print("adaptive metrics:", {k: v for k, v in m.items() if k not in ("failures",)})


if __name__ == "__main__":
    main()
