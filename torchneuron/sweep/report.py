"""``torchneuron sweep-report``: Markdown and HTML from a sweep's JSONL results.

Pass rate = passed / total where *total* counts the models that build and run on CPU; models that
do not (status ``skip``) are listed separately and not held against the device.
"""

from __future__ import annotations

import html
import os
import re
from collections import Counter, defaultdict

from . import results


def family(rec: dict) -> str:
    """The record's family (set by the registry); older records: derived from the model name."""
    if rec.get("family"):
        return rec["family"]
    if rec["suite"].startswith("torchvision"):
        from .registry import tv_family

        return tv_family(rec["model"])
    return rec["model"]


def skip_reason(rec: dict) -> str:
    """A skip's error with the numbers blanked, so that one cause groups its models."""
    err = rec.get("error") or ""
    return re.sub(r"\d+", "N", err)[:90]


def summarize(recs: list[dict]) -> dict:
    rows: dict = defaultdict(lambda: {"pass": 0, "fail": 0, "skip": 0})
    fams: dict = defaultdict(lambda: {"pass": 0, "fail": 0, "skip": 0})
    fallback: Counter = Counter()
    fallback_models: Counter = Counter()
    causes: Counter = Counter()
    errors: Counter = Counter()
    skips: Counter = Counter()
    for r in recs:
        rows[(r["suite"], r["mode"])][r["status"]] += 1
        fams[(r["suite"], family(r), r["mode"])][r["status"]] += 1
        for op, n in (r.get("fallback_ops") or {}).items():
            fallback[op] += n
            fallback_models[op] += 1
        if r["status"] == "skip":
            skips[(r["suite"], skip_reason(r))] += 1
        if r["status"] == "fail":
            causes[r.get("cause") or "unknown"] += 1
            errors[(r.get("cause") or "unknown", (r.get("error") or "")[:120])] += 1
    return {"rows": dict(rows), "families": dict(fams), "fallback": fallback,
            "fallback_models": fallback_models, "causes": causes, "errors": errors, "skips": skips}


# float32's smallest normal number: a reference below it is compared absolutely (runner.compare_outputs)
_TINY = 1.1754943508222875e-38


