"""C4 and C20: "Tensor cores ... A100 reaches 312 TFLOPS FP16 vs 19.5 TFLOPS FP32; tensor-core layers see
5-10x speedups" and "structured sparsity and INT8/FP4 formats skip work and raise throughput".
One GEMM per dtype on A100 and H100 (FP32 runs on the CUDA cores, TF32/BF16/FP8/INT8 on tensor cores),
2:4 sparsity on the BF16 GEMM, and a BERT training step in FP32 vs BF16."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from gpusim.engine.kernel import simulate_kernel  # noqa: E402
from gpusim.engine.machine import machine_of  # noqa: E402
from gpusim.mapping import best_gemm  # noqa: E402

DEVICES = ("a100_sxm4_80gb", "h100_sxm5_80gb")
DTYPES = ("fp32", "tf32", "bf16", "fp8", "int8")


def sparse_speedup(hw: str, size: int) -> float:
    machine = machine_of(C.load_hardware(hw))
    flop = 2.0 * size ** 3
    dense = simulate_kernel(best_gemm(machine, "gemm", "matmul", size, size, size, 1, "bf16", flop), machine)
    sparse = simulate_kernel(best_gemm(machine, "gemm", "matmul", size, size, size, 1, "bf16", flop, sparse=True),
                             machine)
    return dense.time_s / sparse.time_s


def main(quick: bool = False, out_dir: Path = Path("example-output")) -> dict:
    size = 4096 if quick else 8192
    times: dict[str, dict[str, float | None]] = {}
    for hw in DEVICES:
        times[hw] = {}
        for dt in DTYPES:
            if dt != "fp32" and dt not in C.summary(C.load_hardware(hw))["matrix_peak_flop_per_s"]:
                times[hw][dt] = None  # no tensor-core mode for this dtype on this device
                continue
            _, r = C.try_run(hw, "gemm_8192_bf16", *(f"ops.0.{a}={size}" for a in "mnk"), f"ops.0.dtype={dt}")
            times[hw][dt] = r.total_time_s if r is not None else None
        print(f"{hw:<16} {size}^3 GEMM: " + "  ".join(
            f"{dt} {t * 1e3:.3f} ms" if t else f"{dt} n/a" for dt, t in times[hw].items()))
    speed = {hw: {dt: times[hw]["fp32"] / t for dt, t in times[hw].items() if t} for hw in DEVICES}
    sparse = {hw: sparse_speedup(hw, size) for hw in DEVICES}
    layers = "config.num_layers=4" if quick else "config.num_layers=12"
    step = {p: C.run("a100_sxm4_80gb", "bert_base_train", layers, f"precision={p}")[1].step_time_s
            for p in ("fp32", "bf16")}
    step_speedup = step["fp32"] / step["bf16"]
    for hw in DEVICES:
        print(f"{hw:<16} speed-up over FP32 CUDA cores: " + ", ".join(f"{d} {s:.1f}x" for d, s in speed[hw].items())
              + f"; 2:4 sparse BF16 {sparse[hw]:.2f}x over dense")
    print(f"A100 BERT-base training step: FP32 {step['fp32'] * 1e3:.1f} ms, BF16 {step['bf16'] * 1e3:.1f} ms "
          f"({step_speedup:.1f}x)")
    peaks = C.summary(C.load_hardware("a100_sxm4_80gb"))
    C.bar_chart(out_dir / "c04_tensor_cores.png", f"C4/C20: {size}^3 GEMM speed-up over FP32 CUDA cores", list(DTYPES),
                {hw: [speed[hw].get(d, 0.0) for d in DTYPES] for hw in DEVICES}, "speed-up (x)", "dtype")
    fma = {}
    for hw in ("v100_sxm2_32gb", "a100_sxm4_80gb", "h100_sxm5_80gb"):
        tc = C.load_hardware(hw).gpu.tensor_core
        fma[hw] = tc.dense_flop_per_cycle_per_sm.get("fp16") / 2 / tc.num_per_sm
    print("FP16 FMA per tensor core per clock: " + ", ".join(f"{h} {v:.0f}" for h, v in fma.items()))
    a100 = speed["a100_sxm4_80gb"]
    peak_ratio = peaks["peak_flop_per_s"]["bf16"] / peaks["vector_peak_flop_per_s"]["fp32"]
    status = "qualified" if a100["bf16"] > 5 else "refuted"
    text = (f"A100 tensor-core peak is {peaks['peak_flop_per_s']['bf16'] / 1e12:.0f} vs "
            f"{peaks['vector_peak_flop_per_s']['fp32'] / 1e12:.1f} TFLOP/s ({peak_ratio:.0f}x); a large GEMM gains "
            f"{a100['bf16']:.1f}x (BF16) and {a100['tf32']:.1f}x (TF32) on A100, H100 FP8 {speed['h100_sxm5_80gb']['fp8']:.1f}x, "
            f"but a whole BERT step only {step_speedup:.1f}x (memory-bound layers); 2:4 sparsity adds "
            f"{sparse['h100_sxm5_80gb']:.2f}x on H100; a 4x4x4 multiply-add per clock "
            f"({fma['v100_sxm2_32gb']:.0f} FMA) is Volta's tensor core; A100 and H100 do "
            f"{fma['a100_sxm4_80gb']:.0f} and {fma['h100_sxm5_80gb']:.0f} FMA per tensor core per clock")
    print("published measurements of the same kind of case:")
    measured = C.published("a100_pcie_40gb_fp32_mm_8192", "a100_pcie_40gb_fp16_mm_8192", "a100_pcie_40gb_tf32_mm_8192")
    return {"published": measured, "gemm_time_s": times, "speedup_vs_fp32": speed, "sparse_speedup": sparse,
            "bert_step_speedup_bf16": step_speedup, "peak_ratio_a100": peak_ratio, "fma_per_tensor_core": fma, "verdict": C.verdict(status, text)}


if __name__ == "__main__":
    C.cli(main)
