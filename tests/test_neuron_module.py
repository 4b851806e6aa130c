"""The torch.neuron module: device queries, memory statistics, RNG."""

from __future__ import annotations

import pytest
import torch

from torchneuron.runtime.target import GiB, target_from_env


def test_device_queries():
    n = torch.neuron
    from torchneuron import native

    # trn2: 4 logical cores (neuron:0 only without the native device guard)
    assert n.is_available() and n.device_count() == (4 if native.available() else 1) and n.current_device() == 0
    n.set_device(0)
    n.set_device("neuron:0")
    assert "Trainium2" in n.get_device_name()
    p = n.get_device_properties()
    assert p.total_memory == 24 * GiB and p.target == "trn2" and p.logical_core_count == 2
    assert n.is_bf16_supported()
    n.synchronize()


def test_targets_table_and_env():
    assert target_from_env({}).hbm_bytes == 24 * GiB
    assert target_from_env({"TORCHNEURON_TARGET": "trn3"}).hbm_bytes == 36 * GiB
    assert target_from_env({"TORCHNEURON_HBM_GIB": "2"}).hbm_bytes == 2 * GiB
    assert target_from_env({"TORCHNEURON_LNC": "1"}).hbm_bytes == 12 * GiB
    with pytest.raises(ValueError, match="trn9"):
        target_from_env({"TORCHNEURON_TARGET": "trn9"})
    with pytest.raises(ValueError, match="positive"):
        target_from_env({"TORCHNEURON_HBM_GIB": "-1"})


def test_memory_allocated_counts_live_bytes_exactly():
    torch.neuron.synchronize()
    base = torch.neuron.memory_allocated()
    a = torch.empty(1000, dtype=torch.float32, device="neuron")
    assert torch.neuron.memory_allocated() == base + 4000
    b = a.view(10, 100)[2:5]  # views add nothing
    assert torch.neuron.memory_allocated() == base + 4000
    c = torch.randn(7, 3, device="neuron") * 2  # kernel outputs count too
    assert torch.neuron.memory_allocated() == base + 4000 + 84  # the randn temporary is gone
    del c
    assert torch.neuron.memory_allocated() == base + 4000
    del a
    assert torch.neuron.memory_allocated() == base + 4000  # the view b keeps the storage alive
    del b
    assert torch.neuron.memory_allocated() == base
    assert torch.neuron.memory_reserved() >= torch.neuron.memory_allocated()


def test_peak_and_reset_and_cache():
    torch.neuron.empty_cache()
    torch.neuron.reset_peak_memory_stats()
    base = torch.neuron.memory_allocated()
    x = torch.empty(1 << 20, dtype=torch.uint8, device="neuron")
    assert torch.neuron.max_memory_allocated() >= base + (1 << 20)
    del x
    assert torch.neuron.memory_reserved() >= (1 << 20)  # the freed block is cached
    y = torch.empty(1 << 20, dtype=torch.uint8, device="neuron")  # reuses it
    stats = torch.neuron.memory_stats()
    assert stats["num_cache_hits"] >= 1
    del y
    torch.neuron.empty_cache()
    assert torch.neuron.memory_reserved() >= torch.neuron.memory_allocated()
    assert torch.neuron.memory_stats()["inactive_split_bytes.all.current"] == 0
    torch.neuron.reset_peak_memory_stats()
    assert torch.neuron.max_memory_allocated() == torch.neuron.memory_allocated()
    free, total = torch.neuron.mem_get_info()
    assert total == torch.neuron.get_device_properties().total_memory and 0 < free <= total
    text = torch.neuron.memory_summary()
    assert "Allocated memory" in text and "trn2" in text


def test_out_of_memory_is_clear_and_recoverable(small_hbm):
    before = torch.neuron.memory_allocated()
    keep = torch.ones(1000, device="neuron")
    with pytest.raises(torch.OutOfMemoryError) as ei:
        torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="neuron")
    msg = str(ei.value)
    assert "tried to allocate 256.00 MiB" in msg and "allocated" in msg and "reserved" in msg
    assert "TORCHNEURON_HBM_GIB" in msg
    # a kernel whose output does not fit fails the same way
    big = torch.empty(8 * 1024 * 1024, dtype=torch.float32, device="neuron")  # 32 MiB
    with pytest.raises(torch.OutOfMemoryError):
        torch.cat([big, big, big])
    del big
    # nothing was lost and the device still works
    assert torch.neuron.memory_allocated() == before + 4000
    assert (keep + 1).sum().item() == 2000.0


def test_rng_api():
    torch.neuron.manual_seed(123)
    assert torch.neuron.initial_seed() == 123
    a = torch.randn(5, device="neuron")
    torch.neuron.manual_seed(123)
    b = torch.randn(5, device="neuron")
    assert torch.equal(a.cpu(), b.cpu())
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    c = torch.rand(4, device="neuron")
    d = torch.nn.functional.dropout(torch.ones(16, device="neuron"), 0.5)
    torch.neuron.set_rng_state(state)
    assert torch.equal(c.cpu(), torch.rand(4, device="neuron").cpu())
    assert torch.equal(d.cpu(), torch.nn.functional.dropout(torch.ones(16, device="neuron"), 0.5).cpu())
    states = torch.neuron.get_rng_state_all()
    torch.neuron.set_rng_state_all(states)
    torch.neuron.seed()
    torch.neuron.seed_all()
    torch.neuron.manual_seed_all(5)


def test_torch_manual_seed_reaches_device_and_cpu_stream_is_separate():
    torch.manual_seed(7)
    a = torch.randn(3, device="neuron")
    torch.manual_seed(7)
    b = torch.randn(3, device="neuron")
    assert torch.equal(a.cpu(), b.cpu())
    torch.manual_seed(7)
    ref = torch.randn(3)
    torch.manual_seed(7)
    torch.randn(3, device="neuron")  # draws from the device generator only
    assert torch.equal(torch.randn(3), ref)


def test_memory_snapshot_history():
    torch.neuron.record_memory_history("all")
    try:
        x = torch.empty(1000, device="neuron")
        del x
        snap = torch.neuron.memory_snapshot()
    finally:
        torch.neuron.record_memory_history(None)
    actions = [e["action"] for e in snap["history"]]
    assert "alloc" in actions and "free" in actions
    assert snap["capacity_bytes"] == torch.neuron.get_device_properties().total_memory
