"""The device is registered through PyTorch's own mechanisms and behaves like one."""

from __future__ import annotations

import subprocess
import sys

import torch


def test_autoload_without_importing_torchneuron():
    code = (
        "import sys, torch\n"
        "assert torch.accelerator.current_accelerator().type == 'neuron'\n"
        "x = torch.ones(2, device='neuron') + 1\n"
        "assert x.cpu().tolist() == [2.0, 2.0]\n"
        "assert 'torchneuron' in sys.modules\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_accelerator_api():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    from torchneuron import native

    # trn2, LNC=2: 4 logical cores; without the native device guard a process has neuron:0 only
    assert torch.accelerator.device_count() == torch.neuron.device_count() == (4 if native.available() else 1)
    torch.accelerator.synchronize()
    s = torch.accelerator.current_stream()
    assert s.device.type == "neuron"
    assert s == torch.neuron.default_stream()


def test_tensor_and_module_helpers():
    t = torch.arange(4.0)
    n = t.neuron()
    assert n.device == torch.device("neuron", 0)
    assert n.is_neuron
    m = torch.nn.Linear(2, 2).neuron()
    assert m.weight.device.type == "neuron"
    assert torch.device("neuron").type == "neuron"


def test_real_device_storage():
    t = torch.randn(3, 5).to("neuron")
    st = t.untyped_storage()
    assert st.device.type == "neuron"
    assert st.nbytes() == 60
    assert t.data_ptr() != 0
    u = torch.randn(3, 5).to("neuron")
    assert u.data_ptr() != t.data_ptr()


def test_numpy_on_device_tensor_points_to_cpu():
    t = torch.ones(2, device="neuron")
    try:
        t.numpy()
    except TypeError as e:
        assert "Use Tensor.cpu()" in str(e)
    else:
        raise AssertionError("numpy() on a device tensor must fail")


def test_cores_beyond_the_count_do_not_exist():
    import pytest

    n = torch.neuron.device_count()
    with pytest.raises(RuntimeError, match=f"neuron:{n} does not exist: this process has {n} logical"):
        torch.empty(2, device=f"neuron:{n}")
    with pytest.raises(RuntimeError, match="does not exist"):
        torch.neuron.set_device(n)
    with pytest.raises(RuntimeError, match="does not exist"):
        torch.ones(2).to("neuron:9")
    assert torch.neuron.current_device() == 0  # a failed set_device leaves the current core


def test_import_torchneuron_before_torch():
    code = "import torchneuron, torch\nprint((torch.ones(2, device='neuron') * 3).sum().item())\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "6.0"


def test_autoload_leaves_dynamo_unimported_and_skips_the_device_once_it_loads():
    # Dynamo costs ~1.1 s to import: `import torch` does not pay it for torchneuron; when something
    # imports it later, the device's kernels and runtime are kept out of tracing all the same
    code = (
        "import sys, torch\n"
        "assert torch.accelerator.current_accelerator().type == 'neuron'\n"
        "assert 'torch._dynamo' not in sys.modules, 'autoload imported Dynamo'\n"
        "import torch._dynamo.trace_rules as rules\n"
        "import torchneuron.ops.generic as kernels\n"
        "assert rules.check_file(kernels.__file__).skipped\n"
        "assert not rules.check_file(__import__('torchneuron.nki.language').nki.language.__file__).skipped\n"
        "f = torch.compile(lambda x: torch.relu(x) * 2, backend='neuron')\n"
        "print(f(torch.tensor([-1.0, 3.0], device='neuron')).cpu().tolist())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[0.0, 6.0]"
