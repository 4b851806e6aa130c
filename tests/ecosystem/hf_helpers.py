"""Reduced Hugging Face models and synthetic datasets shared by the ecosystem tests."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset

VOCAB = 128
SEQ = 16


class TokenDataset(Dataset):
    """Random token sequences; ``task="cls"`` adds a label learnable from the first token."""

    def __init__(self, n: int = 64, seq: int = SEQ, vocab: int = VOCAB, task: str = "lm"):
        g = torch.Generator().manual_seed(1234)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)
        self.task = task

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x = self.ids[i]
        if self.task == "cls":
            return {
                "input_ids": x,
                "attention_mask": torch.ones_like(x),
                "labels": (x[0] >= VOCAB // 2).long(),
            }
        return {"input_ids": x, "labels": x}


def bert_classifier(seed: int = 0):
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    cfg = BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=32, num_labels=2,
        # dropout draws from the device generator, which differs from CPU's by design
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    return BertForSequenceClassification(cfg)


def gpt2_config(**overrides: Any):
    from transformers import GPT2Config

    kw: dict[str, Any] = dict(
        vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=2,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
        pad_token_id=0,
    )
    kw.update(overrides)
    return GPT2Config(**kw)


def gpt2_lm(seed: int = 0, **overrides: Any):
    from transformers import GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(gpt2_config(**overrides))


def training_args(output_dir: str, *, use_cpu: bool = False, steps: int = 30, **overrides: Any):
    """The same TrainingArguments for both devices. No device argument: on neuron the
    device comes from transformers' own detection (``use_cpu`` only builds the reference)."""
    from transformers import TrainingArguments

    kw: dict[str, Any] = dict(
        output_dir=output_dir, max_steps=steps, per_device_train_batch_size=8,
        learning_rate=1e-3, logging_steps=1, report_to=[], save_strategy="no", seed=0,
        dataloader_num_workers=0, use_cpu=use_cpu, disable_tqdm=True,
    )
    kw.update(overrides)
    return TrainingArguments(**kw)


def losses(trainer) -> list[float]:
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]
