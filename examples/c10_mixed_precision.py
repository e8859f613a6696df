"""C10: "Mixed precision halves activation and gradient memory and speeds up training; FP8 and the
Transformer Engine add 2-5x on transformers."  A GPT-2 large training step on an H100 in FP32, TF32, BF16
and FP8: memory footprint by kind and step time."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

HW = "h100_sxm5_80gb"
PRECISIONS = ("fp32", "tf32", "bf16", "fp8")


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    ov = ["config.num_layers=6"] if quick else []
    res = {}
    for p in PRECISIONS:
        _, r = C.try_run(HW, "gpt2_large_train", *ov, f"precision={p}")
        if r is None:
            continue
        res[p] = r
        m = r.memory
        print(f"{p:<5} step {r.step_time_s * 1e3:8.2f} ms  MFU {r.mfu_fraction:5.1%}  activations "
              f"{m.get('activations_bytes', 0) / 2**30:6.2f} GiB  gradients {m.get('gradients_bytes', 0) / 2**30:5.2f} GiB"
              f"  total {r.peak_memory_bytes / 2**30:6.2f} GiB")
    C.bar_chart(out_dir / "c10_mixed_precision.png", f"C10: GPT-2 large training step on {HW} per precision",
                list(res), {"step time (ms)": [r.step_time_s * 1e3 for r in res.values()],
                            "activations (GiB)": [r.memory.get("activations_bytes", 0) / 2**30 for r in res.values()]},
                "ms / GiB", "precision")
    act = {p: r.memory.get("activations_bytes", 0.0) for p, r in res.items()}
    grad = {p: r.memory.get("gradients_bytes", 0.0) for p, r in res.items()}
    act_ratio = act["fp32"] / act["bf16"]
    grad_ratio = grad["fp32"] / grad["bf16"] if grad["bf16"] else 0.0
    bf16_speed = res["fp32"].step_time_s / res["bf16"].step_time_s
    fp8_speed = res["bf16"].step_time_s / res["fp8"].step_time_s if "fp8" in res else None
    fp8_in_claim = fp8_speed is not None and 2.0 <= fp8_speed <= 5.0
    status = "confirmed" if 1.9 <= act_ratio <= 2.1 and bf16_speed > 1 and fp8_in_claim else "qualified"
    text = (f"BF16 vs FP32: activations {act_ratio:.2f}x smaller, gradients {grad_ratio:.2f}x, step "
            f"{bf16_speed:.1f}x faster (FP32 runs without tensor cores); FP8 over BF16 "
            + (f"{fp8_speed:.2f}x" + ("" if fp8_in_claim else ", not 2-5x (only the GEMMs run in FP8)")
               if fp8_speed else "not supported"))
    return {"activation_ratio": act_ratio, "gradient_ratio": grad_ratio, "bf16_speedup": bf16_speed,
            "fp8_speedup_over_bf16": fp8_speed, "verdict": C.verdict(status, text)}


if __name__ == "__main__":
    C.cli(main)
