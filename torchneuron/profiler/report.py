"""``torchneuron profile-report trace.json``: an HTML page with plots of a merged trace.

The page is self-contained (inline SVG, no JavaScript, no plotting dependency): time by
category (measured on the simulator and estimated for the target), top ops, a timeline overview
(CPU threads, ``neuron:0`` streams, the estimated track) and device memory over time.
"""

from __future__ import annotations

import gzip
import html
import json
from collections import defaultdict

from .trace import DEVICE_PID, ESTIMATE_PID

_COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac"]


def load_trace(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def _fmt_us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f} s"
    if us >= 1e3:
        return f"{us / 1e3:.3f} ms"
    return f"{us:.2f} us"


def _esc(s) -> str:
    return html.escape(str(s), quote=True)


def bar_chart(title: str, rows: list[tuple[str, float]], unit=_fmt_us, width: int = 760) -> str:
    """Horizontal bar chart as an inline <svg>."""
    if not rows:
        return f'<svg class="chart" role="img" width="{width}" height="40"><title>{_esc(title)}</title><text x="8" y="24">no data</text></svg>'
    bar_h, label_w, value_w = 20, 260, 110
    h = bar_h * len(rows) + 10
    vmax = max(v for _, v in rows) or 1.0
    out = [f'<svg class="chart" role="img" width="{width}" height="{h}" xmlns="http://www.w3.org/2000/svg"><title>{_esc(title)}</title>']
    for i, (label, v) in enumerate(rows):
        y = 5 + i * bar_h
        w = max(1.0, (width - label_w - value_w) * v / vmax)
        out.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end" font-size="12">{_esc(label[:40])}</text>')
        out.append(f'<rect x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{bar_h - 4}" fill="{_COLORS[i % len(_COLORS)]}"><title>{_esc(label)}: {_esc(unit(v))}</title></rect>')
        out.append(f'<text x="{label_w + w + 4:.1f}" y="{y + 14}" font-size="12">{_esc(unit(v))}</text>')
    out.append("</svg>")
    return "".join(out)


