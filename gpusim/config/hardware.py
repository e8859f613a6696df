"""Frozen, validated hardware descriptions (schema_version 1): GPUs, CPUs and multi-GPU systems.

All quantities are SI inside (bytes, seconds, hertz, watts, joules). YAML may write them with units;
see :mod:`gpusim.units`. Field names carry their unit. Cross-field rules raise errors that name the
offending key. The YAML layout mirrors these classes one to one:

* a GPU file: ``schema_version, kind: gpu, name, description, gpu: {...}, sources: {...}``
* a CPU file: ``... kind: cpu, cpu: {...}``
* a system file: ``... kind: system, gpu: <GPU name or mapping>, num_gpus_per_node, intra_node,
  host_cpu, num_cpus_per_node, inter_node, num_nodes``
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import model_validator

from gpusim.config.types import (
    Bytes,
    BytesPerS,
    FlopPerCycle,
    Fraction,
    Hz,
    JoulesPerByte,
    JoulesPerFlop,
    Seconds,
    SecondsOrZero,
    Spec,
    UsdPerS,
    Watts,
    count,
    field_error,
    number,
)

DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4")
"""Every numeric format gpusim knows, widest first."""

DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "fp4": 0.5}
"""Storage bytes per element (TF32 is stored as FP32; FP4 packs two per byte)."""

class DtypeRates(Spec):
    """FLOP per cycle for each data type a unit supports; an absent dtype is unsupported."""

    fp64: Optional[FlopPerCycle] = None
    fp32: Optional[FlopPerCycle] = None
    tf32: Optional[FlopPerCycle] = None
    fp16: Optional[FlopPerCycle] = None
    bf16: Optional[FlopPerCycle] = None
    fp8: Optional[FlopPerCycle] = None
    int8: Optional[FlopPerCycle] = None
    fp4: Optional[FlopPerCycle] = None

    def get(self, dtype: str) -> float | None:
        return getattr(self, dtype)

    def supported(self) -> tuple[str, ...]:
        return tuple(d for d in DTYPES if getattr(self, d) is not None)


class DtypeEnergies(Spec):
    """Energy per FLOP for each data type on a pipe (estimates; cite them)."""

    fp64: Optional[JoulesPerFlop] = None
    fp32: Optional[JoulesPerFlop] = None
    tf32: Optional[JoulesPerFlop] = None
    fp16: Optional[JoulesPerFlop] = None
    bf16: Optional[JoulesPerFlop] = None
    fp8: Optional[JoulesPerFlop] = None
    int8: Optional[JoulesPerFlop] = None
    fp4: Optional[JoulesPerFlop] = None

    def get(self, dtype: str) -> float | None:
        return getattr(self, dtype)


# --------------------------------------------------------------------------------------- GPU


class GpuClocks(Spec):
    sm_clock_hz: Hz
    """Maximum (boost) SM clock; CUDA-core (vector) peaks are rated at it."""
    tensor_clock_hz: Hz
    """Clock at which the vendor rates tensor-core peaks (H100 SXM: 1.83 GHz vs 1.98 GHz SM)."""
    sustained_tensor_clock_hz: Optional[Hz] = None
    """Where it was measured: the (median) clock a dense tensor-core GEMM holds at the board's power
    limit (AMD's MI300X: 1.207 GHz of 2.1 GHz). The matrix pipes run at it, so the calibrated
    ``tensor_efficiency_fraction`` is the software's share of that clock's peak and carries over to
    a part with the same dies and a higher power limit. Unset: ``tensor_clock_hz``, and the power
    limit's clock drop is part of the fitted tensor efficiency. The datasheet peak (roofline) stays
    at ``tensor_clock_hz``."""

    @model_validator(mode="after")
    def _tensor_not_above_sm(self) -> "GpuClocks":
        if self.tensor_clock_hz > self.sm_clock_hz * (1 + 1e-9):
            raise field_error("tensor_clock_hz", f"tensor clock ({self.tensor_clock_hz / 1e9:.4g} GHz) is above the "
                              f"maximum SM clock sm_clock_hz ({self.sm_clock_hz / 1e9:.4g} GHz)")
        sustained = self.sustained_tensor_clock_hz
        if sustained is not None and sustained > self.tensor_clock_hz * (1 + 1e-9):
            raise field_error("sustained_tensor_clock_hz", f"sustained tensor clock ({sustained / 1e9:.4g} GHz) is "
                              f"above the rated tensor_clock_hz ({self.tensor_clock_hz / 1e9:.4g} GHz)")
        return self

    @property
    def matrix_clock_hz(self) -> float:
        """The clock the matrix pipes run at in the simulation."""
        return self.sustained_tensor_clock_hz or self.tensor_clock_hz


class SmSpec(Spec):
    """One streaming multiprocessor (NVIDIA) or compute unit (AMD)."""

    warp_size: count(le=128)
    num_warp_schedulers: count(le=64)
    dispatch_units_per_scheduler: count(le=4) = 1
    """Warp instructions a scheduler can issue per cycle: 2 on Maxwell and Pascal, whose schedulers
    pair an instruction with an independent one of the same warp; 1 from Volta on."""
    max_threads: count(le=1 << 16)
    max_warps: count(le=1 << 12)
    max_ctas: count(le=1 << 10)
    max_threads_per_cta: count(le=1 << 14)
    register_file_bytes: Bytes
    max_registers_per_thread: count(le=1 << 12)
    l1_shared_pool_bytes: Bytes
    """Unified L1 data cache + shared memory array per SM."""
    max_shared_bytes: Bytes
    """Largest shared-memory carve-out of that pool per SM."""
    max_shared_bytes_per_cta: Bytes
    max_cluster_size: Optional[count(le=64)] = None
    """Largest thread-block cluster whose CTAs share loads by multicast (Hopper: 8 portable); absent
    means the architecture has no clusters."""
    shared_carveout_bytes: Optional[Bytes] = None
    """A fixed shared-memory carve-out; absent means chosen per kernel as the CUDA driver does."""
    num_fp32_lanes: count(ge=0, le=1 << 14)
    num_fp64_lanes: count(ge=0, le=1 << 14)
    num_int32_lanes: count(ge=0, le=1 << 14)
    num_sfus: count(ge=0, le=1 << 12)
    vector_flop_per_cycle: DtypeRates
    """FLOP per cycle per SM on the CUDA-core / SIMD pipes (an FMA is 2 FLOP)."""

    @model_validator(mode="after")
    def _consistent(self) -> "SmSpec":
        if self.max_shared_bytes > self.l1_shared_pool_bytes:
            raise field_error("max_shared_bytes", f"shared memory ({self.max_shared_bytes:.0f} B) is larger than the "
                              f"L1/shared pool l1_shared_pool_bytes ({self.l1_shared_pool_bytes:.0f} B)")
        if self.max_shared_bytes_per_cta > self.max_shared_bytes:
            raise field_error("max_shared_bytes_per_cta", "per-CTA shared memory is larger than max_shared_bytes")
        if self.shared_carveout_bytes is not None and self.shared_carveout_bytes > self.max_shared_bytes:
            raise field_error("shared_carveout_bytes", "carve-out is larger than max_shared_bytes")
        if self.max_threads > self.max_warps * self.warp_size:
            raise field_error("max_threads", f"{self.max_threads} threads do not fit in max_warps "
                              f"({self.max_warps}) x warp_size ({self.warp_size})")
        if self.max_threads_per_cta > self.max_threads:
            raise field_error("max_threads_per_cta", "larger than max_threads per SM")
        if self.vector_flop_per_cycle.fp32 is None:
            raise field_error("vector_flop_per_cycle", "fp32 rate is required (every GPU has FP32 lanes)")
        return self


class TensorCoreSpec(Spec):
    num_per_sm: count(ge=1, le=64)
    dense_flop_per_cycle_per_sm: DtypeRates
    """Best dense rate per dtype (with the faster accumulator where the product offers two)."""
    fp32_accumulate_flop_per_cycle_per_sm: Optional[DtypeRates] = None
    """Rates with FP32 accumulation, only for dtypes where it is slower (GeForce halves FP16)."""
    sparsity_speedup: number(ge=1.0, le=16.0)
    """Throughput factor of 2:4 structured sparsity (1 where unsupported)."""
    warp_mma_fraction: Fraction = 1.0
    """Share of the dense rates that warp-synchronous MMA instructions (``mma.sync``) reach. 1 where
    they are the architecture's native tensor-core instructions; below 1 where the full rate needs
    warpgroup-level asynchronous MMA (Hopper ``wgmma``), so kernels written for the older instructions
    (FlashAttention-2) run slower than the library GEMMs."""
    native_mma_issuer: Literal["warp", "warpgroup", "cta"] = "warp"
    """Who issues one native matrix instruction, and so reads its A rows and B columns from shared
    memory: each warp (``mma.sync``, AMD MFMA), each warpgroup of 4 warps (Hopper ``wgmma``), or the
    CTA as a whole (Blackwell ``tcgen05.mma``, issued by one thread, whose 2-SM form splits B between
    the two CTAs of a cluster pair). It sets the shared-memory traffic that feeds the tensor cores."""
    native_mma_stride_alignment_bytes: Optional[count(ge=1, le=4096)] = None
    """Row strides (bytes) a GEMM's operands and output must be multiples of for the native matrix
    path. Hopper's ``wgmma`` kernels are fed by the Tensor Memory Accelerator, whose descriptors take
    only 16-byte-multiple strides; a GEMM with another stride (an odd vocabulary, ``d_ff = 8/3 h``)
    runs kernels that load their own operands and issue warp-synchronous MMA, at
    ``warp_mma_fraction`` of the rate. Omitted: no stride requirement is modelled."""

    @model_validator(mode="after")
    def _accumulate_not_faster(self) -> "TensorCoreSpec":
        if self.fp32_accumulate_flop_per_cycle_per_sm is not None:
            for d in self.fp32_accumulate_flop_per_cycle_per_sm.supported():
                dense = self.dense_flop_per_cycle_per_sm.get(d)
                if dense is None:
                    raise field_error("fp32_accumulate_flop_per_cycle_per_sm",
                                      f"{d} has an FP32-accumulate rate but no dense rate")
                if self.fp32_accumulate_flop_per_cycle_per_sm.get(d) > dense:
                    raise field_error("fp32_accumulate_flop_per_cycle_per_sm",
                                      f"{d} FP32-accumulate rate is above its dense rate")
        return self


class GpuL1Spec(Spec):
    bandwidth_bytes_per_cycle_per_sm: number(gt=0.0, le=1e5)
    latency_s: Seconds
    shared_latency_s: Seconds
    shared_bandwidth_bytes_per_cycle_per_sm: Optional[number(gt=0.0, le=1e5)] = None
    """Shared-memory (LDS) bandwidth where it is a separate array with its own port width (AMD CDNA);
    omitted, the L1 bandwidth (NVIDIA's L1 and shared memory are one SRAM). It feeds the tensor
    cores the staged GEMM tiles, which caps the math of small tiles."""


DEFAULT_L2_SET_ASSOCIATIVITY = 16
"""Ways per L2 set when a description does not say: GPU vendors do not publish it; the Accel-Sim
tested configurations model NVIDIA L2 slices as 16-way (Pascal, Ada) to 24-way (Volta) sets with
hashed (IPOLY) indexing, and 16 ways reproduce the gpu-benches L2 bandwidth fall-off of A100 and
H100 PCIe between 0.8x and 1.15x of capacity (measurements/published/kernels.csv)."""


class GpuL2Spec(Spec):
    capacity_bytes: Bytes
    num_partitions: count(le=64)
    bandwidth_bytes_per_s: BytesPerS
    near_latency_s: Seconds
    far_latency_s: Seconds
    set_associativity: count(le=1024) = DEFAULT_L2_SET_ASSOCIATIVITY
    """Ways per set; with hashed set indexing it decides how soon a working set near the capacity
    starts to miss (see gpusim.engine.machine.Machine.cyclic_l2_hit_fraction)."""
    partitions_are_private: bool = False
    """True when each partition caches only for its own SMs (MI300X: one 4 MB L2 per XCD) and the
    hardware dispatches CTAs round-robin across the partitions, so CTAs that share a tile share it
    in L2 only when they land on the same partition. False: one L2 whose partitions every SM reaches
    (NVIDIA's near and far halves)."""

    @model_validator(mode="after")
    def _far_not_nearer(self) -> "GpuL2Spec":
        if self.far_latency_s < self.near_latency_s:
            raise field_error("far_latency_s", "far-partition latency is below near_latency_s")
        return self


class LastLevelCacheSpec(Spec):
    """A memory-side cache between L2 and DRAM (MI300X Infinity Cache). On a GPU the engine sends it
    the GEMM panel reads that miss L2 after this kernel already read them (with private L2
    partitions: one XCD re-reading what another fetched); first reads, writes, split-K partials and
    non-GEMM kernels go to DRAM, and nothing stays in it from one kernel to the next. On a CPU it is
    the shared last-level cache the engine uses as its L2."""

    capacity_bytes: Bytes
    bandwidth_bytes_per_s: BytesPerS
    latency_s: Seconds


DramType = Literal["HBM2", "HBM2e", "HBM3", "HBM3e", "HBM4", "HBM4e", "GDDR5", "GDDR6", "GDDR6X", "GDDR7", "LPDDR5",
                   "LPDDR5X", "LPDDR6", "DDR4", "DDR5", "DDR6"]
"""A label (reports name it): the model reads the memory's capacity, bandwidth and latency, not its type."""


class DramSpec(Spec):
    type: DramType
    capacity_bytes: Bytes
    bandwidth_bytes_per_s: BytesPerS
    latency_s: Seconds
    """Load-to-use latency of a DRAM access: a dependent-load chase over a footprint past the caches
    (with its address translation in the TLBs where ``tlb_reach_bytes`` is given)."""
    bus_width_bits: Optional[count(le=1 << 16)] = None
    num_channels: Optional[count(le=1024)] = None
    tlb_reach_bytes: Optional[Bytes] = None
    """Footprint the TLBs map without a page walk. A random access over a larger footprint misses
    them with probability 1 - reach / footprint and waits ``page_walk_latency_s`` more; streaming
    access touches each page many times in a row and pays ``latency_s``. Absent: ``latency_s`` is
    read at a large footprint and includes whatever page walks it causes."""
    page_walk_latency_s: Optional[Seconds] = None
    """Extra latency of a DRAM access whose translation misses the TLBs (needs ``tlb_reach_bytes``)."""

    @model_validator(mode="after")
    def _tlb_fields_together(self) -> "DramSpec":
        if (self.tlb_reach_bytes is None) != (self.page_walk_latency_s is None):
            raise field_error("page_walk_latency_s" if self.page_walk_latency_s is None else "tlb_reach_bytes",
                              "tlb_reach_bytes and page_walk_latency_s are given together or not at all")
        return self


class HostLinkSpec(Spec):
    """The link to the host CPU and its memory (unified-memory paging goes over it)."""

    type: Literal["pcie", "nvlink_c2c", "on_chip"]
    generation: Optional[count(le=10)] = None
    num_lanes: Optional[count(le=64)] = None
    bandwidth_bytes_per_s: BytesPerS
    """Per direction; the link is full duplex."""
    latency_s: Seconds
    host_memory_bytes: Bytes
    """Host RAM available for unified-memory paging."""

    @model_validator(mode="after")
    def _pcie_has_lanes(self) -> "HostLinkSpec":
        if self.type == "pcie" and (self.generation is None or self.num_lanes is None):
            raise field_error("generation" if self.generation is None else "num_lanes",
                              "a PCIe host link needs generation and num_lanes")
        return self


class PeerLinkSpec(Spec):
    type: Literal["nvlink", "infinity_fabric", "pcie"]
    generation: count(le=10)
    num_links: count(le=256)
    link_bandwidth_bytes_per_s: BytesPerS
    """Per link, per direction."""
    latency_s: Seconds


class EnergySpec(Spec):
    tensor_j_per_flop: DtypeEnergies
    vector_j_per_flop: DtypeEnergies
    l1_j_per_byte: JoulesPerByte
    l2_j_per_byte: JoulesPerByte
    dram_j_per_byte: JoulesPerByte
    peer_link_j_per_byte: JoulesPerByte
    host_link_j_per_byte: JoulesPerByte


class PowerSpec(Spec):
    tdp_w: Watts
    idle_w: Watts
    energy: EnergySpec

    @model_validator(mode="after")
    def _idle_below_tdp(self) -> "PowerSpec":
        if self.idle_w >= self.tdp_w:
            raise field_error("idle_w", "idle power is not below tdp_w")
        return self


LAUNCH_MODES = ("eager", "native", "graph")
"""How the host issues kernels: PyTorch eager ops (``kernel_launch_s`` each), a compiled runtime calling
the driver (``native_kernel_launch_s``), or a CUDA-graph replay (``graph_kernel_launch_s``)."""


class LaunchSpec(Spec):
    kernel_launch_s: Seconds
    """Host-side cost of one eager kernel launch (launches back to back are spaced by it)."""
    graph_kernel_launch_s: Seconds
    """Per-kernel gap when kernels are replayed from a CUDA graph."""
    native_kernel_launch_s: Optional[Seconds] = None
    """Host-side cost of one kernel launch from a compiled runtime (TensorRT-LLM, LMDeploy's TurboMind:
    C++ that calls the driver's launch directly, with no Python or framework dispatcher in between).
    Unset: the ``native`` launch mode is refused for this description."""

    @model_validator(mode="after")
    def _graph_cheaper(self) -> "LaunchSpec":
        if self.graph_kernel_launch_s > self.kernel_launch_s:
            raise field_error("graph_kernel_launch_s", "graph launches cost more than eager kernel_launch_s")
        native = self.native_kernel_launch_s
        if native is not None and native > self.kernel_launch_s:
            raise field_error("native_kernel_launch_s", "native launches cost more than eager kernel_launch_s")
        if native is not None and native < self.graph_kernel_launch_s:
            raise field_error("native_kernel_launch_s", "native launches cost less than graph_kernel_launch_s")
        return self


class CalibrationSpec(Spec):
    """Factors fitted to measurements. Nothing here is a physical parameter; ``source`` says what data."""

    source: str
    dram_bandwidth_fraction: Optional[Fraction] = None
    """Share of peak DRAM bandwidth a streaming kernel reaches at full occupancy."""
    l2_bandwidth_fraction: Optional[Fraction] = None
    tensor_efficiency_fraction: Optional[Fraction] = None
    """Share of the tensor-core peak the best library GEMM main loop sustains."""
    vector_efficiency_fraction: Optional[Fraction] = None
    host_link_fraction: Optional[Fraction] = None
    gemm_wave_overhead_s: Optional[SecondsOrZero] = None
    """Fixed seconds each wave of a GEMM-like kernel spends beyond its pipeline fill, math and epilogue
    drain (CTA dispatch and set-up, the first tile's ramp, the last stores' completion; a persistent
    kernel pays it once), fitted to GEMMs too small for their math to hide it; unset = 0."""
    host_copy_overhead_s: Optional[SecondsOrZero] = None
    """Fixed host-side cost of one synchronous host<->device copy beyond the eager launch cost (driver
    call, DMA setup, completion and the host's wake-up), fitted to copies of several sizes; unset = 0."""
    peer_link_fraction: Optional[Fraction] = None
    in_switch_reduction_fraction: Optional[Fraction] = None
    """Share of the (peer-calibrated) NVLink port rate an in-switch-reduction (NVLS) all-reduce reaches
    besides the round trips of its loops, which the plan charges; unset = 1 (no built-in sets it)."""
    dram_loaded_latency_slope: Optional[number(ge=0.0, le=10.0)] = None
    """DRAM latency under load = idle latency x (1 + slope x DRAM utilization), as bandwidth-sweep
    measurements at partial occupancy show (queueing in the memory controllers); unset = 0."""
    dram_mixed_traffic_loss_fraction: Optional[number(ge=0.0, le=0.9)] = None
    """Share of the achievable DRAM bandwidth lost when reads and writes are evenly mixed (bus
    turnarounds), as stream kernels that read and write show against those that only read or only
    write; traffic with write share w loses it x 2 min(w, 1 - w); unset = 0."""
    cta_turnaround_cycles: Optional[number(ge=0.0, le=1e5)] = None
    """Fixed lifetime of a streaming kernel's CTA besides its memory round trips (launch, issue,
    retirement) in SM clock cycles, as a store-only stream at low occupancy shows; unset = 0."""
    sustained_clock_fraction: Optional[Fraction] = None
    """Core clock a power-limited card holds under sustained GEMM load, as a share of its rated clock;
    the efficiency fractions above describe that sustained state. Fitted (with ``boost_window_s``) for
    descriptions that name it, to back-to-back loops of several lengths run from rest; unset = 1."""
    boost_window_s: Optional[SecondsOrZero] = None
    """Busy time a power-limited card, starting from rest, runs at its rated clock before its power
    controller brings it down to ``sustained_clock_fraction`` of it; unset = 0. Both apply where a
    measured loop counts its calls (``gpusim accuracy``); workload simulations run at the sustained
    clock throughout."""
    dynamic_energy_factor: Optional[number(gt=0.0, le=10.0)] = None
    """Multiplier on every per-FLOP and per-byte energy of ``power.energy`` (the estimates), fitted so a
    large dense GEMM draws the board's TDP, as power-limited GPUs do under sustained tensor load."""
    fp8_tensor_energy_factor: Optional[number(gt=0.0, le=10.0)] = None
    """Multiplier on ``power.energy.tensor_j_per_flop.fp8`` (an estimate, half the 16-bit energy),
    fitted so FP8 GEMMs timed after a sustained warm-up run at the clock the power cap sets: the
    measured throughput of a power-limited chip's FP8 GEMMs says what an FP8 FLOP costs against a
    16-bit one, which ``dynamic_energy_factor`` pins at TDP; unset = 1."""


class Gpu(Spec):
    vendor: str
    architecture: str
    num_sms: count(le=100_000)
    clocks: GpuClocks
    sm: SmSpec
    tensor_core: Optional[TensorCoreSpec] = None
    l1: GpuL1Spec
    l2: GpuL2Spec
    llc: Optional[LastLevelCacheSpec] = None
    dram: DramSpec
    host_link: HostLinkSpec
    peer_links: Optional[PeerLinkSpec] = None
    power: PowerSpec
    launch: LaunchSpec
    price_usd_per_s: Optional[UsdPerS] = None
    calibration: Optional[CalibrationSpec] = None

    @model_validator(mode="after")
    def _cache_sizes(self) -> "Gpu":
        if self.llc is not None and self.llc.capacity_bytes <= self.l2.capacity_bytes:
            raise field_error("llc", "last-level cache is not larger than L2")
        if self.l2.capacity_bytes >= self.dram.capacity_bytes:
            raise field_error("l2", "L2 capacity is not below DRAM capacity")
        return self


# --------------------------------------------------------------------------------------- CPU


class CpuClocks(Spec):
    core_clock_hz: Hz
    """All-core clock under vector load (the rate peaks are computed at)."""
    max_clock_hz: Hz
    """Single-core maximum turbo clock."""

    @model_validator(mode="after")
    def _order(self) -> "CpuClocks":
        if self.core_clock_hz > self.max_clock_hz * (1 + 1e-9):
            raise field_error("core_clock_hz", "all-core clock is above max_clock_hz")
        return self


class CpuCoreSpec(Spec):
    num_threads: count(le=16)
    """Hardware threads per core (SMT)."""
    simd_width_bits: count(le=4096)
    num_fma_units: count(le=16)
    vector_flop_per_cycle: DtypeRates
    """FLOP per cycle per core on the SIMD units (an FMA is 2 FLOP)."""
    matrix_flop_per_cycle: Optional[DtypeRates] = None
    """FLOP per cycle per core on a matrix unit (Intel AMX), per dtype."""
    max_bytes_in_flight: Optional[Bytes] = None
    """Outstanding memory bytes one core sustains (L2 miss queue entries x 64-byte lines); the
    engine needs it to apply Little's law to a CPU."""

    @model_validator(mode="after")
    def _fp32_matches_simd(self) -> "CpuCoreSpec":
        fp32 = self.vector_flop_per_cycle.fp32
        if fp32 is None:
            raise field_error("vector_flop_per_cycle", "fp32 rate is required")
        expected = self.num_fma_units * self.simd_width_bits / 32 * 2
        if abs(fp32 - expected) > 1e-9 * expected:
            raise field_error("vector_flop_per_cycle", f"fp32 rate {fp32:g} does not match num_fma_units x "
                              f"simd_width_bits / 32 x 2 = {expected:g}")
        return self


class CpuCacheSpec(Spec):
    capacity_bytes: Bytes
    """Per core."""
    bandwidth_bytes_per_cycle_per_core: number(gt=0.0, le=1e5)
    latency_s: Seconds


class Cpu(Spec):
    vendor: str
    architecture: str
    num_cores: count(le=100_000)
    clocks: CpuClocks
    core: CpuCoreSpec
    l1: CpuCacheSpec
    l2: CpuCacheSpec
    llc: LastLevelCacheSpec
    dram: DramSpec
    power: PowerSpec
    launch: LaunchSpec
    price_usd_per_s: Optional[UsdPerS] = None
    calibration: Optional[CalibrationSpec] = None

    @model_validator(mode="after")
    def _channels(self) -> "Cpu":
        if self.dram.num_channels is None:
            raise field_error("dram", "a CPU description needs dram.num_channels")
        return self


# --------------------------------------------------------------------------------------- system


class IntraNodeSpec(Spec):
    topology: Literal["nvswitch", "full_mesh", "ring", "pcie_switch"]
    in_switch_reduction: bool
    """NVLink SHARP (NVLS): the switch reduces, so all-reduce moves each byte once each way."""
    switch_latency_s: SecondsOrZero
    collective_channels: Optional[count(le=1024)] = None
    """CTAs a collective kernel runs on this system (the communication library's channels, NCCL's
    'N coll channels'), each holding an SM while it runs: a collective overlapped with compute takes
    these SMs from it. Omitted: overlapped collectives cost the compute nothing."""
    nvls_channels: count(le=1024) = 16
    """Channels an in-switch (NVLS) all-reduce runs on (NCCL's ``NVLS_NCHANNELS``, which its init log
    prints; 16 on Hopper NVSwitch systems). With the GPU count and the message size they set NCCL's
    chunk and so how many loops the all-reduce takes, each paying a switch round trip."""


class InterNodeSpec(Spec):
    type: Literal["infiniband", "roce", "ethernet"]
    topology: Literal["fat_tree", "rail_optimized"]
    num_nics_per_node: count(le=64)
    nic_bandwidth_bytes_per_s: BytesPerS
    """Per NIC, per direction."""
    latency_s: Seconds
    oversubscription: number(ge=1.0, le=64.0)
    """Fat-tree oversubscription ratio (1 = full bisection)."""


# --------------------------------------------------------------------------------------- documents


class _Document(Spec):
    schema_version: Literal[1]
    name: str
    description: str
    sources: dict[str, str]


class GpuDescription(_Document):
    kind: Literal["gpu"]
    gpu: Gpu


class CpuDescription(_Document):
    kind: Literal["cpu"]
    cpu: Cpu


class SystemDescription(_Document):
    kind: Literal["system"]
    gpu: Gpu
    num_gpus_per_node: count(le=1024)
    intra_node: IntraNodeSpec
    host_cpu: Cpu
    num_cpus_per_node: count(le=64)
    inter_node: InterNodeSpec
    num_nodes: count(le=1_000_000) = 1

    @property
    def num_gpus(self) -> int:
        return self.num_gpus_per_node * self.num_nodes

    @model_validator(mode="after")
    def _links_exist(self) -> "SystemDescription":
        if self.num_gpus_per_node > 1 and self.intra_node.topology != "pcie_switch" and self.gpu.peer_links is None:
            raise field_error("intra_node", f"topology {self.intra_node.topology} needs gpu.peer_links")
        if self.intra_node.in_switch_reduction and self.intra_node.topology != "nvswitch":
            raise field_error("intra_node", "in_switch_reduction needs an nvswitch topology")
        return self


HardwareDescription = GpuDescription | CpuDescription | SystemDescription

DESCRIPTION_CLASSES: dict[str, type[_Document]] = {
    "gpu": GpuDescription,
    "cpu": CpuDescription,
    "system": SystemDescription,
}
