"""Training loop of the demo: a character-level GPT on the generated corpus."""

from __future__ import annotations

import contextlib
import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from torchneuron.demo.corpus import CharTokenizer, Dataset
from torchneuron.demo.model import GPT, GPTConfig

OpCounts = Counter[str]


# ---- device helpers ----------------------------------------------------------------------


def neuron_available() -> bool:
    """True when the ``neuron`` device is registered and usable in this process."""
    module = getattr(torch, "neuron", None)
    if module is not None and callable(getattr(module, "is_available", None)):
        with contextlib.suppress(Exception):
            if module.is_available():
                return True
    try:
        accelerator = torch.accelerator.current_accelerator(check_available=True)
    except Exception:
        return False
    return accelerator is not None and accelerator.type == "neuron"


def resolve_device(device: str | torch.device) -> torch.device:
    """Turn ``device`` into a ``torch.device``, failing clearly if it cannot be used."""
    # Check before torch.device(): an unregistered "neuron" is not even a valid device string.
    is_neuron = str(device).split(":")[0] == "neuron"
    if is_neuron and not neuron_available():
        raise RuntimeError(
            "the 'neuron' device is not available: install torchneuron (pip install -e .) so "
            "that its torch.backends entry point registers the device, or pass --device cpu"
        )
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise RuntimeError(f"invalid device {device!r}: {e}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("CUDA is not available on this machine")
    return dev


def _synchronize(device: torch.device) -> None:
    if device.type == "cpu":
        return
    module = getattr(torch, device.type, None)
    if module is not None and callable(getattr(module, "synchronize", None)):
        module.synchronize()
    else:
        torch.accelerator.synchronize()


def _device_module(device: torch.device) -> Any:
    return None if device.type == "cpu" else getattr(torch, device.type, None)


# ---- operator placement ------------------------------------------------------------------


def _op_tracking() -> tuple[Any, Any] | None:
    """The backend's ``(get_executed_ops, get_fallback_ops)``, or None if it has none."""
    try:
        import torchneuron
    except ImportError:
        return None
    executed = getattr(torchneuron, "get_executed_ops", None)
    fallback = getattr(torchneuron, "get_fallback_ops", None)
    if not (callable(executed) and callable(fallback)):
        return None
    return executed, fallback


def _as_counts(ops: Mapping[str, int] | Iterable[str] | None) -> OpCounts:
    if ops is None:
        return Counter()
    if isinstance(ops, Mapping):
        return Counter({str(k): int(v) for k, v in ops.items()})
    return Counter(str(op) for op in ops)


def _snapshot_ops() -> tuple[OpCounts, OpCounts, bool] | None:
    """Current (executed, fallback, fallback_has_counts), or None without op tracking."""
    tracking = _op_tracking()
    if tracking is None:
        return None
    executed, fallback = tracking
    fallback_ops = fallback()
    return _as_counts(executed()), _as_counts(fallback_ops), isinstance(fallback_ops, Mapping)


def _ops_since(before: tuple[OpCounts, OpCounts, bool] | None) -> tuple[OpCounts, OpCounts] | None:
    """Ops run since ``before``. Counts are differenced; a fallback *list* (no counts) is
    reported whole, since a name already in it may have fallen back again."""
    after = _snapshot_ops()
    if before is None or after is None:
        return None
    executed = after[0] - before[0]
    fallback = after[1] - before[1] if after[2] else after[1]
    return executed, fallback


def format_placement(
    ops: tuple[OpCounts, OpCounts] | None, top: int = 15, device_type: str = "neuron"
) -> str:
    """A table of the most executed ops and the list of ops that fell back to CPU."""
    if ops is None:
        return "operator placement: operator tracking not available"
    executed, fallback = ops
    if device_type == "cpu" and not executed and not fallback:
        return "operator placement: every op ran on the CPU (device cpu)"
    total = sum(executed.values())
    lines = [f"operator placement: {total} op calls on the device, {len(executed)} distinct ops"]
    if executed:
        width = max(len(name) for name, _ in executed.most_common(top))
        lines.append(f"  {'op':<{width}}  {'count':>8}")
        for name, count in executed.most_common(top):
            lines.append(f"  {name:<{width}}  {count:>8}")
        if len(executed) > top:
            rest = total - sum(c for _, c in executed.most_common(top))
            lines.append(f"  ... {len(executed) - top} more ops, {rest} calls")
    if fallback:
        lines.append(f"CPU fallback ops ({len(fallback)}):")
        for name, count in sorted(fallback.items()):
            lines.append(f"  {name}  x{count}" if count > 1 else f"  {name}")
    else:
        lines.append("CPU fallback ops: none")
    return "\n".join(lines)


def peak_memory(device: torch.device) -> int | None:
    """Peak bytes allocated on ``device`` (None on CPU or when the backend cannot say)."""
    module = _device_module(device)
    getter = getattr(module, "max_memory_allocated", None)
    if not callable(getter):
        return None
    try:
        return int(getter(device))
    except Exception:
        return None


def _reset_peak_memory(device: torch.device) -> None:
    reset = getattr(_device_module(device), "reset_peak_memory_stats", None)
    if callable(reset):
        with contextlib.suppress(Exception):
            reset(device)


# ---- training ----------------------------------------------------------------------------


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to ``lr / 10`` (step is 0-based)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def _autocast(
    device: torch.device, amp_dtype: torch.dtype | None
) -> contextlib.AbstractContextManager:
    if amp_dtype is None:
        return contextlib.nullcontext()
    if not torch.amp.is_autocast_available(device.type):
        raise RuntimeError(f"autocast is not available for device type {device.type!r}")
    return torch.autocast(device_type=device.type, dtype=amp_dtype)


@torch.no_grad()
def evaluate(
    model: GPT,
    data: Dataset,
    device: torch.device,
    batch_size: int,
    seq_len: int,
    batches: int = 8,
    amp_dtype: torch.dtype | None = None,
    seed: int = 0,
) -> float:
    """Mean validation loss (nats per character) over ``batches`` random windows."""
    model.eval()
    generator = torch.Generator().manual_seed(seed + 1)
    total = torch.zeros((), device=device)
    for _ in range(batches):
        x, y = data.batch("val", batch_size, seq_len, generator)
        x, y = x.to(device), y.to(device)
        with _autocast(device, amp_dtype):
            logits = model(x)
        total += F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
    model.train()
    return total.item() / batches


@torch.no_grad()
def generate(
    model: GPT,
    tokenizer: CharTokenizer,
    prompt: str,
    max_new_chars: int,
    device: torch.device,
    temperature: float = 0.8,
    seed: int = 0,
) -> str:
    """Sample a continuation of ``prompt``, one character at a time (sampling on CPU)."""
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    ids = tokenizer.encode(prompt)
    for _ in range(max_new_chars):
        window = torch.tensor([ids[-model.config.context :]], device=device)
        logits = model(window)[0, -1].float().cpu()
        probs = torch.softmax(logits / temperature, dim=-1)
        ids.append(int(torch.multinomial(probs, 1, generator=generator)))
    model.train()
    return tokenizer.decode(ids)


def train(
    device: str | torch.device = "neuron",
    steps: int = 300,
    batch_size: int = 24,
    seq_len: int = 64,
    lr: float = 3e-3,
    amp_dtype: torch.dtype | None = None,
    seed: int = 0,
    log_every: int = 25,
    *,
    d_model: int = 128,
    n_layers: int = 4,
    n_heads: int = 4,
    warmup: int = 20,
    weight_decay: float = 0.1,
    grad_clip: float = 1.0,
    corpus_chars: int = 200_000,
    eval_batches: int = 8,
    verbose: bool = True,
) -> dict[str, Any]:
    """Train a small GPT on the generated corpus and report what happened.

    Returns a dict with ``losses`` (training loss per step), ``val_loss``, ``tokens_per_s``
    (over the whole loop), ``wall_time_s``, ``unigram_entropy``, ``num_parameters``,
    ``peak_memory_bytes``, ``ops`` (``(executed, fallback)`` counters or None), and the
    trained ``model`` and ``tokenizer``.
    """
    dev = resolve_device(device)
    say = print if verbose else (lambda *a, **k: None)
    ops_before = _snapshot_ops()
    _reset_peak_memory(dev)

    data = Dataset.build(num_chars=corpus_chars)
    config = GPTConfig(
        vocab_size=data.tokenizer.vocab_size,
        context=seq_len,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
    )
    # Initialise on CPU from the seed, then move: the same weights on every device.
    torch.manual_seed(seed)
    model = GPT(config).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=lr,
        betas=(0.9, 0.95),
    )
    scaler = torch.amp.GradScaler(dev.type) if amp_dtype == torch.float16 else None
    generator = torch.Generator().manual_seed(seed)
    tokens_per_step = batch_size * seq_len

    say(
        f"device {dev} | {model.num_parameters():,} parameters | d_model {d_model}, "
        f"{n_layers} layers, {n_heads} heads, context {seq_len} | batch {batch_size} | "
        f"amp {amp_dtype if amp_dtype is not None else 'off'}"
    )
    say(
        f"corpus: {len(data.train) + len(data.val):,} characters, vocab {config.vocab_size}, "
        f"unigram entropy {data.unigram_entropy:.3f} nats/char"
    )

    losses: list[torch.Tensor] = []
    start = last_time = time.perf_counter()
    last_step = 0
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup)
        x, y = data.batch("train", batch_size, seq_len, generator)
        x, y = x.to(dev), y.to(dev)
        with _autocast(dev, amp_dtype):
            logits = model(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
        losses.append(loss.detach())

        done = step + 1
        if done == 1 or done % log_every == 0 or done == steps:
            value = loss.item()  # the one sync per log line
            now = time.perf_counter()
            rate = (done - last_step) * tokens_per_step / (now - last_time)
            say(
                f"step {done:>5}/{steps} | loss {value:.4f} | lr {lr_at(step, steps, lr, warmup):.2e}"
                f" | {rate:>9,.0f} tokens/s"
            )
            last_time, last_step = now, done

    _synchronize(dev)
    wall = time.perf_counter() - start
    history = torch.stack(losses).float().cpu().tolist() if losses else []
    tokens_per_s = steps * tokens_per_step / wall if wall > 0 else 0.0
    val_loss = evaluate(model, data, dev, batch_size, seq_len, eval_batches, amp_dtype, seed)
    ops = _ops_since(ops_before)
    peak = peak_memory(dev)

    tail = history[-min(len(history), max(1, log_every)) :]
    say(
        f"final: train loss {history[-1] if history else float('nan'):.4f} "
        f"(mean of last {len(tail)} steps {sum(tail) / max(1, len(tail)):.4f}) | "
        f"val loss {val_loss:.4f} | unigram entropy {data.unigram_entropy:.4f}"
    )
    say(f"throughput: {tokens_per_s:,.0f} tokens/s over {steps} steps in {wall:.1f} s")
    say(format_placement(ops, device_type=dev.type))
    if peak is not None:
        say(f"peak device memory allocated: {peak / 2**20:.1f} MiB")
    elif dev.type != "cpu":
        say("peak device memory: not reported by the backend")

    return {
        "device": str(dev),
        "losses": history,
        "val_loss": val_loss,
        "tokens_per_s": tokens_per_s,
        "wall_time_s": wall,
        "unigram_entropy": data.unigram_entropy,
        "num_parameters": model.num_parameters(),
        "peak_memory_bytes": peak,
        "ops": ops,
        "model": model,
        "tokenizer": data.tokenizer,
    }
