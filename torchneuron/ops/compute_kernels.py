"""Operators whose PrivateUse1 entry point is a hook with another name.

PyTorch routes convolutions on out-of-tree devices to ``convolution_overrideable`` and its
backward to ``convolution_backward_overrideable``; the simulated core runs them with the
standard convolution kernels on device memory.
"""

from __future__ import annotations

import torch

from . import generic

aten = torch.ops.aten


def convolution_overrideable(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    return generic.run(
        aten.convolution.default,
        (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups),
        {},
    )


def convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups, output_mask):
    if transposed:
        bias_sizes = [weight.shape[1] * groups]
    else:
        bias_sizes = [weight.shape[0]]
    return generic.run(
        aten.convolution_backward.default,
        (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask),
        {},
    )


KERNELS = {
    "convolution_overrideable": convolution_overrideable,
    "convolution_backward_overrideable": convolution_backward_overrideable,
}