def timeline_chart(lanes: list[tuple[str, list[tuple[float, float, str]]]], t0: float, t1: float, width: int = 1000) -> str:
    lane_h, label_w = 22, 200
    h = lane_h * max(1, len(lanes)) + 24
    span = max(t1 - t0, 1e-9)
    scale = (width - label_w - 10) / span
    cats: dict[str, str] = {}
    out = [f'<svg class="chart" role="img" width="{width}" height="{h}" xmlns="http://www.w3.org/2000/svg"><title>timeline overview</title>']
    for i, (label, spans) in enumerate(lanes):
        y = 4 + i * lane_h
        out.append(f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end" font-size="12">{_esc(label)}</text>')
        out.append(f'<line x1="{label_w}" x2="{width - 10}" y1="{y + lane_h - 2}" y2="{y + lane_h - 2}" stroke="#ddd"/>')
        for s, e, cat in spans[:5000]:
            color = cats.setdefault(cat, _COLORS[len(cats) % len(_COLORS)])
            x = label_w + (s - t0) * scale
            w = max(0.5, (e - s) * scale)
            out.append(f'<rect x="{x:.2f}" y="{y + 2}" width="{w:.2f}" height="{lane_h - 6}" fill="{color}"><title>{_esc(cat)}</title></rect>')
    out.append(f'<text x="{label_w}" y="{h - 4}" font-size="11">0</text>')
    out.append(f'<text x="{width - 10}" y="{h - 4}" font-size="11" text-anchor="end">{_esc(_fmt_us(span))}</text>')
    out.append("</svg>")
    return "".join(out)


def line_chart(series: dict[str, list[tuple[float, float]]], t0: float, t1: float, width: int = 1000, height: int = 220) -> str:
    pad_l, pad_b = 80, 24
    pts_all = [v for s in series.values() for _, v in s]
    out = [f'<svg class="chart" role="img" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg"><title>device memory over time</title>']
    if not pts_all:
        out.append('<text x="8" y="24">no memory events</text></svg>')
        return "".join(out)
    vmax = max(pts_all) or 1.0
    span = max(t1 - t0, 1e-9)
    for i, (name, pts) in enumerate(series.items()):
        coords = []
        prev = None
        for t, v in pts:
            x = pad_l + (t - t0) / span * (width - pad_l - 10)
            y = (height - pad_b) - v / vmax * (height - pad_b - 10)
            if prev is not None:
                coords.append(f"{x:.1f},{prev:.1f}")  # step line
            coords.append(f"{x:.1f},{y:.1f}")
            prev = y
        out.append(f'<polyline fill="none" stroke="{_COLORS[i]}" stroke-width="1.5" points="{" ".join(coords)}"><title>{_esc(name)}</title></polyline>')
        out.append(f'<text x="{pad_l + 10 + i * 160}" y="14" font-size="12" fill="{_COLORS[i]}">{_esc(name)}</text>')
    out.append(f'<text x="{pad_l - 6}" y="16" text-anchor="end" font-size="11">{vmax / 2**20:.1f} MiB</text>')
    out.append(f'<text x="{pad_l - 6}" y="{height - pad_b}" text-anchor="end" font-size="11">0</text>')
    out.append("</svg>")
    return "".join(out)


def summarise(trace: dict) -> dict:
    """The figures the report plots, from a merged Chrome trace."""
    evs = trace.get("traceEvents", [])
    dev = [e for e in evs if e.get("ph") == "X" and e.get("pid") == DEVICE_PID]
    est = [e for e in evs if e.get("ph") == "X" and e.get("pid") == ESTIMATE_PID]
    mem = sorted((e for e in evs if e.get("ph") == "C" and e.get("pid") == DEVICE_PID), key=lambda e: e["ts"])
    cpu = [e for e in evs if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    names = {e["args"]["name"]: e["pid"] for e in evs if e.get("ph") == "M" and e.get("name") == "process_name" and "args" in e}
    est_name = next((n for n, p in names.items() if p == ESTIMATE_PID), "estimated")
    by_cat_meas: dict[str, float] = defaultdict(float)
    by_cat_est: dict[str, float] = defaultdict(float)
    by_op_est: dict[str, float] = defaultdict(float)
    by_op_meas: dict[str, float] = defaultdict(float)
    for e in dev:
        cat = e.get("args", {}).get("category", e.get("cat", "?"))
        by_cat_meas[cat] += e.get("dur", 0)
        by_op_meas[e["name"]] += e.get("dur", 0)
    for e in est:
        cat = e.get("args", {}).get("category", "?")
        by_cat_est[cat] += e.get("dur", 0)
        by_op_est[e["name"]] += e.get("dur", 0)
    all_ts = [e["ts"] for e in dev + est + cpu + mem]
    all_end = [e["ts"] + e.get("dur", 0) for e in dev + est + cpu + mem]
    return {
        "device": dev, "estimate": est, "memory": mem, "cpu": cpu, "estimate_name": est_name,
        "by_category_measured": dict(by_cat_meas), "by_category_estimated": dict(by_cat_est),
        "by_op_estimated": dict(by_op_est), "by_op_measured": dict(by_op_meas),
        "t0": min(all_ts) if all_ts else 0.0, "t1": max(all_end) if all_end else 1.0,
    }


def _top_level(spans: list[dict]) -> list[dict]:
    """Outermost events only (for the CPU lanes of the overview)."""
    out, end = [], -1.0
    for e in sorted(spans, key=lambda e: (e["ts"], -e.get("dur", 0))):
        if e["ts"] >= end:
            out.append(e)
            end = e["ts"] + e.get("dur", 0)
    return out


def render_html(trace: dict, title: str = "torchneuron profile") -> str:
    s = summarise(trace)
    t0, t1 = s["t0"], s["t1"]
    lanes = []
    per_tid: dict = defaultdict(list)
    for e in s["cpu"]:
        per_tid[e.get("tid")].append(e)
    for tid, spans in sorted(per_tid.items(), key=lambda kv: str(kv[0])):
        lanes.append((f"CPU thread {tid}", [(e["ts"], e["ts"] + e.get("dur", 0), "cpu op") for e in _top_level(spans)]))
    per_stream: dict = defaultdict(list)
    for e in s["device"]:
        per_stream[e.get("tid")].append(e)
    for tid, spans in sorted(per_stream.items()):
        lanes.append((f"neuron:0 stream {tid}", [(e["ts"], e["ts"] + e.get("dur", 0), e.get("args", {}).get("category", "device")) for e in spans]))
    if s["estimate"]:
        lanes.append((s["estimate_name"], [(e["ts"], e["ts"] + e.get("dur", 0), e.get("args", {}).get("category", "est")) for e in s["estimate"]]))
    mem_series = {
        "allocated": [(e["ts"], e["args"].get("allocated_bytes", 0)) for e in s["memory"]],
        "reserved": [(e["ts"], e["args"].get("reserved_bytes", 0)) for e in s["memory"]],
    }
    peak = max((v for _, v in mem_series["allocated"]), default=0)
    dev_total = sum(e.get("dur", 0) for e in s["device"])
    est_total = sum(e.get("dur", 0) for e in s["estimate"])
    top = sorted(s["by_op_estimated"].items(), key=lambda kv: -kv[1])[:15]
    rows = "".join(
        f"<tr><td>{_esc(n)}</td><td>{_esc(_fmt_us(v))}</td><td>{_esc(_fmt_us(s['by_op_measured'].get(n, 0)))}</td></tr>"
        for n, v in top
    )
    css = ("body{font-family:sans-serif;margin:24px;color:#222}h1{font-size:22px}h2{font-size:17px;margin-top:28px}"
           "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}"
           ".kpi{display:inline-block;margin-right:28px}.kpi b{font-size:18px;display:block}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title><style>{css}</style></head>
<body>
<h1>{_esc(title)}</h1>
<section id="summary">
<div class="kpi"><b>{len(s['device'])}</b>device ops</div>
<div class="kpi"><b>{_esc(_fmt_us(dev_total))}</b>simulator device time</div>
<div class="kpi"><b>{_esc(_fmt_us(est_total))}</b>{_esc(s['estimate_name'])}</div>
<div class="kpi"><b>{peak / 2**20:.2f} MiB</b>peak allocated</div>
</section>
<h2 id="by-category">Time by category ({_esc(s['estimate_name'])})</h2>
{bar_chart("estimated time by category", sorted(s['by_category_estimated'].items(), key=lambda kv: -kv[1]))}
<h2 id="by-category-measured">Time by category (simulator, measured)</h2>
{bar_chart("measured time by category", sorted(s['by_category_measured'].items(), key=lambda kv: -kv[1]))}
<h2 id="top-ops">Top ops</h2>
{bar_chart("top ops by estimated time", top)}
<table id="top-ops-table"><thead><tr><th>op</th><th>{_esc(s['estimate_name'])}</th><th>simulator</th></tr></thead><tbody>{rows}</tbody></table>
<h2 id="timeline">Timeline overview</h2>
{timeline_chart(lanes, t0, t1)}
<h2 id="memory">Device memory over time</h2>
{line_chart(mem_series, t0, t1)}
</body></html>
"""


def write_report(trace_path: str, out_path: str | None = None) -> str:
    """Render ``trace_path`` to HTML at ``out_path`` (default: next to it, ``.html``)."""
    trace = load_trace(trace_path)
    if out_path is None:
        base = trace_path[:-3] if trace_path.endswith(".gz") else trace_path
        out_path = (base[:-5] if base.endswith(".json") else base) + ".html"
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(render_html(trace, title=f"torchneuron profile — {trace_path.rsplit('/', 1)[-1]}"))
    return out_path


__all__ = ["load_trace", "render_html", "summarise", "write_report"]
