"""``torchneuron sweep``: select models, run each (model, mode) in a worker, append records."""

from __future__ import annotations

import fnmatch
import os
import queue
import sys
import threading
import time

from . import MODES, SUITES, registry, results
from .runner import Worker


def select(suite: str, *, filter_: str | None = None, shard: str | None = None,
           limit: int | None = None, models: list[str] | None = None) -> list[str]:
    names = list(models) if models is not None else registry.list_models(suite)
    if filter_:
        pats = filter_.split(",")
        names = [n for n in names if any(fnmatch.fnmatch(n, p) if any(c in p for c in "*?[") else p in n
                                         for p in pats)]
    if shard:
        i, n = (int(v) for v in shard.split("/"))
        if not 0 <= i < n:
            raise ValueError(f"--shard {shard}: need 0 <= i < n")
        names = names[i::n]
    if limit is not None:
        names = names[:limit]
    return names


class _Progress:
    def __init__(self, total: int, quiet: bool):
        self.total, self.n, self.t0, self.quiet = total, 0, time.perf_counter(), quiet
        self.bar = None
        if not quiet:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="run", file=sys.stderr, dynamic_ncols=True)
            except ImportError:
                pass

    def update(self, rec: dict, tally: dict) -> None:
        self.n += 1
        desc = f"{rec['suite']}:{rec['model']}[{rec['mode']}] {rec['status']}"
        if self.bar is not None:
            self.bar.set_postfix_str(f"pass {tally.get('pass', 0)} fail {tally.get('fail', 0)} skip {tally.get('skip', 0)}")
            self.bar.set_description_str(desc[:48])
            self.bar.update(1)
        elif not self.quiet:
            el = time.perf_counter() - self.t0
            eta = el / self.n * (self.total - self.n)
            print(f"[{self.n}/{self.total}] {desc} ({rec['seconds']:.1f}s) elapsed {el:.0f}s eta {eta:.0f}s",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_sweep(suites: list[str], modes: list[str], out: str, *, limit: int | None = None,
              shard: str | None = None, filter_: str | None = None, timeout: float = 180.0,
              models: list[str] | dict[str, list[str]] | None = None, quiet: bool = False,
              jobs: int = 1, verify_regions: bool = False) -> list[dict]:
    """Run every selected (suite, model, mode) not yet in ``out``; each of ``jobs`` reused worker
    processes takes the next run as it finishes one. ``models`` is an explicit model list, or
    one list per suite. ``verify_regions``: the workers check every compiled region against its
    eager graph (``TORCHNEURON_VERIFY_REGIONS=1``, ``compiler/verify.py``); a region that differs
    fails its record (cause ``numerics``, naming the first differing node)."""
    for s in suites:
        if s not in SUITES and s != "_selftest":
            raise ValueError(f"unknown suite {s!r} (have {', '.join(SUITES)})")
    for m in modes:
        if m not in MODES:
            raise ValueError(f"unknown mode {m!r} (have {', '.join(MODES)})")
    if jobs < 1:
        raise ValueError(f"--jobs {jobs}: need at least one worker")
    env = dict(os.environ, TORCHNEURON_VERIFY_REGIONS="1") if verify_regions else None
    done = results.done_keys(out)
    todo = [(s, n, m) for s in suites
            for n in select(s, filter_=filter_, shard=shard, limit=limit,
                            models=models.get(s, []) if isinstance(models, dict) else models)
            for m in modes if (s, n, m) not in done]
    if not quiet:
        print(f"sweep: {len(todo)} runs to do ({len(done)} already in {out}), {jobs} worker(s)", file=sys.stderr)
    new: list[dict] = []
    tally: dict = {}
    prog = _Progress(len(todo), quiet)
    pending: queue.Queue = queue.Queue()
    for task in todo:
        pending.put(task)
    lock = threading.Lock()  # the results file, the tally and the progress bar
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            with Worker(timeout=timeout, env=env) as w:
                while not errors:
                    try:
                        s, n, m = pending.get_nowait()
                    except queue.Empty:
                        return
                    rec = w.run(s, n, m)
                    with lock:
                        results.append(out, rec)
                        new.append(rec)
                        tally[rec["status"]] = tally.get(rec["status"], 0) + 1
                        prog.update(rec, tally)
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the calling thread
            errors.append(exc)

    try:
        if jobs == 1:
            serve()
        else:
            threads = [threading.Thread(target=serve, name=f"sweep-worker-{i}", daemon=True)
                       for i in range(min(jobs, len(todo)))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        prog.close()
    if errors:
        raise errors[0]
    return new
