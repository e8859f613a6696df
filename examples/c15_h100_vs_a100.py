"""C15: "H100 trains GPT-3 6-9x faster than A100; transformer-specific optimizations add 2-3x."
GPT-3 175B training (sequence 2048) on one A100 SXM4 80GB and one H100 SXM5 80GB, the same layers on each (a
slice of the 96 layers: the per-layer work is the same at every depth, so the per-GPU ratio does not depend on
how many layers a GPU holds), in BF16 on both and FP8 (Transformer Engine style) on the H100; then the same slice
on a full DGX node of each with tensor parallel 8.  Beside it, the measured per-GPU throughput of MPT models
trained with llm-foundry on 8-GPU A100 and H100 nodes (published, measurements/published/training.csv)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from gpusim.engine.cluster import simulate_system  # noqa: E402
from gpusim.measurements import load_training_cases  # noqa: E402
from gpusim.workload import load_workload  # noqa: E402

A100, H100 = "a100_sxm4_80gb", "h100_sxm5_80gb"
RUNS = ((A100, "bf16"), (H100, "bf16"), (H100, "fp8"))


def measured_pairs() -> list[dict]:
    """llm-foundry rows of the same model, GPU count and precision on A100 80GB and H100: tokens/s per GPU."""
    cases = [c for c in load_training_cases() if c.software and "llm-foundry" in c.software
             and c.measured_tokens_per_s_per_gpu and c.mode == "train"]
    out = []
    for a in cases:
        if a.gpu != A100:
            continue
        for h in cases:
            if h.gpu == H100 and (h.model, h.num_gpus, h.precision, h.seq_len) == (a.model, a.num_gpus, a.precision, a.seq_len):
                out.append({"model": a.model, "num_gpus": a.num_gpus, "precision": a.precision,
                            "a100_tokens_per_s_per_gpu": a.measured_tokens_per_s_per_gpu,
                            "h100_tokens_per_s_per_gpu": h.measured_tokens_per_s_per_gpu,
                            "ratio": h.measured_tokens_per_s_per_gpu / a.measured_tokens_per_s_per_gpu})
    return out


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    layers = 4 if quick else 12
    base = [f"config.num_layers={layers}", "batch_size=1"]
    single = {}
    for hw, prec in RUNS:
        _, r = C.run(hw, "gpt3_175b_train", *base, f"precision={prec}")
        single[f"{hw}/{prec}"] = {"step_time_s": r.total_time_s, "tokens_per_s": r.tokens_per_s, "mfu_fraction": r.mfu_fraction}
    print(f"GPT-3 175B, {layers} of 96 layers, batch 1 x 2048 tokens, one GPU:")
    for k, v in single.items():
        print(f"  {k:<22} step {v['step_time_s'] * 1e3:8.1f} ms  {v['tokens_per_s']:9,.0f} tokens/s  MFU {v['mfu_fraction']:.1%}")
    a = single[f"{A100}/bf16"]["step_time_s"]
    ratio_bf16 = a / single[f"{H100}/bf16"]["step_time_s"]
    ratio_fp8 = a / single[f"{H100}/fp8"]["step_time_s"]
    peak_ratio = (C.summary(C.load_hardware(H100))["matrix_peak_flop_per_s"]["bf16"]
                  / C.summary(C.load_hardware(A100))["matrix_peak_flop_per_s"]["bf16"])
    bw_ratio = (C.summary(C.load_hardware(H100))["dram_bandwidth_bytes_per_s"]
                / C.summary(C.load_hardware(A100))["dram_bandwidth_bytes_per_s"])
    print(f"  H100/A100 per GPU: BF16 {ratio_bf16:.2f}x, H100 FP8 vs A100 BF16 {ratio_fp8:.2f}x "
          f"(datasheet dense BF16 peak {peak_ratio:.2f}x, HBM bandwidth {bw_ratio:.2f}x)")

    node = {}
    micro = 4 if quick else 8
    for hw, prec in RUNS:
        system = "dgx_a100" if hw == A100 else "dgx_h100"
        r = simulate_system(C.load_hardware(system), load_workload(
            "gpt3_175b_train", base + [f"precision={prec}", "parallelism.tensor=8", f"parallelism.microbatches={micro}"]))
        node[f"{system}/{prec}"] = {"step_time_s": r.step_time_s, "tokens_per_s": r.tokens_per_s,
                                    "mfu_fraction": r.mfu_fraction,
                                    "exposed_communication_s": r.time_breakdown_s["exposed_communication"]}
    print(f"\nsame slice on one 8-GPU node, tensor parallel 8, {micro} micro-batches:")
    for k, v in node.items():
        print(f"  {k:<14} step {v['step_time_s'] * 1e3:8.1f} ms  {v['tokens_per_s'] / 8:9,.0f} tokens/s per GPU  "
              f"MFU {v['mfu_fraction']:.1%}  exposed comm {v['exposed_communication_s'] / v['step_time_s']:.0%}")
    node_bf16 = node["dgx_a100/bf16"]["step_time_s"] / node["dgx_h100/bf16"]["step_time_s"]
    node_fp8 = node["dgx_a100/bf16"]["step_time_s"] / node["dgx_h100/fp8"]["step_time_s"]
    print(f"  DGX H100 / DGX A100: BF16 {node_bf16:.2f}x, FP8 {node_fp8:.2f}x")

    pairs = measured_pairs()
    if pairs:
        print("\nmeasured (llm-foundry, 8-GPU nodes, tokens/s per GPU):")
        for p in pairs:
            print(f"  {p['model']:<8} {p['precision']:<9} A100 {p['a100_tokens_per_s_per_gpu']:>7,.0f}  "
                  f"H100 {p['h100_tokens_per_s_per_gpu']:>7,.0f}  = {p['ratio']:.2f}x")
    measured = [p["ratio"] for p in pairs]

    labels = ["1 GPU BF16", "1 GPU H100 FP8", "node TP8 BF16", "node TP8 H100 FP8"]
    series = {"simulated H100 / A100": [ratio_bf16, ratio_fp8, node_bf16, node_fp8]}
    reference = {"measured (llm-foundry MPT, BF16)": [sum(measured) / len(measured) if measured else None, None, None, None]}
    C.bar_chart(out_dir / "c15_h100_vs_a100.png", "C15: GPT-3 175B training speedup, H100 over A100 BF16",
                labels, series, "speedup (x)", "configuration", reference=reference)
    best = max(ratio_fp8, node_fp8)
    status = "refuted" if best < 6 else "confirmed"
    text = (f"{ratio_bf16:.1f}x per GPU in BF16 and {ratio_fp8:.1f}x with FP8 on the H100 ({node_bf16:.1f}x / "
            f"{node_fp8:.1f}x on a TP-8 node), not 6-9x: the dense BF16 peak grows {peak_ratio:.1f}x and HBM "
            f"bandwidth {bw_ratio:.1f}x"
            + (f"; measured llm-foundry MPT runs give {min(measured):.1f}-{max(measured):.1f}x per GPU" if measured else ""))
    return {"single": single, "node": node, "ratio_bf16": ratio_bf16, "ratio_fp8": ratio_fp8,
            "node_ratio_bf16": node_bf16, "node_ratio_fp8": node_fp8, "peak_ratio_bf16": peak_ratio,
            "bandwidth_ratio": bw_ratio, "measured_pairs": pairs,
            "verdict": C.verdict(status, text)}


if __name__ == "__main__":
    C.cli(main)
