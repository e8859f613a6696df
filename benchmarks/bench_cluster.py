"""Simulator speed at cluster scale: a GPT-3 175B training step (TP 8, PP 16, DP = GPUs / 128).

    python benchmarks/bench_cluster.py    # 1,024 and 10,240 H100s, a GPU-count sweep, deep pipelines

The engine simulates one representative GPU per pipeline stage, so its cost depends on the number of
stages, micro-batches and layers per stage, not on the number of GPUs: data parallelism only changes the
size of the gradient collectives. Targets (issue 5): <= 10 s for 1,024 GPUs, <= 30 s for 10,240 GPUs on a
2-core machine. The second table grows the pipeline instead: a 1T-parameter GPT (Narayanan et al. 2021,
Table 1: 128 layers, hidden 25,600, 160 heads) on DGX A100s with tensor parallelism 8, data parallelism
6, and 8 to 64 stages with 64 to 512 micro-batches, the last being that paper's 3,072-GPU layout.
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


def run_deep(stages: int, microbatches: int) -> tuple[float, object]:
    start = time.perf_counter()
    data = 6
    hw = load_hardware("dgx_a100", [("num_nodes", stages * data)])
    wl = load_workload("gpt3_175b_train", [
        "config.num_layers=128", "config.hidden_size=25600", "config.num_heads=160", "config.vocab_size=51200",
        "precision=fp16", "activation_checkpointing=full", "batch_size=1", "parallelism.tensor=8",
        f"parallelism.pipeline={stages}", f"parallelism.data={data}", f"parallelism.microbatches={microbatches}"])
    result = simulate_system(hw, wl)
    return time.perf_counter() - start, result


def main() -> None:
    print(f"{'GPUs':>7} {'wall s':>8} {'step s':>8} {'MFU':>6}")
    for nodes, data in ((128, 8), (1280, 80), (16, 1), (512, 32), (2560, 160)):
        wall, r = run(nodes, data)
        print(f"{nodes * 8:>7} {wall:8.2f} {r.step_time_s:8.3f} {r.mfu_fraction:6.1%}")
    print(f"\n{'stages':>7} {'micro':>6} {'GPUs':>6} {'wall s':>8} {'step s':>8} {'MFU':>6}")
    for stages, micro in ((8, 64), (16, 128), (32, 256), (64, 256), (64, 512)):
        wall, r = run_deep(stages, micro)
        print(f"{stages:>7} {micro:>6} {stages * 48:>6} {wall:8.2f} {r.step_time_s:8.3f} {r.mfu_fraction:6.1%}")


if __name__ == "__main__":
    main()
