"""One kernel on one device: CTAs issued in waves by the CTA scheduler, each wave a fluid flow.

Per CTA, the model has
* compute time: FLOP on its pipe at the SM's rate shared by the CTAs on the busiest SM (and limited
  by how many warps the CTAs give the SM's schedulers; warp-synchronous MMA at the device's
  ``warp_mma_fraction`` of the matrix rate), and no faster than the SM's shared memory feeds the
  tensor cores the staged tiles (which caps small tiles), plus transcendental ops on the SFUs
  (overlapped with the math instead for warp-specialized kernels), plus the FP32 instructions the
  same warps execute between their products (fused attention's online softmax);
* memory: bytes through L2 (all loads and stores), the wave's DRAM bytes (L2 misses and writes) and,
  on a device with a memory-side cache, the L2 misses it serves, shared with every other active CTA
  as fluid flows;
* latency: a CTA can keep only ``bytes_in_flight`` of loads outstanding, so it makes one round trip
  of the average latency per ``bytes_in_flight`` it loads (Little's law; its stores are posted and
  travel with those trips, and a streaming CTA also lives a calibrated turnaround, plus, where its
  threads compute between their loads, the issue time of its SM's instructions meanwhile and the
  latency of its block-wide reductions); and every wave of a GEMM-like kernel first waits
  one DRAM latency to fill its pipeline plus the description's calibrated fixed cost per wave
  (streaming kernels pay the latency once) and, after its main loop,
  drains its output tiles (at L2 bandwidth, plus one L2 latency) before the next wave's CTAs start;
  a persistent kernel (Hopper and Blackwell library GEMMs) fills once, and between its waves only
  the drain's bandwidth term remains; a streaming kernel that stores waits one L2 latency after its
  last wave for its last stores.
Software pipelining overlaps a CTA's loads with its math, so a CTA progresses at the slowest of these
rates (a CTA without it, one pipeline stage, waits for its loads: its math and its loads add up); the
wave ends when its CTAs end, and the next wave starts (wave quantization and tails emerge).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import simpy

from gpusim.engine.fluid import FluidSystem
from gpusim.engine.machine import NATIVE_ONLY_MATRIX_DTYPES, Machine

if TYPE_CHECKING:
    from gpusim.mapping.plan import KernelPlan


UNPIPELINED_LOADS = "unpipelined_loads"
"""The compute limiter of a CTA that waits for its own loads (no software pipelining): its time
is the math plus the unhidden loads, so the kernel counts as latency-bound."""


@dataclass(frozen=True)
class CtaProfile:
    count: int
    compute_s: float
    l2_bytes: float
    dram_bytes: float
    latency_cap_rate: float
    """Max progress per second allowed by Little's law (1 / seconds per CTA)."""
    llc_bytes: float = 0.0
    """Bytes per CTA that miss L2 and are served by the memory-side cache (not part of ``dram_bytes``)."""
    dram_capacity_bytes: float | None = None
    """DRAM capacity the CTA's ``dram_bytes`` use at their read/write mix (None: ``dram_bytes``)."""
    compute_limiter: str = "matrix"
    """What sets ``compute_s``: the ``matrix`` or ``vector`` pipe, ``shared_memory`` (feeding the
    tensor cores), the ``sfu`` (transcendentals), or ``unpipelined_loads`` (math plus the loads an
    unpipelined CTA waits for)."""

    @property
    def max_rate(self) -> float:
        rate = 1.0 / self.compute_s if self.compute_s > 0 else math.inf
        return min(rate, self.latency_cap_rate)

    @property
    def own_limiter(self) -> str:
        compute_rate = 1.0 / self.compute_s if self.compute_s > 0 else math.inf
        if compute_rate > self.latency_cap_rate or self.compute_limiter == UNPIPELINED_LOADS:
            return "latency"
        return "compute"


def _ctas_on_busiest_unit(plan: KernelPlan, machine: Machine, count: int) -> int:
    """CTAs resident on the busiest SM when ``count`` CTAs run (the SMs are filled evenly)."""
    return min(max(1, math.ceil(count / machine.num_units)), plan.ctas_per_unit)


