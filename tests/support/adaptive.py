"""Running a program eagerly and in adaptive mode, and comparing the two."""

from __future__ import annotations

import torch

import torchneuron


def eager_and_adaptive(fn, *inputs):
    """``fn`` run eagerly and in adaptive mode on copies of ``inputs`` (CPU tensors), results on
    the host."""

    def run():
        dev = [i.to("neuron") for i in inputs]
        out = fn(*dev)
        return [o.cpu() for o in (out if isinstance(out, (list, tuple)) else (out,))], [d.cpu() for d in dev]

    eager = run()
    with torchneuron.execution_mode("adaptive"):
        lazy = run()
    return eager, lazy


def assert_same(eager, lazy, **tol):
    for a, b in zip(eager[0] + eager[1], lazy[0] + lazy[1], strict=True):
        torch.testing.assert_close(b, a, **tol)
