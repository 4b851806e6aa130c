"""transformers Trainer on `neuron`, found by transformers itself (no device argument)."""

from __future__ import annotations

import pytest
import torch
from hf_helpers import TokenDataset, bert_classifier, gpt2_lm, losses, training_args

STEPS = 30


def _train(model, dataset, out, *, use_cpu: bool, **overrides):
    from transformers import Trainer

    args = training_args(str(out), use_cpu=use_cpu, steps=STEPS, **overrides)
    trainer = Trainer(model=model, args=args, train_dataset=dataset)
    trainer.train()
    return trainer


def _round_trip(trainer, model_cls, out, batch: dict[str, torch.Tensor]):
    """save_model -> from_pretrained: same weights, same outputs on neuron."""
    trainer.save_model(str(out))
    reloaded = model_cls.from_pretrained(str(out)).to("neuron").eval()
    trained = trainer.model.eval()
    sd_a, sd_b = trained.state_dict(), reloaded.state_dict()
    assert sd_a.keys() == sd_b.keys()
    for k in sd_a:
        assert torch.equal(sd_a[k].cpu(), sd_b[k].cpu()), k
    batch = {k: v.to("neuron") for k, v in batch.items()}
    with torch.no_grad():
        assert torch.equal(trained(**batch).logits.cpu(), reloaded(**batch).logits.cpu())


@pytest.mark.parametrize("kind", ["bert-classifier", "gpt2-lm"])
def test_trainer_finetunes_on_neuron_like_cpu(kind, tmp_path):
    from transformers import BertForSequenceClassification, GPT2LMHeadModel

    if kind == "bert-classifier":
        make, cls, data = bert_classifier, BertForSequenceClassification, TokenDataset(task="cls")
    else:
        make, cls, data = gpt2_lm, GPT2LMHeadModel, TokenDataset(task="lm")

    ref = _train(make(), data, tmp_path / "cpu", use_cpu=True)
    assert ref.args.device.type == "cpu"

    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    dev = _train(make(), data, tmp_path / "neuron", use_cpu=False)
    assert dev.args.device.type == "neuron"
    assert all(p.device.type == "neuron" for p in dev.model.parameters())

    ref_losses, dev_losses = losses(ref), losses(dev)
    assert len(dev_losses) == len(ref_losses) == STEPS
    assert dev_losses[-1] < dev_losses[0]
    torch.testing.assert_close(torch.tensor(dev_losses), torch.tensor(ref_losses), rtol=1e-3, atol=1e-4)

    batch = {k: torch.stack([data[i][k] for i in range(4)]) for k in data[0] if k != "labels"}
    _round_trip(dev, cls, tmp_path / "saved", batch)


def test_trainer_default_pin_memory(tmp_path):
    # DataLoader(pin_memory=True), Trainer's default, pins through the current accelerator
    from transformers import Trainer

    args = training_args(str(tmp_path), steps=1, dataloader_pin_memory=True)
    Trainer(model=gpt2_lm(), args=args, train_dataset=TokenDataset(n=8)).train()


def test_trainer_torch_compile_uses_neuron_backend(tmp_path, monkeypatch):
    pytest.importorskip("torch_mlir", reason="the compile extra is not installed")
    pytest.importorskip("iree.compiler", reason="the compile extra is not installed")
    from transformers import Trainer

    from torch_neuronx import neuron_dynamo_backend

    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", str(tmp_path / "cache"))
    torch._dynamo.reset()
    neuron_dynamo_backend.reset_dynamo_metrics()
    steps = 4
    data = TokenDataset(n=32)
    try:
        args = training_args(str(tmp_path / "c"), steps=steps, torch_compile=True)
        assert args.torch_compile_backend == "neuron"
        compiled = Trainer(model=gpt2_lm(), args=args, train_dataset=data)
        compiled.train()
    finally:
        torch._dynamo.reset()
    metrics = neuron_dynamo_backend.get_dynamo_metrics()
    assert metrics["graphs_compiled"] > 0 and metrics["fallbacks"] == 0

    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    eager = Trainer(model=gpt2_lm(), args=training_args(str(tmp_path / "e"), use_cpu=True, steps=steps),
                    train_dataset=data)
    eager.train()
    torch.testing.assert_close(torch.tensor(losses(compiled)), torch.tensor(losses(eager)),
                               rtol=1e-3, atol=1e-3)