def _cta_compute_and_in_flight(plan: KernelPlan, machine: Machine, count: int) -> tuple[float, float, str]:
    """(compute seconds of one CTA, its bytes in flight, what sets the compute seconds) when ``count``
    CTAs are resident."""
    per_busiest_unit = _ctas_on_busiest_unit(plan, machine, count)
    warps = math.ceil(plan.threads_per_cta / machine.warp_size)
    issue_share = machine.issue_share(per_busiest_unit * warps)
    if plan.pipe == "matrix":
        unit_rate = machine.matrix_rate_per_unit(plan.dtype) or 0.0
        if plan.warp_mma or not (machine.native_mma or plan.dtype in NATIVE_ONLY_MATRIX_DTYPES):
            unit_rate *= machine.warp_mma_fraction
    elif plan.pipe == "vector":
        rate = machine.simt_gemm_rate_per_unit if plan.tile is not None else machine.vector_rate_per_unit
        unit_rate = rate(plan.dtype) or 0.0
    else:
        unit_rate = math.inf
    cta_rate = unit_rate * issue_share / per_busiest_unit
    compute_s = plan.flop_per_cta / cta_rate * plan.issue_factor if plan.flop_per_cta > 0 else 0.0
    limiter = plan.pipe
    if plan.shared_operand_bytes_per_cta > 0:
        # the CTAs on the SM share its shared-memory bandwidth, at the SM's sustained efficiency
        shared_s = plan.shared_operand_bytes_per_cta * per_busiest_unit / machine.shared_bytes_per_s_per_unit
        if shared_s > compute_s:
            compute_s, limiter = shared_s, "shared_memory"
    if plan.sfu_ops_per_cta > 0:
        sfu_rate = machine.sfu_ops_per_cycle * machine.unit_clock_hz * issue_share / per_busiest_unit
        sfu_s = plan.sfu_ops_per_cta / sfu_rate
        if sfu_s > compute_s:
            limiter = "sfu"
        compute_s = max(compute_s, sfu_s) if plan.sfu_overlaps_math else compute_s + sfu_s
    if plan.vector_ops_per_cta > 0:
        # one FP32 instruction per element operation: half the vector pipe's FLOP rate (FMA = 2 FLOP)
        ops_rate = (machine.vector_rate_per_unit("fp32") or 0.0) / 2.0 * issue_share / per_busiest_unit
        if ops_rate > 0:
            vector_s = plan.vector_ops_per_cta / ops_rate
            if vector_s > compute_s:
                limiter = "vector"
            compute_s = max(compute_s, vector_s) if plan.vector_ops_overlap_math else compute_s + vector_s
    if not plan.pipelined and plan.l2_bytes_per_cta > 0:
        # Without software pipelining a CTA's loads and its math take turns: its own math, its bytes
        # at its SM's share of L2 bandwidth, and one L2 latency per load it waits for add up. Other
        # CTAs on the SM may compute while it waits, so the SM is never slower than its shared math.
        load_s = (plan.l2_bytes_per_cta * machine.num_units / machine.l2_achievable_bytes_per_s
                  + plan.load_waits_per_cta * machine.l2_latency_s)
        serial_s = compute_s / per_busiest_unit + load_s
        if serial_s > compute_s:
            compute_s, limiter = serial_s, UNPIPELINED_LOADS
    in_flight = plan.bytes_in_flight_per_cta
    if machine.max_bytes_in_flight_per_unit is not None:
        in_flight = min(in_flight, machine.max_bytes_in_flight_per_unit / per_busiest_unit)
    return compute_s, in_flight, limiter


class TripIssue(NamedTuple):
    """What one warp of a CTA does between two of its round trips besides waiting for them."""

    issue_s: float
    """Seconds it issues (one warp instruction per cycle at its scheduler)."""
    warps_per_scheduler: int
    """Warps that share its scheduler."""
    stall_s: float = 0.0
    """Seconds it waits on its own instructions' results, issuing nothing, while the others may."""


NO_TRIP_ISSUE = TripIssue(0.0, 1)


