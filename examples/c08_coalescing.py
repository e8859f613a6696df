"""C8: "Memory coalescing combines accesses into fewer transactions."
A gather kernel y[i] = x[S * i] (N useful elements read with a stride of S elements, written contiguously) on an
H100, for S = 1 (coalesced) up to 64.

The coalescing model here is sector-granularity accounting, nothing more: DRAM and L2 move whole 32-byte
sectors, so the 32 loads of a warp touch ceil(32 * S * eb / 32) sectors when S * eb < 32 (neighbouring lanes
share sectors) and 32 separate sectors when S * eb >= 32.  The bytes a strided warp moves are therefore
min(S * eb, 32) / eb times the bytes it uses (eb = element bytes), and the kernel is simulated as a streaming
kernel whose DRAM reads are scaled by that factor (each outstanding load brings a whole sector, so the bytes in
flight scale too).  It does not model L1 hits between warps, TLB misses, or the extra issue slots of replayed
requests, so it is a lower bound on the cost of uncoalesced access."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from gpusim.config.hardware import DTYPE_BYTES  # noqa: E402
from gpusim.engine.kernel import simulate_kernel  # noqa: E402
from gpusim.engine.machine import machine_of  # noqa: E402
from gpusim.mapping.streaming import VECTOR_LOAD_BYTES, streaming_plan  # noqa: E402

HW = "h100_sxm5_80gb"
SECTOR_BYTES = 32
WARP = 32
STRIDES = (1, 2, 4, 8, 16, 32, 64)


def sector_waste(stride: int, element_bytes: int) -> float:
    """Bytes moved per byte used when a warp's lanes read elements ``stride`` elements apart."""
    span = WARP * stride * element_bytes  # bytes from the first to one past the last lane's element
    if stride * element_bytes >= SECTOR_BYTES:
        moved = WARP * SECTOR_BYTES
    else:
        moved = math.ceil(span / SECTOR_BYTES) * SECTOR_BYTES
    return moved / (WARP * element_bytes)


def gather_plan(machine, num_elements: int, dtype: str, stride: int):
    eb = DTYPE_BYTES[dtype]
    waste = sector_waste(stride, eb)
    threads = 128
    if stride == 1:  # coalesced: each thread loads 16-byte vectors, 4 of them
        per_thread = 4 * VECTOR_LOAD_BYTES // eb
        in_flight = 2 * VECTOR_LOAD_BYTES
    else:  # strided: one element per load, 4 loads per thread, each bringing a whole (partly used) sector
        per_thread = 4
        in_flight = 2 * eb * waste
    ctas = math.ceil(num_elements / (threads * per_thread))
    read = num_elements * eb * waste
    return streaming_plan(machine, f"gather_stride{stride}", "elementwise", dtype, bytes_read=read,
                          bytes_written=num_elements * eb, flop=0.0, sfu_ops=0.0, num_ctas=ctas,
                          threads_per_cta=threads, bytes_in_flight_per_thread=in_flight), read, waste


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    machine = machine_of(C.load_hardware(HW))
    n = 2**24 if quick else 2**27
    results: dict[str, list[dict]] = {}
    for dtype in ("fp32", "bf16"):
        eb = DTYPE_BYTES[dtype]
        rows = []
        for s in STRIDES:
            plan, read, waste = gather_plan(machine, n, dtype, s)
            t = simulate_kernel(plan, machine)
            rows.append({"stride": s, "sector_waste": waste, "dram_bytes": t.dram_bytes, "useful_bytes": 2.0 * n * eb,
                         "time_s": t.time_s, "useful_bytes_per_s": 2.0 * n * eb / t.time_s,
                         "moved_bytes_per_s": t.dram_bytes / t.time_s, "bound": t.bound})
        results[dtype] = rows
        base = rows[0]
        print(f"{HW}, gather of {n:,} {dtype} elements (read strided, write contiguous):")
        print(f"{'stride':>6} {'waste':>6} {'DRAM MB':>9} {'time us':>9} {'slowdown':>8} {'useful GB/s':>11} {'moved GB/s':>10}")
        for r in rows:
            print(f"{r['stride']:>6} {r['sector_waste']:>5.1f}x {r['dram_bytes'] / 1e6:>9.1f} {r['time_s'] * 1e6:>9.1f} "
                  f"{r['time_s'] / base['time_s']:>7.2f}x {r['useful_bytes_per_s'] / 1e9:>11,.0f} "
                  f"{r['moved_bytes_per_s'] / 1e9:>10,.0f}")
    labels = [str(s) for s in STRIDES]
    C.bar_chart(out_dir / "c08_coalescing.png", f"C8: strided gather on {HW} (sector-granularity model)", labels,
                {f"{d} time vs stride 1": [r["time_s"] / results[d][0]["time_s"] for r in results[d]] for d in results}
                | {f"{d} DRAM bytes vs stride 1": [r["dram_bytes"] / results[d][0]["dram_bytes"] for r in results[d]]
                   for d in results},
                "ratio to coalesced (stride 1)", "stride (elements)")
    fp32 = results["fp32"]
    worst = fp32[-1]
    slowdown = worst["time_s"] / fp32[0]["time_s"]
    traffic = worst["dram_bytes"] / fp32[0]["dram_bytes"]
    saturates = fp32[STRIDES.index(8)]["sector_waste"] == fp32[-1]["sector_waste"]
    ok = slowdown > 3 and traffic > 3
    text = (f"an FP32 gather with stride {worst['stride']} moves {traffic:.1f}x the DRAM bytes of the coalesced one "
            f"(each 4-byte load brings a 32-byte sector: reads {worst['sector_waste']:.0f}x) and runs {slowdown:.1f}x "
            f"slower ({worst['useful_bytes_per_s'] / 1e9:,.0f} vs {fp32[0]['useful_bytes_per_s'] / 1e9:,.0f} GB/s useful); "
            f"the waste stops growing at stride {STRIDES[[r['sector_waste'] for r in fp32].index(worst['sector_waste'])]}"
            f" (one sector per lane); BF16 reaches {results['bf16'][-1]['time_s'] / results['bf16'][0]['time_s']:.1f}x")
    return {"rows": results, "fp32_slowdown": slowdown, "fp32_traffic_ratio": traffic, "waste_saturates": saturates,
            "bf16_slowdown": results["bf16"][-1]["time_s"] / results["bf16"][0]["time_s"],
            "verdict": C.verdict("confirmed" if ok else "refuted", text)}


if __name__ == "__main__":
    C.cli(main)
