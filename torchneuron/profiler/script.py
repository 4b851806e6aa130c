"""``torchneuron estimate script.py``: run a script and estimate each of its steps.

The script runs as ``__main__`` while a recording session collects its device ops. A step ends
at every ``optimizer.step()`` (a global optimizer post-hook marks it); a script without an
optimizer is one step. Prints one line per step and the table of the last step (steady state).
"""

from __future__ import annotations

import json
import runpy
import sys
import time

from ..runtime.target import TARGETS
from .estimate import Estimate, from_events
from .recorder import Session


def run_script(script: str, args: list[str] | None = None) -> tuple[Session, list[int]]:
    """Run ``script`` under a session; returns it and the step boundaries (perf_counter_ns)."""
    import torch.optim.optimizer as optim

    marks: list[int] = []
    handle = optim.register_optimizer_step_post_hook(lambda *_a, **_k: marks.append(time.perf_counter_ns()))
    old_argv = sys.argv
    sys.argv = [script, *(args or [])]
    try:
        with Session(memory=False) as s:
            runpy.run_path(script, run_name="__main__")
    finally:
        sys.argv = old_argv
        handle.remove()
    return s, marks


def split_steps(session: Session, marks: list[int]) -> list[list]:
    steps: list[list] = [[] for _ in range(len(marks) + 1)]
    i = 0
    for ev in session.events:
        while i < len(marks) and ev.start_ns > marks[i]:
            i += 1
        steps[i].append(ev)
    if len(steps) > 1 and not steps[-1]:
        steps.pop()
    return steps


def estimate_script(script: str, args: list[str] | None = None, target: str | None = None, top: int = 10, as_json: bool = False) -> int:
    tgt = TARGETS[target] if target else None
    session, marks = run_script(script, args)
    steps = [from_events(evs, tgt, label=f"step {i}") for i, evs in enumerate(split_steps(session, marks))]
    if as_json:
        print(json.dumps({"steps": [e.to_dict() for e in steps]}, indent=2))
        return 0
    _print_steps(steps, top)
    return 0


def _print_steps(steps: list[Estimate], top: int) -> None:
    from .estimate import _fmt_s

    if not steps:
        print("no device ops recorded")
        return
    print(f"{'step':>6}{'ops':>8}{'estimated':>14}{'simulator':>14}")
    for i, e in enumerate(steps):
        print(f"{i:>6}{len(e.events):>8}{_fmt_s(e.total_s):>14}{_fmt_s(e.measured_s):>14}")
    print()
    print(steps[-1].table(top=top))
