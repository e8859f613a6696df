"""C12: "Unified memory can oversubscribe GPU memory by paging to host RAM, with a performance penalty."
Llama-2-70B inference (FP16: about 130 GiB of weights plus the KV cache) on an 80 GB H100 with unified memory paging over
PCIe, against the same run on a 192 GB MI300X and the H100 time if it had fit."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    ov = ["precision=fp16"] + (["generate_len=16", "decode_buckets=2"] if quick else [])
    _, fit = C.run("h100_sxm5_80gb", "llama2_70b_inference", *ov)
    _, paged = C.run("h100_sxm5_80gb", "llama2_70b_inference", *ov, unified_memory=True)
    big, mi = "mi300x", None
    for big in ("mi300x", "h200_sxm_141gb"):  # the first large-memory device the simulator can run it on
        _, mi = C.try_run(big, "llama2_70b_inference", *ov)
        if mi is not None and mi.fits_in_memory:
            break
    slowdown = paged.total_time_s / fit.total_time_s
    print(f"H100, as if it fit:        {fit.total_time_s:8.3f} s  (needs {fit.peak_memory_bytes / 2**30:.0f} GiB of "
          f"{fit.memory_capacity_bytes / 2**30:.0f} GiB: fits={fit.fits_in_memory})")
    print(f"H100, unified memory:      {paged.total_time_s:8.3f} s  ({slowdown:.1f}x slower; paging "
          f"{paged.time_breakdown_s.get('paging', 0.0):.3f} s)")
    print(f"{big + ':':<26} {mi.total_time_s:8.3f} s  fits={mi.fits_in_memory} "
          f"({mi.memory_capacity_bytes / 2**30:.0f} GiB)")
    C.bar_chart(out_dir / "c12_unified_memory.png", "C12: Llama-2-70B inference, oversubscribed H100 vs a larger-memory GPU",
                ["H100 (if it fit)", "H100 unified memory", big],
                {"time (s)": [fit.total_time_s, paged.total_time_s, mi.total_time_s]}, "time (s, log)", "run", log=True)
    ok = (not fit.fits_in_memory) and slowdown > 1
    text = (f"Llama-2-70B needs {fit.peak_memory_bytes / 2**30:.0f} GiB; on an 80 GB H100 unified memory makes it run, "
            f"{slowdown:.1f}x slower than if it fit (paging over PCIe); {big} "
            + (f"holds it and runs in {mi.total_time_s:.2f} s vs {paged.total_time_s:.2f} s" if mi.fits_in_memory
               else f"({mi.memory_capacity_bytes / 2**30:.0f} GiB) does not hold it either"))
    return {"slowdown": slowdown, "h100_fits": fit.fits_in_memory, "large_device": big, "large_device_fits": mi.fits_in_memory,
            "verdict": C.verdict("confirmed" if ok else "qualified", text)}


if __name__ == "__main__":
    C.cli(main)
