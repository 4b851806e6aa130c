"""The compiler's decomposition of ``convolution_backward`` into convolutions equals ATen's
kernel (float64 on the CPU, so the comparison is exact up to summation order)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchneuron.compiler.convolution import convolution_backward

aten = torch.ops.aten


@st.composite
def conv_cases(draw):
    dims = draw(st.sampled_from([1, 2, 3]))
    groups = draw(st.sampled_from([1, 2, 3]))
    cin, cout = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 4)) for _ in range(dims)]
    stride = [draw(st.integers(1, 3)) for _ in range(dims)]
    padding = [draw(st.integers(0, 2)) for _ in range(dims)]
    dilation = [draw(st.integers(1, 2)) for _ in range(dims)]
    transposed = draw(st.booleans())
    out_pad = [draw(st.integers(0, max(s, d) - 1)) if transposed else 0 for s, d in zip(stride, dilation, strict=True)]
    spatial = [draw(st.integers(4, 9)) for _ in range(dims)]
    mask = draw(st.lists(st.booleans(), min_size=3, max_size=3))
    return dims, groups, cin, cout, kernel, stride, padding, dilation, transposed, out_pad, spatial, mask


@settings(max_examples=150, deadline=None)
@given(conv_cases(), st.integers(1, 3))
def test_matches_aten(case, batch):
    dims, groups, cin, cout, kernel, stride, padding, dilation, transposed, out_pad, spatial, mask = case
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, cin, *spatial, dtype=torch.float64, generator=g)
    wshape = (cin, cout // groups, *kernel) if transposed else (cout, cin // groups, *kernel)
    w = torch.randn(wshape, dtype=torch.float64, generator=g)
    try:
        y = aten.convolution(x, w, None, stride, padding, dilation, transposed, out_pad, groups)
    except RuntimeError:
        return  # geometry the convolution itself rejects (output smaller than one element)
    gy = torch.randn(y.shape, dtype=torch.float64, generator=g)
    args = (gy, x, w, [y.shape[1]], stride, padding, dilation, transposed, out_pad, groups, mask)
    ref = aten.convolution_backward(*args)
    got = convolution_backward(*args)
    for name, r, o, on in zip(("input", "weight", "bias"), ref, got, mask, strict=True):
        if not on:
            assert o is None
            continue
        assert o.shape == r.shape, name
        torch.testing.assert_close(o, r, rtol=1e-10, atol=1e-10, msg=name)
