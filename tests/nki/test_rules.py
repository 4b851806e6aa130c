"""Every rule the simulator enforces: a kernel that breaks it fails with that rule."""

from __future__ import annotations

import os

import numpy as np
import pytest

from torchneuron import nki
from torchneuron.nki import isa as nisa
from torchneuron.nki import language as nl
from torchneuron.nki.rules import RULES, NKIRuleError

X = np.zeros((128, 512), dtype=np.float32)


def _fails(rule, body, *arrays, grid=None):
    k = nki.jit(body)
    if grid is not None:
        k = k[grid]
    with pytest.raises(NKIRuleError) as info:
        k(*(arrays or (X,)))
    assert info.value.rule == rule, str(info.value)
    assert f"[{rule}]" in str(info.value)
    return info.value


def _sb(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype, buffer=nl.sbuf)


def test_partition_dim_limit():
    e = _fails("partition-dim-limit", lambda x: _sb((256, 4)))
    assert "256 partitions" in str(e)


def test_partition_dim_limit_on_compute_operand():
    def body(x):
        big = nl.ndarray((256, 4), nl.float32, buffer=nl.hbm)
        nl.exp(nl.load(big))

    _fails("partition-dim-limit", body)


def test_psum_tile_size():
    def body(x):
        wide = nl.ndarray((128, 1024), nl.float32, buffer=nl.psum)  # 4 KiB per partition
        nisa.tensor_copy(wide, _sb((128, 1024)))

    e = _fails("psum-tile-size", body)
    assert "2048 B" in str(e)


def test_psum_capacity_bank_count():
    def body(x):
        return [nl.ndarray((128, 512), nl.float32, buffer=nl.psum) for _ in range(9)]

    e = _fails("psum-capacity", body)
    assert "0 of 8" in str(e)


def test_psum_banks_are_released_when_tiles_die():
    @nki.jit
    def body(x):
        for _ in nl.affine_range(32):
            acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
            nisa.memset(acc, 0.0)

    body(X)  # 32 allocations, never more than two alive: no psum-capacity error


def test_sbuf_capacity():
    def body(x):
        a = _sb((128, 40_000))  # 160000 B per partition
        b = _sb((128, 20_000))  # +80000 B > ~207 KiB left to kernels on trn2
        return a, b

    e = _fails("sbuf-capacity", body)
    assert "212376 B" in str(e)


def test_matmul_stationary_size():
    def body(x):
        acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, _sb((128, 256)), _sb((128, 512)))

    _fails("matmul-stationary-size", body)


def test_matmul_moving_size():
    def body(x):
        acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, _sb((128, 128)), _sb((128, 1024)))

    _fails("matmul-moving-size", body)


def test_matmul_contraction():
    def body(x):
        acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, _sb((128, 128)), _sb((64, 512)))

    _fails("matmul-contraction", body)


def test_matmul_operand_buffer():
    def body(x):
        acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        stationary = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, stationary, _sb((128, 512)))

    _fails("matmul-operand-buffer", body)


def test_matmul_output_buffer():
    def body(x):
        nisa.nc_matmul(_sb((128, 512)), _sb((128, 128)), _sb((128, 512)))

    _fails("matmul-output-buffer", body)


def test_matmul_output_dtype():
    def body(x):
        acc = nl.ndarray((128, 512), nl.int32, buffer=nl.psum)
        nisa.nc_matmul(acc, _sb((128, 128)), _sb((128, 512)))

    _fails("matmul-output-dtype", body)


def test_compute_on_hbm():
    _fails("compute-on-hbm", lambda x: nl.exp(x))


def test_compute_on_hbm_isa():
    def body(x):
        nisa.tensor_tensor(_sb((128, 512)), x, x, op=nl.add)

    _fails("compute-on-hbm", body)


def test_dma_buffer_psum_source():
    def body(x):
        acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        nisa.dma_copy(x, acc)

    _fails("dma-buffer", body)


def test_dma_buffer_load_from_sbuf():
    _fails("dma-buffer", lambda x: nl.load(_sb((128, 4))))


