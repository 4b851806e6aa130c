"""Model builders per suite.

A *case* is built from its name alone (so a worker subprocess can rebuild it): ``build(suite,
name)`` returns a :class:`Case` -- the model, its example inputs (a dict of keyword arguments,
CPU tensors) and, where the default check does not fit the model, what to compare and which loss
to train.  Sizes are reduced so a whole suite runs on a 2-core machine.

Suites: ``torchvision`` (classification), ``torchvision_detection``, ``torchvision_segmentation``,
``torchvision_video``, ``torchvision_optical_flow``, ``timm`` (one architecture per timm model
module) and ``transformers`` (one base model per ``model_type``).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import re
from collections.abc import Callable

import torch


@dataclasses.dataclass
class Case:
    """One model to check.

    * ``inputs``: keyword arguments of the eval forward (compared CPU vs device).
    * ``train_inputs``: keyword arguments of the training step (default: ``inputs``).
    * ``loss``: ``"square"`` -- mean of the squared floating-point outputs; ``"sum"`` -- the model
      returns a dict of losses in train mode (torchvision detection), their sum is trained.
    * ``compare``: ``compare(model, inputs) -> outputs``; what is compared CPU vs device when the
      model's own eval output is data-dependent (detection: everything computed before the first
      top-k / NMS / score threshold).  The full eval forward still runs on the device
      (``full_eval``) and its output structure is checked.
    * ``family``: the report's family (timm module, torchvision architecture, transformers
      ``model_type``).
    """

    model: torch.nn.Module
    inputs: dict
    train_inputs: dict | None = None
    loss: str = "square"
    compare: Callable | None = None
    full_eval: bool = True
    family: str | None = None


def tv_family(name: str) -> str:
    """torchvision architecture family: ``resnet18`` -> ``resnet``, ``mobilenet_v3_small`` -> ``mobilenet_v3``."""
    name = name.replace("wide_resnet", "wideresnet")
    m = re.match(r"[a-z]+(?:_v\d)?", name)
    return m.group(0) if m else name

# ----------------------------------------------------------------------------- torchvision

_TV_MIN_SIZE = {
    # models whose architecture needs a larger input than the default 64x64
    "inception_v3": 75,
    "googlenet": 64,
}
_TV_FIXED_SIZE = {"swin_t", "swin_s", "swin_b", "swin_v2_t", "swin_v2_s", "swin_v2_b", "maxvit_t"}


def torchvision_names() -> list[str]:
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def build_torchvision(name: str):
    import torchvision

    kwargs: dict = {"weights": None, "num_classes": 10}
    size = _TV_MIN_SIZE.get(name, 64)
    if name.startswith("vit_"):
        size = 56 if name.endswith("_14") else 64  # a few patches of 14/16/32
        kwargs["image_size"] = size
    if name in ("inception_v3", "googlenet"):
        kwargs["aux_logits"] = False
        kwargs["init_weights"] = False
    if name == "maxvit_t":
        size = 224  # every stage's grid must divide by the 7x7 partition
        kwargs["input_size"] = (224, 224)
    if name in _TV_FIXED_SIZE and name != "maxvit_t":
        size = 64
    model = torchvision.models.get_model(name, **kwargs)
    _reinit_zero_linears(model)
    x = torch.randn(2, 3, size, size)
    return Case(model, {_first_arg(model): x}, family=tv_family(name))


def _reinit_zero_linears(model) -> None:
    """Give ``model``'s zero-initialised linear layers random weights (normal, std 0.02).

    torchvision's ViTs and timm's gMLP, Hiera, SAM-2 Hiera and Sequencer initialise their
    classification head to zeros (fine-tuning starts from it): the output is then all zeros
    whatever the layers before compute, so comparing it with the CPU's could not fail. Only a
    model with such a layer draws from the generator here, so other recipes are unchanged."""
    for m in model.modules():
        if isinstance(m, torch.nn.Linear) and not m.weight.any():
            torch.nn.init.normal_(m.weight, std=0.02)


def _reset_drawn_batch_norms(model) -> None:
    """Give ``model``'s batch norms PyTorch's initial scale and shift (ones and zeros) when they
    were drawn at random.

    Six transformers architectures (MobileViT, MobileViTV2, RT-DETR and RT-DETRv2's ResNet
    backbone, PP-DocLayout v3 and v4) initialise BatchNorm weights like linear weights, normal
    with std 0.01-0.02: each convolution block then scales the activations down about fiftyfold,
    MobileViT's output was ~1.5e-40 and MobileViTV2's exactly zero, and comparing them with the
    CPU's could not fail. No random numbers are drawn, so other recipes are unchanged."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.affine and not bool((m.weight == 1).all()):
            with torch.no_grad():
                m.weight.fill_(1.0)
                m.bias.zero_()


def _first_arg(model) -> str:
    return next(iter(inspect.signature(model.forward).parameters))


def _tv_names(module: str) -> Callable[[], list[str]]:
    def names() -> list[str]:
        import importlib

        import torchvision

        return sorted(torchvision.models.list_models(module=importlib.import_module(f"torchvision.models.{module}")))

    return names


# detection: 2 images, min/max size pinned small (RCNN/RetinaNet/FCOS resize to min_size=800 by
# default); SSD and SSDlite have a fixed 300/320 input.  Targets in image coordinates.
_DET_SIZE = 64
_DET_FIXED = {"ssd300_vgg16": 300, "ssdlite320_mobilenet_v3_large": 320}


def _det_targets(size: int, name: str) -> list[dict]:
    s = size / 64.0
    out = []
    for i, (boxes, labels) in enumerate((([[4, 6, 40, 44], [20, 12, 60, 50]], [1, 3]),
                                          ([[8, 8, 30, 56]], [2]))):
        b = torch.tensor(boxes, dtype=torch.float32) * s
        t = {"boxes": b, "labels": torch.tensor(labels, dtype=torch.int64)}
        if name.startswith("maskrcnn"):
            masks = torch.zeros(len(boxes), size, size, dtype=torch.uint8)
            for j, (x0, y0, x1, y1) in enumerate(b.round().long().tolist()):
                masks[j, y0:y1, x0:x1] = 1
            t["masks"] = masks
        if name.startswith("keypointrcnn"):
            g = torch.Generator().manual_seed(i)
            kp = torch.zeros(len(boxes), 17, 3)
            for j, (x0, y0, x1, y1) in enumerate(b.tolist()):
                kp[j, :, 0] = x0 + (x1 - x0) * torch.rand(17, generator=g)
                kp[j, :, 1] = y0 + (y1 - y0) * torch.rand(17, generator=g)
                kp[j, :, 2] = 1
            t["keypoints"] = kp
        out.append(t)
    return out


def _det_dense(model, images):
    """Everything a detector computes before its first data-dependent selection: the transformed
    batch, the backbone (+FPN) features and the dense head outputs (RPN objectness and box deltas
    for the R-CNNs; class logits, box regression (and centerness) for RetinaNet, FCOS and SSD)."""
    from collections import OrderedDict

    batch, _ = model.transform(images)
    feats = model.backbone(batch.tensors)
    if isinstance(feats, torch.Tensor):
        feats = OrderedDict([("0", feats)])
    out = {"images": batch.tensors, "features": list(feats.values())}
    fl = list(feats.values())
    if hasattr(model, "rpn"):
        out["rpn"] = model.rpn.head(fl)
    elif hasattr(model, "head"):
        out["head"] = model.head(fl)
    return out


