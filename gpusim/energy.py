"""Energy, power and power capping of a simulated run, from the description's ``power:`` block.

Pure functions over frozen values: a :class:`~gpusim.results.result.SimulationResult` and the hardware
description it ran on go in, energy figures (and, under a power cap, a stretched result) come out.

Energy model (per kernel record)
--------------------------------
* **math**: the FLOP the kernel really executes (``executed_flop``, padding and recomputation
  included) times the energy per FLOP of its pipe and dtype (``energy.tensor_j_per_flop`` for the
  matrix pipe, ``energy.vector_j_per_flop`` for CUDA cores / SIMD). A dtype the vector pipe has no
  entry for is computed in FP32 lanes (as the engine times it) and charged the FP32 energy; a dtype
  the tensor pipe lacks is charged its nearest wider tensor dtype. FP8 tensor math is also scaled by
  the calibration's ``fp8_tensor_energy_factor`` (fitted to sustained FP8 GEMMs where measured).
* **data movement**: DRAM bytes x ``dram_j_per_byte``; bytes through L2 (hits and misses) x
  ``l2_j_per_byte``; the same bytes once more through L1/shared memory x ``l1_j_per_byte`` (every
  byte a CTA loads lands in L1 or shared memory once: a lower bound, since GEMM tiles are re-read from
  shared memory by several warps); host copies: bytes x ``host_link_j_per_byte``, their bytes recovered
  from the copy time (time = latency + bytes / achievable bandwidth, as the engine times them).
  A collective of an op list: its wire bytes per GPU x ``peer_link_j_per_byte``, and twice them
  through DRAM (read to be sent, written where they arrive). The multi-GPU model engine does not
  record its collectives as kernels: their energy is not charged there (stated in the result).
* **static**: ``idle_w`` over the whole run (every second the device is powered, kernels or gaps).

Average power of a kernel = idle power + its dynamic energy / its time; the peak power of a step is the
highest kernel average power (kernel granularity: nothing finer is modelled). FLOP per joule uses the
model FLOP (``flop``), the work the user asked for.

Power capping (DVFS)
--------------------
A kernel whose average power exceeds ``tdp_w`` runs at a lower core clock f = r x f0. Model (stated,
the textbook CMOS approximation): dynamic power of the core domain is C V^2 f and, within the DVFS
range, voltage scales about linearly with frequency, so the *energy per operation* of core-domain work
(math, L1, L2) scales as r^2 and core-domain power as up to r^3 (Rabaey, Digital Integrated
Circuits, ch. 5; Weste & Harris, CMOS VLSI Design, sec. 5.2). DRAM and link energy per byte are in other
clock domains and do not change. Time: the kernel cannot finish faster than its math at the lower
clock nor than its L2 traffic at the lower clock, t(r) = max(t, t_math / r, t_l2 / r), where t_math is
its executed FLOP at the device's (calibrated) pipe rate, or its whole time when the kernel is
compute-bound (its own CTAs' pipes set it, however few SMs or cores it fills), and t_l2 its L2 bytes at
the achievable L2 bandwidth;
a memory-bound kernel therefore stretches little, a compute-bound one by 1/r. Power at r,
idle + (E_core r^2 + E_mem) / t(r), rises monotonically with r, so the throttled r is found by
bisection: the highest r in [MIN_CLOCK_FRACTION, 1] with power <= TDP. The cap acts per kernel
(GPU power controllers react within milliseconds, the length of one large kernel); kernels below TDP
are untouched, so a run whose every kernel is under TDP is exactly the uncapped run.
:func:`capped_kernel_time_s` gives one kernel's capped time, as ``gpusim accuracy`` scores measured
loops at steady state.
Published check: Chips and Cheese observed an H100 PCIe (350 W) dropping from 1,755 MHz to about
1,395 MHz (r = 0.79) under sustained load; ``tests/test_energy.py`` reports what this model predicts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from gpusim.config.hardware import DTYPES
from gpusim.engine.machine import Machine, machine_of
from gpusim.errors import SimulationError
from gpusim.results.result import KernelRecord, track_stage
from gpusim.units import format_duration, plural

MIN_CLOCK_FRACTION = 0.3
"""Lowest clock the power controller may choose, as a fraction of the rated clock (H100 SXM: about
the 0.6 GHz floor of ``nvidia-smi -q -d SUPPORTED_CLOCKS`` over the 1.98 GHz maximum)."""

HOST_LINK_OP_KINDS = ("host_to_device", "device_to_host")


@dataclass(frozen=True)
class KernelEnergy:
    """Energy of one kernel record (all launches of it), in joules, and its average power."""

    name: str
    time_s: float
    math_j: float
    l1_j: float
    l2_j: float
    dram_j: float
    link_j: float
    static_j: float
    core_j: float
    """Core clock domain dynamic energy (math + L1 + L2): what DVFS scales."""

    @property
    def data_movement_j(self) -> float:
        return self.l1_j + self.l2_j + self.dram_j + self.link_j

    @property
    def dynamic_j(self) -> float:
        return self.math_j + self.data_movement_j

    @property
    def total_j(self) -> float:
        return self.dynamic_j + self.static_j

    @property
    def avg_power_w(self) -> float:
        return self.total_j / self.time_s if self.time_s > 0 else 0.0


@dataclass(frozen=True)
class RunEnergy:
    """Energy of a whole run (one step for a model workload), for all its GPUs."""

    energy_j: float
    avg_power_w: float
    """Per device: energy / (time x devices)."""
    peak_power_w: float
    """Highest kernel average power of one device."""
    flop_per_j: float
    breakdown_j: dict[str, float]
    kernels: tuple[KernelEnergy, ...]
    num_devices: int
    tdp_w: float
    clock_fraction_min: float = 1.0
    """Lowest clock fraction the power cap chose for any kernel (1.0 = never throttled)."""
    num_throttled_kernels: int = 0
    notes: tuple[str, ...] = field(default=())


# --------------------------------------------------------------------------------------- helpers


def _device(hardware):
    return hardware.cpu if hardware.kind == "cpu" else hardware.gpu


def _num_devices(hardware, result) -> int:
    return max(1, int(getattr(result, "num_gpus", 1) or 1))


def math_j_per_flop(energy_spec, pipe: str, dtype: str) -> float:
    """Energy per FLOP of ``dtype`` on ``pipe`` (``matrix``, ``vector`` or ``none``)."""
    if pipe == "none":
        return 0.0
    if pipe == "matrix":
        table = energy_spec.tensor_j_per_flop
        if table.get(dtype) is not None:
            return table.get(dtype)
        wider = DTYPES[: DTYPES.index(dtype)] if dtype in DTYPES else DTYPES
        for d in reversed(wider):  # nearest wider dtype first
            if table.get(d) is not None:
                return table.get(d)
        # no tensor entry at all: the math runs like vector math
    table = energy_spec.vector_j_per_flop
    if table.get(dtype) is not None:
        return table.get(dtype)
    if table.get("fp32") is not None:
        return table.get("fp32")
    raise SimulationError(f"power.energy.vector_j_per_flop has no {dtype} or fp32 entry")


def _pipe_rate_flop_per_s(machine: Machine, pipe: str, dtype: str) -> float:
    if pipe == "matrix":
        rate = machine.matrix_rate_per_unit(dtype)
    elif pipe == "vector":
        rate = machine.vector_rate_per_unit(dtype)
    else:
        return 0.0
    return (rate or 0.0) * machine.num_units


def kernel_energy(record, power_spec, machine: Machine) -> KernelEnergy:
    """Energy of one KernelRecord (all its launches) on a device with ``power_spec``."""
    e = power_spec.energy
    plan = record.plan or {}
    repeat = max(1, int(record.repeat))
    static = power_spec.idle_w * record.time_s
    if record.on_link:
        factor = machine.calibration.dynamic_energy_factor
        per_launch = plan.get("link_bytes_per_launch")
        if record.op in HOST_LINK_OP_KINDS:
            if per_launch is None:  # older records: recover the bytes from the copy time
                per_copy_s = record.time_s / repeat - machine.host_link_latency_s
                per_launch = max(0.0, per_copy_s) * machine.host_link_achievable_bytes_per_s
            link = float(per_launch) * repeat * e.host_link_j_per_byte * factor
            return KernelEnergy(record.name, record.time_s, 0.0, 0.0, 0.0, 0.0, link, static, 0.0)
        # a collective: its wire bytes over the peer links, each byte read from DRAM to be sent and
        # written to DRAM where it arrives (a lower bound: a ring's reductions re-read what they add)
        wire = float(per_launch or 0.0) * repeat
        link = wire * e.peer_link_j_per_byte * factor
        dram = 2.0 * wire * e.dram_j_per_byte * factor
        return KernelEnergy(record.name, record.time_s, 0.0, 0.0, 0.0, dram, link, static, 0.0)
    pipe = plan.get("pipe", "none")
    dtype = plan.get("dtype", "fp32")
    executed = record.flop if record.executed_flop is None else record.executed_flop
    factor = machine.calibration.dynamic_energy_factor  # labelled calibration (1 when absent)
    math = executed * math_j_per_flop(e, pipe, dtype) * factor
    if pipe == "matrix" and dtype == "fp8":
        math *= machine.calibration.fp8_tensor_energy_factor
    l2_bytes = _l2_bytes(record)
    l2 = l2_bytes * e.l2_j_per_byte * factor
    l1 = l2_bytes * e.l1_j_per_byte * factor
    dram = record.dram_bytes * e.dram_j_per_byte * factor
    return KernelEnergy(record.name, record.time_s, math, l1, l2, dram, 0.0, static, math + l1 + l2)


def _l2_bytes(record) -> float:
    plan = record.plan or {}
    per_launch = plan.get("l2_bytes_per_launch")
    if per_launch is not None:
        return float(per_launch) * max(1, int(record.repeat))
    # older records: recover the requested bytes from the hit fraction (hit = 1 - dram / requested)
    miss = 1.0 - record.l2_hit_fraction
    return record.dram_bytes / miss if miss > 0 else record.dram_bytes


# --------------------------------------------------------------------------------------- run level


def representative_scale(result) -> float:
    """How many times a multi-GPU result's kernel records repeat in its step: the multi-GPU engine
    records one representative block of a training step; its GPUs compute for ``compute + optimizer``
    seconds. 1.0 for single-device results and whenever the records cover the compute time."""
    if max(1, int(getattr(result, "num_gpus", 1) or 1)) <= 1:
        return 1.0
    kernel_s = sum(k.time_s for k in result.kernels if not k.on_link)
    busy_s = result.time_breakdown_s.get("compute", 0.0) + result.time_breakdown_s.get("optimizer", 0.0)
    return busy_s / kernel_s if kernel_s > 0 and busy_s > 1.02 * kernel_s else 1.0


def run_energy(result, hardware, kernels: Sequence[KernelEnergy] | None = None) -> RunEnergy:
    """Energy, power and FLOP/J of ``result`` (a SimulationResult) simulated on ``hardware``;
    ``kernels`` are the kernel energies when already known (throttled kernels)."""
    power = _device(hardware).power
    if kernels is None:
        machine = machine_of(hardware)
        kernels = tuple(kernel_energy(k, power, machine) for k in result.kernels)
    kernels = tuple(kernels)
    devices = _num_devices(hardware, result)
    time_s = result.total_time_s
    breakdown = {
        "math_j": sum(k.math_j for k in kernels),
        "l1_j": sum(k.l1_j for k in kernels),
        "l2_j": sum(k.l2_j for k in kernels),
        "dram_j": sum(k.dram_j for k in kernels),
        "link_j": sum(k.link_j for k in kernels),
        "static_j": power.idle_w * time_s,
    }
    notes = []
    scale = representative_scale(result)
    if devices > 1:
        # The multi-GPU engine keeps the kernels of one representative GPU, and for a training step only
        # those of one representative block: scale their dynamic energy to the GPU's compute time in the
        # step (same average dynamic power), then every GPU spends the same.
        if scale != 1.0:
            breakdown = {k: (v * scale if k != "static_j" else v) for k, v in breakdown.items()}
        breakdown = {k: v * devices for k, v in breakdown.items()}
        charged = any(k.on_link and k.op not in HOST_LINK_OP_KINDS for k in result.kernels)
        notes.append(f"energy of {devices} GPUs = {devices} x one representative GPU (its kernels' dynamic "
                     "power over its compute time)" + ("" if charged else "; collective link energy is not counted"))
    total = sum(breakdown.values())
    peak = max((k.avg_power_w for k in kernels if k.time_s > 0), default=power.idle_w)
    avg = total / (time_s * devices) if time_s > 0 else power.idle_w  # a run of no time: the idle device
    flop = sum(k.flop for k in result.kernels) * scale * devices
    return RunEnergy(
        energy_j=total, avg_power_w=avg, peak_power_w=max(peak, avg), flop_per_j=flop / total if total > 0 else 0.0,
        breakdown_j=breakdown, kernels=kernels, num_devices=devices, tdp_w=power.tdp_w, notes=tuple(notes))


# --------------------------------------------------------------------------------------- power cap


def _stretched_time_s(record, machine: Machine, r: float) -> float:
    plan = record.plan or {}
    executed = record.flop if record.executed_flop is None else record.executed_flop
    rate = _pipe_rate_flop_per_s(machine, plan.get("pipe", "none"), plan.get("dtype", "fp32"))
    t_math = executed / rate if rate > 0 else 0.0
    if record.bound == "compute":
        # its own pipes set its time (a kernel on a few SMs or cores computes slower than the device's
        # rate): all of it runs in the core clock domain
        t_math = max(t_math, record.time_s)
    t_l2 = _l2_bytes(record) / machine.l2_achievable_bytes_per_s if machine.l2_achievable_bytes_per_s > 0 else 0.0
    return max(record.time_s, t_math / r, t_l2 / r)


def throttled_clock_fraction(energy: KernelEnergy, record, machine: Machine, tdp_w: float, idle_w: float
                             ) -> tuple[float, float]:
    """(clock fraction r, stretched time) that keeps one kernel's average power at or below ``tdp_w``.

    r = 1 and the kernel's own time when its uncapped power is already within TDP."""
    if energy.time_s <= 0 or energy.avg_power_w <= tdp_w:
        return 1.0, energy.time_s
    other_j = energy.dynamic_j - energy.core_j

    def power_at(r: float) -> tuple[float, float]:
        t = _stretched_time_s(record, machine, r)
        return idle_w + (energy.core_j * r * r + other_j) / t, t

    lo, hi = MIN_CLOCK_FRACTION, 1.0
    p_lo, t_lo = power_at(lo)
    if p_lo > tdp_w:
        return lo, t_lo  # cannot reach TDP within the DVFS range: the floor clock
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if power_at(mid)[0] <= tdp_w:
            lo = mid
        else:
            hi = mid
    return lo, power_at(lo)[1]


