"""A walkthrough of how gpusim times one GEMM, on a hypothetical 4-SM teaching GPU with round numbers
(hwconfigs/hypothetical/tiny_gpu_4sm.yaml: 4 SMs at 1 GHz, 1,024 BF16 tensor FLOP per cycle per SM, 100 GB/s DRAM,
1 MiB L2), so every step can be checked by hand:

1. the tile candidates the mapper enumerates (CTA tile block_m x block_n x block_k, pipeline stages, warps);
2. for each, the CTA's resources (threads, registers, shared memory) and how many CTAs fit on an SM (occupancy)
   and which resource limits it;
3. the grid (CTAs), the waves (grid / (CTAs per SM x SMs)) and each wave's DRAM bytes from the L2 reuse model;
4. the simulated per-wave spans of the chosen tile and the kernel time;
5. a hand calculation (FLOP / peak, bytes / bandwidth) beside the simulated time."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from gpusim.engine.kernel import simulate_kernel  # noqa: E402
from gpusim.engine.machine import machine_of  # noqa: E402
from gpusim.mapping import best_gemm  # noqa: E402
from gpusim.mapping.gemm import gemm_plan, tile_candidates  # noqa: E402
from gpusim.mapping.occupancy import ctas_per_unit  # noqa: E402

HW = "tiny_gpu_4sm"
DTYPE = "bf16"


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    desc = C.load_hardware(HW)
    machine = machine_of(desc)
    size = 512 if quick else 1024
    m = n = k = size
    flop = 2.0 * m * n * k
    peak = machine.matrix_rate_per_unit(DTYPE) * machine.num_units
    bandwidth = machine.dram_achievable_bytes_per_s
    print(f"{HW}: {machine.num_units} SMs at {machine.unit_clock_hz / 1e9:.0f} GHz, BF16 tensor peak "
          f"{peak / 1e12:.3f} TFLOP/s, DRAM {bandwidth / 1e9:.0f} GB/s, L2 {machine.l2_capacity_bytes / 2**20:.0f} MiB, "
          f"{machine.max_threads_per_unit} threads / {machine.register_file_bytes / 1024:.0f} KiB registers / "
          f"{machine.max_shared_bytes_per_unit / 1024:.0f} KiB shared memory per SM")
    print(f"GEMM {m} x {n} x {k} {DTYPE}: {flop / 1e9:.3f} GFLOP\n")

    # 1-3. every candidate tile: resources, occupancy, grid, waves, DRAM bytes, simulated time
    candidates = tile_candidates(machine, DTYPE, m, n, k, 1)
    rows = []
    for tile in candidates:
        plan = gemm_plan(machine, "gemm", "matmul", m, n, k, 1, DTYPE, tile, flop)
        if plan is None:
            rows.append({"tile": tile.label(), "fits": False})
            continue
        t = simulate_kernel(plan, machine)
        rows.append({"tile": tile.label(), "fits": True, "threads": plan.threads_per_cta,
                     "registers_per_thread": plan.registers_per_thread, "shared_bytes": plan.shared_bytes_per_cta,
                     "ctas_per_sm": plan.ctas_per_unit, "limiter": plan.occupancy_limiter, "grid": plan.grid,
                     "num_waves": plan.num_waves, "dram_bytes": plan.dram_bytes, "time_s": t.time_s})
    fitting = [r for r in rows if r["fits"]]
    print(f"1-3. {len(candidates)} tile candidates, {len(fitting)} fit on an SM (showing the 2-stage ones and the fastest):")
    print(f"  {'tile':<24} {'thr':>4} {'reg':>4} {'smem KiB':>8} {'CTA/SM':>6} {'limiter':<14} {'grid':>5} {'waves':>5} "
          f"{'DRAM MB':>8} {'time us':>8}")
    fastest = min(fitting, key=lambda r: r["time_s"])
    for r in fitting:
        if "_s2_" in r["tile"] or r is fastest:
            print(f"  {r['tile']:<24} {r['threads']:>4} {r['registers_per_thread']:>4} {r['shared_bytes'] / 1024:>8.1f} "
                  f"{r['ctas_per_sm']:>6} {r['limiter']:<14} {r['grid']:>5} {r['num_waves']:>5} "
                  f"{r['dram_bytes'] / 1e6:>8.2f} {r['time_s'] * 1e6:>8.1f}")
    misfits = [r["tile"] for r in rows if not r["fits"]]
    if misfits:
        print(f"  {len(misfits)} more do not fit an SM's {machine.max_shared_bytes_per_unit / 1024:.0f} KiB shared memory or "
              f"{machine.register_file_bytes / 1024:.0f} KiB registers, e.g. " + ", ".join(misfits[:4]))

    # the mapper's choice, explained
    plan = best_gemm(machine, "gemm", "matmul", m, n, k, 1, DTYPE, flop)
    tile = plan.tile
    per_sm, limiter = ctas_per_unit(machine, plan.threads_per_cta, plan.registers_per_thread, plan.shared_bytes_per_cta)
    warps = plan.threads_per_cta // machine.warp_size
    hand_limits = {
        "max_ctas": machine.max_ctas_per_unit,
        "threads": machine.max_threads_per_unit // plan.threads_per_cta,
        "shared_memory": int(machine.max_shared_bytes_per_unit // plan.shared_bytes_per_cta),
        "registers (approx.)": int(machine.register_file_bytes // (plan.registers_per_thread * plan.threads_per_cta * 4)),
    }
    print(f"\nthe mapper picks {tile.label()}: a CTA of {warps} warps ({plan.threads_per_cta} threads) computes a "
          f"{tile.block_m}x{tile.block_n} output tile stepping {tile.block_k} along K with {tile.num_stages} stages in shared "
          f"memory: {tile.num_stages} x ({tile.block_m} + {tile.block_n}) x {tile.block_k} x 2 B = "
          f"{plan.shared_bytes_per_cta / 1024:.1f} KiB")
    print("  occupancy by hand: " + ", ".join(f"{k_} {v}" for k_, v in hand_limits.items())
          + f" -> ctas_per_unit = {per_sm} (limited by {limiter})")
    slots = per_sm * machine.num_units
    grid = math.ceil(m / tile.block_m) * math.ceil(n / tile.block_n) * tile.split_k
    print(f"  grid = ({m}/{tile.block_m}) x ({n}/{tile.block_n}) = {grid} CTAs; {per_sm} per SM x {machine.num_units} SMs "
          f"= {slots} at once -> {math.ceil(grid / slots)} waves")
    min_bytes = (m * k + k * n + m * n) * 2.0
    print(f"  DRAM bytes per wave (L2 reuse model; the compulsory A + B + C traffic is {min_bytes / 1e6:.2f} MB): "
          + ", ".join(f"{b / 1e6:.2f}" for b in plan.wave_dram_bytes) + f" MB, total {plan.dram_bytes / 1e6:.2f} MB")

    # 4. simulate
    timing = simulate_kernel(plan, machine)
    print("\n4. simulated waves (wave start/end, CTAs, limiter):")
    for w in timing.spans:
        print(f"  {w.start_s * 1e6:8.2f} .. {w.end_s * 1e6:8.2f} us  {w.num_ctas:>3} CTAs x {w.num_waves} wave(s)  {w.limiter}")
    print(f"  kernel time {timing.time_s * 1e6:.1f} us, bound: {timing.bound}, DRAM {timing.dram_bytes / 1e6:.2f} MB")

    # 5. hand calculation
    compute_s = flop / peak
    memory_s = plan.dram_bytes / bandwidth
    per_wave_fill = machine.dram_latency_s
    # after its main loop each SM stores its C tile at its own load/store bandwidth, then one L2 latency
    c_tile_bytes = plan.epilogue_bytes_per_cta
    per_wave_drain = machine.l2_latency_s + c_tile_bytes / machine.l1_bytes_per_s_per_unit
    hand_s = max(compute_s, memory_s) + math.ceil(grid / slots) * (per_wave_fill + per_wave_drain)
    print(f"\n5. by hand: compute {flop:.3e} FLOP / {peak:.3e} FLOP/s = {compute_s * 1e6:.1f} us; memory "
          f"{plan.dram_bytes / 1e6:.2f} MB / {bandwidth / 1e9:.0f} GB/s = {memory_s * 1e6:.1f} us; roofline "
          f"max = {max(compute_s, memory_s) * 1e6:.1f} us; plus, per wave, one DRAM latency "
          f"({per_wave_fill * 1e9:.0f} ns) to fill the pipeline and the {c_tile_bytes / 1024:.0f} KiB C tile drain "
          f"({per_wave_drain * 1e9:.0f} ns) = {hand_s * 1e6:.1f} us; simulated {timing.time_s * 1e6:.1f} us "
          f"({timing.time_s / hand_s - 1:+.1%})")

    _plot(out_dir / "tiny_gpu_walkthrough.png", timing, plan, compute_s, memory_s)
    ratio = timing.time_s / max(compute_s, memory_s)
    ok = 1.0 <= ratio <= 1.5
    text = (f"the {m}^3 BF16 GEMM takes {timing.time_s * 1e6:.1f} us simulated vs {max(compute_s, memory_s) * 1e6:.1f} us "
            f"roofline ({compute_s * 1e6:.1f} us compute, {memory_s * 1e6:.1f} us DRAM): {ratio:.2f}x, in "
            f"{plan.num_waves} waves of {slots} CTAs ({tile.label()}, {per_sm} per SM limited by {limiter})")
    return {"num_candidates": len(candidates), "num_fitting": len(fitting), "tile": tile.label(), "grid": plan.grid,
            "ctas_per_sm": per_sm, "limiter": limiter, "num_waves": plan.num_waves,
            "wave_dram_bytes": list(plan.wave_dram_bytes), "compulsory_bytes": min_bytes, "time_s": timing.time_s,
            "compute_s": compute_s, "memory_s": memory_s, "hand_s": hand_s, "roofline_ratio": ratio,
            "spans": [(w.start_s, w.end_s, w.num_ctas, w.num_waves, w.limiter) for w in timing.spans],
            "flop": flop, "peak_flop_per_s": peak,
            "verdict": C.verdict("confirmed" if ok else "qualified", text)}


def _plot(path: Path, timing, plan, compute_s: float, memory_s: float) -> Path:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 4.5), layout="constrained")
    ax = fig.add_subplot(2, 1, 1)
    wave_bytes = []
    index = 0
    for i, w in enumerate(timing.spans):
        per = (w.end_s - w.start_s) / max(1, w.num_waves)
        for j in range(w.num_waves):
            s = w.start_s + j * per
            ax.barh(0, per * 1e6, left=s * 1e6, color=f"C{(index % 2)}", edgecolor="black")
            ax.text((s + per / 2) * 1e6, 0, f"w{index}\n{w.num_ctas}", ha="center", va="center", fontsize=7)
            wave_bytes.append((s + per / 2, plan.wave_dram_bytes[min(index, len(plan.wave_dram_bytes) - 1)]))
            index += 1
    ax.axvline(compute_s * 1e6, color="red", linestyle="--", label="FLOP / peak")
    ax.axvline(memory_s * 1e6, color="gray", linestyle=":", label="DRAM bytes / bandwidth")
    ax.set_yticks([0], ["SMs"])
    ax.set_title(f"tiny GPU: {plan.name}, {timing.time_s * 1e6:.1f} us in waves (CTAs per wave)", fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    ax2 = fig.add_subplot(2, 1, 2, sharex=ax)
    ax2.bar([x * 1e6 for x, _ in wave_bytes], [b / 1e6 for _, b in wave_bytes],
            width=(timing.time_s * 1e6) / max(1, len(wave_bytes)) * 0.8)
    ax2.set_ylabel("DRAM MB per wave")
    ax2.set_xlabel("time (us)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return path


if __name__ == "__main__":
    C.cli(main)
