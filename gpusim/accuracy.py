"""Simulated vs measured: simulate every measured case and report the error honestly.

Each case of the published dataset (``measurements/published/kernels.csv``) is simulated the way it
was measured: a library GEMM is the fastest tile configuration the mapper finds; a stream or
elementwise kernel is the framework launch shape; a loop of back-to-back ``torch.mm`` calls pays the
eager launch gaps. Beside every simulated value the report gives a plain roofline (peak FLOP/s and
DRAM bandwidth from the description, no calibration), so the gain of the simulation over it shows.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Iterable

from gpusim.config.derived import matrix_peak_flop_per_s, vector_peak_flop_per_s
from gpusim.config.hardware import DTYPE_BYTES
from gpusim.config.library import builtin_files, load_hardware
from gpusim.engine.kernel import simulate_kernel
from gpusim.engine.machine import Calibration, Machine, machine_of
from gpusim.energy import capped_kernel_time_s
from gpusim.engine.simulate import transfer_time_s
from gpusim.mapping import TRANSCENDENTAL_FUNCTIONS, best_gemm, map_op
from gpusim.mapping.occupancy import REGISTER_BYTES, ctas_per_unit
from gpusim.mapping.plan import Tile
from gpusim.mapping.streaming import (elementwise_launch, framework_row_launch, row_launch, scalar_row_launch,
                                      scalar_row_serial_instructions,
                                     streaming_plan)
from gpusim.workload.ops import Attention, Matmul

STREAM_ARRAY_BYTES = 2**30
"""Array size for stream cases that do not state one (large enough that L2 plays no role)."""

COPY_BYTES = 2**30
"""Copy size for bandwidth cases that do not state one."""

STREAM_BLOCKS_PER_SM = 2
"""gpu-benches gpu-stream sizes its blocks so that two are resident per SM (main.cu: measureKernels(...,
blockSize, 2), the carve-out raised until two fit): occupancy x max threads / 2 threads each."""

STREAM_KERNELS = {  # variant -> (arrays read, arrays written)
    "init": (0, 1), "read": (1, 0), "scale": (1, 1), "copy": (1, 1), "triad": (2, 1), "add": (2, 1),
}


@dataclass(frozen=True)
class CaseResult:
    case_id: str
    gpu: str
    op: str
    metric: str
    measured: float
    simulated: float
    roofline: float | None
    source: str
    note: str = ""

    @property
    def signed_error_fraction(self) -> float:
        """(simulated - measured) / measured, in the case's own metric."""
        return (self.simulated - self.measured) / self.measured

    @property
    def roofline_error_fraction(self) -> float | None:
        if self.roofline is None:
            return None
        return (self.roofline - self.measured) / self.measured


@dataclass(frozen=True)
class Skipped:
    case_id: str
    gpu: str
    reason: str


def _eager_loop_s(machine: Machine, kernel_s: float) -> float:
    """One iteration of a back-to-back loop of eager launches."""
    return max(kernel_s + machine.graph_kernel_launch_s, machine.kernel_launch_s)


def loop_calls(case) -> tuple[int, int] | None:
    """(warm-up, timed) calls of a back-to-back loop row whose source states them, else None."""
    if case.timed_calls is None:
        return None
    return case.warmup_calls, case.timed_calls


def gpusim_dtype(dtype: str | None) -> str | None:
    """Measurement files name formats precisely (fp8_e4m3, fp8_e4m3fnuz); gpusim models fp8 as one."""
    if dtype and dtype.startswith("fp8"):
        return "fp8"
    return dtype