def capped_kernel_time_s(plan, timing, machine: Machine, power_spec) -> float:
    """Seconds one launch of a kernel (its :class:`~gpusim.mapping.plan.KernelPlan` and
    :class:`~gpusim.engine.kernel.KernelTiming`) takes at the clock the power cap sets at steady state
    on a device with ``power_spec``: its own time where its average power is within TDP."""
    record = KernelRecord(name=plan.name, op=plan.op_kind, node=plan.name, phase="single", layer=None, start_s=0.0,
                          time_s=timing.time_s, repeat=1, flop=plan.useful_flop, dram_bytes=timing.dram_bytes,
                          l2_hit_fraction=plan.l2_hit_fraction, bound=timing.bound, plan=plan.describe(),
                          executed_flop=plan.work_flop)
    energy = kernel_energy(record, power_spec, machine)
    return throttled_clock_fraction(energy, record, machine, power_spec.tdp_w, power_spec.idle_w)[1]


def apply_power_cap(result, hardware, tdp_w: float | None = None):
    """Return ``(result, RunEnergy)`` with every kernel above TDP throttled (clock and energy per op
    lowered, time stretched) and the run energy of the capped run. ``tdp_w`` overrides the
    description's TDP. Kernels within TDP keep their time: if none exceeds it, the result returned is
    ``result`` itself."""
    power = _device(hardware).power
    cap = power.tdp_w if tdp_w is None else float(tdp_w)
    if cap <= power.idle_w:
        raise SimulationError(f"a power cap of {cap:g} W is not above {hardware.name}'s idle power "
                              f"({power.idle_w:g} W): no clock can keep under it")
    machine = machine_of(hardware)
    records = result.kernels
    capped_energies = []
    stretch = []
    min_r = 1.0
    throttled = 0
    for rec in records:
        ke = kernel_energy(rec, power, machine)
        if rec.on_link:
            r, t = 1.0, rec.time_s
        else:
            r, t = throttled_clock_fraction(ke, rec, machine, cap, power.idle_w)
        if r < 1.0:
            throttled += 1
            min_r = min(min_r, r)
            ke = dataclasses.replace(ke, time_s=t, math_j=ke.math_j * r * r, l1_j=ke.l1_j * r * r,
                                     l2_j=ke.l2_j * r * r, core_j=ke.core_j * r * r, static_j=power.idle_w * t)
        stretch.append((r, t))
        capped_energies.append(ke)
    # kernels run in start order on the stream: each one starts later by the stretch of those before it
    shift_before = [0.0] * len(records)
    shift = 0.0
    for i in sorted(range(len(records)), key=lambda i: records[i].start_s):
        shift_before[i] = shift
        shift += stretch[i][1] - records[i].time_s
    new_records = []
    for i, rec in enumerate(records):
        r, t = stretch[i]
        changes = {"start_s": rec.start_s + shift_before[i]}
        if r < 1.0:
            changes.update(time_s=t, plan={**rec.plan, "clock_fraction": r, "uncapped_time_s": rec.time_s})
        new_records.append(dataclasses.replace(rec, **changes))
    if throttled == 0:
        return result, dataclasses.replace(run_energy(result, hardware), tdp_w=cap)
    shift *= representative_scale(result)
    total = result.total_time_s + shift
    scale = result.total_time_s / total if total > 0 else 1.0
    breakdown = dict(result.time_breakdown_s)
    breakdown["compute"] = breakdown.get("compute", 0.0) + shift  # throttled time is time spent computing
    changes: dict[str, Any] = {"kernels": tuple(new_records), "total_time_s": total, "time_breakdown_s": breakdown}
    if any(track_stage(sp.track)[0] is not None for sp in result.spans):
        # a multi-GPU training step's timeline (its records are one representative block, not the
        # timeline): stretched evenly to the capped step, its compute being most of it
        factor = total / result.total_time_s
        changes["spans"] = tuple(dataclasses.replace(sp, start_s=sp.start_s * factor, end_s=sp.end_s * factor)
                                 for sp in result.spans)
    elif result.spans:
        changes["spans"] = _stretched_spans(result.spans, records, new_records)
    if result.step_time_s is not None:
        changes["step_time_s"] = result.step_time_s + shift
        for key in ("samples_per_s", "tokens_per_s", "mfu_fraction"):
            value = getattr(result, key)
            if value is not None:
                changes[key] = value * scale
    longer = (f"the run takes {format_duration(shift)} longer" if shift > 0 else
              "the run takes no longer (at the lower clock their math and L2 traffic still fit in their time)")
    warning = (f"power cap {cap:.0f} W: {plural(throttled, 'kernel')} throttled to as low as {min_r:.1%} of the rated "
               f"clock; {longer}")
    changes["warnings"] = tuple(result.warnings) + (warning,)
    capped = dataclasses.replace(result, **changes)
    energy = run_energy(capped, hardware, capped_energies)
    energy = dataclasses.replace(energy, tdp_w=cap, clock_fraction_min=min_r, num_throttled_kernels=throttled)
    return capped, energy


