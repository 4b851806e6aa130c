"""The timing model: what each instruction costs and when it can run.

Costs come from the target's figures (:mod:`torchneuron.runtime.target`): the Tensor Engine
takes ``max(N, 64)`` cycles per matmul for a moving free size N (fp32 ~4x slower), the Vector
Engine ``N`` cycles per input plus ~100 fixed, the Scalar Engine ``max(N, 64)``, GpSimd
``N + 150``, and a DMA the fixed ~1.3 us plus its bytes over one queue's share of the core's HBM
bandwidth. Scheduling is an online list-scheduling: each physical NeuronCore has one in-order
queue per engine (16 for DMA); an instruction starts when its engine (queue) is free and every
instruction it depends on -- read-after-write, write-after-write and write-after-read on
overlapping boxes of the same buffer -- has finished. Engines run in parallel.

Every launch yields a :class:`Profile`: the list of :class:`InstructionRecord` (engine, start,
end, flops, bytes, source line) that a profiler can read, plus per-engine totals.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from torchneuron.runtime.target import Target

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")

Box = tuple[tuple[int, int], ...]


# ---- instruction costs (seconds) -----------------------------------------------------------
def _clock(target: Target, engine: str) -> float:
    c = target.clocks
    return {
        "tensor": c.tensor_hz,
        "vector": c.vector_hz,
        "scalar": c.scalar_hz,
        "gpsimd": c.gpsimd_hz,
    }[engine]


def matmul_seconds(target: Target, moving_free: int, family: str) -> float:
    k = target.nki_costs
    cycles = max(moving_free, k.matmul_min_cycles)
    if family == "fp32":
        cycles *= k.matmul_fp32_slowdown
    return cycles / _clock(target, "tensor")


def vector_seconds(target: Target, *free_sizes: int, extra_cycles: float = 0.0) -> float:
    cycles = sum(free_sizes) + target.nki_costs.vector_fixed_cycles + extra_cycles
    return cycles / _clock(target, "vector")


def scalar_seconds(target: Target, free_size: int, reduce: bool = False) -> float:
    k = target.nki_costs
    cycles = max(free_size, k.scalar_min_cycles) + (k.scalar_reduce_extra_cycles if reduce else 0)
    return cycles / _clock(target, "scalar")


def gpsimd_seconds(target: Target, free_size: int) -> float:
    return (free_size + target.nki_costs.gpsimd_fixed_cycles) / _clock(target, "gpsimd")


def engine_seconds(target: Target, engine: str, free_size: int, inputs: int = 1) -> float:
    """Cost of a generic elementwise/reduce instruction on ``engine``."""
    if engine == "vector":
        return vector_seconds(target, *([free_size] * max(inputs, 1)))
    if engine == "scalar":
        return scalar_seconds(target, free_size)
    if engine == "gpsimd":
        return gpsimd_seconds(target, free_size * max(inputs, 1))
    if engine == "tensor":
        return matmul_seconds(target, free_size, "bf16")
    raise ValueError(engine)


def dma_queue_bandwidth(target: Target) -> float:
    """Bytes/s of one DMA queue: the physical core's HBM bandwidth shared by its queues."""
    per_physical_core = target.hbm_bandwidth / target.lnc
    return per_physical_core / target.dma_engines_per_core


def dma_seconds(target: Target, nbytes: int) -> float:
    return target.dma_fixed_cost_s + nbytes / dma_queue_bandwidth(target)


