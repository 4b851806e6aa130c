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
}


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
        _repair_one(c)
        for key, val in (_OVERRIDES.get(_get(c, "model_type") or "") or _OVERRIDES.get(type(c).__name__, {})).items():
            _set(c, key, val(c) if callable(val) else val)
        for key, fn in _DERIVED.get(_get(c, "model_type") or "", {}).items():
            _set(c, key, fn(c))
    # a decoder's cross-attention reads the encoder's output width (T5Gemma)
    enc = _get(cfg, "encoder")
    if _int(_get(enc, "hidden_size")):
        for c in _subconfigs(cfg):
            if _int(_get(c, "cross_attention_hidden_size")):
                _set(c, "cross_attention_hidden_size", enc.hidden_size)
    # DepthPro: patches of ``patch_size`` pixels (the patch encoder's input size, 384 by default)
    # cut from images scaled by ``scaled_images_ratios``; features hooked from its layers
    pm = _get(cfg, "patch_model_config")
    if _get(cfg, "scaled_images_ratios") is not None and _int(_get(pm, "image_size")):
        _set(cfg, "patch_size", pm.image_size)
        hooks, n = _get(cfg, "intermediate_hook_ids"), _get(pm, "num_hidden_layers")
        if isinstance(hooks, (list, tuple)) and _int(n) and any(h >= n for h in hooks):
            _set(cfg, "intermediate_hook_ids", type(hooks)(max(0, n - 1 - i) for i in range(len(hooks))))
    _remap_placeholder_ids(cfg)


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
            if key.endswith(("_token_id", "_token_index")) and _int(v) and v >= vocab:
                if v not in new:
                    new[v] = vocab - 1 - len(new)
                _set(c, key, new[v])


# model_type -> fields its configuration derives from others in ``__post_init__`` (so from the
# unreduced widths): recomputed from the reduced ones, with the configuration's own formulas
_DERIVED: dict[str, dict] = {
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
    if "lang_ids" in sig:  # X-MOD: the language adapter of each sequence
        extra.append({"lang_ids": torch.zeros(batch, dtype=torch.long)})
    feat, pos = _find(cfg, "visual_feat_dim"), _find(cfg, "visual_pos_dim")
    if "visual_feats" in sig and isinstance(feat, int) and isinstance(pos, int):  # LXMERT: region features + boxes
        extra.append({"visual_feats": torch.randn(batch, 8, feat), "visual_pos": torch.rand(batch, 8, pos)})
    mel, frames = _get(cfg, "num_mel_bins"), _get(cfg, "max_length")
    if "input_values" in sig and _int(mel) and _int(frames) and _int(_get(cfg, "time_stride")):
        extra.append({"input_values": torch.randn(batch, frames, mel)})  # AST: (batch, frames, mel bins)
    nq = _find(cfg, "latent_query_num")
    if "image_embeds_position_mask" in sig and _int(nq) and "input_ids" in text:
        # Kosmos-2: the image's latent queries replace ``latent_query_num`` placeholder tokens after
        # the first token, marked by the mask
        ids = torch.cat([text["input_ids"][:, :1], torch.full((batch, nq), 3), text["input_ids"][:, 1:]], dim=1)
        mask = torch.zeros_like(ids)
        mask[:, 1:1 + nq] = 1
        text = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "image_embeds_position_mask": mask}
    texts = [text]
    ncb = _find(cfg, "num_codebooks")
    if "input_ids" in text and _int(ncb) and ncb > 1:
        # audio-token decoders (MusicGen): one sequence per codebook, ``(batch * codebooks, seq)``
        ids = text["input_ids"].repeat_interleave(ncb, dim=0)
        texts.append({**text, "input_ids": ids, "attention_mask": torch.ones(batch, ids.shape[1], dtype=torch.long)})
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
    _set(cfg, "num_hidden_layers", len(keep))
    _set(cfg, "layer_types", [lt[i] for i in keep])
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
    ``MusicgenDecoderConfig``), that class from that part."""
    from transformers import AutoModel

    cls = AutoModel._model_mapping[type(cfg)]
    cls = cls[0] if isinstance(cls, (list, tuple)) else cls
    want = getattr(cls, "config_class", None)
    if isinstance(want, type) and not isinstance(cfg, want):
        part = next((c for c in _subconfigs(cfg) if isinstance(c, want)), None)
        if part is not None:
            return cls._from_config(part)
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
