"""Throughput of design-space sweeps on a local Dask cluster (not a test: run it, read the numbers).

    python benchmarks/bench_sweep.py [--points 1000] [--workers 1,2] [--json]

Each point is one GPT-3 175B layer (forward + backward, batch 8, sequence 2048, BF16) on an
H100 SXM5 variant: a 10 x 10 x 10 grid over DRAM bandwidth, SM count and L2 capacity (the first
``--points`` of it), so every point is a different GPU and nothing is shared between points but the
workers' warm imports. For each worker count the sweep runs on a fresh local cluster (startup
excluded, reported separately) and writes its CSV journal as ``gpusim sweep`` does.

Measured on a 2-core machine (shared with other work): 1 worker 2.7 points/s (200 points, 74 s);
2 workers 4.5 points/s (200 points, 45 s, 83% per-worker efficiency) and 5.0 points/s for all 1,000
points (200 s). The target of 1,000 points in 60 s needs about 0.12 s of worker time per point; one
point costs 0.3-0.4 s, 85% of it in the mapper's tile search (``gpusim.mapping.best_gemm`` estimating
~1,150 candidate tilings per GPT-3 layer), which no cache can share between points that describe
different GPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from gpusim.sweep import ResultsJournal, columns_for, grid_points, local_client, parse_grid, run_sweep

GRID = [
    "gpu.dram.bandwidth_bytes_per_s=" + ",".join(f"{b:g}TB/s" for b in (1.5, 2, 2.5, 3, 3.35, 4, 4.8, 5.5, 6.5, 8)),
    "gpu.num_sms=" + ",".join(str(n) for n in (66, 80, 96, 108, 114, 120, 128, 132, 144, 160)),
    "gpu.l2.capacity_bytes=" + ",".join(f"{c}MiB" for c in (10, 20, 30, 40, 50, 60, 80, 96, 128, 192)),
]


def bench(num_points: int, workers: int) -> dict:
    points = grid_points("h100_sxm5_80gb", "gpt3_175b_train", parse_grid(GRID), fixed=[("config.num_layers", "1")])
    points = points[:num_points]
    t0 = time.perf_counter()
    client = local_client(workers)
    client.run(lambda: __import__("gpusim.sweep") and __import__("gpusim.engine.simulate"))  # warm imports
    startup = time.perf_counter() - t0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            journal = ResultsJournal(Path(tmp) / "bench.csv", columns_for(points))
            summary = run_sweep(client, points, journal)
    finally:
        cluster = client.cluster
        client.close()
        cluster.close()
    return {"workers": workers, "points": len(points), "errors": summary.num_errors,
            "cluster_startup_s": round(startup, 2), "sweep_s": round(summary.wall_s, 2),
            "points_per_s": round(len(points) / summary.wall_s, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--workers", default=None, help="comma-separated worker counts (default 1 and all cores)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    counts = [int(w) for w in args.workers.split(",")] if args.workers else sorted({1, cores})
    results = []
    for w in counts:
        r = bench(args.points, w)
        results.append(r)
        if not args.json:
            first = results[0]
            efficiency = (r["points_per_s"] / r["workers"]) / (first["points_per_s"] / first["workers"])
            print(f"{r['workers']:3d} workers: {r['points']} points in {r['sweep_s']:.1f} s "
                  f"({r['points_per_s']:.2f} points/s, {efficiency:.0%} per-worker efficiency vs "
                  f"{first['workers']} worker(s)), cluster startup {r['cluster_startup_s']:.1f} s, "
                  f"{r['errors']} errors", flush=True)
    if args.json:
        print(json.dumps({"cpu_count": cores, "results": results}, indent=2))


if __name__ == "__main__":
    main()
