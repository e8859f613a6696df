"""C21: "MI300X has 192 GB HBM3; specialized accelerators (TPUs, systolic arrays) may surpass GPUs for some
workloads."  MI300X and a TPU-like systolic-array description next to an H100 on the same GEMM, a
memory-bound op and a BERT training step."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

DEVICES = ("h100_sxm5_80gb", "mi300x", "tpu_like_systolic")


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    cases = {"gemm_8192_bf16": ["ops.0.m=4096", "ops.0.n=4096", "ops.0.k=4096"] if quick else [],
             "layernorm_bf16": [], "bert_base_train": ["config.num_layers=4"] if quick else []}
    times: dict[str, dict[str, float | None]] = {}
    for wl, ov in cases.items():
        times[wl] = {}
        for hw in DEVICES:
            _, r = C.try_run(hw, wl, *ov)
            times[wl][hw] = r.total_time_s if r is not None else None
        print(f"{wl:<16} " + "  ".join(f"{hw} {t * 1e3:9.3f} ms" if t else f"{hw} n/a" for hw, t in times[wl].items()))
    caps = {hw: C.summary(C.load_hardware(hw))["dram_capacity_bytes"] for hw in DEVICES}
    print("memory: " + ", ".join(f"{hw} {c / 1e9:.0f} GB ({c / 2**30:.0f} GiB)" for hw, c in caps.items()))
    C.bar_chart(out_dir / "c21_mi300x_tpu.png", "C21: speed-up over H100 per workload", list(cases),
                {hw: [(times[w]["h100_sxm5_80gb"] / times[w][hw]) if times[w][hw] else 0.0 for w in cases]
                 for hw in DEVICES}, "speed-up over H100 (x)", "workload")
    rel = {w: {hw: times[w]["h100_sxm5_80gb"] / t for hw, t in times[w].items() if t} for w in cases}
    wins = [f"{hw} on {w} ({r:.2f}x)" for w in cases for hw, r in rel[w].items() if hw != "h100_sxm5_80gb" and r > 1]
    tpu_wins = [w for w in wins if w.startswith("tpu_like")]
    status = "confirmed" if tpu_wins else "qualified"
    text = (f"MI300X has {caps['mi300x'] / 1e9:.0f} GB ({caps['mi300x'] / 2**30:.0f} GiB) of HBM3; faster than H100: "
            f"{', '.join(wins) or 'nothing'}; "
            + ", ".join(f"{w}: " + "/".join(f"{r:.2f}x" for r in rel[w].values()) for w in cases)
            + " (H100/MI300X/TPU-like, speed-up over H100)"
            + ("" if tpu_wins else "; the TPU-like systolic config beats the H100 on none of them"))
    print("published measurements of the same kind of case:")
    measured = C.published("mi300x_mamf_bf16_10240x15360x8192", "h100_sxm_mamf_bf16_2048x2048x13312")
    return {"published": measured, "times_s": times, "speedup_over_h100": rel, "mi300x_capacity_bytes": caps["mi300x"], "wins": wins,
            "verdict": C.verdict(status, text)}


if __name__ == "__main__":
    C.cli(main)
