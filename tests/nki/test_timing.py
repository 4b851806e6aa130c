"""The timing model: instruction costs from the target table, engine parallelism,
dependencies, DMA queues, LNC=2 grids, the profile API and a large matmul's estimate."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from torchneuron import nki
from torchneuron.kernels.matmul import matmul_kernel
from torchneuron.nki import isa as nisa
from torchneuron.nki import language as nl
from torchneuron.runtime.target import TARGETS

TRN2 = TARGETS["trn2"]


def _profile(kernel, *arrays, target="trn2", grid=None, lnc=None):
    k = nki.jit(kernel)
    if grid is not None:
        k = k[grid]
    _, prof = nki.simulate(k, target=target, return_profile=True, lnc=lnc)(*arrays)
    return prof


def _sb(shape, dtype=nl.bfloat16):
    return nl.ndarray(shape, dtype, buffer=nl.sbuf)


def _one(prof, name):
    recs = [r for r in prof.records if r.name == name]
    assert len(recs) == 1, [r.name for r in prof.records]
    return recs[0]


@pytest.mark.parametrize(
    "n,dtype,cycles", [(512, nl.bfloat16, 512), (32, nl.bfloat16, 64), (512, nl.float32, 2048)]
)
def test_matmul_cost(n, dtype, cycles):
    def kernel():
        acc = nl.ndarray((128, n), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, _sb((128, 128), dtype), _sb((128, n), dtype))

    r = _one(_profile(kernel), "nisa.nc_matmul")
    assert r.engine == "tensor"
    assert r.duration == pytest.approx(cycles / TRN2.clocks.tensor_hz)
    assert r.flops == 2 * 128 * 128 * n


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_vector_and_scalar_costs(target):
    t = TARGETS[target]

    def kernel():
        a, b, c = _sb((128, 1000)), _sb((128, 1000)), _sb((128, 1000))
        nisa.tensor_tensor(c, a, b, op=nl.add)
        nisa.activation(c, nl.exp, a)
        nisa.iota(_sb((128, 1000), nl.int32), [[1, 1000]])

    prof = _profile(kernel, target=target)
    vec = _one(prof, "nisa.tensor_tensor")
    act = _one(prof, "nisa.activation")
    gps = _one(prof, "nisa.iota")
    assert vec.duration == pytest.approx(
        (2 * 1000 + t.nki_costs.vector_fixed_cycles) / t.clocks.vector_hz
    )
    assert act.duration == pytest.approx(1000 / t.clocks.scalar_hz)
    assert gps.duration == pytest.approx(
        (1000 + t.nki_costs.gpsimd_fixed_cycles) / t.clocks.gpsimd_hz
    )


def test_dma_cost_and_queue_parallelism():
    x = np.zeros((128, 512), np.float32)

    def kernel(x):
        for _ in nl.affine_range(32):  # 32 independent loads on 16 queues: two waves
            nl.load(x)

    prof = _profile(kernel, x)
    per_queue_bw = TRN2.hbm_bandwidth / TRN2.lnc / TRN2.dma_engines_per_core
    one = TRN2.dma_fixed_cost_s + x.nbytes / per_queue_bw
    loads = [r for r in prof.records if r.engine == "dma"]
    assert all(r.duration == pytest.approx(one) for r in loads)
    assert len({r.queue for r in loads}) == TRN2.dma_engines_per_core
    assert prof.duration == pytest.approx(2 * one)
    assert prof.total_bytes == 32 * x.nbytes


def test_engines_run_in_parallel_but_dependencies_serialise():
    def independent():
        acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, _sb((128, 128)), _sb((128, 512)))
        nisa.activation(_sb((128, 2000)), nl.exp, _sb((128, 2000)))
        nisa.tensor_tensor(_sb((128, 2000)), _sb((128, 2000)), _sb((128, 2000)), op=nl.add)

    prof = _profile(independent)
    durations = [r.duration for r in prof.records]
    assert all(r.start == 0 for r in prof.records)
    assert prof.duration == pytest.approx(max(durations))

    def chain():
        a, b, c = _sb((128, 2000)), _sb((128, 2000)), _sb((128, 2000))
        nisa.activation(b, nl.exp, a)  # writes b
        nisa.tensor_tensor(c, b, a, op=nl.add)  # reads b: waits
        nisa.activation(a, nl.exp, c)  # writes a: waits for the read of a (WAR) and c (RAW)

    prof = _profile(chain)
    r0, r1, r2 = prof.records
    assert r1.start == pytest.approx(r0.end)
    assert r2.start == pytest.approx(r1.end)
    assert prof.duration == pytest.approx(sum(r.duration for r in prof.records))


def test_disjoint_slices_do_not_wait_on_each_other():
    def kernel():
        big = _sb((128, 4, 512))
        src = _sb((128, 512))
        nisa.activation(big[:, 0, :], nl.exp, src)
        nisa.tensor_tensor(big[:, 1, :], src, src, op=nl.add)  # another slice: parallel
        nisa.tensor_copy(src, big[:, 0, :], engine=nisa.engine.gpsimd)  # reads slice 0: waits

    prof = _profile(kernel)
    act, vec, gps = prof.records
    assert vec.start == 0
    assert gps.start == pytest.approx(max(act.end, vec.end))  # WAR on src too


def test_instructions_on_one_engine_serialise():
    def kernel():
        for _ in nl.affine_range(3):
            nisa.tensor_tensor(_sb((128, 100)), _sb((128, 100)), _sb((128, 100)), op=nl.add)

    prof = _profile(kernel)
    assert [r.start for r in prof.records] == pytest.approx(
        [0, prof.records[0].end, prof.records[1].end]
    )


def _two_program_kernel():
    acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
    a, b = _sb((128, 128)), _sb((128, 512))
    for _ in nl.affine_range(64):
        nisa.nc_matmul(acc, a, b)


def test_lnc2_spreads_a_grid_dimension_on_two_cores():
    one = _profile(_two_program_kernel, grid=1)
    two_cores = _profile(_two_program_kernel, grid=2)
    one_core = _profile(_two_program_kernel, grid=2, lnc=1)
    assert {r.core for r in two_cores.records} == {0, 1}
    assert two_cores.duration == pytest.approx(one.duration)
    assert one_core.duration == pytest.approx(2 * one.duration)
    assert {r.core for r in one_core.records} == {0}


def test_profile_api_and_last_profile():
    x = np.ones((128, 64), np.float32)

    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.exp(nl.load(x)))
        return out

    kernel(x)
    prof = nki.last_profile()
    assert [r.engine for r in prof.records] == ["dma", "scalar", "dma"]
    assert [r.name for r in prof.records] == ["nl.load", "nl.exp", "nl.store"]
    assert prof.records[1].start == pytest.approx(prof.records[0].end)
    assert all(r.location.endswith(".py:" + r.location.rsplit(":", 1)[1]) for r in prof.records)
    assert "test_timing.py" in prof.records[1].location
    d = prof.to_dict()
    assert d["duration_s"] == prof.duration > 0
    assert {"name", "engine", "start", "end", "flops", "bytes"} <= set(d["instructions"][0])
    summary = prof.summary()
    for engine in ("tensor", "vector", "scalar", "gpsimd", "dma"):
        assert engine in summary
    assert prof.engine_busy()["scalar"] == pytest.approx(prof.records[1].duration)
    assert prof.instruction_counts() == {"nl.load": 1, "nl.exp": 1, "nl.store": 1}


def test_benchmark_decorator_reports_estimated_latency():
    x = np.ones((128, 64), np.float32)

    @nki.benchmark(warmup=1, iters=2)
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x))
        return out

    kernel(x)
    us = kernel.benchmark_result.nc_latency.get_latency_percentile(50)
    assert us == pytest.approx(nki.last_profile().duration * 1e6)


def test_large_bf16_matmul_estimate_is_near_tensor_engine_peak():
    s = 4096
    rng = np.random.default_rng(0)
    a = rng.standard_normal((s, s), dtype=np.float32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((s, s), dtype=np.float32).astype(ml_dtypes.bfloat16)
    out, prof = nki.simulate(matmul_kernel[TRN2.lnc], target="trn2", return_profile=True)(a, b)
    flops = 2.0 * s**3
    assert prof.total_flops == flops
    ideal_published = flops / TRN2.peak_flops("bf16")  # one logical core, published peak
    ideal_clock = flops / TRN2.tensor_engine_peak_flops("bf16")  # PE array x tensor clock
    assert ideal_published <= ideal_clock <= prof.duration
    assert prof.duration <= 1.10 * ideal_published, prof.summary()
    assert prof.duration <= 1.05 * ideal_clock, prof.summary()
    assert prof.engine_utilization()["tensor"] > 0.9
    # and the numbers are right: spot-check a block of rows against numpy
    rows = slice(2048, 2176)
    ref = (
        a[rows].astype(np.float32).T
        if False
        else a[:, rows].astype(np.float32).T @ b.astype(np.float32)
    )
    np.testing.assert_allclose(out[rows].astype(np.float32), ref, rtol=2e-2, atol=0.5)
