"""The simulated chip's published figures, per target, in one table.

Every number the simulator, the cost model or the NKI timing model uses about the hardware
comes from here; nothing else in the package hard-codes a hardware figure. Sources: the AWS
Neuron architecture pages for Trainium2 and Trainium3 (see docs/simulated_chip.md).

The active target is chosen with ``TORCHNEURON_TARGET=trn2|trn3`` (default ``trn2``) and the
logical-NeuronCore configuration with ``TORCHNEURON_LNC=1|2`` (default 2, as on the real trn2).
``TORCHNEURON_HBM_GIB`` overrides the device memory capacity (useful in tests).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

GiB = 1024**3
MiB = 1024**2
KiB = 1024


@dataclass(frozen=True)
class EngineClocks:
    tensor_hz: float
    vector_hz: float
    scalar_hz: float
    gpsimd_hz: float


@dataclass(frozen=True)
class NkiCosts:
    """Rules of thumb for what one NKI instruction costs, in engine cycles (Neuron docs,
    per-instruction "estimated cost" notes). Used by the NKI timing model only."""

    matmul_min_cycles: int = 64  # a Tensor Engine matmul takes max(N, 64) cycles, N = moving free size
    matmul_fp32_slowdown: float = 4.0  # fp32 operands go through the PE array ~4x slower
    vector_fixed_cycles: int = 100  # Vector Engine: N cycles per input + this fixed overhead
    scalar_min_cycles: int = 64  # Scalar Engine activation: max(N, this) cycles
    scalar_reduce_extra_cycles: int = 64  # fused free-axis reduction on the Scalar Engine
    gpsimd_fixed_cycles: int = 150  # GpSimd (iota, affine_select, partition reduce): N + this


@dataclass(frozen=True)
class Target:
    """Figures of one Trainium generation, as seen from one *logical* NeuronCore."""

    name: str
    generation: str
    physical_cores_per_chip: int
    lnc: int
    # Dense peak arithmetic per chip, FLOP/s, by dtype family.
    peak_flops_per_chip: dict[str, float] = field(hash=False)
    hbm_bytes_per_chip: int = 0
    hbm_bandwidth_per_chip: float = 0.0  # bytes/s
    sbuf_partitions: int = 128
    sbuf_bytes_per_partition: int = 0  # per physical core
    sbuf_kernel_reserved_per_partition: int = 0  # what the runtime keeps for itself
    psum_bytes_per_partition: int = 16 * KiB
    psum_banks: int = 8
    clocks: EngineClocks = EngineClocks(2.4e9, 0.96e9, 1.2e9, 1.2e9)
    dma_engines_per_core: int = 16
    dma_fixed_cost_s: float = 1.3e-6
    chip_to_chip_bandwidth: float = 0.0  # bytes/s per chip (NeuronLink)
    efa_bandwidth_per_node: float = 0.0  # bytes/s
    chips_per_node: int = 16
    # host<->device link per chip, bytes/s: PCIe Gen5 x16 (~64 GB/s). An assumption used by the
    # profiler's cost model for copies and CPU fallbacks; not a published Trainium figure.
    host_link_bandwidth_per_chip: float = 64e9
    hbm_override_bytes: int | None = None
    # NKI tile limits (nl.tile_size) and instruction costs
    pe_array_rows: int = 128  # Tensor Engine systolic array: contraction (partition) rows
    pe_array_cols: int = 128  # ... and stationary free-size columns
    matmul_moving_fmax: int = 512  # largest moving free size of one matmul instruction
    bn_stats_fmax: int = 512  # largest free size of one bn_stats instruction
    nki_costs: NkiCosts = NkiCosts()

    # ---- derived, per logical NeuronCore -------------------------------------------------
    @property
    def logical_cores_per_chip(self) -> int:
        return self.physical_cores_per_chip // self.lnc

    @property
    def hbm_bytes(self) -> int:
        """Device memory capacity of one logical NeuronCore (what `neuron:0` can allocate)."""
        if self.hbm_override_bytes is not None:
            return self.hbm_override_bytes
        return self.hbm_bytes_per_chip // self.logical_cores_per_chip

    @property
    def hbm_bandwidth(self) -> float:
        return self.hbm_bandwidth_per_chip / self.logical_cores_per_chip

    def peak_flops(self, dtype_family: str) -> float:
        """Dense peak FLOP/s of one logical core for 'bf16', 'fp16', 'fp8' or 'fp32'."""
        return self.peak_flops_per_chip[dtype_family] / self.logical_cores_per_chip

    @property
    def sbuf_bytes_per_partition_for_kernels(self) -> int:
        return self.sbuf_bytes_per_partition - self.sbuf_kernel_reserved_per_partition

    @property
    def psum_bank_bytes_per_partition(self) -> int:
        """One PSUM bank per partition: the largest PSUM tile a matmul can write (2 KiB)."""
        return self.psum_bytes_per_partition // self.psum_banks

    def tensor_engine_peak_flops(self, dtype_family: str = "bf16") -> float:
        """Peak of the Tensor Engines of one logical core implied by the PE array and the
        tensor clock (one moving column per cycle), as the NKI timing model charges it."""
        per_core = 2.0 * self.pe_array_rows * self.pe_array_cols * self.clocks.tensor_hz
        if dtype_family == "fp32":
            per_core /= self.nki_costs.matmul_fp32_slowdown
        return per_core * self.lnc

    @property
    def device_name(self) -> str:
        return f"AWS {self.generation} NeuronCore (simulated, LNC={self.lnc})"


TARGETS: dict[str, Target] = {
    "trn2": Target(
        name="trn2",
        generation="Trainium2",
        physical_cores_per_chip=8,
        lnc=2,
        peak_flops_per_chip={"bf16": 667e12, "fp16": 667e12, "fp8": 1299e12, "fp32": 181e12},
        hbm_bytes_per_chip=96 * GiB,
        hbm_bandwidth_per_chip=2.9e12,
        sbuf_bytes_per_partition=224 * KiB,
        sbuf_kernel_reserved_per_partition=17_000,  # ~16.6 KiB kept by the runtime
        psum_bytes_per_partition=16 * KiB,
        psum_banks=8,
        clocks=EngineClocks(tensor_hz=2.4e9, vector_hz=0.96e9, scalar_hz=1.2e9, gpsimd_hz=1.2e9),
        dma_engines_per_core=16,
        dma_fixed_cost_s=1.3e-6,
        chip_to_chip_bandwidth=1.28e12,
        efa_bandwidth_per_node=3.2e12 / 8,
        chips_per_node=16,
    ),
    "trn3": Target(
        name="trn3",
        generation="Trainium3",
        physical_cores_per_chip=8,
        lnc=2,
        peak_flops_per_chip={"bf16": 671e12, "fp16": 671e12, "fp8": 2517e12, "fp32": 183e12},
        hbm_bytes_per_chip=144 * GiB,
        hbm_bandwidth_per_chip=4.9e12,
        sbuf_bytes_per_partition=256 * KiB,
        sbuf_kernel_reserved_per_partition=17_000,
        psum_bytes_per_partition=16 * KiB,
        psum_banks=8,
        clocks=EngineClocks(tensor_hz=2.4e9, vector_hz=1.2e9, scalar_hz=1.2e9, gpsimd_hz=1.2e9),
        dma_engines_per_core=16,
        dma_fixed_cost_s=1.3e-6,
        chip_to_chip_bandwidth=2.56e12,
        efa_bandwidth_per_node=3.2e12 / 8,
        chips_per_node=16,
    ),
}


def target_from_env(environ: dict[str, str] | None = None) -> Target:
    """Build the active target from ``TORCHNEURON_TARGET``, ``TORCHNEURON_LNC`` and
    ``TORCHNEURON_HBM_GIB``; raise ``ValueError`` with the accepted values on bad input."""
    env = os.environ if environ is None else environ
    name = env.get("TORCHNEURON_TARGET", "trn2").strip().lower() or "trn2"
    if name not in TARGETS:
        raise ValueError(
            f"TORCHNEURON_TARGET={name!r} is not a known target; choose one of {sorted(TARGETS)}"
        )
    tgt = TARGETS[name]
    lnc_s = env.get("TORCHNEURON_LNC")
    if lnc_s:
        if lnc_s not in ("1", "2"):
            raise ValueError(f"TORCHNEURON_LNC={lnc_s!r}: logical NeuronCore size must be 1 or 2")
        tgt = replace(tgt, lnc=int(lnc_s))
    hbm_s = env.get("TORCHNEURON_HBM_GIB")
    if hbm_s:
        try:
            gib = float(hbm_s)
        except ValueError:
            raise ValueError(f"TORCHNEURON_HBM_GIB={hbm_s!r} is not a number") from None
        if gib <= 0:
            raise ValueError(f"TORCHNEURON_HBM_GIB={hbm_s!r} must be positive")
        tgt = replace(tgt, hbm_override_bytes=int(gib * GiB))
    return tgt
