"""The placement-table generator (``torchneuron.tools.op_support``): its verdicts must depend
on what the compiler lowers, not on machine load, probe order or earlier samples."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("torch_mlir")

from torchneuron.compiler import lowering  # noqa: E402
from torchneuron.tools import op_support as T  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    monkeypatch.setattr(T, "_verdicts", {})
    monkeypatch.setattr(T, "_key_lowers", set())
    monkeypatch.setattr(T, "_state_dir", None)


def _nodes(fn, *tensors, target):
    gm = T._trace(fn, list(tensors))
    assert gm is not None
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target == target]


def test_verdict_does_not_depend_on_wall_clock(monkeypatch):
    """A lowering that takes longer than the compiler's wall-clock budget (as on a busy
    machine) still counts as lowering: the tool's budget is CPU time."""
    real_lower = lowering.lower

    def slow_lower(gm, *a, **k):
        time.sleep(1.5)  # wall time without CPU time: what a loaded machine looks like
        return real_lower(gm, *a, **k)

    monkeypatch.setattr(lowering, "lower", slow_lower)
    monkeypatch.setenv("TORCHNEURON_LOWERING_TIMEOUT", "0.5")
    (node,) = _nodes(torch.neg, torch.randn(3), target=torch.ops.aten.neg.default)
    assert T._node_supported(node) is True


def test_crashing_direct_lowering_still_tries_the_decomposition():
    """torch-mlir 20261001 segfaults lowering ``nll_loss_forward`` itself; the compiler
    decomposes it (cross_entropy graphs compile whole), so it belongs on the device, and the
    crash must neither end the probing process nor decide the verdict."""
    x, t = torch.randn(2, 3), torch.tensor([0, 2])
    (node,) = _nodes(lambda x, t: F.nll_loss(x, t), x, t, target=torch.ops.aten.nll_loss_forward.default)
    assert T._node_supported(node) is True


def test_decompositions_are_functionalised_like_aotautograd():
    """``mish_backward``'s decomposition uses ``sub_``; AOTAutograd hands the compiler its
    functional form, which lowers (torch.compile lowers mish's backward whole)."""
    x = torch.randn(5)

    def fwd_bwd(x):
        x = x.detach().requires_grad_()
        return torch.autograd.grad(F.mish(x).sum(), x)

    (node,) = _nodes(fwd_bwd, x, target=torch.ops.aten.mish_backward.default)
    assert T._node_supported(node) is True


def test_key_verdict_is_independent_of_probe_order(monkeypatch):
    """Two samples of one (op, dtypes) key, one lowering and one not: the overload+dtype is on
    the device whichever sample is probed first (a verdict used to be cached for the whole key
    from the first sample probed)."""
    small = _nodes(torch.neg, torch.randn(2), target=torch.ops.aten.neg.default)[0]
    big = _nodes(torch.neg, torch.randn(7), target=torch.ops.aten.neg.default)[0]
    monkeypatch.setattr(T, "_probe", lambda node: tuple(node.meta["val"].shape) == (7,))

    def table(order):
        T._verdicts.clear()
        T._key_lowers.clear()
        return T.aggregate_records([["aten::neg", "float32", T._node_supported(n), "neg"] for n in order])

    assert table([small, big]) == table([big, small])
    assert table([small, big])["aten::neg"]["device_dtypes"] == ["float32"]


def test_unjudgeable_samples_do_not_count(monkeypatch):
    """OpInfo lists reductions over 0-d tensors first; the compiler never hands those to
    torch-mlir, so they judge nothing and the quota goes to real reductions."""
    from torch.testing._internal.common_methods_invocations import op_db

    monkeypatch.setattr(T, "DTYPES", (torch.float32,))
    amax = next(o for o in op_db if o.name == "amax")
    records = T._probe_entry(amax, samples=1)
    amax_records = [ok for q, d, ok, _ in records if q == "aten::amax" and d == "float32"]
    assert None in amax_records and True in amax_records
    assert T.aggregate_records(records)["aten::amax"]["device_dtypes"] == ["float32"]


def test_unjudged_only_dtypes_are_left_out():
    """A dtype seen only in samples the compiler never lowers is no verdict (not "CPU")."""
    ops = T.aggregate_records([["aten::amax", "float32", None, "amax"], ["aten::amax", "int32", False, "amax"],
                               ["aten::any.dims", "bool", None, "any"]])
    assert ops == {"aten::amax": {"device_dtypes": [], "cpu_dtypes": ["int32"], "seen_in": ["amax"]}}


def test_worker_death_outside_a_probe_blames_nothing(tmp_path):
    from collections import defaultdict

    deaths = defaultdict(int)
    assert T.record_worker_death(tmp_path, deaths) is False
    assert not (tmp_path / "verdicts.jsonl").exists()


