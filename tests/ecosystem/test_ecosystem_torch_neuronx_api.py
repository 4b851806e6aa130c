"""TorchNeuron's documented Python API under ``torch_neuronx``: ``nki_op``, op tracking and the
``neuron_dynamo_backend`` helpers, each checked against a CPU reference."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn


# ---- nki_op -----------------------------------------------------------------------------------
def _axpy_kernel():
    import torchneuron.nki.isa as nisa
    import torchneuron.nki.language as nl
    from torchneuron import nki

    @nki.jit
    def axpy(x, y, alpha=2.0):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        tx = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        ty = nl.ndarray(y.shape, y.dtype, buffer=nl.sbuf)
        nisa.dma_copy(tx, x)
        nisa.dma_copy(ty, y)
        r = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(r, tx, nl.multiply, alpha, nl.add, ty)
        nisa.dma_copy(out, r)
        return out

    return axpy


_AXPY_OP = None


def _axpy_op():
    global _AXPY_OP
    if _AXPY_OP is None:  # a custom op name can be registered once per process
        from torch_neuronx import nki_op

        _AXPY_OP = nki_op("tn_eco_torch_neuronx::axpy", _axpy_kernel())
    return _AXPY_OP


def test_nki_op_registers_a_custom_op_that_matches_cpu():
    op = _axpy_op()
    x, y = torch.randn(64, 32), torch.randn(64, 32)
    out = op(x.to("neuron"), y.to("neuron"), 0.5)
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), 0.5 * x + y, rtol=0, atol=0)
    # the same operator through torch.ops, as any torch.library custom op
    again = torch.ops.tn_eco_torch_neuronx.axpy(x.to("neuron"), y.to("neuron"), 0.5)
    torch.testing.assert_close(again.cpu(), out.cpu(), rtol=0, atol=0)


# ---- op tracking -------------------------------------------------------------------------------
def test_op_tracking_records_device_and_fallback_ops():
    import torch_neuronx

    x_cpu = torch.randn(33)
    x = x_cpu.to("neuron")
    torch_neuronx.clear_op_tracking()
    assert torch_neuronx.get_executed_ops() == {} and torch_neuronx.get_fallback_ops() == {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the once-per-op CPU fallback warning
        results = {
            "mul": (x * 3).cpu(),
            "median": x.median().cpu(),
            "histc": x.histc(5).cpu(),
        }
    torch.testing.assert_close(results["mul"], x_cpu * 3)
    torch.testing.assert_close(results["median"], x_cpu.median())
    torch.testing.assert_close(results["histc"], x_cpu.histc(5))
    executed, fallback = torch_neuronx.get_executed_ops(), torch_neuronx.get_fallback_ops()
    seen = set(executed) | set(fallback)
    for name in ("mul", "median", "histc"):
        assert any(name in op for op in seen), (name, executed, fallback)
    assert not set(executed) & set(fallback)  # an op is in one list, not both
    assert all(isinstance(n, int) and n > 0 for n in [*executed.values(), *fallback.values()])
    torch_neuronx.clear_op_tracking()
    assert torch_neuronx.get_executed_ops() == {} and torch_neuronx.get_fallback_ops() == {}


# ---- neuron_dynamo_backend ---------------------------------------------------------------------
@pytest.fixture
def compiler_sandbox(tmp_path, monkeypatch):
    pytest.importorskip("torch_mlir", reason="the compile extra is not installed")
    pytest.importorskip("iree.compiler", reason="the compile extra is not installed")
    from torch_neuronx import neuron_dynamo_backend as ndb
    from torchneuron.compiler.cache import CACHE

    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path / "dump"))
    torch._dynamo.reset()
    CACHE.clear_memory()
    ndb.reset_dynamo_metrics()
    yield tmp_path
    ndb.set_model_name(None)
    ndb.reset_dynamo_metrics()
    torch._dynamo.reset()
    CACHE.clear_memory()


def test_dynamo_metrics_and_model_names(compiler_sandbox):
    from torch_neuronx import neuron_dynamo_backend as ndb
    from torchneuron.compiler import settings
    from torchneuron.compiler.cache import CACHE

    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    head = nn.Linear(8, 3)
    x = torch.randn(5, 8)

    ndb.set_model_name("org/tiny-mlp")
    assert settings.model_name() == "org/tiny-mlp"
    with torch.no_grad():
        out_mlp = torch.compile(mlp.to("neuron"), backend="neuron")(x.to("neuron")).cpu()
    ndb.set_model_name("head")
    with torch.no_grad():
        out_head = torch.compile(head.to("neuron"), backend="neuron")(x.to("neuron")).cpu()
    ndb.set_model_name(None)

    with torch.no_grad():
        torch.testing.assert_close(out_mlp, mlp.cpu()(x), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out_head, head.cpu()(x), rtol=1e-5, atol=1e-5)

    metrics = ndb.get_dynamo_metrics()
    models = {gid: g["model"] for gid, g in metrics["graphs"].items()}
    assert sorted(models.values()) == ["head", "org/tiny-mlp"], models
    assert metrics["graphs_compiled"] == 2 and metrics["cache_misses"] >= 2

    # dumps of each model under its own directory ('/' is not a path separator in the name)
    dump = compiler_sandbox / "dump"
    assert sorted(p.name for p in dump.iterdir()) == ["head", "org_tiny-mlp"]
    for gid, model in models.items():
        d = dump / settings.model_dir_name(model) / f"{gid}_inference"
        assert (d / "graph.fx.txt").is_file() and (d / "placement.txt").is_file()

    # disk cache entries created by these graphs carry the model name
    entry_models = {e.get("model") for e in CACHE.entries()}
    assert entry_models == {"org/tiny-mlp", "head"}, CACHE.entries()

    ndb.reset_dynamo_metrics()
    assert ndb.get_dynamo_metrics()["graphs"] == {}
    assert ndb.get_dynamo_metrics()["graphs_compiled"] == 0


def test_set_model_name_rejects_empty_names():
    from torch_neuronx import neuron_dynamo_backend as ndb

    for bad in ("", "   ", 3):
        with pytest.raises(ValueError):
            ndb.set_model_name(bad)
