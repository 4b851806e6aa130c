"""`accelerate launch` with two processes: DDP over the `neuron` process group.

accelerate 1.15 starts several processes (torchrun's elastic agent, `multi_gpu_launcher`) when
`torch.neuron.device_count() > 1` (a simulated trn2 chip has 4 logical cores), when
`--multi_gpu` is given or when its config file says `distributed_type: MULTI_NEURON`. In each
worker accelerate then picks `backend="neuron"`, `DistributedType.MULTI_NEURON` and
`neuron:LOCAL_RANK` (the core torchneuron makes current in a launched rank), and wraps the model
in DDP with `device_ids=[LOCAL_RANK]`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from torchneuron import native

STEPS, PER_RANK_BATCH, WORLD = 6, 4, 2
LR = 0.1

# The training script run by every rank: its model, data and optimizer are rebuilt by
# _reference() below for the single-process CPU run.
_SCRIPT = textwrap.dedent(
    f"""
    import sys

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from accelerate import Accelerator
    from torchneuron.runtime import activity

    class CollectiveCounter:
        def __init__(self):
            self.calls = {{}}

        def record(self, kind, name, inputs, outputs, start_ns, end_ns):
            if kind == "collective":
                self.calls[name] = self.calls.get(name, 0) + 1

    out_dir = sys.argv[1]
    acc = Accelerator()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr={LR})
    g = torch.Generator().manual_seed(1)
    x = torch.randn({STEPS * PER_RANK_BATCH * WORLD}, 8, generator=g)
    y = x.sum(dim=1, keepdim=True).sin()
    loader = DataLoader(TensorDataset(x, y), batch_size={PER_RANK_BATCH}, shuffle=False)
    model, opt, loader = acc.prepare(model, opt, loader)
    counter = CollectiveCounter()
    activity.set_recorder(counter)
    losses = []
    for xb, yb in loader:
        assert xb.device.type == "neuron"
        loss = nn.functional.mse_loss(model(xb), yb)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    activity.set_recorder(None)
    info = dict(
        rank=acc.process_index, world=acc.num_processes, device=str(acc.device),
        distributed_type=str(acc.distributed_type), backend=dist.get_backend(),
        wrapper=type(model).__name__, losses=losses, collectives=counter.calls,
        param_devices=sorted({{str(p.device) for p in model.parameters()}}),
        current=torch.neuron.current_device(),
    )
    params = [p.detach().cpu().clone() for p in acc.unwrap_model(model).parameters()]
    torch.save({{"info": info, "params": params}}, f"{{out_dir}}/rank{{acc.process_index}}.pt")
    acc.end_training()
    """
)


def _reference():
    """One process on the CPU, global batch = both ranks' batches: the mean loss over it is the
    mean of the two ranks' losses, so its gradient is DDP's averaged gradient."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(STEPS * PER_RANK_BATCH * WORLD, 8, generator=g)
    y = x.sum(dim=1, keepdim=True).sin()
    rank_losses: list[list[float]] = [[] for _ in range(WORLD)]
    step_rows = PER_RANK_BATCH * WORLD
    for step in range(STEPS):
        xb, yb = x[step * step_rows:(step + 1) * step_rows], y[step * step_rows:(step + 1) * step_rows]
        with torch.no_grad():  # what each rank sees: consecutive batches go to ranks 0, 1
            for r in range(WORLD):
                sl = slice(r * PER_RANK_BATCH, (r + 1) * PER_RANK_BATCH)
                rank_losses[r].append(nn.functional.mse_loss(model(xb[sl]), yb[sl]).item())
        loss = nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        opt.step()
        opt.zero_grad()
    return [p.detach().clone() for p in model.parameters()], rank_losses


def _launch(tmp_path, launch_args: list[str]) -> list[dict]:
    script = tmp_path / "ddp_train.py"
    script.write_text(_SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ)
    env["HF_HOME"] = str(tmp_path / "hf_home")  # no user-level accelerate config file
    env["HF_HUB_OFFLINE"] = "1"
    for var in ("LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "ACCELERATE_BYPASS_DEVICE_MAP",
                "NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES"):
        env.pop(var, None)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *launch_args, str(script), str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-6000:]
    files = sorted(out.glob("rank*.pt"))
    assert [f.name for f in files] == ["rank0.pt", "rank1.pt"], (files, res.stderr[-3000:])
    return [torch.load(f, weights_only=False) for f in files]