def _latency_cap_rate(in_flight, l2_bytes: float, dram_bytes, machine: Machine, count=1, llc_bytes=0.0,
                      store_bytes: float = 0.0, turnaround_s: float = 0.0, capacity_per_dram_byte=1.0,
                      trip_issue: TripIssue = NO_TRIP_ISSUE, delayed_hits: bool = False):
    """Little's law: a CTA with ``in_flight`` outstanding load bytes makes one round trip per
    ``in_flight`` bytes it loads, each taking the average latency of where its requests are served
    (L2, the memory-side cache's ``llc_bytes``, DRAM), and lives ``turnaround_s`` besides (a
    streaming CTA's launch and retirement); its ``store_bytes`` are posted and travel with those
    trips. The cap is on progress per second (1 = one CTA's work). Works on scalars and on numpy
    arrays of waves.

    DRAM latency grows with the load on DRAM: L = L0 (1 + s rho), rho the DRAM utilization (the
    wave's DRAM bytes per second over the bandwidth achievable at its read/write mix, whose
    ``capacity_per_dram_byte`` is the capacity one byte uses) and s the calibrated ``dram_loaded_latency_slope``
    (0: the idle latency at any load). When Little's law binds, the wave's ``count`` CTAs move
    R = N D / T(R) DRAM bytes per second (D DRAM bytes per CTA, T = turnaround + trips x L(R)), a
    quadratic in R solved in closed form; a wave that saturates DRAM sees its latency at rho = 1.

    ``trip_issue`` (:class:`TripIssue`) describes a kernel whose warps issue between their own round
    trips while the others wait (:attr:`KernelPlan.warp_instructions_per_trip`): each trip then lasts
    its latency, the warp's stalls on its own results (:attr:`KernelPlan.warp_stall_cycles_per_trip`)
    and its residence at its scheduler (:func:`scheduler_residence_s`), which depends on the first
    two, so the closed form is solved again with the residence at the loaded latency.

    With ``delayed_hits`` (:attr:`KernelPlan.delayed_hits`) every load waits the latency of a miss:
    the L2 hits are requests for lines whose miss another CTA started moments before."""
    with np.errstate(divide="ignore", invalid="ignore"):
        hit = np.clip(1.0 - (dram_bytes + llc_bytes) / l2_bytes, 0.0, 1.0) if l2_bytes > 0 \
            else np.zeros_like(dram_bytes)
        llc = np.clip(llc_bytes / l2_bytes, 0.0, 1.0 - hit) if l2_bytes > 0 else np.zeros_like(dram_bytes)
        llc_latency = llc * (machine.llc_latency_s or 0.0)
        miss = 1.0 - hit - llc
        if delayed_hits:
            hit, miss = np.zeros_like(hit), miss + hit
        latency = hit * machine.l2_latency_s + llc_latency + miss * machine.dram_latency_s
        traffic = np.maximum(l2_bytes, dram_bytes)
        loads = np.maximum(traffic - store_bytes, 0.0)
        trips = np.where(in_flight > 0, loads / in_flight, 0.0)
        issue_s, warps_per_scheduler, stall_s = trip_issue
        residence = scheduler_residence_s(issue_s, warps_per_scheduler, latency + stall_s)
        if machine.calibration.dram_loaded_latency_slope > 0:
            bandwidth = machine.dram_achievable_bytes_per_s / capacity_per_dram_byte
            # T = turnaround + trips (c + w + d R), c the idle average latency, w the residence at the
            # scheduler, d the latency's growth per DRAM byte/s
            d = miss * (machine.loaded_dram_latency_s(1.0) - machine.dram_latency_s) / bandwidth
            idle = latency
            for _ in range(2 if issue_s > 0 else 1):
                a, b = trips * d, turnaround_s + trips * (idle + stall_s + residence)
                demand = count * dram_bytes
                root = np.where(a > 0, (np.sqrt(b ** 2 + 4.0 * a * demand) - b) / (2.0 * a),
                                np.where(b > 0, demand / b, np.inf))
                utilization = np.minimum(root, bandwidth) / bandwidth
                latency = hit * machine.l2_latency_s + llc_latency + miss * machine.loaded_dram_latency_s(utilization)
                residence = scheduler_residence_s(issue_s, warps_per_scheduler, latency + stall_s)
        lifetime = turnaround_s + trips * (latency + stall_s + residence)
        return np.where((traffic > 0) & (lifetime > 0), 1.0 / lifetime, np.inf)