def loop_from_rest_s(machine: Machine, kernel, warmup_calls: int, timed_calls: int,
                     sustained_kernel_s: float | None = None, iteration=None) -> float:
    """Mean timed iteration of a back-to-back loop of one kernel (a
    :class:`~gpusim.engine.kernel.KernelTiming`) that starts on a rested GPU: ``warmup_calls`` untimed
    calls, then ``timed_calls`` timed ones. ``iteration`` maps a kernel's seconds to one iteration's
    (default: an eager loop's, :func:`_eager_loop_s`). At steady state each call takes
    ``sustained_kernel_s`` (default: the kernel's own time; the caller passes the time at the clock
    the power cap sets, :func:`gpusim.energy.capped_kernel_time_s`). A power-limited card (calibration
    ``sustained_clock_fraction`` r < 1) runs its first ``boost_window_s`` of busy time at the rated
    clock, where the kernel's clocked work takes r times its sustained time (its DRAM traffic, in
    another clock domain, does not speed up), and every call after that at the sustained clock the
    efficiency fractions describe. Calls straddling the window's end count by the fraction inside it."""
    cal = machine.calibration
    if iteration is None:
        def iteration(kernel_s: float) -> float:
            return _eager_loop_s(machine, kernel_s)
    sustained_s = iteration(kernel.time_s if sustained_kernel_s is None else sustained_kernel_s)
    if cal.sustained_clock_fraction >= 1.0 or cal.boost_window_s <= 0.0:
        return sustained_s
    dram_s = kernel.dram_bytes / machine.dram_achievable_bytes_per_s
    boosted_s = iteration(max(kernel.time_s * cal.sustained_clock_fraction, dram_s))
    calls_in_window = cal.boost_window_s / boosted_s
    timed_boosted = min(max(calls_in_window - warmup_calls, 0.0), float(timed_calls))
    return (timed_boosted * boosted_s + (timed_calls - timed_boosted) * sustained_s) / timed_calls


def _iteration_s(machine: Machine, timing_method: str, kernel_s: float) -> float:
    """What a measurement of one kernel call sees: a profiler's kernel duration is the kernel alone; a
    back-to-back eager loop's iteration is bounded by the host's launch cost; events around one eager
    framework call on an idle GPU also see the host dispatch the device waits for (see
    :func:`_eager_call_s`); CUDA events around one launch add the device-side launch overhead."""
    if timing_method == "loop_with_launch_gaps":
        return _eager_loop_s(machine, kernel_s)
    if timing_method == "profiler_kernel":
        return kernel_s
    if timing_method == "eager_call_events":
        return _eager_call_s(machine, kernel_s)
    return kernel_s + machine.graph_kernel_launch_s


def _timed_kernel_s(machine: Machine, plan, timing_method: str, calls: tuple[int, int] | None = None,
                    power=None) -> float:
    """What a measurement of one kernel sees (:func:`_iteration_s`). Where the row counts its loop's
    ``calls`` (warm-up, timed), the loop starts from rest (:func:`loop_from_rest_s`) and settles at
    the clock the device's ``power`` cap sets for this kernel (a kernel within TDP keeps its time)."""
    timing = simulate_kernel(plan, machine)
    if calls is not None:
        sustained_s = capped_kernel_time_s(plan, timing, machine, power) if power is not None else timing.time_s
        return loop_from_rest_s(machine, timing, *calls, sustained_kernel_s=sustained_s,
                                iteration=lambda kernel_s: _iteration_s(machine, timing_method, kernel_s))
    return _iteration_s(machine, timing_method, timing.time_s)


def _eager_call_s(machine: Machine, kernel_s: float) -> float:
    """CUDA events recorded around one eager framework call with nothing else queued (NeuSight's
    ``measure_once``: start event, the op, end event, synchronize): the idle GPU passes the start
    event at once and then waits while the host dispatches the call (the description's eager
    ``kernel_launch_s``), then runs the launch and the kernel."""
    return machine.kernel_launch_s + machine.graph_kernel_launch_s + kernel_s


WHOLE_TILE_SCHEDULERS = {
    "deepgemm": "DeepGEMM's persistent scheduler hands each CTA whole output tiles in turn "
                "(deep_gemm/include/deep_gemm/scheduler.cuh, Scheduler::get_next_block); it has no stream-K",
}
"""Libraries (the ``library`` column) whose persistent GEMMs never run a stream-K tail, and why."""


def matmul_flop(case) -> float:
    """FLOP of a matmul row: 2 m n k per product, ``batch`` products (1 unless stated)."""
    return 2.0 * case.m * case.n * case.k * (case.batch or 1)


