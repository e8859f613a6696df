"""One flat view of a compute device (GPU or CPU) for the mapper and the engine.

A CPU is described in the same vocabulary as a GPU: cores are the "units" CTAs run on (one CTA per
core), SIMD FMA units are the vector pipe, AMX tiles are the matrix pipe, the shared last-level cache
plays the role of L2, and DDR channels are DRAM. Calibration factors (fitted, labelled, with their
source) are applied here and nowhere else; without a ``calibration:`` block they are 1 (pure physics).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace, field

import numpy as np

from gpusim.config.hardware import DEFAULT_L2_SET_ASSOCIATIVITY, Cpu, Gpu
from gpusim.errors import SimulationError


@dataclass(frozen=True)
class Calibration:
    """Fitted efficiency factors (1.0 = uncalibrated datasheet physics)."""

    tensor_efficiency_fraction: float = 1.0
    vector_efficiency_fraction: float = 1.0
    dram_bandwidth_fraction: float = 1.0
    l2_bandwidth_fraction: float = 1.0
    host_link_fraction: float = 1.0
    host_copy_overhead_s: float = 0.0
    """Fixed host-side cost of one host<->device copy beyond the eager launch (fitted; 0 = none)."""
    gemm_wave_overhead_s: float = 0.0
    """Fixed cost of every wave of a GEMM-like kernel beyond its pipeline fill, math and drain (once for a
    persistent kernel; fitted; 0 = none)."""
    peer_link_fraction: float = 1.0
    in_switch_reduction_fraction: float = 1.0
    dynamic_energy_factor: float = 1.0
    fp8_tensor_energy_factor: float = 1.0
    """Multiplier on the description's FP8 tensor-core energy per FLOP (fitted; 1 = the estimate)."""
    sustained_clock_fraction: float = 1.0
    """Core clock a power-limited card holds under sustained load over its rated clock (the efficiency
    fractions are fitted at it); 1 = never limited."""
    boost_window_s: float = 0.0
    """Busy time from rest the card runs at its rated clock before settling at the sustained one."""
    dram_loaded_latency_slope: float = 0.0
    """DRAM latency under load = idle latency x (1 + slope x utilization); 0 = the idle latency."""
    dram_mixed_traffic_loss_fraction: float = 0.0
    """Share of the achievable DRAM bandwidth lost when reads and writes are evenly mixed (the bus
    turns around between them); traffic with write share w loses it x 2 min(w, 1 - w). 0 = none."""
    cta_turnaround_cycles: float = 0.0
    """Fixed lifetime of a streaming kernel's CTA besides its memory round trips (launch, issue,
    retirement), in SM clock cycles, which CTAs that each touch a few bytes cannot hide; 0 = none."""
    source: str = "uncalibrated (datasheet values)"
    given: frozenset[str] = frozenset()
    """The factors the ``calibration:`` block sets (the others keep their defaults)."""

    @property
    def fitted(self) -> bool:
        """Whether a ``calibration:`` block set these factors (False: datasheet physics, ideal rates)."""
        return self.source != Calibration.source


def uncalibrated_note(name: str) -> str:
    """The warning a run on a description without a ``calibration:`` block carries."""
    return (f"{name} has no calibration: block, so its rates are datasheet peaks and its times ideal, not "
            "comparable with calibrated descriptions (`gpusim calibrate` fits one from measurements)")


RATE_FACTORS = (("tensor_efficiency_fraction", "tensor-core"), ("vector_efficiency_fraction", "CUDA-core GEMM"),
                ("dram_bandwidth_fraction", "DRAM"))
"""The rate factors a calibration fits from measurements, and how a warning names each."""


def calibration_note(machine: "Machine") -> str | None:
    """The warning a run carries about rates its description's calibration does not fit: all of them
    (no ``calibration:`` block), or those its block leaves at the datasheet peak (a tensor-core rate
    only where the device has tensor cores). None when every one is fitted."""
    cal = machine.calibration
    if not cal.fitted:
        return uncalibrated_note(machine.name)
    missing = [label for name, label in RATE_FACTORS if name not in cal.given
               and (name != "tensor_efficiency_fraction" or machine.matrix_flop_per_cycle)]
    if not missing:
        return None
    named = missing[0] if len(missing) == 1 else f"{', '.join(missing[:-1])} or {missing[-1]}"
    return (f"{machine.name}'s calibration fits no {named} rate from measurements: "
            f"{'that runs' if len(missing) == 1 else 'those run'} at the datasheet peak (ideal), not comparable with "
            "fitted descriptions")


