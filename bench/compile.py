"""torch.compile(backend="neuron") against Inductor on the CPU, measured in one run.

For a GPT-2-style language model (4 layers, d=256, 4 heads, seq 128) and ResNet-18
(torchvision, 64×64 images), prints the median step time of inference and of training
(forward + backward + SGD step) compiled with ``backend="neuron"`` on the ``neuron`` device and
with the default Inductor backend on the CPU, and their ratio (neuron / Inductor; goal ≤ 1.0).
The two are timed in alternating blocks of steps in one process, so the host's drift (large on
shared 2-core machines) falls on both.
Then the time to the first compiled training step of the LM (``torch.compile`` call, forward,
backward), each in a new process: with empty caches (cold) and again with the caches the cold
process filled (warm; goal ≤ 10% of cold), by default (torchneuron's executable cache) and with
``TORCHNEURON_PRECOMPILE=1`` (Dynamo's caching precompile stores the traced and compiled frames
too), and, as the peer, Inductor's on the CPU (its FX graph and AOTAutograd caches). The step's
window starts once ``torch`` and ``torch._dynamo`` are imported (PyTorch's own imports, the same
for every backend; torchneuron does not import Dynamo); the whole process's wall time
(interpreter start to exit) is printed beside it.

    python bench/compile.py [--steps 10] [--rounds 5] [--warmup 10] [--only lm|resnet] [--no-first-step]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "compiler"))
from models import TinyLM  # noqa: E402


def _sync(dev: str) -> None:
    if dev == "neuron":
        torch.neuron.synchronize()


def lm_case(batch: int = 4):
    vocab, seq = 2048, 128
    model = TinyLM(vocab=vocab, d=256, heads=4, layers=4, seq=seq, sdpa=False)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    x, y = idx[:, :-1], idx[:, 1:]

    def loss(out, tgt):
        return F.cross_entropy(out.flatten(0, 1), tgt.flatten())

    return "gpt2-style LM (4x256, seq 128, batch 4)", model, x, y, loss


def resnet_case(batch: int = 8):
    from torchvision.models import resnet18

    model = resnet18(num_classes=100)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, 64, 64, generator=g)
    y = torch.randint(0, 100, (batch,), generator=g)
    return "resnet-18 (64x64, batch 8)", model, x, y, F.cross_entropy


def timed_block(step, dev: str, steps: int) -> list[float]:
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        _sync(dev)
        times.append(time.perf_counter() - t0)
    return times


def make_step(model, x, y, loss_fn, dev: str, backend: str, train: bool):
    m = copy.deepcopy(model).to(dev)
    xd, yd = x.to(dev), y.to(dev)
    compiled = torch.compile(m, backend=backend)
    if train:
        m.train()
        opt = torch.optim.SGD(m.parameters(), lr=1e-3)

        def step():
            opt.zero_grad(set_to_none=True)
            loss_fn(compiled(xd), yd).backward()
            opt.step()
    else:
        m.eval()

        def step():
            with torch.no_grad():
                compiled(xd)

    return step


def measure(model, x, y, loss_fn, train: bool, steps: int, warmup: int, rounds: int) -> tuple[float, float]:
    """Median step time (s) of ``backend="neuron"`` on the device and of Inductor on the CPU.

    Both are compiled and warmed up first; then ``rounds`` blocks of ``steps`` timed steps
    alternate between them (the first side alternates too), so a slow minute of the host falls on
    both sides instead of on whichever was measured in it."""
    torch._dynamo.reset()
    sides = {"neuron": ("neuron", make_step(model, x, y, loss_fn, "neuron", "neuron", train)),
             "inductor": ("cpu", make_step(model, x, y, loss_fn, "cpu", "inductor", train))}
    for dev, step in sides.values():
        for _ in range(warmup):
            step()
        _sync(dev)
    times: dict[str, list[float]] = {k: [] for k in sides}
    for r in range(rounds):
        for k in (("neuron", "inductor") if r % 2 == 0 else ("inductor", "neuron")):
            times[k] += timed_block(sides[k][1], sides[k][0], steps)
    return statistics.median(times["neuron"]), statistics.median(times["inductor"])


def first_step_child(backend: str) -> None:
    """In a new process: the LM's first compiled training step, as JSON on stdout."""
    import torch._dynamo  # noqa: F401 - PyTorch's import, outside the step's window (see above)

    dev = "neuron" if backend == "neuron" else "cpu"
    _, model, x, y, loss_fn = lm_case()
    m = model.to(dev).train()
    xd, yd = x.to(dev), y.to(dev)
    t0 = time.perf_counter()
    compiled = torch.compile(m, backend=backend)
    loss_fn(compiled(xd), yd).backward()
    _sync(dev)
    seconds = time.perf_counter() - t0
    result = {"seconds": seconds}
    if backend == "neuron":
        from torchneuron.compiler import get_metrics

        met = get_metrics()
        result.update(graphs_compiled=met["graphs_compiled"], loaded=met["graphs_loaded"])
    print(json.dumps(result))


