"""Indirect DMA: HBM tensors indexed by SBUF index tiles (gather, scatter-add), oob_mode.skip,
the rules around it and the timing dependency on the index tile."""

from __future__ import annotations

import numpy as np
import pytest

from torchneuron import nki
from torchneuron.nki import NKIRuleError
from torchneuron.nki import isa as nisa
from torchneuron.nki import language as nl


def _idx_tile(idx):
    t = nl.ndarray(idx.shape, nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(t, idx)
    return t


@nki.jit
def gather_rows(x, idx, skip=False):
    n = idx.shape[0]
    out = nl.ndarray((n, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
    it = _idx_tile(idx)
    t = nl.zeros((n, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x[it, :], oob_mode=nisa.oob_mode.skip if skip else nisa.oob_mode.error)
    nisa.dma_copy(out, t)
    return out


def test_gather_rows(rng):
    x = rng.standard_normal((50, 24)).astype(np.float32)
    idx = rng.integers(0, 50, size=(128, 1)).astype(np.int32)
    out, prof = nki.simulate(gather_rows, return_profile=True)(x, idx)
    np.testing.assert_array_equal(out, x[idx[:, 0]])
    load_idx, gather = prof.records[0], prof.records[2]
    assert gather.name == "nisa.dma_copy" and gather.start >= load_idx.end  # waits for its indices


def test_out_of_bounds_index_is_an_error_unless_skipped(rng):
    x = rng.standard_normal((10, 8)).astype(np.float32)
    idx = np.array([[3], [-1], [9], [10]], np.int32)
    with pytest.raises(NKIRuleError) as e:
        gather_rows(x, idx)
    assert e.value.rule == "out-of-bounds"
    out = gather_rows(x, idx, True)
    np.testing.assert_array_equal(out[[0, 2]], x[[3, 9]])
    np.testing.assert_array_equal(out[[1, 3]], 0)  # skipped rows keep the zeros


@nki.jit
def scatter_add(x, idx, rows):
    out = nl.ndarray((rows, x.shape[1]), nl.float32, buffer=nl.shared_hbm)
    z = nl.zeros((rows, x.shape[1]), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(out, z)
    it = _idx_tile(idx)
    t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    nisa.dma_copy(out[it, :], t, dst_rmw_op=nl.add)
    return out


def test_scatter_add_accumulates_duplicates(rng):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    idx = np.array([[0], [2], [0], [3], [2], [0]], np.int32)
    ref = np.zeros((4, 5), np.float32)
    np.add.at(ref, idx[:, 0], x)
    np.testing.assert_allclose(scatter_add(x, idx, 4), ref, rtol=1e-6)


def test_index_rules(rng):
    x = rng.standard_normal((8, 4)).astype(np.float32)

    def float_index(x):
        it = nl.zeros((4, 1), nl.float32, buffer=nl.sbuf)
        nl.load(x[it, :])

    def sbuf_source(x):
        it = nl.zeros((4, 1), nl.int32, buffer=nl.sbuf)
        t = nl.load(x)
        nisa.tensor_copy(nl.ndarray((4, 4), nl.float32, buffer=nl.sbuf), t[it, :])

    for kernel, rule in ((float_index, "dtype"), (sbuf_source, "unsupported")):
        with pytest.raises(NKIRuleError) as e:
            nki.simulate(kernel)(x)
        assert e.value.rule == rule