def _check(results):
    ref_params, ref_losses = _reference()
    for r, res in enumerate(results):
        info = res["info"]
        assert info["rank"] == r and info["world"] == WORLD
        # rank r drives neuron:r, as accelerate expects (DDP's device_ids=[LOCAL_RANK])
        assert info["device"] == f"neuron:{r}" and info["param_devices"] == [f"neuron:{r}"]
        assert info["current"] == r
        assert info["distributed_type"] == "DistributedType.MULTI_NEURON"
        assert info["backend"] == "neuron"
        assert info["wrapper"] == "DistributedDataParallel"
        # DDP's gradient all-reduce went through the neuron process group, once per step at least
        assert info["collectives"].get("c10d::all_reduce", 0) >= STEPS, info["collectives"]
        # each rank trained on its own shard: its losses are the reference's for that shard
        assert len(info["losses"]) == STEPS
        torch.testing.assert_close(info["losses"], ref_losses[r], rtol=1e-5, atol=1e-6)
    assert results[0]["info"]["losses"] != results[1]["info"]["losses"]  # different data
    # both ranks end with the same parameters, equal to the single-process reference
    for a, b in zip(results[0]["params"], results[1]["params"], strict=True):
        assert torch.equal(a, b)
    for a, ref in zip(results[0]["params"], ref_params, strict=True):
        torch.testing.assert_close(a, ref, rtol=1e-5, atol=1e-6)


# rank r drives neuron:r (accelerate's DDP passes device_ids=[LOCAL_RANK]; the bare command needs
# device_count() > 1): several cores per process need the native device hooks
needs_cores = pytest.mark.skipif(not native.available(), reason="several cores need the native device hooks")


@needs_cores
def test_accelerate_launch_two_processes_ddp(tmp_path):
    """The command a user types: no flag, no config file."""
    _check(_launch(tmp_path, ["--num_processes", "2", "--main_process_port", "0"]))


@needs_cores
@pytest.mark.slow  # a second two-process launch; the launcher choice is tested in-process below
def test_accelerate_launch_multi_gpu_two_processes_ddp(tmp_path):
    _check(_launch(tmp_path, ["--multi_gpu", "--num_processes", "2", "--main_process_port", "0"]))


@needs_cores
@pytest.mark.slow  # a third two-process launch
def test_accelerate_launch_config_file_multi_neuron(tmp_path):
    """`accelerate config` with "multi-NEURON" writes this; `accelerate launch` then needs no flag."""
    cfg = tmp_path / "accelerate_config.yaml"
    cfg.write_text(
        "compute_environment: LOCAL_MACHINE\n"
        "distributed_type: MULTI_NEURON\n"
        "num_machines: 1\n"
        "num_processes: 2\n"
        "machine_rank: 0\n"
        "main_process_port: 0\n"
        "mixed_precision: 'no'\n"
        "gpu_ids: all\n"
        "use_cpu: false\n"
    )
    _check(_launch(tmp_path, ["--config_file", str(cfg)]))


@pytest.mark.parametrize(
    "argv, multi",
    [
        (["--num_processes", "2"], native.available()),  # device_count() == 4 > 1: multi_gpu_launcher
        (["--multi_gpu", "--num_processes", "2"], True),
        (["--config_file", "{cfg}"], True),
    ],
)
def test_accelerate_launcher_choice_on_neuron(tmp_path, monkeypatch, argv, multi):
    """Which launcher `accelerate launch` picks for the neuron device (no process started)."""
    import accelerate.commands.launch as launch

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_NEURON\n"
                   "num_machines: 1\nnum_processes: 2\nmixed_precision: 'no'\n")
    monkeypatch.setattr(launch, "default_config_file", str(tmp_path / "absent.yaml"))
    argv = [a.format(cfg=cfg) for a in argv]
    args = launch.launch_command_parser().parse_args([*argv, "train.py"])
    args, _, _ = launch._validate_launch_command(args)
    assert torch.neuron.device_count() == (4 if native.available() else 1)
    assert args.num_processes == 2
    assert bool(args.multi_gpu) is multi