def build_tv_detection(name: str):
    import torchvision

    kwargs: dict = {"weights": None, "weights_backbone": None, "num_classes": 10}
    size = _DET_FIXED.get(name, _DET_SIZE)
    if name not in _DET_FIXED:
        kwargs.update(min_size=size, max_size=size)
    # at most 8 detections per image: random weights score every box alike, and Keypoint R-CNN's
    # eval post-processing (per-detection heatmap upsampling) would dominate the run otherwise
    if "rcnn" in name:
        kwargs["box_detections_per_img"] = 8
    else:
        kwargs["detections_per_img"] = 8
    model = torchvision.models.get_model(name, **kwargs)
    g = torch.Generator().manual_seed(0)
    images = [torch.rand(3, size, size, generator=g) for _ in range(2)]
    return Case(model, {"images": images}, train_inputs={"images": images, "targets": _det_targets(size, name)},
                loss="sum", compare=lambda m, inp: _det_dense(m, inp["images"]), family=tv_family(name))


def build_tv_segmentation(name: str):
    import torchvision

    model = torchvision.models.get_model(name, weights=None, weights_backbone=None, num_classes=10)
    return Case(model, {_first_arg(model): torch.randn(2, 3, 64, 64)}, family=tv_family(name))


# video: (B, C, T, H, W); MViT's positional embedding is sized for its input (spatial_size,
# temporal_size); S3D ends in a fixed (2, 7, 7) average pool, so it needs 16 x 224 x 224.
def build_tv_video(name: str):
    import torchvision
    from torchvision.models.video import mvit

    kwargs: dict = {"weights": None, "num_classes": 10}
    shape = (2, 3, 4, 32, 32)
    if name.startswith("swin3d"):
        shape = (2, 3, 4, 56, 56)
    elif name == "s3d":
        shape = (1, 3, 16, 224, 224)
    if name.startswith("mvit"):
        # the builders pin spatial_size=(224, 224), temporal_size=16 (the positional embedding's
        # shape); build the same block settings for a 4 x 64 x 64 clip
        shape = (2, 3, 4, 64, 64)
        orig = mvit._mvit

        def small(**kw):
            kw.update(spatial_size=(64, 64), temporal_size=4)
            return orig(**kw)

        mvit._mvit = small
        try:
            model = torchvision.models.get_model(name, **kwargs)
        finally:
            mvit._mvit = orig
    else:
        model = torchvision.models.get_model(name, **kwargs)
    if name == "s3d":
        _he_init_convolutions(model)
    return Case(model, {_first_arg(model): torch.randn(*shape)}, family=tv_family(name))


def _he_init_convolutions(model) -> None:
    """He (fan-in, ReLU) initialisation of ``model``'s convolution weights. torchvision's S3D keeps
    PyTorch's default initialisation, which shrinks the activations' variance about threefold per
    convolution: its random-init features were ~2.6e-6 after the 16x224x224 clip, the output was
    the classifier's bias alone, and the numerics check could not fail. With He's gain the
    features stay of order one, so the output depends on every layer."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.conv._ConvNd):
            torch.nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")


def build_tv_optical_flow(name: str):
    import torchvision

    model = torchvision.models.get_model(name, weights=None)
    g = torch.Generator().manual_seed(0)
    # the correlation pyramid needs feature maps of >= 16 x 16 at 1/8 resolution: 128 x 128 images
    im1, im2 = (torch.rand(1, 3, 128, 128, generator=g) * 2 - 1 for _ in range(2))
    # RAFT refines the flow iteratively (12 updates by default); 2 updates cover the recurrent step
    return Case(model, {"image1": im1, "image2": im2, "num_flow_updates": 2}, family=tv_family(name))


# ----------------------------------------------------------------------------- timm

# input edge lengths tried in order; the first one the model runs on (on CPU) is used
_TIMM_SIZES = (64, 96, 128, 160, 192, 224, 256, 288, 320, 384)


def _timm_cache_path() -> str:
    import os

    import timm

    root = os.environ.get("TORCHNEURON_SWEEP_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "torchneuron", "sweep")
    return os.path.join(root, f"timm-{timm.__version__}-smallest.json")


def _timm_param_count(name: str) -> int | None:
    import timm

    try:
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False, num_classes=10)
        return sum(p.numel() for p in model.parameters())
    except Exception:  # noqa: BLE001 -- a variant that does not build is not a candidate
        return None


def timm_smallest() -> dict[str, str]:
    """timm model module -> its smallest architecture (fewest parameters at 10 classes, counted on
    the meta device; ties broken by name).  Cached per timm version (a few minutes to compute)."""
    import json
    import os
    import sys

    import timm

    path = _timm_cache_path()
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        pass
    print(f"timm: counting parameters of {len(timm.list_models())} architectures (cached in {path})",
          file=sys.stderr, flush=True)
    out: dict[str, str] = {}
    for module in sorted(timm.list_modules()):
        sized = [(n, _timm_param_count(n)) for n in timm.list_models(module=module)]
        sized = [(c, n) for n, c in sized if c]
        if sized:
            out[module] = min(sized)[1]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)
    os.replace(path + ".tmp", path)
    return out


def timm_names() -> list[str]:
    return sorted(timm_smallest().values())


def timm_family(name: str) -> str:
    from timm.models import _registry

    return _registry._model_to_module.get(name, name)


def build_timm(name: str):
    import timm

    cfg = timm.get_pretrained_cfg(name)
    default = tuple(cfg.input_size[1:]) if cfg is not None else (224, 224)
    min_size = max(cfg.min_input_size[1:]) if cfg is not None and cfg.min_input_size else 0
    fixed = bool(cfg is not None and cfg.fixed_input_size)
    sizes = [s for s in _TIMM_SIZES if min_size <= s < max(default)] + [None]  # None: the default size
    first: Exception | None = None
    # a family whose smallest variant is still large (ViT-B/L-sized encoders): 2 blocks, as for
    # transformers, where the architecture takes a ``depth``
    reduce = (_timm_param_count(name) or 0) > MAX_PARAMS
    for size in sizes:
        kwargs: dict = {"pretrained": False, "num_classes": 10}
        if reduce:
            kwargs["depth"] = 2
        if size is not None and fixed:
            kwargs["img_size"] = size  # position embeddings / windows sized for the input
        hw = default if size is None else (size, size)
        try:
            torch.manual_seed(0)
            try:
                model = timm.create_model(name, **kwargs).eval()
            except TypeError:  # no ``depth`` argument: the variant as defined
                if not kwargs.pop("depth", None):
                    raise
                model = timm.create_model(name, **kwargs).eval()
            _reinit_zero_linears(model)  # gMLP, Hiera, SAM-2's Hiera and Sequencer zero their heads
            x = torch.randn(2, 3, *hw)
            with torch.no_grad():
                model(x)
            return Case(model, {_first_arg(model): x}, family=timm_family(name))
        except Exception as exc:  # noqa: BLE001 -- try the next size
            first = first or exc
    assert first is not None
    raise first


# ----------------------------------------------------------------------------- transformers

# attribute -> reduced value; applied to every (sub)config that already has the attribute
_REDUCE = {
    # widths
    "hidden_size": 64, "d_model": 64, "n_embd": 64, "dim": 64, "embed_dim": 64, "d_embed": 64,
    "embedding_size": 64, "word_embed_proj_dim": 64, "projection_dim": 32, "proj_dim": 32,
    "text_embed_dim": 64, "vision_embed_dim": 64, "encoder_hidden_size": 64,
    "intermediate_size": 128, "ffn_dim": 128, "d_ff": 128, "n_inner": 128, "hidden_dim": 128,
    "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    # depth
    "num_hidden_layers": 2, "num_layers": 2, "n_layer": 2, "n_layers": 2, "encoder_layers": 2,
    "decoder_layers": 2, "num_decoder_layers": 2, "num_encoder_layers": 2,
    # heads
    "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "num_heads": 4,
    "encoder_attention_heads": 4, "decoder_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "kv_channels": 16,
    # multi-head latent attention (DeepSeek-V2/V3 style): q/k = nope + rope parts, low-rank kv/q
    "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16, "kv_lora_rank": 32,
    "q_lora_rank": 32, "qk_head_dim": 16,
    # partial rotary (GPT-J, CodeGen): at most the reduced head_dim
    "rotary_dim": 8,
    # DETR-style queries: fewer than the anchors of a 32x32 image; video frames
    "num_queries": 16, "num_frames": 4,
    # Q-Former query tokens (BLIP-2, InstructBLIP): one placeholder each in the text
    "num_query_tokens": 8,
    # moe
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    # vocab / positions / images; time series context (TimesFM 2.5: 16384 steps, 512 patches, whose
    # running statistics Python-loop into a 30,000-node graph)
    "vocab_size": 512, "max_position_embeddings": 128, "n_positions": 128, "context_length": 512,
    "image_size": 32, "patch_size": 8, "num_channels": 3,
}
_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id",
              "sep_token_id", "cls_token_id", "mask_token_id", "unk_token_id")


MAX_PARAMS = 40_000_000


def transformers_names() -> list[str]:
    """One base-model architecture per ``model_type`` registered with ``AutoModel``."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return sorted(MODEL_MAPPING_NAMES)


