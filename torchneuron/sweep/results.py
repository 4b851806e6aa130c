"""The sweep's JSONL results file: one record per (suite, model, mode); a rerun skips done keys."""

from __future__ import annotations

import json
import os


def key(rec: dict) -> tuple[str, str, str]:
    return (rec["suite"], rec["model"], rec["mode"])


def load(path: str) -> list[dict]:
    """All complete records (a torn last line from an interrupted run is ignored); last one wins."""
    recs: dict = {}
    if not os.path.exists(path):
        return []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and {"suite", "model", "mode"} <= rec.keys():
                recs[key(rec)] = rec
    return list(recs.values())


def done_keys(path: str) -> set:
    return {key(r) for r in load(path)}


def append(path: str, rec: dict) -> None:
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    torn = False
    if os.path.exists(path) and os.path.getsize(path):
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            torn = f.read(1) != b"\n"  # an interrupted write: start a fresh line
    with open(path, "a") as f:
        f.write(("\n" if torn else "") + json.dumps(rec, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
