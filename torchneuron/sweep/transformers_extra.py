"""The transformers builder's repair pass: configuration fixes and input recipes for architectures
that none of the earlier passes of :func:`torchneuron.sweep.registry.build_transformers` builds.

Everything here runs only after the earlier passes failed for an architecture, so no model that
built before changes its configuration or its inputs.

* :func:`repair_config` -- per-architecture overrides (``_OVERRIDES``, keyed by the ``model_type``
  of a configuration or sub-configuration, each with its reason) and generic repairs of coupled
  fields the reduction left inconsistent.
* :func:`prepare_config` -- before the reduction: unset fields with a natural default (expert
  counts, key/value heads, vocabulary), one layer of each attention type the architecture mixes.
* :func:`model_from_config` -- ``AutoModel.from_config``, for composite configurations whose model
  reads one part (MusicGen) and attributes a default configuration lacks (dropout rates).
* :func:`reinit_vanishing_convolutions` -- He initialisation where convolutions were drawn ~50x
  too narrow for the signal to survive (ALIGN).
* :func:`extra_candidates` -- further input recipes: layout boxes, language ids, region features,
  image pairs, 4-D spectrograms, video clips, codec latents, every recognised modality together
  with the text; :func:`derived_candidate` completes a recipe after the model's own error message
  (image placeholder tokens).
"""

from __future__ import annotations

import inspect
import math
import re

import torch

from .registry import scaled_sections

