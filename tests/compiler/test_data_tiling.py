"""IREE data tiling: on by default, a program it fails for is compiled again without it, and
boolean program inputs cross the boundary as bytes (IREE cannot pack an i1 argument)."""

from __future__ import annotations

import torch
from helpers import DEVICE

from torchneuron.compiler import executable


def _logs(dump_dir):
    return "".join(p.read_text() for p in dump_dir.rglob("*.compile.log"))


def test_data_tiling_is_on_by_default_and_can_be_switched_off(monkeypatch):
    assert set(executable.TILING_FLAGS) <= set(executable.compile_flags("module {}"))
    # not for convolutions (im2col + data tiling: slower ResNet-18)
    conv = "%0 = stablehlo.convolution(%arg0, %arg1) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]"
    assert not set(executable.TILING_FLAGS) & set(executable.compile_flags(conv))
    monkeypatch.setenv("TORCHNEURON_DATA_TILING", "0")
    assert not set(executable.TILING_FLAGS) & set(executable.compile_flags("module {}"))


def test_a_program_that_fails_with_data_tiling_is_compiled_without_it(monkeypatch, tmp_path):
    # an option IREE does not know stands for a tiling failure: the first attempt must fail
    monkeypatch.setattr(executable, "TILING_FLAGS", ("--iree-no-such-option-for-this-test",))
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path))
    x = torch.randn(16, 32)
    w = torch.randn(32, 8)
    f = torch.compile(lambda a, b: torch.relu(a @ b) * 2, backend="neuron")
    out = f(x.to(DEVICE), w.to(DEVICE)).cpu()
    torch.testing.assert_close(out, torch.relu(x @ w) * 2)
    log = _logs(tmp_path)
    assert "no-such-option-for-this-test" in log  # the failed attempt is in the log
    assert "data tiling failed for this program; compiled again without it" in log


def test_causal_mask_input_compiles_with_data_tiling(tmp_path, monkeypatch):
    """The pattern of adaptive eager's attention window: a boolean mask is a program input."""
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", str(tmp_path))

    def attention_scores(q, k, mask):
        s = (q @ k.transpose(-1, -2)) / 8.0
        return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)

    q, k = torch.randn(2, 4, 128, 64), torch.randn(2, 4, 128, 64)
    mask = torch.ones(128, 128, dtype=torch.bool).tril()
    f = torch.compile(attention_scores, backend="neuron")
    out = f(q.to(DEVICE), k.to(DEVICE), mask.to(DEVICE)).cpu()
    # float32 matmul over 64 terms then softmax: a few ulps of the scores
    torch.testing.assert_close(out, attention_scores(q, k, mask), rtol=1e-5, atol=1e-6)
    log = _logs(tmp_path)
    assert executable.TILING_FLAGS[0] in log
    assert "data tiling failed" not in log
    hlo = "".join(p.read_text() for p in tmp_path.rglob("*.stablehlo.mlir"))
    assert "tensor<128x128xi8>" in hlo and "tensor<128x128xi1>" in hlo  # converted inside


def test_matmul_with_a_centred_right_hand_side_is_exact():
    """IREE 3.13's dispatch-creation data tiling got ``q @ (k - k.mean(-1)).T`` wrong for most
    key counts (MViT's pooled attention after its key norm); the flags in use compute it."""

    def scores(q, k):
        return q @ (k - k.mean(-1, keepdim=True)).transpose(-1, -2)

    f = torch.compile(scores, backend="neuron", fullgraph=True)
    for keys in (3, 9, 25):
        q, k = torch.randn(2, 64, 96), torch.randn(2, keys, 96)
        # float32 sums of 96 products of unit normals: a few ulps of values ~10
        torch.testing.assert_close(f(q.to(DEVICE), k.to(DEVICE)).cpu(), scores(q, k), rtol=1e-5, atol=1e-4)