_DEPTH_VOCAB = {k: v for k, v in _REDUCE.items()
                if "layer" in k or k in ("vocab_size", "max_position_embeddings", "n_positions", "num_experts",
                                         "num_local_experts", "n_routed_experts")}


def _get(cfg, key):
    try:
        return getattr(cfg, key, None)
    except Exception:  # noqa: BLE001 -- e.g. per-layer attributes refuse global access
        return None


def _reduce_config(cfg, depth: int = 0, table: dict | None = None) -> None:
    from transformers import PretrainedConfig

    table = _REDUCE if table is None else table
    if depth > 3:
        return
    hd, rope = _get(cfg, "head_dim"), _get(cfg, "qk_rope_head_dim")
    tied_rope = isinstance(hd, int) and hd == rope  # DeepSeek MLA: rotary over head_dim = qk_rope_head_dim
    kvh, nh = _get(cfg, "num_key_value_heads"), _get(cfg, "num_attention_heads")
    mha = isinstance(kvh, int) and kvh == nh  # multi-head (MLA included) stays multi-head, not grouped
    for key, val in table.items():
        try:
            cur = getattr(cfg, key)
        except Exception:  # noqa: BLE001 -- absent, or a per-layer attribute
            continue
        if True:
            if isinstance(cur, bool) or not isinstance(cur, int):
                continue
            try:
                setattr(cfg, key, min(cur, val) if key not in ("num_channels",) else cur)
            except Exception:
                pass
    # width must stay a multiple of heads * head_dim where the model ties them
    for tid in _TOKEN_IDS:
        v = _get(cfg, tid)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 256:
            try:
                setattr(cfg, tid, 1 + _TOKEN_IDS.index(tid))
            except Exception:
                pass
    for key in list(vars(cfg)):
        sub = _get(cfg, key)
        if isinstance(sub, PretrainedConfig):
            _reduce_config(sub, depth + 1, table)
    _repair_config(cfg)
    if tied_rope:
        _set(cfg, "head_dim", _get(cfg, "qk_rope_head_dim"))
    if mha:
        _set(cfg, "num_key_value_heads", _get(cfg, "num_attention_heads"))
    lt = _get(cfg, "layer_types")
    n = _get(cfg, "num_hidden_layers")
    if isinstance(lt, list) and isinstance(n, int):
        try:
            cfg.layer_types = lt[:n]
        except Exception:  # noqa: BLE001
            pass
    if _get(cfg, "use_cache") is not None:
        try:
            cfg.use_cache = False
        except Exception:  # noqa: BLE001
            pass
    if hasattr(cfg, "_attn_implementation"):
        try:
            cfg._attn_implementation = "eager"
        except Exception:
            pass


# widths and depths that ``_REDUCE`` leaves large, for the last pass only: latent arrays (Perceiver),
# convolutional codec filters (VibeVoice), repeated blocks
_LATE_REDUCE = {"d_latents": 64, "num_latents": 16, "num_self_attends_per_block": 2, "num_filters": 8,
                "num_blocks": 1}


