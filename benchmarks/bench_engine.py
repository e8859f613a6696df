"""Speed of the single-device engine (not a test: run it, read the medians).

    python benchmarks/bench_engine.py [--repeats 5]

Each case is timed in a fresh process-level cache state (the mapper and kernel caches are cleared
before every repeat), so the numbers include tile selection and every distinct kernel's SimPy run.
Peak resident memory is read from the OS after all cases.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time

from gpusim.config import load_hardware
from gpusim.engine.simulate import simulate
from gpusim.mapping import map_op
from gpusim.units import plural
from gpusim.mapping.gemm import _wave_traffic
from gpusim.workload import load_workload

CASES = [
    ("8192^3 BF16 GEMM on h100_sxm5_80gb", "h100_sxm5_80gb", "gemm_8192_bf16", []),
    ("GPT-3 175B, one layer fwd+bwd (batch 8, seq 2048)", "h100_sxm5_80gb", "gpt3_175b_train", ["config.num_layers=1"]),
    ("GPT-3 175B, 96 layers fwd+bwd+optimizer", "h100_sxm5_80gb", "gpt3_175b_train", []),
    ("llama2_7b_train step on one H100", "h100_sxm5_80gb", "llama2_7b_train", []),
    ("resnet50_train step on one H100", "h100_sxm5_80gb", "resnet50_train", []),
    ("llama2_7b_inference (prefill + 128 decode steps)", "h100_sxm5_80gb", "llama2_7b_inference", []),
]


def run_case(hw: str, workload: str, overrides: list[str]) -> tuple[float, float, int]:
    map_op.cache_clear()
    _wave_traffic.cache_clear()
    start = time.perf_counter()
    hardware = load_hardware(hw)
    wl = load_workload(workload, overrides)
    result = simulate(hardware, wl, record_spans=False)
    elapsed = time.perf_counter() - start
    return elapsed, result.total_time_s, len(result.kernels)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="write the results as JSON here")
    args = parser.parse_args()
    run_case("h100_sxm5_80gb", "gemm_8192_bf16", [])  # imports and first-use warm-up
    rows = []
    for label, hw, workload, overrides in CASES:
        times = []
        for _ in range(args.repeats):
            elapsed, simulated, kernels = run_case(hw, workload, overrides)
            times.append(elapsed)
        rows.append({"case": label, "median_s": statistics.median(times), "min_s": min(times),
                     "max_s": max(times), "simulated_time_s": simulated, "num_kernels": kernels})
        print(f"{label:<52} median {statistics.median(times):7.3f} s  (min {min(times):.3f}, max {max(times):.3f}; "
              f"{plural(kernels, 'kernel')}, simulated {simulated * 1e3:.3f} ms)", flush=True)
    print("scaling with problem size (median of the repeats):")
    scaling = []
    for size in (2048, 8192, 32768):
        times = []
        for _ in range(args.repeats):
            elapsed, _, _ = run_case("h100_sxm5_80gb", "gemm_8192_bf16", [f"ops.gemm.m={size}", f"ops.gemm.n={size}",
                                                                           f"ops.gemm.k={size}"])
            times.append(elapsed)
        scaling.append({"gemm_size": size, "median_s": statistics.median(times)})
        print(f"  {size}^3 BF16 GEMM: {statistics.median(times):.3f} s")
    for layers in (1, 12, 96):
        elapsed, _, kernels = run_case("h100_sxm5_80gb", "gpt3_175b_train", [f"config.num_layers={layers}"])
        scaling.append({"gpt3_layers": layers, "seconds": elapsed})
        print(f"  GPT-3 175B train with {plural(layers, 'layer')}: {elapsed:.3f} s ({plural(kernels, 'kernel')})")
    rss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"peak RSS {rss_bytes / 2**20:.0f} MiB")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"cases": rows, "scaling": scaling, "peak_rss_bytes": rss_bytes, "python": sys.version},
                      fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
