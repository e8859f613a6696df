"""C1: "GPUs have thousands of small cores, CPUs a few big ones; H100 has 16,896 CUDA cores, MI300X 19,200
stream processors."  Core counts come from the hardware descriptions (SMs x lanes per SM); a GEMM shows
what the lanes buy. Sources: NVIDIA H100 whitepaper (132 SMs x 128 FP32 lanes), AMD MI300X data sheet
(304 CUs x 64 stream processors)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

DEVICES = ("xeon_8480", "a100_sxm4_80gb", "h100_sxm5_80gb", "mi300x")
CLAIMED = {"h100_sxm5_80gb": 16_896, "mi300x": 19_200}


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    size = 4096 if quick else 8192
    rows = {}
    for hw in DEVICES:
        info = C.summary(C.load_hardware(hw))
        _, r = C.run(hw, "gemm_8192_bf16", f"ops.0.m={size}", f"ops.0.n={size}", f"ops.0.k={size}")
        rows[hw] = {"num_units": info["num_sms"], "num_fp32_lanes": info["num_fp32_lanes"],
                    "gemm_time_s": r.total_time_s, "gemm_flop_per_s": r.total_flop / r.total_time_s}
        print(f"{hw:<16} {info['num_sms']:>4} SMs/CUs/cores  {info['num_fp32_lanes']:>6} FP32 lanes  "
              f"BF16 GEMM {size}^3: {r.total_time_s * 1e3:8.3f} ms ({rows[hw]['gemm_flop_per_s'] / 1e12:6.1f} TFLOP/s)"
              + (f"   claimed {CLAIMED[hw]:,}" if hw in CLAIMED else ""))
    C.bar_chart(out_dir / "c01_core_counts.png", "C1: FP32 lanes per device (from the hardware descriptions)",
                list(DEVICES), {"FP32 lanes": [rows[h]["num_fp32_lanes"] for h in DEVICES]},
                "FP32 lanes (log)", "device", log=True,
                reference={"article's claim": [CLAIMED.get(h) for h in DEVICES]})
    h100, mi = rows["h100_sxm5_80gb"]["num_fp32_lanes"], rows["mi300x"]["num_fp32_lanes"]
    cpu = rows["xeon_8480"]
    speedup = cpu["gemm_time_s"] / rows["h100_sxm5_80gb"]["gemm_time_s"]
    status = "confirmed" if h100 == CLAIMED["h100_sxm5_80gb"] and mi == CLAIMED["mi300x"] else "qualified"
    text = (f"H100 has {h100:,} CUDA cores as claimed; MI300X has {mi:,} stream processors, not 19,200; "
            f"the Xeon 8480 has {cpu['num_units']} cores ({cpu['num_fp32_lanes']:,} FP32 SIMD lanes); "
            f"H100 runs a {size}^3 BF16 GEMM {C.ratio_text(speedup)} faster than the Xeon")
    print("published measurements of the same kind of case:")
    measured = C.published("h100_sxm_bf16_mm_8192", "h100_sxm_mamf_bf16_2048x2048x13312")
    return {"published": measured, "devices": rows, "h100_lanes": h100, "mi300x_lanes": mi, "gemm_speedup_h100_vs_xeon": speedup,
            "verdict": C.verdict(status, text)}


if __name__ == "__main__":
    C.cli(main)