def matmul_plan(case, machine: Machine):
    """The kernel plan of a matmul row: the published GEMMs multiply contiguous, untransposed tensors
    (the op's default layout); where the source names the kernel the library ran, that kernel's tile.
    A ``split_accumulator`` row is an FP8 product that promotes its partial sums into FP32
    (``torch._scaled_mm`` without fast accumulation)."""
    batch = case.batch or 1
    dtype = gpusim_dtype(case.dtype)
    strides = Matmul(m=case.m, n=case.n, k=case.k, batch=batch, dtype=dtype).row_strides_bytes()
    return best_gemm(machine, "matmul", "matmul", case.m, case.n, case.k, batch, dtype, matmul_flop(case),
                     row_strides_bytes=strides, tile=Tile.parse(case.kernel_tile) if case.kernel_tile else None,
                     stream_k=case.library not in WHOLE_TILE_SCHEDULERS,
                     split_accumulator=case.variant == "split_accumulator")


def simulate_case(case, machine: Machine, device) -> tuple[float, float | None]:
    """(simulated time or latency in seconds, roofline time in seconds or None) of one case."""
    op = case.op
    if op == "matmul":
        batch = case.batch or 1
        dtype = gpusim_dtype(case.dtype)
        flop = matmul_flop(case)
        eb = DTYPE_BYTES[dtype]
        t = _timed_kernel_s(machine, matmul_plan(case, machine), case.timing_method, loop_calls(case),
                            getattr(device, "power", None))
        peak = matrix_peak_flop_per_s(device, dtype, fp32_accumulate=True) \
            or vector_peak_flop_per_s(device, dtype)
        min_bytes = (case.m * case.k + case.k * case.n + case.m * case.n) * eb * batch
        roof = max(flop / peak, min_bytes / device.dram.bandwidth_bytes_per_s) if peak else None
        return t, roof
    if op == "attention":
        attention = attention_of(case)
        t = sum(_timed_kernel_s(machine, plan, case.timing_method) for plan in map_op(attention, machine))
        peak = matrix_peak_flop_per_s(device, attention.dtype, fp32_accumulate=True)
        moved = attention.bytes_read() + attention.bytes_written()
        roof = max(attention_benchmark_flop(case) / peak, moved / device.dram.bandwidth_bytes_per_s) if peak else None
        return t, roof
    if op in ("elementwise", "stream", "softmax", "layernorm", "rmsnorm"):
        roofline_s = _moved_bytes(case) / device.dram.bandwidth_bytes_per_s
        if op == "rmsnorm" and case.variant == "hf_eager":
            return _unfused_rmsnorm_s(case, machine), roofline_s
        return _timed_kernel_s(machine, _memory_plan(case, machine), case.timing_method), roofline_s
    if op == "l2_bandwidth":
        return _l2_case(case, machine), None
    if op == "l1_bandwidth":
        per_s = machine.l1_bytes_per_s_per_unit * machine.num_units
        return case.working_set_bytes / per_s if case.working_set_bytes else 1.0 / per_s, None
    if op == "pointer_chase":
        if "smem" in (case.variant or "") or "shared" in (case.variant or ""):
            return device.l1.shared_latency_s, None
        bypass_l1 = case.variant == "ld_global_cg"
        return _chase_latency_s(case.working_set_bytes, machine, device, bypass_l1), None
    if op in ("memcpy_h2d", "memcpy_d2h"):
        # a cudaMemcpy timed call by call pays the host's API cost (as an eager launch does) on top
        # of the DMA's latency and bytes
        return machine.kernel_launch_s + transfer_time_s(machine, case.num_bytes or COPY_BYTES), None
    raise ValueError(f"no simulation for op {op!r}")


ATTENTION_KERNEL_OF_LIBRARY = {"flash-attn2": "fused", "flash-attn3": "fused_async", "cudnn": "fused_async"}
"""gpusim's attention kernel for each library a measured row ran: FlashAttention-2 issues warp-level
MMA and runs the softmax between the products; FlashAttention-3 and cuDNN's Hopper kernels are
warp-specialized, with asynchronous MMA overlapping the softmax."""


def attention_of(case) -> Attention:
    """The attention op of a measured row (batch, rows = heads, m / n = query / key length, k = head dim)."""
    direction, _, mask = case.variant.partition("_")
    return Attention(batch=case.batch, heads=case.rows, seq_len_q=case.m, seq_len_kv=case.n, head_dim=case.k,
                     causal=mask == "causal", dtype=gpusim_dtype(case.dtype),
                     kernel=ATTENTION_KERNEL_OF_LIBRARY[case.library], variant=direction)


