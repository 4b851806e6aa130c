"""PEFT LoRA fine-tuning, greedy generation with a KV cache, and a diffusers UNet on `neuron`."""

from __future__ import annotations

import pytest
import torch
from hf_helpers import VOCAB, gpt2_lm

import torchneuron.native as native


def _lora_run(device: str, steps: int = 15) -> tuple[list[float], object]:
    peft = pytest.importorskip("peft")
    model = gpt2_lm(seed=0)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn", "c_proj"],
                          fan_in_fan_out=True, lora_dropout=0.0, task_type="CAUSAL_LM")
    torch.manual_seed(1)
    model = peft.get_peft_model(model, cfg).to(device)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-2)
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, VOCAB, (steps, 4, 16), generator=g)
    out = []
    for ids in data:
        ids = ids.to(device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        out.append(loss.item())
    return out, model


def test_peft_lora_finetunes_on_neuron_like_cpu():
    ref, _ = _lora_run("cpu")
    dev, model = _lora_run("neuron")
    assert dev[-1] < dev[0]
    torch.testing.assert_close(torch.tensor(dev), torch.tensor(ref), rtol=1e-4, atol=1e-5)
    # only the adapters trained; the frozen base weights did not move
    base = gpt2_lm(seed=0).state_dict()
    merged_free = {k.replace("base_model.model.", "").replace("base_layer.", ""): v
                   for k, v in model.state_dict().items() if "lora_" not in k}
    for k, v in base.items():
        assert torch.equal(merged_free[k].cpu(), v), k
    lora = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert lora and all(p.device.type == "neuron" and p.abs().sum() > 0 for p in lora)
    merged = model.merge_and_unload()
    ids = torch.randint(0, VOCAB, (2, 8))
    with torch.no_grad():
        assert merged(ids.to("neuron")).logits.isfinite().all()


def test_generate_greedy_kv_cache_matches_cpu():
    # a wide init gives peaked, varied next-token distributions (not one repeated token)
    cpu_model = gpt2_lm(seed=3, initializer_range=0.5).eval()
    dev_model = gpt2_lm(seed=3, initializer_range=0.5).to("neuron").eval()
    ids = torch.randint(1, VOCAB, (3, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # left padding on one row
    kw = dict(max_new_tokens=16, do_sample=False, use_cache=True)
    expected = cpu_model.generate(ids, attention_mask=mask, **kw)
    got = dev_model.generate(ids.to("neuron"), attention_mask=mask.to("neuron"), **kw)
    assert got.device.type == "neuron"
    assert torch.equal(got.cpu(), expected)
    assert len(set(expected[:, 6:].flatten().tolist())) > 3  # not a degenerate sequence
    no_cache = dev_model.generate(ids.to("neuron"), attention_mask=mask.to("neuron"),
                                  max_new_tokens=16, do_sample=False, use_cache=False)
    assert torch.equal(no_cache.cpu(), expected)


def test_diffusers_unet_and_scheduler_on_neuron():
    diffusers = pytest.importorskip("diffusers")
    from diffusers.utils.torch_utils import randn_tensor

    def run(device: str) -> torch.Tensor:
        torch.manual_seed(0)
        unet = diffusers.UNet2DModel(
            sample_size=8, in_channels=3, out_channels=3, layers_per_block=1,
            block_out_channels=(8, 16), down_block_types=("DownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "UpBlock2D"), norm_num_groups=4,
        ).to(device).eval()
        sched = diffusers.DDIMScheduler(num_train_timesteps=20)
        sched.set_timesteps(4, device=device)
        g = torch.Generator().manual_seed(0)  # a CPU generator; test_device_generator: neuron
        x = randn_tensor((1, 3, 8, 8), generator=g, device=torch.device(device))
        assert x.device.type == device
        with torch.no_grad():
            for t in sched.timesteps:
                x = sched.step(unet(x, t).sample, t, x).prev_sample
        return x.cpu()

    torch.testing.assert_close(run("neuron"), run("cpu"), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not native.available(), reason=f"needs the native hooks: {native.status()}")
def test_device_generator():
    # diffusers' idiom: a generator on the pipeline's device, seeded, passed as `generator=`
    device = torch.device("neuron")
    g = torch.Generator(device).manual_seed(0)
    x = torch.randn((1, 3, 8, 8), generator=g, device=device)
    assert x.device.type == "neuron" and g.device == torch.device("neuron", 0)
    # the device's random numbers are the host's: the same seed gives CPU's sample
    assert torch.equal(x.cpu(), torch.randn((1, 3, 8, 8), generator=torch.Generator().manual_seed(0)))

    diffusers = pytest.importorskip("diffusers")
    from diffusers.utils.torch_utils import randn_tensor

    def run(device: str) -> torch.Tensor:
        g = torch.Generator(device).manual_seed(0)
        sched = diffusers.DDPMScheduler(num_train_timesteps=20)
        sched.set_timesteps(4, device=device)
        x = randn_tensor((1, 3, 8, 8), generator=g, device=torch.device(device))
        assert x.device.type == device
        for t in sched.timesteps:  # DDPM adds fresh noise from `g` at every step
            x = sched.step(0.1 * x, t, x, generator=g).prev_sample
        return x.cpu()

    torch.testing.assert_close(run("neuron"), run("cpu"), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not native.available(), reason="several cores need the native device hooks")
def test_big_model_dispatch_over_two_cores_generates_like_cpu():
    """accelerate's big-model inference over two cores: `dispatch_model` places the blocks on
    neuron:0 and neuron:1 (integer devices are the accelerator's), activations hop between the
    cores and greedy generation equals CPU. accelerate 1.15's `get_max_memory` has no neuron
    branch (it asks torch.cuda), so the per-core budget is given explicitly."""
    from accelerate import dispatch_model, infer_auto_device_map

    cpu_model = gpt2_lm(seed=4, initializer_range=0.5).eval()
    model = gpt2_lm(seed=4, initializer_range=0.5).eval()
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    budget = {0: int(size * 0.7), 1: size}  # the embedding and about half the blocks fit on neuron:0
    device_map = infer_auto_device_map(model, max_memory=budget, no_split_module_classes=["GPT2Block"])
    assert set(device_map.values()) == {0, 1}, device_map
    model = dispatch_model(model, device_map=device_map)
    assert {p.device.index for p in model.parameters()} == {0, 1}
    ids = torch.randint(1, VOCAB, (2, 5), generator=torch.Generator().manual_seed(1))
    kw = dict(max_new_tokens=8, do_sample=False, use_cache=True)
    expected = cpu_model.generate(ids, **kw)
    got = model.generate(ids.to("neuron:0"), **kw)
    assert torch.equal(got.cpu(), expected)
    assert torch.neuron.memory_allocated(1) > 0
