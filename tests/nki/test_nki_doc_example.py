"""The worked example of docs/nki.md runs as printed, and prints the profile shown there.

It runs in a child process: the example calls torch.compile(backend="neuron"), which fails
under pytest's log capture (see test_torch_compile.py)."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "nki.md"


def _example() -> str:
    text = DOC.read_text()
    m = re.search(r"<!-- worked-example -->\s*```python\n(.*?)```", text, re.S)
    assert m, "docs/nki.md lost its worked example"
    return m.group(1)


def test_worked_example_runs(tmp_path):
    pytest.importorskip("torch_mlir", reason="the compile extra (torch-mlir, IREE) is not installed")
    pytest.importorskip("iree.compiler", reason="the compile extra (torch-mlir, IREE) is not installed")
    script = tmp_path / "example.py"
    script.write_text(_example())
    env = {**os.environ, "TORCHNEURON_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("TORCHNEURON_COMPILE_FALLBACK", None)
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    out = r.stdout.strip().splitlines()
    assert out[-1] == "worked example OK"
    # the profile summary printed by the example is the one the page shows
    summary = [line for line in out if line.startswith(("NKI launch", "  "))]
    assert summary and all(line in DOC.read_text() for line in summary), summary
