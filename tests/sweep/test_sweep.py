"""The model sweep: the CI slice -- a fixed 20-model mix of torchvision (classification,
detection, segmentation, video, optical flow), timm and transformers, each of which must pass in
eager mode on the device -- end to end (worker subprocess, resume, report), plus the worker's
containment of hangs and crashes and the report/results helpers."""

from __future__ import annotations

import pytest

from torchneuron import cli
from torchneuron.sweep import report, results
from torchneuron.sweep.sweep import run_sweep, select

pytest.importorskip("transformers")
pytest.importorskip("timm")

SLICE = {
    "torchvision": ["mobilenet_v3_small", "resnet18", "squeezenet1_1"],
    "torchvision_detection": ["fcos_resnet50_fpn"],
    "torchvision_segmentation": ["fcn_resnet50"],
    "torchvision_video": ["r3d_18"],
    "torchvision_optical_flow": ["raft_small"],
    "timm": ["test_vit", "levit_128s", "test_efficientnet", "test_convnext", "mobilevit_xxs"],
    "transformers": ["bert", "gpt2", "llama", "t5", "vit", "wav2vec2", "clip", "whisper"],
}
N_SLICE = sum(map(len, SLICE.values()))
FIELDS = {"model", "suite", "mode", "status", "cause", "error", "fallback_ops", "seconds", "peak_bytes"}


@pytest.fixture(scope="module")
def slice_results(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("sweep") / "results.jsonl")
    # two workers side by side, as a compile-mode run uses them (for eager runs worker start-up dominates)
    recs = run_sweep(list(SLICE), ["eager"], out, models=SLICE, timeout=120, quiet=True, jobs=2)
    return out, recs


def test_slice_records(slice_results):
    out, recs = slice_results
    assert N_SLICE == 20 and len(recs) == N_SLICE
    for r in recs:
        assert FIELDS <= r.keys(), r
        assert r["mode"] == "eager"
        assert r["status"] == "pass", r  # every model of the slice runs on the device today
        assert r["max_abs_err"] is not None, r  # compared against CPU
        assert r["peak_bytes"] > 0 and r["seconds"] > 0
        assert isinstance(r["fallback_ops"], dict)
    assert {(r["suite"], r["model"]) for r in results.load(out)} == {
        (s, m) for s, ms in SLICE.items() for m in ms}


def test_slice_resume_skips_done(slice_results):
    out, _ = slice_results
    assert run_sweep(["torchvision"], ["eager"], out, models=SLICE["torchvision"], quiet=True) == []


def test_slice_report(slice_results, tmp_path, capsys):
    out, _ = slice_results
    md, html = tmp_path / "r.md", tmp_path / "r.html"
    assert cli.main(["sweep-report", out, "--md", str(md), "--html", str(html)]) == 0
    text = md.read_text()
    assert "| suite | mode | passed | total |" in text
    assert "| torchvision | eager | 3 | 3 |" in text
    assert "| timm | eager | 5 | 5 |" in text
    assert "| transformers | eager | 8 | 8 |" in text
    assert "| torchvision_detection | fcos | eager | 1 | 1 | 0 |" in text  # per family
    assert "| timm | vision_transformer | eager | 1 | 1 | 0 |" in text
    assert "<table>" in html.read_text()
    assert "| torchvision | eager | 3 | 3 |" in capsys.readouterr().out


def test_worker_contains_hang_and_crash(tmp_path, capsys):
    out = str(tmp_path / "r.jsonl")
    # two workers: a hang or a crash in one leaves the other's runs alone
    assert cli.main(["sweep", "--suite", "_selftest", "--modes", "eager", "--timeout", "8",
                     "--out", out, "--quiet", "--jobs", "2"]) == 0
    assert "3 new records" in capsys.readouterr().out
    by = {r["model"]: r for r in results.load(out)}
    assert by["tiny"]["status"] == "pass"
    assert (by["hang"]["status"], by["hang"]["cause"]) == ("fail", "timeout")
    assert (by["crash"]["status"], by["crash"]["cause"]) == ("fail", "crash")


def test_select_filter_shard_limit():
    names = [f"m{i}" for i in range(10)]
    assert select("torchvision", models=names, shard="1/3") == ["m1", "m4", "m7"]
    assert select("torchvision", models=names, filter_="m1,m2") == ["m1", "m2"]
    assert select("torchvision", models=names, filter_="m[5-6]") == ["m5", "m6"]
    assert select("torchvision", models=names, limit=2) == ["m0", "m1"]
    with pytest.raises(ValueError):
        select("torchvision", models=names, shard="3/3")


def test_results_torn_line_and_last_wins(tmp_path):
    p = tmp_path / "r.jsonl"
    rec = {"suite": "s", "model": "a", "mode": "eager", "status": "fail"}
    results.append(str(p), rec)
    with open(p, "a") as f:
        f.write('{"suite": "s", "model": "b"')  # interrupted write
    results.append(str(p), {**rec, "status": "pass"})
    loaded = results.load(str(p))
    assert loaded == [{**rec, "status": "pass"}]
    assert results.done_keys(str(p)) == {("s", "a", "eager")}


def test_report_counts_skips_outside_total():
    recs = [
        {"suite": "t", "model": "a", "mode": "eager", "status": "pass", "fallback_ops": {"aten::x": 2}},
        {"suite": "t", "model": "b", "mode": "eager", "status": "fail", "cause": "numerics", "error": "E",
         "fallback_ops": {"aten::x": 1, "aten::y": 1}},
        {"suite": "t", "model": "c", "mode": "eager", "status": "skip", "cause": "build", "error": "B"},
    ]
    md = report.render_markdown(recs)
    assert "| t | eager | 1 | 2 |" in md
    assert "| `aten::x` | 2 | 3 |" in md
    assert "| numerics | 1 |" in md


def test_cli_registers_sweep_commands():
    assert {"sweep", "sweep-report"} <= cli.COMMANDS.keys()
    assert {"cache", "estimate", "profile-report"} <= cli.COMMANDS.keys()


def test_runner_rules_random_eval_cpu_only_failures_and_nan_reference():
    from torchneuron.sweep.runner import check

    r = check("_selftest", "random", "eager")  # both forwards seeded alike: the masks match
    assert r["status"] == "pass" and r["max_abs_err"] == 0.0, r
    r = check("_selftest", "needs_labels", "eager")  # the training step fails on CPU too: a skip
    assert (r["status"], r["cause"], r["stage"]) == ("skip", "cpu reference", "cpu train step"), r
    assert "labels" in r["error"]
    r = check("_selftest", "nan", "eager")  # nothing to compare against
    assert (r["status"], r["cause"]) == ("skip", "cpu reference"), r