def test_worker_death_in_a_probe_is_retried_before_it_is_recorded(tmp_path):
    from collections import defaultdict

    deaths = defaultdict(int)
    (tmp_path / "pending").write_text(json.dumps(["sig", "key"]))
    assert T.record_worker_death(tmp_path, deaths) is False  # e.g. the OOM killer: retried
    assert not (tmp_path / "verdicts.jsonl").exists()
    assert T.record_worker_death(tmp_path, deaths) is False  # dies again on the same probe
    assert json.loads((tmp_path / "verdicts.jsonl").read_text()) == ["sig", False, "key"]
    assert not (tmp_path / "pending").exists()


def test_pending_is_cleared_after_each_probe(tmp_path, monkeypatch):
    monkeypatch.setattr(T, "_state_dir", tmp_path)
    (node,) = _nodes(torch.neg, torch.randn(3), target=torch.ops.aten.neg.default)
    assert T._node_supported(node) is True
    assert not (tmp_path / "pending").exists()
    sig, hit, key = json.loads((tmp_path / "verdicts.jsonl").read_text())
    assert hit is True and "aten.neg.default" in key


def test_dtype_rule_sends_host_computed_dtypes_to_the_fallback():
    # a lowering verdict for complex / wide unsigned dtypes does not put them on the chip, except
    # in views and memory operators, which compute nothing
    ops = T.aggregate_records([
        ["aten::mul.Tensor", "float32", True, "mul"], ["aten::mul.Tensor", "complex64", True, "mul"],
        ["aten::view", "complex64", True, "view"], ["aten::copy_", "uint64", True, "copy"],
        ["aten::bitwise_and.Tensor", "uint32", True, "bitwise_and"],
    ])
    assert ops["aten::mul.Tensor"] == {"device_dtypes": ["float32"], "cpu_dtypes": ["complex64"], "seen_in": ["mul"]}
    assert ops["aten::view"]["device_dtypes"] == ["complex64"]
    assert ops["aten::copy_"]["device_dtypes"] == ["uint64"]
    assert ops["aten::bitwise_and.Tensor"]["cpu_dtypes"] == ["uint32"]


def test_committed_table_follows_the_dtype_rule():
    table = json.loads((Path(T.__file__).resolve().parents[1] / "data" / "op_support.json").read_text())["ops"]
    assert T.apply_dtype_rule(table) == table


def test_merge_replaces_records_not_verdicts():
    # a full run saw index_add_ float32 lower in the index_add entry; re-probing stft (whose
    # sample does not lower it) must not move it to the CPU
    old = [["aten::index_add_", "float32", True, "index_add"], ["aten::index_add_", "float32", False, "stft"],
           ["aten::_fft_r2c", "float32", False, "stft"]]
    new = [["aten::index_add_", "float32", False, "stft"], ["aten::_fft_r2c", "float32", True, "stft"]]
    ops = T.aggregate_records(T.merge_records(old, new, {"stft"}))
    assert ops["aten::index_add_"]["device_dtypes"] == ["float32"]
    assert ops["aten::_fft_r2c"]["device_dtypes"] == ["float32"]  # stft's own verdicts are replaced


def test_merge_without_the_full_records_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        T.main(["--merge", "--ops", "stft", "--json", str(tmp_path / "t.json"), "--md", str(tmp_path / "t.md")])
    assert "--records" in capsys.readouterr().err


def test_samples_without_elements_do_not_count(monkeypatch):
    """OpInfo's first 40 ``unfold`` samples have a batch of 0, which torch-mlir does not lower:
    they judge nothing (and are passed over), and ``im2col`` is judged on the samples with
    elements, whose decomposition (indexing a padded input) lowers."""
    from torch.testing._internal.common_methods_invocations import op_db

    (empty,) = _nodes(lambda x: F.unfold(x, 2), torch.randn(0, 1, 5, 5), target=torch.ops.aten.im2col.default)
    assert T._node_supported(empty) is None
    monkeypatch.setattr(T, "DTYPES", (torch.float32,))
    unfold = next(o for o in op_db if o.name == "nn.functional.unfold")
    records = T._probe_entry(unfold, samples=1)
    im2col = [ok for q, d, ok, _ in records if q == "aten::im2col" and d == "float32"]
    assert im2col and all(im2col)
    assert T.aggregate_records(records)["aten::im2col"]["device_dtypes"] == ["float32"]


def test_empty_results_and_data_dependent_sizes_still_judge():
    """Only inputs without elements make a sample unjudged: batch norm in eval mode (whose saved
    statistics are empty) and ``masked_select`` (whose size is data-dependent) are judged."""
    x, m = torch.randn(2, 3, 4), torch.randn(3)
    (bn,) = _nodes(lambda x, rm, rv: torch.ops.aten._native_batch_norm_legit_no_training(x, None, None, rm, rv, 0.1, 1e-5),
                   x, m, m.abs(), target=torch.ops.aten._native_batch_norm_legit_no_training.default)
    assert not T._touches_empty_tensor(bn)
    assert T._node_supported(bn) is True
    (sel,) = _nodes(lambda x: torch.masked_select(x, x > 0), x, target=torch.ops.aten.masked_select.default)
    assert not T._touches_empty_tensor(sel)
    assert T._node_supported(sel) is not None
