"""C6 (and C7): "Tiling large matrices to fit the memory hierarchy, and overlapping computation with data
movement, hide memory latency" / "latency is hidden by thread parallelism."  One BF16 GEMM on an H100 with
every tile shape and pipeline depth the mapper knows: time, DRAM traffic, L2 hit rate, CTAs per SM."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from gpusim.engine.kernel import simulate_kernel  # noqa: E402
from gpusim.engine.machine import machine_of  # noqa: E402
from gpusim.mapping.gemm import gemm_plan  # noqa: E402
from gpusim.mapping.plan import Tile  # noqa: E402

HW = "h100_sxm5_80gb"


def sweep(hw: str, size: int, tiles) -> list[dict]:
    machine = machine_of(C.load_hardware(hw))
    rows = []
    for tile in tiles:
        plan = gemm_plan(machine, "gemm", "matmul", size, size, size, 1, "bf16", tile, 2.0 * size ** 3)
        if plan is None:
            continue
        t = simulate_kernel(plan, machine)
        rows.append({"tile": tile.label(), "block": tile.block_m, "stages": tile.num_stages, "time_s": t.time_s,
                     "dram_bytes": t.dram_bytes, "l2_to_sm_bytes": plan.l2_bytes_per_cta * plan.grid, "l2_hit_fraction": plan.l2_hit_fraction,
                     "ctas_per_sm": plan.ctas_per_unit, "bound": t.bound,
                     "flop_per_s": 2.0 * size ** 3 / t.time_s})
    return rows


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    size = 4096 if quick else 8192
    tiles = [Tile(b, b, 64, s, 4 if b <= 128 else 8) for b in (32, 64, 128, 256) for s in (1, 2, 4)]
    rows = sweep(HW, size, tiles)
    for r in rows:
        print(f"tile {r['tile']:<22} {r['time_s'] * 1e3:8.3f} ms  {r['flop_per_s'] / 1e12:6.1f} TFLOP/s  DRAM "
              f"{r['dram_bytes'] / 1e9:6.2f} GB  L2 hit {r['l2_hit_fraction']:5.1%}  {r['ctas_per_sm']} CTA/SM  {r['bound']}")
    C.bar_chart(out_dir / "c06_tiling.png", f"C6: {size}^3 BF16 GEMM on {HW} per tile and pipeline depth",
                [r["tile"] for r in rows], {"TFLOP/s": [r["flop_per_s"] / 1e12 for r in rows],
                                            "DRAM GB": [r["dram_bytes"] / 1e9 for r in rows]}, "TFLOP/s / GB", "tile")
    small = min((r for r in rows if r["block"] == min(x["block"] for x in rows)), key=lambda r: r["time_s"])
    best = min(rows, key=lambda r: r["time_s"])
    traffic = small["l2_to_sm_bytes"] / best["l2_to_sm_bytes"]
    speed = small["time_s"] / best["time_s"]
    by_stage = {}
    for r in rows:
        if r["block"] == best["block"]:
            by_stage[r["stages"]] = r["time_s"]
    pipelining = by_stage[min(by_stage)] / by_stage[max(by_stage)]
    status = ("confirmed" if pipelining > 1.05 else "qualified") if traffic > 1 and speed > 1 else "refuted"
    text = (f"the best tile ({best['tile']}) moves {traffic:.1f}x less L2-to-SM traffic and runs {speed:.1f}x faster than "
            f"the best {small['block']}x{small['block']} tile; with that tile, {max(by_stage)} pipeline stages run "
            f"{pipelining:.2f}x faster than {min(by_stage)}"
            + ("" if pipelining > 1.05 else " (at this size the kernel is bandwidth-bound with several CTAs per SM, "
               "so other CTAs already hide the load latency)"))
    return {"rows": rows, "traffic_ratio": traffic, "speedup": speed, "pipelining_speedup": pipelining,
            "verdict": C.verdict(status, text)}


if __name__ == "__main__":
    C.cli(main)
