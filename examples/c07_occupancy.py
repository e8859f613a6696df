"""C7: "Latency is hidden by thread parallelism; GPUs have large register files."
A STREAM scale kernel (b[i] = s * a[i], FP64: one 8-byte load and one store per thread) on an H100 PCIe with
the number of resident threads per SM swept from one warp to the full 2,048, the way gpu-benches sweeps it
(two blocks per SM, their size cut to cut occupancy).  Each thread waits for one 8-byte load; its store is
posted and travels with it, so by Little's law an SM sustains at most (resident threads x 16 B) per round
trip, a trip being the DRAM latency plus the CTA's own launch and retirement (the calibrated CTA
turnaround); the achieved bandwidth rises with occupancy until all SMs together have enough bytes in
flight to cover bandwidth x latency. The latency itself grows with the load on DRAM (queueing in the
memory controllers): this card's calibration fits L = L0 (1 + s x utilization) to the published sweep,
so the curve bends before it reaches the DRAM rate, which an even read/write mix lowers (bus turnarounds).
The simulated curve is printed beside the published gpu-benches occupancy sweep for the same card."""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from gpusim.engine.kernel import simulate_kernel  # noqa: E402
from gpusim.engine.machine import machine_of  # noqa: E402
from gpusim.mapping.streaming import streaming_plan  # noqa: E402
from gpusim.measurements import load_kernel_cases  # noqa: E402

HW = "h100_pcie_80gb"
SATURATION_FRACTION = 0.85
"""'Saturated': within 15% of the full-occupancy bandwidth (the published sweep reaches 93% at half
occupancy, the simulation 89%)."""
ELEMENT_BYTES = 8  # FP64, as in gpu-benches' gpu-stream
CPU_ARCH_REGISTER_BYTES_PER_THREAD = 16 * 8 + 32 * 64 + 8 * 8
"""x86-64 with AVX-512: 16 64-bit general registers, 32 512-bit vector registers, 8 64-bit mask registers
(Intel 64 and IA-32 Architectures Software Developer's Manual, vol. 1, ch. 3 and 15)."""


