"""Model builders per suite.

A *case* is built from its name alone (so a worker subprocess can rebuild it): ``build(suite,
name)`` returns ``(model, example_inputs)`` where ``example_inputs`` is a dict of keyword
arguments (CPU tensors).  Sizes are reduced so a whole suite runs on a 2-core machine.
"""

from __future__ import annotations

import inspect

import torch

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
    x = torch.randn(2, 3, size, size)
    return model, {"x": x}


# ----------------------------------------------------------------------------- transformers

# attribute -> reduced value; applied to every (sub)config that already has the attribute
_REDUCE = {
    # widths
    "hidden_size": 64, "d_model": 64, "n_embd": 64, "dim": 64, "embed_dim": 64, "d_embed": 64,
    "embedding_size": 64, "word_embed_proj_dim": 64, "projection_dim": 32, "proj_dim": 32,
    "text_embed_dim": 64, "vision_embed_dim": 64,
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
    # moe
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    # vocab / positions / images
    "vocab_size": 512, "max_position_embeddings": 128, "n_positions": 128,
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


def _vision_cfg(cfg):
    return getattr(cfg, "vision_config", None) or cfg


def _candidate_inputs(model, cfg) -> list[dict]:
    """Input recipes to try, most specific first; the first one that runs on CPU is used."""
    sig = inspect.signature(model.forward).parameters
    batch, seq = 2, 16
    text_cfg = getattr(cfg, "text_config", None) or cfg
    vocab = getattr(text_cfg, "vocab_size", None) or 100
    main = getattr(model, "main_input_name", "input_ids")
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
    if "pixel_values" in sig:
        vc = _vision_cfg(cfg)
        size = getattr(vc, "image_size", 32)
        size = size[0] if isinstance(size, (list, tuple)) else size
        ch = getattr(vc, "num_channels", 3)
        other["pixel_values"] = torch.randn(batch, ch, size, size)
    if "input_values" in sig:
        other["input_values"] = torch.randn(batch, 4000)
    if "input_features" in sig:
        mel = getattr(cfg, "num_mel_bins", None) or getattr(cfg, "feature_size", None) or 80
        frames = 2 * getattr(cfg, "max_source_positions", 32) if hasattr(cfg, "max_source_positions") else 64
        other["input_features"] = torch.randn(batch, mel, min(frames, 3000))
    cands: list[dict] = []
    if main in other:
        cands.append({main: other[main], **dec})
        cands.append({main: other[main]})
    if text:
        cands.append(text)
    if text and other:
        cands.append({**text, **other})
    for k, v in other.items():
        cands.append({k: v})
    if not cands:
        raise ValueError(f"no input recipe for main_input_name={main!r}")
    return cands


def _pick_inputs(model, cfg) -> dict:
    first: Exception | None = None
    seen = []
    for cand in _candidate_inputs(model, cfg):
        if sorted(cand) in seen:
            continue
        seen.append(sorted(cand))
        try:
            with torch.no_grad():
                model.eval()(**cand)
            return cand
        except Exception as exc:  # noqa: BLE001 -- try the next recipe
            first = first or exc
    assert first is not None
    raise first


def build_transformers(name: str):
    import transformers
    from transformers import AutoConfig, AutoModel

    transformers.logging.set_verbosity_error()
    first: Exception | None = None
    # full reduction first; if that config is inconsistent for the architecture (coupled widths),
    # reduce only depth, vocab and experts, provided the model stays small
    for table in (_REDUCE, _DEPTH_VOCAB):
        try:
            cfg = AutoConfig.for_model(name)
            if hasattr(cfg, "max_source_positions"):
                cfg.max_source_positions = min(cfg.max_source_positions, 32)
            _reduce_config(cfg, table=table)
            if table is not _REDUCE:  # count parameters on the meta device before paying for them
                with torch.device("meta"):
                    n = sum(p.numel() for p in AutoModel.from_config(cfg).parameters())
                if n > MAX_PARAMS:
                    raise ValueError(f"reduced model still has {n / 1e6:.0f}M parameters (> {MAX_PARAMS / 1e6:.0f}M)")
            torch.manual_seed(0)
            model = AutoModel.from_config(cfg)
            return model, _pick_inputs(model, cfg)
        except Exception as exc:  # noqa: BLE001
            first = first or exc
    assert first is not None
    raise first


# ----------------------------------------------------------------------------- self-test

def _selftest_names() -> list[str]:
    return ["tiny", "hang", "crash"]


def build_selftest(name: str):
    """Cases that exercise the worker's containment: a tiny MLP, a hang and a hard crash."""
    import os
    import time

    if name == "hang":
        time.sleep(3600)
    if name == "crash":
        os._exit(3)
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)), {"input": torch.randn(4, 8)}


# ----------------------------------------------------------------------------- dispatch

_SUITES = {
    "torchvision": (torchvision_names, build_torchvision),
    "transformers": (transformers_names, build_transformers),
    "_selftest": (_selftest_names, build_selftest),  # tests only; not in SUITES
}


def list_models(suite: str) -> list[str]:
    return _SUITES[suite][0]()


def build(suite: str, name: str):
    return _SUITES[suite][1](name)
