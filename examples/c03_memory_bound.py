"""C3: "Deep learning workloads are typically memory-bound rather than compute-bound."
Every kernel of ResNet-50, BERT and GPT training and of Llama-2 inference on an H100, classified by the
simulator (compute, memory, latency or launch bound): the share of time in each, and a roofline."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from gpusim.report.plots import roofline_figure, save_figure  # noqa: E402

HW = "h100_sxm5_80gb"


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    cases = {"resnet50_train": ["batch_size=64"] if quick else [],
             "bert_base_train": [], "gpt2_large_train": ["config.num_layers=6"] if quick else [],
             "llama2_7b_inference": ["config.num_layers=4"] if quick else []}
    shares = {}
    for wl, overrides in cases.items():
        hardware, r = C.run(HW, wl, *overrides)
        total = sum(k.time_s for k in r.kernels)
        by = {}
        for k in r.kernels:
            by[k.bound] = by.get(k.bound, 0.0) + k.time_s
        shares[wl] = {b: t / total for b, t in by.items()}
        n_mem = sum(max(1, int(k.repeat)) for k in r.kernels if k.bound == "memory")
        print(f"{wl:<22} {r.num_kernel_launches:6,d} kernel launches, {n_mem:6,d} memory-bound; share of kernel time: " +
              ", ".join(f"{b} {s:.0%}" for b, s in sorted(shares[wl].items(), key=lambda kv: -kv[1])))
        if not quick or wl == "bert_base_train":
            save_figure(roofline_figure(r, hardware), out_dir / f"c03_roofline_{wl}.png")
    C.bar_chart(out_dir / "c03_memory_bound.png", f"C3: share of kernel time by bound on {HW}", list(cases),
                {b: [100 * shares[w].get(b, 0.0) for w in cases] for b in ("compute", "memory", "latency", "launch")},
                "share of kernel time (%)", "workload")
    mem_major = [w for w in cases if shares[w].get("memory", 0) > shares[w].get("compute", 0)]
    status = "qualified" if 0 < len(mem_major) < len(cases) else ("confirmed" if mem_major else "refuted")
    text = "; ".join(f"{w} {shares[w].get('memory', 0):.0%} memory-bound" for w in cases)
    text += (f": memory-bound dominates {', '.join(mem_major) or 'none'}, while large-GEMM training "
             f"({', '.join(w for w in cases if w not in mem_major)}) is mostly compute-bound")
    return {"memory_share": {w: shares[w].get("memory", 0.0) for w in cases},
            "compute_share": {w: shares[w].get("compute", 0.0) for w in cases},
            "memory_dominated": mem_major, "verdict": C.verdict(status, text)}


if __name__ == "__main__":
    C.cli(main)