NATIVE_ONLY_MATRIX_DTYPES = frozenset({"fp8", "fp4"})
"""Matrix inputs that Hopper-class tensor cores take only through their native instructions."""


@dataclass(frozen=True)
class Machine:
    name: str
    kind: str  # "gpu" | "cpu"
    num_units: int
    unit_clock_hz: float
    matrix_clock_hz: float
    vector_flop_per_cycle: dict[str, float] = field(hash=False)
    matrix_flop_per_cycle: dict[str, float] = field(hash=False)
    matrix_fp32_acc_flop_per_cycle: dict[str, float] = field(hash=False)
    sparsity_speedup: float
    # occupancy limits per unit
    num_schedulers_per_unit: int
    sfu_ops_per_cycle: float
    warp_size: int
    max_threads_per_unit: int
    max_warps_per_unit: int
    max_ctas_per_unit: int
    max_threads_per_cta: int
    register_file_bytes: float
    max_registers_per_thread: int
    max_shared_bytes_per_unit: float
    max_shared_bytes_per_cta: float
    # memory hierarchy
    l1_bytes_per_cycle: float
    l1_capacity_bytes: float
    l1_latency_s: float
    shared_bytes_per_cycle: float
    l2_capacity_bytes: float
    l2_bandwidth_bytes_per_s: float
    l2_latency_s: float
    dram_capacity_bytes: float
    dram_bandwidth_bytes_per_s: float
    dram_latency_s: float
    llc_capacity_bytes: float | None
    llc_bandwidth_bytes_per_s: float | None
    host_link_bandwidth_bytes_per_s: float
    host_link_latency_s: float
    host_memory_bytes: float
    kernel_launch_s: float
    graph_kernel_launch_s: float
    calibration: Calibration
    max_cluster_size: int = 1
    dispatch_units_per_scheduler: int = 1
    """Warp instructions one scheduler issues per cycle (2: Pascal's dual issue)."""
    max_bytes_in_flight_per_unit: float | None = None
    """CPU cores: the miss-queue limit; GPUs: None (their limit comes from each CTA's plan)."""
    shared_latency_s: float = 0.0
    """Latency of a shared-memory load (GPUs; 0 for a CPU description, which has none)."""
    l2_set_associativity: int = DEFAULT_L2_SET_ASSOCIATIVITY
    llc_latency_s: float | None = None
    """Latency of the memory-side cache (None: the device has none)."""
    tlb_reach_bytes: float | None = None
    """Footprint the TLBs map (None: ``dram_latency_s`` already includes large-footprint page walks)."""
    page_walk_latency_s: float = 0.0
    l2_private_partitions: int = 1
    """L2 partitions that each cache only for their own SMs, CTAs dispatched round-robin across
    them (MI300X: 8, one per XCD); 1 = one L2 that every SM shares."""
    warp_mma_fraction: float = 1.0
    """Share of the matrix rates that warp-synchronous MMA reaches (see TensorCoreSpec)."""
    native_mma: bool = True
    """False when the kernels' libraries were built without this device's own tensor-core
    instructions (see :meth:`with_warp_mma_libraries`)."""
    native_mma_issuer: str = "warp"
    """Who issues one native matrix instruction: ``warp``, ``warpgroup`` or ``cta`` (see TensorCoreSpec)."""
    native_mma_stride_alignment_bytes: int | None = None
    """Stride multiple the native matrix path needs (see TensorCoreSpec); None: no requirement."""
    native_kernel_launch_s: float | None = None
    """Host cost of one launch from a compiled runtime (see LaunchSpec); None: not described."""
    fp8_promotion_in_series: bool = False
    """True when the libraries' split-accumulator FP8 GEMMs wait for their products before adding the
    partial sums into FP32 registers (see :meth:`with_in_series_fp8_promotion`); False: the adds
    overlap the next products."""

    def host_launch_s(self, launch_mode: str) -> float:
        """Host seconds between two kernel launches in ``launch_mode``: ``eager`` (a PyTorch eager op:
        Python, dispatcher and driver call), ``native`` (a compiled runtime calling the driver) or
        ``graph`` (a CUDA-graph replay: only the device-side gap)."""
        if launch_mode == "graph":
            return self.graph_kernel_launch_s
        if launch_mode == "native":
            if self.native_kernel_launch_s is None:
                raise SimulationError(f"{self.name}: {self.kind}.launch.native_kernel_launch_s is not set, so the native "
                                      "launch mode cannot be simulated on it")
            return self.native_kernel_launch_s
        return self.kernel_launch_s

    def with_in_series_fp8_promotion(self) -> "Machine":
        """The device as libraries whose split-accumulator FP8 GEMMs promote in series use it: the
        warps issuing the products wait for them, add the partial sums on the vector pipe, then issue
        the next ones. cuBLASLt did so into 2025 (pytorch/ao issue 2377, June 2025: fast accumulation
        made its FP8 products 1.1-1.2x faster on the H100), while CUDA 13.0's cuBLAS overlaps the adds
        (measurements/h200_sxm_141gb/library.csv: fast accumulation gains 2.0-2.5% at 8192x8192x2048
        and 8192^3)."""
        return replace(self, fp8_promotion_in_series=True)

    def with_warp_mma_libraries(self) -> "Machine":
        """The device as libraries built for an older architecture use it: every matrix kernel issues
        warp-synchronous MMA (``warp_mma_fraction`` of the matrix rate) and none uses thread-block
        clusters. On Hopper this is PyTorch 1.x with CUDA 11.x, whose cuBLAS has no ``wgmma`` kernels
        (``wgmma`` and clusters arrived with PTX ISA 8.0, CUDA 12.0). FP8 matrix kernels keep the native
        rate: a stack that runs FP8 on Hopper has those instructions."""
        return replace(self, native_mma=False, max_cluster_size=1)

    def persistent_matrix_kernels(self, dtype: str) -> bool:
        """Whether this device's libraries run their tensor-core kernels for ``dtype`` as persistent,
        warp-specialized kernels (see ``KernelPlan.persistent``): those built on its asynchronous
        native MMA, issued by a warpgroup (Hopper ``wgmma``) or a CTA (Blackwell ``tcgen05``), whose
        producer warps load through TMA while the math warps compute (CUTLASS 3.x sm90/sm100 kernels,
        cuBLAS sm90+). Warp-synchronous MMA libraries (Ampere and older, CDNA, legacy stacks on
        Hopper, except for FP8, which only the native instructions run) launch one CTA per tile."""
        native = self.native_mma or dtype in NATIVE_ONLY_MATRIX_DTYPES
        return self.kind == "gpu" and native and self.native_mma_issuer != "warp"

    def strides_block_native_mma(self, row_strides_bytes: tuple[int, ...]) -> bool:
        """True when a GEMM whose operands and output have these row strides cannot take the native
        matrix path (a stride that is not a multiple of ``native_mma_stride_alignment_bytes``)."""
        align = self.native_mma_stride_alignment_bytes
        return bool(align) and self.native_mma and any(s % align for s in row_strides_bytes)

    # ---- derived rates (calibrated) ------------------------------------------------------
    def matrix_rate_per_unit(self, dtype: str, fp32_accumulate: bool = True) -> float | None:
        """Sustained matrix-pipe FLOP/s of one unit (tensor cores / AMX) for ``dtype``."""
        table = self.matrix_fp32_acc_flop_per_cycle if fp32_accumulate else {}
        rate = table.get(dtype, self.matrix_flop_per_cycle.get(dtype))
        if rate is None:
            return None
        return rate * self.matrix_clock_hz * self.calibration.tensor_efficiency_fraction

    def vector_flop_per_cycle_of(self, dtype: str) -> float | None:
        """Vector-pipe FLOP per cycle of one unit for ``dtype``: its own rate, else (16-bit, TF32 and
        8-bit and narrower types the description gives no rate for) the FP32 lanes'."""
        rate = self.vector_flop_per_cycle.get(dtype)
        if rate is None and dtype in ("fp16", "bf16", "tf32", "fp8", "int8", "fp4"):
            rate = self.vector_flop_per_cycle.get("fp32")  # computed in FP32 lanes
        return rate

    def vector_rate_per_unit(self, dtype: str) -> float | None:
        rate = self.vector_flop_per_cycle_of(dtype)
        if rate is None:
            return None
        return rate * self.unit_clock_hz * self.calibration.vector_efficiency_fraction

    def issue_share(self, warps_on_unit: float) -> float:
        """Share of an SM's issue rate that ``warps_on_unit`` resident warps use: one warp per scheduler
        keeps every pipe issuing, fewer leave schedulers idle."""
        return min(1.0, warps_on_unit / self.num_schedulers_per_unit)

    def simt_gemm_rate_per_unit(self, dtype: str) -> float | None:
        """FLOP/s per SM of a CUDA-core (SIMT) GEMM: 16-bit inputs are multiplied and accumulated in
        FP32 (the compute type cuBLAS runs PyTorch's half and bfloat16 GEMMs with), so they run at the
        FP32 rate even where packed FP16 math is twice as fast (P100) or 64 times slower (GP104)."""
        return self.vector_rate_per_unit(self.simt_gemm_dtype(dtype))

    @staticmethod
    def simt_gemm_dtype(dtype: str) -> str:
        """The type a CUDA-core GEMM of ``dtype`` computes in (see :meth:`simt_gemm_rate_per_unit`)."""
        return "fp32" if dtype in ("fp16", "bf16") else dtype

    @property
    def dram_achievable_bytes_per_s(self) -> float:
        return self.dram_bandwidth_bytes_per_s * self.calibration.dram_bandwidth_fraction

    def dram_mix_cost(self, write_fraction):
        """DRAM capacity one byte uses when a ``write_fraction`` of the traffic is writes (scalar or
        array): 1 for one-direction traffic, 1 / (1 - loss) for an even mix (see
        ``Calibration.dram_mixed_traffic_loss_fraction``)."""
        mix = 2.0 * np.minimum(write_fraction, 1.0 - write_fraction)
        return 1.0 / (1.0 - self.calibration.dram_mixed_traffic_loss_fraction * mix)

    def random_access_dram_latency_s(self, footprint_bytes: float) -> float:
        """DRAM latency of one random access within ``footprint_bytes`` (a dependent-load chase): the
        TLB-hit latency plus the page walk of the share 1 - reach / footprint that misses the TLBs."""
        if self.tlb_reach_bytes is None or footprint_bytes <= self.tlb_reach_bytes:
            return self.dram_latency_s
        return self.dram_latency_s + self.page_walk_latency_s * (1.0 - self.tlb_reach_bytes / footprint_bytes)

    def loaded_dram_latency_s(self, utilization):
        """DRAM latency at ``utilization`` (0..1 of the achievable bandwidth; scalar or array):
        idle latency x (1 + calibrated ``dram_loaded_latency_slope`` x utilization)."""
        return self.dram_latency_s * (1.0 + self.calibration.dram_loaded_latency_slope * utilization)

    def cyclic_l2_hit_fraction(self, working_set_bytes: float) -> float:
        """Share of a cyclic sweep over ``working_set_bytes`` that hits in L2. Hashed set indexing
        spreads the lines over the sets like balls over bins: a set receives Poisson(x * ways) lines,
        x = working set / capacity. Under LRU a cyclic sweep hits every line of a set that holds them
        all and misses every line of a set that overflows, so the hit share is the size-biased chance
        that a line's set gets at most ``ways`` lines: P(Poisson(x * ways) <= ways - 1). It falls
        smoothly from 1 to 0 around the capacity instead of stepping at it."""
        if working_set_bytes <= 0:
            return 1.0
        ways = self.l2_set_associativity
        lam = working_set_bytes / self.l2_capacity_bytes * ways
        term = math.exp(-lam)
        total = term
        for i in range(1, ways):
            term *= lam / i
            total += term
        return min(1.0, total)

    @property
    def l2_achievable_bytes_per_s(self) -> float:
        return self.l2_bandwidth_bytes_per_s * self.calibration.l2_bandwidth_fraction

    @property
    def llc_achievable_bytes_per_s(self) -> float:
        """The memory-side cache at the L2's calibrated share of its peak (it is SRAM like the L2)."""
        return (self.llc_bandwidth_bytes_per_s or 0.0) * self.calibration.l2_bandwidth_fraction

    @property
    def l1_bytes_per_s_per_unit(self) -> float:
        return self.l1_bytes_per_cycle * self.unit_clock_hz

    @property
    def shared_bytes_per_s_per_unit(self) -> float:
        """Shared-memory bandwidth of one SM at the sustained tensor efficiency (the calibrated
        factor is mostly the sustained clock, which the SRAM runs at too)."""
        return self.shared_bytes_per_cycle * self.unit_clock_hz * self.calibration.tensor_efficiency_fraction

    @property
    def host_link_achievable_bytes_per_s(self) -> float:
        return self.host_link_bandwidth_bytes_per_s * self.calibration.host_link_fraction


