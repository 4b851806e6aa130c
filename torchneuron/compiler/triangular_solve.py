"""``aten.linalg_solve_triangular`` as batched matrix products.

torch-mlir does not lower ``linalg_solve_triangular``; twelve gated-delta-net models of the sweep
(Qwen3-Next, Qwen3.5, OLMo-hybrid …) solve a unit lower-triangular ``chunk × chunk`` system per
chunk and head with it (the "UT transform"), forward and, for the gradients, backward, and ran it
on the CPU between compiled regions.

A substitution row by row would unroll into one small step per row. Instead the diagonal blocks
(up to :data:`BLOCK` rows) are inverted by recursive doubling: the inverse of a lower-triangular
``[[A11, 0], [A21, A22]]`` is ``[[X11, 0], [-X22 @ A21 @ X11, X22]]``, and all blocks of one size
are merged at once, so a 64-row block takes six levels of two batched products each
(:func:`inverse_of_diagonal_blocks`). Larger systems are solved block by block on top
(``X_j = inv(A_jj) @ (B_j - A_j,<j @ X_<j)``, one step per :data:`BLOCK` rows, up to
:data:`MAX_ROWS`). Only the lower triangle is read, the diagonal not at all when
``unitriangular``; a size that is not a power of two is padded with an identity block. Upper
systems are lower ones with rows and columns reversed, ``left=False`` the transposed system; the
result has ATen's layout (column-major matrices), which the ops after it may rely on.

Solving through inverses of the diagonal blocks is not LAPACK's substitution and rounds
differently: on the models' systems (unit lower-triangular, normalised keys, decays ≤ 1) its
error against a float64 solve equals LAPACK's float32 error; on random systems with unit-sized
diagonals (condition numbers up to 6e5) it stays below 1e-5 of the solution's scale, LAPACK's
below 2e-6 (tests/compiler/test_triangular_solve.py). Dtypes other than
float32 and float64 (ATen solves no others on the CPU) and systems above :data:`MAX_ROWS` rows
are left to the op.
"""

from __future__ import annotations

import torch
from torch._prims_common import make_contiguous_strides_for

_aten = torch.ops.aten

BLOCK = 64  # rows of the diagonal blocks inverted at once (the gated-delta-net chunk)
MAX_ROWS = 2048  # beyond: more than 32 sequential block steps, the op stays whole


