"""C16: "GPUs deliver 5-10 TFLOPS/W vs 0.1-0.5 for CPUs; data movement dominates energy."
Energy of simulated runs from each description's power block (gpusim.energy: math energy per FLOP of the pipe and
dtype, bytes through L1, L2 and DRAM times their energy per byte, idle power over the run):
1. FLOP per joule (= FLOP/s per watt) of a large GEMM on a CPU and four GPUs, beside the datasheet peak / TDP;
2. the energy split compute (math) vs data movement (L1 + L2 + DRAM + links) vs static (idle power) for a GEMM,
   a softmax, a GPT-2 Large training step and Llama-2-7B decoding on an H100."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from gpusim.energy import run_energy  # noqa: E402

DEVICES = {"xeon_8480": "bf16", "v100_sxm2_32gb": "fp16", "a100_sxm4_80gb": "fp16", "h100_sxm5_80gb": "fp16",
           "mi300x": "fp16"}
SPLIT_HW = "h100_sxm5_80gb"


def split_of(energy) -> dict[str, float]:
    b = energy.breakdown_j
    movement = b["l1_j"] + b["l2_j"] + b["dram_j"] + b["link_j"]
    total = energy.energy_j
    return {"math_fraction": b["math_j"] / total, "data_movement_fraction": movement / total,
            "static_fraction": b["static_j"] / total, "dram_fraction": b["dram_j"] / total,
            "movement_over_math": movement / b["math_j"] if b["math_j"] > 0 else float("inf"), "energy_j": total}


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    size = 4096 if quick else 8192
    eff = {}
    print(f"{size}^3 GEMM: simulated FLOP/J (all energy, idle included) vs datasheet dense peak / TDP")
    for hw, dtype in list(DEVICES.items()) + [("h100_sxm5_80gb", "fp8")]:
        desc, r = C.run(hw, "gemm_8192_bf16", f"ops.gemm.m={size}", f"ops.gemm.n={size}", f"ops.gemm.k={size}",
                        f"ops.gemm.dtype={dtype}")
        e = run_energy(r, desc)
        s = C.summary(desc)
        peak = s["peak_flop_per_s"][dtype] / s["tdp_w"]
        sparse = (s.get("sparse_peak_flop_per_s") or {}).get(dtype)
        eff[f"{hw}/{dtype}"] = {"flop_per_j": e.flop_per_j, "datasheet_flop_per_j": peak,
                                "datasheet_sparse_flop_per_j": sparse / s["tdp_w"] if sparse else None,
                                "avg_power_w": e.avg_power_w, "tdp_w": s["tdp_w"]}
        print(f"  {hw + '/' + dtype:<22} {e.flop_per_j / 1e12:6.2f} TFLOP/J at {e.avg_power_w:5.0f} W "
              f"(datasheet {peak / 1e12:5.2f} dense" + (f", {sparse / s['tdp_w'] / 1e12:5.2f} 2:4 sparse" if sparse else "")
              + f" TFLOP/s per W of {s['tdp_w']:.0f} W TDP)")

    h = eff["h100_sxm5_80gb/fp16"]
    print(f"  note: the simulated H100 GEMM draws {h['avg_power_w']:.0f} W of its {h['tdp_w']:.0f} W TDP (the "
          f"description's dynamic_energy_factor is fitted so a large GEMM draws TDP)")

    runs = {"GEMM (fp16)": ("gemm_8192_bf16", [f"ops.gemm.m={size}", f"ops.gemm.n={size}", f"ops.gemm.k={size}",
                                               "ops.gemm.dtype=fp16"]),
            "softmax (bf16)": ("softmax_bf16", []),
            "GPT-2 Large train step": ("gpt2_large_train", ["config.num_layers=6"] if quick else []),
            "Llama-2-7B decode": ("llama2_7b_inference", ["generate_len=16", "decode_buckets=2"] if quick else [])}
    split = {}
    print(f"\nenergy split on {SPLIT_HW}:")
    for label, (wl, ov) in runs.items():
        desc, r = C.run(SPLIT_HW, wl, *ov)
        split[label] = split_of(run_energy(r, desc))
        x = split[label]
        print(f"  {label:<24} {x['energy_j']:9.3f} J: math {x['math_fraction']:5.1%}  data movement "
              f"{x['data_movement_fraction']:5.1%} (DRAM {x['dram_fraction']:5.1%})  static {x['static_fraction']:5.1%}")

    labels = list(split)
    C.bar_chart(out_dir / "c16_energy_split.png", f"C16: energy split on {SPLIT_HW}", labels,
                {"math": [split[k]["math_fraction"] * 100 for k in labels],
                 "data movement": [split[k]["data_movement_fraction"] * 100 for k in labels],
                 "static": [split[k]["static_fraction"] * 100 for k in labels]}, "% of energy", "run")
    names = list(eff)
    C.bar_chart(out_dir / "c16_flop_per_joule.png", f"C16: {size}^3 GEMM, TFLOP per joule", names,
                {"simulated": [eff[k]["flop_per_j"] / 1e12 for k in names],
                 "datasheet dense peak / TDP": [eff[k]["datasheet_flop_per_j"] / 1e12 for k in names]},
                "TFLOP/J (= TFLOP/s per W)", "device / dtype")

    cpu = eff["xeon_8480/bf16"]["flop_per_j"]
    gpu_fp16 = eff["h100_sxm5_80gb/fp16"]["flop_per_j"]
    gpu_best = max(v["flop_per_j"] for k, v in eff.items() if not k.startswith("xeon"))
    sparse_fp8 = eff["h100_sxm5_80gb/fp8"]["datasheet_sparse_flop_per_j"]
    movement_dominates = [k for k, v in split.items() if v["data_movement_fraction"] > v["math_fraction"]]
    text = (f"simulated GEMMs give {gpu_fp16 / 1e12:.1f} TFLOP/J on an H100 in FP16 ({gpu_best / 1e12:.1f} at best, "
            f"FP8) vs {cpu / 1e12:.2f} on a Xeon 8480 with AMX ({gpu_fp16 / cpu:.1f}x); 5-10 TFLOPS/W is only reached "
            f"by datasheet sparse FP8 peaks ({sparse_fp8 / 1e12:.1f} on H100); data movement outweighs math in "
            f"{len(movement_dominates)} of {len(split)} runs ({', '.join(movement_dominates) or 'none'}), not in the "
            f"GEMM ({split['GEMM (fp16)']['data_movement_fraction']:.0%} vs {split['GEMM (fp16)']['math_fraction']:.0%} math); "
            f"the simulated H100 GEMM draws {h['avg_power_w']:.0f} W of {h['tdp_w']:.0f} W TDP")
    return {"efficiency": eff, "split": split, "h100_fp16_flop_per_j": gpu_fp16, "cpu_flop_per_j": cpu,
            "best_gpu_flop_per_j": gpu_best, "movement_dominates": movement_dominates,
            "verdict": C.verdict("qualified", text)}


if __name__ == "__main__":
    C.cli(main)
