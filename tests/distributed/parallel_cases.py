"""FSDP2, DeviceMesh, DTensor, TP/SP, pipelining and DCP on neuron, run inside each rank.

Every check compares against a single-process reference computed on the same rank from the
same seeds (the full model on the full batch, on ``neuron``). Tolerances:

* float32 paths: ``1e-5`` absolute on parameters after ``STEPS`` SGD steps. The distributed
  run sums the same products in a different order (per-rank partial sums, then a reduction),
  so results differ by float32 rounding (~1e-7 relative on O(1) values; the largest seen is
  ~1e-7). A wrong reduction (sum instead of mean, a missing all-reduce, a dropped shard)
  changes parameters by ``lr * |grad|`` ~ 1e-2, three orders of magnitude above.
* bfloat16 mixed precision: compared with a reference that runs forward/backward in bf16 too;
  bf16 keeps 8 significant bits (relative rounding 2**-9 ≈ 2e-3), and the per-rank bf16 grads
  are averaged in fp32 where the reference sums the whole batch in bf16, so parameter updates
  differ by ~lr * 4e-3 * |grad| per step; ``2e-3`` after three steps, still well below the
  ~1e-2 a wrong reduction causes.
* DCP: bit-exact (``torch.equal``): the bytes are written and read back, never recomputed.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

DEV = torch.device("neuron")
STEPS = 3
LR = 0.1
TOL = 1e-5
TOL_BF16 = 2e-3


# ---- models -----------------------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self, dim: int = 16, hidden: int = 32):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden)
        self.w2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)))


class Attention(nn.Module):
    def __init__(self, dim: int = 16, heads: int = 4):
        super().__init__()
        self.head_dim = dim // heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds heads/tp of them
        q = self.wq(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class Block(nn.Module):
    """A pre-norm transformer block (causal self-attention + MLP)."""

    def __init__(self, dim: int = 16, heads: int = 4, hidden: int = 32):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, hidden)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Stack(nn.Module):
    def __init__(self, n: int = 4, dim: int = 16):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(dim, dim), nn.Tanh()) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


# ---- helpers ----------------------------------------------------------------------------------
def _batch(step: int, shape, seed: int = 0):
    g = torch.Generator().manual_seed(1000 + 31 * step + seed)
    return torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)


def _full(t):
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        t = t.full_tensor()
    return t.detach().float().cpu()


def _params(model) -> dict[str, torch.Tensor]:
    return {k: _full(v) for k, v in model.named_parameters()}


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _reference(model, batches, *, clip=None, dtype=None):
    """Train a copy of ``model`` on one process with full batches; (params, losses, norms)."""
    ref = copy.deepcopy(model).to(DEV)
    opt = torch.optim.SGD(ref.parameters(), lr=LR)
    losses, norms = [], []
    for x, y in batches:
        opt.zero_grad()
        if dtype is None:
            loss = F.mse_loss(ref(x.to(DEV)), y.to(DEV))
            loss.backward()
        else:  # compute in `dtype` (FSDP2 MixedPrecisionPolicy), keep fp32 master weights
            low = copy.deepcopy(ref).to(dtype)
            loss = F.mse_loss(low(x.to(DEV, dtype)).float(), y.to(DEV))
            loss.backward()
            for p, q in zip(ref.parameters(), low.parameters(), strict=True):
                p.grad = q.grad.float()
        if clip is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(ref.parameters(), clip)))
        opt.step()
        losses.append(float(loss.detach()))
    return _params(ref), losses, norms


def _rank_slice(t, r, w, dim=0):
    n = t.shape[dim] // w
    return t.narrow(dim, r * n, n)


# ---- checks -----------------------------------------------------------------------------------
def run_parallel(check, tmpdir: str, *, heavy: bool = False) -> dict:
    r, w = dist.get_rank(), dist.get_world_size()
    out: dict = {}
    from torch.distributed.device_mesh import init_device_mesh

    @check("device_mesh_1d")
    def _():
        mesh = init_device_mesh("neuron", (w,), mesh_dim_names=("dp",))
        assert mesh.device_type == "neuron" and mesh.size() == w and mesh.get_local_rank() == r
        t = torch.full((3,), float(r + 1), device=DEV)
        dist.all_reduce(t, group=mesh.get_group("dp"))
        assert t.cpu().tolist() == [float(sum(range(1, w + 1)))] * 3
        assert dist.get_backend(mesh.get_group()) == "neuron"

    _dtensor_checks(check, r, w, out)
    _fsdp_checks(check, r, w, out)
    _tp_checks(check, r, w, out)
    _pipeline_checks(check, r, w, out)
    _dcp_checks(check, r, w, out, tmpdir)
    if heavy and w == 4:
        _two_d_checks(check, r, w, out)
    return out


def _dtensor_checks(check, r, w, out):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("neuron", (w,))
    g = torch.Generator().manual_seed(5)
    a = torch.randn(4 * w, 2 * w, generator=g)  # every dim divisible by the world size
    b = torch.randn(2 * w, 2 * w, generator=g)

    @check("dtensor_distribute_full_tensor")
    def _():
        d = distribute_tensor(a.to(DEV), mesh, [Shard(0)])
        assert d.to_local().device.type == "neuron"
        assert torch.equal(d.to_local().cpu(), _rank_slice(a, r, w))
        assert torch.equal(d.full_tensor().cpu(), a)
        d1 = distribute_tensor(a.to(DEV), mesh, [Shard(1)])
        assert torch.equal(d1.to_local().cpu(), _rank_slice(a, r, w, 1))

    @check("dtensor_redistribute")
    def _():
        d = distribute_tensor(a.to(DEV), mesh, [Shard(0)])
        rep = d.redistribute(mesh, [Replicate()])  # all-gather
        assert torch.equal(rep.to_local().cpu(), a)
        s1 = d.redistribute(mesh, [Shard(1)])  # all-to-all
        assert torch.equal(s1.to_local().cpu(), _rank_slice(a, r, w, 1))
        back = rep.redistribute(mesh, [Shard(0)])  # local chunk, no communication
        assert torch.equal(back.to_local().cpu(), _rank_slice(a, r, w))
        # Partial -> Replicate (all-reduce) and Partial -> Shard (reduce-scatter)
        part = distribute_tensor(a.to(DEV), mesh, [Replicate()]).redistribute(mesh, [Replicate()])
        from torch.distributed.tensor import DTensor

        p = DTensor.from_local(a.to(DEV) * (r + 1), mesh, [Partial()])
        total = sum(range(1, w + 1))
        assert torch.allclose(p.redistribute(mesh, [Replicate()]).to_local().cpu(), a * total, atol=1e-5)
        p = DTensor.from_local(a.to(DEV) * (r + 1), mesh, [Partial()])
        assert torch.allclose(p.redistribute(mesh, [Shard(0)]).to_local().cpu(),
                              _rank_slice(a * total, r, w), atol=1e-5)
        assert torch.equal(part.to_local().cpu(), a)

    @check("dtensor_ops")
    def _():
        da = distribute_tensor(a.to(DEV), mesh, [Shard(0)])
        db = distribute_tensor(b.to(DEV), mesh, [Replicate()])
        mm = da @ db  # sharded rows x replicated -> Shard(0)
        assert mm.placements[0].is_shard(0)
        torch.testing.assert_close(mm.full_tensor().cpu(), a @ b, atol=1e-5, rtol=1e-5)
        db1 = distribute_tensor(b.to(DEV), mesh, [Shard(1)])
        dar = distribute_tensor(a.to(DEV), mesh, [Replicate()])
        torch.testing.assert_close((dar @ db1).full_tensor().cpu(), a @ b, atol=1e-5, rtol=1e-5)
        # contraction over the sharded dim gives a Partial result
        da1 = distribute_tensor(a.to(DEV), mesh, [Shard(1)])
        db0 = distribute_tensor(b.to(DEV), mesh, [Shard(0)])
        pm = da1 @ db0
        assert pm.placements[0].is_partial()
        torch.testing.assert_close(pm.full_tensor().cpu(), a @ b, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close((da * 2 + 1).full_tensor().cpu(), a * 2 + 1)
        torch.testing.assert_close(da.sum().full_tensor().cpu(), a.sum(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(torch.softmax(da, dim=1).full_tensor().cpu(), torch.softmax(a, 1))
        torch.testing.assert_close(torch.softmax(da, dim=0).full_tensor().cpu(), torch.softmax(a, 0))

    @check("dtensor_autograd")
    def _():
        x = distribute_tensor(a.to(DEV), mesh, [Shard(0)])
        wt = distribute_tensor(b.to(DEV), mesh, [Replicate()]).requires_grad_()
        (x @ wt).tanh().sum().full_tensor().backward()
        wr = b.clone().to(DEV).requires_grad_()
        (a.to(DEV) @ wr).tanh().sum().backward()
        torch.testing.assert_close(_full(wt.grad), wr.grad.cpu(), atol=1e-5, rtol=1e-5)


def _fsdp_train(model_fn, batches, r, w, *, reshard=True, mp=None, clip=None, per_layer=True):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    model = model_fn().to(DEV)
    kw = {"reshard_after_forward": reshard}
    if mp is not None:
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=mp, reduce_dtype=torch.float32)
    if per_layer:
        for layer in model.layers:
            fully_shard(layer, **kw)
    fully_shard(model, **kw)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses, norms, dtypes = [], [], set()
    for x, y in batches:
        opt.zero_grad()
        pred = model(_rank_slice(x, r, w).to(DEV))
        dtypes.add(pred.dtype)
        loss = F.mse_loss(pred.float(), _rank_slice(y, r, w).to(DEV))
        loss.backward()
        if clip is not None:
            norms.append(float(_full(torch.nn.utils.clip_grad_norm_(model.parameters(), clip))))
        opt.step()
        lt = loss.detach().clone()
        dist.all_reduce(lt, op=dist.ReduceOp.AVG)
        losses.append(float(lt))
    return model, losses, norms, dtypes


def _fsdp_checks(check, r, w, out):
    from torch.distributed.tensor import DTensor

    batches = [_batch(s, (4 * w, 16)) for s in range(STEPS)]

    def make():
        return Stack(4, 16)

    torch.manual_seed(0)
    ref_params, ref_losses, _ = _reference(make(), batches)

    @check("fsdp2_fully_shard")
    def _():
        mem_before = torch.neuron.memory_allocated()
        model, losses, _, _ = _fsdp_train(make, batches, r, w)
        p = next(iter(model.parameters()))
        assert isinstance(p, DTensor) and p.to_local().device.type == "neuron"
        assert p.to_local().shape[0] == p.shape[0] // w  # really sharded
        d = _max_diff(_params(model), ref_params)
        out["fsdp2_max_diff"] = d
        assert d < TOL, d
        assert max(abs(a - b) for a, b in zip(losses, ref_losses, strict=True)) < TOL
        # after the step only the sharded parameters and their sharded gradients are allocated
        # (SGD has no state): the unsharded parameters were freed by storage resize_(0)
        sharded = sum(q.to_local().numel() * 4 for q in model.parameters())
        grown = torch.neuron.memory_allocated() - mem_before
        out["fsdp2_memory"] = [grown, sharded]
        assert grown == 2 * sharded, (grown, sharded)

    @check("fsdp2_no_reshard_after_forward")
    def _():
        model, losses, _, _ = _fsdp_train(make, batches, r, w, reshard=False)
        d = _max_diff(_params(model), ref_params)
        assert d < TOL, d

    @check("fsdp2_mixed_precision_bf16")
    def _():
        torch.manual_seed(0)
        ref_bf16, _, _ = _reference(make(), batches, dtype=torch.bfloat16)
        model, _, _, dtypes = _fsdp_train(make, batches, r, w, mp=torch.bfloat16)
        assert dtypes == {torch.bfloat16}, dtypes  # the forward really ran in bf16
        assert next(iter(model.parameters())).dtype == torch.float32  # fp32 master weights
        d = _max_diff(_params(model), ref_bf16)
        out["fsdp2_bf16_max_diff"] = d
        assert d < TOL_BF16, d
        out["fsdp2_bf16_vs_fp32"] = _max_diff(_params(model), ref_params)

    @check("fsdp2_grad_clipping")
    def _():
        clip = 0.05
        torch.manual_seed(0)
        ref_clip, _, ref_norms = _reference(make(), batches, clip=clip)
        model, _, norms, _ = _fsdp_train(make, batches, r, w, clip=clip)
        assert min(ref_norms) > clip  # clipping is active in every step
        assert max(abs(a - b) for a, b in zip(norms, ref_norms, strict=True)) < 1e-5, (norms, ref_norms)
        d = _max_diff(_params(model), ref_clip)
        assert d < TOL, d
        assert _max_diff(ref_clip, ref_params) > 100 * TOL  # clipping changed the result


def _tp_plan(sequence_parallel: bool):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    if not sequence_parallel:
        return {
            "attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(), "attn.wv": ColwiseParallel(),
            "attn.wo": RowwiseParallel(), "mlp.w1": ColwiseParallel(), "mlp.w2": RowwiseParallel(),
        }
    gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    return {
        "norm1": SequenceParallel(), "attn": gather,
        "attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(), "attn.wv": ColwiseParallel(),
        "attn.wo": RowwiseParallel(output_layouts=Shard(1)),
        "norm2": SequenceParallel(),
        "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "mlp.w1": ColwiseParallel(), "mlp.w2": RowwiseParallel(output_layouts=Shard(1)),
    }


def _tp_checks(check, r, w, out):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    seq = 4 * w
    batches = [_batch(s, (2, seq, 16), seed=7) for s in range(STEPS)]
    torch.manual_seed(1)
    base = Block(16, 4, 32)
    ref_params, ref_losses, _ = _reference(base, batches)

    for name, sp in (("tensor_parallel_block", False), ("sequence_parallel_block", True)):
        @check(name)
        def _(sp=sp, name=name):
            mesh = init_device_mesh("neuron", (w,), mesh_dim_names=("tp",))
            model = parallelize_module(copy.deepcopy(base).to(DEV), mesh, _tp_plan(sp))
            local = model.attn.wq.weight.to_local()
            assert local.shape == (16 // w, 16) and local.device.type == "neuron"
            # without SP the norms stay plain tensors next to DTensor weights, which the
            # foreach SGD kernels cannot mix (a PyTorch restriction, the same on CUDA)
            opt = torch.optim.SGD(model.parameters(), lr=LR, foreach=sp)
            losses = []
            for x, y in batches:
                opt.zero_grad()
                if sp:  # each rank holds a slice of the sequence
                    xs, ys = _rank_slice(x, r, w, 1), _rank_slice(y, r, w, 1)
                    pred = model(xs.to(DEV))
                    assert pred.shape == xs.shape
                    loss = F.mse_loss(pred, ys.to(DEV), reduction="sum") / y.numel()
                else:
                    loss = F.mse_loss(model(x.to(DEV)), y.to(DEV))
                loss.backward()
                opt.step()
                lt = loss.detach().clone()
                if sp:
                    dist.all_reduce(lt)
                losses.append(float(lt))
            d = _max_diff(_params(model), ref_params)
            out[f"{name}_max_diff"] = d
            assert d < TOL, d
            assert max(abs(a - b) for a, b in zip(losses, ref_losses, strict=True)) < TOL


def _pipeline_checks(check, r, w, out):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    n_micro = 4
    batches = [_batch(s, (4 * n_micro, 16), seed=11) for s in range(STEPS)]
    torch.manual_seed(2)
    base = Stack(2 * w, 16)
    ref_params, ref_losses, _ = _reference(base, batches)
    per = len(base.layers) // w

    for name, cls in (("pipeline_gpipe", ScheduleGPipe), ("pipeline_1f1b", Schedule1F1B)):
        @check(name)
        def _(cls=cls, name=name):
            model = copy.deepcopy(base).to(DEV)
            part = nn.Sequential(*model.layers[r * per:(r + 1) * per])  # this rank's stage
            stage = PipelineStage(part, r, w, DEV)
            sched = cls(stage, n_microbatches=n_micro, loss_fn=F.mse_loss)
            opt = torch.optim.SGD(part.parameters(), lr=LR)
            losses = []
            for x, y in batches:
                opt.zero_grad()
                if r == 0:
                    sched.step(x.to(DEV))
                elif r == w - 1:
                    mb = []
                    sched.step(target=y.to(DEV), losses=mb)
                    losses.append(float(torch.stack([m.detach() for m in mb]).mean()))
                else:
                    sched.step()
                opt.step()
            mine = {f"layers.{r * per + int(k.split('.', 1)[0])}.{k.split('.', 1)[1]}": v.detach().cpu()
                    for k, v in part.state_dict().items()}
            d = max(float((v - ref_params[k]).abs().max()) for k, v in mine.items())
            out[f"{name}_max_diff_rank{r}"] = d
            assert d < TOL, d
            if r == w - 1:
                assert max(abs(a - b) for a, b in zip(losses, ref_losses, strict=True)) < TOL


def _dcp_checks(check, r, w, out, tmpdir):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.fsdp import fully_shard

    def build(seed):
        torch.manual_seed(seed)
        model = Stack(3, 16).to(DEV)
        for layer in model.layers:
            fully_shard(layer)
        fully_shard(model)
        return model, torch.optim.Adam(model.parameters(), lr=1e-2)

    def train(model, opt, steps, seed):
        for s in range(steps):
            x, y = _batch(s, (4 * w, 16), seed=seed)
            opt.zero_grad()
            F.mse_loss(model(_rank_slice(x, r, w).to(DEV)), _rank_slice(y, r, w).to(DEV)).backward()
            opt.step()

    def local_state(model, opt):
        msd, osd = get_state_dict(model, opt)
        flat = {}
        for k, v in msd.items():
            flat[f"model.{k}"] = v.to_local().detach().cpu().clone()
        for k, st in osd["state"].items():
            for name, v in st.items():
                v = v.to_local() if hasattr(v, "to_local") else v
                flat[f"optim.{k}.{name}"] = v.detach().cpu().clone()
        return flat

    @check("dcp_fsdp2_save_load_bit_exact")
    def _():
        model, opt = build(3)
        train(model, opt, 2, seed=13)
        saved = local_state(model, opt)
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=f"{tmpdir}/ckpt")

        model2, opt2 = build(99)  # different weights, empty optimizer state
        msd2, osd2 = get_state_dict(model2, opt2)
        state = {"model": msd2, "optim": osd2}
        dcp.load(state, checkpoint_id=f"{tmpdir}/ckpt")
        set_state_dict(model2, opt2, model_state_dict=state["model"], optim_state_dict=state["optim"])
        loaded = local_state(model2, opt2)
        assert saved.keys() == loaded.keys() and len(saved) > 6, sorted(loaded)
        bad = [k for k in saved if not torch.equal(saved[k], loaded[k])]
        assert not bad, bad
        # training continues identically from the reloaded state
        train(model, opt, 1, seed=17)
        train(model2, opt2, 1, seed=17)
        after, after2 = local_state(model, opt), local_state(model2, opt2)
        bad = [k for k in after if not torch.equal(after[k], after2[k])]
        assert not bad, bad
        out["dcp_tensors"] = len(saved)


def _two_d_checks(check, r, w, out):
    """World size 4: a 2-D (dp, tp) mesh; FSDP2 over dp on top of tensor parallelism over tp."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = init_device_mesh("neuron", (2, w // 2), mesh_dim_names=("dp", "tp"))

    @check("device_mesh_2d")
    def _():
        assert mesh.shape == (2, w // 2) and mesh["dp"].size() == 2 and mesh["tp"].size() == w // 2
        dp_rank, tp_rank = mesh.get_coordinate()
        assert r == dp_rank * (w // 2) + tp_rank
        t = torch.full((2,), float(r), device=DEV)
        dist.all_reduce(t, group=mesh.get_group("tp"))
        tp_peers = [dp_rank * (w // 2) + k for k in range(w // 2)]
        assert t.cpu().tolist() == [float(sum(tp_peers))] * 2
        a = torch.arange(32.0).reshape(8, 4)
        d = distribute_tensor(a.to(DEV), mesh, [Shard(0), Shard(1)])
        assert torch.equal(d.full_tensor().cpu(), a)
        assert torch.equal(d.redistribute(mesh, [Replicate(), Shard(0)]).full_tensor().cpu(), a)

    @check("fsdp2_tp_2d")
    def _():
        dp = mesh["dp"].size()
        batches = [_batch(s, (2 * dp, 8, 16), seed=23) for s in range(STEPS)]
        torch.manual_seed(4)
        base = Block(16, 4, 32)
        ref_params, ref_losses, _ = _reference(base, batches)
        model = parallelize_module(copy.deepcopy(base).to(DEV), mesh["tp"], _tp_plan(False))
        fully_shard(model, mesh=mesh["dp"])
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        dp_rank = mesh.get_coordinate()[0]
        for x, y in batches:
            opt.zero_grad()
            xs, ys = _rank_slice(x, dp_rank, dp), _rank_slice(y, dp_rank, dp)
            F.mse_loss(model(xs.to(DEV)), ys.to(DEV)).backward()
            opt.step()
        p = model.attn.wq.weight
        assert len(p.placements) == 2, p.placements
        d = _max_diff(_params(model), ref_params)
        out["fsdp2_tp_2d_max_diff"] = d
        assert d < TOL, d
