"""Deferred device errors.

On the real chip a kernel runs asynchronously: an error it hits (an index out of range, say)
is only seen by the host at the next synchronisation point. The simulated queue keeps that
contract: a failing device operation records a :class:`NeuronRuntimeError` with its context
(stage, op, input shapes and dtypes, the user's Python stack at the launch) and returns
outputs with the right metadata; the next synchronisation point raises the *earliest* pending
error, with the count of later ones. ``NEURON_LAUNCH_BLOCKING=1`` raises at the op instead.
"""

from __future__ import annotations

import os
import threading
import traceback
from dataclasses import dataclass, field

from . import lazy

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_MARKERS = (os.sep + "torch" + os.sep, os.sep + "torchneuron" + os.sep, "<frozen ")


class NeuronRuntimeError(RuntimeError):
    """An error raised by a device operation, reported at a synchronisation point."""

    def __init__(self, message: str, context: ErrorContext | None = None):
        super().__init__(message)
        self.context = context


class NeuronFallbackError(RuntimeError):
    """An operator would fall back to the CPU and ``TORCHNEURON_FALLBACK=error`` forbids it."""


@dataclass
class ErrorContext:
    stage: str
    op: str
    inputs: list[str]
    stack: list[traceback.FrameSummary]
    cause: BaseException
    later_errors: int = field(default=0)

    def format(self, *, launch_blocking: bool = False) -> str:
        where = "".join(traceback.format_list(self.stack)).rstrip() or "  <no user frame>"
        inputs = ", ".join(self.inputs) or "none"
        lines = [
            f"{type(self.cause).__name__} in {self.stage} of {self.op}: {self.cause}",
            f"  inputs: {inputs}",
            "  launched from (most recent call last):",
            where,
        ]
        if self.later_errors:
            lines.append(
                f"  ({self.later_errors} later device error(s) were discarded; "
                "the earliest one is reported)"
            )
        if not launch_blocking:
            lines.append(
                "  Device errors are reported at the next synchronisation point; set "
                "NEURON_LAUNCH_BLOCKING=1 to raise them at the operation that failed."
            )
        return "\n".join(lines)


def describe_value(v: object) -> str | None:
    import torch

    if isinstance(v, torch.Tensor):
        return f"{v.device.type}:{str(v.dtype).removeprefix('torch.')}{list(v.shape)}"
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, torch.Tensor) for x in v):
        return "[" + ", ".join(describe_value(x) or "?" for x in v) + "]"
    return None


_replay = threading.local()


def set_replay_stack(frames: list[traceback.FrameSummary] | None) -> None:
    """While recorded work is replayed, errors name the stack where the op was *launched*."""
    _replay.frames = frames


def user_stack(limit: int = 12) -> list[traceback.FrameSummary]:
    """The caller's stack without frames from torch or torchneuron (the user's own code)."""
    frames = getattr(_replay, "frames", None)
    if frames is None:
        frames = traceback.extract_stack()[:-1]
    user = [f for f in frames if not any(m in f.filename for m in _TORCH_MARKERS)]
    return user[-limit:]


def launch_blocking() -> bool:
    return os.environ.get("NEURON_LAUNCH_BLOCKING", "0") not in ("", "0", "false", "False")


class PendingErrors:
    """The queue's error slot: the earliest error wins, later ones are counted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._first: ErrorContext | None = None
        self._later = 0

    @property
    def pending(self) -> bool:
        return self._first is not None

    def record(self, ctx: ErrorContext) -> None:
        with self._lock:
            if self._first is None:
                self._first = ctx
            else:
                self._later += 1

    def take(self) -> ErrorContext | None:
        with self._lock:
            ctx, self._first = self._first, None
            if ctx is not None:
                ctx.later_errors = self._later
            self._later = 0
            return ctx

    def raise_pending(self) -> None:
        """Raise the earliest pending error (clearing the slot) if there is one.

        A synchronisation point: work recorded by adaptive eager mode runs first."""
        flush = lazy.FLUSH
        if flush is not None:
            flush()
        if self._first is None:
            return
        ctx = self.take()
        if ctx is not None:
            raise NeuronRuntimeError(ctx.format(), ctx) from ctx.cause


def make_context(stage: str, op_name: str, args: tuple, kwargs: dict, cause: BaseException) -> ErrorContext:
    descs = [d for d in (describe_value(a) for a in args) if d]
    descs += [f"{k}={d}" for k, d in ((k, describe_value(v)) for k, v in kwargs.items()) if d]
    return ErrorContext(stage=stage, op=op_name, inputs=descs, stack=user_stack(), cause=cause)


ERRORS = PendingErrors()