def _calibration(spec) -> Calibration:
    if spec is None:
        return Calibration()
    values = {k: v for k, v in spec.model_dump().items() if v is not None}
    return Calibration(**values, given=frozenset(values))


def _rates(rates) -> dict[str, float]:
    if rates is None:
        return {}
    return {d: v for d, v in rates.model_dump().items() if v is not None}


SMALLEST_SHARED_CARVEOUT_BYTES = 8 * 1024
"""The L1 data cache gets the unified pool minus the shared-memory carve-out; the smallest non-zero
carve-out is 8 KB on compute capability 7.x-9.x (CUDA C Programming Guide, shared-memory carve-out
sizes), and every CTA holds at least 1 KB of shared memory reserved for the system (cc 8.0+). A fixed
carve-out (AMD's separate LDS) leaves the L1 the rest of the pool."""


def machine_from_gpu(name: str, gpu: Gpu) -> Machine:
    tc = gpu.tensor_core
    return Machine(
        name=name,
        kind="gpu",
        num_units=gpu.num_sms,
        unit_clock_hz=gpu.clocks.sm_clock_hz,
        matrix_clock_hz=gpu.clocks.matrix_clock_hz,
        vector_flop_per_cycle=_rates(gpu.sm.vector_flop_per_cycle),
        matrix_flop_per_cycle=_rates(tc.dense_flop_per_cycle_per_sm) if tc else {},
        matrix_fp32_acc_flop_per_cycle=_rates(tc.fp32_accumulate_flop_per_cycle_per_sm) if tc else {},
        sparsity_speedup=tc.sparsity_speedup if tc else 1.0,
        num_schedulers_per_unit=gpu.sm.num_warp_schedulers,
        sfu_ops_per_cycle=float(gpu.sm.num_sfus),
        warp_size=gpu.sm.warp_size,
        max_threads_per_unit=gpu.sm.max_threads,
        max_warps_per_unit=gpu.sm.max_warps,
        max_ctas_per_unit=gpu.sm.max_ctas,
        max_threads_per_cta=gpu.sm.max_threads_per_cta,
        register_file_bytes=gpu.sm.register_file_bytes,
        max_registers_per_thread=gpu.sm.max_registers_per_thread,
        max_shared_bytes_per_unit=gpu.sm.shared_carveout_bytes or gpu.sm.max_shared_bytes,
        max_shared_bytes_per_cta=min(gpu.sm.max_shared_bytes_per_cta, gpu.sm.shared_carveout_bytes or 1e30),
        l1_bytes_per_cycle=gpu.l1.bandwidth_bytes_per_cycle_per_sm,
        l1_capacity_bytes=gpu.sm.l1_shared_pool_bytes - (gpu.sm.shared_carveout_bytes
                                                         or min(SMALLEST_SHARED_CARVEOUT_BYTES, gpu.sm.max_shared_bytes)),
        l1_latency_s=gpu.l1.latency_s,
        shared_latency_s=gpu.l1.shared_latency_s,
        shared_bytes_per_cycle=gpu.l1.shared_bandwidth_bytes_per_cycle_per_sm or gpu.l1.bandwidth_bytes_per_cycle_per_sm,
        l2_capacity_bytes=gpu.l2.capacity_bytes,
        l2_private_partitions=gpu.l2.num_partitions if gpu.l2.partitions_are_private else 1,
        l2_bandwidth_bytes_per_s=gpu.l2.bandwidth_bytes_per_s,
        l2_latency_s=(gpu.l2.near_latency_s + gpu.l2.far_latency_s) / 2,
        dram_capacity_bytes=gpu.dram.capacity_bytes,
        dram_bandwidth_bytes_per_s=gpu.dram.bandwidth_bytes_per_s,
        dram_latency_s=gpu.dram.latency_s,
        tlb_reach_bytes=gpu.dram.tlb_reach_bytes,
        page_walk_latency_s=gpu.dram.page_walk_latency_s or 0.0,
        llc_capacity_bytes=gpu.llc.capacity_bytes if gpu.llc else None,
        llc_bandwidth_bytes_per_s=gpu.llc.bandwidth_bytes_per_s if gpu.llc else None,
        llc_latency_s=gpu.llc.latency_s if gpu.llc else None,
        host_link_bandwidth_bytes_per_s=gpu.host_link.bandwidth_bytes_per_s,
        host_link_latency_s=gpu.host_link.latency_s,
        host_memory_bytes=gpu.host_link.host_memory_bytes,
        kernel_launch_s=gpu.launch.kernel_launch_s,
        graph_kernel_launch_s=gpu.launch.graph_kernel_launch_s,
        native_kernel_launch_s=gpu.launch.native_kernel_launch_s,
        calibration=_calibration(gpu.calibration),
        max_cluster_size=gpu.sm.max_cluster_size or 1,
        dispatch_units_per_scheduler=gpu.sm.dispatch_units_per_scheduler,
        l2_set_associativity=gpu.l2.set_associativity,
        warp_mma_fraction=tc.warp_mma_fraction if tc else 1.0,
        native_mma_stride_alignment_bytes=tc.native_mma_stride_alignment_bytes if tc else None,
        native_mma_issuer=tc.native_mma_issuer if tc else "warp",
    )


