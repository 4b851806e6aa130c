"""Nodes that do not lower stay outside compiled regions and run eagerly on the device."""

from __future__ import annotations

import torch
from helpers import DEVICE

from torchneuron.compiler import get_metrics


@torch.library.custom_op("tn_compiler_test::soft_clip", mutates_args=())
def soft_clip(x: torch.Tensor, limit: float) -> torch.Tensor:
    """A custom operator: no lowering to StableHLO exists for it."""
    return limit * torch.tanh(x / limit)


@soft_clip.register_fake
def _(x, limit):
    return torch.empty_like(x)


def _soft_clip_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    t = torch.tanh(x / ctx.limit)
    return grad * (1 - t * t), None


def _setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.limit = inputs[1]


soft_clip.register_autograd(_soft_clip_backward, setup_context=_setup)


class Clipped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 4)

    def forward(self, x):
        h = soft_clip(self.a(x).relu() * 2.0, 1.5)
        return self.b(h + 1.0).softmax(-1)


def _placements():
    return {gid: g["placement"] for gid, g in get_metrics()["graphs"].items()}


def test_unsupported_op_runs_eagerly_and_result_is_correct():
    torch.manual_seed(0)
    model = Clipped().to(DEVICE)
    x = torch.randn(8, 16, device=DEVICE)
    with torch.no_grad():
        ref = model(x)
        out = torch.compile(model, backend="neuron")(x)
    torch.testing.assert_close(out.cpu(), ref.cpu(), atol=1e-5, rtol=1e-5)
    (placement,) = _placements().values()
    eager = [n for n, where in placement.items() if where == "eager"]
    assert eager == ["soft_clip"]
    regions = {where for where in placement.values() if where != "eager"}
    assert len(regions) == 2, "the custom op splits the graph into two compiled regions"


def test_unsupported_op_in_training():
    torch.manual_seed(0)
    model = Clipped().to(DEVICE)
    x = torch.randn(8, 16, device=DEVICE)
    model(x).square().sum().backward()
    ref_grads = [p.grad.cpu().clone() for p in model.parameters()]
    model.zero_grad()
    torch.compile(model, backend="neuron")(x).square().sum().backward()
    for p, g in zip(model.parameters(), ref_grads, strict=True):
        torch.testing.assert_close(p.grad.cpu(), g, atol=1e-5, rtol=1e-5)
    kinds = {g["kind"]: g for g in get_metrics()["graphs"].values()}
    assert set(kinds) == {"forward", "backward"}
    assert kinds["forward"]["eager_nodes"] >= 1


def test_dropout_draws_from_the_device_generator():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.5)).to(DEVICE).train()
    compiled = torch.compile(model, backend="neuron")
    x = torch.randn(32, 64, device=DEVICE)
    torch.neuron.manual_seed(123)
    a = compiled(x)
    torch.neuron.manual_seed(123)
    b = compiled(x)
    c = compiled(x)
    assert torch.equal(a.cpu(), b.cpu()), "same device seed, same dropout mask"
    assert not torch.equal(b.cpu(), c.cpu())
    zeros = (a == 0).float().mean().item()
    assert 0.4 < zeros < 0.6
    (placement,) = [g["placement"] for g in get_metrics()["graphs"].values() if g["kind"] == "forward"]
    random_nodes = [n for n in placement if n.startswith(("rand", "bernoulli", "native_dropout"))]
    assert random_nodes and all(placement[n] == "eager" for n in random_nodes)


class _ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        return (self.bn(self.conv(x)).relu() + 1.0).mean((2, 3))


def _conv_placement(tmp_path, monkeypatch, **env):
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    torch.manual_seed(0)
    model = _ConvNet().eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        ref = model(x)
        out = torch.compile(model.to(DEVICE), backend="neuron")(x.to(DEVICE))
    torch.testing.assert_close(out.cpu(), ref, atol=1e-5, rtol=1e-5)
    (graph,) = get_metrics()["graphs"].values()
    (text,) = [p.read_text() for p in tmp_path.rglob("placement.txt")]
    return graph, text


def test_convolutions_are_library_kernels_by_default(tmp_path, monkeypatch):
    graph, text = _conv_placement(tmp_path, monkeypatch)
    assert graph["library_nodes"] == 1 and graph["eager_nodes"] == 0
    assert graph["placement"]["convolution"] == "library"
    assert graph["regions"] == 1  # batch norm, ReLU, add and mean: one region after the kernel
    assert "library kernels on the device (1 nodes):\n  convolution: aten.convolution.default" in text


