"""CPU fallback: explicit round trip, warning once per op, tracking, error mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import torch

import torchneuron

_SCRIPT = r"""
import json, warnings, torch, torchneuron
warnings.simplefilter("always")
out = {}
x = torch.linspace(-0.9, 0.9, 12).reshape(3, 4)
d = x.to("neuron")
torchneuron.clear_op_tracking()
with warnings.catch_warnings(record=True) as w:
    y1 = torch.erfinv(d)
    y2 = torch.erfinv(d * 0.5)
    v, i = torch.topk(d, 2)
    z = d.clone()
    z.add_(1.0)
    o = torch.empty(0, device="neuron")
    torch.mul(d, 2, out=o)
out["warnings"] = [str(m.message) for m in w if "CPU fallback" in str(m.message)]
out["erfinv_ok"] = torch.allclose(y1.cpu(), torch.erfinv(x)) and torch.allclose(y2.cpu(), torch.erfinv(x * 0.5))
out["topk_ok"] = torch.equal(v.cpu(), torch.topk(x, 2).values) and torch.equal(i.cpu(), torch.topk(x, 2).indices)
out["inplace_ok"] = torch.equal(z.cpu(), x + 1) and z.device.type == "neuron"
out["out_ok"] = torch.equal(o.cpu(), x * 2) and o.shape == (3, 4)
out["devices"] = sorted({t.device.type for t in (y1, v, i, z, o)})
out["fallback"] = torchneuron.get_fallback_ops()
out["transfers"] = torchneuron.transfer_stats()
print(json.dumps(out))
"""


def _run(env_extra):
    env = dict(os.environ, **env_extra)
    return subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=180)


def test_forced_fallback_round_trip_warns_once_and_is_tracked():
    r = _run({"TORCHNEURON_FORCE_FALLBACK": "aten::erfinv,aten::topk,aten::add_.Tensor,aten::mul.out"})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["erfinv_ok"] and out["topk_ok"] and out["inplace_ok"] and out["out_ok"]
    assert out["devices"] == ["neuron"]
    assert out["fallback"] == {"aten::erfinv": 2, "aten::topk": 1, "aten::add_.Tensor": 1, "aten::mul.out": 1}
    names = [m.split("'")[1] for m in out["warnings"]]
    assert sorted(names) == ["aten::add_.Tensor", "aten::erfinv", "aten::mul.out", "aten::topk"]  # once each
    assert all("executed via CPU fallback" in m for m in out["warnings"])
    t = out["transfers"]
    assert t["device_to_host_count"] >= 5 and t["host_to_device_count"] >= 5
    assert t["device_to_host_bytes"] >= 2 * 48


def test_error_mode_names_op_and_dtypes():
    code = (
        "import torch, torchneuron\n"
        "d = torch.ones(3, device='neuron', dtype=torch.bfloat16)\n"
        "try:\n"
        "    torch.erfinv(d * 0.5)\n"
        "except torchneuron.NeuronFallbackError as e:\n"
        "    print('ERR', e)\n"
        "print((d + 1).sum().item())\n"
    )
    env = dict(os.environ, TORCHNEURON_FORCE_FALLBACK="aten::erfinv", TORCHNEURON_FALLBACK="error")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "ERR Operator 'aten::erfinv' is not supported on the NeuronCore for dtypes (bfloat16)" in r.stdout
    assert r.stdout.strip().endswith("6.0")  # the device keeps working


def test_tracking_api_in_process():
    torchneuron.clear_op_tracking()
    a = torch.ones(4, device="neuron")
    (a * 2).sum()
    ops = torchneuron.get_executed_ops()
    assert ops.get("aten::mul.Tensor", 0) + ops.get("aten::mul.Scalar", 0) >= 1
    assert ops.get("aten::sum", 0) >= 1
    assert torchneuron.get_fallback_ops() == {}
    torchneuron.clear_op_tracking()
    assert torchneuron.get_executed_ops() == {}
    torch.ones(3).to("neuron").cpu()
    t = torchneuron.transfer_stats()
    assert t["host_to_device_bytes"] == 12 and t["device_to_host_bytes"] == 12


def test_histc_accepts_integer_tensors_like_accelerators():
    x = torch.tensor([0, 1, 1, 3, 3, 3])
    h = torch.histc(x.to("neuron"), bins=4, min=0, max=3)
    assert h.device.type == "neuron" and h.dtype == torch.int64
    assert h.cpu().tolist() == torch.histc(x.float(), bins=4, min=0, max=3).long().tolist()


def test_histc_runs_on_the_device_for_a_fixed_range_only():
    """A range fixed by the call compiles for the chip (compiler/histogram.py); one taken from the
    data needs the host to read it first: a CPU fallback."""
    x = torch.randn(50)
    torchneuron.clear_op_tracking()
    torch.testing.assert_close(torch.histc(x.to("neuron"), bins=6, min=-1, max=1).cpu(), torch.histc(x, 6, -1, 1))
    assert torchneuron.get_fallback_ops() == {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the once-per-op CPU fallback warning
        torch.testing.assert_close(torch.histc(x.to("neuron"), bins=6).cpu(), torch.histc(x, 6))
    assert set(torchneuron.get_fallback_ops()) == {"aten::histc"}
