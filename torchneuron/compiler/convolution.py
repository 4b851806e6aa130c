"""``convolution_backward`` as forward convolutions, so that a CNN's backward lowers and fuses.

torch-mlir does not lower ``aten.convolution_backward`` (None outputs for an unused
``output_mask`` entry, a wrong bias-gradient legalisation, grouped convolutions rejected), and
PyTorch has no decomposition for it, so every convolution of a compiled backward graph would
otherwise be an eager node splitting the graph into one region per layer. The gradients are
themselves convolutions, which lower to ``stablehlo.convolution``:

* input gradient of ``y = conv(x, w)``: the transposed convolution of ``grad_y`` with ``w``
  (an ``output_padding`` restores the input size that the forward stride rounded away); of a
  transposed convolution, the plain convolution of ``grad_y`` with ``w`` (cut to the input's
  size where the forward's output padding added positions);
* weight gradient: ``grad_w[o, i, k] = Σ_{n, p} grad_y[n, o, p] · x[n, i, p·stride + k·dilation − pad]``,
  a convolution over the batch with ``x`` as the input (channels and batch swapped) and
  ``grad_y`` as the kernel: stride and dilation trade places, groups stay groups (the batch is
  folded into each group's channels);
* bias gradient: ``grad_y`` summed over every dimension but the channels.
"""

from __future__ import annotations

import torch

_aten = torch.ops.aten


def _weight_grad(inp: torch.Tensor, gout: torch.Tensor, kernel: list, stride: list, padding: list,
                 dilation: list, groups: int) -> torch.Tensor:
    """``[groups · Cout_g, Cin_g, *kernel]`` for ``inp: [N, groups · Cin_g, *S]`` and
    ``gout: [N, groups · Cout_g, *S_out]`` of a convolution with the given geometry."""
    n, c_in = inp.shape[0], inp.shape[1]
    spatial = list(inp.shape[2:])
    dims = len(spatial)
    cg_in = c_in // groups
    # channels of group g become the batch, and the batch joins group g's channels
    x = inp.reshape(n, groups, cg_in, *spatial).permute(2, 1, 0, *range(3, 3 + dims))
    x = x.reshape(cg_in, groups * n, *spatial)
    w = gout.transpose(0, 1)  # [groups · Cout_g, N, *S_out]: one kernel per output channel
    g = _aten.convolution.default(x, w, None, list(dilation), list(padding), list(stride), False,
                                  [0] * dims, groups)  # [Cin_g, groups · Cout_g, *K']
    for d, k in enumerate(kernel):
        if g.shape[2 + d] != k:
            g = g.narrow(2 + d, 0, k)
    return g.transpose(0, 1)


def convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    dims = input.dim() - 2
    stride, padding, dilation = list(stride), list(padding), list(dilation)
    if len(stride) == 1 and dims > 1:
        stride, padding, dilation = stride * dims, padding * dims, dilation * dims
    kernel = list(weight.shape[2:])
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        if transposed:
            grad_input = _aten.convolution.default(grad_output, weight, None, stride, padding, dilation, False,
                                                   [0] * dims, groups)
            for d in range(dims):  # output padding with stride 1 (and dilation > 1) adds positions
                if grad_input.shape[2 + d] != input.shape[2 + d]:
                    grad_input = grad_input.narrow(2 + d, 0, input.shape[2 + d])
        else:
            # the input size the forward's stride rounded away comes back as output padding
            out_pad = [
                input.shape[2 + d] - ((grad_output.shape[2 + d] - 1) * stride[d] - 2 * padding[d]
                                      + dilation[d] * (kernel[d] - 1) + 1)
                for d in range(dims)
            ]
            grad_input = _aten.convolution.default(grad_output, weight, None, stride, padding, dilation, True,
                                                   out_pad, groups)
    if output_mask[1]:
        if transposed:
            # the roles of input and output swap: grad_w[i, o, k] pairs x[:, i] with grad_y[:, o]
            grad_weight = _weight_grad(grad_output, input, kernel, stride, padding, dilation, groups)
        else:
            grad_weight = _weight_grad(input, grad_output, kernel, stride, padding, dilation, groups)
    if output_mask[2]:
        grad_bias = grad_output.sum([0, *range(2, grad_output.dim())])
    return grad_input, grad_weight, grad_bias


def convolution_decompositions() -> dict:
    return {_aten.convolution_backward.default: convolution_backward}


__all__ = ["convolution_backward", "convolution_decompositions"]
