"""In-place view ops (``as_strided_``, ``t_`` …) only change geometry: on device tensors and on
the storage-less wrappers AOTAutograd's functionalisation re-strides while tracing."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def test_inplace_views_on_device_match_cpu():
    x = torch.arange(24.0).reshape(2, 3, 4)
    d = x.to("neuron")
    steps = [
        lambda t: t.transpose_(0, 2),
        lambda t: t.unsqueeze_(1),
        lambda t: t.squeeze_(1),
        lambda t: t.as_strided_((3, 2), (1, 3), 2),
        lambda t: t.t_(),
    ]
    for step in steps:
        step(x)
        step(d)
        assert d.shape == x.shape and d.stride() == x.stride() and d.storage_offset() == x.storage_offset()
        assert torch.equal(d.cpu(), x)


def test_compiled_convnext_block_and_head_match_eager():
    """A ConvNeXt block, pooling and the LayerNorm2d head: functionalisation re-strides a
    wrapper with ``as_strided_`` while tracing it (it used to reach the device kernel)."""
    from torchvision.models.convnext import CNBlock, LayerNorm2d

    torch.manual_seed(0)
    block = CNBlock(16, 1e-6, 0.0).to("neuron").eval()
    norm = LayerNorm2d(16).to("neuron").eval()

    def f(x):
        return torch.flatten(norm(F.adaptive_avg_pool2d(block(x), 1)), 1)

    x = torch.randn(2, 16, 2, 2).to("neuron")
    with torch.no_grad():
        ref = f(x)
        out = torch.compile(f, backend="neuron")(x)
    torch.testing.assert_close(out.cpu(), ref.cpu(), rtol=1e-5, atol=1e-5)