def scheduler_residence_s(issue_s: float, warps_per_scheduler: int, delay_s):
    """Seconds a warp spends at its scheduler per loop (queueing for it, then issuing for ``issue_s``)
    when ``warps_per_scheduler`` warps each alternately issue there and wait ``delay_s`` for their
    loads, all waiting at once: exact mean-value analysis of that closed loop (Reiser and Lavenberg,
    J. ACM 27(2), 1980), one queueing station and one delay. Between the two bounds: ``issue_s`` with
    few warps or a long delay, all the warps' issue (W x ``issue_s``) when the scheduler saturates.
    Works on scalars and numpy arrays of delays; 0 for ``issue_s`` 0."""
    if issue_s <= 0:
        return np.zeros_like(np.asarray(delay_s, dtype=np.float64))
    queue = np.zeros_like(np.asarray(delay_s, dtype=np.float64))
    residence = queue
    for warps in range(1, max(1, int(warps_per_scheduler)) + 1):
        residence = issue_s * (1.0 + queue)
        queue = warps * residence / (residence + delay_s)
    return residence


def trip_issue(plan: KernelPlan, machine: Machine, count: int) -> TripIssue:
    """What one warp issues and stalls between two of its round trips (:attr:`KernelPlan.
    warp_instructions_per_trip`, :attr:`KernelPlan.warp_stall_cycles_per_trip`) when ``count`` CTAs
    run, and the warps per scheduler; nothing for the other plans."""
    if plan.warp_instructions_per_trip <= 0 and plan.warp_stall_cycles_per_trip <= 0:
        return NO_TRIP_ISSUE
    per_busiest_unit = _ctas_on_busiest_unit(plan, machine, count)
    warps_on_unit = per_busiest_unit * math.ceil(plan.threads_per_cta / machine.warp_size)
    return TripIssue(plan.warp_instructions_per_trip / machine.unit_clock_hz,
                     math.ceil(warps_on_unit / machine.num_schedulers_per_unit),
                     plan.warp_stall_cycles_per_trip / machine.unit_clock_hz)


