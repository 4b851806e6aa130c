"""``estimate(model_or_fn, *inputs, train=True)``: how long a step would take on the target.

The step runs once on the simulated ``neuron`` device while a recording session collects every
device op; each op is then priced by the roofline :mod:`cost_model`. Ops run back to back on
the core's one in-order queue, so the estimate is the sum of the per-op times.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import dataclass, field

import torch

from ..runtime import state
from ..runtime.target import Target
from .cost_model import OpCost
from .recorder import DeviceEvent, Session


@dataclass
class OpEstimate:
    """All calls of one ATen op (same name and category) with their summed cost."""

    name: str
    category: str
    engine: str
    count: int = 0
    flops: int = 0
    bytes: int = 0
    compute_s: float = 0.0
    memory_s: float = 0.0
    time_s: float = 0.0
    measured_s: float = 0.0

    @property
    def bound(self) -> str:
        if self.category in ("allocation",):
            return "none"
        if self.category == "cpu_fallback":
            return "host"
        return "compute" if self.compute_s >= self.memory_s and self.compute_s > 0 else "memory"

    @property
    def tflops(self) -> float:
        return self.flops / self.time_s / 1e12 if self.time_s else 0.0


@dataclass
class Estimate:
    """Estimated device time of a step on ``target``, with breakdowns."""

    target: Target
    events: list[DeviceEvent] = field(repr=False, default_factory=list)
    costs: list[OpCost] = field(repr=False, default_factory=list)
    label: str = ""

    @property
    def total_s(self) -> float:
        return sum(c.time_s for c in self.costs)

    @property
    def total_flops(self) -> int:
        return sum(c.flops for c in self.costs)

    @property
    def total_bytes(self) -> int:
        return sum(c.bytes for c in self.costs)

    @property
    def measured_s(self) -> float:
        """Host time the simulator spent on the same ops (not a hardware figure)."""
        return sum(e.duration_ns for e in self.events) * 1e-9

    def _group(self, key) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for e, c in zip(self.events, self.costs, strict=True):
            out[key(e, c)] += c.time_s
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    @property
    def by_category(self) -> dict[str, float]:
        return self._group(lambda e, c: c.category)

    @property
    def by_engine(self) -> dict[str, float]:
        return self._group(lambda e, c: c.engine)

    @property
    def by_bound(self) -> dict[str, float]:
        return self._group(lambda e, c: c.bound)

    @property
    def ops(self) -> list[OpEstimate]:
        groups: dict[tuple, OpEstimate] = {}
        for e, c in zip(self.events, self.costs, strict=True):
            k = (e.name, c.category)
            g = groups.get(k)
            if g is None:
                g = groups[k] = OpEstimate(e.name, c.category, c.engine)
            g.count += 1
            g.flops += c.flops
            g.bytes += c.bytes
            g.compute_s += c.compute_s + (c.fixed_s if c.bound == "compute" else 0.0)
            g.memory_s += c.memory_s + (c.fixed_s if c.bound != "compute" else 0.0)
            g.time_s += c.time_s
            g.measured_s += e.duration_ns * 1e-9
        return sorted(groups.values(), key=lambda g: -g.time_s)

    @property
    def top_ops(self) -> list[OpEstimate]:
        return self.ops[:10]

    def table(self, top: int = 10) -> str:
        tot = self.total_s or 1e-30
        lines = [
            f"Estimated step time on {self.target.name} ({self.target.generation}, one logical "
            f"NeuronCore, LNC={self.target.lnc}){': ' + self.label if self.label else ''}",
            f"  total {_fmt_s(self.total_s)}   {len(self.events)} device ops   "
            f"{self.total_flops / 1e9:,.2f} GFLOP   {self.total_bytes / 1e6:,.2f} MB moved   "
            f"(simulator host time {_fmt_s(self.measured_s)})",
            "",
            f"  {'category':<16}{'time':>12}{'share':>8}      {'engine':<10}{'time':>12}{'share':>8}",
        ]
        cats = list(self.by_category.items())
        engs = list(self.by_engine.items())
        for i in range(max(len(cats), len(engs))):
            left = f"{cats[i][0]:<16}{_fmt_s(cats[i][1]):>12}{cats[i][1] / tot:>8.1%}" if i < len(cats) else " " * 36
            right = f"{engs[i][0]:<10}{_fmt_s(engs[i][1]):>12}{engs[i][1] / tot:>8.1%}" if i < len(engs) else ""
            lines.append(f"  {left}      {right}")
        lines += ["", f"  {'op':<38}{'calls':>6}{'time':>12}{'share':>8}{'GFLOP':>10}{'MB':>10}{'TFLOP/s':>9}  bound"]
        for op in self.ops[:top]:
            lines.append(
                f"  {op.name[:38]:<38}{op.count:>6}{_fmt_s(op.time_s):>12}{op.time_s / tot:>8.1%}"
                f"{op.flops / 1e9:>10.3f}{op.bytes / 1e6:>10.2f}{op.tflops:>9.1f}  {op.bound}"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"Estimate(target={self.target.name!r}, total_s={self.total_s:.6g}, ops={len(self.events)})"

    def to_dict(self) -> dict:
        return {
            "target": self.target.name,
            "total_s": self.total_s,
            "by_category": self.by_category,
            "by_engine": self.by_engine,
            "top_ops": [
                {"name": o.name, "category": o.category, "engine": o.engine, "count": o.count,
                 "flops": o.flops, "bytes": o.bytes, "time_s": o.time_s, "bound": o.bound}
                for o in self.top_ops
            ],
        }


def _fmt_s(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.2f} us"


def from_events(events: list[DeviceEvent], target: Target | None = None, label: str = "") -> Estimate:
    """Price recorded device events on ``target`` (default: the active one)."""
    tgt = target or state.target()
    return Estimate(tgt, list(events), [e.cost(tgt) for e in events], label)


def _to_neuron(x):
    if isinstance(x, torch.Tensor) and x.device.type != "neuron":
        return x.to("neuron")
    if isinstance(x, (list, tuple)):
        return type(x)(_to_neuron(v) for v in x)
    if isinstance(x, dict):
        return {k: _to_neuron(v) for k, v in x.items()}
    return x


def _loss_of(out) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out if out.requires_grad else None
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        for o in out:
            loss = _loss_of(o)
            if loss is not None:
                return loss
    if hasattr(out, "loss") and isinstance(out.loss, torch.Tensor):
        return out.loss if out.loss.requires_grad else None
    return None


def estimate(model_or_fn, *inputs, train: bool = True, target: Target | None = None, **kwargs) -> Estimate:
    """Run one step of ``model_or_fn(*inputs)`` on ``neuron`` and estimate its device time.

    CPU tensors among ``inputs`` are moved to the device; a module with parameters off the
    device is copied there (the original is left untouched). With ``train=True`` the step
    includes the backward pass: the output (or its first tensor needing grad, or ``.loss``) is
    reduced to a scalar with ``.sum()`` and back-propagated. Pricing uses ``target`` or the
    active target (``TORCHNEURON_TARGET``).
    """
    fn = model_or_fn
    if isinstance(fn, torch.nn.Module):
        params = list(fn.parameters()) + list(fn.buffers())
        if any(p.device.type != "neuron" for p in params):
            fn = copy.deepcopy(fn).to("neuron")
        fn.train(train)
    inputs = _to_neuron(inputs)
    kwargs = _to_neuron(kwargs)
    label = getattr(model_or_fn, "__name__", type(model_or_fn).__name__)
    with Session(memory=False) as s:
        if train:
            with torch.enable_grad():
                out = fn(*inputs, **kwargs)
                loss = _loss_of(out)
                if loss is not None:
                    (loss if loss.dim() == 0 else loss.float().sum()).backward()
        else:
            with torch.no_grad():
                fn(*inputs, **kwargs)
    return from_events(s.events, target, label=f"{label} ({'train' if train else 'inference'} step)")


__all__ = ["Estimate", "OpEstimate", "estimate", "from_events"]
