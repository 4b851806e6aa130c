"""The ``torchneuron`` command line (``pyproject``: ``torchneuron = "torchneuron.cli:main"``).

Subcommands register themselves in :data:`COMMANDS` (name -> (help, add_arguments, run)); add
new ones there without touching the others.
"""

from __future__ import annotations

import argparse
import sys


def _add_estimate(p: argparse.ArgumentParser) -> None:
    p.add_argument("script", help="a Python script that runs steps on the neuron device")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.add_argument("--target", choices=("trn2", "trn3"), help="price on this target (trn2, trn3; default: TORCHNEURON_TARGET)")
    p.add_argument("--top", type=int, default=10, help="ops shown in the table")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")


def _run_estimate(ns: argparse.Namespace) -> int:
    from .profiler.script import estimate_script

    return estimate_script(ns.script, ns.args, target=ns.target, top=ns.top, as_json=ns.json)


def _add_profile_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="a Chrome trace (.json or .json.gz) from torch.profiler with torchneuron")
    p.add_argument("-o", "--output", help="HTML file to write (default: next to the trace)")


def _run_profile_report(ns: argparse.Namespace) -> int:
    from .profiler.report import write_report

    out = write_report(ns.trace, ns.output)
    print(out)
    return 0


def _add_cache(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("list", "stats", "clear"), help="what to do with the on-disk executable cache")
    p.add_argument("--precompile", action="store_true",
                   help="with clear: also remove Dynamo's stored packages (TORCHNEURON_PRECOMPILE=1)")
    p.add_argument("--graphs", action="store_true",
                   help="with clear: also empty AOTAutograd's cache of compiled graphs (Inductor's entries too)")


def _run_cache(ns: argparse.Namespace) -> int:
    from .compiler.cache import CACHE
    from .compiler.lowering_cache import LOWERED

    entries = CACHE.entries()
    lowered = LOWERED.entries()
    if ns.action == "list":
        for e in entries:
            state = f"CORRUPT ({e['corrupt']})" if "corrupt" in e else e.get("region", "")
            print(f"{e['key'][:16]}  {e['bytes']:>10,} B  {e.get('target', '?'):<5} {state}")
        print(f"{len(entries)} entries in {CACHE.root}")
        print(f"{len(lowered)} lowered regions (StableHLO) in {LOWERED.root}")
    elif ns.action == "stats":
        corrupt = sum(1 for e in entries if "corrupt" in e)
        total = sum(e["bytes"] for e in entries)
        print(f"cache directory: {CACHE.root}")
        print(f"entries: {len(entries)} ({corrupt} corrupt), {total / 2**20:.2f} MiB on disk")
        print(f"lowered regions: {len(lowered)} ({sum(1 for e in lowered if 'corrupt' in e)} corrupt), "
              f"{sum(e['bytes'] for e in lowered) / 2**20:.2f} MiB on disk")
    else:
        from .compiler import verdicts

        n = CACHE.clear_disk()
        print(f"removed {n} entries from {CACHE.root}")
        n = LOWERED.clear_disk()
        if n:
            print(f"removed {n} lowered regions from {LOWERED.root}")
        if verdicts.clear():
            print(f"forgot the remembered lowering verdicts ({verdicts.path().name})")
        if ns.precompile:
            from .compiler import precompile

            n = precompile.clear()
            print(f"removed {n} precompiled packages from {precompile.dynamo_cache_dir()}")
        if ns.graphs:
            from .compiler import graph_cache

            n = graph_cache.clear()
            print(f"removed {n} AOTAutograd cache entries from {graph_cache.directory()}")
    return 0


def _add_check(p: argparse.ArgumentParser) -> None:
    p.add_argument("script", help="a Python script to run on the simulated NeuronCore (options of "
                                  "`check` go before it; everything after it goes to the script)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.add_argument("--default-device", help="torch.set_default_device() while the script runs (e.g. neuron)")
    p.add_argument("--top", type=int, default=15, help="fallback ops shown")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--verify-regions", action="store_true",
                   help="run every compiled region's graph eagerly beside it and report the regions whose "
                        "results differ, with the first differing node (TORCHNEURON_VERIFY_REGIONS=1)")