def _stretched_spans(spans, old_records, new_records):
    """The trace spans on the capped timeline: a time inside a kernel maps linearly from its uncapped
    to its throttled interval, a time between kernels moves with the kernels before it. Where the
    kernels overlap (several streams of a multi-GPU run) the map is not defined and the spans are kept."""
    pairs = sorted(((o.start_s, o.start_s + o.time_s, n.start_s, n.start_s + n.time_s)
                    for o, n in zip(old_records, new_records) if not o.on_link))
    old_points = np.array([x for s0, e0, _, _ in pairs for x in (s0, e0)], dtype=float)
    new_points = np.array([x for _, _, s1, e1 in pairs for x in (s1, e1)], dtype=float)
    if not len(old_points) or np.any(np.diff(old_points) < 0):
        return spans

    def at(t: np.ndarray) -> np.ndarray:
        inside = np.interp(t, old_points, new_points)
        return np.where(t < old_points[0], t, np.where(t >= old_points[-1], t + new_points[-1] - old_points[-1], inside))

    starts = at(np.array([sp.start_s for sp in spans], dtype=float))
    ends = at(np.array([sp.end_s for sp in spans], dtype=float))
    out = []
    for sp, start, end in zip(spans, starts.tolist(), ends.tolist()):
        if sp.track == "HBM" and end > start:
            # the same bytes over the longer interval: the span's rate and utilization fall with it
            factor = (sp.end_s - sp.start_s) / (end - start)
            args = tuple((k, v * factor if k == "utilization_fraction" else v) for k, v in sp.args)
            name = f"{float(sp.name.split()[0]) * factor:.0f} GB/s"
            sp = dataclasses.replace(sp, name=name, args=args)
        out.append(dataclasses.replace(sp, start_s=start, end_s=end))
    return tuple(out)


