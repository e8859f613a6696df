"""KernelPlan: what one kernel launch does, in the terms the engine (and the CUDA backend) need.

A plan is a pure value: the grid of CTAs, the resources each CTA holds (threads, registers, shared
memory), the tile it computes, the work of each CTA (FLOP per pipe, bytes it requests), and the DRAM
traffic of each wave of concurrently resident CTAs as the L2 reuse model predicts it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TILE_LABEL = re.compile(r"(\d+)x(\d+)x(\d+)_s(\d+)_w(\d+)(?:_splitk(\d+))?(_streamk)?(?:_cluster(\d+)(?:x(\d+))?)?")
"""What :meth:`Tile.label` writes."""


@dataclass(frozen=True)
class Tile:
    """A GEMM-like tiling: CTA tile block_m x block_n stepping block_k, with a software pipeline."""

    block_m: int
    block_n: int
    block_k: int
    num_stages: int
    num_warps: int
    split_k: int = 1
    swizzle: int = 8
    cluster: int = 1
    """CTAs of a cluster (along M) that load each B tile once and multicast it (Hopper TMA)."""
    cluster_n: int = 1
    """CTAs of a cluster (along N) that load each A tile once and multicast it (a 2-D cluster)."""
    stream_k: bool = False
    """A persistent kernel's stream-K tail: the output tiles left over after the last full wave
    have their k-iterations shared evenly among all SM slots, which add up their FP32 partial tiles
    (CUTLASS 3.x ``StreamKScheduler``, cuBLAS's segment-K kernels), instead of running as a
    partial wave of whole tiles."""

    def label(self) -> str:
        text = f"{self.block_m}x{self.block_n}x{self.block_k}_s{self.num_stages}_w{self.num_warps}"
        text += f"_splitk{self.split_k}" if self.split_k > 1 else ""
        text += "_streamk" if self.stream_k else ""
        if self.cluster_n > 1:
            return text + f"_cluster{self.cluster}x{self.cluster_n}"
        return text + (f"_cluster{self.cluster}" if self.cluster > 1 else "")

    @classmethod
    def parse(cls, label: str) -> Tile:
        """The tile a :meth:`label` names, e.g. ``128x128x32_s3_w4`` or ``128x256x64_s4_w8_cluster2``
        (block_m x block_n x block_k, pipeline stages, warps, then optional split-K, stream-K tail
        and cluster)."""
        match = _TILE_LABEL.fullmatch(label.strip()) if isinstance(label, str) else None
        if match is None:
            raise ValueError(f"tile {label!r} is not of the form MxNxK_sSTAGES_wWARPS[_splitkS][_streamk][_clusterC[xC]], "
                             f"e.g. 128x128x32_s3_w4")
        groups = match.groups()
        stream_k = groups[6] is not None
        bm, bn, bk, stages, warps, split_k, cluster, cluster_n = (int(g) if g else None
                                                                  for g in groups[:6] + groups[7:])
        if 0 in (bm, bn, bk, stages, warps, split_k, cluster, cluster_n):
            raise ValueError(f"tile {label!r}: every size and count must be positive")
        if stream_k and split_k:
            raise ValueError(f"tile {label!r}: a stream-K tail already splits k; it takes no split-K")
        return cls(bm, bn, bk, stages, warps, split_k=split_k or 1, cluster=cluster or 1, cluster_n=cluster_n or 1,
                   stream_k=stream_k)

    def l2_operand_elements_per_k(self) -> float:
        """A rows and B columns one CTA reads from L2 per step of k: its own share of the tiles its
        cluster multicasts."""
        return self.block_m / self.cluster_n + self.block_n / self.cluster


@dataclass(frozen=True)
class KernelPlan:
    name: str
    op_kind: str
    pipe: str
    """Where the math runs: ``matrix`` (tensor cores / AMX), ``vector`` (CUDA cores / SIMD) or ``none``."""
    dtype: str
    grid: int
    threads_per_cta: int
    registers_per_thread: int
    shared_bytes_per_cta: int
    ctas_per_unit: int
    """Occupancy: CTAs resident per SM (or core) given the per-CTA resources."""
    occupancy_limiter: str
    flop_per_cta: float
    """FLOP each CTA executes (padded edge tiles included) on ``pipe``."""
    sfu_ops_per_cta: float
    """Transcendental operations (exp in softmax) per CTA, on the special-function units."""
    l2_bytes_per_cta: float
    """Bytes each CTA loads and stores through L2 (hits and misses)."""
    bytes_in_flight_per_cta: float
    """Outstanding memory bytes a CTA sustains (pipeline stages / vector loads): Little's law."""
    wave_dram_bytes: tuple[float, ...]
    """DRAM bytes of each wave of concurrently resident CTAs (reads that miss L2, plus writes)."""
    prologue_per_wave: bool
    """GEMM-like CTAs fill their pipeline at the start of every wave (of a persistent kernel, its
    first); streaming kernels only once."""
    useful_flop: float
    """The op's model FLOP (what the workload counts), for FLOP conservation and MFU."""
    tile: Tile | None = None
    persistent: bool = False
    """A persistent, warp-specialized GEMM-like kernel: one CTA per SM slot loops over the output
    tiles, its producer warp loading the next tile's operands while its math warps finish and store
    the current one (CUTLASS 3.x ``KernelTmaWarpSpecialized*Persistent``/cuBLAS sm90+ kernels, the
    FlashAttention-3 forward). Wave quantization remains, but only the first wave pays the pipeline
    fill and fixed cost and only the last waits for its stores' L2 latency (between waves the
    epilogue's bandwidth term remains)."""
    epilogue_bytes_per_cta: float = 0.0
    """Bytes each CTA stores after its main loop (its output tile, split-K partials). A GEMM-like
    wave drains them through the SM's share of L2 bandwidth before its SMs take the next wave."""
    executed_flop: float | None = None
    """FLOP the kernel really does without tile padding (causal fused attention skips the masked
    half; its backward recomputes scores); None means ``useful_flop``. Achieved FLOP/s use it."""
    warp_mma: bool = False
    """The kernel issues warp-synchronous MMA (``mma.sync``), which reaches only the device's
    ``warp_mma_fraction`` of the matrix rate (library GEMMs use the native instructions)."""
    shared_operand_bytes_per_cta: float = 0.0
    """Bytes each CTA moves through its SM's shared memory to feed the matrix units: the staged A and B
    tiles written once and read by every warp (or warpgroup) that multiplies them. The SM's
    shared-memory bandwidth caps the math of small tiles (0: not modelled for this kernel)."""
    vector_ops_per_cta: float = 0.0
    """FP32 instructions per CTA (one per element operation; an FMA counts once) that the warps issuing
    the matrix products execute between them on the vector pipe, in series with the products unless
    ``vector_ops_overlap_math``: the online softmax of fused attention (row max, exponent FMA, row sum,
    packing P, rescaling O), the partial-sum promotion of a split-accumulator FP8 GEMM."""
    sfu_overlaps_math: bool = False
    """The SFU work (softmax exponentials) overlaps the matrix products (warp-specialized kernels
    with asynchronous MMA, FlashAttention-3) instead of following them."""
    vector_ops_overlap_math: bool = False
    """The ``vector_ops_per_cta`` overlap the matrix products instead of following them (a split-
    accumulator FP8 GEMM that adds one group of partial sums while the next group's products run)."""
    wave_llc_bytes: tuple[float, ...] = ()
    """Bytes of each wave that miss L2 but hit the device's memory-side cache (MI300X Infinity
    Cache); empty when none do. Not part of ``wave_dram_bytes``."""
    store_bytes_per_cta: float = 0.0
    """Bytes of ``l2_bytes_per_cta`` the CTA stores (all of which reach DRAM). Stores are posted: no
    thread waits for them, so Little's law bounds a CTA's loads only, and its stores travel with its
    loads' round trips; they are the writes of the DRAM traffic's read/write mix."""
    tail_work_fraction: float = 1.0
    """Work of each CTA of the last wave as a fraction of a full CTA's (k-iterations): below 1 for a
    stream-K tail (:attr:`Tile.stream_k`), whose wave holds every SM slot, each doing its share of
    the leftover tiles."""
    stream_k_partial_bytes: float = 0.0
    """Bytes of one FP32 partial output tile that a stream-K tail's CTAs exchange through L2 (0: none)."""
    load_waits_per_cta: float = 0.0
    """Memory round trips a CTA without software pipelining (``tile.num_stages`` 1) waits for in
    turn: one for every block it loads just before using it (0 for pipelined kernels)."""
    serial_warp_instructions_per_cta: float = 0.0
    """Warp instructions a streaming CTA issues while none of its loads are in flight: a kernel whose
    threads load one element, compute on it, then load the next (the first-generation vLLM row
    kernels, :func:`gpusim.mapping.streaming.scalar_row_launch`). The warps of an SM then wait for
    their loads together and share its schedulers afterwards, so every CTA lives the issue time of
    the instructions of all the CTAs on its SM besides its round trips (0: loads overlap the math)."""
    warp_instructions_per_trip: float = 0.0
    """Warp instructions each warp of a streaming CTA issues between two of its round trips while
    the other warps of its SM keep their loads in flight: a kernel whose threads load one element,
    compute on it and store it before loading the next, with no barrier between its warps
    (PyTorch's index-computing and casting element-wise kernels,
    :func:`gpusim.mapping.streaming.torch_scalar_elementwise_launch`). The SM's warps queue for its
    schedulers (:func:`gpusim.engine.kernel.scheduler_residence_s`); 0: the issue hides behind the
    round trips."""
    warp_stall_cycles_per_trip: float = 0.0
    """Cycles each warp of a CTA waits between two of its round trips on its own instructions'
    results (dependent integer and FP32 arithmetic, shared-memory loads), issuing nothing while the
    other warps of its SM may: with :attr:`warp_instructions_per_trip`, what the compiled code of
    gpusim's own kernels does between its loads (:mod:`gpusim.cuda_backend.sass`); 0: not modelled."""
    delayed_hits: bool = False
    """Every load waits the latency of a DRAM miss, its L2 hits included: the CTAs that share an
    operand tile run the same loop from the same start without software pipelining, so they request
    each line within one DRAM latency of each other and all but the first wait for the first one's
    miss (a delayed hit). gpusim's own tiled kernels (:mod:`gpusim.cuda_backend.sass`)."""
    issue_factor: float = 1.0
    """How much longer a CUDA-core GEMM CTA's math takes than the calibrated rate says, because its
    warps issue shared loads, copies and address arithmetic besides their FMAs through schedulers
    that issue one instruction per cycle: the tile's issue cycles per cycle of FMA-pipe work over the
    same ratio of the library's leanest tile, which the calibration's large GEMMs run
    (:func:`gpusim.mapping.gemm.simt_issue_factor`; 1: not limited beyond the calibration)."""
    block_reductions_per_cta: int = 0
    """Block-wide reductions a streaming CTA performs between its loads, each a chain of dependent
    warp shuffles and shared-memory exchanges behind barriers that every warp of the CTA waits for
    with no load in flight (a row kernel's sum of squares; see
    :func:`gpusim.engine.kernel.block_reduction_s`)."""

    @property
    def pipelined(self) -> bool:
        """Whether a CTA's loads overlap its math (a tile with at least two pipeline stages)."""
        return self.tile is None or self.tile.num_stages >= 2

    @property
    def work_flop(self) -> float:
        return self.useful_flop if self.executed_flop is None else self.executed_flop

    @property
    def num_waves(self) -> int:
        return len(self.wave_dram_bytes)

    @property
    def dram_bytes(self) -> float:
        return float(sum(self.wave_dram_bytes))

    @property
    def llc_bytes(self) -> float:
        return float(sum(self.wave_llc_bytes))

    @property
    def work_ctas(self) -> float:
        """CTAs' worth of work: the grid, less what a stream-K tail's CTAs do not do."""
        if self.tail_work_fraction >= 1.0:
            return float(self.grid)
        return self.grid - self.grid / self.num_waves * (1.0 - self.tail_work_fraction)

    @property
    def l2_bytes(self) -> float:
        return self.l2_bytes_per_cta * self.work_ctas

    @property
    def l2_hit_fraction(self) -> float:
        requested = self.l2_bytes
        if requested <= 0:
            return 0.0
        return max(0.0, min(1.0, 1.0 - (self.dram_bytes + self.llc_bytes) / requested))

    def describe(self) -> dict:
        out = {
            "grid": self.grid,
            "threads_per_cta": self.threads_per_cta,
            "registers_per_thread": self.registers_per_thread,
            "shared_bytes_per_cta": self.shared_bytes_per_cta,
            "ctas_per_sm": self.ctas_per_unit,
            "occupancy_limiter": self.occupancy_limiter,
            "num_waves": self.num_waves,
            "pipe": self.pipe,
            "dtype": self.dtype,
            "l2_bytes_per_launch": self.l2_bytes,
        }
        if self.wave_llc_bytes:
            out["llc_hit_bytes_per_launch"] = self.llc_bytes
        if self.warp_mma:
            out["warp_mma"] = True
        if self.issue_factor != 1.0:
            out["issue_factor"] = self.issue_factor
        if self.tile is not None:
            out["tile"] = {
                "block_m": self.tile.block_m, "block_n": self.tile.block_n, "block_k": self.tile.block_k,
                "num_stages": self.tile.num_stages, "num_warps": self.tile.num_warps,
                "split_k": self.tile.split_k, "swizzle": self.tile.swizzle, "cluster": self.tile.cluster,
                "cluster_n": self.tile.cluster_n, "stream_k": self.tile.stream_k,
            }
        return out
