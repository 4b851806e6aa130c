"""Fixtures for the compiler tests: a private executable cache, a private AOTAutograd cache and a
clean Dynamo per test."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torch_mlir", reason="the compile extra (torch-mlir, IREE) is not installed")
pytest.importorskip("iree.compiler", reason="the compile extra (torch-mlir, IREE) is not installed")


@pytest.fixture(scope="session")
def cache_root(tmp_path_factory):
    return tmp_path_factory.mktemp("tn_compile_cache")


@pytest.fixture(autouse=True)
def _isolated_compiler(cache_root, monkeypatch, tmp_path_factory):
    from torchneuron.compiler import reset_metrics
    from torchneuron.compiler.cache import CACHE
    from torchneuron.compiler.lowering_cache import LOWERED

    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", str(cache_root))
    # AOTAutograd's cache (graph_cache.py) per test: a test compiles what it compiles
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor")))
    monkeypatch.delenv("TORCHNEURON_DUMP_DIR", raising=False)
    monkeypatch.delenv("TORCHNEURON_COMPILE_FALLBACK", raising=False)
    torch._dynamo.reset()
    reset_metrics()
    yield
    torch._dynamo.reset()
    CACHE.clear_memory()
    LOWERED.clear_memory()
