"""Fitting calibration factors to measurements (and nothing else).

Each factor is the median ratio of measured to simulated-without-calibration throughput over the
cases that exercise that mechanism alone, so the factor describes the device (sustained tensor-core
clock and issue efficiency, achievable DRAM bandwidth), not any single point:

* ``tensor_efficiency_fraction``: large tensor-core GEMMs (>= 1e11 FLOP) that simulate compute-bound;
* ``vector_efficiency_fraction``: large CUDA-core (SIMT) GEMMs, FP32/FP64;
* ``dram_bandwidth_fraction``: stream benchmarks at full occupancy and large elementwise kernels (not
  normalizations, whose library implementations differ in passes and occupancy);
* ``l2_bandwidth_fraction``: L2-bandwidth benchmarks whose footprint is under half the L2;
* ``host_link_fraction``: host<->device copies of at least 100 MB;
* ``host_copy_overhead_s``: copies under 100 MB, at least two of them: the median of measured minus
  simulated time once the link fraction is applied (a fixed cost per copy call; 0 if negative);
* ``dram_loaded_latency_slope``: stream benchmarks at partial occupancy, which Little's law limits:
  the slope (on a 0.05 grid) whose loaded DRAM latency gives the least mean absolute log error,
  with the fitted DRAM fraction applied. Fitted only from at least three such cases.
* ``dram_mixed_traffic_loss_fraction``: full-occupancy streams that both read and write (scale,
  triad) against those that only read or write, of the same benchmark (``library``): the loss (0.01
  grid) under which they need the same DRAM fraction. Fitted where one benchmark measured both
  kinds, before the DRAM fraction.
* ``cta_turnaround_cycles``: store-only streams at partial occupancy (25-cycle grid), at least three.
* ``fp8_tensor_energy_factor``: FP8 GEMMs timed in loops that count their calls (at steady state,
  after the warm-up), at least three: the multiplier on the FP8 tensor energy per FLOP (0.05 grid)
  whose power-capped simulation gives the least mean |log| error, the other factors (and the
  recorded ``dynamic_energy_factor``) in place. These rows measure the power limit, not the tensor
  pipe, so no other factor is fitted to them.

The four DRAM-side factors depend on each other and are fitted together (:func:`fit_calibration`).

A built-in description whose calibration ``source`` says it was fitted by ``gpusim calibrate`` must
stay reproducible as the engine changes: :func:`stale_calibration` refits it and lists every value
(and every quoted case count) that no longer matches, including factors the source says were
transferred from another description's fit and the TDP-fitted dynamic energy factor.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, replace

from gpusim.accuracy import (COPY_BYTES, STREAM_KERNELS, _to_metric, gpusim_dtype, loop_calls, loop_from_rest_s,
                             matmul_flop, matmul_plan, simulate_case)
from gpusim.config.library import load_hardware
from gpusim.engine.kernel import simulate_kernel
from gpusim.engine.machine import Calibration, machine_of
from gpusim.mapping import best_gemm
from gpusim.units import plural

LARGE_GEMM_FLOP = 1e11
LARGE_STREAM_BYTES = 1e8


@dataclass(frozen=True)
class FittedFactor:
    name: str
    value: float
    num_cases: int
    case_ids: tuple[str, ...]
    method: str = "median"
    """How the value was fitted (as the overlay's source string says)."""


def _rate_ratio(case, machine, device) -> float:
    seconds, _ = simulate_case(case, machine, device)
    simulated = _to_metric(case, seconds)
    measured = case.measured_value
    if case.metric in ("time_s", "latency_s"):
        return simulated / measured  # measured time longer -> ratio below 1
    return measured / simulated


def fit_calibration(gpu: str, cases) -> list[FittedFactor]:
    desc = load_hardware(gpu)
    powered_device = desc.gpu if desc.kind != "cpu" else desc.cpu
    # the rate factors describe the sustained state (the dynamic energy factor, fitted after them, holds
    # a large 16-bit GEMM at TDP): they are fitted to loops without the power cap, which only the FP8
    # energy fit below applies
    device = powered_device.model_copy(update={"power": None})
    # memory factors the description takes from a sibling's fit (its source says "transferred from")
    # are in place while the others are fitted, as they will be when it runs
    recorded = machine_of(desc).calibration
    preset = {name: getattr(recorded, name) for name in _transfers(desc) if name in MEMORY_FACTORS[1:]}
    machine = replace(machine_of(desc), calibration=Calibration(**preset))
    own = [c for c in cases if c.gpu == gpu and not c.excluded]
    steady_fp8 = [c for c in own if _steady_fp8(c)]
    own = [c for c in own if not _steady_fp8(c)]
    full_streams = [c for c in own if c.op == "stream" and (c.occupancy_fraction or 1.0) >= 1.0]
    partial = [c for c in own if c.op == "stream" and (c.occupancy_fraction or 1.0) < 1.0]
    store_only = [c for c in partial if c.variant == "init"]
    # the read/write loss compares streams that read and write with those that only read or write
    # within one benchmark: a benchmark without one-way streams (BabelStream) says nothing about it,
    # and its level against another benchmark's would be read as a loss
    by_library: dict[str, list] = {}
    for c in full_streams:
        by_library.setdefault(c.library or "", []).append(c)
    mix_streams = [c for rows in by_library.values() if {_writes_and_reads(c) for c in rows} == {True, False}
                   for c in rows]
    mixed_and_one_way = bool(mix_streams)
    memory: list[FittedFactor] = []
    # The memory factors depend on each other (a full-occupancy read on a fast HBM is latency-limited
    # too): the read/write loss (with the DRAM fraction), the CTA turnaround and the loaded-latency
    # slope are fitted in that order, twice, each with the others' latest values in place.
    for _ in range(2 if partial else 1):
        # the DRAM fraction stays 1 here: _fit_rate_factors refits it as a ratio to the datasheet rate
        memory_machine = _with_fitted(machine, memory, *MEMORY_FACTORS[1:])
        fitted = []
        if mixed_and_one_way and "dram_mixed_traffic_loss_fraction" not in preset:
            loss = fit_mixed_traffic_loss(memory_machine, device, mix_streams)
            fitted.append(FittedFactor("dram_mixed_traffic_loss_fraction", loss, len(mix_streams),
                                       tuple(c.case_id for c in mix_streams), "least-error fit"))
        with_loss = _with_fitted(memory_machine, fitted, "dram_mixed_traffic_loss_fraction")
        rates = {f.name: f for f in _fit_rate_factors(with_loss, device, own)}
        if "dram_bandwidth_fraction" in rates:
            fitted.append(rates["dram_bandwidth_fraction"])
        if len(store_only) >= MIN_LOADED_LATENCY_CASES and "cta_turnaround_cycles" not in preset:
            turnaround = fit_cta_turnaround_cycles(_with_fitted(with_loss, fitted, "dram_bandwidth_fraction"), device,
                                                   store_only)
            fitted.append(FittedFactor("cta_turnaround_cycles", turnaround, len(store_only),
                                       tuple(c.case_id for c in store_only), "least-error fit"))
        if len(partial) >= MIN_LOADED_LATENCY_CASES and "dram_loaded_latency_slope" not in preset:
            slope = fit_loaded_latency_slope(_with_fitted(with_loss, fitted, *MEMORY_FACTORS), device, partial)
            fitted.append(FittedFactor("dram_loaded_latency_slope", slope, len(partial),
                                       tuple(c.case_id for c in partial), "least-error fit"))
        memory = fitted
    machine = _with_fitted(machine, memory, *MEMORY_FACTORS[1:])
    latency_factors = [f for f in memory if f.name != "dram_bandwidth_fraction"]  # the DRAM fraction is a rate factor
    out = _fit_rate_factors(machine, device, own) + latency_factors
    # a description that names a sustained clock (a power-limited card) has it and its boost window
    # refitted to the back-to-back loops whose rows count their calls
    loops = [c for c in own if c.op == "matmul" and loop_calls(c) is not None] \
        if recorded.sustained_clock_fraction < 1.0 else []

    def boost_factors(fitted: list[FittedFactor]) -> list[FittedFactor]:
        if len(loops) < MIN_BOOST_LOOP_CASES:
            return []
        fraction, window_s = fit_boost(_with_fitted(machine, fitted, *RATE_FACTORS, "gemm_wave_overhead_s"),
                                       loops)
        ids = tuple(c.case_id for c in loops)
        return [FittedFactor("sustained_clock_fraction", fraction, len(loops), ids, "least-error fit"),
                FittedFactor("boost_window_s", window_s, len(loops), ids, "least-error fit")]

    boost = boost_factors(out)
    small_gemms = [c for c in own if c.op == "matmul" and matmul_flop(c) < LARGE_GEMM_FLOP]
    if len(small_gemms) >= MIN_WAVE_OVERHEAD_CASES:
        # the wave overhead is fitted with the rate factors (and any boost) in place; the rate factors
        # are then refitted with it (their large GEMMs pay it once per wave too), the boost refitted
        # with both, and the overhead fitted once more
        for _ in range(2):
            overhead = fit_gemm_wave_overhead_s(_with_fitted(machine, out + boost, *RATE_FACTORS, *BOOST_FACTORS),
                                                device, small_gemms)
            overhead_factor = FittedFactor("gemm_wave_overhead_s", overhead, len(small_gemms),
                                           tuple(c.case_id for c in small_gemms), "least-error fit")
            with_overhead = _with_fitted(machine, boost + [overhead_factor], *BOOST_FACTORS, "gemm_wave_overhead_s")
            out = _fit_rate_factors(with_overhead, device, own) + latency_factors
            boost = boost_factors(out + [overhead_factor])
        out.append(overhead_factor)
    out += boost
    small_copies = [c for c in own if c.op in ("memcpy_h2d", "memcpy_d2h")
                    and c.metric == "bytes_per_s" and (c.num_bytes or COPY_BYTES) < LARGE_STREAM_BYTES]
    if len(small_copies) >= MIN_COPY_OVERHEAD_CASES:
        overhead = fit_host_copy_overhead_s(_with_fitted(machine, out, "host_link_fraction"), device, small_copies)
        out.append(FittedFactor("host_copy_overhead_s", overhead, len(small_copies),
                                tuple(c.case_id for c in small_copies), "median gap (measured - simulated)"))
    if len(steady_fp8) >= MIN_FP8_POWER_CASES:
        powered = _with_fitted(machine, out, *RATE_FACTORS, *BOOST_FACTORS, "gemm_wave_overhead_s")
        powered = replace(powered, calibration=replace(powered.calibration,
                                                       dynamic_energy_factor=recorded.dynamic_energy_factor))
        factor = fit_fp8_tensor_energy_factor(powered, powered_device, steady_fp8)
        out.append(FittedFactor("fp8_tensor_energy_factor", factor, len(steady_fp8),
                                tuple(c.case_id for c in steady_fp8), "least-error fit"))
    return out


MIN_FP8_POWER_CASES = 3
FP8_ENERGY_FACTORS = tuple(round(1.0 + 0.05 * i, 2) for i in range(61))


def fit_fp8_tensor_energy_factor(machine, device, cases) -> float:
    """The multiplier on the FP8 tensor energy per FLOP (1 to 4 in steps of 0.05) under which FP8 GEMMs
    timed at steady state, each at the clock the power cap sets (``device.power``), best fit their
    measured rates: least mean |log(simulated / measured rate)|. ``machine`` carries the other factors,
    ``dynamic_energy_factor`` among them."""
    return round(_least_log_error(machine, device, cases, "fp8_tensor_energy_factor", FP8_ENERGY_FACTORS), 2)


def _steady_fp8(case) -> bool:
    """An FP8 GEMM row timed in a loop that counts its calls: at steady state, where the power cap
    sets its clock (:func:`gpusim.accuracy._timed_kernel_s`)."""
    return case.op == "matmul" and gpusim_dtype(case.dtype) == "fp8" and loop_calls(case) is not None


MEMORY_FACTORS = ("dram_bandwidth_fraction", "dram_mixed_traffic_loss_fraction", "cta_turnaround_cycles",
                  "dram_loaded_latency_slope")
"""The DRAM-side factors fitted together from stream benchmarks (see :func:`fit_calibration`)."""


def _writes_and_reads(case) -> bool:
    """Whether a stream case both reads and writes (scale, triad) rather than one of them (init, read)."""
    reads, writes = STREAM_KERNELS[case.variant]
    return reads > 0 and writes > 0


RATE_FACTORS = ("tensor_efficiency_fraction", "vector_efficiency_fraction", "dram_bandwidth_fraction",
                "l2_bandwidth_fraction", "host_link_fraction")
"""The factors fitted as median measured/simulated rate ratios."""


def _fit_rate_factors(machine, device, cases) -> list[FittedFactor]:
    """The median-ratio factors (see the module docstring) over ``cases`` of one GPU, each simulated
    on ``machine`` (whose own rate factors should be 1)."""
    groups: dict[str, list[tuple[str, float]]] = {}
    for case in cases:
        factor = None
        if case.op == "matmul":
            flop = matmul_flop(case)
            if flop < LARGE_GEMM_FLOP:
                continue
            plan = best_gemm(machine, "matmul", "matmul", case.m, case.n, case.k, case.batch or 1,
                             gpusim_dtype(case.dtype), flop)
            if simulate_kernel(plan, machine).bound != "compute":
                continue
            factor = "tensor_efficiency_fraction" if plan.pipe == "matrix" else "vector_efficiency_fraction"
        elif case.op == "stream" and (case.occupancy_fraction or 1.0) >= 1.0:
            factor = "dram_bandwidth_fraction"
        elif case.op == "elementwise" and (case.num_elements or 0) * 4 >= LARGE_STREAM_BYTES:
            factor = "dram_bandwidth_fraction"
        elif case.op == "l2_bandwidth" and case.working_set_bytes <= 0.5 * machine.l2_capacity_bytes:
            factor = "l2_bandwidth_fraction"
        elif case.op in ("memcpy_h2d", "memcpy_d2h") and (case.num_bytes or COPY_BYTES) >= LARGE_STREAM_BYTES:
            factor = "host_link_fraction"
        if factor is None:
            continue
        groups.setdefault(factor, []).append((case.case_id, _rate_ratio(case, machine, device)))
    out = []
    for name, rows in sorted(groups.items()):
        value = min(1.0, statistics.median(r for _, r in rows))
        out.append(FittedFactor(name, round(value, 3), len(rows), tuple(c for c, _ in rows)))
    return out


def _with_fitted(machine, factors: list[FittedFactor], *names: str):
    """``machine`` with the factors ``names`` of ``factors`` applied (those that were fitted)."""
    values = {f.name: f.value for f in factors if f.name in names}
    return replace(machine, calibration=replace(machine.calibration, **values))


BOOST_FACTORS = ("sustained_clock_fraction", "boost_window_s")
MIN_BOOST_LOOP_CASES = 4
SUSTAINED_CLOCK_FRACTIONS = tuple(round(0.30 + 0.01 * i, 2) for i in range(71))
BOOST_WINDOWS_S = tuple(round(0.5e-3 * i, 4) for i in range(101))


def fit_boost(machine, cases) -> tuple[float, float]:
    """The sustained clock fraction (0.30 to 1 in steps of 0.01) and boost window (0 to 50 ms in steps
    of 0.5 ms) of a power-limited card that best fit back-to-back matmul loops run from rest (rows
    that count their warm-up and timed calls): least mean |log(simulated / measured rate)|. Each
    loop's kernel is simulated once at the sustained clock; the two factors then only decide which of
    its calls ran at the rated clock (:func:`gpusim.accuracy.loop_from_rest_s`). Short loops fix the
    fraction, loops that outlast the window bound the window from above."""
    kernels = [(case, simulate_kernel(matmul_plan(case, machine), machine)) for case in cases]

    def error(fraction: float, window_s: float) -> float:
        m = replace(machine, calibration=replace(machine.calibration, sustained_clock_fraction=fraction,
                                                 boost_window_s=window_s))
        return statistics.fmean(abs(math.log(_to_metric(case, loop_from_rest_s(m, kernel, *loop_calls(case)))
                                             / case.measured_value)) for case, kernel in kernels)

    return min(((f, w) for f in SUSTAINED_CLOCK_FRACTIONS for w in BOOST_WINDOWS_S), key=lambda fw: error(*fw))


MIN_COPY_OVERHEAD_CASES = 2


def fit_host_copy_overhead_s(machine, device, cases) -> float:
    """Fixed cost per copy call: the median over small copies of measured minus simulated seconds
    (rounded to 0.1 us; never negative)."""
    gaps = []
    for case in cases:
        seconds, _ = simulate_case(case, machine, device)
        measured_s = (case.num_bytes or COPY_BYTES) / case.measured_value
        gaps.append(measured_s - seconds)
    return max(0.0, round(statistics.median(gaps), 7))


def _least_log_error(machine, device, cases, name: str, grid) -> float:
    """The value of the calibration field ``name`` on ``grid`` whose simulation of ``cases`` has the
    least mean |log(simulated / measured rate)|."""
    def error(value: float) -> float:
        m = replace(machine, calibration=replace(machine.calibration, **{name: value}))
        return statistics.fmean(abs(math.log(_rate_ratio(c, m, device))) for c in cases)
    return min(grid, key=error)


MIN_WAVE_OVERHEAD_CASES = 3
WAVE_OVERHEADS_S = tuple(i * 0.25e-6 for i in range(41))


def fit_gemm_wave_overhead_s(machine, device, cases) -> float:
    """The fixed cost per GEMM wave (0 to 10 us in steps of 0.25 us) that best fits GEMMs too small
    for their math to hide it: least mean |log(simulated / measured rate)|."""
    return round(_least_log_error(machine, device, cases, "gemm_wave_overhead_s", WAVE_OVERHEADS_S), 8)


MIN_LOADED_LATENCY_CASES = 3
LOADED_LATENCY_SLOPES = tuple(i * 0.05 for i in range(61))


def fit_loaded_latency_slope(machine, device, cases) -> float:
    """The slope of DRAM latency against DRAM utilization (0 to 3 in steps of 0.05) that best fits
    latency-limited cases: least mean |log(simulated / measured rate)|."""
    return round(_least_log_error(machine, device, cases, "dram_loaded_latency_slope", LOADED_LATENCY_SLOPES), 2)


MIXED_TRAFFIC_LOSSES = tuple(i * 0.01 for i in range(41))


def fit_mixed_traffic_loss(machine, device, cases) -> float:
    """The share of DRAM bandwidth lost to an even read/write mix (0 to 0.4 in steps of 0.01) under
    which full-occupancy streams that read and write and those that only read or only write need
    the same DRAM fraction: least mean |log| spread of their measured/simulated ratios about their
    median (which becomes ``dram_bandwidth_fraction``)."""
    def spread(loss: float) -> float:
        m = replace(machine, calibration=replace(machine.calibration, dram_mixed_traffic_loss_fraction=loss))
        ratios = [_rate_ratio(c, m, device) for c in cases]
        middle = statistics.median(ratios)
        return statistics.fmean(abs(math.log(r / middle)) for r in ratios)
    return round(min(MIXED_TRAFFIC_LOSSES, key=spread), 2)


CTA_TURNAROUNDS_CYCLES = tuple(i * 25.0 for i in range(81))


def fit_cta_turnaround_cycles(machine, device, cases) -> float:
    """A streaming CTA's fixed lifetime (0 to 2000 SM cycles in steps of 25) that best fits store-only
    streams at partial occupancy, which nothing else limits: least mean |log(simulated / measured rate)|."""
    return _least_log_error(machine, device, cases, "cta_turnaround_cycles", CTA_TURNAROUNDS_CYCLES)


def overlay_yaml(base: str, factors: list[FittedFactor], measurements: str) -> str:
    """A hardware overlay that extends ``base`` with a labelled calibration block."""
    lines = [
        "schema_version: 1",
        f"extends: {base}",
        "gpu:",
        "  calibration:",
    ]
    summary = "; ".join(f"{f.name.removesuffix('_fraction')} = {f.method} of {plural(f.num_cases, 'case')}" for f in factors)
    lines.append(f"    source: \"fitted by gpusim calibrate on {measurements}: {summary}\"")
    for f in factors:
        lines.append(f"    {f.name}: {f.value}")
    return "\n".join(lines) + "\n"


TDP_GEMM_SIZE = 8192


def fit_dynamic_energy_factor(gpu: str) -> tuple[float, str] | None:
    """The ``dynamic_energy_factor`` that makes a large dense GEMM in the GPU's fastest 16-bit tensor
    format draw its TDP, with the description's other calibration applied (three decimals, rounded
    down): GPUs under sustained tensor load run at their power limit, so TDP is the first energy
    calibration point. A large FP32 GEMM at its own fitted rate bounds the factor too: the sustained
    rates the efficiency fractions describe are ones the board's power allowed, so where the
    estimates charge FP32 more per second than 16-bit tensor math, the FP32 GEMM is the one held at
    TDP (the 16-bit one then draws less).
    Returns (factor, the GEMM it was fitted on), or None for a device without 16-bit matrix units."""
    from gpusim.energy import kernel_energy
    from gpusim.engine.simulate import simulate
    from gpusim.workload import load_workload

    desc = load_hardware(gpu)
    machine = machine_of(desc)
    dtype = next((d for d in ("bf16", "fp16") if machine.matrix_rate_per_unit(d)), None)
    if dtype is None or desc.kind == "cpu":
        return None
    size = TDP_GEMM_SIZE
    uncalibrated = replace(machine, calibration=replace(machine.calibration, dynamic_energy_factor=1.0))
    power = desc.gpu.power
    bounds = []
    for gemm_dtype in (dtype, "fp32"):
        workload = load_workload("gemm_8192_bf16", [f"ops.gemm.dtype={gemm_dtype}", f"ops.gemm.m={size}",
                                                    f"ops.gemm.n={size}", f"ops.gemm.k={size}"])
        result = simulate(desc, workload, record_spans=False)
        kernel = next(k for k in result.kernels if k.op == "matmul")
        energy = kernel_energy(kernel, power, uncalibrated)
        dynamic_w = (energy.math_j + energy.l1_j + energy.l2_j + energy.dram_j) / kernel.time_s
        bounds.append(((power.tdp_w - power.idle_w) / dynamic_w, f"{size}^3 {gemm_dtype} GEMM"))
    factor, label = min(bounds)
    # rounded down, so the GEMM it is fitted on stays at or under TDP and the power cap leaves it alone
    return math.floor(factor * 1000.0) / 1000.0, label


FACTOR_LABELS = {
    "tensor_efficiency_fraction": "tensor",
    "vector_efficiency_fraction": "vector (SIMT GEMM)",
    "dram_bandwidth_fraction": "DRAM",
    "l2_bandwidth_fraction": "L2",
    "host_link_fraction": "host link",
    "gemm_wave_overhead_s": "GEMM wave overhead",
    "dram_mixed_traffic_loss_fraction": "DRAM read/write mix loss",
    "cta_turnaround_cycles": "CTA turnaround",
    "dram_loaded_latency_slope": "DRAM loaded-latency slope",
    "sustained_clock_fraction": "sustained clock",
    "boost_window_s": "boost window",
    "fp8_tensor_energy_factor": "FP8 tensor energy",
}
"""How a calibration ``source`` names each factor fitted from kernels (the built-in descriptions
write ``<label> = median measured/simulated ratio of N case(s)`` for the rate factors,
``<label> = least-error fit over N small GEMM case(s)`` for the wave overhead, and
``<label> transferred from <stem>'s fit``)."""

QUOTED_COUNT = r"= (?:median measured/simulated ratio of|least-error fit over) (\d+) (?:small GEMM )?case"
"""How a calibration ``source`` quotes the number of cases a factor was fitted on, after its label."""

REFIT_TOLERANCE = 0.0005
"""Fitted factors are rounded to three decimals: a recorded value that differs from its refit in the
third decimal is stale."""


@dataclass(frozen=True)
class StaleFactor:
    hw: str
    factor: str
    recorded: float
    expected: float
    how: str
    """Where the expected value comes from: a refit, another description's value, a case count."""

    def __str__(self) -> str:
        return f"{self.hw}: {self.factor} is {self.recorded:g}, {self.how} gives {self.expected:g}"


def _close(recorded: float, expected: float) -> bool:
    if abs(expected) < 1e-3:  # seconds (a copy or GEMM-wave overhead): fitted to 0.1 or 0.25 us
        return math.isclose(recorded, expected, rel_tol=0.01, abs_tol=1e-9)
    return abs(recorded - expected) < REFIT_TOLERANCE


def _own_block(desc) -> bool:
    """Whether ``desc`` carries a calibration block fitted for itself by ``gpusim calibrate``."""
    cal = desc.gpu.calibration if desc.kind == "gpu" else None
    return cal is not None and f"--base {desc.name}`" in cal.source


def _transfers(desc) -> dict[str, str]:
    """Factor name -> the description whose fit the calibration source says it was transferred from."""
    if desc.kind != "gpu" or desc.gpu.calibration is None:
        return {}
    by_label = {label: factor for factor, label in FACTOR_LABELS.items()}
    labels = "|".join(re.escape(label) for label in by_label)
    found = re.findall(rf"({labels}) transferred from (\w+)'s fit", desc.gpu.calibration.source)
    return {by_label[label]: other for label, other in found}


def stale_calibration(hw: str, cases) -> list[StaleFactor]:
    """The calibration values of ``hw`` (a built-in stem or a path) that its ``source`` claims were
    fitted or transferred and that a refit on ``cases`` no longer reproduces. Descriptions whose
    calibration does not say ``Fitted by `gpusim calibrate ... --base <its name>``` (inherited or
    hand-set blocks) are not checked."""
    desc = load_hardware(hw)
    if not _own_block(desc):
        return []
    name = desc.name
    source = desc.gpu.calibration.source
    recorded = machine_of(desc).calibration
    transferred = _transfers(desc)
    out = []
    for f in fit_calibration(name, cases):
        if f.name in transferred:
            continue
        label = FACTOR_LABELS.get(f.name)
        value = getattr(recorded, f.name)
        if not _close(value, f.value):
            out.append(StaleFactor(name, f.name, value, f.value, f"a refit on {plural(f.num_cases, 'case')}"))
        quoted = re.search(rf"{re.escape(label)} {QUOTED_COUNT}", source) if label else None
        if quoted and int(quoted.group(1)) != f.num_cases:
            out.append(StaleFactor(name, f"{f.name} case count", float(quoted.group(1)), float(f.num_cases),
                                   "the dataset"))
    for factor, other in transferred.items():
        expected = getattr(machine_of(load_hardware(other)).calibration, factor)
        value = getattr(recorded, factor)
        if not _close(value, expected):
            out.append(StaleFactor(name, factor, value, expected, f"{other}'s value"))
    if "fit_dynamic_energy_factor" in source:
        fitted = fit_dynamic_energy_factor(hw)
        if fitted and not _close(recorded.dynamic_energy_factor, fitted[0]):
            out.append(StaleFactor(name, "dynamic_energy_factor", recorded.dynamic_energy_factor, fitted[0],
                                   f"a refit on the {fitted[1]} at TDP"))
        quoted = re.search(r"dynamic energy factor ([0-9.]+) fitted", source)
        if fitted and quoted and not _close(float(quoted.group(1)), fitted[0]):
            out.append(StaleFactor(name, "dynamic_energy_factor in the source text", float(quoted.group(1)), fitted[0],
                                   "the refit"))
    return out


CV_REFIT = "refitted on the other references"
CV_DATASHEET = "a factor only its own reference fits set to the datasheet value"


def leave_one_source_out(all_cases, results):
    """Out-of-sample errors for the calibrated kernel cases. Each case whose reference (its
    repository or document, as the accuracy report groups sources) helped fit a factor the case is
    simulated with (its GPU's own fit, or the fit the factor was transferred from) is simulated again
    with that factor refitted on the other references. A factor no other reference can fit falls
    back to the datasheet (1.0): what gpusim would predict for a GPU nobody else has measured that way.
    The result's ``note`` says which (:data:`CV_REFIT`, :data:`CV_DATASHEET`); other cases keep their
    result. The power calibration (dynamic energy factor) is not refitted."""
    from gpusim.accuracy import CaseResult
    from gpusim.accuracy_cluster import reference_of

    descs: dict[str, object] = {}

    def desc_of(gpu: str):
        if gpu not in descs:
            descs[gpu] = load_hardware(gpu)
        return descs[gpu]

    fits: dict[tuple[str, str | None], dict[str, FittedFactor]] = {}

    def fit(gpu: str, without: str | None) -> dict[str, FittedFactor]:
        if (gpu, without) not in fits:
            kept = [c for c in all_cases if reference_of(c.source) != without]
            fits[gpu, without] = {f.name: f for f in fit_calibration(gpu, kept) if f.name in FACTOR_LABELS}
        return fits[gpu, without]

    reference = {c.case_id: reference_of(c.source) for c in all_cases}
    by_id = {c.case_id: c for c in all_cases}
    out = []
    for r in results:
        case, desc = by_id.get(r.case_id), desc_of(r.gpu)
        if case is None or desc.kind != "gpu":
            out.append(r)
            continue
        fitted_by = {name: r.gpu for name in fit(r.gpu, None)} if _own_block(desc) else {}
        for name, other in _transfers(desc).items():
            if _own_block(desc_of(other)):
                fitted_by[name] = other
        changes, fallback = {}, False
        for name, gpu in fitted_by.items():
            full = fit(gpu, None).get(name)
            if full is None or reference[case.case_id] not in {reference.get(i) for i in full.case_ids}:
                continue
            refit = fit(gpu, reference[case.case_id]).get(name)
            changes[name] = refit.value if refit else getattr(Calibration(), name)
            fallback = fallback or refit is None
        if not changes:
            out.append(r)
            continue
        machine = machine_of(desc)
        machine = replace(machine, calibration=replace(machine.calibration, **changes))
        seconds, _ = simulate_case(case, machine, desc.gpu)
        out.append(CaseResult(r.case_id, r.gpu, r.op, r.metric, r.measured, _to_metric(case, seconds),
                              r.roofline, r.source, CV_DATASHEET if fallback else CV_REFIT))
    return out
