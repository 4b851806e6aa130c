"""Adaptive eager mode: device ops are recorded and run fused at synchronisation points,
with eager semantics (see ``docs/adaptive.md``)."""

from .executor import CACHE
from .metrics import get_metrics, reset_metrics
from .mode import (
    MODES,
    execution_mode,
    flush,
    from_environment,
    get_execution_mode,
    set_execution_mode,
)

__all__ = [
    "CACHE", "MODES", "execution_mode", "flush", "from_environment", "get_execution_mode",
    "get_metrics", "reset_metrics", "set_execution_mode",
]