def machine_from_cpu(name: str, cpu: Cpu) -> Machine:
    core = cpu.core
    # One "CTA" per core: a task of SIMD work; hardware threads play the role of warps.
    threads = core.num_threads * (core.simd_width_bits // 32)
    return Machine(
        name=name,
        kind="cpu",
        num_units=cpu.num_cores,
        unit_clock_hz=cpu.clocks.core_clock_hz,
        matrix_clock_hz=cpu.clocks.core_clock_hz,
        vector_flop_per_cycle=_rates(core.vector_flop_per_cycle),
        matrix_flop_per_cycle=_rates(core.matrix_flop_per_cycle),
        matrix_fp32_acc_flop_per_cycle={},
        sparsity_speedup=1.0,
        num_schedulers_per_unit=1,
        # vectorized exp (polynomial) on SIMD lanes: about one result per lane every 8 cycles
        sfu_ops_per_cycle=core.num_fma_units * (core.simd_width_bits / 32) / 8,
        warp_size=core.simd_width_bits // 32,
        max_threads_per_unit=threads,
        max_warps_per_unit=core.num_threads,
        max_ctas_per_unit=1,
        max_threads_per_cta=threads,
        register_file_bytes=1e30,
        max_registers_per_thread=1 << 12,
        max_shared_bytes_per_unit=cpu.l2.capacity_bytes,
        max_shared_bytes_per_cta=cpu.l2.capacity_bytes,
        l1_bytes_per_cycle=cpu.l1.bandwidth_bytes_per_cycle_per_core,
        l1_capacity_bytes=cpu.l1.capacity_bytes,
        l1_latency_s=cpu.l1.latency_s,
        shared_bytes_per_cycle=cpu.l1.bandwidth_bytes_per_cycle_per_core,
        l2_capacity_bytes=cpu.llc.capacity_bytes,
        l2_bandwidth_bytes_per_s=cpu.llc.bandwidth_bytes_per_s,
        l2_latency_s=cpu.llc.latency_s,
        dram_capacity_bytes=cpu.dram.capacity_bytes,
        dram_bandwidth_bytes_per_s=cpu.dram.bandwidth_bytes_per_s,
        dram_latency_s=cpu.dram.latency_s,
        llc_capacity_bytes=None,
        llc_bandwidth_bytes_per_s=None,
        host_link_bandwidth_bytes_per_s=cpu.dram.bandwidth_bytes_per_s,
        host_link_latency_s=cpu.dram.latency_s,
        host_memory_bytes=cpu.dram.capacity_bytes,
        kernel_launch_s=cpu.launch.kernel_launch_s,
        graph_kernel_launch_s=cpu.launch.graph_kernel_launch_s,
        native_kernel_launch_s=cpu.launch.native_kernel_launch_s,
        calibration=_calibration(cpu.calibration),
        max_bytes_in_flight_per_unit=core.max_bytes_in_flight,
    )


def machine_of(desc) -> Machine:
    """The Machine a hardware description simulates (a system's GPU)."""
    if desc.kind == "cpu":
        return machine_from_cpu(desc.name, desc.cpu)
    if desc.kind in ("gpu", "system"):
        return machine_from_gpu(desc.name, desc.gpu)
    raise SimulationError(f"cannot simulate hardware of kind {desc.kind!r}")
