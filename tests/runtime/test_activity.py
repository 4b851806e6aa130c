"""The device-activity hook reports every device operation while a recorder is installed."""

from __future__ import annotations

import torch

from torchneuron.runtime import activity


class _Collect:
    def __init__(self):
        self.events = []

    def record(self, kind, name, inputs, outputs, start_ns, end_ns):
        assert end_ns >= start_ns
        self.events.append((kind, name))


def test_recorder_sees_kernels_copies_and_nothing_when_off():
    rec = _Collect()
    prev = activity.set_recorder(rec)
    try:
        x = torch.randn(4, 4).to("neuron")
        y = (x @ x).relu_()
        y.add_(1)
        torch.cumsum(y, 0, out=torch.empty(4, 4, device="neuron"))
        y.cpu()
    finally:
        activity.set_recorder(prev)
    kinds = {k for k, _ in rec.events}
    names = [n for _, n in rec.events]
    assert {"kernel", "copy_h2d", "copy_d2h"} <= kinds
    assert "aten::mm" in names and "aten::relu_" in names and "aten::cumsum.out" in names
    n = len(rec.events)
    (x + 1).cpu()
    assert len(rec.events) == n  # no recording without a recorder
