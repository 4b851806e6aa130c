"""torch.profiler integration: merged Chrome traces, flows, key_averages, HTML report, CLI."""

from __future__ import annotations

import gzip
import json
from html.parser import HTMLParser

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler

import torchneuron.profiler  # noqa: F401 - installs the torch.profiler integration
from torchneuron import cli
from torchneuron.profiler.report import render_html
from torchneuron.profiler.trace import DEVICE_PID, ESTIMATE_PID
from torchneuron.runtime import activity

ACTS = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _step(model, x):
    loss = model(x).sum()
    loss.backward()
    return loss.detach().cpu()


@pytest.fixture(scope="module")
def model():
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to("neuron")


@pytest.fixture(scope="module")
def trace(tmp_path_factory, model):
    x = torch.randn(16, 64, device="neuron")
    _step(model, x)
    path = str(tmp_path_factory.mktemp("trace") / "trace.json")
    with profile(activities=ACTS, record_shapes=True) as prof:
        with torch.profiler.record_function("train_step"):
            _step(model, x)
    assert activity.RECORDER is None
    prof.export_chrome_trace(path)
    with open(path) as f:
        data = json.load(f)
    return path, data, prof


def test_trace_is_valid_chrome_json_with_device_track(trace):
    _path, data, _ = trace
    evs = data["traceEvents"]
    assert isinstance(evs, list)
    for e in evs:
        assert e["ph"] in ("X", "M", "s", "f", "C", "i", "b", "e", "I")
        if e["ph"] in ("X", "s", "f", "C"):
            assert isinstance(e["ts"], (int, float)) and "pid" in e and "tid" in e
        if e["ph"] == "X":
            assert e["dur"] >= 0
    names = {(e["pid"], e["args"]["name"]) for e in evs if e["ph"] == "M" and e["name"] == "process_name"}
    assert (DEVICE_PID, "neuron:0") in names
    assert (ESTIMATE_PID, "estimated trn2") in names
    dev = [e for e in evs if e["ph"] == "X" and e["pid"] == DEVICE_PID]
    assert {"aten::addmm", "aten::mm", "aten::_to_copy"} <= {e["name"] for e in dev}
    mm = next(e for e in dev if e["name"] == "aten::addmm")
    assert mm["args"]["flops"] == 2 * 16 * 64 * 64 and mm["args"]["bytes"] > 0
    assert mm["args"]["cpu_op"] == "aten::addmm" and "External id" in mm["args"]
    est = [e for e in evs if e["ph"] == "X" and e["pid"] == ESTIMATE_PID]
    assert len(est) >= len([e for e in dev if e["args"]["category"] != "allocation"])
    assert any(e["ph"] == "C" and e["name"] == "neuron:0 memory" for e in evs)


def test_flows_connect_aten_ops_to_device_events(trace):
    _path, data, _ = trace
    evs = data["traceEvents"]
    starts = {e["id"]: e for e in evs if e["ph"] == "s" and e.get("cat") == "neuron_launch"}
    ends = {e["id"]: e for e in evs if e["ph"] == "f" and e.get("cat") == "neuron_launch"}
    assert starts and starts.keys() == ends.keys()
    cpu_ops = [e for e in evs if e["ph"] == "X" and e.get("cat") == "cpu_op"]
    dev = [e for e in evs if e["ph"] == "X" and e["pid"] == DEVICE_PID]
    for fid, s in starts.items():
        f = ends[fid]
        assert f["bp"] == "e" and s["bind_id"] == f["bind_id"] == fid
        # the start lies inside a CPU aten op on its thread, the finish on a device event
        assert any(c["tid"] == s["tid"] and c["ts"] <= s["ts"] <= c["ts"] + c["dur"] for c in cpu_ops)
        assert any(d["tid"] == f["tid"] and d["ts"] == f["ts"] for d in dev)
    # every device event that came from an aten op has its flow
    assert len(starts) == len([d for d in dev if "cpu_op" in d["args"]]) >= len(dev) - 1


def test_key_averages_carry_device_time(trace):
    _, _, prof = trace
    ka = {e.key: e for e in prof.key_averages()}
    assert ka["aten::addmm"].self_device_time_total > 0
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=10)
    assert "Self NEURON" in table and "aten::addmm" in table


def test_tensorboard_handler_and_gzip(tmp_path, model):
    x = torch.randn(4, 64, device="neuron")
    with profile(activities=ACTS, schedule=torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path), use_gzip=True)) as prof:
        for _ in range(3):
            _step(model, x)
            prof.step()
    files = list(tmp_path.glob("*.pt.trace.json.gz"))
    assert len(files) == 1
    with gzip.open(files[0], "rt") as f:
        data = json.load(f)
    assert any(e.get("pid") == DEVICE_PID and e["ph"] == "X" for e in data["traceEvents"])


def test_cpu_only_profile_records_nothing():
    x = torch.randn(4, 4, device="neuron")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        assert activity.RECORDER is None
        (x + x).cpu()
    assert not getattr(prof.profiler, "_neuron_sessions", None)


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.ids: set[str] = set()
        self.stack: list[str] = []
        self.void = {"meta", "br", "img", "input", "link", "hr"}

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        d = dict(attrs)
        if "id" in d:
            self.ids.add(d["id"])
        if tag not in self.void:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, (tag, self.stack[-5:])
        self.stack.pop()


def test_html_report_renders(trace, tmp_path):
    path, _data, _ = trace
    out = tmp_path / "report.html"
    assert cli.main(["profile-report", path, "-o", str(out)]) == 0
    html = out.read_text()
    p = _Collect()
    p.feed(html)
    p.close()
    assert not p.stack  # every element closed
    assert {"by-category", "top-ops", "timeline", "memory"} <= p.ids
    assert p.tags.count("svg") >= 5 and "rect" in p.tags and "polyline" in p.tags
    assert "aten::addmm" in html and "estimated trn2" in html


def test_report_of_a_trace_without_device_events():
    html = render_html({"traceEvents": []})
    assert "no data" in html and "<svg" in html


def test_cli_estimate_script(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "m = torch.nn.Linear(32, 32).to('neuron')\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "x = torch.randn(8, 32, device='neuron')\n"
        "for _ in range(3):\n"
        "    opt.zero_grad()\n"
        "    m(x).sum().backward()\n"
        "    opt.step()\n"
    )
    assert cli.main(["estimate", str(script)]) == 0
    out = capsys.readouterr().out
    assert "Estimated step time on trn2" in out and "aten::addmm" in out
    assert len([ln for ln in out.splitlines() if ln.strip().split(" ")[0] in ("0", "1", "2")]) >= 3
    assert cli.main(["estimate", "--json", "--target", "trn3", str(script)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["steps"]) == 3 and data["steps"][0]["target"] == "trn3"
