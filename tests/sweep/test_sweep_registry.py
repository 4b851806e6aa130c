"""Sweep registry: timm's smallest-variant selection and cache, torchvision families, and the
detection case (train-mode targets, what is compared)."""

from __future__ import annotations

import json

import pytest
import torch

from torchneuron.sweep import registry

timm = pytest.importorskip("timm")


def test_timm_smallest_per_module_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHNEURON_SWEEP_CACHE", str(tmp_path))
    monkeypatch.setattr(timm, "list_modules", lambda: ["ghostnet", "mobilevit"])
    got = registry.timm_smallest()
    for module, name in got.items():
        sizes = {}
        for n in timm.list_models(module=module):
            with torch.device("meta"):
                sizes[n] = sum(p.numel() for p in timm.create_model(n, num_classes=10).parameters())
        assert sizes[name] == min(sizes.values()), (module, name, sizes)
    assert set(got) == {"ghostnet", "mobilevit"}
    cache = json.loads((tmp_path / f"timm-{timm.__version__}-smallest.json").read_text())
    assert cache == got
    monkeypatch.setattr(registry, "_timm_param_count", lambda n: pytest.fail("cache not used"))
    assert registry.timm_smallest() == got
    assert registry.timm_family(got["mobilevit"]) == "mobilevit"


def test_timm_fixed_size_model_gets_a_small_input():
    case = registry.build("timm", "test_vit")
    (x,) = case.inputs.values()
    assert x.shape[-1] < 224 and case.family == "vision_transformer"


def test_torchvision_families():
    assert registry.tv_family("wide_resnet50_2") == "wideresnet"
    assert registry.tv_family("mobilenet_v3_small") == "mobilenet_v3"
    assert registry.tv_family("fasterrcnn_mobilenet_v3_large_fpn") == "fasterrcnn"
    for suite in ("torchvision_detection", "torchvision_segmentation", "torchvision_video", "torchvision_optical_flow"):
        assert registry.list_models(suite), suite
    assert "quantized_resnet18" not in registry.list_models("torchvision")


def test_detection_case_targets_and_dense_comparison():
    case = registry.build("torchvision_detection", "fcos_resnet50_fpn")
    assert case.loss == "sum" and case.family == "fcos"
    targets = case.train_inputs["targets"]
    assert len(targets) == len(case.inputs["images"]) == 2
    assert all(t["boxes"].shape[-1] == 4 and t["labels"].dtype == torch.int64 for t in targets)
    m = case.model.eval()
    with torch.no_grad():
        dense = case.compare(m, case.inputs)
        assert set(dense) == {"images", "features", "head"}
        assert set(dense["head"]) == {"cls_logits", "bbox_regression", "bbox_ctrness"}
        m.train()
        losses = m(**case.train_inputs)
    assert set(losses) == {"classification", "bbox_regression", "bbox_ctrness"}


@pytest.mark.parametrize("suite,name", [("torchvision", "vit_b_32"), ("timm", "sequencer2d_s")])
def test_zero_initialised_head_gets_weights_so_the_output_depends_on_the_model(suite, name):
    case = registry.build(suite, name)
    with torch.no_grad():
        out = case.model.eval()(**case.inputs)
    assert out.abs().max() > 0.05


@pytest.mark.parametrize("name", ["mobilevit", "mobilevitv2"])
def test_randomly_drawn_batch_norms_are_reset_so_the_output_does_not_vanish(name):
    pytest.importorskip("transformers")
    case = registry.build("transformers", name)
    norms = [m for m in case.model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms and all(bool((m.weight == 1).all()) and not m.bias.any() for m in norms)
    with torch.no_grad():
        out = case.model.eval()(**case.inputs)
    assert out.last_hidden_state.abs().max() > 1e-6  # ~1.5e-40 and 0.0 with the drawn scales


def test_s3d_convolutions_get_he_initialisation():
    case = registry.build("torchvision_video", "s3d")
    convs = [m for m in case.model.modules() if isinstance(m, torch.nn.Conv3d)]
    for m in convs:
        fan_in = m.weight[0].numel()
        assert float(m.weight.std()) == pytest.approx((2 / fan_in) ** 0.5, rel=0.25), m


@pytest.mark.parametrize("name,shapes", [
    # a Qwen2-VL-style tower whose patches have no temporal dimension
    ("cosmos3_edge_vision", {"pixel_values": (16, 192), "grid_thw": (1, 3)}),
    # NaFlex patch sequences with their mask and (h, w) grid
    ("siglip2_vision_model", {"pixel_values": (2, 64, 192), "pixel_attention_mask": (2, 64), "spatial_shapes": (2, 2)}),
    # trajectories named by the signature, sized by state_dim / act_dim
    ("decision_transformer", {"states": (2, 8, 17), "actions": (2, 8, 4), "rewards": (2, 8, 1),
                              "returns_to_go": (2, 8, 1), "timesteps": (2, 8), "attention_mask": (2, 8)}),
])
def test_late_recipes_cover_models_no_earlier_recipe_runs(name, shapes):
    pytest.importorskip("transformers")
    case = registry.build("transformers", name)
    assert {k: tuple(v.shape) for k, v in case.inputs.items()} == shapes
    with torch.no_grad():
        case.model.eval()(**case.inputs)


def test_late_recipes_leave_earlier_choices_alone():
    pytest.importorskip("transformers")
    case = registry.build("transformers", "bert")
    assert {k: tuple(v.shape) for k, v in case.inputs.items()} == {"input_ids": (2, 16), "attention_mask": (2, 16)}