def attention_benchmark_flop(case) -> float:
    """The FLOP the FlashAttention benchmarks divide by (the convention of their published TFLOPS):
    4 x batch x heads x seq_q x seq_kv x head_dim for the two forward products, 2.5 times that for the
    backward (its five products), halved under a causal mask."""
    direction, _, mask = case.variant.partition("_")
    flop = 4.0 * case.batch * case.rows * case.m * case.n * case.k
    return flop * (2.5 if direction == "backward" else 1.0) / (2.0 if mask == "causal" else 1.0)


def _memory_plan(case, machine: Machine):
    """The kernel plan of a stream, elementwise or row-wise (softmax, norm) case, in the launch shape
    the measured implementation uses."""
    dtype = case.dtype or "fp32"
    eb = DTYPE_BYTES[dtype]
    if case.op == "stream":
        reads, writes = STREAM_KERNELS[case.variant]
        n = (case.num_bytes or STREAM_ARRAY_BYTES) // 8
        # gpu-benches gpu-stream: one element per thread, STREAM_BLOCKS_PER_SM blocks resident per SM (a
        # shared-memory spoiler sets the carve-out), of whole warps making up the stated occupancy
        occupancy = case.occupancy_fraction or 1.0
        warps = max(1, round(occupancy * machine.max_threads_per_unit / STREAM_BLOCKS_PER_SM / machine.warp_size))
        threads = min(machine.max_threads_per_cta, warps * machine.warp_size)
        resident_threads = threads * STREAM_BLOCKS_PER_SM
        ctas = math.ceil(n / threads)
        plan = streaming_plan(machine, f"stream_{case.variant}", "stream", "fp64", bytes_read=reads * n * 8.0,
                              bytes_written=writes * n * 8.0, flop=float(n), sfu_ops=0.0, num_ctas=ctas,
                              threads_per_cta=threads, bytes_in_flight_per_thread=8.0 * max(1, reads))
        slots_wanted = max(1, resident_threads // threads)
        if plan.ctas_per_unit > slots_wanted:
            slots = slots_wanted * machine.num_units
            waves = tuple(min(slots, ctas - i * slots) * (reads + writes) * 8.0 * threads
                          for i in range(math.ceil(ctas / slots)))
            plan = replace(plan, ctas_per_unit=slots_wanted, wave_dram_bytes=waves, occupancy_limiter="occupancy_spoiler")
        return plan
    if case.variant in SCALAR_ROWWISE_VARIANTS:
        return _scalar_rowwise_plan(case, machine)
    if case.op == "elementwise":
        n = case.num_elements
        inputs = _elementwise_inputs(case.variant)
        ctas, threads, in_flight = elementwise_launch(machine, n, dtype, inputs)
        sfu = _transcendental_ops_per_element(case.variant) * float(n)
        return streaming_plan(machine, case.variant or "elementwise", "elementwise", dtype, bytes_read=inputs * n * eb,
                              bytes_written=n * eb, flop=float(n), sfu_ops=sfu, num_ctas=ctas,
                              threads_per_cta=threads, bytes_in_flight_per_thread=in_flight)
    rows, cols = case.rows, case.cols
    if case.library == "torch":  # the framework's own kernel
        ctas, threads, in_flight = framework_row_launch(machine, case.op, rows, cols, dtype)
    else:
        ctas, threads, in_flight = row_launch(machine, rows, cols, dtype)
    sfu = float(rows) * cols if case.op == "softmax" else 0.0
    reread = 2.0 if case.op == "softmax" else 1.0
    return streaming_plan(machine, case.op, case.op, dtype, bytes_read=rows * cols * eb, bytes_written=rows * cols * eb,
                          flop=4.0 * rows * cols, sfu_ops=sfu, num_ctas=ctas, threads_per_cta=threads,
                          bytes_in_flight_per_thread=in_flight, l2_reread_fraction=reread)


SCALAR_ROWWISE_VARIANTS = ("scalar_rowwise", "silu_mul_scalar_rowwise")
"""Variants run by one-CTA-per-row kernels with scalar loads (:func:`scalar_row_launch`): a norm
(rmsnorm, layernorm) or the fused SwiGLU activation ``silu(x[:, :d]) * x[:, d:]``."""


def _scalar_rowwise_plan(case, machine: Machine):
    """A row kernel with scalar loads over ``rows x cols`` (tokens x hidden). A norm reads its row
    from DRAM, reduces it, then re-reads the row (on chip) with the weight vector and writes the
    output: one DRAM read and write per element, two more on-chip reads. The fused SwiGLU reads two
    inputs per output element (``cols`` is the output width d) and takes one exponential each."""
    if not case.rows or not case.cols:
        raise ValueError(f"case {case.case_id}: variant {case.variant} needs rows and cols")
    dtype = case.dtype or "fp32"
    eb = DTYPE_BYTES[dtype]
    n = case.rows * case.cols
    if case.variant == "silu_mul_scalar_rowwise":
        ctas, threads, in_flight = scalar_row_launch(case.rows, case.cols, dtype, loads_per_element=2)
        return streaming_plan(machine, "silu_and_mul", case.op, dtype, bytes_read=2.0 * n * eb, bytes_written=n * eb,
                              flop=4.0 * n, sfu_ops=float(n), num_ctas=ctas, threads_per_cta=threads,
                              bytes_in_flight_per_thread=in_flight,
                              serial_warp_instructions_per_cta=scalar_row_serial_instructions(
                                  "silu_and_mul", case.cols, machine.warp_size))
    # the norm's first loop has its x in flight, its second x again and the weight together: over its
    # round trips (one per element in each loop), 1.5 loads each; between the loops, the CTA sums the
    # row's squares (one block reduction)
    ctas, threads, in_flight = scalar_row_launch(case.rows, case.cols, dtype, loads_per_element=1.5)
    return streaming_plan(machine, case.op, case.op, dtype, bytes_read=n * eb, bytes_written=n * eb, flop=4.0 * n,
                          sfu_ops=0.0, num_ctas=ctas, threads_per_cta=threads, bytes_in_flight_per_thread=in_flight,
                          l2_reread_fraction=2.0, block_reductions_per_cta=1,
                          serial_warp_instructions_per_cta=scalar_row_serial_instructions(
                              "norm", case.cols, machine.warp_size))


def unfused_rmsnorm_plans(case, machine: Machine) -> list:
    """The plans of an RMSNorm written as separate eager PyTorch kernels, as the workloads' eager
    lowering runs it (:func:`gpusim.workload.expand.eager_rmsnorm_ops`). The benchmark builds the module
    without a dtype (Liger-Kernel benchmark_rms_norm.py: the weight is nn.Parameter(torch.ones(hidden)),
    FP32), so the weight product promotes to FP32 and writes 4 bytes per element."""
    from gpusim.workload.expand import eager_rmsnorm_ops

    ops = eager_rmsnorm_ops(case.rows, case.cols, gpusim_dtype(case.dtype), weight_dtype="fp32")
    return [plan for _, op, _ in ops for plan in map_op(op, machine)]


def _unfused_rmsnorm_s(case, machine: Machine) -> float:
    """The eager RMSNorm's kernels (:func:`unfused_rmsnorm_plans`) timed back to back: each kernel plus
    the device gap between launches."""
    plans = unfused_rmsnorm_plans(case, machine)
    return len(plans) * machine.graph_kernel_launch_s + sum(simulate_kernel(plan, machine).time_s for plan in plans)


L2_BENCHMARK_THREADS_PER_BLOCK = 1024
"""gpu-benches ``gpu-l2-cache`` launches blocks of 1,024 threads (``measure``: ``blockSize = 1024``)."""


def _l2_case(case, machine: Machine) -> float:
    """Seconds per byte read when every SM repeatedly reads a buffer of ``working_set_bytes``: the
    hits stream at L2 bandwidth and the misses at DRAM bandwidth, one after the other (each thread's
    sweep waits on its own loads), with the hit share of a cyclic sweep through the hashed,
    set-associative L2 (:meth:`Machine.cyclic_l2_hit_fraction`), or, where the row states the
    benchmark's ``block_bytes``, at least the share of :func:`l2_shared_slice_hit_fraction`."""
    hit = machine.cyclic_l2_hit_fraction(case.working_set_bytes)
    if case.block_bytes:
        hit = max(hit, l2_shared_slice_hit_fraction(machine, case.working_set_bytes, case.block_bytes))
    return hit / machine.l2_achievable_bytes_per_s + (1.0 - hit) / machine.dram_achievable_bytes_per_s


def l2_shared_slice_hit_fraction(machine: Machine, working_set_bytes: float, block_bytes: float) -> float:
    """Hit share from blocks that read the same slice at the same time, whatever the L2's capacity.

    The gpu-benches L2 benchmark hands block i the slice i mod S of its footprint (S = footprint /
    block_bytes slices) and launches far more blocks than fit, in order, so the SMs hold R
    consecutive blocks that start together and sweep their slices at the same pace. With S < R,
    every slice is read by R / S blocks at once, and only the first one's loads miss: the hit share
    is 1 - S / R. R is the SMs times the blocks one SM holds (:func:`ctas_per_unit`): the kernel
    unrolls its loads, so each thread keeps block_bytes / 1024 bytes of them in registers, and at
    least one block fits (the compiler caps the registers of a 1,024-thread block at what the SM has)."""
    slices = working_set_bytes / block_bytes
    registers = min(machine.max_registers_per_thread,
                    math.ceil(block_bytes / L2_BENCHMARK_THREADS_PER_BLOCK / REGISTER_BYTES))
    per_unit, _ = ctas_per_unit(machine, L2_BENCHMARK_THREADS_PER_BLOCK, registers, 0.0)
    resident = max(1, per_unit) * machine.num_units
    return max(0.0, 1.0 - slices / resident)


def _chase_latency_s(working_set: float, machine: Machine, device, bypass_l1: bool = False) -> float:
    """Latency of one load of a dependent chase over ``working_set`` bytes: L1 while it fits there;
    past it, the L2 (near partition while the set fits one, else far) for the share of loads the L2's
    hashed sets keep (:meth:`Machine.cyclic_l2_hit_fraction`, as for the L2 bandwidth sweeps), DRAM
    with its page walks for the rest."""
    if working_set <= machine.l1_capacity_bytes and not bypass_l1:
        return machine.l1_latency_s
    dram = machine.random_access_dram_latency_s(working_set)
    hit = machine.cyclic_l2_hit_fraction(working_set)
    if machine.kind == "gpu":
        l2 = device.l2
        l2_latency = l2.near_latency_s if working_set <= l2.capacity_bytes / l2.num_partitions else l2.far_latency_s
    else:
        l2_latency = machine.l2_latency_s
    return hit * l2_latency + (1.0 - hit) * dram


def _to_metric(case, seconds: float) -> float:
    """Convert a simulated time into the case's metric."""
    metric = case.metric
    if metric in ("time_s", "latency_s"):
        return seconds
    if metric == "flop_per_s":
        if case.op == "attention":
            return attention_benchmark_flop(case) / seconds
        return matmul_flop(case) / seconds
    if metric == "bytes_per_s":
        if case.op == "l2_bandwidth":
            return 1.0 / seconds
        if case.op == "l1_bandwidth":
            return (case.working_set_bytes or 1.0) / seconds
        if case.op in ("memcpy_h2d", "memcpy_d2h"):
            return (case.num_bytes or COPY_BYTES) / seconds
        return _moved_bytes(case) / seconds
    raise ValueError(f"unknown metric {metric!r}")


BINARY_ELEMENTWISE_VARIANTS = ("add", "mul", "div", "pow", "silu_mul", "silu_mul_scalar_rowwise")
"""Elementwise variants that read two tensors (the others, e.g. ``add_scalar``, ``relu``, one)."""

COMPOSITE_TRANSCENDENTAL_OPS_PER_ELEMENT = {"silu_mul": 1, "pow_scalar": 1, "pow": 2}
"""Special-function-unit operations per element of the variants that are not one of the workload
functions (``TRANSCENDENTAL_FUNCTIONS``): SiLU times a tensor takes one exponential, a power one
(x ** s) or two (x ** y = exp2(y log2 x))."""


def _transcendental_ops_per_element(variant: str | None) -> int:
    """Special-function-unit operations per element of an elementwise row's variant."""
    if variant in COMPOSITE_TRANSCENDENTAL_OPS_PER_ELEMENT:
        return COMPOSITE_TRANSCENDENTAL_OPS_PER_ELEMENT[variant]
    return 1 if variant in TRANSCENDENTAL_FUNCTIONS else 0


def _elementwise_inputs(variant: str | None) -> int:
    """Input tensors of the published elementwise kernels (one output each)."""
    return 2 if variant in BINARY_ELEMENTWISE_VARIANTS else 1


def _moved_bytes(case) -> float:
    """Bytes a memory-bound case moves (each input read and each output written once): its
    bandwidth metric's numerator and its roofline's."""
    dtype = case.dtype or "fp32"
    eb = DTYPE_BYTES[dtype]
    if case.op == "stream":
        reads, writes = STREAM_KERNELS[case.variant]
        n = (case.num_bytes or STREAM_ARRAY_BYTES) // 8
        return (reads + writes) * n * 8.0
    if case.op == "elementwise":
        return (_elementwise_inputs(case.variant) + 1) * case.num_elements * eb
    return 2.0 * case.rows * case.cols * eb


def _companion_rows(kernels_csv, part: str) -> dict[str, dict[str, str]]:
    """The rows of ``<stem>_<part>.csv`` beside a kernels CSV, keyed by case id; empty when there is none."""
    import csv
    from pathlib import Path

    path = Path(kernels_csv)
    companion = path.with_name(f"{path.stem}_{part}.csv")
    if not companion.is_file():
        return {}
    with companion.open(newline="", encoding="utf-8") as fh:
        return {row["case_id"]: row for row in csv.DictReader(fh)}


def load_plan_rows(kernels_csv) -> dict[str, dict[str, str]]:
    """The exact plans written by ``gpusim measure`` beside its kernels CSV (``<stem>_plans.csv``),
    keyed by case id; empty when there is none (published measurements)."""
    return _companion_rows(kernels_csv, "plans")


def load_code_rows(kernels_csv) -> dict[str, dict[str, str]]:
    """What ``gpusim sass`` counted in each own kernel's compiled code (``<stem>_sass.csv``, see
    :mod:`gpusim.cuda_backend.code`), keyed by case id; empty when there is none."""
    return _companion_rows(kernels_csv, "sass")


def own_kernel_plan(case, row: dict[str, str], machine: Machine, code: dict[str, str] | None = None):
    """Rebuild the plan a measured own kernel ran with (gpusim's CUDA backend follows its plans), or
    raise ValueError if the rebuilt plan's grid or CTA size differs from the recorded one. With the
    kernel's ``code`` row (``kernels_sass.csv``, from its compiled machine code) for the same plan,
    the plan as that code runs it (:func:`gpusim.cuda_backend.code.plan_from_code_row`): what its
    warps issue and wait on between their round trips, and its compiled registers."""
    from gpusim.cuda_backend import plans as P
    from gpusim.cuda_backend.code import plan_from_code_row

    if case.op == "matmul":
        tile = Tile(int(row["block_m"]), int(row["block_n"]), int(row["block_k"]), int(row["num_stages"]),
                    int(row["num_warps"]), int(row["split_k"]), int(row["swizzle"]))
        plan = P.plan_for_gemm(machine, case.m, case.n, case.k, case.dtype, tile, case.batch or 1)
    elif case.op == "stream":
        plan = P.plan_for_stream(machine, case.variant, case.num_bytes // 8, case.occupancy_fraction or 1.0)
    elif case.op == "elementwise":
        plan = P.plan_for_elementwise(machine, case.variant, case.num_elements, case.dtype)
    elif case.op in ("softmax", "layernorm", "rmsnorm"):
        plan = P.plan_for_rows(machine, case.op, case.rows, case.cols, case.dtype)
    else:
        raise ValueError(f"no own-kernel plan for op {case.op}")
    if (plan.grid, plan.threads_per_cta) != (int(row["grid"]), int(row["threads_per_cta"])):
        raise ValueError(f"rebuilt plan {plan.grid}x{plan.threads_per_cta} differs from the measured "
                         f"{row['grid']}x{row['threads_per_cta']}")
    if code is None:
        return plan
    if code["plan_name"] != row["plan_name"]:
        raise ValueError(f"its kernels_sass.csv row counts the code of {code['plan_name']}, not of the measured "
                         f"{row['plan_name']} (a stale file: run gpusim sass again)")
    return plan_from_code_row(plan, code, machine)


def run_accuracy(cases: Iterable, calibrated: bool = True, include_excluded: bool = False,
                 plan_rows: dict[str, dict[str, str]] | None = None,
                 code_rows: dict[str, dict[str, str]] | None = None) -> tuple[list[CaseResult], list[Skipped]]:
    """Simulate every case. Cases with a row in ``plan_rows`` (own kernels measured by ``gpusim
    measure``) are simulated with exactly that plan, as their compiled code runs it where
    ``code_rows`` (``gpusim sass``) has the case; the others as the library would run them."""
    known = builtin_files("hwconfigs")
    machines: dict[str, tuple[Machine, object]] = {}
    results: list[CaseResult] = []
    skipped: list[Skipped] = []
    for case in cases:
        if case.excluded and not include_excluded:
            skipped.append(Skipped(case.case_id, case.gpu, "excluded by the dataset (flagged source)"))
            continue
        if case.gpu not in known:
            skipped.append(Skipped(case.case_id, case.gpu, "no hardware description"))
            continue
        if case.gpu not in machines:
            desc = load_hardware(case.gpu)
            machine = machine_of(desc)
            if not calibrated:
                machine = replace(machine, calibration=Calibration())
            machines[case.gpu] = (machine, desc.gpu if desc.kind != "cpu" else desc.cpu)
        machine, device = machines[case.gpu]
        measured = case.measured_value
        try:
            if plan_rows and case.case_id in plan_rows:
                plan = own_kernel_plan(case, plan_rows[case.case_id], machine, (code_rows or {}).get(case.case_id))
                seconds, roof_s = simulate_kernel(plan, machine).time_s + machine.graph_kernel_launch_s, None
            else:
                seconds, roof_s = simulate_case(case, machine, device)
        except Exception as exc:  # a case the model cannot express is reported, not hidden
            skipped.append(Skipped(case.case_id, case.gpu, f"cannot simulate: {exc}"))
            continue
        simulated = _to_metric(case, seconds)
        roofline = _to_metric(case, roof_s) if roof_s else None
        results.append(CaseResult(case.case_id, case.gpu, case.op, case.metric, measured, simulated, roofline,
                                  case.source))
    return results, skipped


@dataclass(frozen=True)
class Summary:
    group: str
    num_cases: int
    mape_fraction: float
    within_10_fraction: float
    within_25_fraction: float
    worst_case: str
    worst_error_fraction: float
    roofline_mape_fraction: float | None


def summarize(results: list[CaseResult], key=lambda r: "all") -> list[Summary]:
    groups: dict[str, list[CaseResult]] = {}
    for r in results:
        groups.setdefault(key(r), []).append(r)
    out = []
    for group, rows in sorted(groups.items()):
        errors = [abs(r.signed_error_fraction) for r in rows]
        worst = max(rows, key=lambda r: abs(r.signed_error_fraction))
        roof = [abs(e) for r in rows if (e := r.roofline_error_fraction) is not None]
        out.append(Summary(group, len(rows), statistics.fmean(errors),
                           sum(e <= 0.10 for e in errors) / len(errors), sum(e <= 0.25 for e in errors) / len(errors),
                           worst.case_id, worst.signed_error_fraction, statistics.fmean(roof) if roof else None))
    return out


def op_group(r: CaseResult) -> str:
    if r.op == "matmul":
        return "gemm"
    if r.op in ("elementwise", "stream", "softmax", "layernorm", "rmsnorm", "l2_bandwidth", "l1_bandwidth",
                "memcpy_h2d", "memcpy_d2h"):
        return "memory-bound"
    if r.op == "pointer_chase":
        return "latency"
    return r.op
