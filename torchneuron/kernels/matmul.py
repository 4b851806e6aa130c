"""A blocked bf16 matmul in NKI (current dialect), the reference kernel for the timing model.

``C = lhsT.T @ rhs``: one block of rows per program (one program per physical core); lhsT's
K-panel for the block stays in SBUF, rhs streams in 512-column blocks, and each 128 x 512 output
tile accumulates over K in one PSUM bank. ``bench/nki.py`` and ``tests/nki/test_timing.py`` time
it against the Tensor Engine's peak.
"""

from __future__ import annotations

import torchneuron.nki.isa as nisa
import torchneuron.nki.language as nl
from torchneuron import nki


@nki.jit
def matmul_kernel(lhsT, rhs):
    """C = lhsT.T @ rhs (bf16), one block of rows per program; lhsT's K-panel for the block
    stays in SBUF, rhs streams in 512-column blocks, each 128 x 512 output tile accumulates
    over K in one PSUM bank."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), nl.bfloat16, buffer=nl.shared_hbm)
    rows = M // nl.num_programs(0)
    m0 = nl.program_id(0) * rows
    KT, MT, NT = K // 128, rows // 128, N // 512
    a_sb = nl.ndarray((128, KT, rows), nl.bfloat16, buffer=nl.sbuf)
    for n in nl.affine_range(NT):
        b_sb = nl.ndarray((128, KT, 512), nl.bfloat16, buffer=nl.sbuf)
        for k in nl.affine_range(KT):
            nisa.dma_copy(b_sb[:, k, :], rhs[k * 128 : (k + 1) * 128, n * 512 : (n + 1) * 512])
        for m in nl.affine_range(MT):
            if n == 0:
                for k in nl.affine_range(KT):
                    nisa.dma_copy(
                        a_sb[:, k, m * 128 : (m + 1) * 128],
                        lhsT[k * 128 : (k + 1) * 128, m0 + m * 128 : m0 + (m + 1) * 128],
                    )
            acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(KT):
                nisa.nc_matmul(acc, a_sb[:, k, m * 128 : (m + 1) * 128], b_sb[:, k, :])
            res = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)
            nisa.tensor_copy(res, acc)
            nisa.dma_copy(out[m0 + m * 128 : m0 + (m + 1) * 128, n * 512 : (n + 1) * 512], res)
    return out
