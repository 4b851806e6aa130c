"""Whole kernels: a tiled matmul and a softmax in both dialects, a layer norm, dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from torchneuron import nki
from torchneuron.nki import isa as nisa
from torchneuron.nki import language as nl
from torchneuron.nki import legacy as lisa


@nki.jit
def tiled_matmul(lhsT, rhs):
    """out[M, N] = lhsT.T @ rhs, programs split N; fp32 PSUM accumulation over K tiles."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
    n_per = N // nl.num_programs(0)
    n0 = nl.program_id(0) * n_per
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(n_per // 512):
            acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                a = nl.ndarray((128, 128), lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((128, 512), rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(a, lhsT[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                nisa.dma_copy(b, rhs[k * 128 : (k + 1) * 128, n0 + n * 512 : n0 + (n + 1) * 512])
                nisa.nc_matmul(acc, a, b)
            res = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(res, acc)
            nisa.dma_copy(out[m * 128 : (m + 1) * 128, n0 + n * 512 : n0 + (n + 1) * 512], res)
    return out


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn])
def test_tiled_matmul(dtype, rng):
    a = (rng.standard_normal((384, 256)) * 0.5).astype(dtype)
    b = (rng.standard_normal((384, 2048)) * 0.5).astype(dtype)
    got = tiled_matmul[2](a, b)
    ref = a.astype(np.float32).T @ b.astype(np.float32)  # operands exact, fp32 accumulation
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)


@nki.jit
def softmax_kernel(x):
    """Row softmax with the current dialect: max, exp(x - max) with a fused row sum, scale."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    rows, cols = x.shape
    for i in nl.affine_range(rows // 128):
        t = nl.ndarray((128, cols), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[i * 128 : (i + 1) * 128, :])
        neg_max = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(neg_max, nl.max, t, axis=1, negate=True, keepdims=True)
        e = nl.ndarray((128, cols), nl.float32, buffer=nl.sbuf)
        s = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(e, nl.exp, t, bias=neg_max, reduce_op=nl.add, reduce_res=s)
        inv = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(inv, s)
        y = nl.ndarray((128, cols), x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(y, e, nl.multiply, inv)
        nisa.dma_copy(out[i * 128 : (i + 1) * 128, :], y)
    return out


@nki.jit
def softmax_legacy(x):
    """The same softmax written in the legacy style (tiles returned, arange indexing)."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    rows, cols = x.shape
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(cols)[None, :]
    for i in nl.affine_range((rows + 127) // 128):
        valid = i * 128 + i_p < rows
        t = nl.load(x[i * 128 + i_p, i_f], mask=valid)
        m = nl.max(t, axis=1, keepdims=True, mask=valid)
        e = lisa.activation(op=nl.exp, data=t, bias=-1.0 * m, mask=valid)
        s = nl.sum(e, axis=1, keepdims=True, mask=valid)
        nl.store(out[i * 128 + i_p, i_f], value=e / s, mask=valid)
    return out


def _softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def test_softmax_current_dialect(rng):
    x = rng.standard_normal((256, 384)).astype(np.float32) * 4
    np.testing.assert_allclose(softmax_kernel(x), _softmax(x), rtol=1e-5, atol=1e-7)


def test_softmax_legacy_dialect_with_ragged_rows(rng):
    x = rng.standard_normal((200, 96)).astype(np.float32) * 4
    np.testing.assert_allclose(softmax_legacy(x), _softmax(x), rtol=1e-5, atol=1e-7)


def test_softmax_bf16_rounds_like_hardware(rng):
    x = rng.standard_normal((128, 256)).astype(ml_dtypes.bfloat16)
    got = softmax_kernel(x)
    assert got.dtype == ml_dtypes.bfloat16
    ref = _softmax(x.astype(np.float32)).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_allclose(got.astype(np.float32), ref, rtol=1e-2, atol=1e-4)


@nki.jit
def layernorm(x, gamma):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    g = nl.load(gamma)  # [1, D], broadcast across partitions
    stats = nl.ndarray((128, 6 * (x.shape[1] // 512)), nl.float32, buffer=nl.sbuf)
    for j in nl.affine_range(x.shape[1] // 512):
        nisa.bn_stats(stats[:, j * 6 : (j + 1) * 6], t[:, j * 512 : (j + 1) * 512])
    mv = nl.ndarray((128, 2), nl.float32, buffer=nl.sbuf)
    nisa.bn_aggr(mv, stats)
    rstd = nl.rsqrt(nl.add(mv[:, 1:2], 1e-5))
    y = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(y, t, nl.subtract, mv[:, 0:1], op1=nl.multiply, operand1=rstd)
    nl.store(out, nl.multiply(y, nl.broadcast_to(g, x.shape)))
    return out


def test_layernorm_with_bn_stats(rng):
    x = rng.standard_normal((128, 1024)).astype(np.float32) * 2 + 3
    gamma = rng.standard_normal((1, 1024)).astype(np.float32)
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * gamma
    np.testing.assert_allclose(layernorm(x, gamma), ref, rtol=1e-4, atol=1e-4)


def test_bf16_and_fp8_rounding_on_write(rng):
    x = rng.standard_normal((64, 64)).astype(np.float32)

    @nki.jit
    def kernel(x):
        o1 = nl.ndarray(x.shape, nl.bfloat16, buffer=nl.shared_hbm)
        o2 = nl.ndarray(x.shape, nl.float8_e4m3fn, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(o1, nl.copy(t, dtype=nl.bfloat16))
        nl.store(o2, nl.copy(t, dtype=nl.float8_e4m3fn))
        return o1, o2

    o1, o2 = kernel(x)
    assert o1.dtype == ml_dtypes.bfloat16 and o2.dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(o1, x.astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(o2, x.astype(ml_dtypes.float8_e4m3fn))
