"""Several logical NeuronCores in one process: neuron:0 .. neuron:N-1, each with its own memory,
random generator and streams, a per-thread current core, and PyTorch's rules across devices."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest
import torch
from torch import nn

from torchneuron import native
from torchneuron.runtime import devices
from torchneuron.runtime.target import TARGETS, target_from_env

needs_native = pytest.mark.skipif(not native.available(), reason="several cores need the native device hooks")
TRN2 = TARGETS["trn2"]


# ---- how many cores, which one is current ------------------------------------------------------
@pytest.mark.parametrize(
    ("env", "count"),
    [
        ({}, 4),  # one trn2 chip, LNC=2
        ({"NEURON_RT_VISIBLE_CORES": "0-1"}, 2),
        ({"NEURON_RT_VISIBLE_CORES": "3"}, 1),
        ({"NEURON_RT_VISIBLE_CORES": "0,2,5"}, 3),  # core 5 is on a second chip of the node
        ({"NEURON_RT_NUM_CORES": "2"}, 2),
        ({"LOCAL_WORLD_SIZE": "2"}, 4),
        ({"LOCAL_WORLD_SIZE": "6"}, 8),  # enough chips for every local rank
    ],
)
def test_core_count_from_the_environment(env, count):
    assert devices.configured_count(TRN2, env) == count


def test_core_count_follows_the_logical_core_size():
    assert devices.configured_count(target_from_env({"TORCHNEURON_LNC": "1"}), {}) == 8


@pytest.mark.parametrize("spec", ["two", "3-1", "70", ""])
def test_a_malformed_core_list_is_reported_and_ignored(spec):
    env = {"NEURON_RT_VISIBLE_CORES": spec}
    if not spec:
        assert devices.configured_count(TRN2, env) == 4
        return
    with pytest.warns(UserWarning, match="ignoring NEURON_RT_VISIBLE_CORES"):
        assert devices.configured_count(TRN2, env) == 4


def test_a_launched_rank_starts_on_its_core():
    assert devices.default_index(4, {"LOCAL_RANK": "3"}) == 3
    assert devices.default_index(4, {"LOCAL_RANK": "5"}) == 1
    assert devices.default_index(4, {}) == 0


def _run(code: str, **env) -> str:
    import os

    full = dict(os.environ, **env)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         timeout=180, env=full)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip()


@needs_native
def test_visible_cores_and_local_rank_in_a_new_process():
    out = _run(
        """
        import torch
        print(torch.neuron.device_count(), torch.accelerator.device_count(), torch.neuron.current_device(),
              torch.ones(1, device="neuron").device, torch.accelerator.current_device_index())
        """,
        NEURON_RT_VISIBLE_CORES="0-1", LOCAL_RANK="1",
    )
    assert out == "2 2 1 neuron:1 1"


# ---- work on a core other than neuron:0 ----------------------------------------------------------
@needs_native
def test_set_device_and_the_device_context_manager():
    assert torch.neuron.current_device() == 0
    torch.neuron.set_device(2)
    try:
        assert torch.empty(2, device="neuron").device == torch.device("neuron", 2)
        assert torch.randn(2, device="neuron").device.index == 2  # a factory on the Python path
        with torch.neuron.device(1):
            assert torch.neuron.current_device() == 1
            assert torch.zeros(3, device="neuron").device.index == 1
        assert torch.neuron.current_device() == 2
        x = torch.ones(2, device="neuron:3")
        with torch.neuron.device_of(x):
            assert torch.accelerator.current_device_index() == 3
    finally:
        torch.neuron.set_device(0)


@needs_native
def test_the_current_core_is_per_thread():
    torch.neuron.set_device(1)
    seen = []
    try:
        t = threading.Thread(target=lambda: seen.append(torch.neuron.current_device()))
        t.start()
        t.join()
        assert seen == [0] and torch.neuron.current_device() == 1
    finally:
        torch.neuron.set_device(0)


@needs_native
def test_training_on_core_1_matches_cpu():
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3))
    dev = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3))
    dev.load_state_dict(ref.state_dict())
    dev.to("neuron:1")
    assert {p.device for p in dev.parameters()} == {torch.device("neuron", 1)}
    opt_r = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt_d = torch.optim.AdamW(dev.parameters(), lr=1e-2)
    x = torch.randn(8, 6)
    y = torch.randint(0, 3, (8,))
    before0 = torch.neuron.memory_allocated(0)
    for _ in range(5):
        for model, opt, xx, yy in ((ref, opt_r, x, y), (dev, opt_d, x.to("neuron:1"), y.to("neuron:1"))):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xx), yy)
            loss.backward()
            opt.step()
        assert loss.device.index == 1
    for pr, pd in zip(ref.parameters(), dev.parameters(), strict=True):
        assert pd.grad.device.index == 1
        torch.testing.assert_close(pd.detach().cpu(), pr.detach(), rtol=1e-5, atol=1e-6)
    assert torch.neuron.memory_allocated(1) > 0
    assert torch.neuron.memory_allocated(0) == before0  # nothing of it landed on neuron:0


@needs_native
def test_a_model_split_over_two_cores_matches_cpu():
    """Pipeline-style model parallelism (as `device_map="auto"` places layers): activations and
    gradients cross between cores."""
    torch.manual_seed(1)
    first, second = nn.Linear(5, 7), nn.Linear(7, 2)
    x = torch.randn(4, 5)
    ref = second(torch.tanh(first(x))).square().sum()
    ref.backward()
    grads = [p.grad.clone() for p in (*first.parameters(), *second.parameters())]
    for p in (*first.parameters(), *second.parameters()):
        p.grad = None
    first.to("neuron:0")
    second.to("neuron:1")
    h = torch.tanh(first(x.to("neuron:0")))
    out = second(h.to("neuron:1")).square().sum()
    out.backward()
    torch.testing.assert_close(out.cpu(), ref.detach())
    for p, g in zip((*first.parameters(), *second.parameters()), grads, strict=True):
        torch.testing.assert_close(p.grad.cpu(), g)
    assert first.weight.grad.device.index == 0 and second.weight.grad.device.index == 1


@needs_native
def test_tensors_on_two_cores_are_an_error_and_the_device_stays_usable():
    a = torch.ones(3, device="neuron:0")
    b = torch.ones(3, device="neuron:1")
    for fn in (lambda: a + b, lambda: torch.cat([a, b]), lambda: a.float().div_(b), lambda: torch.where(a > 0, a, b)):
        with pytest.raises(RuntimeError, match="same device, but found at least two devices, neuron:0 and neuron:1"):
            fn()
    assert torch.equal((a + b.to("neuron:0")).cpu(), torch.full((3,), 2.0))
    c = torch.empty(3, device="neuron:2")
    c.copy_(b)  # copies between cores are allowed
    assert c.device.index == 2 and torch.equal(c.cpu(), torch.ones(3))


@needs_native
def test_each_core_has_its_own_memory_and_capacity():
    from torchneuron.runtime import state

    before = [torch.neuron.memory_allocated(i) for i in range(4)]
    x = torch.empty(1000, device="neuron:2")
    after = [torch.neuron.memory_allocated(i) for i in range(4)]
    assert after[2] - before[2] == 4000 and after[:2] == before[:2] and after[3] == before[3]
    assert "neuron:2 memory summary" in torch.neuron.memory_summary(2)
    free, total = torch.neuron.mem_get_info(3)
    assert total == TRN2.hbm_bytes  # 24 GiB per logical core
    alloc = state.allocator(1)
    saved = alloc.capacity
    alloc.capacity = 1 << 20
    try:
        with pytest.raises(torch.OutOfMemoryError, match="on neuron:1"):
            torch.empty(1 << 20, device="neuron:1")
        y = torch.empty(1 << 20, device="neuron:0")  # another core's memory is not affected
    finally:
        alloc.capacity = saved
    z = torch.ones(4, device="neuron:1") * 2  # and neuron:1 still works
    assert torch.equal(z.cpu(), torch.full((4,), 2.0))
    del x, y


@needs_native
def test_each_core_has_its_own_random_stream():
    torch.neuron.manual_seed_all(3)
    a0 = torch.rand(5, device="neuron:0").cpu()
    a1 = torch.rand(5, device="neuron:1").cpu()
    expected = torch.rand(5, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a0, expected) and torch.equal(a1, expected)  # seeded alike, drawn apart
    with torch.neuron.device(1):
        torch.neuron.manual_seed(11)  # the current core only
    b1 = torch.randn(4, device="neuron:1").cpu()
    assert torch.equal(b1, torch.randn(4, generator=torch.Generator().manual_seed(11)))
    b0 = torch.rand(5, device="neuron:0").cpu()
    g = torch.Generator().manual_seed(3)
    torch.rand(5, generator=g)
    assert torch.equal(b0, torch.rand(5, generator=g))  # neuron:0 continued its own stream
    states = torch.neuron.get_rng_state_all()
    assert len(states) == 4
    x = torch.rand(3, device="neuron:3").cpu()
    torch.neuron.set_rng_state_all(states)
    assert torch.equal(torch.rand(3, device="neuron:3").cpu(), x)
    gen = torch.Generator(device="neuron:1").manual_seed(9)
    assert gen.device == torch.device("neuron", 1)
    assert torch.equal(torch.randn(6, device="neuron:1", generator=gen).cpu(),
                       torch.randn(6, generator=torch.Generator().manual_seed(9)))


@needs_native
def test_streams_belong_to_a_core():
    s = torch.neuron.Stream(device="neuron:1")
    assert s.device_index == 1 and s.device == torch.device("neuron", 1)
    assert torch.neuron.default_stream(1) != torch.neuron.default_stream(0)
    assert torch.neuron.current_stream(1) == torch.neuron.default_stream(1)
    with torch.neuron.stream(s):
        assert torch.neuron.current_device() == 1  # as torch.cuda.stream: the stream's core is current
        assert torch.neuron.current_stream() == s
        y = torch.ones(2, device="neuron") + 1
    assert torch.neuron.current_device() == 0 and torch.neuron.current_stream(1) == torch.neuron.default_stream(1)
    assert y.device.index == 1
    torch.accelerator.synchronize(1)
    torch.neuron.synchronize("neuron:1")


@needs_native
def test_compiled_model_runs_on_its_core(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    x = torch.randn(3, 8)
    ref = model(x)
    model.to("neuron:1")
    out = torch.compile(model, backend="neuron")(x.to("neuron:1"))
    assert out.device == torch.device("neuron", 1)
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()


@needs_native
def test_profiling_on_another_core_records_that_core(tmp_path):
    """A launched rank works on neuron:LOCAL_RANK: its profile and memory history are that core's."""
    import json

    from torch.profiler import ProfilerActivity, profile

    import torchneuron.profiler as tnp

    with torch.neuron.device(2):
        tnp.record_memory_history(True)
        try:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
                x = torch.randn(64, 64, device="neuron")
                (x @ x).sum().item()
            snap = torch.neuron.memory_snapshot()
        finally:
            tnp.record_memory_history(False)
    assert snap["device"] == "neuron:2" and any(e["action"] == "alloc" for e in snap["history"])
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name" and "args" in e}
    assert "neuron:2" in names
    counters = [e for e in events if e.get("ph") == "C" and e.get("name") == "neuron:2 memory"]
    assert counters and max(c["args"]["allocated_bytes"] for c in counters) >= 64 * 64 * 4


@needs_native
def test_adaptive_eager_fuses_the_work_of_another_core():
    """A launched rank works on neuron:LOCAL_RANK: adaptive eager fuses its windows there too."""
    import torchneuron
    from torchneuron import adaptive

    torch.manual_seed(3)
    x = torch.randn(16, 32)
    w = torch.randn(32, 8)
    ref = (torch.tanh(x @ w) * 2 + 1).softmax(-1)
    adaptive.reset_metrics()
    with torch.neuron.device(1), torchneuron.execution_mode("adaptive"):
        xd, wd = x.to("neuron"), w.to("neuron")
        out = (torch.tanh(xd @ wd) * 2 + 1).softmax(-1)
        got = out.cpu()
    assert out.device == torch.device("neuron", 1)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    m = adaptive.get_metrics()
    assert m["windows_fused"] >= 1 and m["ops_recorded"] >= 4, m
