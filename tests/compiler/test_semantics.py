"""torch.compile semantics of the neuron backend: dynamic, mode, options, errors, dumps."""

from __future__ import annotations

import pytest
import torch
from helpers import DEVICE
from test_partition import Clipped

import torchneuron.compiler as tnc
from torchneuron.compiler import NeuronCompilationError, get_metrics


def _inner(excinfo):
    """The backend's own exception (Dynamo wraps it in BackendCompilerFailed)."""
    err = excinfo.value
    return getattr(err, "inner_exception", None) or err.__cause__ or err


def test_backend_is_registered_by_name():
    from torch._dynamo.backends.registry import list_backends, lookup_backend

    assert "neuron" in list_backends()
    assert lookup_backend("neuron") is tnc.neuron_backend


def test_entry_point_is_declared():
    from importlib.metadata import entry_points

    eps = entry_points(group="torch_dynamo_backends")
    assert eps["neuron"].value == "torchneuron.compiler.backend:neuron_backend"


def test_dynamic_true_is_rejected_with_a_clear_error():
    f = torch.compile(lambda x: x * 2, backend="neuron", dynamic=True)
    with pytest.raises(Exception) as excinfo:
        f(torch.ones(4, device=DEVICE))
    inner = _inner(excinfo)
    assert isinstance(inner, NeuronCompilationError)
    assert "dynamic=True) is not supported" in str(inner)


def test_new_shapes_recompile_per_shape():
    f = torch.compile(lambda x: (x * 2).sum(0), backend="neuron")
    for n in (3, 5, 7):
        x = torch.arange(n * 2, dtype=torch.float32, device=DEVICE).view(n, 2)
        torch.testing.assert_close(f(x).cpu(), (x.cpu() * 2).sum(0))


def test_other_modes_warn_and_use_default():
    f = torch.compile(lambda x: x + 1, backend="neuron", mode="max-autotune")
    with pytest.warns(UserWarning, match="one compilation mode"):
        out = f(torch.zeros(3, device=DEVICE))
    assert out.cpu().tolist() == [1.0, 1.0, 1.0]


def test_unknown_option_is_an_error():
    f = torch.compile(lambda x: x + 1, backend="neuron", options={"fusion_level": 3})
    with pytest.raises(Exception, match="unknown option"):
        f(torch.zeros(3, device=DEVICE))


def _unlowerable(model, **options):
    return torch.compile(model, backend="neuron", options={"partition": False, **options})


def test_compilation_error_names_op_and_source(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path))
    model = Clipped().to(DEVICE)
    with pytest.raises(Exception) as excinfo, torch.no_grad():
        _unlowerable(model)(torch.randn(2, 16, device=DEVICE))
    inner = _inner(excinfo)
    assert isinstance(inner, NeuronCompilationError)
    assert inner.op == "tn_compiler_test.soft_clip.default"
    assert inner.location and "test_partition.py" in inner.location
    assert inner.dump_dir and str(tmp_path) in inner.dump_dir
    assert (tmp_path / inner.dump_dir.rsplit("/", 1)[-1] / "graph.fx.txt").exists()


def test_fallback_option_runs_eagerly_with_a_warning():
    torch.manual_seed(0)
    model = Clipped().to(DEVICE)
    x = torch.randn(2, 16, device=DEVICE)
    with torch.no_grad():
        ref = model(x)
        with pytest.warns(RuntimeWarning, match="runs eagerly"):
            out = _unlowerable(model, fallback=True)(x)
    torch.testing.assert_close(out.cpu(), ref.cpu())
    assert get_metrics()["fallbacks"] == 1


def test_fallback_environment_variable(monkeypatch):
    monkeypatch.setenv("TORCHNEURON_COMPILE_FALLBACK", "1")
    model = Clipped().to(DEVICE)
    with torch.no_grad(), pytest.warns(RuntimeWarning, match="runs eagerly"):
        _unlowerable(model)(torch.randn(2, 16, device=DEVICE))


def test_dump_dir_holds_graph_stablehlo_executable_and_log(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path))
    f = torch.compile(lambda x, w: (x @ w).relu(), backend="neuron")
    f(torch.randn(4, 8, device=DEVICE), torch.randn(8, 4, device=DEVICE))
    (graph_dir,) = tmp_path.iterdir()
    names = {p.name for p in graph_dir.iterdir()}
    assert {"graph.fx.txt", "placement.txt", "fused_0.fx.txt", "fused_0.stablehlo.mlir",
            "fused_0.vmfb", "fused_0.compile.log"} <= names
    assert "stablehlo.dot_general" in (graph_dir / "fused_0.stablehlo.mlir").read_text()


def test_metrics_report_times_and_cache():
    f = torch.compile(lambda x: torch.sin(x) * 2 + 1, backend="neuron")
    f(torch.randn(5, device=DEVICE))
    m = get_metrics()
    assert m["graphs_compiled"] == 1 and m["cache_hits"] + m["cache_misses"] == 1
    (g,) = m["graphs"].values()
    assert g["nodes"] >= 3 and g["lowering_seconds"] > 0
    tnc.reset_metrics()
    assert tnc.get_metrics()["graphs_compiled"] == 0


