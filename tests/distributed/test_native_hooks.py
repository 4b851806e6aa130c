"""The native PrivateUse1 hooks: storage resize (FSDP2) and pinned host memory (DDP's Reducer).

Checked in this process (the hooks are installed at ``import torch``) against plain CPU
semantics, plus one subprocess without a compiler that must degrade with a clear message.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from _launch import REPO

import torchneuron.native as native

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native hooks: {native.status()}")
DEV = torch.device("neuron")


def _alloc() -> int:
    return torch.neuron.memory_allocated()


def test_status_reports_the_cached_module():
    st = native.status()
    assert st["installed"] and st["path"] and os.path.exists(st["path"])


def test_resize_keeps_views_and_bytes_like_cpu():
    base = torch.arange(12, dtype=torch.float32)
    x = base.to(DEV)
    view = x[2:]  # a view with an offset shares the StorageImpl
    ptr_before = x.data_ptr()
    before = _alloc()
    x.untyped_storage().resize_(20 * 4)  # grow: the first 48 bytes are kept
    assert x.untyped_storage().nbytes() == 80 and view.untyped_storage().nbytes() == 80
    assert _alloc() - before == 80 - 48
    assert torch.equal(x.cpu(), base) and torch.equal(view.cpu(), base[2:])
    assert x.data_ptr() != ptr_before  # a new allocation, seen by every tensor on the storage
    assert view.data_ptr() == x.data_ptr() + 8
    x.add_(1)
    assert torch.equal(view.cpu(), base[2:] + 1)  # writes through one are seen by the other

    x.untyped_storage().resize_(0)  # free (FSDP2 reshard)
    assert x.untyped_storage().nbytes() == 0 and _alloc() == before - 48
    x.untyped_storage().resize_(48)  # re-allocate (FSDP2 unshard), then fill
    assert _alloc() == before
    x.copy_(base.to(DEV))
    assert torch.equal(view.cpu(), base[2:])


def test_resize_of_an_empty_tensor_and_shrink():
    before = _alloc()
    e = torch.empty(0, device=DEV)
    e.untyped_storage().resize_(16)
    assert _alloc() == before + 16
    t = torch.arange(8, dtype=torch.float32).to(DEV)
    t.untyped_storage().resize_(12)  # shrink keeps the prefix
    assert torch.equal(torch.empty(0, device=DEV).set_(t.untyped_storage()).cpu(),
                       torch.arange(3, dtype=torch.float32))
    del e, t
    assert _alloc() == before


def test_resize_beyond_capacity_raises_oom_and_changes_nothing():
    x = torch.ones(4, device=DEV)
    before = _alloc()
    with pytest.raises(torch.OutOfMemoryError, match="neuron out of memory"):
        x.untyped_storage().resize_(1 << 50)
    assert _alloc() == before and x.untyped_storage().nbytes() == 16
    assert torch.equal(x.cpu(), torch.ones(4))


def test_pin_memory_is_exact():
    before = native.pinned_stats()["bytes"]
    c = torch.arange(6, dtype=torch.float32)
    p = c.pin_memory()
    assert p.is_pinned() and not c.is_pinned() and torch.equal(p, c)
    assert p[3:].is_pinned()  # an interior pointer of a pinned block
    assert native.pinned_stats()["bytes"] == before + 24
    z = torch.zeros(5, pin_memory=True)
    assert z.is_pinned() and z.sum() == 0
    del p, z
    assert native.pinned_stats()["bytes"] == before
    # pinned staging then a non-blocking copy to the device (what DDP's Reducer does)
    s = torch.arange(4, dtype=torch.int32, pin_memory=True)
    assert torch.equal(s.to(DEV, non_blocking=True).cpu(), torch.arange(4, dtype=torch.int32))


def test_dataloader_pin_memory():
    ds = torch.utils.data.TensorDataset(torch.randn(8, 3))
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=4, pin_memory=True)))[0]
    assert batch.is_pinned()


def test_without_a_compiler_the_device_runs_and_the_gap_is_explained(tmp_path):
    code = textwrap.dedent("""
        import warnings, torch, torchneuron.native as native
        st = native.status()
        print("STATUS", st["installed"], st["reason"])
        x = torch.ones(3, device="neuron") * 2
        print("DEVICE", x.cpu().tolist())
        try:
            x.untyped_storage().resize_(0)
        except Exception as e:
            print("RESIZE", type(e).__name__, "resizePrivateUse1Bytes" in str(e))
        import torchneuron.distributed.backend as b
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            b._warn_without_native_hooks()
        print("WARN", "needs torchneuron's native device hooks" in str(w[0].message), "FSDP2" in str(w[0].message))
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO), CXX="/nonexistent/c++",
               TORCHNEURON_CACHE_DIR=str(tmp_path), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert lines["STATUS"].startswith("False RuntimeError: no C++ compiler found"), lines
    assert lines["DEVICE"] == "[2.0, 2.0, 2.0]"
    assert lines["RESIZE"] == "NotImplementedError True"
    assert lines["WARN"] == "True True"


def test_resize_runs_pending_adaptive_work_first():
    # adaptive eager records `a * 3` and computes it later, into the storage's current bytes;
    # the resize must let that work land before it copies them to the new allocation
    import torchneuron
    from torchneuron.runtime import lazy

    with torchneuron.execution_mode("adaptive"):
        a = torch.ones(4, device=DEV)
        x = a * 3
        assert lazy.FLUSH is not None  # the multiplication is still pending
        x.untyped_storage().resize_(32)
        grown = torch.empty(0, device=DEV).set_(x.untyped_storage(), 0, (4,), (1,))
        assert torch.equal(grown.cpu(), torch.full((4,), 3.0))


def test_cpp_callers_reach_the_hook_too():
    # inductor.resize_storage_bytes_ (compiled FSDP2) resizes from C++, not via UntypedStorage
    x = torch.arange(4, dtype=torch.float32).to(DEV)
    before = _alloc()
    torch.ops.inductor.resize_storage_bytes_(x, 0)
    assert x.untyped_storage().nbytes() == 0 and _alloc() == before - 16
    torch.ops.inductor.resize_storage_bytes_(x, 16)
    assert _alloc() == before
    x.copy_(torch.full((4,), 7.0).to(DEV))
    assert torch.equal(x.cpu(), torch.full((4,), 7.0))
