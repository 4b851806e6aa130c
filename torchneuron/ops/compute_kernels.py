"""Operators whose PrivateUse1 entry point is a hook with another name.

PyTorch routes convolutions on out-of-tree devices to ``convolution_overrideable`` and its
backward to ``convolution_backward_overrideable``; the simulated core runs them with the
standard convolution kernels on device memory. ``nn.LSTM`` on an accelerator (CUDA, XPU,
PrivateUse1) uses the fused cell ``_thnn_fused_lstm_cell`` and its backward, which have no CPU
kernel to run on host aliases; the device computes them from elementwise ops, keeping the
activated gates ``[i, f, g, o]`` as the workspace its backward reads.
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


def _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias
    if hidden_bias is not None:
        gates = gates + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


def _thnn_fused_lstm_cell_backward_impl(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    if grad_hy is None and grad_cy is None:
        return None, None, None
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_c = torch.zeros_like(cy) if grad_cy is None else grad_cy  # never written in place
    if grad_hy is not None:
        grad_c = grad_c + grad_hy * o * (1 - tanh_cy * tanh_cy)
        grad_o = grad_hy * tanh_cy * o * (1 - o)
    else:
        grad_o = torch.zeros_like(o)
    grad_i = grad_c * g * i * (1 - i)
    grad_f = grad_c * cx * f * (1 - f)
    grad_g = grad_c * i * (1 - g * g)
    grad_gates = torch.cat([grad_i, grad_f, grad_g, grad_o], 1)
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_c * f, grad_bias


KERNELS = {
    "_thnn_fused_lstm_cell": _thnn_fused_lstm_cell,
    "_thnn_fused_lstm_cell_backward_impl": _thnn_fused_lstm_cell_backward_impl,
    "convolution_overrideable": convolution_overrideable,
    "convolution_backward_overrideable": convolution_backward_overrideable,
}