def first_steps(precompile: bool, backend: str = "neuron") -> tuple[dict, dict]:
    """(cold, warm) first training steps of the LM, each in a new process sharing cache dirs."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, TORCHNEURON_CACHE_DIR=os.path.join(d, "neuron"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(d, "inductor"),
                   TORCHNEURON_PRECOMPILE="1" if precompile else "0")
        runs = []
        for _ in range(2):
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, __file__, "--first-step-child", backend], capture_output=True,
                                 text=True, env=env, check=True)
            runs.append(dict(json.loads(out.stdout.strip().splitlines()[-1]), process=time.perf_counter() - t0))
    return runs[0], runs[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per block")
    ap.add_argument("--rounds", type=int, default=5, help="blocks per side, alternating neuron and Inductor")
    ap.add_argument("--warmup", type=int, default=10)  # covers the IREE driver choice (8 calls)
    ap.add_argument("--only", choices=["lm", "resnet"])
    ap.add_argument("--no-first-step", action="store_true", help="skip the cold/warm first-step runs")
    ap.add_argument("--first-step-child", choices=["neuron", "inductor"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.first_step_child:
        first_step_child(args.first_step_child)
        return
    import torchneuron  # noqa: F401 - the device (autoloaded too); backend="neuron" comes from its entry point

    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
          f"IREE driver {os.environ.get('TORCHNEURON_IREE_DRIVER', 'auto')}")
    print(f"{'model':44} {'mode':9} {'neuron ms':>10} {'inductor ms':>12} {'ratio':>7}")
    cases = [c for c in (lm_case, resnet_case) if args.only is None or c.__name__.startswith(args.only)]
    for case in cases:
        name, model, x, y, loss_fn = case()
        for train in (False, True):
            neuron, inductor = measure(model, x, y, loss_fn, train, args.steps, args.warmup, args.rounds)
            mode = "train" if train else "inference"
            print(f"{name:44} {mode:9} {neuron * 1e3:10.1f} {inductor * 1e3:12.1f} {neuron / inductor:7.2f}",
                  flush=True)
    if args.only in (None, "lm") and not args.no_first_step:
        for precompile in (False, True):
            cold, warm = first_steps(precompile)
            label = "TORCHNEURON_PRECOMPILE=1" if precompile else "default"
            print(f"first training step of the LM ({label}), new processes: cold {cold['seconds']:.1f} s "
                  f"({cold['graphs_compiled']} graphs compiled), warm {warm['seconds']:.2f} s "
                  f"({warm['graphs_compiled']} compiled, {warm['loaded']} loaded) = "
                  f"{100 * warm['seconds'] / cold['seconds']:.0f}% of cold; whole process: cold "
                  f"{cold['process']:.1f} s, warm {warm['process']:.1f} s", flush=True)
        cold, warm = first_steps(False, "inductor")  # the peer: Inductor's caches on the CPU
        print(f"first training step of the LM (Inductor on the CPU), new processes: cold {cold['seconds']:.1f} s, "
              f"warm {warm['seconds']:.2f} s = {100 * warm['seconds'] / cold['seconds']:.0f}% of cold; whole process: "
              f"cold {cold['process']:.1f} s, warm {warm['process']:.1f} s", flush=True)


if __name__ == "__main__":
    main()