def _next_power_of_two(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def inverse_of_diagonal_blocks(a: torch.Tensor, diagonal: torch.Tensor | None, block: int) -> torch.Tensor:
    """``[..., N / block, block, block]``: the inverses of the lower-triangular diagonal blocks of
    ``a`` (``[..., N, N]``, ``block`` a power of two dividing ``N``) read from its strict lower
    triangle, with ``diagonal`` (``[..., N]``; ``None``: ones)."""
    n = a.shape[-1]
    batch = a.shape[:-2]
    if diagonal is None:
        inv = a.new_ones((*batch, n, 1, 1))
    else:
        inv = torch.reciprocal(diagonal).reshape(*batch, n, 1, 1)
    size = 1
    while size < block:
        pairs = n // (2 * size)
        x = inv.reshape(*batch, pairs, 2, size, size)
        x11, x22 = x[..., 0, :, :], x[..., 1, :, :]
        # the block below each pair's first diagonal block: rows (2j+1)s.., columns 2js..
        grid = a.reshape(*batch, pairs, 2 * size, pairs, 2 * size)[..., size:, :, :size]
        own = torch.eye(pairs, dtype=torch.bool, device=a.device).reshape(pairs, 1, pairs, 1)
        a21 = torch.where(own, grid, torch.zeros((), dtype=a.dtype, device=a.device)).sum(-2)
        lower = torch.neg(torch.matmul(torch.matmul(x22, a21), x11))
        top = torch.cat([x11, torch.zeros_like(x11)], dim=-1)
        bottom = torch.cat([lower, x22], dim=-1)
        inv = torch.cat([top, bottom], dim=-2)
        size *= 2
    return inv


def _solve_lower(a: torch.Tensor, b: torch.Tensor, unitriangular: bool) -> torch.Tensor:
    n = a.shape[-1]
    block = _next_power_of_two(n) if n <= BLOCK else BLOCK
    rows = -(-n // block) * block
    diagonal = None
    if not unitriangular:  # (a select and a sum of exact zeros: a strided diagonal does not lower)
        eye = torch.eye(n, dtype=torch.bool, device=a.device)
        diagonal = torch.where(eye, a, torch.zeros((), dtype=a.dtype, device=a.device)).sum(-1)
    if rows != n:  # an identity block below and to the right: the first n rows solve the system
        pad = rows - n
        a = torch.nn.functional.pad(a, (0, pad, 0, pad))
        b = torch.nn.functional.pad(b, (0, 0, 0, pad))
        if diagonal is not None:
            diagonal = torch.cat([diagonal, diagonal.new_ones((*diagonal.shape[:-1], pad))], dim=-1)
    inv = inverse_of_diagonal_blocks(a, diagonal, block)
    parts: list[torch.Tensor] = []
    for j in range(rows // block):
        rhs = b[..., j * block:(j + 1) * block, :]
        if j:
            rhs = rhs - torch.matmul(a[..., j * block:(j + 1) * block, :j * block], torch.cat(parts, dim=-2))
        parts.append(torch.matmul(inv[..., j, :, :], rhs))
    x = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-2)
    return x[..., :n, :] if rows != n else x


def solve_triangular_as_products(a: torch.Tensor, b: torch.Tensor, *, upper: bool, left: bool = True,
                                 unitriangular: bool = False):
    x = _solve(a, b, upper=upper, left=left, unitriangular=unitriangular)
    if x is NotImplemented:
        return x
    # ATen's layout: each matrix column-major (LAPACK's), which the ops after it may rely on (a
    # view that is valid on the eager result); adaptive mode records them against that layout
    strides = tuple(make_contiguous_strides_for(x.shape, row_major=False))
    if x.stride() != strides:
        x = x.mT.contiguous().mT  # a copy inside the program
    if x.stride() != strides:  # (strides of size-1 dimensions differ) a template allocated outside it
        layout = torch.empty_strided(x.shape, strides, dtype=x.dtype, device=x.device)
        x = _aten.copy.default(layout, x)  # functional: the result takes the first argument's layout
    return x


def _solve(a: torch.Tensor, b: torch.Tensor, *, upper: bool, left: bool, unitriangular: bool):
    if a.dtype not in (torch.float32, torch.float64) or b.dtype != a.dtype:
        return NotImplemented  # ATen's kernels (LAPACK) solve these two real dtypes; the rest is its to refuse
    if a.dim() < 2 or b.dim() < 2 or a.shape[-1] != a.shape[-2]:
        return NotImplemented  # the op's own error
    n = a.shape[-1]
    if n > MAX_ROWS or (b.shape[-2] if left else b.shape[-1]) != n:
        return NotImplemented
    if not left:  # X A = B  <=>  A^T X^T = B^T
        return _solve(a.mT, b.mT, upper=not upper, left=True, unitriangular=unitriangular).mT
    try:
        batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except RuntimeError:
        return NotImplemented  # the op's own error
    if n == 0 or b.shape[-1] == 0 or 0 in batch:
        return b.new_zeros((*batch, n, b.shape[-1]))
    if upper:  # reversing rows and columns makes an upper-triangular system lower-triangular
        return torch.flip(_solve_lower(torch.flip(a, [-2, -1]), torch.flip(b, [-2]), unitriangular), [-2])
    return _solve_lower(a, b, unitriangular)


def triangular_solve_decompositions() -> dict:
    return {_aten.linalg_solve_triangular.default: solve_triangular_as_products}


__all__ = ["BLOCK", "MAX_ROWS", "inverse_of_diagonal_blocks", "solve_triangular_as_products",
           "triangular_solve_decompositions"]
