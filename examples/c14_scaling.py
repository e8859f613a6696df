"""C14: "Data parallelism with all-reduce scales near-linearly to hundreds of GPUs; NVLink gives up to 900 GB/s;
InfiniBand connects nodes; model and pipeline parallelism split models that do not fit."
On DGX H100 nodes (8 GPUs on NVSwitch, 8x 400 Gb/s InfiniBand per node):
1. weak data-parallel scaling of GPT-2 Large (fixed batch per GPU) from 1 to hundreds of GPUs, with and without
   overlapping the gradient all-reduce with the backward pass: throughput, scaling efficiency, exposed communication;
2. GPT-3 175B, which does not fit one GPU: tensor parallel 8 inside a node x pipeline parallel across nodes, with the
   pipeline bubble against micro-batches (1F1B: (p - 1) / (m + p - 1) of the step), then data parallel on top;
3. a sequence too long for one GPU's memory (Llama-2 7B, 32k tokens): context parallelism (ring attention) splits
   it over 2-8 GPUs of a node, and over 16 across two nodes, where each hop of keys and values crosses
   InfiniBand and outlasts the attention step it should hide behind; Ulysses' all-to-alls (context_comm a2a),
   which move 1/context of the activations, do better there."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from gpusim.engine.cluster import simulate_system  # noqa: E402
from gpusim.workload import load_workload  # noqa: E402

SYSTEM = "dgx_h100"
GPUS_PER_NODE = 8


def simulate(num_gpus: int, workload: str, overrides: list[str]):
    nodes = max(1, -(-num_gpus // GPUS_PER_NODE))
    hw = C.load_hardware(SYSTEM, [("num_nodes", nodes)])
    return simulate_system(hw, load_workload(workload, overrides))


def row(r) -> dict:
    b = r.time_breakdown_s
    return {"num_gpus": r.num_gpus, "step_time_s": r.step_time_s, "samples_per_s": r.samples_per_s,
            "samples_per_s_per_gpu": r.samples_per_s / r.num_gpus, "mfu_fraction": r.mfu_fraction,
            "compute_s": b["compute"], "exposed_communication_s": b["exposed_communication"],
            "pipeline_bubble_s": b["pipeline_bubble"], "optimizer_s": b["optimizer"], "fits": r.fits_in_memory}


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    peer = C.load_hardware("h100_sxm5_80gb").gpu.peer_links
    nvlink_per_direction = peer.num_links * peer.link_bandwidth_bytes_per_s
    print(f"NVLink {peer.generation}: {peer.num_links} links x {peer.link_bandwidth_bytes_per_s / 1e9:.0f} GB/s = "
          f"{nvlink_per_direction / 1e9:.0f} GB/s per direction, {2 * nvlink_per_direction / 1e9:.0f} GB/s bidirectional")

    # 1. data parallel, weak scaling
    dp_counts = (1, 8, 64, 256) if quick else (1, 8, 64, 256, 512, 1024)
    base = ["batch_size=8"] + (["config.num_layers=8"] if quick else [])
    dp = {}
    for overlap in ("true", "false"):
        dp[overlap] = [row(simulate(n, "gpt2_large_train", base + [f"parallelism.data={n}",
                                                                     f"parallelism.overlap_communication={overlap}"]))
                       for n in dp_counts]
    print("\nGPT-2 Large, data parallel (batch 8 per GPU):")
    print(f"{'GPUs':>6} {'overlap':>8} {'step ms':>8} {'samples/s':>10} {'efficiency':>10} {'exposed comm ms':>15}")
    for overlap, rows in dp.items():
        for r in rows:
            r["scaling_efficiency_fraction"] = r["samples_per_s_per_gpu"] / rows[0]["samples_per_s_per_gpu"]
            print(f"{r['num_gpus']:>6} {overlap:>8} {r['step_time_s'] * 1e3:>8.2f} {r['samples_per_s']:>10,.0f} "
                  f"{r['scaling_efficiency_fraction']:>10.1%} {r['exposed_communication_s'] * 1e3:>15.3f}")

    # 2. GPT-3 175B: does not fit one GPU; TP x PP, then DP
    layers = 16 if quick else 96
    g3 = ["batch_size=1", f"config.num_layers={layers}"]
    single = simulate(1, "gpt3_175b_train", g3 + ["parallelism.data=1"])
    pp_sizes = (2, 4) if quick else (4, 8, 16)
    micro = (4, 16, 64) if quick else (16, 64)
    pp_rows = []
    for p in pp_sizes:
        for m in micro:
            r = row(simulate(8 * p, "gpt3_175b_train", g3 + ["parallelism.tensor=8", f"parallelism.pipeline={p}",
                                                             f"parallelism.microbatches={m}"]))
            r |= {"pipeline": p, "microbatches": m, "bubble_formula_fraction": (p - 1) / (m + p - 1),
                  "bubble_fraction": r["pipeline_bubble_s"] / r["step_time_s"]}
            pp_rows.append(r)
    print(f"\nGPT-3 175B ({layers} layers, batch 1 per micro-batch): one H100 needs "
          f"{single.peak_memory_bytes / 2**30:,.0f} GiB of {single.memory_capacity_bytes / 2**30:.0f} GiB "
          f"(fits={single.fits_in_memory}); tensor parallel 8 x pipeline parallel p:")
    print(f"{'GPUs':>5} {'p':>3} {'m':>4} {'step s':>7} {'MFU':>6} {'bubble':>7} {'(p-1)/(m+p-1)':>13} {'exposed comm':>12} fits")
    for r in pp_rows:
        print(f"{r['num_gpus']:>5} {r['pipeline']:>3} {r['microbatches']:>4} {r['step_time_s']:>7.3f} {r['mfu_fraction']:>6.1%} "
              f"{r['bubble_fraction']:>7.1%} {r['bubble_formula_fraction']:>13.1%} "
              f"{r['exposed_communication_s'] / r['step_time_s']:>12.1%} {r['fits']}")
    # DP on top of the smallest pipeline whose stages fit in 80 GB
    p_dp = next((p for p in pp_sizes if all(r["fits"] for r in pp_rows if r["pipeline"] == p)), pp_sizes[-1])
    m_dp = micro[-1]
    g3_dp = []
    for d in ((1, 4, 16) if quick else (1, 8, 32)):
        r = row(simulate(8 * p_dp * d, "gpt3_175b_train", g3 + ["parallelism.tensor=8", f"parallelism.pipeline={p_dp}",
                                                                f"parallelism.microbatches={m_dp}", f"parallelism.data={d}",
                                                                "parallelism.zero_stage=1"]))
        r["data"] = d
        g3_dp.append(r)
    for r in g3_dp:
        r["scaling_efficiency_fraction"] = r["samples_per_s_per_gpu"] / g3_dp[0]["samples_per_s_per_gpu"]
    print(f"\nGPT-3 175B, TP 8 x PP {p_dp} x DP d ({m_dp} micro-batches, ZeRO-1):")
    for r in g3_dp:
        print(f"{r['num_gpus']:>6} GPUs (d={r['data']:>3}) step {r['step_time_s']:.3f} s, MFU {r['mfu_fraction']:.1%}, "
              f"efficiency {r['scaling_efficiency_fraction']:.1%}, exposed comm {r['exposed_communication_s'] * 1e3:.1f} ms")

    # 3. a long sequence: context parallelism
    seq = 32768
    cp_rows = []
    for cp, comm in ((1, "p2p"), (2, "p2p"), (4, "p2p"), (8, "p2p"), (16, "p2p"), (16, "a2a")):
        r = row(simulate(cp, "llama2_7b_train", [f"config.seq_len={seq}", "batch_size=1", f"parallelism.context={cp}",
                                                 f"parallelism.context_comm={comm}", "parallelism.zero_stage=1",
                                                 "activation_checkpointing=selective",
                                                 "config.attention_kernel=fused_async"]))
        r |= {"context": cp, "context_comm": comm, "tokens_per_s_per_gpu": r["samples_per_s_per_gpu"] * seq}
        cp_rows.append(r)
    print(f"\nLlama-2 7B, one {seq:,}-token sequence per step (selective recomputation, ZeRO-1), context parallel c:")
    for r in cp_rows:
        print(f"{r['num_gpus']:>6} GPUs (c={r['context']:>2} {r['context_comm']}) step {r['step_time_s']:.3f} s, "
              f"{r['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, exposed comm {r['exposed_communication_s'] * 1e3:.1f} ms, "
              f"fits {r['fits']}")

    _plot(out_dir / "c14_scaling.png", dp, pp_rows, g3_dp)

    big = dp["true"][-1]
    big_off = dp["false"][-1]
    worst_bubble = max(pp_rows, key=lambda r: r["bubble_fraction"])
    best_bubble = min(pp_rows, key=lambda r: r["bubble_fraction"])
    g3_eff = g3_dp[-1]["scaling_efficiency_fraction"]
    near_linear = big["scaling_efficiency_fraction"] >= 0.9 and g3_eff >= 0.8
    first_fit = next((r for r in cp_rows if r["fits"]), cp_rows[-1])
    in_node, across, ulysses = cp_rows[-3], cp_rows[-2], cp_rows[-1]
    text = (f"data parallel GPT-2 Large keeps {big['scaling_efficiency_fraction']:.0%} per-GPU throughput at "
            f"{big['num_gpus']} GPUs with overlapped all-reduce ({big_off['scaling_efficiency_fraction']:.0%} without, "
            f"exposed comm {big_off['exposed_communication_s'] * 1e3:.2f} ms of {big_off['step_time_s'] * 1e3:.1f} ms); "
            f"GPT-3 175B ({layers} of 96 layers) needs {single.peak_memory_bytes / 2**30:,.0f} GiB on one GPU, so TP 8 x PP splits it: pipeline "
            f"bubble {worst_bubble['bubble_fraction']:.0%} of the step at p={worst_bubble['pipeline']}, "
            f"m={worst_bubble['microbatches']}, {best_bubble['bubble_fraction']:.0%} at p={best_bubble['pipeline']}, "
            f"m={best_bubble['microbatches']}; "
            f"adding DP to {g3_dp[-1]['num_gpus']} GPUs keeps {g3_eff:.0%}; a {seq:,}-token Llama-2 7B sequence "
            f"first fits split over {first_fit['context']} GPUs (context parallel), keeps "
            f"{in_node['tokens_per_s_per_gpu'] / cp_rows[0]['tokens_per_s_per_gpu']:.0%} of one GPU's tokens/s at "
            f"c={in_node['context']} in a node but {across['tokens_per_s_per_gpu'] / cp_rows[0]['tokens_per_s_per_gpu']:.0%} "
            f"at c={across['context']} across two nodes with the ring "
            f"({ulysses['tokens_per_s_per_gpu'] / cp_rows[0]['tokens_per_s_per_gpu']:.0%} with Ulysses' all-to-alls); NVLink {nvlink_per_direction / 1e9:.0f} GB/s "
            f"per direction = {2 * nvlink_per_direction / 1e9:.0f} GB/s bidirectional")
    return {"nvlink_bytes_per_s_per_direction": nvlink_per_direction, "dp": dp, "pipeline": pp_rows, "gpt3_dp": g3_dp,
            "gpt3_fits_one_gpu": single.fits_in_memory, "gpt3_one_gpu_bytes": single.peak_memory_bytes,
            "dp_efficiency_largest": big["scaling_efficiency_fraction"],
            "dp_efficiency_largest_no_overlap": big_off["scaling_efficiency_fraction"],
            "gpt3_dp_efficiency_largest": g3_eff, "context": cp_rows,
            "verdict": C.verdict("confirmed" if near_linear else "qualified", text)}


def _plot(path: Path, dp: dict, pp_rows: list[dict], g3_dp: list[dict]) -> Path:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.5), layout="constrained")
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for overlap, rows in dp.items():
        ax1.plot([r["num_gpus"] for r in rows], [r["scaling_efficiency_fraction"] * 100 for r in rows], "o-",
                 label=f"GPT-2 Large DP, overlap={overlap}")
    ax1.plot([r["num_gpus"] for r in g3_dp], [r["scaling_efficiency_fraction"] * 100 for r in g3_dp], "s-",
             label="GPT-3 175B TP8 x PP x DP")
    ax1.set_xscale("log")
    ax1.set_ylim(0, 105)
    ax1.set_xlabel("GPUs")
    ax1.set_ylabel("per-GPU throughput vs smallest run (%)")
    ax1.set_title("C14: weak scaling on DGX H100 nodes", fontsize=10)
    ax1.legend(fontsize=8)
    labels = [f"p{r['pipeline']} m{r['microbatches']}" for r in pp_rows]
    parts = (("compute_s", "compute"), ("exposed_communication_s", "exposed communication"),
             ("pipeline_bubble_s", "pipeline bubble"), ("optimizer_s", "optimizer"))
    bottom = [0.0] * len(pp_rows)
    for key, name in parts:
        vals = [r[key] / r["step_time_s"] * 100 for r in pp_rows]
        ax2.bar(range(len(pp_rows)), vals, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax2.set_xticks(range(len(pp_rows)), labels, fontsize=8)
    ax2.set_ylabel("% of step")
    ax2.set_title("GPT-3 175B, TP 8 x PP p, m micro-batches", fontsize=10)
    ax2.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return path


if __name__ == "__main__":
    C.cli(main)
