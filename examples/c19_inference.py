"""C19: "Inference serves many requests at once with low latency; edge GPUs for embedded inference."
Llama-2-7B prefill and decode latency vs batch size on an H100 and on a Jetson AGX Orin."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

DEVICES = ("h100_sxm5_80gb", "jetson_agx_orin")


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    batches = (1, 8, 32) if quick else (1, 2, 4, 8, 16, 32, 64)
    ov = ["config.num_layers=4", "generate_len=16", "decode_buckets=2", "prompt_len=256"] if quick else []
    rows: dict[str, dict[int, dict[str, float]]] = {}
    for hw in DEVICES:
        rows[hw] = {}
        for b in batches:
            _, r = C.run(hw, "llama2_7b_inference", *ov, f"batch_size={b}")
            prefill = sum(k.time_s for k in r.kernels if k.phase == "prefill")
            decode = sum(k.time_s for k in r.kernels if k.phase == "decode")
            rows[hw][b] = {"total_s": r.total_time_s, "prefill_s": prefill, "decode_s": decode,
                           "tokens_per_s": r.tokens_per_s or 0.0, "fits": r.fits_in_memory}
            print(f"{hw:<16} batch {b:3d}: prefill {prefill * 1e3:9.2f} ms, decode {decode * 1e3:9.2f} ms, "
                  f"{rows[hw][b]['tokens_per_s']:10,.0f} tokens/s{'' if r.fits_in_memory else ' (does not fit)'}")
    C.bar_chart(out_dir / "c19_inference.png", "C19: Llama-2-7B inference throughput vs batch size",
                [str(b) for b in batches], {hw: [rows[hw][b]["tokens_per_s"] for b in batches] for hw in DEVICES},
                "tokens/s (log)", "batch size (requests)", log=True)
    h = rows["h100_sxm5_80gb"]
    gain = h[batches[-1]]["tokens_per_s"] / h[batches[0]]["tokens_per_s"]
    lat = h[batches[-1]]["decode_s"] / h[batches[0]]["decode_s"]
    edge = h[1]["tokens_per_s"] / rows["jetson_agx_orin"][1]["tokens_per_s"]
    ok = gain > 2 and lat < gain
    text = (f"H100 batch {batches[-1]} serves {gain:.1f}x the tokens/s of batch 1 while decode time grows only "
            f"{lat:.2f}x; a Jetson AGX Orin runs the same model {edge:.0f}x slower at batch 1")
    return {"throughput_gain": gain, "decode_latency_growth": lat, "h100_vs_orin": edge, "rows": rows,
            "verdict": C.verdict("confirmed" if ok else "qualified", text)}


if __name__ == "__main__":
    C.cli(main)
