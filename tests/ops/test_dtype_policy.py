"""float64 is computed as float32 and int64 as int32, the requested dtype is kept."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import torch


def test_float64_computes_in_float32_keeps_dtype():
    x = torch.tensor([1.0 + 2.0**-40, 3.0], dtype=torch.float64)
    d = x.to("neuron")
    assert torch.equal(d.cpu(), x)  # storage is bit exact: copies are not compute
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        y = d * 1.0
    assert y.dtype == torch.float64
    # the 2**-40 is below float32 resolution: the chip loses it
    assert y.cpu()[0].item() == 1.0
    assert y.cpu()[1].item() == 3.0


def test_int64_wraps_like_int32():
    big = torch.tensor([2**31 - 1], dtype=torch.int64).to("neuron")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        r = big + 1
    assert r.dtype == torch.int64
    assert r.item() == -(2**31)  # 32-bit overflow, as on the hardware


def test_small_int64_indices_are_exact():
    idx = torch.tensor([0, 3, 1]).to("neuron")
    w = torch.arange(20.0).reshape(5, 4).to("neuron")
    assert torch.equal(w[idx].cpu(), torch.arange(20.0).reshape(5, 4)[[0, 3, 1]])
    assert torch.equal(idx.argsort().cpu(), torch.tensor([0, 2, 1]))


def test_exact_mode_computes_like_cpu():
    code = (
        "import torch\n"
        "x = torch.tensor([1.0 + 2.0**-40], dtype=torch.float64, device='neuron')\n"
        "b = torch.tensor([2**31 - 1], device='neuron')\n"
        "print((x * 1.0).item() == 1.0 + 2.0**-40, (b + 1).item() == 2**31)\n"
    )
    env = dict(os.environ, TORCHNEURON_EXACT_DTYPES="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True True"


def test_warning_is_issued_once_per_process():
    code = (
        "import warnings, torch\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    x = torch.tensor([1.0 + 2.0**-40], dtype=torch.float64, device='neuron')\n"
        "    for _ in range(3): x = x * 1.0 + 2.0**-40\n"
        "print(sum('computed as float32' in str(m.message) for m in w))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"
