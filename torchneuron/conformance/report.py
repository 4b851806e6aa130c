"""Conformance outcomes: the summary line and the JSON report."""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field

OUTCOMES = ("passed", "xfailed", "failed", "skipped")


@dataclass
class Result:
    op: str
    variant: str
    dtype: str
    outcome: str  # one of OUTCOMES
    seconds: float = 0.0
    reason: str = ""  # xfail reason, skip reason or the first line of the failure
    timeout: bool = False


@dataclass
class Report:
    mode: str = "shard"
    results: list[Result] = field(default_factory=list)
    started: float = field(default_factory=time.time)

    stream_path: str | None = None

    def add(self, result: Result) -> None:
        self.results.append(result)

    def stream_to(self, path: str) -> None:
        """Also append every outcome to ``path`` (JSON lines) as it happens: a run that is killed
        (hang, crash) still leaves its results."""
        self.stream_path = path
        open(path, "w").close()

    def stream(self, result: Result) -> None:
        if self.stream_path:
            with open(self.stream_path, "a") as f:
                f.write(json.dumps(asdict(result)) + "\n")

    def counts(self) -> Counter:
        return Counter(r.outcome for r in self.results)

    def summary_line(self) -> str:
        c = self.counts()
        line = f"conformance: {c['passed']} passed, {c['xfailed']} xfailed, {c['failed']} failed"
        return line + (f" ({c['skipped']} not applicable)" if c["skipped"] else "")

    @staticmethod
    def _rates(results: list[Result], key) -> dict[str, dict]:
        groups: dict[str, Counter] = defaultdict(Counter)
        for r in results:
            groups[key(r)][r.outcome] += 1
        out = {}
        for k in sorted(groups):
            g = groups[k]
            run = g["passed"] + g["xfailed"] + g["failed"]
            out[k] = {**{o: g[o] for o in OUTCOMES}, "pass_rate": round(g["passed"] / run, 4) if run else None}
        return out

    def targets(self) -> dict:
        """The issue's targets: forward (op, dtype) pairs and differentiable ops."""
        fwd = [r for r in self.results if r.variant == "forward" and r.outcome != "skipped"]
        grad = [r for r in self.results if r.variant == "grad" and r.outcome != "skipped"]

        def rate(rs):
            return round(sum(r.outcome == "passed" for r in rs) / len(rs), 4) if rs else None

        def supported(rs):  # without the expected failures (dtypes the device has no type for)
            return rate([r for r in rs if r.outcome != "xfailed"])

        return {
            "forward_pass_rate": rate(fwd), "forward_pass_rate_excluding_xfails": supported(fwd),
            "forward_pairs": len(fwd), "forward_target": 0.99,
            "grad_pass_rate": rate(grad), "grad_pass_rate_excluding_xfails": supported(grad),
            "grad_ops": len(grad), "grad_target": 0.98,
            "timeouts": sum(r.timeout for r in self.results),
        }

    def to_json(self) -> dict:
        ok = self.results
        xfail_reasons = Counter(r.reason for r in ok if r.outcome == "xfailed")
        return {
            "mode": self.mode,
            "seconds": round(time.time() - self.started, 1),
            "summary": {o: self.counts()[o] for o in OUTCOMES},
            "summary_line": self.summary_line(),
            "targets": self.targets(),
            "by_dtype": self._rates(ok, lambda r: r.dtype),
            "by_variant": self._rates(ok, lambda r: r.variant),
            "xfails_by_reason": dict(xfail_reasons.most_common()),
            "failures": [asdict(r) for r in ok if r.outcome == "failed"],
            "cases": [asdict(r) for r in ok],
        }

    def write(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f, indent=1)
            f.write("\n")
