"""NKI simulator speed and timing-model fidelity, measured in one run.

1. Wall time of simulating the flash attention forward kernel (``torchneuron.kernels``,
   B=1, H=4, S=1024, D=128, fp32) against PyTorch's CPU ``scaled_dot_product_attention`` on
   the same shape. The two alternate round by round (so both see the same machine load); the
   medians and their ratio are printed. Goal (issue 7): ratio <= 20.
2. The timing model's estimate for a 4096^3 bf16 matmul kernel on trn2 (LNC=2) against the
   Tensor Engine peak of one logical core (published and clock-derived). Goal: within 10%.

    python bench/nki.py [--repeat 7] [--skip-matmul]
"""

from __future__ import annotations

import argparse
import statistics
import time

import ml_dtypes
import numpy as np
import torch
import torch.nn.functional as F

from torchneuron import nki
from torchneuron.kernels.attention import flash_attn_fwd_kernel
from torchneuron.kernels.matmul import matmul_kernel
from torchneuron.runtime.target import TARGETS

B, H, S, D = 1, 4, 1024, 128


def _median_pair(fa, fb, repeat: int) -> tuple[float, float]:
    ta, tb = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fa()
        ta.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        fb()
        tb.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


def flash_attention(repeat: int) -> None:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((B, H, S, D), dtype=np.float32) for _ in range(3))
    tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
    scale = 1.0 / float(np.sqrt(D))
    print(f"flash attention forward B={B} H={H} S={S} D={D} fp32, torch threads={torch.get_num_threads()}")
    for causal in (False, True):
        sim = nki.simulate(flash_attn_fwd_kernel[2], target="trn2", return_profile=True)

        def run_sim(sim=sim, causal=causal):
            return sim(q, k, v, scale, causal)

        def run_cpu(causal=causal):
            return F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)

        (out, _), prof = run_sim()  # warm-up, and a correctness check
        ref = run_cpu().numpy()
        err = float(np.abs(out - ref).max())
        assert err < 1e-4, err
        t_sim, t_cpu = _median_pair(run_sim, run_cpu, repeat)
        name = "causal" if causal else "full"
        print(
            f"  {name:<6} simulator {t_sim * 1e3:8.1f} ms  CPU SDPA {t_cpu * 1e3:7.1f} ms  "
            f"ratio {t_sim / t_cpu:5.1f}x  ({len(prof.records)} instructions, "
            f"trn2 estimate {prof.duration * 1e6:.1f} us, max |err| {err:.1e})"
        )


def matmul_estimate(s: int = 4096) -> None:
    t = TARGETS["trn2"]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((s, s), dtype=np.float32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((s, s), dtype=np.float32).astype(ml_dtypes.bfloat16)
    t0 = time.perf_counter()
    _, prof = nki.simulate(matmul_kernel[t.lnc], target="trn2", return_profile=True)(a, b)
    wall = time.perf_counter() - t0
    flops = 2.0 * s**3
    published = flops / t.peak_flops("bf16")
    clock = flops / t.tensor_engine_peak_flops("bf16")
    print(f"{s}^3 bf16 matmul on trn2 (LNC={t.lnc}), simulated in {wall:.1f} s:")
    print(
        f"  estimate {prof.duration * 1e6:.0f} us; published peak {published * 1e6:.0f} us "
        f"({t.peak_flops('bf16') / 1e12:.2f} TFLOPS/logical core) -> {prof.duration / published:.3f}x; "
        f"clock peak {clock * 1e6:.0f} us -> {prof.duration / clock:.3f}x; "
        f"tensor engine utilisation {prof.engine_utilization()['tensor'] * 100:.0f}%"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--skip-matmul", action="store_true")
    args = ap.parse_args()
    flash_attention(args.repeat)
    if not args.skip_matmul:
        matmul_estimate()


if __name__ == "__main__":
    main()
