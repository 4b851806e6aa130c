"""Conformance suite plumbing: options, the strict xfail table, the summary line, the JSON report.

``pytest tests/conformance`` runs the deterministic CI shard; ``--conformance-full`` runs every
OpInfo case (``make conformance``). Options fall back to their defaults when this conftest is
not an initial one (``pytest tests``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from torchneuron.conformance.report import Report, Result

_report_key = pytest.StashKey[Report]()
DEFAULTS = {
    "conformance_full": False,
    "conformance_report": "conformance_report.json",
    "conformance_timeout": 60,
    "conformance_samples": 0,
}


def pytest_addoption(parser):
    g = parser.getgroup("conformance")
    g.addoption("--conformance-full", action="store_true", help="run every OpInfo case, not the CI shard")
    g.addoption("--conformance-report", default=DEFAULTS["conformance_report"], help="JSON report path")
    g.addoption("--conformance-timeout", type=int, default=DEFAULTS["conformance_timeout"],
                help="seconds per case before it counts as a hang (failure)")
    g.addoption("--conformance-samples", type=int, default=DEFAULTS["conformance_samples"],
                help="max OpInfo samples per case (0: 8 for the full run, 4 for the shard)")


def option(config, name: str):
    return config.getoption("--" + name.replace("_", "-"), default=DEFAULTS[name])


def _report(config) -> Report:
    rep = config.stash.get(_report_key, None)
    if rep is None:
        rep = Report(mode="full" if option(config, "conformance_full") else "shard")
        rep.stream_to(option(config, "conformance_report") + ".partial.jsonl")
        config.stash[_report_key] = rep
    return rep


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield  # outermost wrapper: sees the report after the xfail plugin adjusted it
    props = dict(report.user_properties)
    case = props.get("conformance_case")
    if case is not None and (
        report.when == "call" or (report.when == "setup" and not report.passed)
        or (report.when == "teardown" and report.failed)
    ):
        _record(_report(item.config), case, report, props)
    return report


def _record(rep: Report, case, report, props) -> None:
    op, variant, dtype = case
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if report.skipped else "failed"  # strict: an XPASS fails
        reason = report.wasxfail
    elif report.skipped:
        outcome = "skipped"
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else ""
    else:
        outcome = "passed" if report.passed else "failed"
        reason = "" if report.passed else _first_line(report)
    result = Result(op, variant, dtype, outcome, round(report.duration, 3), reason[:500],
                    timeout=bool(props.get("conformance_timeout")))
    last = rep.results[-1] if rep.results else None
    if report.when == "teardown" and last and (last.op, last.variant, last.dtype) == tuple(case):
        rep.results[-1] = result  # a teardown failure (pending device error) fails the case
    else:
        rep.add(result)
    rep.stream(result)


def _first_line(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message.strip()
    return str(report.longrepr).strip().splitlines()[-1] if report.longrepr else "failed"


def pytest_terminal_summary(terminalreporter, config):
    rep = config.stash.get(_report_key, None)
    if rep is None or not rep.results:
        return
    path = option(config, "conformance_report")
    rep.write(path)
    t = rep.targets()
    terminalreporter.write_line(
        f"conformance targets: forward {t['forward_pass_rate']} of {t['forward_pairs']} (op, dtype) pairs, "
        f"grad {t['grad_pass_rate']} of {t['grad_ops']} ops, {t['timeouts']} timeouts; report: {path}"
    )
    terminalreporter.write_line(rep.summary_line())


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here not in Path(item.path).parents:
            continue  # this hook sees the whole session's items; only OpInfo cases are ours
        case = getattr(getattr(item, "callspec", None), "params", {}).get("case")
        if case is not None:
            item.user_properties.append(("conformance_case", (case.op, case.variant, case.dtype)))
