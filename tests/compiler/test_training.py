"""Compiled training matches eager training on the device, step for step."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from helpers import DEVICE, train_compare
from models import MLP, GroupedCNN, SmallCNN, TinyLM

from torchneuron.compiler import get_metrics


def _graphs(kind):
    return [g for g in get_metrics()["graphs"].values() if g["kind"] == kind]


def test_mlp_training_matches_eager():
    torch.manual_seed(0)
    batches = [(torch.randn(16, 32, device=DEVICE), torch.randint(0, 10, (16,), device=DEVICE)) for _ in range(4)]
    losses, _ = train_compare(MLP(), batches, F.cross_entropy)
    assert losses[-1] < losses[0]
    fw, bw = _graphs("forward"), _graphs("backward")
    assert len(fw) == 1 and len(bw) == 1, "a training loop compiles one forward and one backward graph"
    assert fw[0]["eager_nodes"] == 0 and bw[0]["eager_nodes"] == 0
    assert get_metrics()["graphs_compiled"] == 2  # 20 steps, no recompilation


def test_cnn_training_matches_eager():
    torch.manual_seed(0)
    batches = [(torch.randn(4, 3, 16, 16, device=DEVICE), torch.randint(0, 10, (4,), device=DEVICE)) for _ in range(2)]
    train_compare(SmallCNN(), batches, F.cross_entropy, atol=2e-4, rtol=2e-4)
    assert get_metrics()["graphs_compiled"] == 2
    fw = _graphs("forward")[0]
    assert fw["compiled_nodes"] > 0 and fw["regions"] >= 1


def test_grouped_cnn_backward_compiles_whole():
    """With convolutions compiled (not library kernels), their gradients are decomposed into
    convolutions: no node outside the regions in either graph and no region split (depthwise,
    grouped, dilated, transposed and 1-D convolutions)."""
    torch.manual_seed(0)
    batches = [(torch.randn(2, 3, 16, 16, device=DEVICE), torch.randint(0, 10, (2,), device=DEVICE)) for _ in range(2)]
    train_compare(GroupedCNN(), batches, F.cross_entropy, steps=6, atol=2e-4, rtol=2e-4,
                  options={"library_convolutions": False})
    for g in _graphs("forward") + _graphs("backward"):
        assert g["eager_nodes"] == 0 and g["library_nodes"] == 0, g["placement"]
        assert g["split_regions"] == 0
    assert get_metrics()["graphs_compiled"] == 2


def test_grouped_cnn_training_with_library_convolutions():
    """By default convolutions and their backward (kept whole, not decomposed) run as the
    device's library kernels between compiled regions; everything else is compiled."""
    torch.manual_seed(0)
    batches = [(torch.randn(2, 3, 16, 16, device=DEVICE), torch.randint(0, 10, (2,), device=DEVICE)) for _ in range(2)]
    model = GroupedCNN()
    n_convs = sum(isinstance(m, torch.nn.modules.conv._ConvNd) for m in model.modules())
    train_compare(model, batches, F.cross_entropy, steps=6, atol=2e-4, rtol=2e-4)
    (fw,), (bw,) = _graphs("forward"), _graphs("backward")
    # a ReLU alone between two convolutions is not worth an executable call: it runs eagerly
    eager = [node for node, where in fw["placement"].items() if where == "eager"]
    assert all(node.startswith("relu") for node in eager) and bw["eager_nodes"] == 0, fw["placement"]
    for g, prefix in ((fw, "convolution"), (bw, "convolution_backward")):
        library = sorted(node for node, where in g["placement"].items() if where == "library")
        assert g["library_nodes"] == len(library) == n_convs, g["placement"]
        assert all(node.rstrip("_0123456789") == prefix for node in library), library
        assert g["regions"] >= 1 and g["compiled_nodes"] > 0
    assert get_metrics()["graphs_compiled"] == 2


def _lm_batches(vocab=64, seq=16):
    torch.manual_seed(0)
    out = []
    for _ in range(2):
        idx = torch.randint(0, vocab, (2, seq + 1), device=DEVICE)
        out.append((idx[:, :-1], idx[:, 1:]))
    return out


def _lm_loss(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def test_transformer_training_matches_eager():
    train_compare(TinyLM(sdpa=False), _lm_batches(), _lm_loss, atol=2e-4, rtol=2e-4)
    assert get_metrics()["graphs_compiled"] == 2


def _fake_sdpa_works() -> bool:
    from torch._subclasses.fake_tensor import FakeTensorMode

    try:
        with FakeTensorMode():
            q = torch.empty(1, 1, 4, 4, device=DEVICE)
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
        return True
    except RuntimeError:
        return False


def test_transformer_sdpa_training_matches_eager():
    assert _fake_sdpa_works()  # attention must trace with fake tensors
    train_compare(TinyLM(sdpa=True), _lm_batches(), _lm_loss, atol=2e-4, rtol=2e-4)
