"""`torch_neuronx` compatibility module, device detection by the libraries, and every
`torch.neuron.*` function that transformers, accelerate, PEFT and diffusers call."""

from __future__ import annotations

import importlib.util
import pathlib
import re

import pytest
import torch

LIBRARIES = ("transformers", "accelerate", "peft", "diffusers")


def test_torch_neuronx_exposes_torchneuron_api():
    import torch_neuronx
    import torchneuron

    assert torch_neuronx.get_fallback_ops is torchneuron.get_fallback_ops
    assert torch_neuronx.get_executed_ops is torchneuron.get_executed_ops
    assert torch_neuronx.clear_op_tracking is torchneuron.clear_op_tracking
    assert torchneuron.is_registered()
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch_neuronx.nki_op is torchneuron.nki_op
    for name in ("get_dynamo_metrics", "reset_dynamo_metrics", "set_model_name"):
        assert callable(getattr(torch_neuronx.neuron_dynamo_backend, name))


def test_torch_neuronx_op_tracking():
    import torch_neuronx

    torch_neuronx.clear_op_tracking()
    (torch.ones(3, device="neuron") + 1).cpu()
    assert any("add" in op for op in torch_neuronx.get_executed_ops())
    torch_neuronx.clear_op_tracking()
    assert not torch_neuronx.get_executed_ops()


def test_torch_neuronx_dynamo_metrics():
    pytest.importorskip("torchneuron.compiler")
    import torchneuron.compiler as tc
    from torch_neuronx import neuron_dynamo_backend

    neuron_dynamo_backend.reset_dynamo_metrics()
    assert neuron_dynamo_backend.get_dynamo_metrics() == tc.get_metrics()
    assert neuron_dynamo_backend.get_dynamo_metrics()["graphs"] == {}


def test_libraries_detect_neuron():
    from accelerate import PartialState
    from accelerate.utils import is_neuron_available
    from transformers.utils import is_torch_neuron_available
    from transformers.utils.import_utils import is_torch_bf16_gpu_available

    assert importlib.util.find_spec("torch_neuronx") is not None
    assert is_neuron_available() and is_neuron_available(check_device=True)
    assert is_torch_neuron_available() and is_torch_neuron_available(check_device=True)
    assert is_torch_bf16_gpu_available()
    assert PartialState().device.type == "neuron"


def test_transformers_training_args_pick_neuron(tmp_path):
    from hf_helpers import training_args

    args = training_args(str(tmp_path), torch_compile=True)
    assert args.device == torch.device("neuron", 0)
    assert args.torch_compile_backend == "neuron"


def test_diffusers_detection_mechanism():
    """diffusers finds the module, then asks importlib.metadata for the version of a distribution
    of the same name; torchneuron's distribution is named torchneuron (docs/ecosystem.md)."""
    import importlib.metadata as md

    assert importlib.util.find_spec("torch_neuronx") is not None
    with pytest.raises(md.PackageNotFoundError):
        md.version("torch_neuronx")
    assert md.version("torchneuron")


@pytest.mark.xfail(
    strict=True,
    reason="diffusers detects TorchNeuron through the version of an installed *distribution* "
    "named torch_neuronx; torchneuron ships the module inside the torchneuron distribution",
)
def test_diffusers_detects_neuron():
    pytest.importorskip("diffusers")
    from diffusers.utils import is_torch_neuronx_available

    assert is_torch_neuronx_available()


def _torch_neuron_calls() -> dict[str, set[str]]:
    """``torch.neuron.<name>`` as written in the installed sources of the libraries."""
    found: dict[str, set[str]] = {}
    for lib in LIBRARIES:
        spec = importlib.util.find_spec(lib)
        if spec is None or not spec.submodule_search_locations:
            continue
        for path in pathlib.Path(next(iter(spec.submodule_search_locations))).rglob("*.py"):
            text = path.read_text(encoding="utf-8", errors="replace")
            for name in re.findall(r"torch\.neuron\.([A-Za-z_][A-Za-z0-9_]*)", text):
                found.setdefault(name, set()).add(lib)
    return found


def test_every_torch_neuron_function_the_libraries_call_exists():
    calls = _torch_neuron_calls()
    assert "get_rng_state_all" in calls  # the scan found the libraries
    missing = {n: sorted(libs) for n, libs in calls.items() if not hasattr(torch.neuron, n)}
    assert not missing, f"torch.neuron lacks functions used by the libraries: {missing}"


def test_torch_neuron_surface_behaves():
    n = torch.neuron
    assert n.is_available() and n.device_count() >= 1 and n.current_device() == 0
    n.set_device(torch.device("neuron:0"))
    n.set_device(0)
    assert isinstance(n.get_device_name(), str) and n.get_device_name()
    assert n.is_bf16_supported()
    n.empty_cache()
    n.reset_peak_memory_stats()
    before = n.memory_allocated()
    x = torch.empty(1024, 1024, device="neuron")
    assert n.memory_allocated() >= before + x.numel() * 4
    assert n.max_memory_allocated() >= n.memory_allocated()
    del x


def test_rng_state_all_round_trip():
    n = torch.neuron
    n.manual_seed_all(7)
    states = n.get_rng_state_all()
    assert isinstance(states, list) and len(states) == n.device_count()
    a = torch.rand(8, device="neuron").cpu()
    n.set_rng_state_all(states)
    assert torch.equal(torch.rand(8, device="neuron").cpu(), a)
    single = n.get_rng_state()
    b = torch.randn(8, device="neuron").cpu()
    n.set_rng_state(single)
    assert torch.equal(torch.randn(8, device="neuron").cpu(), b)


def test_accelerate_set_seed_seeds_neuron():
    from accelerate.utils import set_seed

    set_seed(3)
    a = torch.rand(4, device="neuron").cpu()
    set_seed(3)
    assert torch.equal(torch.rand(4, device="neuron").cpu(), a)


def test_accelerate_memory_helpers_on_neuron():
    from accelerate.utils.memory import clear_device_cache

    clear_device_cache(garbage_collection=True)


def test_pin_memory_with_neuron_accelerator():
    # the simulated device's memory is host memory: "pinning" gives a host copy (not page-locked)
    src = torch.arange(4.0)
    x = src.pin_memory()
    assert torch.equal(x, src) and x.data_ptr() != src.data_ptr()
