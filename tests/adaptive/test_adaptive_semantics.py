"""Adaptive eager keeps eager semantics: values, views and in-place writes, synchronisation
points, stream order, memory, random numbers, errors."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from support.adaptive import assert_same, eager_and_adaptive

import torchneuron
from torchneuron import adaptive
from torchneuron.adaptive import executor
from torchneuron.runtime.errors import NeuronRuntimeError


def test_results_are_computed_at_the_synchronisation_point(adaptive_mode):
    x = torch.randn(8, 16, device="neuron")
    w = torch.randn(16, 4, device="neuron")
    ref = torch.relu(x.cpu() @ w.cpu()).sum(1)
    before = adaptive.get_metrics()["windows"]
    z = torch.relu(x @ w).sum(1)
    assert z.shape == (8,) and z.dtype == torch.float32 and z.device.type == "neuron"
    m = adaptive.get_metrics()
    assert m["windows"] == before and m["ops_recorded"] >= 3  # nothing ran yet
    torch.testing.assert_close(z.cpu(), ref)
    m = adaptive.get_metrics()
    assert m["windows"] == before + 1 and m["windows_fused"] >= 1


@pytest.mark.parametrize("sync", ["item", "cpu", "synchronize", "event", "print", "tolist", "nonzero"])
def test_every_synchronisation_point_flushes(adaptive_mode, sync, capsys):
    x = torch.ones(3, device="neuron")
    y = x + 1
    if sync == "item":
        assert y.sum().item() == 6.0
    elif sync == "cpu":
        assert y.cpu().tolist() == [2.0, 2.0, 2.0]
    elif sync == "synchronize":
        torch.neuron.synchronize()
    elif sync == "event":
        e = torch.neuron.Event()
        e.record()
        e.synchronize()
    elif sync == "print":
        print(y)
        assert "2., 2., 2." in capsys.readouterr().out
    elif sync == "tolist":
        assert y.tolist() == [2.0, 2.0, 2.0]
    else:
        assert torch.nonzero(y).shape == (3, 1)
    assert adaptive.get_metrics()["windows"] >= 1
    assert torchneuron.adaptive.mode._recorder.window.nodes == []


def test_views_and_in_place_writes_keep_eager_semantics():
    def program(x, w):
        a = x @ w                    # recorded
        t = a.t()                    # a view of a recorded value
        t.mul_(2)                    # an in-place write through the view
        a[:, 0] = -1                 # a slice assignment (copy_ into a view)
        b = a.view(-1).clone()
        x.add_(1)                    # writes a tensor from before the window
        w.t()[0].zero_()             # writes into a view of memory from before the window
        c = torch.cat([b, x.flatten()])
        return a, b, c

    eager, lazy = eager_and_adaptive(program, torch.randn(4, 5), torch.randn(5, 3))
    assert_same(eager, lazy)


def test_view_taken_before_the_window_then_base_written():
    def program(x):
        t = x.transpose(0, 1)
        u = (t + 1).contiguous().view(-1)
        x.add_(1)
        return u, t * 1

    eager, lazy = eager_and_adaptive(program, torch.randn(4, 8))
    assert_same(eager, lazy)


def test_optimizer_style_foreach_updates():
    def program(p1, p2, g1, g2):
        params, grads = [p1, p2], [g1, g2]
        torch._foreach_mul_(params, 0.9)
        torch._foreach_add_(params, grads, alpha=-0.1)
        sq = torch._foreach_sqrt(torch._foreach_abs(grads))
        torch._foreach_addcdiv_(params, grads, torch._foreach_add(sq, 1e-3), [0.5, 0.25])
        return params

    eager, lazy = eager_and_adaptive(program, torch.randn(8), torch.randn(3, 3), torch.randn(8), torch.randn(3, 3))
    assert_same(eager, lazy)


def test_mixed_dtypes_and_casts():
    def program(x):
        h = x.to(torch.bfloat16) * 3
        i = (x > 0).to(torch.int32).cumsum(0)
        return h.float() + i, h

    x = torch.randn(64, generator=torch.Generator().manual_seed(3))
    eager, lazy = eager_and_adaptive(program, x)
    (e_sum, e_h), (l_sum, l_h) = eager[0], lazy[0]
    # bf16 results: the dtype's default tolerance (a fused program may round x * 3 once where
    # eager rounds the cast and the product separately)
    torch.testing.assert_close(l_h, e_h)
    # h + i cancels: its error is bounded by that of h, two bf16 ulps (2**-6 relative) of |h|
    torch.testing.assert_close(l_sum, e_sum, rtol=0, atol=2**-6 * float(e_h.abs().max()))


def test_intermediates_nobody_references_are_not_written_out(adaptive_mode, monkeypatch):
    seen = {}
    build = executor.build_graph

    def spy(w, live):
        seen["outputs"], seen["allocated"] = len(live), len(w.outputs)
        return build(w, live)

    monkeypatch.setattr(executor, "build_graph", spy)
    x = torch.randn(32, 32).to("neuron")  # a host-to-device copy runs at once
    y = ((x * 2).sin() + 1).relu()  # three intermediates die at once
    assert y.shape == (32, 32)
    ref = ((x.cpu() * 2).sin() + 1).relu()
    torch.testing.assert_close(y.cpu(), ref)
    assert seen == {"outputs": 1, "allocated": 4}


def test_a_window_with_no_live_result_runs_nothing(adaptive_mode):
    x = torch.randn(16).to("neuron")
    before = adaptive.get_metrics()["windows_dead"]
    (x * 2).exp()  # discarded
    torch.neuron.synchronize()
    assert adaptive.get_metrics()["windows_dead"] == before + 1


def test_device_memory_matches_eager():
    def program():
        x = torch.randn(256, 256, device="neuron")
        torch.neuron.synchronize()
        torch.neuron.reset_peak_memory_stats()
        y = x
        for _ in range(8):
            y = (y @ x).tanh()
        torch.neuron.synchronize()
        return torch.neuron.max_memory_allocated(), torch.neuron.memory_allocated()

    eager_peak, eager_now = program()
    with torchneuron.execution_mode("adaptive"):
        peak, now = program()
    assert now == eager_now
    assert peak <= eager_peak


def test_stream_switch_keeps_launch_order(adaptive_mode):
    s = torch.neuron.Stream()
    x = torch.zeros(4, device="neuron")
    x.add_(1)
    with torch.neuron.stream(s):
        x.mul_(3)
    x.add_(1)
    assert x.cpu().tolist() == [4.0] * 4
    assert adaptive.get_metrics()["windows"] >= 2


def test_random_ops_draw_the_same_numbers_as_eager():
    def program():
        torch.manual_seed(7)
        x = torch.ones(1000, device="neuron")
        a = F.dropout(x, 0.5, training=True)
        b = torch.rand_like(x)
        return a.cpu(), b.cpu()

    ea, eb = program()
    with torchneuron.execution_mode("adaptive"):
        la, lb = program()
    assert torch.equal(ea, la) and torch.equal(eb, lb)


def test_shape_errors_raise_at_the_call(adaptive_mode):
    x = torch.randn(3, 4, device="neuron")
    with pytest.raises(RuntimeError, match="size of tensor a"):
        x + torch.randn(5, device="neuron")
    assert (x * 1).shape == (3, 4)  # the device stays usable


def test_index_error_is_deferred_with_the_launch_site(adaptive_mode):
    table = torch.randn(10, 4, device="neuron")
    idx = torch.tensor([1, 2, 30], device="neuron")
    out = F.embedding(idx, table) * 2  # the line the error must name
    assert out.shape == (3, 4)
    with pytest.raises(NeuronRuntimeError) as info:
        torch.neuron.synchronize()
    text = str(info.value)
    assert "aten::embedding" in text
    assert "out = F.embedding(idx, table) * 2" in text
    assert (table.sum(0) * 0).cpu().tolist() == [0.0] * 4  # usable afterwards


def test_a_window_that_fails_to_compile_is_replayed_and_not_compiled_again(adaptive_mode, monkeypatch):
    calls = []

    def failing(gm, inputs):
        calls.append(1)
        raise RuntimeError("simulated compiler failure")

    monkeypatch.setattr(executor, "_compile", failing)

    def step(x):
        return ((x * 3).cos() - x).abs().cpu()

    x = torch.randn(17, 3).to("neuron")
    ref = ((x.cpu() * 3).cos() - x.cpu()).abs()
    torch.testing.assert_close(step(x), ref)
    torch.testing.assert_close(step(x), ref)
    m = adaptive.get_metrics()
    assert len(calls) == 1
    assert m["windows_non_fusable"] == 1 and m["windows_replayed"] == 2
    assert "simulated compiler failure" in m["failures"][0]


def test_out_of_memory_while_recording(adaptive_mode, small_hbm):
    x = torch.ones(1024, device="neuron")
    with pytest.raises(torch.OutOfMemoryError):
        x.expand(64, 1024, 1024).contiguous()
    assert (x + 1).sum().item() == 2048.0


def test_a_float_that_changes_between_runs_becomes_an_input(adaptive_mode):
    adaptive.CACHE.clear()
    x = torch.randn(64).to("neuron")
    outs = []
    for scale in (0.5, 0.25, 0.125, 2.0):
        outs.append((x.mul(scale).add_(1.5) * 3).cpu())  # 3 and 1.5 stay constants
    for scale, out in zip((0.5, 0.25, 0.125, 2.0), outs, strict=True):
        torch.testing.assert_close(out, (x.cpu() * scale + 1.5) * 3)
    m = adaptive.get_metrics()
    # first value: compiled as is; second: compiled with the scale lifted; then only hits
    assert m["windows_compiled"] == 2 and m["windows_lifted"] == 1
    assert m["windows_fused"] == 4 and m["windows_replayed"] == 0


def test_recorded_ops_count_as_executed_on_the_device(adaptive_mode):
    torchneuron.clear_op_tracking()
    x = torch.randn(8).to("neuron")
    y = (x.exp() * 2).cpu()
    assert y.shape == (8,)
    executed = torchneuron.get_executed_ops()
    assert executed.get("aten::exp", 0) >= 1 and executed.get("aten::mul.Tensor", 0) >= 1, executed


@pytest.mark.parametrize("fused", [True, False])
def test_running_a_window_leaves_version_counters_as_eager_left_them(adaptive_mode, monkeypatch, fused):
    """Autograd's in-place check reads version counters: an op bumps them when it is recorded, as
    in eager, and running its window (fused, or replayed op by op) must not bump them again. A
    batch norm's training forward writes its running statistics and saves them for its backward;
    a window run from outside any operator (``torch.neuron.synchronize()``) bumped them once more,
    and the backward refused to run (found in Mask R-CNN v2's mask head)."""
    monkeypatch.setattr(executor, "CACHE", executor.WindowCache())  # this test's windows, compiled or not
    if not fused:
        monkeypatch.setattr(executor, "_compile", lambda gm, inputs: (_ for _ in ()).throw(RuntimeError("no")))

    def versions(bn, x, w):
        return (bn.running_mean._version, bn.running_var._version, bn.num_batches_tracked._version,
                x._version, w._version)

    def step(device):
        torch.manual_seed(0)
        bn = torch.nn.BatchNorm1d(4).to(device).train()
        x = torch.randn(8, 4, device=device, requires_grad=True)
        w = torch.ones(4, device=device)
        y = bn(x)
        w.mul_(2)  # an in-place op of the user's, bumped once
        torch.neuron.synchronize()
        z = bn(x * w)  # the same module again, as the FPN heads call theirs
        torch.neuron.synchronize()
        seen = versions(bn, x, w)
        (y.sum() + (z * z).sum()).backward()
        return seen, x.grad.cpu(), bn.running_mean.cpu()

    with torchneuron.execution_mode("eager"):
        seen_eager, grad_eager, mean_eager = step("neuron")
    seen, grad, mean = step("neuron")
    assert seen == seen_eager
    torch.testing.assert_close(grad, grad_eager)
    torch.testing.assert_close(mean, mean_eager)
    assert adaptive.get_metrics()["windows_fused" if fused else "windows_replayed"] >= 2


def test_histc_with_a_fixed_range_is_recorded_and_one_from_the_data_flushes(adaptive_mode):
    """An MoE router's ``histc(ids, bins=E, min=0, max=E-1)`` joins the window (it compiles:
    compiler/histogram.py); ``histc`` over the data's range runs on the host, which reads the data."""
    torch.manual_seed(0)
    x = torch.randn(40)
    xd = x.to("neuron")
    torchneuron.clear_op_tracking()
    fixed = (torch.histc(xd * 2, bins=5, min=-2, max=2) + 1).cpu()
    metrics = adaptive_mode.get_metrics()
    assert metrics["windows"] == 1 and metrics["ops_recorded"] == 3, metrics
    assert torch.equal(fixed, torch.histc(x * 2, 5, -2, 2) + 1) and torchneuron.get_fallback_ops() == {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the once-per-op CPU fallback warning
        data = (torch.histc(xd * 2, bins=5) + 1).cpu()
    assert torch.equal(data, torch.histc(x * 2, 5) + 1)
    assert set(torchneuron.get_fallback_ops()) == {"aten::histc"}


def test_triangular_solve_is_recorded_with_atens_layout(adaptive_mode):
    """A gated delta net's UT solve joins the window (compiler/triangular_solve.py), and the view
    after it that only ATen's column-major result allows still holds in the fused program."""
    torch.manual_seed(0)
    system = torch.randn(2, 16, 16) * 0.2 + torch.eye(16)
    values = torch.randn(2, 16, 4)
    torchneuron.clear_op_tracking()
    sd, vd = system.to("neuron"), values.to("neuron")
    x = torch.linalg.solve_triangular(sd * 1.0, vd, upper=False, unitriangular=True)
    out = torch.zeros_like(x)  # column-major as x, as Qwen3-Next's core_attn_out
    out[:, 1:] = x[:, 1:] * 2
    got = (out.mT.reshape(2, 64) + 1).cpu()  # a view of the eager layout
    metrics = adaptive_mode.get_metrics()
    assert metrics["windows"] == 1 and metrics["windows_fused"] == 1, metrics
    assert torchneuron.get_fallback_ops() == {}
    ref = torch.linalg.solve_triangular(system, values, upper=False, unitriangular=True)
    ref[:, 0] = 0
    ref = (ref * 2).mT.reshape(2, 64) + 1
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_window_flushed_inside_indexing_with_0d_index_tensors_is_fused(adaptive_mode):
    """``t[rows, cols] = v`` with tuples of 0-d device tensors (UDOP) reads each index with
    ``item()`` inside PyTorch's C++ indexing, which excludes the Python dispatch key: the window
    pending there still compiles (FakeTensor refused to trace under the exclusion)."""
    x = torch.randn(4, 5)
    ind = torch.tensor([[0, 1], [2, 3], [3, 4]])
    d = x.to("neuron")
    y = (d * 2).sin() + 1  # pending in the window
    rows, cols = zip(*ind.to("neuron"), strict=True)
    mask = torch.ones(4, 5, dtype=torch.bool, device="neuron")
    mask[rows, cols] = False
    out = torch.where(mask, y, 0.0).cpu()
    ref_mask = torch.ones(4, 5, dtype=torch.bool)
    ref_mask[tuple(zip(*ind, strict=True))] = False
    torch.testing.assert_close(out, torch.where(ref_mask, (x * 2).sin() + 1, 0.0))
    m = adaptive.get_metrics()
    assert m["windows_non_fusable"] == 0 and m["windows_fused"] >= 1, m