def test_library_convolutions_can_be_switched_off(tmp_path, monkeypatch):
    graph, text = _conv_placement(tmp_path, monkeypatch, TORCHNEURON_LIBRARY_CONVOLUTIONS="0")
    assert graph["library_nodes"] == 0 and graph["eager_nodes"] == 0
    assert graph["placement"]["convolution"].startswith("fused_")
    assert "library kernels on the device (0 nodes)" in text


class _DenseBlock(torch.nn.Module):
    """DenseNet's pattern: each layer reads the concatenation of all earlier feature maps."""

    def __init__(self, layers: int = 4, growth: int = 4):
        super().__init__()
        self.norms = torch.nn.ModuleList(torch.nn.BatchNorm2d(growth * (i + 1)) for i in range(layers))
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(growth * (i + 1), growth, 3, padding=1) for i in range(layers))

    def forward(self, x):
        feats = [x]
        for norm, conv in zip(self.norms, self.convs, strict=True):
            feats.append(conv(norm(torch.cat(feats, 1)).relu()))
        # rotary-style two-input concatenation and one along the outermost dimension stay compiled
        return torch.cat((feats[-1], -feats[-2]), -1).sum() + torch.cat(feats[:3], 0).square().mean()


def _dense_block_run(tmp_path, monkeypatch, train: bool, **env):
    from torchneuron.compiler import reset_metrics

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    reset_metrics()
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _DenseBlock().train(train)
    x = torch.randn(2, 4, 6, 6)
    dev_model = __import__("copy").deepcopy(model).to(DEVICE)
    compiled = torch.compile(dev_model, backend="neuron")
    if train:
        model(x).backward()
        compiled(x.to(DEVICE)).backward()
        for p, q in zip(model.parameters(), dev_model.parameters(), strict=True):
            torch.testing.assert_close(q.grad.cpu(), p.grad, atol=1e-4, rtol=1e-4)
    else:
        with torch.no_grad():
            torch.testing.assert_close(compiled(x.to(DEVICE)).cpu(), model(x), atol=1e-4, rtol=1e-4)
    return get_metrics()["graphs"]


def test_strided_concatenations_of_three_or_more_are_library_copies(tmp_path, monkeypatch):
    (graph,) = _dense_block_run(tmp_path, monkeypatch, train=False).values()
    cats = {name: where for name, where in graph["placement"].items() if name.startswith("cat")}
    # the block's concatenations of 2, 3, 4 maps: the first and the outermost/two-input ones compiled
    library = sorted(n for n, where in cats.items() if where == "library")
    assert len(library) == 2, cats  # cat of 3 and of 4 maps along channels
    assert sum(where.startswith("fused_") for where in cats.values()) == len(cats) - 2
    assert graph["library_nodes"] == 4 + 2 and graph["eager_nodes"] == 0


def test_library_concatenations_train_alike_and_can_be_switched_off(tmp_path, monkeypatch):
    graphs = _dense_block_run(tmp_path, monkeypatch, train=True)
    fwd = next(g for g in graphs.values() if g["kind"] == "forward")
    assert sum(w == "library" for n, w in fwd["placement"].items() if n.startswith("cat")) == 2
    graphs = _dense_block_run(tmp_path, monkeypatch, train=True, TORCHNEURON_LIBRARY_CONCATENATIONS="0")
    fwd = next(g for g in graphs.values() if g["kind"] == "forward")
    assert all(w.startswith("fused_") for n, w in fwd["placement"].items() if n.startswith("cat"))


def test_concatenation_of_values_its_region_computes_stays_compiled(tmp_path, monkeypatch):
    """A transformer's fused q/k/v projection: its backward concatenates the three gradients
    computed in the same region; taking that copy out cut the GPT-2-style LM's backward graph
    into five regions. Only concatenations at a region's entry are library copies."""
    from torchneuron.compiler import reset_metrics

    reset_metrics()
    torch._dynamo.reset()
    torch.manual_seed(0)
    qkv = torch.nn.Linear(16, 48)

    def f(m, x):
        q, k, v = m(x).split(16, -1)
        return torch.softmax(q @ k.transpose(-1, -2), -1) @ v

    x = torch.randn(2, 8, 16)
    dev = __import__("copy").deepcopy(qkv).to(DEVICE)
    torch.compile(f, backend="neuron")(dev, x.to(DEVICE)).sum().backward()
    f(qkv, x).sum().backward()
    torch.testing.assert_close(dev.weight.grad.cpu(), qkv.weight.grad, atol=1e-5, rtol=1e-5)
    backward = next(g for g in get_metrics()["graphs"].values() if g["kind"] == "backward")
    cats = [where for name, where in backward["placement"].items() if name.startswith("cat")]
    assert cats and all(where.startswith("fused_") for where in cats), backward["placement"]
    assert backward["regions"] == 1 and backward["library_nodes"] == 0
