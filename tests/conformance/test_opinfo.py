"""OpInfo conformance: every (op, variant, dtype) case on ``neuron`` against CPU.

Cases are parametrised from OpInfo metadata only (fast collection); samples are generated when a
case runs. See ``torchneuron.conformance`` for what each variant checks.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
from contextlib import contextmanager

import pytest

from torchneuron.conformance import cases, runner, xfails


class CaseTimeout(Exception):  # noqa: N818
    pass


@contextmanager
def deadline(seconds: int, node):
    """A case running longer than ``seconds`` fails (a hang is a failure, not a stuck run); a
    hang the alarm cannot interrupt (inside a kernel) kills the run with tracebacks at 3×."""

    def on_alarm(signum, frame):
        node.user_properties.append(("conformance_timeout", True))
        raise CaseTimeout(f"conformance timeout: case still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    faulthandler.dump_traceback_later(seconds * 3, exit=True, file=sys.stderr)
    try:
        yield
    finally:
        signal.alarm(0)
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGALRM, previous)


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    full = metafunc.config.getoption("--conformance-full", default=False)
    params = []
    for c in cases.all_cases(full):
        reason = xfails.reason_for(c.op, c.variant, c.dtype)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(c, id=c.id, marks=marks))
    metafunc.parametrize("case", params)


def test_opinfo(case, request):
    cfg = request.config
    limit = cfg.getoption("--conformance-samples", default=0) or (
        8 if cfg.getoption("--conformance-full", default=False) else 4
    )
    with deadline(cfg.getoption("--conformance-timeout", default=60), request.node):
        try:
            runner.run_case(case, limit=limit)
        except runner.NotApplicable as e:
            pytest.skip(str(e))