@pytest.mark.parametrize("expr", ["amax", "var", "logsumexp", "softmax"])
def test_zero_dim_reductions_run_eagerly_instead_of_crashing_the_lowering(expr):
    # torch-mlir segfaults or hangs lowering these on 0-d tensors; they must stay out of regions
    fns = {
        "amax": lambda x: torch.amax(x, [0], True) + 1,
        "var": lambda x: x.var(0) + 1,
        "logsumexp": lambda x: torch.logsumexp(x, 0) + 1,
        "softmax": lambda x: x.softmax(0) + 1,
    }
    x = torch.tensor(0.25)
    out = torch.compile(fns[expr], backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(out.cpu(), fns[expr](x), equal_nan=True)


def test_negative_advanced_indices_wrap_like_pytorch():
    """``x[:, [-1, 0, -3]]`` (and the write ``x[:, i] = v``) index from the end, as in eager:
    the lowering's gather/scatter would clamp negative indices to 0 (Falcon's QKV split)."""
    x = torch.arange(24.0).reshape(2, 3, 4)
    i = torch.tensor([-1, 0, -2])
    v = torch.randn(2, 3, 4)

    def read(t, idx):
        return t[:, idx] * 2, t[..., [-2], :] + 1

    def write(t, idx, val):
        t = t.clone()
        t[:, idx] = val
        return t

    for fn, args in ((read, (x, i)), (write, (x, i, v))):
        ref = fn(*args)
        got = torch.compile(fn, backend="neuron")(*(a.to("neuron") for a in args))
        for r, g in zip(ref if isinstance(ref, tuple) else (ref,), got if isinstance(got, tuple) else (got,),
                        strict=True):
            assert torch.equal(g.cpu(), r)


def test_open_ended_slices_compile_with_a_clamped_end():
    """``x[:, 8:]`` is ``slice(x, 1, 8, 2**63 - 1)`` and its backward a ``slice_scatter`` with that
    end, which torch-mlir could not lower without growing past 20 GB: the end is clamped to the
    dimension and both compile."""

    def f(x):
        return (x[:, 8:] * 2.0).sin().sum()

    x = torch.randn(4, 16, requires_grad=True)
    xd = x.detach().to(DEVICE).requires_grad_()
    torch.compile(f, backend="neuron")(xd).backward()
    f(x).backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
    for graph in get_metrics()["graphs"].values():
        assert "eager" not in graph["placement"].values(), graph["placement"]


def test_ties_in_topk_and_sort_resolve_as_on_cpu():
    """An MoE router over tied scores (a zero-initialised gate: every score 0.5) must pick the
    experts eager mode and the CPU pick; the compiled code's top-k breaks ties by index, the CPU
    kernel by its own algorithm, so tie-order operators run eagerly between the regions."""

    def route(logits, bias):
        scores = torch.sigmoid(logits)
        _, chosen = torch.topk(scores + bias, k=2, dim=1)
        order = torch.sort(scores * 2, dim=1, stable=False).indices
        return scores.gather(1, chosen) * 3, chosen, order

    logits = torch.zeros(6, 4)
    logits[3] = torch.tensor([0.1, 0.0, 0.1, -0.2])  # partial ties too
    bias = torch.zeros(4)
    ref = route(logits, bias)
    got = torch.compile(route, backend="neuron")(logits.to(DEVICE), bias.to(DEVICE))
    for g, r in zip(got, ref, strict=True):
        assert torch.equal(g.cpu(), r)
    (graph,) = get_metrics()["graphs"].values()
    placed = {name.split("_")[0]: where for name, where in graph["placement"].items()}
    assert placed["topk"] == "eager" and placed["sort"] == "eager" and placed["sigmoid"] != "eager"


def test_a_float_argument_that_changes_is_specialised_per_value():
    """After a second shape Dynamo passes changing Python floats as 0-d tensors read with
    ``.item()`` in the graph (torchvision's ``remove_small_boxes(boxes, min_size)`` in detection
    models); each value compiles its own graph instead of failing with a data-dependent error."""

    def f(x, s):
        return (x * s).sum() + (x >= s).sum()

    c = torch.compile(f, backend="neuron")
    for n, s in ((5, 0.5), (7, 0.25), (9, 0.125), (9, 0.5), (7, 0.25)):
        x = torch.linspace(0, 1, n)
        torch.testing.assert_close(c(x.to(DEVICE), s).cpu(), f(x, s))


def test_an_invalid_op_in_a_traced_function_gives_pytorchs_own_error():
    """FakeTensor runs ops whose meta check raises on zero-filled real tensors from
    ``zeros_like(fake)``, which must not need the fake tensor's (absent) device memory: the
    user sees PyTorch's message, as on the CPU, not an internal error."""
    x = torch.tensor([True, False])
    with pytest.raises(NotImplementedError, match="Negation, the `-` operator, on a bool tensor"):
        torch.compile(lambda t: -(t * True), backend="eager")(x)
    with pytest.raises(NotImplementedError, match="Negation, the `-` operator, on a bool tensor"):
        torch.compile(lambda t: -(t * True), backend="neuron")(x.to(DEVICE))
    y = torch.arange(4.0)
    torch.testing.assert_close(torch.zeros_like(y.to(DEVICE)).cpu(), torch.zeros(4))
    torch.testing.assert_close(torch.full_like(y.to(DEVICE), 2.5, dtype=torch.bfloat16).cpu(),
                               torch.full((4,), 2.5, dtype=torch.bfloat16))