def numerics(recs: list[dict]) -> dict:
    """Per mode, over the passing runs: how their outputs compared with the CPU's.

    ``relative``: runs compared relative to each output's largest reference value (records with
    ``rel_err``), with the median and largest ``rel_err``; ``absolute``: those whose whole reference
    was zeros or subnormal (``ref_scale``), which only an absolute tolerance can compare; ``unrecorded``: records
    from before the relative comparison, or with no floating-point output."""
    out: dict = {}
    for mode in sorted({r["mode"] for r in recs}):
        rel, absolute, unrecorded = [], [], 0
        for r in recs:
            if r["mode"] != mode or r["status"] != "pass":
                continue
            if r.get("rel_err") is None:
                unrecorded += 1
            elif r.get("ref_scale") is not None and r["ref_scale"] < _TINY:
                absolute.append(r["model"])
            else:
                rel.append(r["rel_err"])
        rel.sort()
        out[mode] = {"relative": len(rel), "median": rel[len(rel) // 2] if rel else None,
                     "max": rel[-1] if rel else None, "absolute": sorted(absolute), "unrecorded": unrecorded}
    return out


def _errors(n: dict) -> tuple[str, str]:
    """A mode's median and largest ``rel_err``, formatted (empty when none was recorded)."""
    return tuple(f"{n[k]:.2g}" if n[k] is not None else "" for k in ("median", "max"))


def _numerics_lines(recs: list[dict]) -> list[str]:
    lines = ["", "## Numerics of the passing runs", "",
             "Outputs are compared with the CPU's relative to each output's largest reference value "
             "(`rel_err`; tolerance 1e-3). A reference that is all zeros or subnormal can only be compared "
             "with an absolute tolerance; records without `rel_err` predate the relative comparison.", "",
             "| mode | compared relatively | median rel_err | largest rel_err | compared absolutely | not recorded |",
             "|---|---|---|---|---|---|"]
    for mode, n in numerics(recs).items():
        med, mx = _errors(n)
        absolute = f"{len(n['absolute'])} ({', '.join(n['absolute'][:8])})" if n["absolute"] else "0"
        lines.append(f"| {mode} | {n['relative']} | {med} | {mx} | {absolute} | {n['unrecorded']} |")
    return lines


def region_checks(recs: list[dict]) -> dict:
    """Per mode, the runs made with ``--verify-regions`` (records with ``region_mismatches``): how many,
    how many had a region computing a wrong result, how many only amplified rounding (with the models)."""
    out: dict = {}
    for r in recs:
        if "region_mismatches" not in r:
            continue
        m = out.setdefault(r["mode"], {"checked": 0, "wrong": [], "amplified": []})
        m["checked"] += 1
        if r["region_mismatches"]:
            m["wrong"].append(r["model"])
        if r.get("amplified_regions"):
            m["amplified"].append(r["model"])
    return out


def _region_check_lines(recs: list[dict]) -> list[str]:
    checks = region_checks(recs)
    if not checks:
        return []
    lines = ["", "## Region check (`--verify-regions`)", "",
             "Every compiled region also ran on the eager kernels and was compared (docs/compile.md). A region "
             "computing a wrong result fails its run; one whose first differing node is itself accurate "
             "amplifies float rounding (ill-conditioned) and does not.", "",
             "| mode | runs checked | wrong results | amplified rounding only |", "|---|---|---|---|"]
    for mode, m in checks.items():
        wrong = f"{len(m['wrong'])} ({', '.join(m['wrong'][:8])})" if m["wrong"] else "0"
        amplified = f"{len(m['amplified'])} ({', '.join(m['amplified'][:8])})" if m["amplified"] else "0"
        lines.append(f"| {mode} | {m['checked']} | {wrong} | {amplified} |")
    return lines


def _pct(p: int, t: int) -> str:
    return f"{100.0 * p / t:.1f}%" if t else "n/a"


def summary_table(recs: list[dict]) -> str:
    s = summarize(recs)
    lines = ["| suite | mode | passed | total |", "|---|---|---|---|"]
    for (suite, mode), c in sorted(s["rows"].items()):
        lines.append(f"| {suite} | {mode} | {c['pass']} | {c['pass'] + c['fail']} |")
    return "\n".join(lines)


def render_markdown(recs: list[dict], *, title: str = "Model sweep report", top: int = 15) -> str:
    s = summarize(recs)
    out = [f"# {title}", "", summary_table(recs), "",
           "`total` counts the models that build and run on CPU; `skipped` ones do not (reduced "
           "config or input recipe invalid, or the CPU reference fails) and are not counted.", "",
           "## Pass rate per suite and mode", "", "| suite | mode | pass rate | passed | failed | skipped |",
           "|---|---|---|---|---|---|"]
    for (suite, mode), c in sorted(s["rows"].items()):
        out.append(f"| {suite} | {mode} | {_pct(c['pass'], c['pass'] + c['fail'])} | {c['pass']} | {c['fail']} | {c['skip']} |")
    out += _numerics_lines(recs)
    out += _region_check_lines(recs)
    out += ["", f"## Top fallback ops (of {len(s['fallback'])})", "",
            "| op | models | calls |", "|---|---|---|"]
    for op, n in s["fallback_models"].most_common(top):
        out.append(f"| `{op}` | {n} | {s['fallback'][op]} |")
    out += ["", "## Failure causes", "", "| cause | runs |", "|---|---|"]
    for cause, n in s["causes"].most_common():
        out.append(f"| {cause} | {n} |")
    out += ["", "## Top failure messages", "", "| cause | error | runs |", "|---|---|---|"]
    for (cause, err), n in s["errors"].most_common(top):
        out.append(f"| {cause} | `{err.replace('|', '/').replace('`', '')}` | {n} |")
    out += ["", "## Skip reasons (do not run on CPU with the sweep's recipe)", "", "| suite | reason | models |", "|---|---|---|"]
    for (suite, why), n in s["skips"].most_common(top * 2):
        out.append(f"| {suite} | `{why.replace('|', '/').replace('`', '')}` | {n} |")
    out += ["", "## Per family", "", "| suite | family | mode | passed | total | skipped |", "|---|---|---|---|---|---|"]
    for (suite, fam, mode), c in sorted(s["families"].items()):
        out.append(f"| {suite} | {fam} | {mode} | {c['pass']} | {c['pass'] + c['fail']} | {c['skip']} |")
    fails = sorted((r for r in recs if r["status"] != "pass"), key=lambda r: (r["suite"], r["model"], r["mode"]))
    out += ["", "## Failed and skipped runs", "", "| suite | model | mode | status | cause | error |",
            "|---|---|---|---|---|---|"]
    for r in fails:
        err = (r.get("error") or "").replace("|", "/").replace("`", "")[:160]
        out.append(f"| {r['suite']} | {r['model']} | {r['mode']} | {r['status']} | {r.get('cause') or ''} | `{err}` |")
    return "\n".join(out) + "\n"


def render_html(recs: list[dict], *, title: str = "Model sweep report", top: int = 15) -> str:
    s = summarize(recs)
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title><style>"
             "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}.bar{background:#4a8;height:12px}"
             ".barf{background:#d55;height:12px}</style></head><body>", f"<h1>{e(title)}</h1>",
             "<h2>Pass rate per suite and mode</h2><table><tr><th>suite</th><th>mode</th><th>passed</th>"
             "<th>total</th><th>skipped</th><th>rate</th><th></th></tr>"]
    for (suite, mode), c in sorted(s["rows"].items()):
        t = c["pass"] + c["fail"]
        w = int(300 * c["pass"] / t) if t else 0
        parts.append(f"<tr><td>{e(suite)}</td><td>{e(mode)}</td><td>{c['pass']}</td><td>{t}</td><td>{c['skip']}</td>"
                     f"<td>{_pct(c['pass'], t)}</td><td><div style='display:flex;width:300px'><div class='bar' "
                     f"style='width:{w}px'></div><div class='barf' style='width:{300 - w if t else 0}px'></div></div></td></tr>")
    parts.append("</table><h2>Numerics of the passing runs</h2><table><tr><th>mode</th><th>compared relatively</th>"
                 "<th>median rel_err</th><th>largest rel_err</th><th>compared absolutely</th><th>not recorded</th></tr>")
    for mode, n in numerics(recs).items():
        med, mx = _errors(n)
        parts.append(f"<tr><td>{e(mode)}</td><td>{n['relative']}</td><td>{med}</td><td>{mx}</td>"
                     f"<td>{e(', '.join(n['absolute']))}</td><td>{n['unrecorded']}</td></tr>")
    checks = region_checks(recs)
    if checks:
        parts.append("</table><h2>Region check (--verify-regions)</h2><table><tr><th>mode</th><th>runs checked</th>"
                     "<th>wrong results</th><th>amplified rounding only</th></tr>")
        for mode, m in checks.items():
            parts.append(f"<tr><td>{e(mode)}</td><td>{m['checked']}</td><td>{e(', '.join(m['wrong']) or '0')}</td>"
                         f"<td>{e(', '.join(m['amplified']) or '0')}</td></tr>")
    parts.append("</table><h2>Top fallback ops</h2><table><tr><th>op</th><th>models</th><th>calls</th><th></th></tr>")
    mx = max(s["fallback_models"].values(), default=1)
    for op, n in s["fallback_models"].most_common(top):
        parts.append(f"<tr><td><code>{e(op)}</code></td><td>{n}</td><td>{s['fallback'][op]}</td>"
                     f"<td><div class='bar' style='width:{int(200 * n / mx)}px'></div></td></tr>")
    parts.append("</table><h2>Failure causes</h2><table><tr><th>cause</th><th>runs</th></tr>")
    for cause, n in s["causes"].most_common():
        parts.append(f"<tr><td>{e(cause)}</td><td>{n}</td></tr>")
    parts.append("</table><h2>All runs</h2><table><tr><th>suite</th><th>model</th><th>mode</th><th>status</th>"
                 "<th>cause</th><th>error</th><th>fallback ops</th><th>s</th><th>peak MiB</th></tr>")
    for r in sorted(recs, key=lambda r: (r["suite"], r["model"], r["mode"])):
        color = {"pass": "#dfd", "fail": "#fdd"}.get(r["status"], "#eee")
        parts.append(f"<tr style='background:{color}'><td>{e(r['suite'])}</td><td>{e(r['model'])}</td>"
                     f"<td>{e(r['mode'])}</td><td>{e(r['status'])}</td><td>{e(r.get('cause') or '')}</td>"
                     f"<td>{e((r.get('error') or '')[:160])}</td><td>{e(', '.join(sorted(r.get('fallback_ops') or {})))}</td>"
                     f"<td>{r.get('seconds', 0):.1f}</td><td>{(r.get('peak_bytes') or 0) / 2**20:.1f}</td></tr>")
    parts.append("</table></body></html>")
    return "\n".join(parts)


def write_report(path: str, md_out: str | None = None, html_out: str | None = None) -> tuple[str, str]:
    recs = results.load(path)
    stem = os.path.splitext(path)[0]
    md_out = md_out or stem + ".md"
    html_out = html_out or stem + ".html"
    with open(md_out, "w") as f:
        f.write(render_markdown(recs))
    with open(html_out, "w") as f:
        f.write(render_html(recs))
    return md_out, html_out