def _late_config(cfg, depth: int = 0) -> None:
    """Reductions applied only to architectures that run with no other configuration (so that no
    model that ran before changes): image sizes given as (height, width), kept in proportion and a
    multiple of the patch size, the longer side at most 64; per-stage heads that divide the
    reduced stage widths; ``_LATE_REDUCE`` and one block per stage."""
    from transformers import PretrainedConfig

    for key, val in _LATE_REDUCE.items():
        cur = _get(cfg, key)
        if isinstance(cur, int) and not isinstance(cur, bool) and cur > val:
            _set(cfg, key, val)
    depths = _get(cfg, "depths")
    if isinstance(depths, (list, tuple)) and all(isinstance(d, int) for d in depths):
        _set(cfg, "depths", type(depths)(1 for _ in depths))
    size, patch = _get(cfg, "image_size"), _get(cfg, "patch_size")
    if isinstance(size, (list, tuple)) and len(size) == 2 and all(isinstance(v, int) for v in size) \
            and max(size) > 64:
        p = patch if isinstance(patch, int) else 8
        scale = 64 / max(size)
        _set(cfg, "image_size", type(size)(max(p, int(v * scale) // p * p) for v in size))
    # hierarchical ViTs (Swin backbones): stage i is embed_dim * 2^i wide, a multiple of its heads
    width, heads = _get(cfg, "embed_dim"), _get(cfg, "num_heads")
    if isinstance(width, int) and isinstance(heads, (list, tuple)) and all(isinstance(h, int) for h in heads):
        fixed = [max(d for d in range(1, h + 1) if (width << i) % d == 0) for i, h in enumerate(heads)]
        _set(cfg, "num_heads", type(heads)(fixed))
    if depth < 3:
        for key in list(vars(cfg)):
            sub = _get(cfg, key)
            if isinstance(sub, PretrainedConfig):
                _late_config(sub, depth + 1)


def _set(cfg, key, val) -> None:
    try:
        setattr(cfg, key, val)
    except Exception:  # noqa: BLE001
        pass


def _repair_config(cfg) -> None:
    """Keep coupled fields consistent after the reduction."""
    hidden, heads = _get(cfg, "hidden_size"), _get(cfg, "num_attention_heads")
    # head_dim: None means "hidden // heads" for most models, but some read it as is
    if "head_dim" in vars(cfg) and _get(cfg, "head_dim") is None and isinstance(hidden, int) and isinstance(heads, int):
        _set(cfg, "head_dim", hidden // heads)
    # multi-stage CNNs/hierarchical ViTs: per-stage lists must agree with the number of stages
    n = _get(cfg, "num_stages")
    sizes, depths = _get(cfg, "hidden_sizes"), _get(cfg, "depths")
    if isinstance(sizes, (list, tuple)) and isinstance(depths, (list, tuple)) and isinstance(n, int) \
            and 0 < n < len(depths):  # the reduction cut the stage count: cut the lists alike
        extra = len(sizes) - len(depths)  # a stem width listed first (TextNet)
        _set(cfg, "depths", list(depths[:n]))
        _set(cfg, "hidden_sizes", list(sizes[:n + max(extra, 0)]))
    # MoE routing: a top-k that is unset by default, expert groups of at least one expert
    experts = _get(cfg, "n_routed_experts") or _get(cfg, "num_experts") or _get(cfg, "num_local_experts")
    if isinstance(experts, int) and not isinstance(experts, bool):
        if "num_experts_per_tok" in vars(cfg) and _get(cfg, "num_experts_per_tok") is None:
            _set(cfg, "num_experts_per_tok", min(2, experts))
        ng = _get(cfg, "n_group")
        if isinstance(ng, int) and ng > 1 and experts % ng == 0 and experts // ng < 2:
            _set(cfg, "n_group", 1)
            _set(cfg, "topk_group", 1)
        elif isinstance(ng, int) and experts % max(ng, 1):
            _set(cfg, "n_group", 1)
            _set(cfg, "topk_group", 1)
    # Mamba-2 mixers: heads x head width = expand x hidden
    for hk, dk, ek in (("num_heads", "head_dim", "expand"), ("mamba_n_heads", "mamba_d_head", "mamba_expand"),
                       ("n_mamba_heads", "mamba_headdim", "mamba_expand")):
        h, d, e = _get(cfg, hk), _get(cfg, dk), _get(cfg, ek)
        if isinstance(_get(cfg, "mamba_d_ssm"), int):  # the mixer width is given explicitly (Falcon-H1)
            break
        if all(isinstance(v, int) and not isinstance(v, bool) for v in (h, d, e, hidden)) and h * d != e * hidden:
            if (e * hidden) % d == 0:
                _set(cfg, hk, max(1, e * hidden // d))
            ng = _get(cfg, "n_groups") if hk == "num_heads" else _get(cfg, "mamba_n_groups")
            if isinstance(ng, int) and ng > 1 and _get(cfg, hk) % ng:
                _set(cfg, "n_groups" if hk == "num_heads" else "mamba_n_groups", 1)
    # codecs that quantize the concatenated acoustic and semantic (wav2vec2-BERT) features (XCodec2,
    # NeuCodec): the quantizer width is the sum of both widths
    sem = _get(cfg, "semantic_model_config")
    if isinstance(_get(cfg, "quantization_dim"), int) and isinstance(hidden, int) \
            and isinstance(_get(sem, "hidden_size"), int):
        _set(cfg, "quantization_dim", hidden + sem.hidden_size)
    # axial position embeddings (Reformer): in training the factors must multiply to the sequence
    # length, the recipes' 16 tokens (64 x 64 by default)
    axial = _get(cfg, "axial_pos_shape")
    if isinstance(axial, (list, tuple)) and len(axial) == 2 and math.prod(axial) != 16:
        _set(cfg, "axial_pos_shape", type(axial)((4, 4)))
    # MLA: q/k head = nope + rope
    nope, rope = _get(cfg, "qk_nope_head_dim"), _get(cfg, "qk_rope_head_dim")
    if isinstance(nope, int) and isinstance(rope, int) and "qk_head_dim" in vars(cfg):
        _set(cfg, "qk_head_dim", nope + rope)


def scaled_sections(sections: list[int], total: int) -> list[int]:
    """``sections`` (rotary sections, at least one each) scaled to sum to ``total``; the rounding
    difference goes on the widest section."""
    new = [max(1, v * total // sum(sections)) for v in sections]
    while sum(new) != total:
        i = max(range(len(new)), key=new.__getitem__)
        new[i] += 1 if sum(new) < total else -1
    return new


def _rescale_mrope(cfg, total: int, sections: list[int], depth: int = 0) -> bool:
    """Multimodal rotary sections (Qwen2-VL, GLM-4V ...; ``sections`` as in the error, often the
    model's default) must sum to the reduced rotary half-width ``total``: scale them, on every
    rope configuration of ``cfg`` and its sub-configurations."""
    from transformers import PretrainedConfig

    if total < len(sections):
        return False
    new = scaled_sections(sections, total)
    found = False
    for key in ("rope_parameters", "rope_scaling"):
        rp = _get(cfg, key)
        if isinstance(rp, dict):
            rp["mrope_section"] = list(new)
            found = True
    if depth < 3:
        for key in list(vars(cfg)):
            sub = _get(cfg, key)
            if isinstance(sub, PretrainedConfig):
                found = _rescale_mrope(sub, total, sections, depth + 1) or found
    return found


def _find(cfg, *keys):
    """The first of ``keys`` set on ``cfg`` or (after ``cfg``'s own) on one of its
    sub-configurations: the first of :func:`_find_all`."""
    found = _find_all(cfg, *keys)
    return found[0] if found else None


def _vision_cfg(cfg):
    return getattr(cfg, "vision_config", None) or cfg


def _candidate_inputs(model, cfg, repair: bool = False) -> list[dict]:
    """Input recipes to try, most specific first; the first one that runs on CPU is used.  In the
    repair pass (``repair``), the recipes of :func:`transformers_extra.extra_candidates` first."""
    sig = inspect.signature(model.forward).parameters
    batch, seq = 2, 16
    text_cfg = getattr(cfg, "text_config", None) or cfg
    vocab = getattr(text_cfg, "vocab_size", None) or 100
    main = getattr(model, "main_input_name", "input_ids")
    if isinstance(main, (list, tuple)):  # several main inputs (OneFormer: image and task): the first
        main = main[0]
    text: dict = {}
    if "input_ids" in sig:
        text["input_ids"] = torch.randint(3, max(4, min(int(vocab), 100)), (batch, seq))
        if "attention_mask" in sig:
            text["attention_mask"] = torch.ones(batch, seq, dtype=torch.long)
    dec: dict = {}
    if "decoder_input_ids" in sig and getattr(cfg, "is_encoder_decoder", False):
        dec["decoder_input_ids"] = torch.randint(3, max(4, min(int(vocab), 100)), (batch, 8))
        text.update(dec)
    other: dict = {}
    alt: list[dict] = []  # further single-input layouts tried after the defaults
    vc = _vision_cfg(cfg)
    if "pixel_values" in sig:
        size = getattr(vc, "image_size", 32)
        size = size[0] if isinstance(size, (list, tuple)) else size
        ch = getattr(vc, "num_channels", 3)
        other["pixel_values"] = torch.randn(batch, ch, size, size)
        frames = _find(cfg, "num_frames")
        if isinstance(frames, int):  # video models: (batch, frames, channels, height, width)
            alt.append({"pixel_values": torch.randn(batch, frames, ch, size, size)})
    if "pixel_values_videos" in sig:
        size = getattr(vc, "image_size", 32)
        size = size[0] if isinstance(size, (list, tuple)) else size
        frames = _find(cfg, "num_frames", "frames_per_clip") or 4
        other["pixel_values_videos"] = torch.randn(batch, min(int(frames), 8), getattr(vc, "num_channels", 3), size, size)
    if "input_values" in sig:
        other["input_values"] = torch.randn(batch, 4000)
        # codecs take (batch, channels, samples); some need a multiple of their hop length
        alt += [{"input_values": torch.randn(batch, 1, 3840)}, {"input_values": torch.randn(batch, 3840)}]
    if "input_features" in sig:
        mel = _find(cfg, "num_mel_bins", "feature_size", "input_feat_per_channel", "n_mels", "num_mel_filters") or 80
        frames = 2 * getattr(cfg, "max_source_positions", 32) if hasattr(cfg, "max_source_positions") else 64
        frames = min(frames, 3000)
        other["input_features"] = torch.randn(batch, int(mel), frames)
        for feats in (torch.randn(batch, frames, int(mel)), torch.randn(batch, int(mel), frames)):
            extra = {k: torch.ones(batch, feats.shape[1], dtype=torch.long)
                     for k in ("input_features_mask", "attention_mask") if k in sig}
            alt.append({"input_features": feats, **extra})
            if extra:
                alt.append({"input_features": feats})
    if "past_time_features" in sig and isinstance(_get(cfg, "prediction_length"), int):
        alt.insert(0, _forecast_inputs(cfg, batch))
    if "past_values" in sig:  # time series: (batch, context, channels)
        ctx = _find(cfg, "context_length", "context_len") or 32
        chans = _find(cfg, "num_input_channels", "input_size") or 1
        other["past_values"] = torch.randn(batch, int(ctx), int(chans))
        alt.append({"past_values": torch.randn(batch, int(ctx))})
    grid_key = next((k for k in sig if k.endswith("grid_thw")), None)
    if grid_key is not None:  # Qwen2-VL-style vision towers: flattened patches + (t, h, w) grid
        p, t, c, m = _patch_geometry(vc)
        first = next(iter(sig))
        grid = torch.tensor([[1, 2 * m, 2 * m]])
        feats = torch.randn(int(grid.prod()), c * t * p * p)
        alt.append({first: feats, grid_key: grid})
        if "merge_sizes" in sig:
            alt.append({first: feats, grid_key: grid, "merge_sizes": torch.tensor([m])})
    cands: list[dict] = []
    nq = _get(cfg, "num_query_tokens")  # only BLIP-2 and InstructBLIP(Video) configurations have it
    if isinstance(nq, int) and "input_ids" in text and "pixel_values" in other:
        qf = {k: v for k, v in (("qformer_input_ids", text["input_ids"][:, :8]),
                                ("qformer_attention_mask", torch.ones(batch, 8, dtype=torch.long))) if k in sig}
        cands += [{**c, **qf} for c in _query_token_inputs(cfg, nq, batch, text, other["pixel_values"])]
    if main in other:
        cands.append({main: other[main], **dec})
        cands.append({main: other[main]})
    if text:
        cands.append(text)
    if text and other:
        cands.append({**text, **other})
    for k, v in other.items():
        cands.append({k: v})
    cands += alt
    if dec:
        cands += [{**a, **dec} for a in alt]
    # every required argument, from a pool of the inputs above (multimodal models that need all
    # of their modalities, Q-Former ids, feature masks ...)
    pool: dict = {**text, **other, **(alt[-1] if grid_key is not None and alt else {})}
    if "input_ids" in text:
        for k in ("qformer_input_ids", "decoder_input_ids"):
            pool.setdefault(k, text["input_ids"][:, :8])
        pool.setdefault("qformer_attention_mask", torch.ones(batch, 8, dtype=torch.long))
    if "input_features" in other:
        pool.setdefault("input_features_mask", torch.ones(batch, other["input_features"].shape[-1], dtype=torch.long))
    required = [k for k, prm in sig.items() if prm.default is inspect.Parameter.empty
                and prm.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    if required and all(k in pool for k in required):
        base = {k: pool[k] for k in required}
        for variant in [base] + [{**base, **a} for a in alt if set(a) & set(required)]:
            cands += [variant, {**variant, **text}]
    if "pixel_values" in other and other["pixel_values"].shape[-1] < 64:  # stems that need more pixels
        pv = other["pixel_values"]
        cands.append({"pixel_values": torch.randn(batch, pv.shape[1], 64, 64)})
        cands.append({"pixel_values": torch.randn(batch, pv.shape[1], 64, 256)})
    # later additions: tried only after every recipe above, so that no model that ran with one of
    # those changes its inputs
    if grid_key is not None:
        cands += _grid_layouts(sig, vc, grid_key)
    # (not for models the reduction left large: ``build_transformers`` reduces those further first)
    small = sum(p.numel() for p in model.parameters()) <= MAX_PARAMS
    late = _late_candidates(sig, cfg, batch, text, other, alt) + _tensor_inputs(model, sig, cfg, batch) if small else []
    required_pool = {**pool, **_named_inputs(sig, cfg, batch, {**pool, **(alt[-1] if alt else {})})}
    cands += [{**{k: required_pool[k] for k in required if k in required_pool and k not in c}, **c} for c in late]
    if required and all(k in required_pool for k in required):
        base = {k: required_pool[k] for k in required}
        cands += [base, {**base, **text}]
    if repair:
        from .transformers_extra import extra_candidates

        cands = extra_candidates(model, sig, cfg, batch, text, other) + cands
    if not cands:
        raise ValueError(f"no input recipe for main_input_name={main!r}")
    return cands


def _first_leaf(model) -> torch.nn.Module | None:
    """The first registered convolution, linear layer or embedding (usually the input stem)."""
    for m in model.modules():
        if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Linear, torch.nn.Embedding)):
            return m
    return None


def _tensor_inputs(model, sig, cfg, batch: int) -> list[dict]:
    """Required inputs that are already embedded (``inputs_embeds``, ``*_embeds``, ``inputs``,
    ``*hidden_states``) or whose name says nothing (a bare ``hidden_states`` into a stem): shaped
    after the configured widths, or after the first layer of the model; masks of ones."""
    required = [k for k, prm in sig.items() if prm.default is inspect.Parameter.empty
                and prm.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    known = ("input_ids", "pixel_values", "input_values", "input_features", "past_values")
    if not required or any(k in known for k in required):
        return []
    hidden = _find(cfg, "hidden_size", "d_model", "dim", "embed_dim")
    hidden = int(hidden) if isinstance(hidden, int) else 64
    seq = 16
    block = _get(cfg, "block_size")
    layers = _get(cfg, "target_layer_ids")  # MuseGlimmer: context = the target's layers concatenated
    variants: list[dict] = [{}]
    for k in required:
        if k.endswith("_mask"):
            continue
        if k == required[0] and k == "hidden_states":  # a stem: its first layer says the layout
            leaf, hop = _first_leaf(model), _hop_length(cfg)
            if isinstance(leaf, torch.nn.Conv1d):  # a waveform (mono/stereo) of two frames, or 8 latent frames
                n = (2 * hop if hop else 3840) if leaf.in_channels <= 2 else 8
                v = [torch.randn(batch, leaf.in_channels, n)]
            elif isinstance(leaf, torch.nn.Conv2d):
                v = [torch.randn(batch, leaf.in_channels, 32, 32)]
            else:
                v = [torch.randn(batch, seq, hidden)]
        elif k == "context_hidden_states" and isinstance(layers, (list, tuple)):
            v = [torch.randn(batch, seq, hidden * len(layers))]
        elif k == "encoder_hidden_states":
            v = [torch.randn(batch, seq, int(_find(cfg, "encoder_hidden_size") or hidden))]
        elif k in ("inputs", "inputs_embeds") or k.endswith(("_embeds", "hidden_states")):
            n = int(block) if isinstance(block, int) and k == "noise_embeds" else seq
            v = [torch.randn(batch, n, hidden)]
        else:
            return []
        variants = [{**d, k: x} for d in variants for x in v]
    out = []
    for d in variants:
        first = next(iter(d.values()))
        masks = {k: torch.ones(batch, first.shape[1], dtype=torch.long) for k in sig
                 if k.endswith("_mask") and k not in d and sig[k].default is inspect.Parameter.empty}
        out.append({**d, **masks})
        if "encoder_hidden_states" in sig and "encoder_hidden_states" not in d:  # a Q-Former over an encoder
            enc = torch.randn(batch, seq, int(_find(cfg, "encoder_hidden_size") or hidden))
            out.append({**d, **masks, "encoder_hidden_states": enc})
    return out


def _find_all(cfg, *keys, depth: int = 0) -> list:
    """Every value of ``keys`` set on ``cfg`` and its sub-configurations, in that order, once each."""
    from transformers import PretrainedConfig

    found: list = []
    for k in keys:
        v = _get(cfg, k)
        if v is not None and not isinstance(v, bool) and v not in found:
            found.append(v)
    if depth < 3:
        for key in list(vars(cfg)):
            sub = _get(cfg, key)
            if isinstance(sub, PretrainedConfig):
                found += [v for v in _find_all(sub, *keys, depth=depth + 1) if v not in found]
    return found


def _hop_length(cfg) -> int | None:
    """Samples per frame of an audio codec encoder: an explicit hop, or the product of its strides."""
    hop = _find(cfg, "encoder_hop_length")
    if isinstance(hop, int):
        return hop
    ratios = _find(cfg, "downsampling_ratios")
    if isinstance(ratios, (list, tuple)) and ratios and all(isinstance(r, int) for r in ratios):
        return int(math.prod(ratios))
    return None


def _named_inputs(sig, cfg, batch: int, pool: dict) -> dict:
    """Secondary inputs recognised by name, shaped after the primary ones in ``pool``."""
    named: dict = {}
    px = pool.get("pixel_values")
    if isinstance(px, torch.Tensor):
        for k in ("prompt_pixel_values", "prompt_masks"):  # SegGPT: a prompt image and its mask
            if k in sig:
                named[k] = torch.randn_like(px) if k == "prompt_pixel_values" else torch.ones_like(px)
    pv = pool.get("past_values")
    if isinstance(pv, torch.Tensor):
        if "past_values_padding" in sig:  # TimesFM: 1 marks padding
            named["past_values_padding"] = torch.zeros(pv.shape[:2], dtype=torch.long)
        if "freq" in sig:
            named["freq"] = torch.zeros(batch, 1, dtype=torch.long)
    return named


def _late_candidates(sig, cfg, batch: int, text: dict, other: dict, alt: list[dict]) -> list[dict]:
    """Recipes tried after all the others: time series with a padding and a frequency input,
    audio features of every width the configuration names, Q-Former models whose text carries
    the placeholder tokens the query outputs replace, and NaFlex patch sequences (SigLIP 2)."""
    cands: list[dict] = []
    pvs = [a["past_values"] for a in alt if "past_values" in a] + [other[k] for k in ("past_values",) if k in other]
    for pv in pvs:
        if "past_values_padding" in sig or "freq" in sig:
            cands.append({"past_values": pv, **_named_inputs(sig, cfg, batch, {"past_values": pv})})
    if "input_features" in sig:
        widths = [int(v) for v in _find_all(cfg, "input_size", "feature_size", "num_mel_bins", "n_mels",
                                             "input_feat_per_channel", "num_mel_filters",
                                             "feature_projection_input_dim")
                  if isinstance(v, int) and v >= 8]
        hop = _hop_length(cfg) if "input_values" in sig else None
        window = _find(cfg, "n_window")
        frames = ([3840 // hop] if hop else []) + [64] + ([2 * int(window)] if isinstance(window, int) else [])
        for width in widths:
            for n in frames:
                for feats in (torch.randn(batch, n, width), torch.randn(batch, width, n)):
                    c: dict = {"input_features": feats}
                    if "input_values" in sig:
                        c["input_values"] = torch.randn(batch, 1, n * hop if hop else 3840)
                    for k in ("input_features_mask", "attention_mask"):
                        if k in sig:
                            c[k] = torch.ones(batch, n, dtype=torch.long)
                    cands.append(c)
    state, act = _get(cfg, "state_dim"), _get(cfg, "act_dim")
    if "states" in sig and isinstance(state, int) and isinstance(act, int):  # Decision Transformer trajectories
        steps = 8
        cands.append({"states": torch.randn(batch, steps, state), "actions": torch.randn(batch, steps, act),
                      "rewards": torch.randn(batch, steps, 1), "returns_to_go": torch.randn(batch, steps, 1),
                      "timesteps": torch.arange(steps).expand(batch, steps).contiguous(),
                      "attention_mask": torch.ones(batch, steps, dtype=torch.long)})
    if "audio_mel" in sig:  # Gemma 3n audio: (batch, frames, mel bins) and a padding mask (True = padding)
        mel = int(_find(cfg, "input_feat_size", "num_mel_bins") or 128)
        cands.append({"audio_mel": torch.randn(batch, 64, mel), "audio_mel_mask": torch.zeros(batch, 64, dtype=torch.bool)})
    size = _get(_vision_cfg(cfg), "image_size")
    if "prompt_pixel_values" in sig and isinstance(size, (list, tuple)) and len(size) == 2 and max(size) <= 64:
        # SegGPT: the image is stacked over its prompt, each half of the configured height (once
        # ``_late_config`` made it small)
        px = torch.randn(batch, int(_find(cfg, "num_channels") or 3), size[0] // 2, size[1])
        cands.append({"pixel_values": px, **_named_inputs(sig, cfg, batch, {"pixel_values": px})})
    if "spatial_shapes" in sig and "pixel_values" in sig:  # patches flattened by the processor
        vc = _vision_cfg(cfg)
        p, c = int(_find(vc, "patch_size") or 16), int(_find(vc, "num_channels") or 3)
        side = max(1, int(math.isqrt(int(_find(vc, "num_patches") or 16))) // 2)
        n = side * side
        cands.append({"pixel_values": torch.randn(batch, n, c * p * p),
                      "pixel_attention_mask": torch.ones(batch, n, dtype=torch.long),
                      "spatial_shapes": torch.tensor([[side, side]] * batch)})
    return cands


def _query_token_inputs(cfg, nq: int, batch: int, text: dict, image: torch.Tensor) -> list[dict]:
    """BLIP-2 style: the language model's input ids hold one placeholder per query output (per
    frame for video, 4 frames unless the configuration says); a placeholder id the configuration
    leaves unset is set to the last id."""
    vocab = int(_get(getattr(cfg, "text_config", None) or cfg, "vocab_size") or 512)
    cands: list[dict] = []
    for key in ("image_token_id", "video_token_id"):
        try:
            tok = getattr(cfg, key)
        except AttributeError:
            continue
        if tok is None:
            tok = vocab - 1
            _set(cfg, key, tok)
        frames = int(_find(cfg, "num_frames") or 4)
        video = torch.randn(batch, frames, *image.shape[1:])
        for px in ((image, video) if key == "image_token_id" else (video,)):
            frames = px.shape[1] if px.dim() == 5 else 1
            ids = torch.cat([torch.full((batch, nq * frames), int(tok)), text["input_ids"]], dim=1)
            c = {"pixel_values": px, "input_ids": ids, "attention_mask": torch.ones_like(ids)}
            cands.append(c)
        break
    return cands


def _patch_geometry(vc) -> tuple[int, int, int, int]:
    """Patch size, temporal patch size, channels and spatial merge size of a Qwen2-VL-style tower."""
    return (int(_find(vc, "patch_size") or 14), int(_find(vc, "temporal_patch_size") or 2),
            int(_find(vc, "in_channels", "in_chans", "num_channels") or 3),
            int(_find(vc, "spatial_merge_size", "merge_size") or 2))


def _grid_layouts(sig, vc, grid_key: str) -> list[dict]:
    """Further packed-patch layouts of Qwen2-VL-style vision towers: patches without a temporal
    dimension ``(n, c * p * p)``, unflattened patches ``(n, c, p, p)``, and patches grouped by
    merged token ``(n / m^2, m * p, m * p, c)`` with the grid counted in merged tokens."""
    p, t, c, m = _patch_geometry(vc)
    first = next(iter(sig))
    grid = torch.tensor([[1, 2 * m, 2 * m]])
    n = int(grid.prod())
    extra: dict = {"merge_sizes": torch.tensor([m])} if "merge_sizes" in sig else {}
    layouts = [(torch.randn(n, c * p * p), grid), (torch.randn(n, c, p, p), grid),
               (torch.randn(n, c, t, p, p), grid),
               (torch.randn(n // (m * m), m * p, m * p, c), torch.tensor([[1, 2, 2]]))]
    return [{first: x, grid_key: g, **extra} for x, g in layouts]


def _pick_inputs(model, cfg, repair: bool = False) -> dict:
    from .runner import has_nan

    first: Exception | None = None
    seen = []
    cands = _candidate_inputs(model, cfg, repair)
    # probe a copy: a forward may cache tensors in plain attributes (Mimi's codebooks keep
    # ``_embed``), which ``.to("neuron")`` would not move and the device run would then mix in
    probe = copy.deepcopy(model)
    while cands:
        cand = cands.pop(0)
        sig = sorted((k, tuple(v.shape) if isinstance(v, torch.Tensor) else v) for k, v in cand.items())
        if sig in seen:
            continue
        seen.append(sig)
        try:
            with torch.no_grad():
                out = probe.eval()(**cand)
            # a recipe whose output has NaN is no reference (the check refuses it, a skip): try the
            # next recipe and pass (Nemotron ASR's eager attention inverts its additive mask). Only
            # models that were skipped for it choose differently
            if has_nan(out):
                raise FloatingPointError("the CPU reference output has NaN values; nothing to compare")
            return cand
        except Exception as exc:  # noqa: BLE001 -- try the next recipe
            first = first or exc
            if repair:  # a recipe the error message says how to complete (placeholder tokens)
                from .transformers_extra import derived_candidate

                derived = derived_candidate(cand, exc, cfg)
                if derived is not None:
                    cands.insert(0, derived)
    assert first is not None
    raise first


def _train_only_inputs(model, cfg, inputs: dict) -> dict | None:
    """The training step's inputs where a model requires more in training than in eval: Molmo2's
    ``mm_token_type_ids`` (1 marks image tokens, the placeholder id of its configuration).  None
    (the eval inputs) otherwise."""
    sig = inspect.signature(model.forward).parameters
    ids = inputs.get("input_ids")
    try:
        source = inspect.getsource(type(model).forward)
    except (OSError, TypeError):
        source = ""
    # (only for models that refuse to train without them: the Qwen-VL family takes them too, and
    # trains with the eval inputs)
    if "mm_token_type_ids" in sig and "mm_token_type_ids" not in inputs and isinstance(ids, torch.Tensor) \
            and re.search(r"training and mm_token_type_ids is None", source):
        tok = _find(cfg, "image_token_id", "image_token_index")
        types = (ids == tok).long() if isinstance(tok, int) else torch.zeros_like(ids)
        return {**inputs, "mm_token_type_ids": types}
    mel = _find(cfg, "num_mel_bins")
    if all(k in sig for k in ("duration_labels", "spectrogram_labels", "pitch_labels", "energy_labels")) \
            and isinstance(ids, torch.Tensor) and isinstance(mel, int):
        # FastSpeech 2 trains on its variance targets only: 2 frames per token, per-token pitch and
        # energy, the spectrogram those frames make
        g = torch.Generator().manual_seed(0)
        b, n = ids.shape
        return {**inputs, "duration_labels": torch.full((b, n), 2), "spectrogram_labels": torch.randn(b, 2 * n, mel, generator=g),
                "pitch_labels": torch.randn(b, n, 1, generator=g), "energy_labels": torch.randn(b, n, 1, generator=g)}
    return None


# forecasting transformers (TimeSeriesTransformer, Informer, Autoformer) have no default horizon:
# 4 steps predicted from 8, lags 1-3, one time feature
_FORECAST = {"prediction_length": 4, "context_length": 8, "lags_sequence": [1, 2, 3], "num_time_features": 1,
             "label_length": 4}  # Autoformer: decoder start tokens taken from the context


def _config_kwargs(name: str) -> dict:
    from transformers import AutoConfig

    cfg = AutoConfig.for_model(name)
    if "prediction_length" in vars(cfg) and cfg.prediction_length is None:
        return dict(_FORECAST)
    return {}


def _forecast_inputs(cfg, batch: int) -> dict:
    past = cfg.context_length + max(cfg.lags_sequence)
    g = torch.Generator().manual_seed(0)
    return {"past_values": torch.rand(batch, past, generator=g) + 0.5,
            "past_time_features": torch.linspace(0, 1, past).expand(batch, past).unsqueeze(-1).contiguous(),
            "past_observed_mask": torch.ones(batch, past),
            "future_values": torch.rand(batch, cfg.prediction_length, generator=g) + 0.5,
            "future_time_features": torch.linspace(1, 1.5, cfg.prediction_length).expand(
                batch, cfg.prediction_length).unsqueeze(-1).contiguous()}


# (reduction table, late rules, repair pass) of each attempt, in order
_PASSES = ((_REDUCE, False, False), (_DEPTH_VOCAB, False, False), (_REDUCE, True, False),
           (_REDUCE, True, True), (_DEPTH_VOCAB, False, True))


def _transformers_config(name: str, table: dict, late: bool, repair: bool):
    from transformers import AutoConfig

    cfg = AutoConfig.for_model(name, **_config_kwargs(name))
    if hasattr(cfg, "max_source_positions"):
        cfg.max_source_positions = min(cfg.max_source_positions, 32)
    if repair:
        from .transformers_extra import prepare_config

        cfg = prepare_config(cfg)
    _reduce_config(cfg, table=table)
    if late:
        _late_config(cfg)
    if repair:
        from .transformers_extra import repair_config

        repair_config(cfg)
    return cfg


def build_transformers(name: str):
    import transformers
    from transformers import AutoModel

    transformers.logging.set_verbosity_error()
    first: Exception | None = None
    # full reduction first; if that config is inconsistent for the architecture (coupled widths),
    # reduce only depth, vocab and experts, provided the model stays small
    # then, for architectures neither runs with: the full reduction plus the late rules; last, the
    # repair passes (``transformers_extra``: overrides, coupled-field repairs, more input recipes)
    for table, late, repair in _PASSES:
        try:
            cfg = _transformers_config(name, table, late, repair)
            if table is not _REDUCE:  # count parameters on the meta device before paying for them
                with torch.device("meta"):
                    if repair:
                        from .transformers_extra import model_from_config

                        n = sum(p.numel() for p in model_from_config(cfg).parameters())
                    else:
                        n = sum(p.numel() for p in AutoModel.from_config(cfg).parameters())
                if n > MAX_PARAMS:
                    raise ValueError(f"reduced model still has {n / 1e6:.0f}M parameters (> {MAX_PARAMS / 1e6:.0f}M)")
            for _attempt in range(2):
                torch.manual_seed(0)
                if repair:
                    from .transformers_extra import model_from_config

                    model = model_from_config(cfg)
                else:
                    model = AutoModel.from_config(cfg)
                _reset_drawn_batch_norms(model)
                if repair:
                    from .transformers_extra import reinit_vanishing_convolutions

                    reinit_vanishing_convolutions(model)
                try:
                    inputs = _pick_inputs(model, cfg, repair)
                    return Case(model, inputs, train_inputs=_train_only_inputs(model, cfg, inputs), family=name)
                except RuntimeError as exc:
                    m = re.search(r"split_with_sizes expects split_sizes to sum exactly to (\d+).*"
                                  r"split_sizes=\[([\d, ]+)\]", str(exc))
                    if not (m and _attempt == 0 and _rescale_mrope(
                            cfg, int(m.group(1)), [int(v) for v in m.group(2).split(",")])):
                        raise
        except Exception as exc:  # noqa: BLE001
            first = first or exc
    assert first is not None
    raise first


# ----------------------------------------------------------------------------- self-test

def _selftest_names() -> list[str]:
    return ["tiny", "hang", "crash"]


class _RandomInEval(torch.nn.Module):
    """Random masking in eval mode, as ViT-MAE does: comparable only if both runs draw the same noise."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        keep = torch.rand(x.shape, device=x.device) > 0.5
        return self.lin(x * keep)


class _NeedsLabels(torch.nn.Linear):
    """Trains only with labels, on CPU as well: a recipe limit, not a device failure."""

    def __init__(self):
        super().__init__(8, 2)

    def forward(self, x):
        if self.training:
            raise ValueError("labels must be provided to run in training mode")
        return super().forward(x)


class _NaNOutput(torch.nn.Linear):
    def __init__(self):
        super().__init__(8, 2)

    def forward(self, x):
        return super().forward(x) * float("nan")


class _Body(torch.nn.Module):
    """A model whose recipe compares one submodule's output, as the detection recipes do."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8))

    def forward(self, x):
        return self.body(x).sum(-1)


class _CachesOnForward(torch.nn.Linear):
    """Caches a tensor derived from its weight in a plain attribute on the first forward, as
    Mimi's codebooks do (``_embed``): ``.to()`` does not move such an attribute."""

    def __init__(self):
        super().__init__(8, 2)
        self._scaled = None

    def forward(self, x):
        if self._scaled is None:
            self._scaled = self.weight * 2
        return torch.nn.functional.linear(x, self._scaled, self.bias)


_SELFTEST_EXTRA = {"random": _RandomInEval, "caches": _CachesOnForward, "needs_labels": _NeedsLabels, "nan": _NaNOutput, "submodule": _Body}
_SELFTEST_COMPARE = {"submodule": lambda m, inp: m.body(inp["x"])}


def build_selftest(name: str):
    """Cases that exercise the worker's containment: a tiny MLP, a hang and a hard crash."""
    import os
    import time

    if name == "hang":
        time.sleep(3600)
    if name == "crash":
        os._exit(3)
    if name in _SELFTEST_EXTRA:  # cases for the runner's rules (checked in-process by the tests)
        torch.manual_seed(0)
        return Case(_SELFTEST_EXTRA[name](), {"x": torch.randn(4, 8)}, compare=_SELFTEST_COMPARE.get(name),
                    full_eval=False)
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)), {"input": torch.randn(4, 8)}


# ----------------------------------------------------------------------------- dispatch

_SUITES = {
    "torchvision": (torchvision_names, build_torchvision),
    "torchvision_detection": (_tv_names("detection"), build_tv_detection),
    "torchvision_segmentation": (_tv_names("segmentation"), build_tv_segmentation),
    "torchvision_video": (_tv_names("video"), build_tv_video),
    "torchvision_optical_flow": (_tv_names("optical_flow"), build_tv_optical_flow),
    "timm": (timm_names, build_timm),
    "transformers": (transformers_names, build_transformers),
    "_selftest": (_selftest_names, build_selftest),  # tests only; not in SUITES
}


def list_models(suite: str) -> list[str]:
    return _SUITES[suite][0]()


def build(suite: str, name: str) -> Case:
    case = _SUITES[suite][1](name)
    if not isinstance(case, Case):
        model, inputs = case
        case = Case(model, inputs)
    if case.family is None:
        case.family = name
    return case
