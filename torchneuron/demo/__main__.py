"""``python -m torchneuron.demo``: train a small GPT language model on the ``neuron`` device."""

from __future__ import annotations

import argparse
import sys
import time

import torch

from torchneuron.demo.train import generate, resolve_device, train

AMP_DTYPES: dict[str, torch.dtype | None] = {
    "none": None,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m torchneuron.demo",
        description="Train a small decoder-only transformer on a generated text corpus.",
    )
    parser.add_argument("--device", default="neuron", help="torch device (default: neuron)")
    parser.add_argument("--steps", type=int, default=300, help="training steps (default: 300)")
    parser.add_argument("--amp", choices=sorted(AMP_DTYPES), default="none", help="autocast dtype")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=24)
    parser.add_argument("--seq-len", type=int, default=64, help="context length")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument(
        "--sample-chars",
        type=int,
        default=160,
        help="characters to sample after training (0: none)",
    )
    parser.add_argument("--temperature", type=float, default=0.5, help="sampling temperature")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        device = resolve_device(args.device)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    result = train(
        device=device,
        steps=args.steps,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        lr=args.lr,
        amp_dtype=AMP_DTYPES[args.amp],
        seed=args.seed,
        log_every=args.log_every,
    )
    if args.sample_chars > 0:
        text = generate(
            result["model"],
            result["tokenizer"],
            "the ",
            args.sample_chars,
            device,
            temperature=args.temperature,
            seed=args.seed,
        )
        print("sample:")
        print("  " + text.replace("\n", "\n  ").rstrip())
    print(f"total wall time: {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
