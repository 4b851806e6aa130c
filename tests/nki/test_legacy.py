"""The legacy dialect (neuronxcc.nki) and the import aliases that let published kernels run."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from torchneuron import nki
from torchneuron.nki import language as nl
from torchneuron.nki import legacy as lisa


@pytest.fixture
def aliases():
    added = nki.install_aliases()
    yield added
    nki.uninstall_aliases()


def test_aliases_resolve_both_dialects(aliases):
    import neuronxcc.nki as legacy_nki
    import neuronxcc.nki.isa as legacy_isa
    import neuronxcc.nki.language as legacy_nl
    import neuronxcc.nki.typing as nt
    import nki as current_nki
    import nki.isa as current_isa
    import nki.language as current_nl

    assert current_nki is nki and current_isa is nki.isa and current_nl is nl
    assert legacy_isa is lisa and legacy_nki.isa is lisa and legacy_nl is nl
    assert legacy_nki.jit is nki.jit and legacy_nki.simulate_kernel is nki.simulate_kernel
    assert isinstance(nt.tensor[128, 512], type(nt.tensor))
    assert importlib.import_module("nki.typing") is nki.typing


def test_alias_env_var_in_a_fresh_interpreter(tmp_path):
    script = tmp_path / "published_kernel.py"
    script.write_text(
        "import numpy as np\n"
        "from neuronxcc import nki\n"
        "import neuronxcc.nki.language as nl\n"
        "@nki.jit\n"
        "def k(a):\n"
        "    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)\n"
        "    nl.store(out, nl.multiply(nl.load(a), 2.0))\n"
        "    return out\n"
        "x = np.arange(8, dtype=np.float32).reshape(2, 4)\n"
        "import torchneuron.nki\n"
        "print(float(nki.simulate_kernel(k, x).sum()))\n"
    )
    env = dict(os.environ, TORCHNEURON_NKI_ALIAS="1", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    # the alias must exist before `from neuronxcc import nki`: import torchneuron.nki first
    code = f"import torchneuron.nki; exec(open({str(script)!r}).read())"
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("56.0")


def test_legacy_tiled_matmul_with_psum_accumulation(aliases, rng):
    import neuronxcc.nki as lnki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl

    @lnki.jit
    def matmul(lhsT, rhs):
        K, M = lhsT.shape
        _, N = rhs.shape
        result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
        i_k, i_m = nl.mgrid[0:128, 0:128]
        j_k, j_n = nl.mgrid[0:128, 0:512]
        for m in nl.affine_range(M // 128):
            for n in nl.affine_range(N // 512):
                res_psum = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
                for k in nl.affine_range(K // 128):
                    a = nl.load(lhsT[k * 128 + i_k, m * 128 + i_m])
                    b = nl.load(rhs[k * 128 + j_k, n * 512 + j_n])
                    res_psum[...] += nisa.nc_matmul(a, b)
                res = nl.copy(res_psum, dtype=result.dtype)
                nl.store(result[m * 128 + i_k[:, 0:1], n * 512 + j_n[0:1, :]], value=res)
        return result

    a = rng.standard_normal((256, 256)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((256, 1024)).astype(ml_dtypes.bfloat16)
    got = lnki.simulate_kernel(matmul, a, b).astype(np.float32)
    ref = a.astype(np.float32).T @ b.astype(np.float32)
    np.testing.assert_allclose(got, ref, rtol=2e-2, atol=0.1)


def test_legacy_masks_par_dim_and_block_dims(rng):
    x = rng.standard_normal((300, 64)).astype(np.float32)

    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        n = x.shape[0]
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(64)[None, :]
        tiles = nl.ndarray((3, nl.par_dim(128), 64), nl.float32, buffer=nl.sbuf)  # block dim first
        for t in nl.affine_range(3):
            rows = t * 128 + i_p
            tiles[t, i_p, i_f] = nl.load(x[rows, i_f], mask=(rows < n))
            y = nl.relu(tiles[t], mask=(rows < n))
            nl.store(out[rows, i_f], value=y, mask=(rows < n))
        return out

    np.testing.assert_array_equal(kernel(x), np.maximum(x, 0))


def test_legacy_isa_calls_return_tiles(rng):
    x = rng.uniform(1, 2, (128, 64)).astype(np.float32)
    v = rng.uniform(1, 2, (128, 1)).astype(np.float32)

    @nki.jit
    def kernel(x, v):
        outs = [nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm) for _ in range(4)]
        red = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
        mv = nl.ndarray((128, 2), nl.float32, buffer=nl.shared_hbm)
        t, tv = nl.load(x), nl.load(v)
        nl.store(outs[0], lisa.activation(op=nl.exp, data=t, bias=tv, scale=2.0))
        nl.store(outs[1], lisa.tensor_scalar(t, np.multiply, tv, op1=np.add, operand1=1.0))
        nl.store(outs[2], lisa.tensor_tensor(t, t, op=nl.multiply))
        nl.store(
            outs[3], lisa.tensor_copy(lisa.nc_transpose(lisa.tensor_copy(lisa.nc_transpose(t))))
        )
        nl.store(red, lisa.tensor_reduce(nl.max, t, axis=1, keepdims=True))
        nl.store(mv, lisa.bn_aggr(lisa.bn_stats(t)))
        return (*outs, red, mv)

    o0, o1, o2, o3, red, mv = kernel(x, v)
    np.testing.assert_allclose(o0, np.exp(2 * x + v), rtol=1e-5)
    np.testing.assert_allclose(o1, x * v + 1, rtol=1e-6)
    np.testing.assert_allclose(o2, x * x, rtol=1e-6)
    np.testing.assert_array_equal(o3, x)
    np.testing.assert_array_equal(red, x.max(1, keepdims=True))
    np.testing.assert_allclose(mv, np.stack([x.mean(1), x.var(1)], 1), rtol=1e-4)


def test_legacy_iota_affine_select_and_memset():
    x = np.arange(128 * 128, dtype=np.float32).reshape(128, 128)

    @nki.jit
    def kernel(x):
        o1 = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
        o2 = nl.ndarray((128, 16), nl.int32, buffer=nl.shared_hbm)
        o3 = nl.ndarray((128, 16), nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:128]
        t = nl.load(x)
        nl.store(o1, lisa.affine_select(pred=(i_p - i_f >= 0), on_true_tile=t, on_false_value=-1e4))
        j_p, j_f = nl.mgrid[0:128, 0:16]
        nl.store(o2, lisa.iota(j_p * 16 + j_f, dtype=nl.int32))
        nl.store(o3, lisa.memset((128, 16), 3.0, nl.float32))
        return o1, o2, o3

    o1, o2, o3 = kernel(x)
    np.testing.assert_array_equal(o1, np.where(np.tril(np.ones((128, 128))) > 0, x, -1e4))
    np.testing.assert_array_equal(o2, np.arange(128 * 16).reshape(128, 16))
    assert (o3 == 3).all()


def test_legacy_grid_with_spmd_helpers(rng):
    x = rng.standard_normal((512, 32)).astype(np.float32)

    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        i_p, i_f = nl.mgrid[0:128, 0:32]
        t = nl.load(x[i * 128 + i_p, i_f])
        nl.store(out[i * 128 + i_p, i_f], value=t * 2.0)
        return out

    got = nki.simulate_kernel(kernel[nl.spmd_dim(nl.nc(2), 2)], x)
    np.testing.assert_array_equal(got, 2 * x)


def test_current_dialect_only_instruction_is_explained():
    with pytest.raises(AttributeError, match="dst-first"):
        lisa.tensor_scalar_reduce  # noqa: B018 - only the current isa has it
    with pytest.raises(AttributeError):
        lisa.no_such_instruction  # noqa: B018
