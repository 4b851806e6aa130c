"""Tests of the demo job: corpus, tokenizer, model, and short training runs."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from torchneuron.demo import __main__ as demo_main
from torchneuron.demo import train as train_mod
from torchneuron.demo.corpus import CharTokenizer, Dataset, generate_corpus, unigram_entropy
from torchneuron.demo.model import GPT, GPTConfig

# A tiny configuration so that each training run takes a second or two on CPU.
TINY = dict(
    batch_size=8,
    seq_len=32,
    lr=3e-3,
    d_model=32,
    n_layers=2,
    n_heads=2,
    warmup=5,
    corpus_chars=20_000,
    eval_batches=2,
    verbose=False,
)


def _neuron_available() -> bool:
    try:
        accelerator = torch.accelerator.current_accelerator(check_available=True)
    except Exception:
        accelerator = None
    return (accelerator is not None and accelerator.type == "neuron") or (
        train_mod.neuron_available()
    )


# ---- corpus and tokenizer ----------------------------------------------------------------


def test_corpus_is_deterministic() -> None:
    a = generate_corpus(5_000, seed=7)
    assert a == generate_corpus(5_000, seed=7)
    assert a != generate_corpus(5_000, seed=8)
    assert len(a) >= 5_000
    assert a.endswith("\n")


def test_corpus_has_learnable_structure() -> None:
    text = generate_corpus(20_000)
    lines = text.splitlines()
    assert all(line.endswith(" .") for line in lines)
    # Arithmetic facts are correct.
    sums = [line for line in lines if " + " in line]
    assert sums
    for line in sums:
        lhs, rhs = line.removesuffix(" .").split(" = ")
        a, b = lhs.split(" + ")
        assert int(a) + int(b) == int(rhs)
    # Memorised facts are consistent.
    assert "the capital of france is paris ." in lines
    assert not any(
        line.startswith("the capital of france is") and "paris" not in line for line in lines
    )
    assert 2.5 < unigram_entropy(text) < 3.5


def test_tokenizer_round_trip() -> None:
    tok = CharTokenizer()
    text = generate_corpus(3_000)
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert all(0 <= i < tok.vocab_size for i in ids)
    with pytest.raises(ValueError, match="not in the alphabet"):
        tok.encode("Capital")


def test_dataset_batches() -> None:
    data = Dataset.build(num_chars=10_000)
    x, y = data.batch("train", 4, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 16)
    assert x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
    x2, _ = data.batch("train", 4, 16, torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)


# ---- model -------------------------------------------------------------------------------


def _tiny_model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=46, context=16, d_model=32, n_layers=2, n_heads=4))


def test_model_shapes_and_tied_head() -> None:
    model = _tiny_model()
    idx = torch.randint(0, 46, (3, 16))
    assert model(idx).shape == (3, 16, 46)
    assert model(idx[:, :5]).shape == (3, 5, 46)
    with pytest.raises(ValueError, match="exceeds the context"):
        model(torch.zeros(1, 17, dtype=torch.long))
    # The output head has no weight of its own.
    names = [name for name, _ in model.named_parameters()]
    assert not any("head" in name for name in names)


def test_model_is_causal() -> None:
    model = _tiny_model().eval()
    idx = torch.randint(0, 46, (2, 16), generator=torch.Generator().manual_seed(1))
    changed = idx.clone()
    t = 9
    changed[:, t] = (changed[:, t] + 1) % 46
    with torch.no_grad():
        before, after = model(idx), model(changed)
    torch.testing.assert_close(before[:, :t], after[:, :t], rtol=0, atol=0)
    assert not torch.allclose(before[:, t:], after[:, t:])


# ---- training ----------------------------------------------------------------------------


def test_lr_schedule() -> None:
    lrs = [train_mod.lr_at(s, 100, 1.0, 10) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1)
    assert lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:], strict=False))
    assert lrs[-1] >= 0.1


def test_cpu_training_loss_falls() -> None:
    result = train_mod.train(device="cpu", steps=30, seed=0, **TINY)
    losses = result["losses"]
    assert len(losses) == 30
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5
    assert result["val_loss"] < result["unigram_entropy"] + 0.3
    assert result["tokens_per_s"] > 0
    # Same seed, same trajectory.
    again = train_mod.train(device="cpu", steps=5, seed=0, **TINY)
    assert again["losses"] == losses[:5]


def test_cpu_training_bf16_autocast_runs() -> None:
    result = train_mod.train(device="cpu", steps=5, seed=0, amp_dtype=torch.bfloat16, **TINY)
    assert all(torch.isfinite(torch.tensor(result["losses"])))


def test_generate() -> None:
    model = _tiny_model()
    text = train_mod.generate(model, CharTokenizer(), "the ", 20, torch.device("cpu"))
    assert text.startswith("the ") and len(text) == 24


# ---- placement summary -------------------------------------------------------------------


def test_placement_without_tracking() -> None:
    assert "operator tracking not available" in train_mod.format_placement(None)
    empty: Counter[str] = Counter()
    assert "every op ran on the CPU" in train_mod.format_placement(
        (empty, empty), device_type="cpu"
    )


@pytest.mark.parametrize("fallback_kind", ["dict", "list"])
def test_placement_with_tracking(monkeypatch: pytest.MonkeyPatch, fallback_kind: str) -> None:
    executed: Counter[str] = Counter({"aten::mm": 3})
    fallback: Counter[str] = Counter({"aten::_foo": 1})

    def get_fallback() -> dict[str, int] | list[str]:
        return dict(fallback) if fallback_kind == "dict" else sorted(fallback)

    monkeypatch.setattr(train_mod, "_op_tracking", lambda: (lambda: dict(executed), get_fallback))
    before = train_mod._snapshot_ops()
    executed.update({"aten::mm": 5, "aten::add.Tensor": 2})
    fallback.update({"aten::_bar": 2})
    ops = train_mod._ops_since(before)
    assert ops is not None
    assert ops[0] == Counter({"aten::mm": 5, "aten::add.Tensor": 2})
    if fallback_kind == "dict":
        assert ops[1] == Counter({"aten::_bar": 2})
    else:
        assert set(ops[1]) == {"aten::_foo", "aten::_bar"}
    table = train_mod.format_placement(ops)
    assert "aten::mm" in table and "aten::_bar" in table
    assert "7 op calls" in table


# ---- command line ------------------------------------------------------------------------


def test_cli_defaults() -> None:
    args = demo_main.parse_args([])
    assert (args.device, args.steps, args.amp, args.seed) == ("neuron", 300, "none", 0)


@pytest.mark.skipif(_neuron_available(), reason="neuron is available")
def test_cli_fails_clearly_without_neuron(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo_main.main(["--steps", "1"]) == 2
    assert "'neuron' device is not available" in capsys.readouterr().err


# ---- the device against CPU --------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "amp_dtype", "rtol"),
    [("neuron", None, 1e-3), ("neuron", torch.bfloat16, 5e-2)],
    ids=["neuron-fp32", "neuron-bf16"],
)
def test_device_matches_cpu(device: str, amp_dtype: torch.dtype | None, rtol: float) -> None:
    if not _neuron_available():
        pytest.skip("the neuron device is not available")
    steps = 20
    reference = train_mod.train(device="cpu", steps=steps, amp_dtype=amp_dtype, seed=0, **TINY)
    result = train_mod.train(device=device, steps=steps, amp_dtype=amp_dtype, seed=0, **TINY)
    torch.testing.assert_close(
        torch.tensor(result["losses"]), torch.tensor(reference["losses"]), rtol=rtol, atol=rtol
    )
    if result["ops"] is not None:
        assert sum(result["ops"][0].values()) > 0, "no op was recorded as run on the device"
