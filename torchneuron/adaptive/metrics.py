"""Counters of adaptive eager mode: what was recorded, how windows ran, why they flushed."""

from __future__ import annotations

from collections import Counter

_counts: Counter = Counter()
_reasons: Counter = Counter()
_failures: list[str] = []
_eager: Counter = Counter()


def count(name: str, n: int = 1) -> None:
    _counts[name] += n


def count_reason(reason: str) -> None:
    _reasons[reason] += 1


def note_eager(text: str) -> None:
    _eager[text] += 1


def note_failure(text: str) -> None:
    if len(_failures) < 20:
        _failures.append(text)


def get_metrics() -> dict:
    """Totals since start (or the last ``reset_metrics``):

    ``ops_recorded``, ``views_recorded``, ``ops_not_recordable`` (ran eagerly), ``windows``
    (flushed), ``windows_dead`` (no live result: nothing ran), ``windows_compiled`` (a new
    signature compiled), ``window_cache_hits``, ``windows_fused`` (ran compiled),
    ``windows_replayed`` (ran op by op), ``windows_non_fusable``, ``windows_lifted`` (compiled with varying floats as inputs),
    ``windows_varying_floats`` (replayed: floats vary and could not be lifted); ``flush_reasons``; ``not_recorded`` (the ops that ran eagerly and why); the first
    ``failures`` (why a window could not be fused)."""
    out = {k: _counts.get(k, 0) for k in (
        "ops_recorded", "views_recorded", "ops_not_recordable", "windows", "windows_dead",
        "windows_compiled", "window_cache_hits", "windows_fused", "windows_replayed",
        "windows_non_fusable", "windows_lifted", "windows_varying_floats")}
    out["flush_reasons"] = dict(_reasons)
    out["failures"] = list(_failures)
    out["not_recorded"] = dict(_eager.most_common(20))
    return out


def reset_metrics() -> None:
    _counts.clear()
    _reasons.clear()
    _failures.clear()
    _eager.clear()