# ---- records and profile ---------------------------------------------------------------------
@dataclass
class InstructionRecord:
    """One executed instruction, as a profiler would show it."""

    index: int
    name: str  # the NKI API call, e.g. "nisa.nc_matmul"
    engine: str  # tensor | vector | scalar | gpsimd | dma
    core: int  # physical NeuronCore within the logical core
    program: tuple[int, ...]  # SPMD program id
    start: float  # seconds from launch
    end: float
    flops: float = 0.0
    bytes: int = 0
    queue: int = 0  # DMA queue (0 for compute engines)
    location: str = ""  # kernel source file:line

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class Profile:
    """Timing estimate of one kernel launch."""

    target: str
    lnc: int
    records: list[InstructionRecord] = field(default_factory=list)
    dma_queues: int = 16  # DMA queues per physical core

    @property
    def duration(self) -> float:
        """Estimated wall time of the launch, seconds."""
        return max((r.end for r in self.records), default=0.0)

    @property
    def total_flops(self) -> float:
        return sum(r.flops for r in self.records)

    @property
    def total_bytes(self) -> int:
        return sum(r.bytes for r in self.records if r.engine == "dma")

    def engine_busy(self) -> dict[str, float]:
        """Busy seconds per engine, summed over physical cores (and DMA queues)."""
        busy: dict[str, float] = dict.fromkeys(ENGINES, 0.0)
        for r in self.records:
            busy[r.engine] += r.duration
        return busy

    def engine_utilization(self) -> dict[str, float]:
        """Fraction of the launch each engine kind is busy (DMA: averaged over its queues)."""
        d = self.duration
        if d <= 0:
            return dict.fromkeys(ENGINES, 0.0)
        busy = self.engine_busy()
        out = {}
        for e, b in busy.items():
            units = self.lnc * (self.dma_queues if e == "dma" else 1)
            out[e] = b / (d * units)
        return out

    def instruction_counts(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for r in self.records:
            counts[r.name] += 1
        return dict(counts)

    def achieved_flops(self) -> float:
        d = self.duration
        return self.total_flops / d if d > 0 else 0.0

    def summary(self) -> str:
        lines = [
            f"NKI launch on {self.target} (LNC={self.lnc}): estimated {self.duration * 1e6:.2f} us, "
            f"{len(self.records)} instructions, {self.total_flops / 1e9:.3f} GFLOP, "
            f"{self.total_bytes / 2**20:.2f} MiB DMA",
        ]
        busy = self.engine_busy()
        util = self.engine_utilization()
        for e in ENGINES:
            lines.append(
                f"  {e:<7} busy {busy[e] * 1e6:10.2f} us  utilization {util[e] * 100:5.1f}%"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "lnc": self.lnc,
            "duration_s": self.duration,
            "engine_busy_s": self.engine_busy(),
            "instructions": [
                {
                    "name": r.name,
                    "engine": r.engine,
                    "core": r.core,
                    "queue": r.queue,
                    "program": list(r.program),
                    "start": r.start,
                    "end": r.end,
                    "flops": r.flops,
                    "bytes": r.bytes,
                    "location": r.location,
                }
                for r in self.records
            ],
        }


# ---- scheduling -------------------------------------------------------------------------------
def _overlaps(a: Box, b: Box) -> bool:
    for (alo, ahi), (blo, bhi) in zip(a, b, strict=True):
        if alo >= bhi or blo >= ahi:
            return False
    return True


def _covers(outer: Box, inner: Box) -> bool:
    for (olo, ohi), (ilo, ihi) in zip(outer, inner, strict=True):
        if ilo < olo or ihi > ohi:
            return False
    return True


class _Boxes:
    """Accessed boxes of one buffer with the time each access ends. Plain Python lists: a
    buffer holds a handful of boxes, for which tuple loops beat numpy's per-call overhead."""

    __slots__ = ("boxes", "ends")

    def __init__(self) -> None:
        self.boxes: list[Box] = []
        self.ends: list[float] = []

    def latest_overlap(self, box: Box) -> float:
        t = 0.0
        ends = self.ends
        for i, b in enumerate(self.boxes):
            if ends[i] > t and _overlaps(b, box):
                t = ends[i]
        return t

    def drop_covered(self, box: Box) -> None:
        boxes = self.boxes
        if not boxes:
            return
        keep = [i for i, b in enumerate(boxes) if not _covers(box, b)]
        if len(keep) != len(boxes):
            self.boxes = [boxes[i] for i in keep]
            self.ends = [self.ends[i] for i in keep]

    def add(self, box: Box, end: float) -> None:
        boxes = self.boxes
        for i, b in enumerate(boxes):
            if b == box:
                if end > self.ends[i]:
                    self.ends[i] = end
                return
        boxes.append(box)
        self.ends.append(end)


class _BufferState:
    __slots__ = ("reads", "writes")

    def __init__(self) -> None:
        self.writes = _Boxes()
        self.reads = _Boxes()


class Scheduler:
    """Online list-scheduler over the engines of ``lnc`` physical cores."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.free: dict[tuple[int, str, int], float] = defaultdict(float)
        self.state: dict[int, _BufferState] = {}
        self.profile = Profile(
            target=target.name, lnc=target.lnc, dma_queues=target.dma_engines_per_core
        )

    def forget(self, buffer_id: int) -> None:
        self.state.pop(buffer_id, None)

    def _state(self, bid: int) -> _BufferState:
        st = self.state.get(bid)
        if st is None:
            st = self.state[bid] = _BufferState()
        return st

    def _ready(self, reads: list[tuple[int, Box]], writes: list[tuple[int, Box]]) -> float:
        t = 0.0
        state = self.state
        for bid, box in reads:
            st = state.get(bid)
            if st is not None:
                t = max(t, st.writes.latest_overlap(box))
        for bid, box in writes:
            st = state.get(bid)
            if st is not None:
                t = max(t, st.writes.latest_overlap(box), st.reads.latest_overlap(box))
        return t

    def note_write(self, bid: int, box: Box, end: float) -> None:
        """Record that ``box`` of buffer ``bid`` is written until ``end``. Older accesses it
        covers are dropped: anything later that overlaps them also overlaps this write."""
        self._note_write(bid, tuple(box), end)

    def _note_write(self, bid: int, box: Box, end: float) -> None:
        st = self._state(bid)
        st.writes.drop_covered(box)
        st.reads.drop_covered(box)
        st.writes.add(box, end)

    def _note_read(self, bid: int, box: Box, end: float) -> None:
        self._state(bid).reads.add(box, end)

    def issue(
        self,
        name: str,
        engine: str,
        core: int,
        seconds: float,
        reads: list[tuple[int, Box]],
        writes: list[tuple[int, Box]],
        program: tuple[int, ...] = (),
        flops: float = 0.0,
        nbytes: int = 0,
        location: str = "",
    ) -> InstructionRecord:
        rd, wr = reads, writes
        ready = self._ready(rd, wr)
        queue = 0
        if engine == "dma":
            nq = self.target.dma_engines_per_core
            free = self.free
            best = None
            for q in range(nq):  # the queue that can start it first (lowest index on ties)
                t = max(free[(core, "dma", q)], ready)
                if best is None or t < best:
                    best, queue = t, q
        key = (core, engine, queue)
        start = max(ready, self.free[key])
        end = start + seconds
        self.free[key] = end
        for bid, box in rd:
            self._note_read(bid, box, end)
        for bid, box in wr:
            self._note_write(bid, box, end)
        rec = InstructionRecord(
            index=len(self.profile.records),
            name=name,
            engine=engine,
            core=core,
            program=program,
            start=start,
            end=end,
            flops=flops,
            bytes=nbytes,
            queue=queue,
            location=location,
        )
        self.profile.records.append(rec)
        return rec
