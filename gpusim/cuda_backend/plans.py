"""The plans the CUDA kernels follow, built with the mapper's own functions.

Every kernel of :mod:`gpusim.cuda_backend.kernels` is launched from a :class:`KernelPlan` made here,
and each plan comes from the same code the simulator uses (``gemm_plan`` for a GEMM tile, ``map_op``
for the memory-bound ops and the fused attention, ``streaming_plan`` for the stream microbenchmark),
so a measured kernel and a simulated one are the same grid, CTA size, tile and shared memory.

Two honest adjustments, both visible in the plan:

* Numba exposes no tensor-core instructions, so every GEMM-like kernel here computes with FP32
  FMAs on the CUDA cores (FP16 inputs are widened to FP32 and accumulated in FP32). Where the mapper
  would put the math on the matrix pipe, the plan says ``pipe="vector"`` and ``dtype="fp32"`` (the
  dtype the engine uses to pick the pipe rate); the bytes stay those of the real input dtype, and
  the plan name gets a ``[cuda_cores]`` suffix.
* The memory-bound kernels reduce across threads through shared memory (Numba's CUDA simulator has
  no warp shuffles), so their plan carries those bytes in ``shared_bytes_per_cta`` (the mapper's
  framework launch shape assumes none); occupancy and waves are recomputed with them.

Nothing here imports numba.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpusim.config.hardware import DTYPE_BYTES
from gpusim.engine.kernel import estimate_kernel_s
from gpusim.engine.machine import Machine
from gpusim.mapping import map_op
from gpusim.mapping.gemm import gemm_plan, select_fastest, simt_issue_factor, tile_candidates
from gpusim.mapping.occupancy import ctas_per_unit
from gpusim.mapping.plan import KernelPlan, Tile
from gpusim.mapping.streaming import VECTOR_LOAD_BYTES, streaming_plan
from gpusim.workload.ops import Attention, Elementwise, LayerNorm, Reduction, Softmax

DEFAULT_HARDWARE = "h100_sxm5_80gb"
"""The description plans are made for when no GPU says otherwise (verify's numerics do not depend on it)."""

STATIC_SHARED_LIMIT_BYTES = 48 * 1024
"""Statically allocated shared memory per CTA that CUDA allows without an opt-in attribute (which
Numba's kernel API does not set); tiles needing more are not run by this backend."""

KERNEL_DTYPES = ("fp32", "fp16")
"""Input dtypes the kernels support (math and accumulation are always FP32)."""

NUMPY_DTYPES = {"fp32": "float32", "fp16": "float16", "fp64": "float64"}


def load_machine(hardware: str = DEFAULT_HARDWARE) -> Machine:
    """The engine's view of a hardware description (name or path)."""
    from gpusim.config.library import load_hardware
    from gpusim.engine.machine import machine_of

    return machine_of(load_hardware(hardware))


def _check_dtype(dtype: str) -> None:
    if dtype not in KERNEL_DTYPES:
        raise ValueError(f"the CUDA kernels support dtypes {', '.join(KERNEL_DTYPES)}, not {dtype!r}")


def _on_cuda_cores(plan: KernelPlan, machine: Machine) -> KernelPlan:
    """The plan of a kernel that does its math with FP32 FMAs on the CUDA cores (a GEMM tile then
    issues as a CUDA-core GEMM of that tile does, :func:`gpusim.mapping.gemm.simt_issue_factor`)."""
    if plan.pipe != "matrix":
        return plan
    issue = simt_issue_factor(machine, "fp32", plan.tile) if plan.op_kind == "matmul" else 1.0
    return replace(plan, pipe="vector", dtype="fp32", name=plan.name + "[cuda_cores]", issue_factor=issue)


def with_resources(plan: KernelPlan, machine: Machine, registers_per_thread: int, shared_bytes: int) -> KernelPlan:
    """``plan`` with CTAs that hold these registers per thread and shared bytes: occupancy and waves
    recomputed (each CTA keeps its share of the DRAM bytes). ValueError if no CTA fits on an SM."""
    per_unit, limiter = ctas_per_unit(machine, plan.threads_per_cta, registers_per_thread, shared_bytes)
    if per_unit < 1:
        raise ValueError(f"{plan.name}: {plan.threads_per_cta} threads of {registers_per_thread} registers and "
                         f"{shared_bytes} shared bytes do not fit on one SM ({limiter}); the kernel cannot launch")
    slots = per_unit * machine.num_units
    per_cta_dram = plan.dram_bytes / plan.grid
    waves = tuple(min(slots, plan.grid - i * slots) * per_cta_dram for i in range(math.ceil(plan.grid / slots)))
    return replace(plan, registers_per_thread=registers_per_thread, shared_bytes_per_cta=int(shared_bytes),
                   ctas_per_unit=per_unit, occupancy_limiter=limiter, wave_dram_bytes=waves)


def _with_shared(plan: KernelPlan, machine: Machine, shared_bytes: int) -> KernelPlan:
    """A streaming plan whose CTAs hold ``shared_bytes``: occupancy and waves recomputed."""
    if shared_bytes == plan.shared_bytes_per_cta:
        return plan
    return with_resources(plan, machine, plan.registers_per_thread, shared_bytes)


# ------------------------------------------------------------------------------------------- GEMM


@dataclass(frozen=True)
class GemmLayout:
    """How a CTA's threads cover its block_m x block_n output tile: a threads_m x threads_n grid of
    threads, each holding a reg_m x reg_n register tile (rows ``ty + i*threads_m``, columns
    ``tx + j*threads_n``: neighbouring threads write neighbouring columns)."""

    threads: int
    threads_m: int
    threads_n: int
    reg_m: int
    reg_n: int


def gemm_layout(tile: Tile, warp_size: int = 32) -> GemmLayout:
    """The thread layout of a tile: threads = num_warps * warp_size, outputs per thread =
    block_m * block_n / threads, the register tile as square as the divisors allow."""
    threads = tile.num_warps * warp_size
    best: tuple[int, int, int, int] | None = None
    for tn in range(1, threads + 1):
        if threads % tn:
            continue
        tm = threads // tn
        if tile.block_m % tm or tile.block_n % tn:
            continue
        rm, rn = tile.block_m // tm, tile.block_n // tn
        key = (abs(rm - rn), -tn)
        if best is None or key < best[:2]:
            best = (key[0], key[1], tm, tn)
    if best is None:
        raise ValueError(f"tile {tile.label()}: {threads} threads cannot evenly cover a "
                         f"{tile.block_m}x{tile.block_n} output tile")
    tm, tn = best[2], best[3]
    return GemmLayout(threads, tm, tn, tile.block_m // tm, tile.block_n // tn)


def unsupported_tile_reason(tile: Tile, dtype: str) -> str | None:
    """Why this backend cannot run a tile (None when it can)."""
    if tile.cluster > 1 or tile.cluster_n > 1:
        return "CTA clusters (TMA multicast) are not expressible in Numba"
    if tile.stream_k:
        return "its kernels launch one CTA per tile (or split-K slice); a stream-K tail needs a persistent kernel"
    try:
        gemm_layout(tile)
    except ValueError as exc:
        return str(exc)
    shared = tile.num_stages * (tile.block_m + tile.block_n) * tile.block_k * DTYPE_BYTES[dtype]
    if shared > STATIC_SHARED_LIMIT_BYTES:
        return f"needs {int(shared)} bytes of shared memory, above the {STATIC_SHARED_LIMIT_BYTES}-byte static limit"
    return None


def plan_for_gemm(machine: Machine, m: int, n: int, k: int, dtype: str, tile: Tile, batch: int = 1) -> KernelPlan:
    """The plan of C[batch, m, n] = A[batch, m, k] @ B[batch, k, n] with ``tile`` (gemm_plan's)."""
    _check_dtype(dtype)
    reason = unsupported_tile_reason(tile, dtype)
    if reason:
        raise ValueError(f"tile {tile.label()}: {reason}")
    plan = gemm_plan(machine, f"gemm_{dtype}", "matmul", m, n, k, batch, dtype, tile, 2.0 * m * n * k * batch)
    if plan is None:
        raise ValueError(f"tile {tile.label()} does not fit {machine.name}")
    return _on_cuda_cores(plan, machine)


def choose_gemm_plan(machine: Machine, m: int, n: int, k: int, dtype: str, batch: int = 1) -> KernelPlan:
    """Library-like choice among the mapper's tile candidates this backend can run: the fastest
    predicted by the engine's closed-form estimate, for math on the CUDA cores."""
    _check_dtype(dtype)
    plans = []
    for tile in tile_candidates(machine, dtype, m, n, k, batch):
        if unsupported_tile_reason(tile, dtype):
            continue
        plans.append(plan_for_gemm(machine, m, n, k, dtype, tile, batch))
    return select_fastest(plans, lambda p: estimate_kernel_s(p, machine))


# ------------------------------------------------------------------------------- memory-bound ops


def vector_elements(dtype: str) -> int:
    """Elements in one 16-byte vector load (the mapper's VECTOR_LOAD_BYTES)."""
    return max(1, int(VECTOR_LOAD_BYTES // DTYPE_BYTES[dtype]))


@dataclass(frozen=True)
class ElementwiseLayout:
    """Each CTA owns ``elements_per_cta`` consecutive elements, ``vec`` per 16-byte vector and
    ``vectors_per_thread`` vectors' worth per thread; thread t handles elements ``cta_start + t + j * threads``
    (j < vec * vectors_per_thread), so that each load instruction of a warp is coalesced."""

    threads: int
    vec: int
    vectors_per_thread: int

    @property
    def elements_per_cta(self) -> int:
        return self.threads * self.vec * self.vectors_per_thread


def elementwise_layout(plan: KernelPlan, num_elements: int, dtype: str) -> ElementwiseLayout:
    """The layout behind ``elementwise_launch`` (4 vectors per thread); checks the plan's grid."""
    layout = ElementwiseLayout(plan.threads_per_cta, vector_elements(dtype), 4)
    if plan.grid != math.ceil(num_elements / layout.elements_per_cta):
        raise ValueError(f"{plan.name}: grid {plan.grid} does not match {num_elements} elements "
                         f"at {layout.elements_per_cta} per CTA")
    return layout


def plan_for_elementwise(machine: Machine, function: str, num_elements: int, dtype: str) -> KernelPlan:
    """``add`` (2 inputs) or ``gelu`` (1 input, tanh form): the mapper's plan of that op."""
    _check_dtype(dtype)
    if function not in ("add", "gelu"):
        raise ValueError(f"elementwise function must be add or gelu, not {function!r}")
    (plan,) = map_op(Elementwise(num_elements=num_elements, function=function, dtype=dtype), machine)
    return plan


def plan_for_reduction(machine: Machine, num_elements: int, dtype: str) -> KernelPlan:
    """A sum of ``num_elements`` into one FP32 value: the mapper's plan (elementwise launch shape),
    each CTA reducing its elements through ``threads`` FP32 words of shared memory."""
    _check_dtype(dtype)
    (plan,) = map_op(Reduction(num_elements=num_elements, num_outputs=1, function="sum", dtype=dtype), machine)
    return _with_shared(plan, machine, plan.threads_per_cta * 4)


@dataclass(frozen=True)
class RowLayout:
    """``rows_per_cta`` rows per CTA, each owned by ``threads_per_row`` consecutive threads; thread j
    of a row covers vectors ``j, j + threads_per_row, ...`` of ``vec`` elements."""

    threads: int
    rows_per_cta: int
    threads_per_row: int
    vec: int


def row_layout(plan: KernelPlan, rows: int, cols: int, dtype: str) -> RowLayout:
    """The layout behind the mapper's row launches: one CTA per row (``row_launch`` for long rows,
    PyTorch's LayerNorm launch for any row), or 4 rows (a warp each) per CTA."""
    vec = vector_elements(dtype)
    threads = plan.threads_per_cta
    if plan.grid == rows:
        layout = RowLayout(threads, 1, threads, vec)
    else:
        layout = RowLayout(threads, threads // 32, 32, vec)
    if plan.grid != math.ceil(rows / layout.rows_per_cta):
        raise ValueError(f"{plan.name}: grid {plan.grid} does not match {rows} rows at {layout.rows_per_cta} per CTA")
    return layout


def plan_for_rows(machine: Machine, kind: str, rows: int, cols: int, dtype: str) -> KernelPlan:
    """Softmax or layernorm forward over ``cols``: the mapper's plan, plus the FP32 shared-memory
    words the kernel reduces through (one per thread)."""
    _check_dtype(dtype)
    ops = {"softmax": Softmax, "layernorm": LayerNorm}
    if kind not in ops:
        raise ValueError(f"row kernel must be softmax or layernorm, not {kind!r}")
    (plan,) = map_op(ops[kind](rows=rows, cols=cols, dtype=dtype), machine)
    return _with_shared(plan, machine, plan.threads_per_cta * 4)


def plan_for_attention(machine: Machine, batch: int, heads: int, seq_len_q: int, seq_len_kv: int, head_dim: int,
                       dtype: str) -> KernelPlan:
    """The mapper's fused (flash) attention forward plan, non-causal: CTA = block_m queries of one
    head; Q tile plus double-buffered K and V tiles in shared memory; math on the CUDA cores."""
    _check_dtype(dtype)
    op = Attention(batch=batch, heads=heads, seq_len_q=seq_len_q, seq_len_kv=seq_len_kv, head_dim=head_dim,
                   kv_heads=heads, dtype=dtype)
    (plan,) = map_op(op, machine)
    if plan.tile is None or plan.tile.block_m > plan.threads_per_cta:
        raise ValueError(f"{plan.name}: needs one thread per query row of the tile")
    return _on_cuda_cores(plan, machine)


# --------------------------------------------------------------------------------- microbenchmarks

STREAM_VARIANTS = {"init": (0, 1), "read": (1, 0), "scale": (1, 1), "triad": (2, 1)}
"""variant -> (arrays read, arrays written); FP64 elements as in the STREAM benchmark."""


def stream_launch(machine: Machine, occupancy_fraction: float) -> tuple[int, int]:
    """(CTAs, threads per CTA) for a grid-stride stream kernel whose resident threads are
    ``occupancy_fraction`` of the SM maximum: CTAs of up to 1024 threads, just enough of them to
    fill every SM to that occupancy (one wave)."""
    if not 0 < occupancy_fraction <= 1:
        raise ValueError(f"occupancy must be in (0, 1], got {occupancy_fraction}")
    resident = max(machine.warp_size, int(occupancy_fraction * machine.max_threads_per_unit))
    threads = min(1024, machine.max_threads_per_cta, resident)
    ctas_per_sm = max(1, resident // threads)
    return ctas_per_sm * machine.num_units, threads


STREAM_READ_LOADS_IN_FLIGHT = 4
"""Loads in flight per thread of the ``read`` stream kernel: Numba's compiler unrolls its grid-stride
loop four times, and with no store in the loop all four loads issue before the first returns (its
PTX). The kernels that store (init, scale, triad) keep one iteration's loads in flight: a load
cannot pass the store before it, which might write the same address."""


def plan_for_stream(machine: Machine, variant: str, num_elements: int, occupancy_fraction: float) -> KernelPlan:
    """A stream kernel over FP64 arrays of ``num_elements``, launched by :func:`stream_launch`."""
    if variant not in STREAM_VARIANTS:
        raise ValueError(f"stream variant must be one of {', '.join(STREAM_VARIANTS)}, not {variant!r}")
    reads, writes = STREAM_VARIANTS[variant]
    grid, threads = stream_launch(machine, occupancy_fraction)
    flop = {"init": 0.0, "read": 0.0, "scale": 1.0, "triad": 2.0}[variant] * num_elements
    return streaming_plan(machine, f"stream_{variant}", "stream", "fp64", bytes_read=reads * num_elements * 8.0,
                          bytes_written=writes * num_elements * 8.0, flop=flop, sfu_ops=0.0, num_ctas=grid,
                          threads_per_cta=threads,
                          bytes_in_flight_per_thread=8.0 * (STREAM_READ_LOADS_IN_FLIGHT if variant == "read"
                                                            else max(1, reads)))