def _run_check(ns: argparse.Namespace) -> int:
    import os

    from .sweep.check import check_script

    if ns.verify_regions:
        os.environ["TORCHNEURON_VERIFY_REGIONS"] = "1"
    return check_script(ns.script, ns.args, default_device=ns.default_device, top=ns.top, as_json=ns.json)


def _add_sweep(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", default="torchvision",
                   help="comma-separated: torchvision (classification), torchvision_detection, "
                        "torchvision_segmentation, torchvision_video, torchvision_optical_flow, timm, "
                        "transformers; 'all' for every suite")
    p.add_argument("--modes", default="eager", help="comma-separated: eager,compile,adaptive")
    p.add_argument("--limit", type=int, help="first N models per suite (after --filter/--shard)")
    p.add_argument("--shard", help="i/n: every n-th model starting at i (0-based)")
    p.add_argument("--filter", help="comma-separated substrings or glob patterns on the model name")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per (model, mode) before it is killed")
    p.add_argument("--out", default="sweep_results.jsonl", help="JSONL results (appended; done records are skipped)")
    p.add_argument("--jobs", type=int, default=1,
                   help="worker processes running models side by side (each ~1-3 GB; IREE compiles use ~1.3 cores)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--verify-regions", action="store_true",
                   help="compile/adaptive: also run every compiled region's graph eagerly and compare; a region "
                        "that differs fails the record and names the first differing node (slower)")


def _run_sweep(ns: argparse.Namespace) -> int:
    from .sweep import SUITES
    from .sweep.sweep import run_sweep

    suites = list(SUITES) if ns.suite == "all" else ns.suite.split(",")
    recs = run_sweep(suites, ns.modes.split(","), ns.out, limit=ns.limit, shard=ns.shard,
                     filter_=ns.filter, timeout=ns.timeout, quiet=ns.quiet, jobs=ns.jobs,
                     verify_regions=ns.verify_regions)
    n = {k: sum(r["status"] == k for r in recs) for k in ("pass", "fail", "skip")}
    print(f"{len(recs)} new records in {ns.out}: {n['pass']} pass, {n['fail']} fail, {n['skip']} skip")
    return 0


def _add_sweep_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", help="JSONL file written by `torchneuron sweep`")
    p.add_argument("--md", help="Markdown file to write (default: next to the results)")
    p.add_argument("--html", help="HTML file to write (default: next to the results)")


def _run_sweep_report(ns: argparse.Namespace) -> int:
    from .sweep.report import summary_table, write_report
    from .sweep.results import load

    md, html = write_report(ns.results, ns.md, ns.html)
    print(summary_table(load(ns.results)))
    print(md)
    print(html)
    return 0


COMMANDS: dict = {
    "check": ("run a script on the simulated device; report op placement, fallbacks (with call sites) "
              "and compile/graph-break counts", _add_check, _run_check),
    "cache": ("list, summarise or clear the compiled-executable cache (TORCHNEURON_CACHE_DIR)", _add_cache, _run_cache),
    "estimate": ("estimate a script's steps on the target with the Trainium cost model", _add_estimate, _run_estimate),
    "profile-report": ("render a profile trace to an HTML report with plots", _add_profile_report, _run_profile_report),
    "sweep": ("run models on the neuron device and record placement, numerics, memory and time", _add_sweep, _run_sweep),
    "sweep-report": ("render a sweep's JSONL results to Markdown and HTML", _add_sweep_report, _run_sweep_report),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="torchneuron", description="torchneuron tools")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_, add, _run) in COMMANDS.items():
        add(sub.add_parser(name, help=help_, description=help_))
    ns = parser.parse_args(argv)
    return int(COMMANDS[ns.command][2](ns) or 0)


if __name__ == "__main__":
    sys.exit(main())
