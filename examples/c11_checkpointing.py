"""C11 and C13: "Gradient checkpointing trades recomputation for memory; model size stresses GPU memory
(80 GB H100, 192 GB MI300X; '24 GB at most' is dated)" and "larger batches raise GPU utilization until
memory runs out."  Llama-2-7B training memory with and without checkpointing, out-of-memory detection per
GPU, and a batch-size sweep of GPT-2 large on an H100; beside them, a measured 22B run with full and with
selective recomputation (Korthikanti et al. 2022)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

GPUS = ("rtx_4090", "a100_sxm4_40gb", "h100_sxm5_80gb", "mi300x")


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    ov = ["config.num_layers=4"] if quick else []
    ckpt = {}
    for mode in ("none", "selective", "full"):
        _, r = C.run("h100_sxm5_80gb", "llama2_7b_train", *ov, f"activation_checkpointing={mode}")
        ckpt[mode] = {"memory_bytes": r.peak_memory_bytes, "activations_bytes": r.memory.get("activations_bytes", 0.0),
                      "step_time_s": r.step_time_s}
        print(f"checkpointing {mode:<9} activations {ckpt[mode]['activations_bytes'] / 2**30:7.2f} GiB  total "
              f"{r.peak_memory_bytes / 2**30:7.2f} GiB  step {r.step_time_s * 1e3:8.1f} ms")
    from gpusim.workload import load_workload

    fits = {}
    need = load_workload("llama2_7b_train", ["activation_checkpointing=full"]).memory.total_bytes
    for g in GPUS:
        has = C.summary(C.load_hardware(g))["dram_capacity_bytes"]
        fits[g] = {"fits": need <= has, "needs_bytes": need, "has_bytes": has}
        print(f"{g:<16} Llama-2-7B training (full checkpointing, AdamW) needs {need / 2**30:6.1f} GiB of "
              f"{has / 2**30:5.0f} GiB: {'fits' if need <= has else 'OUT OF MEMORY'}")
    batches = (1, 4, 16) if quick else (1, 2, 4, 8, 16, 32, 64)
    sweep = {}
    for b in batches:
        _, r = C.run("h100_sxm5_80gb", "gpt2_large_train", *(["config.num_layers=6"] if quick else []),
                     f"batch_size={b}")
        sweep[b] = {"samples_per_s": r.samples_per_s, "mfu_fraction": r.mfu_fraction,
                    "memory_bytes": r.peak_memory_bytes, "fits": r.fits_in_memory}
        print(f"GPT-2 large batch {b:3d}: {r.samples_per_s:8.1f} samples/s, MFU {r.mfu_fraction:5.1%}, memory "
              f"{r.peak_memory_bytes / 2**30:6.1f} GiB {'' if r.fits_in_memory else '(does not fit)'}")
    C.bar_chart(out_dir / "c11_checkpointing.png", "C11: Llama-2-7B activations on H100 per checkpointing mode",
                list(ckpt), {"activations (GiB)": [v["activations_bytes"] / 2**30 for v in ckpt.values()],
                             "step time (x of none)": [v["step_time_s"] / ckpt["none"]["step_time_s"]
                                                       for v in ckpt.values()]}, "GiB / ratio", "checkpointing")
    C.bar_chart(out_dir / "c13_batch_sweep.png", "C13: GPT-2 large training on H100 vs batch size",
                [str(b) for b in batches], {"MFU (%)": [100 * sweep[b]["mfu_fraction"] for b in batches]},
                "MFU (%)", "batch size")
    print("published measurements of the same trade (Korthikanti et al. 2022, 22B GPT on 8 A100s, held out):")
    measured = C.published_training("megatron_a100_korthikanti2022.csv", "korthikanti2022_gpt_22b_8gpu_full_recompute",
                                    "korthikanti2022_gpt_22b_8gpu_selective_sp")
    step = {("full" if "full" in r["case_id"] else "selective"): r for r in measured}
    measured_cost = step["full"]["measured"] / step["selective"]["measured"]
    simulated_cost = step["full"]["simulated"] / step["selective"]["simulated"]
    saving = ckpt["none"]["activations_bytes"] / ckpt["full"]["activations_bytes"]
    cost = ckpt["full"]["step_time_s"] / ckpt["none"]["step_time_s"]
    mfu_gain = sweep[batches[-1]]["mfu_fraction"] / sweep[batches[0]]["mfu_fraction"]
    ok = saving > 1 and cost > 1 and mfu_gain > 1
    text = (f"full checkpointing cuts Llama-2-7B activations {saving:.1f}x for a {cost:.2f}x slower step; with it "
            f"the model fits on {', '.join(g for g in GPUS if fits[g]['fits']) or 'none'} and not on "
            f"{', '.join(g for g in GPUS if not fits[g]['fits']) or 'none'}; GPT-2 large MFU rises "
            f"{mfu_gain:.2f}x from batch {batches[0]} to {batches[-1]}; measured on a 22B GPT (8 A100s), full "
            f"recomputation makes the step {measured_cost:.2f}x as long as selective recomputation with sequence "
            f"parallelism (gpusim {simulated_cost:.2f}x)")
    return {"published": measured, "measured_full_vs_selective": measured_cost,
            "simulated_full_vs_selective": simulated_cost, "activation_saving": saving, "recompute_cost": cost, "fits": {g: v["fits"] for g, v in fits.items()},
            "mfu_gain": mfu_gain, "sweep": sweep, "verdict": C.verdict("confirmed" if ok else "qualified", text)}


if __name__ == "__main__":
    C.cli(main)
