"""``fullgraph=True`` and graph breaks under ``backend="neuron"``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import DEVICE

from torchneuron.compiler import get_metrics, reset_metrics


class Breaking(torch.nn.Module):
    """A forward with a graph break in the middle (a print and a data-dependent branch)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 4)

    def forward(self, x):
        h = F.gelu(self.a(x))
        print("between the two graphs")  # a graph break
        if h.sum() > 0:  # data-dependent control flow: another break
            h = h * 2
        return self.b(h)


def test_fullgraph_compiles_one_graph_per_direction():
    torch._dynamo.reset()
    reset_metrics()
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(DEVICE)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    x = torch.randn(8, 16)
    compiled = torch.compile(model, backend="neuron", fullgraph=True)
    out = compiled(x.to(DEVICE))
    out.sum().backward()
    ref(x).sum().backward()
    torch.testing.assert_close(out.detach().cpu(), ref(x).detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model[0].weight.grad.cpu(), ref[0].weight.grad, rtol=1e-4, atol=1e-5)
    kinds = sorted(g["kind"] for g in get_metrics()["graphs"].values())
    assert kinds == ["backward", "forward"]


def test_fullgraph_with_a_graph_break_is_an_error():
    torch._dynamo.reset()
    compiled = torch.compile(Breaking().to(DEVICE), backend="neuron", fullgraph=True)
    with pytest.raises(torch._dynamo.exc.Unsupported):
        compiled(torch.randn(4, 16, device=DEVICE))


def test_graph_breaks_split_the_program_and_keep_results(capsys):
    torch._dynamo.reset()
    reset_metrics()
    torch.manual_seed(0)
    model = Breaking()
    ref = Breaking()
    ref.load_state_dict(model.state_dict())
    model = model.to(DEVICE)
    compiled = torch.compile(model, backend="neuron")
    x = torch.randn(4, 16)
    for _ in range(2):  # the second call reuses the compiled pieces
        out = compiled(x.to(DEVICE))
        out.sum().backward()
    for _ in range(2):
        expected = ref(x)
        expected.sum().backward()
    torch.testing.assert_close(out.detach().cpu(), expected.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model.a.weight.grad.cpu(), ref.a.weight.grad, rtol=1e-4, atol=1e-5)
    assert capsys.readouterr().out.count("between the two graphs") == 4
    graphs = get_metrics()["graphs"]
    forwards = [g for g in graphs.values() if g["kind"] == "forward"]
    assert len(forwards) >= 2  # the break split the forward into separately compiled graphs
