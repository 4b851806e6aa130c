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


# ----------------------------------------------------------------------------- repair pass

@pytest.mark.parametrize("name,shapes", [
    # layout boxes per token (8 coordinates: Bros reads quadrilaterals)
    ("bros", {"input_ids": (2, 16), "attention_mask": (2, 16), "bbox": (2, 16, 8)}),
    # a language adapter id per sequence
    ("xmod", {"input_ids": (2, 16), "attention_mask": (2, 16), "lang_ids": (2,)}),
    # Kosmos-2: latent query placeholders marked by the mask, with the image
    ("kosmos-2", {"input_ids": (2, 80), "attention_mask": (2, 80), "image_embeds_position_mask": (2, 80),
                  "pixel_values": (2, 3, 32, 32)}),
    # image pairs for a keypoint matcher
    ("efficientloftr", {"pixel_values": (2, 2, 3, 32, 32)}),
    # one sequence per codebook
    ("musicgen", {"input_ids": (8, 16), "attention_mask": (2, 16)}),
    # a text token and one token per codebook at each step
    ("kyutai_speech_to_text", {"input_ids": (2, 16, 33), "attention_mask": (2, 16)}),
    # as many audio embeddings (8 spectrogram frames each) as text tokens
    ("voxtral_realtime", {"input_ids": (2, 16), "attention_mask": (2, 16), "input_features": (2, 128, 128)}),
    # the delay conditioning its decoder layers read
    ("voxtral_realtime_text", {"input_ids": (2, 16), "attention_mask": (2, 16), "t_cond": (1, 1, 64)}),
    # MiniCPM-V's vision tower: the images' patches in one row, each image's patch grid
    ("minicpm_ocr_vision", {"pixel_values": (1, 3, 8, 256), "target_sizes": (2, 2)}),
    # OneFormer: the tokenized task prompt beside the image
    ("oneformer", {"pixel_values": (2, 3, 32, 32), "task_inputs": (2, 77)}),
    # PI0: two camera images and their placeholders, the state token and a chunk of noisy actions
    ("pi0", {"action_embeds": (2, 51, 64), "input_ids": (2, 48), "pixel_values": (2, 2, 3, 32, 32),
             "attention_mask": (2, 48), "pixel_attention_mask": (2, 2)}),
])
def test_repair_pass_recipes(name, shapes):
    pytest.importorskip("transformers")
    case = registry.build("transformers", name)
    assert {k: tuple(v.shape) for k, v in case.inputs.items()} == shapes
    with torch.no_grad():
        case.model.eval()(**case.inputs)


def test_repair_pass_config_fixes():
    transformers = pytest.importorskip("transformers")
    from torchneuron.sweep import transformers_extra as extra

    # every attention type the architecture mixes survives the depth cut
    cfg = transformers.PretrainedConfig()
    cfg.num_hidden_layers = 6
    cfg.layer_types = ["sliding_attention"] * 5 + ["full_attention"]
    cfg.mlp_layer_types = ["dense"] * 5 + ["sparse"]
    extra._representative_layer_types(cfg)
    assert cfg.layer_types == ["sliding_attention", "full_attention"] and cfg.num_hidden_layers == 2
    assert cfg.mlp_layer_types == ["dense", "sparse"]
    # unset expert counts and key/value heads get values; placeholder ids move into the vocabulary
    cfg = transformers.PretrainedConfig()
    cfg.num_experts, cfg.top_k_experts, cfg.moe_intermediate_size = None, None, None
    cfg.num_attention_heads, cfg.num_key_value_heads = 4, None
    extra.prepare_config(cfg)
    assert (cfg.num_experts, cfg.top_k_experts, cfg.moe_intermediate_size, cfg.num_key_value_heads) == (4, 2, 64, 4)
    cfg.vocab_size, cfg.image_token_id, cfg.video_token_id = 512, 151655, 151656
    extra.repair_config(cfg)
    assert (cfg.image_token_id, cfg.video_token_id) == (511, 510)
    # per-architecture overrides by model_type, configuration-derived fields recomputed
    eff = transformers.AutoConfig.for_model("efficientnet")
    extra.repair_config(eff)
    assert eff.width_coefficient == 0.1
    z = transformers.AutoConfig.for_model("zamba2", hidden_size=64, num_attention_heads=4, n_mamba_heads=8)
    z.hidden_size = 32
    extra.repair_config(z)
    assert (z.attention_hidden_size, z.attention_head_dim, z.mamba_headdim) == (64, 16, 8)


