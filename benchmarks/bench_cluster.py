"""Simulator speed at cluster scale: a GPT-3 175B training step (TP 8, PP 16, DP = GPUs / 128).

    python benchmarks/bench_cluster.py            # 1,024 and 10,240 H100s, plus a GPU-count sweep

The engine simulates one representative GPU per pipeline stage, so its cost depends on the number of
stages, micro-batches and layers per stage, not on the number of GPUs: data parallelism only changes the
size of the gradient collectives. Targets (issue 5): <= 10 s for 1,024 GPUs, <= 30 s for 10,240 GPUs on a
2-core machine.
"""

from __future__ import annotations

import time

from gpusim.config import load_hardware
from gpusim.engine.cluster import simulate_system
from gpusim.workload import load_workload


def run(num_nodes: int, data: int) -> tuple[float, object]:
    start = time.perf_counter()
    hw = load_hardware("dgx_h100", [("num_nodes", num_nodes)])
    wl = load_workload("gpt3_175b_train", [f"parallelism.data={data}", "parallelism.tensor=8",
                                            "parallelism.pipeline=16", "parallelism.microbatches=16",
                                            "parallelism.zero_stage=1", "batch_size=1"])
    result = simulate_system(hw, wl)
    return time.perf_counter() - start, result


def main() -> None:
    print(f"{'GPUs':>7} {'wall s':>8} {'step s':>8} {'MFU':>6}")
    for nodes, data in ((128, 8), (1280, 80), (16, 1), (512, 32), (2560, 160)):
        wall, r = run(nodes, data)
        print(f"{nodes * 8:>7} {wall:8.2f} {r.step_time_s:8.3f} {r.mfu_fraction:6.1%}")


if __name__ == "__main__":
    main()