def with_energy(result, hardware, *, power_cap: bool = True, tdp_w: float | None = None,
                price_usd_per_s: float | None = None):
    """``result`` with its energy, power and cost fields filled in (and, with ``power_cap``, throttled
    kernels stretched where a kernel's power would exceed TDP). The one call the CLI and sweeps use."""
    from gpusim.cost import price_of

    if power_cap:
        result, energy = apply_power_cap(result, hardware, tdp_w)
    else:
        energy = run_energy(result, hardware)
    price = price_of(hardware, price_usd_per_s)
    devices = energy.num_devices
    kernels = tuple(dataclasses.replace(k, energy_j=ke.total_j * 1.0, avg_power_w=ke.avg_power_w)
                    for k, ke in zip(result.kernels, _aligned(result, energy)))
    changes: dict[str, Any] = {
        "kernels": kernels,
        "energy_j": energy.energy_j,
        "avg_power_w": energy.avg_power_w,
        "peak_power_w": energy.peak_power_w,
        "flop_per_j": energy.flop_per_j,
        "energy_breakdown_j": dict(energy.breakdown_j),
        "tdp_w": energy.tdp_w,
        "clock_fraction_min": energy.clock_fraction_min,
    }
    if price is not None:
        changes["price_usd_per_s"] = price
        changes["cost_usd"] = price * devices * result.total_time_s
    if energy.notes:
        changes["warnings"] = tuple(result.warnings) + energy.notes
    return dataclasses.replace(result, **changes)


def _aligned(result, energy: RunEnergy):
    """Kernel energies in the order of ``result.kernels`` (apply_power_cap sorts by start)."""
    if len(energy.kernels) != len(result.kernels):
        raise SimulationError("internal: kernel energies do not match the kernel records")
    return energy.kernels