def stream_scale_plan(machine, num_elements: int, resident_threads: int):
    """The scale kernel with ``resident_threads`` threads resident per SM (two blocks of half of them, or
    one warp)."""
    threads = max(machine.warp_size, resident_threads // 2)
    ctas = math.ceil(num_elements / threads)
    plan = streaming_plan(machine, "stream_scale", "stream", "fp64", bytes_read=num_elements * 8.0,
                          bytes_written=num_elements * 8.0, flop=float(num_elements), sfu_ops=0.0, num_ctas=ctas,
                          threads_per_cta=threads, bytes_in_flight_per_thread=8.0)
    per_sm = max(1, resident_threads // threads)
    if plan.ctas_per_unit > per_sm:  # the occupancy limit gpu-benches imposes with a shared-memory spoiler
        slots = per_sm * machine.num_units
        waves = tuple(min(slots, ctas - i * slots) * 16.0 * threads for i in range(math.ceil(ctas / slots)))
        plan = replace(plan, ctas_per_unit=per_sm, wave_dram_bytes=waves, occupancy_limiter="occupancy_spoiler")
    return plan


def published_sweep() -> dict[float, float]:
    """occupancy fraction -> measured bytes/s of the published H100 PCIe scale-kernel sweep."""
    return {c.occupancy_fraction: c.measured_bytes_per_s for c in load_kernel_cases()
            if c.gpu == HW and c.op == "stream" and c.variant == "scale" and c.occupancy_fraction}


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    machine = machine_of(C.load_hardware(HW))
    n = (2**27 if quick else 2**30) // ELEMENT_BYTES
    measured = published_sweep()
    max_threads = machine.max_threads_per_unit
    def resident(fraction: float) -> int:  # two blocks of whole warps, as gpu-benches launches them
        return 2 * machine.warp_size * max(1, round(fraction * max_threads / (2 * machine.warp_size)))
    sweep_threads = sorted({32, 64, 128, 256, 512, 1024, 1536, 2048} | {resident(f) for f in measured})
    peak = machine.dram_achievable_bytes_per_s / float(machine.dram_mix_cost(0.5))  # half the traffic is writes
    slope = machine.calibration.dram_loaded_latency_slope
    turnaround_s = machine.calibration.cta_turnaround_cycles / machine.unit_clock_hz
    rows = []
    for threads in sweep_threads:
        plan = stream_scale_plan(machine, n, threads)
        t = simulate_kernel(plan, machine)
        occ = threads / max_threads
        in_flight = threads * 8.0 * machine.num_units
        per_trip = 2.0 * in_flight  # each load's trip also carries the thread's posted store
        achieved = 16.0 * n / t.time_s
        # the loads' latency at the utilization this kernel reaches
        loaded_latency = machine.loaded_dram_latency_s(min(1.0, achieved / peak))
        rows.append({"resident_threads_per_sm": threads, "occupancy_fraction": occ, "time_s": t.time_s,
                     "achieved_bytes_per_s": achieved, "bytes_in_flight": in_flight,
                     "littles_law_bytes_per_s": per_trip / (turnaround_s + machine.dram_latency_s),
                     "loaded_latency_s": loaded_latency,
                     "loaded_littles_law_bytes_per_s": per_trip / (turnaround_s + loaded_latency), "bound": t.bound,
                     "measured_bytes_per_s": next(
                         (v for f, v in measured.items() if resident(f) == threads), None)})
    need = peak * machine.dram_latency_s  # bytes in flight that cover bandwidth x latency
    print(f"{HW}: {machine.num_units} SMs, DRAM {peak / 1e9:,.0f} GB/s achievable, latency "
          f"{machine.dram_latency_s * 1e9:.0f} ns -> Little's law needs {need / 1e6:.2f} MB in flight "
          f"({need / machine.num_units / 8:,.0f} 8-byte loads per SM)")
    print(f"{'threads/SM':>10} {'occupancy':>9} {'in flight':>10} {'simulated':>10} {'Little cap':>10} {'measured':>9}")
    for r in rows:
        m = r["measured_bytes_per_s"]
        print(f"{r['resident_threads_per_sm']:>10} {r['occupancy_fraction']:>9.1%} {r['bytes_in_flight'] / 1e6:>8.2f}MB "
              f"{r['achieved_bytes_per_s'] / 1e9:>7,.0f} GB/s {min(r['littles_law_bytes_per_s'], peak) / 1e9:>6,.0f} GB/s "
              + (f"{m / 1e9:>6,.0f} GB/s" if m else "      -"))

    sm_regs = machine.register_file_bytes
    gpu_regs = sm_regs * machine.num_units
    cpu_regs = CPU_ARCH_REGISTER_BYTES_PER_THREAD * 2  # two hardware threads per core
    print(f"register file: {sm_regs / 1024:.0f} KiB per SM, {gpu_regs / 2**20:.1f} MiB on the chip "
          f"({sm_regs / max_threads:.0f} B per resident thread at full occupancy); a Xeon core's architectural "
          f"registers hold {cpu_regs / 1024:.1f} KiB for its 2 threads ({sm_regs / cpu_regs:.0f}x less than one SM)")

    _plot(out_dir / "c07_occupancy.png", rows, peak)

    low, full = rows[0], rows[-1]
    half = next(r for r in rows if r["occupancy_fraction"] >= 0.5)
    # the low-occupancy part of the curve follows Little's law: bandwidth proportional to threads
    linear = [r for r in rows if r["littles_law_bytes_per_s"] < 0.5 * peak]
    linear_error = max(abs(r["achieved_bytes_per_s"] / r["loaded_littles_law_bytes_per_s"] - 1) for r in linear)
    saturating = next(r for r in rows if r["achieved_bytes_per_s"] >= SATURATION_FRACTION * full["achieved_bytes_per_s"])
    gain = full["achieved_bytes_per_s"] / low["achieved_bytes_per_s"]
    pairs = [(r["achieved_bytes_per_s"], r["measured_bytes_per_s"]) for r in rows if r["measured_bytes_per_s"]]
    errors = [s / m - 1 for s, m in pairs]
    ok = gain > 10 and linear_error < 0.25 and saturating["occupancy_fraction"] <= 0.5
    text = (f"one warp per SM reaches {low['achieved_bytes_per_s'] / 1e9:,.0f} GB/s, {gain:.0f}x less than 2,048 "
            f"threads ({full['achieved_bytes_per_s'] / 1e9:,.0f} GB/s); below half the DRAM peak bandwidth tracks "
            f"threads x 16 B / ({turnaround_s * 1e9:.0f} ns + {machine.dram_latency_s * 1e9:.0f} ns x (1 + {slope:g} x "
            f"DRAM utilization)) within "
            f"{linear_error:.0%} (Little's law at the loaded latency) and "
            f"reaches {SATURATION_FRACTION:.0%} of its maximum at {saturating['occupancy_fraction']:.0%} occupancy "
            f"({saturating['bytes_in_flight'] / 1e6:.2f} MB in flight vs {need / 1e6:.2f} MB = bandwidth x latency); "
            f"the published sweep differs by {min(errors):+.0%}..{max(errors):+.0%}; "
            f"register file {sm_regs / 1024:.0f} KiB per SM vs {cpu_regs / 1024:.1f} KiB per CPU core")
    return {"rows": rows, "gain_full_vs_one_warp": gain, "linear_region_error_fraction": linear_error,
            "dram_peak_bytes_per_s": peak,
            "saturation_occupancy_fraction": saturating["occupancy_fraction"],
            "half_occupancy_fraction_of_full": half["achieved_bytes_per_s"] / full["achieved_bytes_per_s"],
            "measured_half_occupancy_fraction_of_full": measured.get(0.5, math.nan) / measured.get(1.0, math.nan),
            "measured_error_fractions": errors, "bytes_in_flight_needed": need,
            "register_file_bytes_per_sm": sm_regs, "register_file_bytes_total": gpu_regs,
            "cpu_register_bytes_per_core": cpu_regs,
            "verdict": C.verdict("confirmed" if ok else "qualified", text)}


def _plot(path: Path, rows: list[dict], peak: float) -> Path:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    occ = [r["occupancy_fraction"] * 100 for r in rows]
    ax.plot(occ, [r["achieved_bytes_per_s"] / 1e9 for r in rows], "o-", label="simulated")
    ax.plot(occ, [min(r["littles_law_bytes_per_s"], peak) / 1e9 for r in rows], "--", color="gray",
            label="min(threads x 8 B / latency, DRAM)")
    pts = [(r["occupancy_fraction"] * 100, r["measured_bytes_per_s"] / 1e9) for r in rows if r["measured_bytes_per_s"]]
    ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker="*", s=120, color="black", zorder=3,
               label="measured (gpu-benches)")
    ax.set_xlabel("occupancy (% of 2,048 resident threads per SM)")
    ax.set_ylabel("achieved DRAM bandwidth (GB/s)")
    ax.set_title(f"C7: STREAM scale on {HW} vs occupancy", fontsize=10)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return path


if __name__ == "__main__":
    C.cli(main)
