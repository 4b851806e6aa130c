"""Launch ``nprocs`` Python processes the way torchrun does (env:// on 127.0.0.1, a free port)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def needs_native_hooks():
    """Mark for cases that need torchneuron's native device hooks (pinned memory, storage
    resize: DDP find_unused_parameters/static_graph, FSDP2); skipped where no compiler built them."""
    import pytest

    import torchneuron.native as native

    return pytest.mark.skipif(not native.available(), reason=f"native hooks: {native.status()['reason']}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(scenario: str, nprocs: int = 2, *, timeout: float = 120, env: dict | None = None,
           args: list[str] | None = None) -> list[dict]:
    """Run ``workers.py <scenario>`` on ``nprocs`` ranks; returns each rank's JSON result."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for rank in range(nprocs):
            e = dict(os.environ)
            e.update(
                MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                LOCAL_RANK=str(rank), WORLD_SIZE=str(nprocs), LOCAL_WORLD_SIZE=str(nprocs),
                OMP_NUM_THREADS="1", PYTHONPATH=str(REPO),
            )
            if env:
                e.update(env)
            out = Path(tmp) / f"rank{rank}.json"
            cmd = [sys.executable, str(HERE / "workers.py"), scenario, str(out), *(args or [])]
            procs.append((subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True), out))
        results = []
        try:
            for p, out in procs:
                try:
                    log, _ = p.communicate(timeout=timeout)
                except subprocess.TimeoutExpired:
                    p.kill()
                    log, _ = p.communicate()
                    raise AssertionError(f"{scenario}: rank timed out\n{log[-4000:]}") from None
                if not out.exists():
                    raise AssertionError(f"{scenario}: rank exited {p.returncode} with no result\n{log[-6000:]}")
                r = json.loads(out.read_text())
                r["_log"] = log
                r["_rc"] = p.returncode
                results.append(r)
        finally:
            for p, _ in procs:
                if p.poll() is None:
                    p.kill()
        return results
