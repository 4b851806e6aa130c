"""nki.language: creation, data movement, element-wise math, reductions, SPMD helpers."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from torchneuron import nki
from torchneuron.nki import language as nl

UNARY = {
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "reciprocal": lambda x: 1 / x,
    "abs": np.abs,
    "negative": np.negative,
    "square": np.square,
    "sin": np.sin,
    "cos": np.cos,
    "arctan": np.arctan,
    "sign": np.sign,
    "floor": np.floor,
    "ceil": np.ceil,
    "softplus": lambda x: np.log1p(np.exp(x)),
}

BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "power": np.power,
    "greater": lambda a, b: (a > b).astype(np.float32),
    "less_equal": lambda a, b: (a <= b).astype(np.float32),
    "equal": lambda a, b: (a == b).astype(np.float32),
}


def _unary_kernel(name):
    fn = getattr(nl, name)

    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out, fn(t))
        return out

    return kernel


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_numpy(name, rng):
    x = rng.uniform(0.1, 2.0, size=(128, 64)).astype(np.float32)
    if name in (
        "relu",
        "abs",
        "negative",
        "sign",
        "floor",
        "ceil",
        "gelu",
        "silu",
        "sin",
        "cos",
        "arctan",
    ):
        x = x - 1.0
    got = _unary_kernel(name)(x)
    # gelu is exact (erf) in the simulator; the tanh form differs by < 1e-3
    tol = 2e-3 if name == "gelu" else 1e-5
    np.testing.assert_allclose(got, UNARY[name](x), rtol=tol, atol=tol)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_tile_tile_and_tile_scalar(name, rng):
    a = rng.uniform(0.5, 2.0, size=(128, 32)).astype(np.float32)
    b = rng.uniform(0.5, 2.0, size=(128, 32)).astype(np.float32)
    fn = getattr(nl, name)

    @nki.jit
    def kernel(a, b):
        o1 = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        ta, tb = nl.load(a), nl.load(b)
        nl.store(o1, fn(ta, tb))
        nl.store(o2, fn(ta, 1.5))
        return o1, o2

    o1, o2 = kernel(a, b)
    np.testing.assert_allclose(o1, BINARY[name](a, b), rtol=1e-6)
    np.testing.assert_allclose(o2, BINARY[name](a, np.float32(1.5)), rtol=1e-6)


def test_operators_broadcast_and_where(rng):
    a = rng.standard_normal((128, 16)).astype(np.float32)
    col = rng.standard_normal((128, 1)).astype(np.float32)
    row = rng.standard_normal((1, 16)).astype(np.float32)

    @nki.jit
    def kernel(a, col, row):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        ta, tc, tr = nl.load(a), nl.load(col), nl.load(row)
        y = (ta + tc) * tr - 1.0
        y = nl.where(ta > 0, y, -ta)
        nl.store(out, y)
        return out

    y = (a + col) * row - 1.0
    np.testing.assert_allclose(kernel(a, col, row), np.where(a > 0, y, -a), rtol=1e-6)


@pytest.mark.parametrize(
    "fn,ref",
    [("sum", np.sum), ("max", np.max), ("min", np.min), ("mean", np.mean), ("prod", np.prod)],
)
@pytest.mark.parametrize(
    "shape,axis,keepdims",
    [
        ((64, 8), 1, False),
        ((64, 4, 8), 2, True),
        ((64, 4, 8), (1, 2), False),
        ((64, 4, 8), -1, True),
    ],
)
def test_reductions(fn, ref, shape, axis, keepdims, rng):
    x = rng.uniform(0.5, 1.5, size=shape).astype(np.float32)
    f = getattr(nl, fn)

    @nki.jit
    def kernel(x):
        t = nl.load(x)
        r = f(t, axis=axis, keepdims=keepdims)
        out = nl.ndarray(r.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, r)
        return out

    np.testing.assert_allclose(kernel(x), ref(x, axis=axis, keepdims=keepdims), rtol=1e-5)


def test_creation_ops_and_nan_fill():
    @nki.jit
    def kernel():
        z = nl.zeros((4, 8), nl.float32)
        o = nl.ones((4, 8), nl.bfloat16)
        f = nl.full((4, 8), 2.5, nl.float32)
        e = nl.ndarray((4, 8), nl.float32, buffer=nl.sbuf)  # never written
        outs = [nl.ndarray((4, 8), nl.float32, buffer=nl.shared_hbm) for _ in range(4)]
        for dst, src in zip(outs, (z, o, f, e), strict=True):
            nl.store(dst, nl.copy(src, dtype=nl.float32))
        return tuple(outs)

    z, o, f, e = kernel()
    assert (z == 0).all() and (o == 1).all() and (f == 2.5).all()
    assert np.isnan(e).all(), "new allocations are NaN-filled so reads-before-writes show"


def test_load_store_casts_and_slices(rng):
    x = rng.standard_normal((256, 64)).astype(np.float32)

    @nki.jit
    def kernel(x):
        out = nl.ndarray((128, 32), nl.bfloat16, buffer=nl.shared_hbm)
        t = nl.load(x[128:256, 0:64:2], dtype=nl.bfloat16)
        nl.store(out, t)
        return out

    got = kernel(x)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got, x[128:256, 0:64:2].astype(ml_dtypes.bfloat16))


def test_matmul_and_transpose(rng):
    a = rng.standard_normal((64, 128)).astype(np.float32)  # [M, K]
    aT = np.ascontiguousarray(a.T)
    b = rng.standard_normal((128, 256)).astype(np.float32)  # [K, N]

    @nki.jit
    def kernel(a, aT, b):
        o1 = nl.ndarray((64, 256), nl.float32, buffer=nl.shared_hbm)
        o2 = nl.ndarray((64, 256), nl.float32, buffer=nl.shared_hbm)
        o3 = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        ta, taT, tb = nl.load(a), nl.load(aT), nl.load(b)
        nl.store(o1, nl.copy(nl.matmul(taT, tb, transpose_x=True)))
        nl.store(o2, nl.copy(nl.matmul(ta, tb)))
        nl.store(o3, nl.transpose(ta))
        return o1, o2, o3

    o1, o2, o3 = kernel(a, aT, b)
    np.testing.assert_allclose(o1, a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(o2, a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(o3, a.T)


def test_spmd_program_ids_and_loops(rng):
    x = rng.standard_normal((4 * 128, 8)).astype(np.float32)

    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        i, j = nl.program_id(0), nl.program_id(1)
        assert nl.num_programs() == 4 and nl.num_programs(1) == 2 and nl.program_ndim() == 2
        row = (i * nl.num_programs(1) + j) * 128
        t = nl.load(x[row : row + 128, :])
        acc = nl.zeros((128, 8), nl.float32)
        for _ in nl.sequential_range(3):
            acc = nl.add(acc, t)
        for _ in nl.static_range(1):
            acc = nl.add(acc, float(row))
        nl.store(out[row : row + 128, :], acc)
        return out

    got = kernel[2, 2](x)
    expect = 3 * x + np.repeat(np.arange(4) * 128.0, 128)[:, None]
    np.testing.assert_allclose(got, expect, rtol=1e-6)


def test_device_print(capsys):
    @nki.jit
    def kernel(x):
        t = nl.load(x)
        nl.device_print("tile:", t)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    kernel(np.arange(4, dtype=np.float32).reshape(2, 2))
    assert "tile: [[0. 1.]\n [2. 3.]]" in capsys.readouterr().out


def test_tile_size_constants_come_from_target():
    from torchneuron.runtime.target import target_from_env

    t = target_from_env()
    assert nl.tile_size.pmax == t.sbuf_partitions == 128
    assert nl.tile_size.psum_fmax == t.psum_bank_bytes_per_partition // 4 == 512
    assert nl.tile_size.gemm_moving_fmax == 512 and nl.tile_size.gemm_stationary_fmax == 128


def test_kernel_writes_into_given_output_array(rng):
    x = rng.standard_normal((128, 16)).astype(np.float32)
    y = np.zeros_like(x)

    @nki.jit
    def kernel(x, y):
        nl.store(y, nl.exp(nl.load(x)))

    nki.simulate(kernel)(x, y)
    np.testing.assert_allclose(y, np.exp(x), rtol=1e-6)


def test_softmax_helper(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)

    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.softmax(nl.load(x), axis=1))
        return out

    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(kernel(x), e / e.sum(1, keepdims=True), rtol=1e-5)


def test_reshape_load_transpose2d_and_psum_accumulation_with_nl_matmul(rng):
    x = rng.standard_normal((4, 128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 32)).astype(np.float32)

    @nki.jit
    def kernel(x, b):
        o1 = nl.ndarray((64, 512), nl.float32, buffer=nl.shared_hbm)
        o2 = nl.ndarray((64, 32), nl.float32, buffer=nl.shared_hbm)
        flat = x.reshape((512, 64))
        nl.store(o1, nl.load_transpose2d(flat))
        tb = nl.load(b)
        acc = nl.zeros((64, 32), nl.float32, buffer=nl.psum)
        for i in nl.affine_range(4):
            acc += nl.matmul(nl.load(x[i]), tb, transpose_x=True)  # legacy accumulation
        nl.store(o2, acc)
        return o1, o2

    o1, o2 = kernel(x, b)
    np.testing.assert_array_equal(o1, x.reshape(512, 64).T)
    np.testing.assert_allclose(o2, sum(x[i].T @ b for i in range(4)), rtol=1e-4, atol=1e-4)
