"""C6 one level down: tiling into registers. A CUDA-core (FP32, no tensor cores) GEMM's threads each hold
a small output tile in registers; per step of k a thread of a tm x tn tile does tm x tn FMAs but also
issues shared loads, operand copies and loop arithmetic (counted in CUTLASS's compiled loops,
measurements/cutlass_simt/). A scheduler issues one instruction per cycle. On an A100 (16 FP32 lanes
per scheduler) an FMA takes two cycles and the rest issue in between; on an H100 (32 lanes per
scheduler) the FMAs need every cycle, so small register tiles lose time. The example sweeps one FP32
GEMM over register tiles of 16-128 outputs per thread on both GPUs, then compares the H100 with
NeuSight's held-out profiles of nn.Linear and torch.bmm, whose rows name the tile cuBLAS ran."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from gpusim.engine.kernel import simulate_kernel  # noqa: E402
from gpusim.engine.machine import machine_of  # noqa: E402
from gpusim.mapping.gemm import gemm_plan, simt_issue_factor  # noqa: E402
from gpusim.mapping.plan import Tile  # noqa: E402

GPUS = ("h100_sxm5_80gb", "a100_sxm4_80gb")
TILES = ((256, 128, 8), (128, 128, 4), (128, 128, 8), (128, 64, 4), (64, 64, 4), (64, 32, 4))
"""(block_m, block_n, warps): 128, 128, 64, 64, 32 and 16 outputs per thread."""
HELD_OUT = ("neusight_linear_fp32_sample.csv", "neusight_bmm_fp32_sample.csv")


def sweep(hw: str, size: int) -> list[dict]:
    machine = machine_of(C.load_hardware(hw))
    rows = []
    for bm, bn, warps in TILES:
        tile = Tile(bm, bn, 8, 2, warps)
        plan = gemm_plan(machine, "sgemm", "matmul", size, size, size, 1, "fp32", tile, 2.0 * size ** 3)
        if plan is None:
            continue
        rows.append({"gpu": hw, "tile": tile.label(), "outputs_per_thread": bm * bn // (32 * warps),
                     "issue_factor": simt_issue_factor(machine, "fp32", tile),
                     "time_s": simulate_kernel(plan, machine).time_s})
    return rows


def held_out_by_tile(gpu: str = "h100_sxm5_80gb") -> dict[int, tuple[int, float]]:
    """Median signed error of NeuSight's held-out FP32 rows on ``gpu`` that pin cuBLAS's tile, by
    outputs per thread: {outputs: (rows, median error)}."""
    from gpusim.accuracy import run_accuracy
    from gpusim.measurements import heldout_dir, load_kernel_cases

    errors: dict[int, list[float]] = {}
    for name in HELD_OUT:
        cases = [c for c in load_kernel_cases(heldout_dir() / name) if c.gpu == gpu and c.kernel_tile]
        tiles = {c.case_id: Tile.parse(c.kernel_tile) for c in cases}
        results, _ = run_accuracy(cases)
        for r in results:
            t = tiles[r.case_id]
            errors.setdefault(t.block_m * t.block_n // (32 * t.num_warps), []).append(r.signed_error_fraction)
    return {k: (len(v), statistics.median(v)) for k, v in sorted(errors.items())}


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    size = 4096 if quick else 8192
    rows = [r for hw in GPUS for r in sweep(hw, size)]
    print(f"FP32 {size}^3 GEMM on CUDA cores, by register tile (outputs per thread):")
    for r in rows:
        print(f"  {r['gpu']:<16} {r['tile']:<18} {r['outputs_per_thread']:4d} outputs  issue x{r['issue_factor']:.2f}  "
              f"{r['time_s'] * 1e3:8.3f} ms")
    loss = {hw: max(r["time_s"] for r in rows if r["gpu"] == hw) / min(r["time_s"] for r in rows if r["gpu"] == hw)
            for hw in GPUS}
    factors = {hw: max(r["issue_factor"] for r in rows if r["gpu"] == hw) for hw in GPUS}
    held_out = held_out_by_tile()
    for outputs, (count, median) in held_out.items():
        print(f"  held out, H100, {outputs:3d} outputs per thread: {count:3d} rows, median error {median:+.1%}")
    C.bar_chart(out_dir / "c06_register_tiles.png", f"FP32 {size}^3 GEMM: time by register tile",
                [f"{r['tile'].split('_s')[0]} ({r['outputs_per_thread']})" for r in rows if r["gpu"] == GPUS[0]],
                {hw: [r["time_s"] * 1e3 for r in rows if r["gpu"] == hw] for hw in GPUS}, "time (ms)",
                "tile (outputs per thread)")
    ok = factors[GPUS[0]] > 1.3 and factors[GPUS[1]] == 1.0
    text = (f"from 128 to 16 outputs per thread the H100's issue slots cost up to {factors[GPUS[0]]:.2f}x its math "
            f"time and the A100's {factors[GPUS[1]]:.2f}x; the sweep's slowest tile is {loss[GPUS[0]]:.2f}x the "
            f"fastest on the H100, {loss[GPUS[1]]:.2f}x on the A100 (which also counts waves and traffic)")
    return {"rows": rows, "issue_factor_max": factors, "loss": loss, "held_out": held_out,
            "verdict": C.verdict("confirmed" if ok else "qualified", text)}


if __name__ == "__main__":
    C.cli(main)