def test_rotary_sections_scaled_to_the_reduced_heads():
    from torchneuron.sweep import transformers_extra as extra

    # sums to the reduced half-width, at least one frequency per section
    assert registry.scaled_sections([16, 24, 24], 8) == [2, 3, 3]
    assert registry.scaled_sections([24, 20, 20], 3) == [1, 1, 1]
    # ERNIE 4.5 VL's split keeps height and width equal; at its own width it is its default
    assert extra._hw_t_sections(64) == [22, 22, 20]
    assert extra._hw_t_sections(8) == [3, 3, 2]


def test_vision_necks_meet_the_backbone_the_configuration_builds():
    pytest.importorskip("transformers")
    # SAM 2: Hiera's stages scaled with its reduced width; the neck reads them deepest first, the
    # feature sizes and the prompt grid are the encoder's at the recipe's 32 pixels
    sam2 = registry.build("transformers", "sam2").model.config
    vc = sam2.vision_config
    assert vc.backbone_channel_list == vc.backbone_config.embed_dim_per_stage[::-1]
    assert vc.backbone_config.embed_dim_per_stage[0] == vc.backbone_config.hidden_size
    side = sam2.prompt_encoder_config.image_size
    assert vc.backbone_feature_sizes[-1] == [side // sam2.prompt_encoder_config.patch_size] * 2
    # EdgeTAM: the RepViT its default configuration names in a misspelt key, not timm's ResNet-50
    edgetam = registry.build("transformers", "edgetam").model.config
    assert edgetam.vision_config.backbone_config.architecture == "repvit_m1"
    # a ViT backbone cut to 2 layers: its output layers spread over them, the last one global
    lw = registry.build("transformers", "lw_detr").model.config.backbone_config
    assert lw.out_indices[-1] == lw.num_hidden_layers and len(lw.stage_names) == lw.num_hidden_layers + 1


def test_a_recipe_with_a_nan_output_is_no_choice():
    pytest.importorskip("transformers")
    from torchneuron.sweep.runner import has_nan

    # Nemotron ASR's eager attention reads its additive mask as a keep-mask (every output NaN):
    # the reference would be refused, so the builder goes on to the repair pass, which runs SDPA
    case = registry.build("transformers", "nemotron_asr_streaming_encoder")
    assert case.model.config._attn_implementation == "sdpa"
    with torch.no_grad():
        out = case.model.eval()(**case.inputs)
    assert not has_nan(out)
    assert has_nan({"a": [torch.ones(2), (torch.tensor([float("nan")]),)]})
    assert not has_nan((torch.ones(2), torch.zeros(2, dtype=torch.long)))


def test_placeholder_tokens_derived_from_the_error_message():
    pytest.importorskip("transformers")
    from torchneuron.sweep import transformers_extra as extra

    cfg = type("Cfg", (), {"image_token_id": 7})()
    cand = {"input_ids": torch.zeros(2, 5, dtype=torch.long), "attention_mask": torch.ones(2, 5, dtype=torch.long)}
    exc = ValueError("Image features and image tokens do not match, tokens: 0, features: 6")
    out = extra.derived_candidate(cand, exc, cfg)
    assert out["input_ids"].shape == (2, 8) and (out["input_ids"][:, :3] == 7).all()
    assert out["attention_mask"].shape == (2, 8)
    assert extra.derived_candidate(cand, ValueError("other"), cfg) is None


def test_inputs_needed_only_for_training():
    pytest.importorskip("transformers")
    # Molmo2 refuses to train without the multimodal token types; the Qwen-VL family accepts them
    # but trains with its eval inputs, unchanged
    case = registry.build("transformers", "molmo2")
    assert case.train_inputs["mm_token_type_ids"].shape == case.inputs["input_ids"].shape
    assert registry.build("transformers", "qwen2_vl").train_inputs is None
    # FastSpeech 2 trains on its variance targets: 2 frames per token
    case = registry.build("transformers", "fastspeech2_conformer")
    n = case.inputs["input_ids"].shape[1]
    assert case.train_inputs["spectrogram_labels"].shape[1] == 2 * n
    # Reformer's axial position factors multiply to the 16-token training sequence
    assert registry.build("transformers", "reformer").model.config.axial_pos_shape == (4, 4)