def test_kernel_output_buffer():
    def body(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.hbm)  # not shared_hbm
        nl.store(out, nl.load(x))
        return out

    _fails("kernel-output-buffer", body)


def test_out_of_bounds_slice():
    _fails("out-of-bounds", lambda x: nl.load(x[0:256, :]))


def test_out_of_bounds_legacy_index_without_mask():
    def body(x):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(512)[None, :]
        return nl.load(x[64 + i_p, i_f])  # rows 128..191 do not exist

    e = _fails("out-of-bounds", body)
    assert "nl.load" in str(e)


def test_out_of_bounds_masked_access_is_fine():
    @nki.jit
    def body(x):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(512)[None, :]
        nl.load(x[64 + i_p, i_f], mask=(64 + i_p < 128))

    body(X)


def test_shape_mismatch():
    def body(x):
        nisa.tensor_tensor(_sb((128, 512)), _sb((128, 512)), _sb((128, 256)), op=nl.add)

    _fails("shape-mismatch", body)


def test_operand_shape():
    def body(x):
        nisa.tensor_scalar(_sb((128, 512)), _sb((128, 512)), nl.add, _sb((128, 4)))

    _fails("operand-shape", body)


def test_reduce_axis_partition():
    _fails("reduce-axis", lambda x: nl.sum(_sb((128, 8)), axis=0))


def test_reduce_axis_not_trailing():
    _fails("reduce-axis", lambda x: nl.sum(_sb((128, 4, 8)), axis=1))


def test_transpose_size():
    def body(x):
        nisa.nc_transpose(_sb((64, 64)), _sb((64, 64)), engine=nisa.engine.vector)

    _fails("transpose-size", body)


def test_bn_stats_size():
    def body(x):
        nisa.bn_stats(_sb((128, 6)), _sb((128, 1024)))

    _fails("bn-stats-size", body)


def test_dtype_bitwise_on_float():
    def body(x):
        nisa.tensor_tensor(_sb((128, 8)), _sb((128, 8)), _sb((128, 8)), op=nl.bitwise_and)

    _fails("dtype", body)


def test_unsupported_reshape_of_slice():
    _fails("unsupported", lambda x: x[0:64, :].reshape((64 * 512,)))


def test_launch_program_axis():
    _fails("launch", lambda x: nl.program_id(1), grid=4)


def test_launch_outside_kernel():
    with pytest.raises(NKIRuleError) as info:
        nl.zeros((4, 4), nl.float32)
    assert info.value.rule == "launch"


@pytest.mark.parametrize("where", ["operand", "destination"])
def test_gpsimd_cannot_access_psum(where):
    def body(x):
        ps = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        sb = _sb((128, 64))
        if where == "operand":
            nisa.affine_select(sb, [[-1, 64]], 1, ps, -1.0, cmp_op=nl.greater_equal)
        else:
            nisa.iota(ps, [[1, 64]])

    e = _fails("gpsimd-psum", body)
    assert "PSUM" in str(e)
    # the same select from SBUF is fine
    k = nki.jit(lambda x: nisa.affine_select(_sb((128, 64)), [[-1, 64]], 1, _sb((128, 64)), -1.0))
    k(X)


def test_every_rule_has_a_test():
    src = open(__file__).read()
    missing = [r for r in RULES if f'"{r}"' not in src.split("def test_every_rule_has_a_test")[0]]
    assert not missing, f"rules without a failing-kernel test: {missing}"


def test_error_names_instruction_rule_and_source_line():
    def body(x):
        acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, _sb((128, 128)), _sb((128, 1024)))  # the offending line

    e = _fails("matmul-moving-size", body)
    assert e.instruction == "nisa.nc_matmul"
    assert os.path.basename(e.filename) == "test_rules.py"
    lines = open(__file__).read().splitlines()
    assert "the offending line" in lines[e.lineno - 1]
    msg = str(e)
    assert msg.startswith("[matmul-moving-size] nisa.nc_matmul:")
    assert f"test_rules.py:{e.lineno}" in msg

