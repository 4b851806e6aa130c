"""nki.isa (current dialect, dst first): numerics of every instruction family vs numpy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from torchneuron import nki
from torchneuron.nki import isa as nisa
from torchneuron.nki import language as nl


def _run(body, *arrays, out_shape, out_dtype=np.float32):
    """Run ``body(out_hbm, *tiles)`` inside a kernel that loads ``arrays`` into SBUF."""

    @nki.jit
    def kernel(*xs):
        out = nl.ndarray(out_shape, out_dtype, buffer=nl.shared_hbm)
        tiles = [nl.load(x) for x in xs]
        body(out, *tiles)
        return out

    return kernel(*arrays)


def _store(out, t):
    if t.buffer is nl.psum:
        s = nl.ndarray(t.shape, out.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(s, t)
        t = s
    nisa.dma_copy(out, t)


def test_nc_matmul_accumulates_in_fp32_psum(rng):
    a = rng.standard_normal((256, 128)).astype(ml_dtypes.bfloat16)  # [K, M] stationary layout
    b = rng.standard_normal((256, 512)).astype(ml_dtypes.bfloat16)  # [K, N]

    @nki.jit
    def kernel(a, b):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(2):
            ta = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.sbuf)
            tb = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)
            nisa.dma_copy(ta, a[k * 128 : (k + 1) * 128, :])
            nisa.dma_copy(tb, b[k * 128 : (k + 1) * 128, :])
            nisa.nc_matmul(acc, ta, tb)  # first write overwrites, then accumulates
        _store(out, acc)
        return out

    ref = a.astype(np.float32).T @ b.astype(np.float32)
    np.testing.assert_allclose(kernel(a, b), ref, rtol=1e-5, atol=1e-4)


def test_nc_matmul_explicit_accumulate_flags(rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 32)).astype(np.float32)

    def body(out, ta, tb):
        acc = nl.ndarray((64, 32), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, ta, tb, accumulate=False)
        nisa.nc_matmul(acc, ta, tb, accumulate=True)
        nisa.nc_matmul(acc, ta, tb, accumulate=True)
        _store(out, acc)

    np.testing.assert_allclose(
        _run(body, a, b, out_shape=(64, 32)), 3 * a.T @ b, rtol=1e-4, atol=1e-4
    )


def test_nc_matmul_group_closes_after_read(rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 32)).astype(np.float32)

    def body(out, ta, tb):
        acc = nl.ndarray((64, 32), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, ta, tb)
        nisa.nc_matmul(acc, ta, tb)
        first = nl.ndarray((64, 32), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(first, acc)  # reading the result closes the group
        nisa.nc_matmul(acc, ta, tb)  # ... so this one overwrites
        _store(out, acc)

    np.testing.assert_allclose(_run(body, a, b, out_shape=(64, 32)), a.T @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("engine", [nisa.engine.tensor, nisa.engine.vector])
def test_nc_transpose(engine, rng):
    n = 96 if engine is nisa.engine.tensor else 32
    x = rng.standard_normal((n, n // 2)).astype(np.float32)

    def body(out, t):
        buf = nl.psum if engine is nisa.engine.tensor else nl.sbuf
        d = nl.ndarray((n // 2, n), nl.float32, buffer=buf)
        nisa.nc_transpose(d, t, engine=engine)
        _store(out, d)

    np.testing.assert_array_equal(_run(body, x, out_shape=(n // 2, n)), x.T)


def test_activation_scale_bias_and_reduce(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    bias = rng.standard_normal((128, 1)).astype(np.float32)

    @nki.jit
    def kernel(x, bias):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        red = nl.ndarray((128, 1), x.dtype, buffer=nl.shared_hbm)
        t, b = nl.load(x), nl.load(bias)
        y = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(y, nl.exp, t, bias=b, scale=0.5, reduce_op=nl.add, reduce_res=r)
        nisa.dma_copy(out, y)
        nisa.dma_copy(red, r)
        return out, red

    out, red = kernel(x, bias)
    ref = np.exp(x * 0.5 + bias)
    np.testing.assert_allclose(out, ref, rtol=1e-5)
    np.testing.assert_allclose(red, ref.sum(1, keepdims=True), rtol=1e-5)


def test_activation_reduce_and_numpy_ops(rng):
    x = rng.standard_normal((64, 32)).astype(np.float32)

    def body(out, t):
        y = nl.ndarray(t.shape, nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((64, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(y, np.tanh, t, reduce_op=np.add, reduce_res=r)
        nisa.dma_copy(out, r)

    np.testing.assert_allclose(
        _run(body, x, out_shape=(64, 1)), np.tanh(x).sum(1, keepdims=True), rtol=1e-5
    )


def test_tensor_tensor_scalar_and_scalar_tensor_tensor(rng):
    a = rng.uniform(1, 2, (128, 64)).astype(np.float32)
    b = rng.uniform(1, 2, (128, 64)).astype(np.float32)
    v = rng.uniform(1, 2, (128, 1)).astype(np.float32)

    @nki.jit
    def kernel(a, b, v):
        outs = [nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm) for _ in range(4)]
        ta, tb, tv = nl.load(a), nl.load(b), nl.load(v)
        ys = [nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf) for _ in range(4)]
        nisa.tensor_tensor(ys[0], ta, tb, op=nl.subtract)
        nisa.tensor_scalar(
            ys[1], ta, nl.multiply, tv, op1=nl.subtract, operand1=0.25, reverse1=True
        )
        nisa.tensor_scalar(ys[2], ta, np.divide, 3.0, reverse0=True)
        nisa.scalar_tensor_tensor(ys[3], ta, nl.add, tv, nl.multiply, tb)
        for o, y in zip(outs, ys, strict=True):
            nisa.dma_copy(o, y)
        return tuple(outs)

    r0, r1, r2, r3 = kernel(a, b, v)
    np.testing.assert_allclose(r0, a - b, rtol=1e-6)
    np.testing.assert_allclose(r1, 0.25 - a * v, rtol=1e-5)
    np.testing.assert_allclose(r2, 3.0 / a, rtol=1e-6)
    np.testing.assert_allclose(r3, (a + v) * b, rtol=1e-6)


@pytest.mark.parametrize("op,ref", [(nl.add, np.sum), (nl.max, np.max), (nl.minimum, np.min)])
def test_tensor_reduce(op, ref, rng):
    x = rng.standard_normal((128, 4, 16)).astype(np.float32)

    def body(out, t):
        r = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(r, op, t, axis=(1, 2), negate=True, keepdims=True)
        nisa.dma_copy(out, r)

    np.testing.assert_allclose(
        _run(body, x, out_shape=(128, 1)), -ref(x, axis=(1, 2))[:, None], rtol=1e-5
    )


def test_tensor_partition_reduce(rng):
    x = rng.standard_normal((64, 16)).astype(np.float32)

    def body(out, t):
        r = nl.ndarray((1, 16), nl.float32, buffer=nl.sbuf)
        nisa.tensor_partition_reduce(r, nl.add, t)
        nisa.dma_copy(out, r)

    np.testing.assert_allclose(_run(body, x, out_shape=(1, 16)), x.sum(0, keepdims=True), rtol=1e-5)


def test_tensor_copy_memset_reciprocal_cast(rng):
    x = rng.uniform(1, 4, (32, 8)).astype(np.float32)

    @nki.jit
    def kernel(x):
        o1 = nl.ndarray(x.shape, nl.bfloat16, buffer=nl.shared_hbm)
        o2 = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        o3 = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        c = nl.ndarray(x.shape, nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(c, t, engine=nisa.engine.scalar)
        m = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.memset(m, 7.0)
        r = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(r, t)
        nisa.dma_copy(o1, c)
        nisa.dma_copy(o2, m)
        nisa.dma_copy(o3, r)
        return o1, o2, o3

    o1, o2, o3 = kernel(x)
    np.testing.assert_array_equal(o1, x.astype(ml_dtypes.bfloat16))
    assert (o2 == 7).all()
    np.testing.assert_allclose(o3, 1 / x, rtol=1e-6)


def test_iota_and_affine_select():
    x = np.arange(128 * 128, dtype=np.float32).reshape(128, 128)

    @nki.jit
    def kernel(x):
        o1 = nl.ndarray((128, 4, 8), nl.int32, buffer=nl.shared_hbm)
        o2 = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
        o3 = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
        io = nl.ndarray((128, 4, 8), nl.int32, buffer=nl.sbuf)
        nisa.iota(io, [[10, 4], [1, 8]], offset=3, channel_multiplier=100)
        nisa.dma_copy(o1, io)
        t = nl.load(x)
        causal = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        # keep where p - f >= 0 (lower triangle), NKI 0.3 argument order
        nisa.affine_select(causal, [[-1, 128]], 1, t, -1.0, cmp_op=nl.greater_equal)
        nisa.dma_copy(o2, causal)
        # the earlier order: (dst, pattern, offset, channel_multiplier, on_true, on_false, cmp_op)
        upper = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        nisa.affine_select(upper, [[1, 128]], 0, -1, t, 0.0, nl.greater_equal)
        nisa.dma_copy(o3, upper)
        return o1, o2, o3

    o1, o2, o3 = kernel(x)
    p, i, j = np.meshgrid(np.arange(128), np.arange(4), np.arange(8), indexing="ij")
    np.testing.assert_array_equal(o1, 3 + 100 * p + 10 * i + j)
    lower = np.tril(np.ones((128, 128), bool))
    np.testing.assert_array_equal(o2, np.where(lower, x, -1.0))
    np.testing.assert_array_equal(o3, np.where(np.triu(np.ones((128, 128), bool)), x, 0.0))


def test_bn_stats_and_aggr(rng):
    x = rng.standard_normal((128, 1024)).astype(np.float32) * 3 + 1

    def body(out, t):
        stats = nl.ndarray((128, 12), nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(2):
            nisa.bn_stats(stats[:, i * 6 : (i + 1) * 6], t[:, i * 512 : (i + 1) * 512])
        mv = nl.ndarray((128, 2), nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(mv, stats)
        nisa.dma_copy(out, mv)

    got = _run(body, x, out_shape=(128, 2))
    np.testing.assert_allclose(got[:, 0], x.mean(1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[:, 1], x.var(1), rtol=1e-4)


def test_dma_copy_between_hbm_sbuf_and_hbm(rng):
    x = rng.standard_normal((256, 32)).astype(np.float32)

    @nki.jit
    def kernel(x):
        out = nl.ndarray((256, 32), nl.float32, buffer=nl.shared_hbm)
        scratch = nl.ndarray((256, 32), nl.float32, buffer=nl.hbm)
        nisa.dma_copy(scratch, x)  # HBM -> HBM
        for i in nl.affine_range(2):
            t = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(t, scratch[i * 128 : (i + 1) * 128, :])
            u = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(u, t)  # SBUF -> SBUF
            nisa.dma_copy(out[i * 128 : (i + 1) * 128, :], u)
        return out

    np.testing.assert_array_equal(kernel(x), x)


def test_max8_and_find_index8(rng):
    x = rng.permutation(128 * 64).reshape(128, 64).astype(np.float32)

    @nki.jit
    def kernel(x):
        o1 = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
        o2 = nl.ndarray((128, 8), nl.uint32, buffer=nl.shared_hbm)
        t = nl.load(x)
        top = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        nisa.max8(top, t)
        idx = nl.ndarray((128, 8), nl.uint32, buffer=nl.sbuf)
        nisa.nc_find_index8(idx, t, top)
        nisa.dma_copy(o1, top)
        nisa.dma_copy(o2, idx)
        return o1, o2

    top, idx = kernel(x)
    order = np.argsort(-x, axis=1)[:, :8]
    np.testing.assert_array_equal(top, np.take_along_axis(x, order, 1))
    np.testing.assert_array_equal(idx, order)


def test_enums_and_nc_version():
    assert nisa.get_nc_version() in (nisa.nc_version.gen3, nisa.nc_version.gen4)
    assert nisa.reduce_cmd.reset_reduce.value == "reset_reduce"
    assert nisa.engine.vector is nisa.vector_engine