# model_type of a configuration (or sub-configuration; its class name where it has none) ->
# attributes set after the reduction (a callable value is called with the configuration)
_OVERRIDES: dict[str, dict] = {
    # EfficientNet's last convolution is round_filters(1280) = 1280 * width_coefficient wide while
    # its batch norm and pooler read ``hidden_dim``: scale every stage width down with the reduced
    # hidden_dim (128 = 1280 * 0.1) instead of leaving a 2560-wide top against a 128-wide norm
    # (ALIGN's tower has no top convolution: its last stage, 320 * 0.1, meets the reduced
    # projection_dim of 32). Blocks per stage are ceil(repeats * depth_coefficient): 0.1 keeps one
    # block per stage (B7's 3.1 makes ~55 blocks, through which the random-init activations
    # vanish to ~1e-30 and ALIGN's normalised image embedding becomes inf)
    "efficientnet": {"width_coefficient": 0.1, "depth_coefficient": 0.1},
    "align_vision_model": {"width_coefficient": 0.1, "depth_coefficient": 0.1},
    # per-layer patterns that default configurations leave to the checkpoint (``None``) while the
    # model indexes them per layer: LFM2-MoE interleaves short convolutions with attention,
    # DeepSeek-OCR 2's text model starts dense and continues with experts
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},
    "deepseek_ocr2_text": {"mlp_layer_types": ["dense", "sparse"]},
    # Granite 4 Vision injects (vision layer, language layer) pairs; none by default
    "granite4_vision": {"deepstack_layer_map": [(-1, 0), (-2, 1)], "downsample_rate": "1/4"},
    # HunYuan-VL's text model always rotates with its 4 multimodal axes (``xdrope_section``,
    # [16, 16, 16, 16] for 128-wide heads); a default configuration has none: 4 equal sections of
    # the reduced rotary half-width
    "hunyuan_vl_text": {"rope_parameters": lambda c: {**(c.rope_parameters or {}), "mrope_section": [
        (c.head_dim or c.hidden_size // c.num_attention_heads) // 8] * 4}},
    # DBRX's attention clamps q/k/v unconditionally (``clamp(-clip_qkv, clip_qkv)``), which fails
    # on the default ``None``: the released checkpoints' 8
    "DbrxAttentionConfig": {"clip_qkv": 8.0},  # (no model_type: keyed by class name)
    # WavTokenizer quantizes its hidden states directly (no projections around the quantizer): the
    # codebook is as wide as the reduced hidden size
    "wavtokenizer": {"codebook_dim": lambda c: c.hidden_size},
    # TimmBackbone wraps a timm model named by the configuration and has no default: the smallest
    # classic CNN timm ships (random weights, no download)
    "timm_backbone": {"backbone": "resnet18", "use_pretrained_backbone": False},
    # EdgeTAM's default backbone names its RepViT in a misspelt key (``archirecture``), so the timm
    # wrapper builds its own default, a ResNet-50, whose stages (256 ... 2048 channels) do not meet
    # the neck's ``backbone_channel_list`` (RepViT-M1's 384, 192, 96, 48): the RepViT-M1 it means,
    # one block per stage
    "edgetam_vision_model": {"backbone_config": lambda c: _timm_architecture(
        c.backbone_config, "repvit_m1", depth=(1, 1, 1, 1))},
    # the PP-OCRv6 text detectors' necks fuse all four PP-LCNetV4 stages top-down (each upsampled 2x
    # onto the previous one) and size their inputs by the stage widths; a default PP-LCNetV4 is the
    # recognition variant (stages 1-2 at one resolution, [2, 1] strides that halve the height only,
    # the last stage out): the detection variant of the released detectors (stride 2 on both sides
    # at the start of stages 2-4, every stage out) and the neck's widths read off it. The medium
    # detector's intra-class blocks (7/5/3-wide square, vertical and horizontal kernels), per-level
    # upsampling and head kernels come with its checkpoint (``None`` by default): the released ones
    "pp_ocrv6_small_det": {"backbone_config": lambda c: _lcnet_detection_backbone(c.backbone_config),
                           "layer_list_out_channels": lambda c: list(c.backbone_config.stage_out_channels)},
    "pp_ocrv6_medium_det": {"backbone_config": lambda c: _lcnet_detection_backbone(c.backbone_config),
                            "intraclass_block_config": lambda c: c.intraclass_block_config or _INTRACLASS_BLOCK,
                            "scale_factor_list": lambda c: c.scale_factor_list or [1, 2, 4, 8],
                            "kernel_list": lambda c: c.kernel_list or [3, 2, 2]},
    # LW-DETR's multi-scale projector has one level per ``projector_scale_factors`` entry, none by
    # default (the checkpoints': one level at the ViT's own stride for the tiny to medium models);
    # the fields its configuration derives from them in ``__post_init__``, at the reduced d_model
    "lw_detr": {"projector_scale_factors": [1.0], "projector_in_channels": lambda c: [c.d_model],
                "projector_out_channels": lambda c: c.d_model, "num_feature_levels": 1},
    # its ViT attends in 4 x 4 windows of its patch grid: of the reduced 4 x 4 grid, 2 x 2 windows
    # of 2 x 2 patches rather than 16 windows of one patch each
    "lw_detr_vit": {"num_windows": 4, "num_windows_side": 2},
    # OneFormer's pixel decoder (``conv_dim``, ``mask_dim``) is as wide as its transformer decoder
    # (``hidden_dim``, all 256 by default), which otherwise projects each level with convolutions
    # it keeps in a plain list, unregistered (never moved to the device): all at the reduced width
    "oneformer": {"conv_dim": lambda c: c.hidden_dim, "mask_dim": lambda c: c.hidden_dim},
    # UVDoc's head fuses every bridge stage (``bridge_connector[0] * len(stage_configs)`` channels,
    # the 6 dilated branches concatenated) while the backbone's default ``out_features`` is the last
    # stage alone: all of its stages out
    "uvdoc_backbone": {"out_features": lambda c: list(c.stage_names[1:])},
    # SAM 3's ViT attends in 24 x 24 windows of its 72 x 72 patch grid, every 8th layer globally
    # (7, 15, 23, 31 of 32): of the reduced 4 x 4 grid and 2 layers, 2 x 2 windows of 2 patches and
    # a global last layer, not one 24 x 24 window that is mostly padding and no global layer
    "sam3_vit_model": {"window_size": lambda c: max(1, c.image_size // c.patch_size // 2),
                       "global_attn_indexes": lambda c: [c.num_hidden_layers - 1]},
    # Cohere Compass rotates per layer type (``rope_parameters[layer_type]``, ``None`` for a layer
    # type without rotation) while a default configuration has none at all: the default rotation
    # for every layer type, its multimodal sections ([24, 20, 20] of 128-wide heads) scaled to the
    # reduced heads
    "cohere_compass_text": {"rope_parameters": lambda c: {t: {
        "rope_type": "default", "rope_theta": 10000.0, "mrope_section": scaled_sections([24, 20, 20], c.head_dim // 2)}
        for t in dict.fromkeys(c.layer_types)}},
    # the Qwen Omni thinkers' multimodal positions start at ``vision_start_token_id``, which the
    # released checkpoints set in the thinker configuration and the default one lacks: the Qwen
    # tokenizer's <|vision_start|> / <|vision_end|> (remapped into the reduced vocabulary)
    "qwen2_5_omni_thinker": {"vision_start_token_id": 151652, "vision_end_token_id": 151653},
    "qwen3_omni_moe_thinker": {"vision_start_token_id": 151652, "vision_end_token_id": 151653},
    # (Qwen2.5-Omni's text rotation falls back to the multimodal sections [16, 24, 24] of 128-wide
    # heads: scaled to the reduced heads)
    "qwen2_5_omni_text": {"rope_parameters": lambda c: {**(c.rope_parameters or {}), "mrope_section": scaled_sections(
        [16, 24, 24], c.hidden_size // c.num_attention_heads // 2)}},
    # MiniCPM-V's vision tower merges 2 x 2 windows of patches after layer ``insert_layer_id`` (6
    # of 27): after the first of the reduced layers (at 6 no merge would run)
    "minicpm_ocr_vision": {"insert_layer_id": 0},
    "minicpmv4_7_vision": {"insert_layer_id": 0},
    # PerceptionLM's vision tower is a timm Perception Encoder ViT (the released checkpoints':
    # ``vit_pe_core_large_patch14_336``) whose ``model_args["embed_dim"]`` the projector reads; a
    # default configuration wraps timm's ResNet-50 without any (reduced as any wrapped ViT below)
    "perception_lm": {"vision_config": lambda c: _with(c.vision_config, architecture="vit_pe_core_large_patch14_336")},
    # Step 3.7's text model builds its sliding-window mask whatever the layer types, from a
    # ``sliding_window`` a default configuration leaves unset (8: shorter than the 16-token
    # inputs); its first 3 layers are dense, then experts (as DeepSeek-OCR 2 above: one of each),
    # and its shared expert is as wide as the routed ones (1280 both by default)
    "step3p5": {"sliding_window": 8, "mlp_layer_types": ["dense", "sparse"],
                "share_expert_dim": lambda c: c.moe_intermediate_size},
    # BLT: the global transformer reads the local encoder's patch states, ``cross_attn_k`` x its
    # width, through a projection the configuration decides on from the unreduced widths (none
    # where they are equal, 2 x 1024 = 2048 by default) and the local models take the global width
    # as ``hidden_size_global``: both from the reduced widths, with the configuration's formula; the
    # hash n-gram embeddings (6 x 500,002 rows, 192M parameters at width 64) as the text vocabulary
    "blt": {"encoder_hash_byte_group_vocab": 512,
            "global_config": lambda c: _with(c.global_config, encoder_cross_output_size=(
                c.encoder_config.hidden_size * c.cross_attn_k
                if c.encoder_config.hidden_size * c.cross_attn_k != c.global_config.hidden_size else None)),
            "encoder_config": lambda c: _with(c.encoder_config, hidden_size_global=c.global_config.hidden_size),
            "decoder_config": lambda c: _with(c.decoder_config, hidden_size_global=c.global_config.hidden_size)},
    # Dots 3 Note: the rotated part of each layer type's heads (``partial_rotary_factor``), which
    # the configuration derives from the unreduced widths (64 of 256), from the reduced ones; its
    # sparse-attention indexer (64 heads of 128, top 2048 keys) at the reduced head width, top 8 of
    # the 16 tokens, and a window of 8 (512); the shared expert as wide as the routed ones (1536 both by default)
    "dots3_note_text": {
        "rope_parameters": lambda c: {t: {**p, "partial_rotary_factor": c.per_layer_config[t].qk_rope_head_dim
                                          / c.per_layer_config[t].head_dim} for t, p in c.rope_parameters.items()},
        "index_n_heads": 4, "index_head_dim": 16, "index_topk": 8, "sliding_window": 8,
        "shared_experts_intermediate_size": lambda c: c.moe_intermediate_size},
    # PaliGemma (PI0's VLM) projects image features to ``projection_dim`` (which its configuration
    # copies to the vision configuration, where the projector reads it) straight into the text
    # embeddings (2048 both by default): the reduced text width
    "paligemma": {"projection_dim": lambda c: c.text_config.hidden_size,
                  "vision_config": lambda c: _with(c.vision_config, projection_dim=c.text_config.hidden_size)},
    # Chameleon and Emu3 turn images into VQ-GAN codes and the codes into text tokens through the
    # tokenizer's vocabulary (``vocabulary_map``: token name -> id), which a default configuration
    # lacks: a vocabulary of the image placeholder, Emu3's end-of-row token and one token per code
    # of a codebook of half the reduced text vocabulary (8192 / 32768 codes by default); the VQ-GAN
    # 32 channels wide at its first level (GroupNorm's 32 groups) instead of 128 / 256
    "chameleon": {"vocabulary_map": lambda c: _vq_vocabulary(c, ["<image>"], lambda i: "IMGIMG" + "".join(
        chr(ord("A") + int(d)) for d in str(i)) + "Z")},
    "chameleon_vqgan": {"num_embeddings": lambda c: _VQ_CODES, "base_channels": 32},
    "emu3": {"vocabulary_map": lambda c: _vq_vocabulary(c, ["<image>", "<|extra_200|>"],
                                                        lambda i: f"<|visual token {i:06d}|>")},
    # (Emu3's VQ attention runs at the level ``attn_resolutions`` names: its width is that level's)
    "emu3_vqgan": {"codebook_size": lambda c: _VQ_CODES, "base_channels": 32,
                   "hidden_size": lambda c: 32 * c.channel_multiplier[c.attn_resolutions[0]]},
    # ERNIE 4.5 VL rotates heights and widths interleaved (``stack([h, w])``: equal sections) and
    # time after them, [22, 22, 20] of 64 frequencies by default: the same split of the reduced heads'
    "ernie4_5_vl_moe_text": {"rope_parameters": lambda c: {**(c.rope_parameters or {}), "mrope_section": _hw_t_sections(
        (_get(c, "head_dim") or c.hidden_size // c.num_attention_heads) // 2)}},
    # Nemotron ASR's (streaming Fast Conformer) attention masks its relative-position scores with
    # ``attention_mask.logical_not()``, written for a boolean keep-mask (SDPA's); the eager
    # implementation the reduction picks gets an additive float mask, whose zeros (visible) become
    # "masked": every score -inf, every output NaN. SDPA, the implementation it is written for
    # (also the encoder of Nemotron 3.5 ASR)
    "nemotron_asr_streaming_encoder": {"_attn_implementation": "sdpa"},
    # CLVP's encoders rotate the first max(projection_dim / (2 * heads), 32) channels of each head:
    # 32 of the checkpoints' 64-wide heads. At the reduced width 4 heads are 16 wide, narrower than
    # the rotation; one 64-wide head keeps the half-rotated head of the original
    "clvp_encoder": {"num_attention_heads": 1},
    # its speech encoder embeds the speech tokens its decoder predicts (argmax over the decoder's
    # vocabulary): both read one speech vocabulary (8194 in the checkpoints; a default configuration
    # gives the encoder the 256-token text vocabulary, which the decoder's ids overrun)
    "clvp": {"speech_config": lambda c: _with(c.speech_config, vocab_size=c.decoder_config.vocab_size)},
    # Dia's decoder cross-attends with heads of its own (16 x 128 = the checkpoints' 2048-wide
    # decoder), which the reduction leaves: the reduced heads, as wide as the reduced decoder
    "dia_decoder": {"cross_num_attention_heads": 4, "cross_num_key_value_heads": 4, "cross_head_dim": 16},
    # Kyutai STT embeds text and the codebooks' tokens in one table, ``vocab_size`` text tokens then
    # ``num_codebooks`` x ``codebook_vocab_size`` audio tokens, and pads audio with the row after the
    # last (69569 = 4001 + 32 x 2049 by default): that row of the reduced table; its audio BOS is
    # a codebook token (2048), the last of a codebook (not a text id: no remapping)
    "kyutai_speech_to_text": {
        "audio_pad_token_id": lambda c: c.vocab_size + c.num_codebooks * c.codebook_vocab_size,
        "audio_bos_token_id": lambda c: c.codebook_vocab_size - 1},
    # Muse Spark's audio tower is a pyramid of one stage per entry of ``patch_sizes`` (16, 6, 5, 4:
    # 1920 samples per token, which the model checks its input against) and ``num_hidden_layers``
    # must count them, as ``hidden_sizes`` and ``depths`` do. All four stages, widths doubling to
    # the reduced 64 (256 ... 2048 by default), projected to the reduced text width
    "muse_spark_audio": {
        "num_hidden_layers": lambda c: len(c.patch_sizes),
        "hidden_sizes": lambda c: [64 >> (len(c.patch_sizes) - 1 - i) for i in range(len(c.patch_sizes))],
        "out_hidden_size": 64},
}


def _with(cfg, **fields):
    """``cfg`` with ``fields`` set."""
    for key, val in fields.items():
        _set(cfg, key, val)
    return cfg


def _hw_t_sections(total: int) -> list[int]:
    """Rotary sections (height, width, time) of ``total`` frequencies split as ERNIE 4.5 VL's
    [22, 22, 20] of 64: equal height and width sections."""
    hw = (total - total * 20 // 64) // 2
    return [hw, hw, total - 2 * hw]


_VQ_CODES = 256  # codebook of the reduced VQ image tokenizers (Chameleon, Emu3)


def _vq_vocabulary(cfg, specials: list[str], code_name) -> dict[str, int]:
    """A tokenizer vocabulary of the VQ image tokens (``code_name(i)`` for each of the ``_VQ_CODES``
    codes) and the ``specials``, from the top of the reduced text vocabulary down; sets the image
    placeholder id the configuration derives from the vocabulary."""
    vocab = (_get(cfg, "text_config") or cfg).vocab_size
    top = {name: vocab - 1 - i for i, name in enumerate(specials)}
    codes = {code_name(i): vocab - len(specials) - _VQ_CODES + i for i in range(_VQ_CODES)}
    _set(cfg, "image_token_id", top["<image>"])
    return {**codes, **top}


# PP-OCR's intra-class block: (kernel, stride, padding) of its convolutions, 1 x 1 around
# 7/5/3-wide square, vertical (k x 1) and horizontal (1 x k) ones
_INTRACLASS_BLOCK = {"reduce_channel": [1, 1, 0], "return_channel": [1, 1, 0], **{
    f"{name}_{ratio}": [list(shape(k)), [1, 1], [d // 2 for d in shape(k)]]
    for name, shape in (("vertical_long_to_small_conv", lambda k: (k, 1)),
                        ("horizontal_small_to_long_conv", lambda k: (1, k)),
                        ("symmetric_conv_long", lambda k: (k, k)))
    for ratio, k in (("longratio", 7), ("midratio", 5), ("shortratio", 3))}}


def _lcnet_detection_backbone(cfg):
    """A PP-LCNetV4 configuration as a detection backbone: the first block of every stage after the
    first downsamples by 2 on both sides, every stage is an output."""
    blocks = [[list(b) for b in stage] for stage in cfg.block_configs]
    for i, stage in enumerate(blocks):
        for j, block in enumerate(stage):
            block[3] = 2 if i > 0 and j == 0 else 1
    _set(cfg, "block_configs", blocks)
    _set(cfg, "out_features", list(cfg.stage_names[1:]))
    return cfg


def _timm_architecture(cfg, arch: str, **model_args):
    """``cfg`` (a timm wrapper configuration) building ``arch``, with further ``model_args``."""
    _set(cfg, "architecture", arch)
    _set(cfg, "model_args", {**(_get(cfg, "model_args") or {}), **model_args})
    return cfg


def _get(cfg, key):
    try:
        return getattr(cfg, key, None)
    except Exception:  # noqa: BLE001 -- e.g. per-layer attributes refuse global access
        return None


def _set(cfg, key, val) -> None:
    try:
        setattr(cfg, key, val)
    except Exception:  # noqa: BLE001
        pass


def _subconfigs(cfg, depth: int = 0):
    from transformers import PretrainedConfig

    yield cfg
    if depth < 3:
        for key in list(vars(cfg)):
            sub = _get(cfg, key)
            if isinstance(sub, PretrainedConfig):
                yield from _subconfigs(sub, depth + 1)


def repair_config(cfg) -> None:
    """Overrides and generic repairs of the repair pass, on ``cfg`` and its sub-configurations."""
    for c in _subconfigs(cfg):
        _reduce_layer_overrides(c)
        _repair_one(c)
        for key, val in (_OVERRIDES.get(_get(c, "model_type") or "") or _OVERRIDES.get(type(c).__name__, {})).items():
            _set(c, key, val(c) if callable(val) else val)
        for key, fn in _DERIVED.get(_get(c, "model_type") or "", {}).items():
            _set(c, key, fn(c))
    # a decoder's cross-attention reads the encoder's output width (T5Gemma, Dia)
    enc = _get(cfg, "encoder") or _get(cfg, "encoder_config")
    if _int(_get(enc, "hidden_size")):
        for c in _subconfigs(cfg):
            for key in ("cross_attention_hidden_size", "cross_hidden_size"):
                if _int(_get(c, key)):
                    _set(c, key, enc.hidden_size)
    # a head that projects from its audio encoder's output declares that width itself (Nemotron 3
    # diarization's ``head_config.audio_hidden_size``, 512 by default): the reduced encoder's
    for c in _subconfigs(cfg):
        audio, head = _get(c, "audio_config"), _get(c, "head_config")
        if _int(_get(head, "audio_hidden_size")) and _int(_get(audio, "hidden_size")):
            _set(head, "audio_hidden_size", audio.hidden_size)
    # DepthPro: patches of ``patch_size`` pixels (the patch encoder's input size, 384 by default)
    # cut from images scaled by ``scaled_images_ratios``; features hooked from its layers
    pm = _get(cfg, "patch_model_config")
    if _get(cfg, "scaled_images_ratios") is not None and _int(_get(pm, "image_size")):
        _set(cfg, "patch_size", pm.image_size)
        hooks, n = _get(cfg, "intermediate_hook_ids"), _get(pm, "num_hidden_layers")
        if isinstance(hooks, (list, tuple)) and _int(n) and any(h >= n for h in hooks):
            _set(cfg, "intermediate_hook_ids", type(hooks)(max(0, n - 1 - i) for i in range(len(hooks))))
    _sam_feature_geometry(cfg)
    _remap_placeholder_ids(cfg)


def _sam_feature_geometry(cfg) -> None:
    """SAM 2-style models (SAM 2, EdgeTAM, SAM 3 tracker) reshape their vision encoder's feature
    maps to ``backbone_feature_sizes`` (given for 1024-pixel images) and embed prompts on a grid of
    ``image_size // patch_size`` cells (the prompt encoder's), which must be the lowest-resolution
    map the mask decoder reads: both measured on the vision encoder the configuration builds, at
    the prompt encoder's image size (the side of the image recipe, 32)."""
    vc, pe = _get(cfg, "vision_config"), _get(cfg, "prompt_encoder_config")
    # the feature pyramid reads the (rescaled) Hiera stages from the deepest: ``backbone_channel_list``
    bb = _get(vc, "backbone_config")
    if isinstance(_get(vc, "backbone_channel_list"), list) and isinstance(_get(bb, "embed_dim_per_stage"), list):
        _set(vc, "backbone_channel_list", bb.embed_dim_per_stage[::-1])
    sizes, side = _get(vc, "backbone_feature_sizes"), _get(pe, "image_size")
    if not isinstance(sizes, (list, tuple)) or not sizes or not _int(side) or not _int(_get(pe, "patch_size")):
        return
    from transformers import AutoModel

    from .registry import _find

    with torch.random.fork_rng(), torch.no_grad():
        enc = AutoModel.from_config(vc).eval()
        maps = enc(torch.zeros(1, int(_find(vc, "num_channels") or 3), side, side)).fpn_hidden_states
    got = [list(m.shape[-2:]) for m in maps[:len(sizes)]]
    if len(got) == len(sizes) and got[-1][0] == got[-1][1] and side % got[-1][0] == 0:
        _set(vc, "backbone_feature_sizes", got)
        _set(pe, "patch_size", side // got[-1][0])


# heterogeneous configurations whose per-layer overrides are reduced with them (the others, Gemma 4's
# per-layer head widths, NeoMME's windows ..., build as they are)
_REDUCED_PER_LAYER = ("dots3_note_text",)


def _reduce_layer_overrides(cfg) -> None:
    """The per-layer overrides of a heterogeneous configuration reduced as the reduction reduced the
    configuration (multi-head layers stay multi-head), for the layers left; their attributes
    unreadable on the configuration again (see :func:`prepare_config`)."""
    from .registry import _REDUCE

    spec, n = _get(cfg, "_heterogeneity_spec"), _get(cfg, "num_hidden_layers")
    if spec is None or not _int(n) or _get(cfg, "model_type") not in _REDUCED_PER_LAYER:
        return
    new = {}
    for i, o in spec.per_layer_overrides.items():
        if i >= n:
            continue
        r = {k: min(v, _REDUCE[k]) if k in _REDUCE and _int(v) else v for k, v in o.items()}
        if o.get("num_key_value_heads") is not None and o.get("num_key_value_heads") == o.get("num_attention_heads"):
            r["num_key_value_heads"] = r["num_attention_heads"]
        new[i] = r
    cfg.per_layer_config = None
    cfg.per_layer_config = new
    cfg.allow_global_per_layer_attribute_access = False


def _remap_placeholder_ids(cfg) -> None:
    """Special token ids (image/video/audio placeholders, boundaries ...) beyond the reduced text
    vocabulary, which the models embed before replacing them: distinct ids from the top of the
    vocabulary down (each original id keeps one new id across the sub-configurations)."""
    text = _get(cfg, "text_config") or cfg
    vocab = _get(text, "vocab_size")
    if not _int(vocab):
        return
    new: dict[int, int] = {}
    for c in _subconfigs(cfg):
        for key in list(vars(c)):
            v = _get(c, key)
            if key.endswith(("_token_id", "_token_index")) and _int(v) and v >= vocab \
                    and key not in _OVERRIDES.get(_get(c, "model_type") or "", {}):  # set on purpose
                if v not in new:
                    new[v] = vocab - 1 - len(new)
                _set(c, key, new[v])


# model_type -> fields its configuration derives from others in ``__post_init__`` (so from the
# unreduced widths): recomputed from the reduced ones, with the configuration's own formulas
_DERIVED: dict[str, dict] = {
    # X-Codec quantizes the acoustic and semantic features concatenated: the codebook is as wide as
    # both reduced widths (``hidden_size``, a property), not the 1024 derived from the defaults
    "xcodec": {"codebook_dim": lambda c: c.hidden_size},
    "zamba2": {
        "attention_hidden_size": lambda c: 2 * c.hidden_size,
        "attention_head_dim": lambda c: 2 * c.hidden_size // c.num_attention_heads,
        "mamba_headdim": lambda c: int(c.mamba_expand * c.hidden_size) // c.n_mamba_heads,
    },
}


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _repair_one(cfg) -> None:
    # a timm ViT wrapped by a transformers model (Perception Encoder video towers): created by
    # name at full size unless ``model_args`` say otherwise -- 2 blocks of width 64, 4 x 4 patches
    arch = _get(cfg, "architecture")
    if _get(cfg, "model_type") == "timm_wrapper" and _get(cfg, "model_args") is None and isinstance(arch, str) \
            and re.search(r"(^|_)(vit|eva)", arch):
        m = re.search(r"patch(\d+)", arch)
        _set(cfg, "model_args", {"img_size": 4 * int(m.group(1)) if m else 64, "depth": 2, "embed_dim": 64,
                                 "num_heads": 4})
    # Hiera (SAM 2's image encoder): the patch embedding is ``hidden_size`` wide and so is the first
    # stage (``embed_dim_per_stage[0]``), each later stage doubling it; the reduction cut the former
    # only. The stages scaled alike (64 ... 512 for 96 ... 768), at most 2 blocks each, the global
    # attention blocks moved into the cut stages (SAM 2.1-tiny's 5, 7, 9 are in stage 2's 7 blocks)
    widths, blocks, hidden = _get(cfg, "embed_dim_per_stage"), _get(cfg, "blocks_per_stage"), _get(cfg, "hidden_size")
    if isinstance(widths, list) and isinstance(blocks, list) and _int(hidden) and widths and widths[0] != hidden:
        _set(cfg, "embed_dim_per_stage", [w * hidden // widths[0] for w in widths])
        cut = [min(b, 2) for b in blocks]
        starts = [sum(blocks[:i]) for i in range(len(blocks))]
        glob = set()
        for g in _get(cfg, "global_attention_blocks") or []:
            stage = max(i for i, s in enumerate(starts) if s <= g)
            glob.add(sum(cut[:stage]) + min(g - starts[stage], cut[stage] - 1))
        _set(cfg, "blocks_per_stage", cut)
        _set(cfg, "global_attention_blocks", sorted(glob))
    # a ViT backbone cut to fewer layers than its stages (LW-DETR, RF-DETR: the outputs of layers
    # 2, 4, 5, 9 of 10 and 2, 5, 8, 11 of 12, concatenated by the projector): the output layers
    # spread over the reduced depth in proportion, and the windowed-attention layers among those
    # before the last, which stays global (as the released models' output layers are)
    out, n, names = _get(cfg, "out_indices"), _get(cfg, "num_hidden_layers"), _get(cfg, "stage_names")
    if isinstance(out, (list, tuple)) and out and isinstance(names, (list, tuple)) and _int(n) \
            and len(out) > 1 and len(names) - 1 > n and max(out) > n and _get(cfg, "depths") is None:
        old = len(names) - 1
        _set(cfg, "stage_names", list(names[:n + 1]))
        _set(cfg, "out_indices", sorted({max(1, min(n, round(i * n / old))) for i in out}))
        for key in ("window_block_indices", "window_block_indexes"):
            if isinstance(_get(cfg, key), (list, tuple)):
                _set(cfg, key, [i for i in _get(cfg, key) if i < n - 1])
    depths = _get(cfg, "depths")
    # hierarchical (Swin-style) encoders inside a larger model (CLAP's HTS-AT audio tower): the
    # patch embedding width doubles per stage and the last stage's width is the output width
    # ``hidden_size`` the projections read
    base_key = next((k for k in ("patch_embeds_hidden_size", "embed_dim") if _int(_get(cfg, k))), None)
    if base_key is not None and isinstance(depths, (list, tuple)) and depths and _int(_get(cfg, "hidden_size")):
        if base_key == "patch_embeds_hidden_size":
            _set(cfg, base_key, min(_get(cfg, base_key), 16))
        base = _get(cfg, base_key)
        _set(cfg, "hidden_size", base * 2 ** (len(depths) - 1))
        heads = _get(cfg, "num_attention_heads")
        if isinstance(heads, (list, tuple)) and len(heads) == len(depths) and all(_int(h) for h in heads):
            # each stage's heads divide its width
            _set(cfg, "num_attention_heads", type(heads)(
                max(d for d in range(1, h + 1) if (base << i) % d == 0) for i, h in enumerate(heads)))
    # further vocabularies (Gemma 3n's per-layer input embeddings: 262,144 x 30 x 256) as the main one
    for key in list(vars(cfg)):
        v = _get(cfg, key)
        if "vocab_size" in key and key != "vocab_size" and _int(v) and v > 512:
            _set(cfg, key, 512)
    # grouped convolutions over the hidden width (Mimi's depthwise upsampling: 512 groups of 512
    # channels): groups must divide the reduced width; the gcd keeps depthwise depthwise
    hidden = _get(cfg, "hidden_size")
    for key in list(vars(cfg)):
        v = _get(cfg, key)
        if key.endswith("_groups") and "key_value" not in key and _int(v) and _int(hidden) and v > 1 \
                and hidden % v:
            _set(cfg, key, math.gcd(v, hidden))
    # a flattened patch's width (RADIO): channels x patch area, after the patch size was reduced
    pdim, patch, ch = _get(cfg, "patch_dim"), _get(cfg, "patch_size"), _get(cfg, "num_channels")
    if _int(pdim) and _int(patch) and _int(ch):
        _set(cfg, "patch_dim", ch * patch * patch)
    # feature-pyramid width, read by the detection/mask heads at their (reduced) hidden width (SAM 3)
    if _int(_get(cfg, "fpn_hidden_size")) and _get(cfg, "fpn_hidden_size") > 64:
        _set(cfg, "fpn_hidden_size", 64)
    # widths that default to the (unreduced) hidden size (xLSTM's embedding_dim)
    hidden = _get(cfg, "hidden_size")
    if _int(hidden) and _int(_get(cfg, "embedding_dim")) and _get(cfg, "embedding_dim") > hidden:
        _set(cfg, "embedding_dim", hidden)
    # indices of the hybrid layers, derived from the layer types before the depth was cut (Zamba2)
    kinds = _get(cfg, "layers_block_type")
    if isinstance(kinds, (list, tuple)) and isinstance(_get(cfg, "hybrid_layer_ids"), (list, tuple)):
        _set(cfg, "hybrid_layer_ids", [i for i, k in enumerate(kinds) if k == "hybrid"])
    # layers that reuse an earlier layer's key/value cache (Gemma 3n: the last 10 of 30): none once
    # the depth is cut, so that every layer type still produces its own cache
    shared, n = _get(cfg, "num_kv_shared_layers"), _get(cfg, "num_hidden_layers")
    if _int(shared) and _int(n) and shared and shared >= n - 1:
        _set(cfg, "num_kv_shared_layers", 0)
    # TVP pads each frame into a ``max_img_size`` canvas framed by a learnt prompt of
    # ``visual_prompt_size`` pixels: a 64-pixel canvas with an 8-pixel frame (448 and 96 by default)
    if _int(_get(cfg, "max_img_size")) and _int(_get(cfg, "visual_prompt_size")):
        _set(cfg, "max_img_size", min(_get(cfg, "max_img_size"), 64))
        _set(cfg, "visual_prompt_size", min(_get(cfg, "visual_prompt_size"), 8))
    # spectrogram transformers (AST): the patch grid is sized for ``max_length`` frames of
    # ``num_mel_bins``; 64 frames instead of 1024
    if _int(_get(cfg, "num_mel_bins")) and _int(_get(cfg, "time_stride")) and _int(_get(cfg, "max_length")):
        _set(cfg, "max_length", min(_get(cfg, "max_length"), 64))


def _required(sig) -> list[str]:
    return [k for k, prm in sig.items() if prm.default is inspect.Parameter.empty
            and prm.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]


def _boxes(batch: int, seq: int, dim: int, scale: float, integer: bool) -> torch.Tensor:
    """``(batch, seq, dim)`` boxes ``x0, y0, x1, y1`` (repeated for 8-coordinate quads) with
    ``x0 <= x1``, ``y0 <= y1``, in ``[0, scale)``."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(batch, seq, 2, generator=g), torch.rand(batch, seq, 2, generator=g)
    box = torch.cat([torch.minimum(a, b), torch.maximum(a, b)], dim=-1) * (scale - 1)
    if dim == 8:  # quads: (x0, y0), (x1, y0), (x1, y1), (x0, y1)
        box = box[..., [0, 1, 2, 1, 2, 3, 0, 3]]
    return box.long() if integer else box


def extra_candidates(model, sig, cfg, batch: int, text: dict, other: dict) -> list[dict]:
    """Input recipes of the repair pass (see the module docstring)."""
    from .registry import _find, _first_leaf, _vision_cfg

    seq = text["input_ids"].shape[1] if "input_ids" in text else 16
    extra: list[dict] = []  # secondary inputs, each also tried with the text and every modality
    if "bbox" in sig:  # layout models: one box per token
        dim = int(_find(cfg, "dim_bbox") or 4)
        pos = _find(cfg, "max_2d_position_embeddings")
        if isinstance(pos, int):
            extra.append({"bbox": _boxes(batch, seq, dim, min(pos, 1000), True)})
        extra.append({"bbox": _boxes(batch, seq, dim, 1.0, False)})
    task_len, task_vocab = _find(cfg, "task_seq_len"), _find(cfg, "text_encoder_vocab_size")
    if "task_inputs" in sig and _int(task_len) and _int(task_vocab):
        # OneFormer: the tokenized task prompt ("the task is semantic"), ``task_seq_len`` ids
        extra.append({"task_inputs": torch.randint(3, min(task_vocab, 100), (batch, task_len))})
    if "lang_ids" in sig:  # X-MOD: the language adapter of each sequence
        extra.append({"lang_ids": torch.zeros(batch, dtype=torch.long)})
    feat, pos = _find(cfg, "visual_feat_dim"), _find(cfg, "visual_pos_dim")
    if "visual_feats" in sig and isinstance(feat, int) and isinstance(pos, int):  # LXMERT: region features + boxes
        extra.append({"visual_feats": torch.randn(batch, 8, feat), "visual_pos": torch.rand(batch, 8, pos)})
    mel, frames = _get(cfg, "num_mel_bins"), _get(cfg, "max_length")
    if "input_values" in sig and _int(mel) and _int(frames) and _int(_get(cfg, "time_stride")):
        extra.append({"input_values": torch.randn(batch, frames, mel)})  # AST: (batch, frames, mel bins)
    per_tok, mel = _get(cfg, "audio_length_per_tok"), _find(cfg, "num_mel_bins")
    if "input_features" in sig and "input_ids" in text and _int(per_tok) and _int(mel):
        # Voxtral Realtime adds one audio embedding to each text token's (streaming: the audio is
        # as long as the text), ``audio_length_per_tok`` spectrogram frames each
        extra.append({"input_features": torch.randn(batch, mel, seq * per_tok)})
    if _get(cfg, "model_type") == "voxtral_realtime_text" and "input_ids" in text and _int(_get(cfg, "hidden_size")):
        # its decoder layers scale the MLP input by the delay conditioning ``t_cond`` (a keyword
        # argument; no default), which the full model computes as the sinusoidal embedding of its
        # default 6 delay tokens, ``(1, 1, hidden)``: the same
        half = cfg.hidden_size // 2
        freqs = 6.0 * torch.exp(-math.log(10000.0) * torch.arange(half).float() / half)
        extra.append({"t_cond": torch.cat([freqs.cos(), freqs.sin()])[None, None]})
    nq = _find(cfg, "latent_query_num")
    if "image_embeds_position_mask" in sig and _int(nq) and "input_ids" in text:
        # Kosmos-2: the image's latent queries replace ``latent_query_num`` placeholder tokens after
        # the first token, marked by the mask
        ids = torch.cat([text["input_ids"][:, :1], torch.full((batch, nq), 3), text["input_ids"][:, 1:]], dim=1)
        mask = torch.zeros_like(ids)
        mask[:, 1:1 + nq] = 1
        text = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "image_embeds_position_mask": mask}
    texts = [text]
    vocab = _find(cfg, "vocab_size")
    if "input_ids" in text and _get(_get(cfg, "text_config") or cfg, "vocab_size") is None and _int(vocab) \
            and 3 < vocab <= int(text["input_ids"].max()):
        # the vocabulary is a sub-configuration's (FastSpeech 2 with HiFi-GAN: ``model_config``, 78
        # phonemes), the recipes' ids were drawn below 100: the same ids folded into it
        ids = 3 + (text["input_ids"] - 3) % (vocab - 3)
        texts.append({**text, "input_ids": ids})
    ncb = _find(cfg, "num_codebooks")
    if "input_ids" in text and _int(ncb) and ncb > 1:
        # audio-token decoders (MusicGen): one sequence per codebook, ``(batch * codebooks, seq)``
        ids = text["input_ids"].repeat_interleave(ncb, dim=0)
        texts.append({**text, "input_ids": ids, "attention_mask": torch.ones(batch, ids.shape[1], dtype=torch.long)})
    cvs = _find(cfg, "codebook_vocab_size")
    if "input_ids" in text and _int(ncb) and _int(cvs):
        # Kyutai STT: per step one text token and one token of each codebook, ``(batch, seq, 1 +
        # codebooks)``, the audio tokens counted within their codebook
        audio = torch.randint(0, cvs, (batch, seq, ncb), generator=torch.Generator().manual_seed(0))
        texts.append({**text, "input_ids": torch.cat([text["input_ids"].unsqueeze(-1), audio], dim=-1)})
    dch = _find(_get(cfg, "decoder_config") or cfg, "num_channels", "num_codebooks")
    if "decoder_input_ids" in text and _int(dch) and dch > 1:
        # Dia: the decoder reads ``num_channels`` codebooks per step, ``(batch, seq, channels)``
        dec = text["decoder_input_ids"]
        texts.append({**text, "decoder_input_ids": dec.unsqueeze(-1).repeat(1, 1, dch)})
    hidden = _find(cfg, "hidden_size", "d_model")
    if "input_values" in sig and "decoder_input_values" in sig and _int(hidden) and not isinstance(
            _first_leaf(model), torch.nn.Conv1d):
        # SpeechT5's bare encoder-decoder: no speech/text pre-nets, the inputs are hidden states
        extra.append({"input_values": torch.randn(batch, 16, hidden), "decoder_input_values": torch.randn(batch, 8, hidden)})
    if "pixel_values_videos" in sig:  # video clips at the vision tower's input size
        args = _find(cfg, "model_args")
        side = args.get("img_size") if isinstance(args, dict) else _get(_vision_cfg(cfg), "image_size")
        if _int(side):
            video = {"pixel_values_videos": torch.randn(batch, 4, 3, side, side)}
            if "input_values" in sig:  # with mono audio (Perception Encoder audio-video)
                extra += [{**video, "input_values": torch.randn(batch, 1, 3840)},
                          {**video, "input_values": torch.randn(batch, 3840)}]
            extra.append(video)
    if "latents" in sig and _int(hidden):  # codec decoders (Mimi, Pocket TTS): latent frames
        extra += [{"latents": torch.randn(batch, hidden, 8)}, {"latents": torch.randn(batch, 8, hidden)}]
    vc = _vision_cfg(cfg)
    p, c = int(_find(vc, "patch_size") or 16), int(_find(vc, "num_channels") or 3)
    if "spatial_shapes" in sig and "pixel_values" in sig:  # NaFlex (SigLIP 2): flattened patches + grid
        side = 8
        extra.append({"pixel_values": torch.randn(batch, side * side, c * p * p),
                      "pixel_attention_mask": torch.ones(batch, side * side, dtype=torch.long),
                      "spatial_shapes": torch.tensor([[side, side]] * batch)})
    if "pixel_position_ids" in sig and "pixel_values" in sig:
        # Gemma 4 vision: flattened patches in [0, 1) and their (x, y) patch coordinates
        for side in (6, 4, 3):
            xy = torch.stack(torch.meshgrid(torch.arange(side), torch.arange(side), indexing="xy"), -1).reshape(-1, 2)
            extra.append({"pixel_values": torch.rand(batch, side * side, c * p * p),
                          "pixel_position_ids": xy.expand(batch, -1, -1).contiguous()})
    size = _get(vc, "image_size")
    ch = int(_get(vc, "num_channels") or 3)
    mods: list[dict] = []  # primary inputs of other modalities
    if "pixel_values" in sig:
        hw = tuple(size) if isinstance(size, (list, tuple)) and len(size) == 2 else (size, size) \
            if isinstance(size, int) else (32, 32)
        mods.append({"pixel_values": torch.randn(batch, ch, *hw)})
        # windowed backbones (LW-DETR, RF-DETR) need several windows of patches: larger images
        mods += [{"pixel_values": torch.randn(batch, ch, e, e)} for e in (64, 128) if e > max(hw)]
        frames = int(_find(cfg, "num_frames") or 4)
        for n in (2, frames):  # image pairs (keypoint matchers), video clips
            for side in ((hw, (64, 64)) if max(hw) < 64 else (hw,)):
                mods.append({"pixel_values": torch.randn(batch, n, ch, *side)})
        if "image_attention_mask" in sig:  # IDEFICS: images per sample, and which text sees which image
            for m in list(mods):
                if m["pixel_values"].dim() == 5 and m["pixel_values"].shape[-1] == hw[-1]:
                    extra.append({**m, "image_attention_mask": torch.ones(batch, seq, m["pixel_values"].shape[1],
                                                                          dtype=torch.long)})
    if "input_features" in sig and "input_features" in other:  # spectrograms as one-channel images
        f = other["input_features"]
        mods.append({"input_features": f.transpose(1, 2).unsqueeze(1).contiguous()})
        # frames delta-expanded and/or stacked (Granite Speech 5: 4 x mel bins per frame); 128 mel
        # bins where the configuration does not say (Gemma 4's audio tower)
        mel = _find(cfg, "num_mel_bins")
        for width in ([4 * mel, 2 * mel] if _int(mel) else []) + [128]:
            if width != f.shape[1]:
                feats = torch.randn(batch, 64, width)
                masks = {m: torch.ones(batch, 64, dtype=torch.long) for m in ("attention_mask", "input_features_mask")
                         if m in sig}
                mods += [{"input_features": feats, **masks}, {"input_features": feats}]
    cands: list[dict] = []
    if "target_sizes" in sig and "pixel_values" in sig:
        # MiniCPM-V vision towers: the images' patches side by side in one row of patches,
        # ``(1, channels, patch, patches x patch)``, and each image's patch grid
        side = 32 // p
        cands.append({"pixel_values": torch.randn(1, c, p, batch * side * side * p),
                      "target_sizes": torch.tensor([[side, side]] * batch, dtype=torch.int32)})
    vlm, dit = _get(cfg, "vlm_config"), _get(cfg, "dit_config")
    if "action_embeds" in sig and "pixel_attention_mask" in sig and vlm is not None and dit is not None:
        # PI0: the VLM's prefix -- 2 camera images, a placeholder per image token, then the text --
        # and the action expert's state token + a chunk of noisy actions, already embedded
        vv = vlm.vision_config
        per_image, cams, chunk = (vv.image_size // vv.patch_size) ** 2, 2, int(_get(cfg, "chunk_size") or 8)
        ids = torch.cat([torch.full((batch, cams * per_image), vlm.image_token_id), text["input_ids"]], dim=1)
        cands.append({"action_embeds": torch.randn(batch, 1 + chunk, dit.hidden_size), "input_ids": ids,
                      "pixel_values": torch.randn(batch, cams, vv.num_channels, vv.image_size, vv.image_size),
                      "attention_mask": torch.ones_like(ids),
                      "pixel_attention_mask": torch.ones(batch, cams, dtype=torch.bool)})
    vq, tok = _get(cfg, "vq_config"), _get(cfg, "image_token_id")
    if "image_sizes" in sig and "pixel_values" in sig and vq is not None and _int(tok) and "input_ids" in text:
        # Emu3: an image is the VQ-GAN's grid of codes (2^(levels - 1) pixels a side each) read row
        # by row with an end-of-row token, ``rows x (columns + 1)`` placeholders in the text
        side, n = 32, 32 // 2 ** (len(vq.channel_multiplier) - 1)
        ids = torch.cat([torch.full((batch, n * (n + 1)), tok), text["input_ids"]], dim=1)
        cands.append({"input_ids": ids, "attention_mask": torch.ones_like(ids),
                      "pixel_values": torch.randn(batch, ch, side, side), "image_sizes": torch.tensor([[side, side]] * batch)})
    for m in mods or [{}]:
        for e in extra or [{}]:
            c = {**m, **e}
            for t in texts:
                cands += [{**t, **c}, c]
    for e in extra:  # secondary inputs that carry their own image
        cands += [{**t, **e} for t in texts]
    cands += texts[1:]
    cands = [c for c in cands if c and all(k in c for k in _required(sig))]
    # last, the same recipes for one sample: TVP's grid position embeddings are shaped with the
    # batch size where a 1 belongs, so only a batch of one runs
    cands += [{k: v[:1] if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == batch else v
               for k, v in c.items()} for c in cands]
    return cands


def prepare_config(cfg):
    """Fixes of the repair pass applied before the reduction; returns the configuration to build.

    * ``AutoModel`` entries that name several classes (Funnel: ``FunnelModel``, ``FunnelBaseModel``)
      choose by ``config.architectures``, which a default configuration leaves unset: the first.
    * Unset fields that default to a value elsewhere: ``num_key_value_heads`` (none: multi-head
      attention, as ``num_attention_heads``), ``vocab_size`` (the reduced vocabulary; ESM's comes
    with its tokenizer) and then the padding id, which ESM's position ids count from."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    names = MODEL_MAPPING_NAMES.get(_get(cfg, "model_type") or "")
    if isinstance(names, (list, tuple)) and names and not _get(cfg, "architectures"):
        _set(cfg, "architectures", [names[0]])
    for c in _subconfigs(cfg):
        if _get(c, "is_heterogeneous") and _get(c, "model_type") in _REDUCED_PER_LAYER:
            # per-layer overrides (Dots 3 Note's sliding layers: 64 heads of latent rank 1024, the
            # others 128 of 512) make their attributes unreadable on the configuration, and so
            # unreduced: readable for the reduction; :func:`_reduce_layer_overrides` then reduces
            # the overrides alike
            c.allow_global_per_layer_attribute_access = True
        _representative_layer_types(c)
        # mixtures of experts whose expert counts come with the checkpoint: 4 experts, 2 per
        # token, one shared expert, the reduced expert width
        moe_keys = ("num_experts_per_tok", "top_k_experts", "moe_intermediate_size", "n_shared_experts")
        for key in ("num_experts", "n_routed_experts"):
            if key in vars(c) and _get(c, key) is None and any(k in vars(c) for k in moe_keys):
                _set(c, key, 4)
                for k, v in zip(moe_keys, (2, 2, 64, 1), strict=True):
                    if k in vars(c) and _get(c, k) is None:
                        _set(c, k, v)
        if "n_shared_experts" in vars(c) and _get(c, "n_shared_experts") is None and _int(_get(c, "n_routed_experts")):
            _set(c, "n_shared_experts", 1)
        lt = _get(c, "layer_types")
        if isinstance(lt, (list, tuple)) and "sliding_attention" in lt and "sliding_window" in vars(c) \
                and _get(c, "sliding_window") is None:
            _set(c, "sliding_window", 8)  # shorter than the 16-token inputs, so the window masks
        if "num_key_value_heads" in vars(c) and _get(c, "num_key_value_heads") is None \
                and _int(_get(c, "num_attention_heads")):
            _set(c, "num_key_value_heads", _get(c, "num_attention_heads"))
        if "vocab_size" in vars(c) and _get(c, "vocab_size") is None:
            _set(c, "vocab_size", 512)
            if "pad_token_id" in vars(c) and _get(c, "pad_token_id") is None:
                _set(c, "pad_token_id", 1)
    return cfg


def _representative_layer_types(cfg) -> None:
    """Per-layer attention types cut to the reduced depth keep every type the architecture mixes:
    the first layer of each type, in order of appearance (Gemma 3n, NeoMME: 2 sliding layers out of
    ``[sliding x 4, full]`` would leave no global layer, whose cache the model looks up)."""
    from .registry import _REDUCE

    lt, n = _get(cfg, "layer_types"), _get(cfg, "num_hidden_layers")
    if not isinstance(lt, (list, tuple)) or not _int(n):
        return
    n = min(n, _REDUCE["num_hidden_layers"])  # the depth the reduction will cut the list to
    if len(lt) <= n:
        return
    kinds = list(dict.fromkeys(lt))
    if len(kinds) < 2 or set(lt[:n]) == set(kinds):
        return
    keep = sorted(lt.index(k) for k in kinds)
    keep += [i for i in range(len(lt)) if i not in keep][:max(0, n - len(keep))]
    keep.sort()
    spec = _get(cfg, "_heterogeneity_spec") if _get(cfg, "model_type") in _REDUCED_PER_LAYER else None
    if spec is not None:  # per-layer overrides follow their layers
        overrides = {j: dict(spec.per_layer_overrides[i]) for j, i in enumerate(keep) if i in spec.per_layer_overrides}
        cfg.per_layer_config = None
    _set(cfg, "num_hidden_layers", len(keep))
    _set(cfg, "layer_types", [lt[i] for i in keep])
    if spec is not None:
        cfg.per_layer_config = overrides
    # other per-layer lists of the same length follow the same layers
    for key in list(vars(cfg)):
        v = _get(cfg, key)
        if key != "layer_types" and key.endswith("_types") and isinstance(v, (list, tuple)) and len(v) == len(lt):
            _set(cfg, key, [v[i] for i in keep])


# configuration attributes some default configurations lack while their model reads them
_MISSING_DEFAULTS = {"dropout": 0.0, "dropout_rate": 0.0, "attention_dropout": 0.0, "hidden_dropout": 0.0,
                     "activation_dropout": 0.0}


def model_from_config(cfg):
    """``AutoModel.from_config(cfg)``; for a composite configuration whose ``AutoModel`` class is
    built from one of its parts (MusicGen: ``MusicgenModel`` is the decoder alone and reads the
    ``MusicgenDecoderConfig``), that class from that part; a class the mapping names but its
    package does not export (Voxtral Realtime's text model), from its modeling module."""
    from transformers import AutoModel

    try:
        cls = AutoModel._model_mapping[type(cfg)]
    except ValueError as exc:
        m = re.match(r"Could not find (\w+) neither in", str(exc))
        if not m:
            raise
        import importlib

        from transformers.models.auto.configuration_auto import model_type_to_module_name

        name = model_type_to_module_name(cfg.model_type)
        cls = getattr(importlib.import_module(f"transformers.models.{name}.modeling_{name}"), m.group(1), None)
        if cls is None:
            raise
        return cls._from_config(cfg)
    cls = cls[0] if isinstance(cls, (list, tuple)) else cls
    want = getattr(cls, "config_class", None)
    if isinstance(want, type) and not isinstance(cfg, want):
        part = next((c for c in _subconfigs(cfg) if isinstance(c, want)), None)
        if part is not None:
            return cls._from_config(part)
    if type(cfg) not in AutoModel._model_mapping and isinstance(cfg, want):
        # the class ``AutoModel`` names for the model type, where its reverse lookup from the
        # configuration class does not find it (Evolla: ``EvollaConfig`` is also registered under
        # the alias model type "EvollaModel", which shadows "evolla")
        return cls._from_config(cfg)
    for _ in range(4):
        try:
            return AutoModel.from_config(cfg)
        except AttributeError as exc:  # a dropout rate the default configuration lacks: none
            m = re.match(r"'(\w+)' object has no attribute '(\w+)'", str(exc))
            owner = m and next((c for c in _subconfigs(cfg) if type(c).__name__ == m.group(1)), None)
            if owner is not None and m.group(2) == "num_key_value_heads" and _int(_get(owner, "num_attention_heads")):
                # multi-head attention where the configuration names no key/value heads (Moonshine
                # Streaming's decoder reads them off the top-level configuration)
                object.__setattr__(owner, m.group(2), owner.num_attention_heads)
                continue
            rp = _get(cfg, "rope_parameters")
            if owner is not None and m.group(2) == "rope_theta" and isinstance(rp, dict) and "rope_theta" in rp:
                # DBRX's attention sub-configuration: the base of the model's own rope parameters
                object.__setattr__(owner, "rope_theta", rp["rope_theta"])
                continue
            if owner is None or m.group(2) not in _MISSING_DEFAULTS:
                raise
            object.__setattr__(owner, m.group(2), _MISSING_DEFAULTS[m.group(2)])
    return AutoModel.from_config(cfg)


def reinit_vanishing_convolutions(model) -> None:
    """He (fan-in) initialisation of ``model``'s convolutions drawn far narrower than PyTorch's own
    initialisation (std below ``0.25 / sqrt(fan_in)``; PyTorch's is ``0.58 / sqrt(fan_in)``).

    ALIGN draws every convolution weight normal with std 0.02 (its linear layers' rule): a 3x3
    depthwise convolution then scales activations down ~50-fold and after seven blocks the
    image embedding was ~1e-30 (its L2 normalisation gave inf). Weights only; no model whose
    convolutions are drawn at PyTorch's or He's scale changes."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.conv._ConvNd) and m.weight.numel():
            fan_in = m.weight[0].numel()
            if float(m.weight.detach().float().std()) < 0.25 / fan_in ** 0.5:
                torch.nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")


_PLACEHOLDER_ERROR = re.compile(r"(image|video|audio)\w* (?:features|tokens) and \1\w* (?:features|tokens) do not match"
                                r".*?tokens:? (\d+),? features:? (\d+)", re.I | re.S)


def derived_candidate(cand: dict, exc: Exception, cfg) -> dict | None:
    """A recipe completed after the model's own error message: a vision-language model whose text
    lacks the placeholder tokens its image features replace ("Image features and image tokens do
    not match, tokens: 0, features: N") gets N / batch placeholders per sequence, with the
    placeholder id of its configuration."""
    m = _PLACEHOLDER_ERROR.search(str(exc))
    ids = cand.get("input_ids")
    if not m or not isinstance(ids, torch.Tensor) or ids.dim() != 2 or int(m.group(2)):
        return None
    kind, feats = m.group(1).lower(), int(m.group(3))
    from .registry import _find

    tok = _find(cfg, f"{kind}_token_id", f"{kind}_token_index")
    batch = ids.shape[0]
    if not _int(tok) or feats % batch or not feats:
        return None
    ids = torch.cat([torch.full((batch, feats // batch), int(tok)), ids], dim=1)
    out = {**cand, "input_ids": ids}
    for k in ("attention_mask",):
        if k in cand:
            out[k] = torch.ones_like(ids)
    return out
