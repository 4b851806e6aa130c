"""Cold compile time of sweep models: ``backend="neuron"`` against Inductor on the CPU.

The model sweep's compile mode spends most of its time compiling (issue 9's full run: a sum of
8.7 h over 829 records). This measures what the same work costs PyTorch's own compiler: for
each model of a fixed slice of the sweep's recipes (``torchneuron.sweep.registry``), in a new
process with empty caches, the time from the ``torch.compile`` call through the first eval
forward (no grad) and the first training forward + backward, compiled with ``backend="neuron"``
on the ``neuron`` device and with the default Inductor backend on the CPU. One model runs at a
time, neuron then Inductor. The window starts once the model is built and ``torch._dynamo`` is
imported (both backends pay the same for those); compile-only cost is what it holds, plus one
eager-speed execution of each graph.

    python bench/sweep_compile.py [--models SUITE:NAME,...] [--timeout 600]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# a mix of the CI slice's architectures that both backends compile: CNNs, ViTs, encoder,
# decoder, encoder-decoder and speech transformers
DEFAULT = ("torchvision:resnet18", "torchvision:mobilenet_v3_small", "torchvision:densenet121",
           "timm:test_vit", "timm:test_convnext", "timm:levit_128s",
           "transformers:bert", "transformers:gpt2", "transformers:llama", "transformers:t5",
           "transformers:vit", "transformers:whisper")


def child(suite: str, name: str, backend: str) -> None:
    """In a new process: the first compiled eval forward and training step, as JSON on stdout."""
    import torch
    import torch._dynamo  # noqa: F401 - PyTorch's import, outside the window

    from torchneuron.sweep import registry
    from torchneuron.sweep.runner import _loss, _to

    dev = "neuron" if backend == "neuron" else "cpu"
    torch.manual_seed(0)
    case = registry.build(suite, name)
    model = case.model.to(dev)
    inputs = _to(case.inputs, dev)
    train_inputs = _to(case.train_inputs, dev) if case.train_inputs is not None else inputs

    def sync() -> None:
        if dev == "neuron":
            torch.neuron.synchronize()

    t0 = time.perf_counter()
    compiled = torch.compile(model, backend=backend)
    model.eval()
    with torch.no_grad():
        compiled(**inputs)
    sync()
    t1 = time.perf_counter()
    model.train()
    _loss(compiled(**train_inputs), case.loss).backward()
    sync()
    t2 = time.perf_counter()
    result = {"inference": t1 - t0, "training": t2 - t1}
    if backend == "neuron":
        from torchneuron.compiler import get_metrics

        met = get_metrics()
        result.update(graphs=met["graphs_compiled"], iree=met["compile_seconds"])
    print(json.dumps(result))


def measure(spec: str, backend: str, timeout: float) -> dict:
    suite, name = spec.split(":", 1)
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, TORCHNEURON_CACHE_DIR=os.path.join(d, "neuron"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(d, "inductor"))
        try:
            out = subprocess.run([sys.executable, __file__, "--child", suite, name, backend], capture_output=True,
                                 text=True, env=env, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return {"error": f"no result after {timeout:.0f} s"}
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        err = [ln for ln in out.stderr.strip().splitlines() if ln.strip()]
        return {"error": err[-1][:120] if err else f"exit {out.returncode}"}
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(DEFAULT), help="comma-separated SUITE:NAME")
    ap.add_argument("--timeout", type=float, default=600.0, help="per model and backend, seconds")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads; seconds from torch.compile to the "
          "end of the first eval forward + first training forward/backward, new process, empty caches")
    print(f"{'model':36} {'neuron s':>9} {'(IREE s)':>9} {'graphs':>6} {'inductor s':>11} {'ratio':>7}")
    totals = {"neuron": 0.0, "inductor": 0.0}
    for spec in args.models.split(","):
        res = {b: measure(spec, b, args.timeout) for b in ("neuron", "inductor")}
        errs = {b: r["error"] for b, r in res.items() if "error" in r}
        if errs:
            print(f"{spec:36} " + "; ".join(f"{b}: {e}" for b, e in errs.items()), flush=True)
            continue
        secs = {b: r["inference"] + r["training"] for b, r in res.items()}
        for b in totals:
            totals[b] += secs[b]
        n = res["neuron"]
        print(f"{spec:36} {secs['neuron']:9.1f} {n['iree']:9.1f} {n['graphs']:6d} {secs['inductor']:11.1f} "
              f"{secs['neuron'] / secs['inductor']:7.2f}", flush=True)
    if totals["inductor"]:
        print(f"{'total (models both compiled)':36} {totals['neuron']:9.1f} {'':9} {'':6} {totals['inductor']:11.1f} "
              f"{totals['neuron'] / totals['inductor']:7.2f}")


if __name__ == "__main__":
    main()