def dram_capacity_per_byte(plan: KernelPlan, machine: Machine, dram_bytes_per_cta):
    """DRAM capacity each of a CTA's DRAM bytes uses at the read/write mix of its traffic (its stores
    are the writes; see :meth:`Machine.dram_mix_cost`). Scalar or array of waves."""
    if plan.store_bytes_per_cta <= 0 or machine.calibration.dram_mixed_traffic_loss_fraction <= 0:
        return np.ones_like(np.asarray(dram_bytes_per_cta, dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        writes = np.where(dram_bytes_per_cta > 0, np.minimum(1.0, plan.store_bytes_per_cta / dram_bytes_per_cta), 0.0)
    return machine.dram_mix_cost(writes)


def cta_turnaround_s(plan: KernelPlan, machine: Machine) -> float:
    """A streaming CTA's fixed lifetime besides its round trips (GEMM-like kernels pay CTA set-up in
    their calibrated per-wave cost instead)."""
    return 0.0 if plan.prologue_per_wave else machine.calibration.cta_turnaround_cycles / machine.unit_clock_hz


def serial_issue_s(plan: KernelPlan, machine: Machine, count: int) -> float:
    """Seconds a CTA spends issuing its ``serial_warp_instructions_per_cta`` when ``count`` CTAs run:
    no load of its SM's warps is in flight meanwhile, so this adds to its lifetime. Each scheduler that
    has a warp issues one warp instruction per cycle, and the SM's resident CTAs share them."""
    if plan.serial_warp_instructions_per_cta <= 0:
        return 0.0
    per_busiest_unit = _ctas_on_busiest_unit(plan, machine, count)
    warps_on_unit = per_busiest_unit * math.ceil(plan.threads_per_cta / machine.warp_size)
    issue_rate = machine.num_schedulers_per_unit * machine.unit_clock_hz * machine.issue_share(warps_on_unit)
    return plan.serial_warp_instructions_per_cta * per_busiest_unit / issue_rate


def block_reduction_s(machine: Machine) -> float:
    """Seconds of one block-wide sum in a CTA, as the first-generation vLLM row kernels write it
    (``blockReduceSum``, then a broadcast through shared memory): each warp adds its lanes' values in
    log2(warp size) dependent butterfly shuffles, lane 0 stores the warp's sum to shared memory, a
    barrier, the first warp loads the sums and shuffles log2(warp size) times again, thread 0 stores
    the result, a barrier, and every thread loads it: 2 log2(warp size) shuffles and two
    store-then-load exchanges in series, each step about one shared-memory latency (a shuffle moves
    its operands through the SM's shared-memory crossbar; an estimate, as no shuffle latency is in the
    references). 14 steps on a 32-thread warp: 0.25 us on an A100, 0.20 us on an H100 SXM."""
    shuffles = 2 * math.log2(machine.warp_size)
    return (shuffles + 4) * machine.shared_latency_s


def cta_serial_s(plan: KernelPlan, machine: Machine, count: int) -> float:
    """A streaming CTA's lifetime besides its round trips when ``count`` CTAs run: its fixed
    turnaround, the issue time of its serial instructions and its block reductions."""
    return (cta_turnaround_s(plan, machine) + serial_issue_s(plan, machine, count)
            + plan.block_reductions_per_cta * block_reduction_s(machine))


def cta_profile(plan: KernelPlan, machine: Machine, count: int, dram_bytes_per_cta: float,
                llc_bytes_per_cta: float = 0.0) -> CtaProfile:
    compute_s, in_flight, limiter = _cta_compute_and_in_flight(plan, machine, count)
    cost = float(dram_capacity_per_byte(plan, machine, dram_bytes_per_cta))
    latency_cap = float(_latency_cap_rate(in_flight, plan.l2_bytes_per_cta, dram_bytes_per_cta, machine, count,
                                          llc_bytes_per_cta, plan.store_bytes_per_cta,
                                          cta_serial_s(plan, machine, count),
                                          cost, trip_issue(plan, machine, count), plan.delayed_hits))
    return CtaProfile(count=count, compute_s=compute_s, l2_bytes=plan.l2_bytes_per_cta,
                      dram_bytes=dram_bytes_per_cta, latency_cap_rate=latency_cap, compute_limiter=limiter,
                      llc_bytes=llc_bytes_per_cta, dram_capacity_bytes=dram_bytes_per_cta * cost)


def gemm_wave_fill_s(machine: Machine) -> float:
    """Seconds every wave of a GEMM-like kernel (the first of a persistent one) waits before its main
    loop runs: one DRAM latency to fill its pipeline, plus the calibrated fixed cost of a wave
    (``gemm_wave_overhead_s``: CTA dispatch and set-up, the last stores' completion), which no
    overlap hides."""
    return machine.dram_latency_s + machine.calibration.gemm_wave_overhead_s


def wave_drain_s(plan: KernelPlan, machine: Machine, count: int, last: bool = True) -> float:
    """Seconds a GEMM-like wave of ``count`` CTAs spends after its main loop that no overlap hides:
    its output tiles drain at L2 bandwidth (or the busiest SM's at that SM's own load/store bandwidth,
    if slower), then one L2 latency. Between two waves of a persistent kernel (``last`` False) the
    math warps hand their C tiles to the asynchronous bulk store while the next tile's loads are
    already in flight, so the latency is hidden and only the bandwidth term remains. Zero for plans
    without epilogue stores. A streaming kernel's stores are posted and travel with its loads, but
    the kernel completes only once its last ones are acknowledged: its last wave waits one L2
    latency, as a GEMM's does."""
    if not plan.prologue_per_wave:
        return machine.l2_latency_s if last and plan.store_bytes_per_cta > 0 else 0.0
    if plan.epilogue_bytes_per_cta <= 0:
        return 0.0
    on_busiest = _ctas_on_busiest_unit(plan, machine, count)
    drain = max(count * plan.epilogue_bytes_per_cta / machine.l2_achievable_bytes_per_s,
                on_busiest * plan.epilogue_bytes_per_cta / machine.l1_bytes_per_s_per_unit)
    return drain if plan.persistent and not last else machine.l2_latency_s + drain


def stream_k_fixup_s(plan: KernelPlan, machine: Machine, slots: int) -> float:
    """Seconds a stream-K tail (see :attr:`KernelPlan.tail_work_fraction`) spends adding up its
    partial tiles after its main loop: each of the ``slots`` CTAs stores one FP32 partial tile and
    each leftover tile's owner reads the partials of the other CTAs that shared it (slots / tiles of
    them), through L2: the slower of all these bytes at L2 bandwidth and the owner's reads at its
    SM's load/store bandwidth, then one L2 latency for the partials to become visible. 0 without a tail."""
    if plan.tail_work_fraction >= 1.0 or plan.stream_k_partial_bytes <= 0:
        return 0.0
    sharers = 1.0 / plan.tail_work_fraction  # CTAs per leftover tile
    partial = plan.stream_k_partial_bytes
    moved = slots * partial * (2.0 - plan.tail_work_fraction)  # every CTA writes one; owners read the rest
    owner = max(1.0, sharers - 1.0) * partial / machine.l1_bytes_per_s_per_unit
    return max(moved / machine.l2_achievable_bytes_per_s, owner) + machine.l2_latency_s


def run_fill_and_drain_s(plan: KernelPlan, machine: Machine, count: int, num_waves: int, first: bool,
                         last: bool) -> tuple[float, float]:
    """(pipeline fills, exposed epilogue drains) in seconds of ``num_waves`` consecutive waves of
    ``count`` CTAs, ``first`` and ``last`` saying whether they include the kernel's first and last
    wave. A one-CTA-per-tile GEMM-like kernel fills and drains every wave; a streaming kernel fills
    once and waits for its last stores; a persistent kernel fills once and waits for its stores' L2
    latency only after its last wave (see :func:`wave_drain_s`), which, for a stream-K tail, first
    adds up its partial tiles (:func:`stream_k_fixup_s`) and stores only the leftover tiles."""
    if num_waves <= 0:
        return 0.0, 0.0
    if plan.prologue_per_wave and not plan.persistent:
        return gemm_wave_fill_s(machine) * num_waves, wave_drain_s(plan, machine, count) * num_waves
    fill = gemm_wave_fill_s(machine) if plan.prologue_per_wave else machine.dram_latency_s
    drain = wave_drain_s(plan, machine, count, last=False) * (num_waves - last)
    if last:
        stores = max(1, round(count * plan.tail_work_fraction))
        drain += stream_k_fixup_s(plan, machine, count) + wave_drain_s(plan, machine, stores)
    return (fill if first else 0.0), drain


@dataclass(frozen=True)
class WaveGroup:
    """Consecutive waves simulated as one flow (identical full waves of a streaming kernel)."""

    first_wave: int
    num_waves: int
    count: int
    dram_bytes_per_cta: float
    """DRAM bytes per CTA's worth of work (a full CTA's; a stream-K tail's CTAs do ``work`` of it)."""
    prologue_s: float
    """The waves' pipeline fills (one DRAM latency per GEMM-like wave; a streaming kernel's once)."""
    drain_s: float = 0.0
    """The waves' epilogue drains (see wave_drain_s)."""
    llc_bytes_per_cta: float = 0.0
    """L2 misses served by the memory-side cache, per CTA's worth of work."""
    work: float = 1.0
    """Work of the group in full waves' worth: ``num_waves``, less what a stream-K tail's CTAs do not do."""


def wave_groups(plan: KernelPlan, machine: Machine) -> list[WaveGroup]:
    """Consecutive identical waves (same CTA count, same DRAM bytes) merged into one group. In the
    fluid model such a run of waves costs the same as its waves one after another: each wave of a
    GEMM-like kernel still pays its own pipeline fill and epilogue drain (``prologue_s`` covers all of
    them)."""
    slots = plan.ctas_per_unit * machine.num_units
    groups: list[WaveGroup] = []
    remaining = plan.grid
    i = 0
    waves = plan.wave_dram_bytes
    llc = plan.wave_llc_bytes or (0.0,) * len(waves)
    tail = plan.tail_work_fraction
    while i < len(waves):
        count = min(slots, remaining)
        run = 1
        # a stream-K tail is a group of its own
        while (i + run < len(waves) - (tail < 1.0) and remaining - run * slots >= slots
               and abs(waves[i + run] - waves[i]) <= 1e-9 * max(1.0, waves[i])
               and abs(llc[i + run] - llc[i]) <= 1e-9 * max(1.0, llc[i])):
            run += 1
        last = i + run == len(waves)
        prologue, drain = run_fill_and_drain_s(plan, machine, count, run, first=i == 0, last=last)
        work = run * (tail if last else 1.0)
        dram_per_cta = sum(waves[i:i + run]) / (count * work)
        groups.append(WaveGroup(i, run, count, dram_per_cta, prologue, drain, sum(llc[i:i + run]) / (count * work),
                                work))
        remaining -= count * run
        i += run
    return groups


def estimate_kernel_s(plan: KernelPlan, machine: Machine) -> float:
    """Closed-form time of a kernel running alone (the same physics as the DES, no event loop),
    vectorized over waves. Used to rank tile candidates; :func:`simulate_kernel` gives the simulated
    time (equal to this for a kernel alone on the device)."""
    waves = np.asarray(plan.wave_dram_bytes, dtype=np.float64)
    slots = plan.ctas_per_unit * machine.num_units
    counts = np.full(len(waves), float(slots))
    counts[-1] = plan.grid - slots * (len(waves) - 1)
    compute = np.empty(len(waves))
    in_flight = np.empty(len(waves))
    lifetime = np.empty(len(waves))  # a CTA's fixed lifetime besides its round trips
    for count in np.unique(counts):
        c, f, _ = _cta_compute_and_in_flight(plan, machine, int(count))
        compute[counts == count], in_flight[counts == count] = c, f
        lifetime[counts == count] = cta_serial_s(plan, machine, int(count))
    work = np.ones(len(waves))
    work[-1] = plan.tail_work_fraction
    dram = waves / (counts * work)
    llc = np.asarray(plan.wave_llc_bytes or np.zeros(len(waves)), dtype=np.float64) / (counts * work)
    l2 = plan.l2_bytes_per_cta
    cost = dram_capacity_per_byte(plan, machine, dram)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(compute > 0, 1.0 / compute, np.inf)
        if trip_issue(plan, machine, slots) != NO_TRIP_ISSUE:  # the scheduler's share depends on the CTAs per SM
            cap = np.empty(len(waves))
            for count in np.unique(counts):
                at = counts == count
                cap[at] = _latency_cap_rate(in_flight[at], l2, dram[at], machine, counts[at], llc[at],
                                            plan.store_bytes_per_cta, lifetime[at], cost[at],
                                            trip_issue(plan, machine, int(count)), plan.delayed_hits)
        else:
            cap = _latency_cap_rate(in_flight, l2, dram, machine, counts, llc, plan.store_bytes_per_cta, lifetime,
                                    cost, delayed_hits=plan.delayed_hits)
        rate = np.minimum(rate, cap)
        rate = np.minimum(rate, np.where(dram > 0, machine.dram_achievable_bytes_per_s / (counts * dram * cost), np.inf))
        if plan.wave_llc_bytes:
            rate = np.minimum(rate, np.where(llc > 0, machine.llc_achievable_bytes_per_s / (counts * llc), np.inf))
        if l2 > 0:
            rate = np.minimum(rate, machine.l2_achievable_bytes_per_s / (counts * l2))
        seconds = np.where(rate > 0, work / rate, np.inf)
    # every wave but the last is full
    full = run_fill_and_drain_s(plan, machine, slots, len(waves) - 1, first=True, last=False)
    tail = run_fill_and_drain_s(plan, machine, int(counts[-1]), 1, first=len(waves) == 1, last=True)
    return float(seconds.sum()) + sum(full) + sum(tail)


@dataclass(frozen=True)
class WaveSpan:
    start_s: float
    end_s: float
    num_ctas: int
    num_waves: int
    limiter: str


@dataclass(frozen=True)
class KernelTiming:
    time_s: float
    bound: str
    """compute | memory | latency (launch is decided by the timeline)."""
    dram_bytes: float
    l2_bytes: float
    dram_utilization_fraction: float
    spans: tuple[WaveSpan, ...]
    limiter_time_s: tuple[tuple[str, float], ...]
    compute_limiter: str | None = None
    """Of the time the CTAs' own work paced the kernel: what paced it most (``matrix`` or ``vector``
    pipe, ``shared_memory``, ``sfu``); None if memory or latency paced every wave."""

    @property
    def memory_limiter(self) -> str | None:
        """Of the time a shared memory level paced the kernel, the level that paced it most (``dram``,
        ``l2``, ``llc``); None if none did."""
        levels = {k: t for k, t in self.limiter_time_s if k in ("dram", "l2", "llc") and t > 0}
        return max(levels, key=lambda k: levels[k]) if levels else None


def _classify(limiter_time: dict[str, float], prologue_s: float) -> str:
    buckets = {"compute": 0.0, "memory": 0.0, "latency": prologue_s}
    for limiter, t in limiter_time.items():
        if limiter == "compute":
            buckets["compute"] += t
        elif limiter == "latency":
            buckets["latency"] += t
        else:
            buckets["memory"] += t
    return max(buckets, key=lambda k: buckets[k])


def simulate_kernel(plan: KernelPlan, machine: Machine) -> KernelTiming:
    """Run one kernel alone on the device in a SimPy environment of its own."""
    env = simpy.Environment()
    resources = {"dram": machine.dram_achievable_bytes_per_s, "l2": machine.l2_achievable_bytes_per_s}
    if plan.wave_llc_bytes:
        resources["llc"] = machine.llc_achievable_bytes_per_s
    fluid = FluidSystem(env, resources)
    spans: list[WaveSpan] = []
    limiter_time: dict[str, float] = {}
    compute_time: dict[str, float] = {}
    prologue_total = 0.0

    def run():
        nonlocal prologue_total
        for g in wave_groups(plan, machine):
            if g.prologue_s > 0:
                prologue_total += g.prologue_s
                yield env.timeout(g.prologue_s)
            p = cta_profile(plan, machine, g.count, g.dram_bytes_per_cta, g.llc_bytes_per_cta)
            start = env.now
            demands = {"dram": p.dram_bytes if p.dram_capacity_bytes is None else p.dram_capacity_bytes,
                       "l2": p.l2_bytes, "llc": p.llc_bytes}
            max_rate = p.max_rate
            if not math.isfinite(max_rate):
                # nothing but the shared resources limits these CTAs (no math, no load to wait for): a
                # cap above what the resources allow lets them bind
                allowed = [resources[r] / (g.count * d) for r, d in demands.items() if d > 0 and r in resources]
                max_rate = 2.0 * min(allowed) if allowed else 1e30
            flow = fluid.add_flow(count=g.count, work=g.work, demands=demands,
                                  max_rate=max_rate, label=f"wave{g.first_wave}")
            yield flow.done
            end = env.now
            if g.drain_s > 0:
                prologue_total += g.drain_s
                yield env.timeout(g.drain_s)
            own = p.own_limiter
            for k, t in flow.limiter_time_s.items():
                key = own if k == "max_rate" else k
                limiter_time[key] = limiter_time.get(key, 0.0) + t
                if key == "compute":
                    compute_time[p.compute_limiter] = compute_time.get(p.compute_limiter, 0.0) + t
            main = max(flow.limiter_time_s, key=lambda k: flow.limiter_time_s[k]) if flow.limiter_time_s else own
            spans.append(WaveSpan(start, end, g.count, g.num_waves, own if main == "max_rate" else main))

    env.process(run())
    env.run()
    elapsed = env.now
    return KernelTiming(
        time_s=elapsed,
        bound=_classify(limiter_time, prologue_total),
        dram_bytes=plan.dram_bytes,
        l2_bytes=plan.l2_bytes,
        dram_utilization_fraction=(plan.dram_bytes / (machine.dram_bandwidth_bytes_per_s * elapsed)) if elapsed > 0 else 0.0,
        spans=tuple(spans),
        limiter_time_s=tuple(sorted(limiter_time.items())),
        compute_limiter=max(compute_time, key=lambda k: compute_time[k]) if compute_time else None,
    )
