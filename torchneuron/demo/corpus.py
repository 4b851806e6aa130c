"""A deterministic, generated training corpus and a character-level tokenizer.

The corpus is produced by a small probabilistic grammar with a fixed seed, so the demo needs
no download and no shipped data. It mixes several kinds of line, each with structure a small
language model can learn:

* agreement sentences ("the old fox chases two small birds .") where the verb form follows
  the number of the subject;
* arithmetic facts with digits ("27 + 15 = 42 .");
* memorised facts from fixed tables ("the capital of france is paris .");
* successor facts ("after tuesday comes wednesday .", "after seven comes eight .").

Everything is lower case, so the alphabet is small and fixed.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch

ALPHABET = "\n !',.0123456789=+-?abcdefghijklmnopqrstuvwxyz"

_ADJECTIVES = (
    "old", "young", "small", "big", "red", "green", "quiet", "happy",
    "clever", "lazy", "brave", "tired", "hungry", "gentle",
)  # fmt: skip
# noun -> plural
_NOUNS = {
    "fox": "foxes", "dog": "dogs", "cat": "cats", "bird": "birds", "farmer": "farmers",
    "child": "children", "teacher": "teachers", "horse": "horses", "mouse": "mice",
    "sailor": "sailors", "baker": "bakers", "wolf": "wolves",
}  # fmt: skip
# verb -> third person singular
_VERBS = {
    "chase": "chases", "watch": "watches", "follow": "follows", "help": "helps",
    "see": "sees", "find": "finds", "carry": "carries", "greet": "greets",
}  # fmt: skip
_ADVERBS = ("slowly", "quickly", "often", "never", "always", "quietly")
_NUMBER_WORDS = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    "ten", "eleven", "twelve",
)  # fmt: skip
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = (
    "january", "february", "march", "april", "may", "june", "july", "august",
    "september", "october", "november", "december",
)  # fmt: skip
_CAPITALS = {
    "france": "paris", "spain": "madrid", "italy": "rome", "germany": "berlin",
    "japan": "tokyo", "egypt": "cairo", "peru": "lima", "kenya": "nairobi",
    "norway": "oslo", "canada": "ottawa", "chile": "santiago", "greece": "athens",
}  # fmt: skip
_COLOURS = {
    "grass": "green", "snow": "white", "the sky": "blue", "coal": "black",
    "a lemon": "yellow", "blood": "red", "an orange": "orange", "a plum": "purple",
}  # fmt: skip


def _noun_phrase(rng: random.Random) -> tuple[str, bool]:
    """Return a noun phrase and whether it is plural."""
    noun = rng.choice(list(_NOUNS))
    adjective = rng.choice(_ADJECTIVES) + " " if rng.random() < 0.6 else ""
    if rng.random() < 0.5:
        return f"the {adjective}{noun}", False
    count = rng.choice(_NUMBER_WORDS[2:])
    return f"{count} {adjective}{_NOUNS[noun]}", True


def _agreement_sentence(rng: random.Random) -> str:
    subject, plural = _noun_phrase(rng)
    obj, _ = _noun_phrase(rng)
    verb = rng.choice(list(_VERBS))
    verb = verb if plural else _VERBS[verb]
    adverb = " " + rng.choice(_ADVERBS) if rng.random() < 0.3 else ""
    return f"{subject}{adverb} {verb} {obj} ."


def _arithmetic_fact(rng: random.Random) -> str:
    a, b = rng.randint(0, 49), rng.randint(0, 49)
    if rng.random() < 0.5 or a < b:
        return f"{a} + {b} = {a + b} ."
    return f"{a} - {b} = {a - b} ."


def _table_fact(rng: random.Random) -> str:
    if rng.random() < 0.6:
        country = rng.choice(list(_CAPITALS))
        return f"the capital of {country} is {_CAPITALS[country]} ."
    thing = rng.choice(list(_COLOURS))
    return f"{thing} is {_COLOURS[thing]} ."


def _successor_fact(rng: random.Random) -> str:
    sequence = rng.choice((_DAYS, _MONTHS, _NUMBER_WORDS))
    i = rng.randrange(len(sequence) - 1)
    return f"after {sequence[i]} comes {sequence[i + 1]} ."


_GENERATORS = (
    (_agreement_sentence, 0.45),
    (_arithmetic_fact, 0.2),
    (_table_fact, 0.15),
    (_successor_fact, 0.2),
)


def generate_corpus(num_chars: int = 200_000, seed: int = 1234) -> str:
    """Generate at least ``num_chars`` characters of text, one sentence per line.

    The output depends only on ``num_chars`` and ``seed``.
    """
    rng = random.Random(seed)
    generators = [g for g, _ in _GENERATORS]
    weights = [w for _, w in _GENERATORS]
    lines: list[str] = []
    total = 0
    while total < num_chars:
        line = rng.choices(generators, weights)[0](rng)
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines) + "\n"


class CharTokenizer:
    """Maps each character of a fixed alphabet to an integer id and back."""

    def __init__(self, alphabet: str = ALPHABET) -> None:
        if len(set(alphabet)) != len(alphabet):
            raise ValueError("alphabet has repeated characters")
        self.alphabet = alphabet
        self._ids = {ch: i for i, ch in enumerate(alphabet)}

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet)

    def encode(self, text: str) -> list[int]:
        try:
            return [self._ids[ch] for ch in text]
        except KeyError as e:
            raise ValueError(f"character {e.args[0]!r} is not in the alphabet") from None

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.alphabet[i] for i in ids)


def unigram_entropy(text: str) -> float:
    """Entropy in nats of the character frequencies of ``text``: the loss of the best
    model that ignores context, for reference against the trained loss."""
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log(c / n) for c in counts.values())


@dataclass
class Dataset:
    """The tokenized corpus split into a training and a validation stream."""

    tokenizer: CharTokenizer
    train: torch.Tensor  # int64, 1-D
    val: torch.Tensor  # int64, 1-D
    unigram_entropy: float

    @classmethod
    def build(
        cls, num_chars: int = 200_000, seed: int = 1234, val_fraction: float = 0.1
    ) -> Dataset:
        text = generate_corpus(num_chars, seed)
        tokenizer = CharTokenizer()
        ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
        n_val = int(len(ids) * val_fraction)
        return cls(tokenizer, ids[:-n_val], ids[-n_val:], unigram_entropy(text))

    def batch(
        self, split: str, batch_size: int, seq_len: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random windows (inputs, next-token targets), each ``[batch_size, seq_len]``, on CPU."""
        data = self.train if split == "train" else self.val
        starts = torch.randint(0, len(data) - seq_len - 1, (batch_size,), generator=generator)
        offsets = torch.arange(seq_len + 1)
        windows = data[starts[:, None] + offsets]
        return windows[:, :-1], windows[:, 1:]
