"""Each example script runs in quick mode, saves its plot(s), and its verdict's numbers hold."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, out_dir: Path) -> dict:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.main(quick=True, out_dir=out_dir)
    assert out["verdict"].split(":")[0] in ("confirmed", "qualified", "refuted")
    pngs = list(out_dir.glob("*.png"))
    assert pngs and all(p.stat().st_size > 2000 for p in pngs)
    return out


def test_c01_core_counts(tmp_path):
    out = run_example("c01_core_counts", tmp_path)
    assert out["h100_lanes"] == 132 * 128 == 16_896
    assert out["mi300x_lanes"] == 304 * 64 == 19_456
    assert out["verdict"].startswith("qualified") and "19,456" in out["verdict"]
    assert out["gemm_speedup_h100_vs_xeon"] > 2


def test_c02_memory_bandwidth(tmp_path):
    out = run_example("c02_memory_bandwidth", tmp_path)
    assert out["spec_ratio_h100_vs_xeon"] == pytest.approx(3.35e12 / out["devices"]["xeon_8480"]["spec_bytes_per_s"])
    assert 5 < out["simulated_ratio_h100_vs_xeon"] <= out["spec_ratio_h100_vs_xeon"] * 1.05
    for row in out["devices"].values():  # nothing beats its datasheet bandwidth
        assert max(row["achieved_bytes_per_s"].values()) <= row["spec_bytes_per_s"] * 1.001


def test_c03_memory_bound(tmp_path):
    out = run_example("c03_memory_bound", tmp_path)
    assert out["memory_share"]["llama2_7b_inference"] > 0.5  # decode streams weights
    assert out["compute_share"]["gpt2_large_train"] > out["memory_share"]["gpt2_large_train"]
    assert out["verdict"].startswith("qualified")


def test_c04_tensor_cores(tmp_path):
    out = run_example("c04_tensor_cores", tmp_path)
    a100 = out["speedup_vs_fp32"]["a100_sxm4_80gb"]
    assert 5 < a100["bf16"] <= out["peak_ratio_a100"] * 1.05
    assert a100["tf32"] < a100["bf16"] < a100["int8"]
    assert out["gemm_time_s"]["a100_sxm4_80gb"]["fp8"] is None  # A100 has no FP8 tensor cores
    assert out["speedup_vs_fp32"]["h100_sxm5_80gb"]["fp8"] > out["speedup_vs_fp32"]["h100_sxm5_80gb"]["bf16"]
    assert 1.0 < out["sparse_speedup"]["h100_sxm5_80gb"] <= 2.0
    assert out["fma_per_tensor_core"]["v100_sxm2_32gb"] == 64  # 4x4x4
    assert out["bert_step_speedup_bf16"] < a100["bf16"]


def test_c05_gpu_vs_cpu(tmp_path):
    out = run_example("c05_gpu_vs_cpu", tmp_path)
    assert out["h100_min"] > 1  # the GPU always wins ...
    assert out["h100_max"] < 100  # ... but never by the top of the claimed range against an AMX Xeon
    assert out["speedup"]["cnn_mnist"]["h100_sxm5_80gb"] >= out["speedup"]["cnn_mnist"]["a100_sxm4_80gb"]


def test_c09_fusion_graphs(tmp_path):
    out = run_example("c09_fusion_graphs", tmp_path)
    assert out["attention_traffic_ratio"] > 5 and out["attention_speedup"] > 2
    assert out["gpt_fusion_speedup"] > 1 and out["graph_speedup"] > 1
    assert out["verdict"].startswith("confirmed")


def test_c10_mixed_precision(tmp_path):
    out = run_example("c10_mixed_precision", tmp_path)
    assert out["gradient_ratio"] == pytest.approx(2.0, rel=0.01)
    assert 1.8 < out["activation_ratio"] <= 2.05
    assert out["bf16_speedup"] > 2
    assert 1.0 < out["fp8_speedup_over_bf16"] < 2.0
    assert "not 2-5x" in out["verdict"]


def test_c11_checkpointing(tmp_path):
    out = run_example("c11_checkpointing", tmp_path)
    assert out["activation_saving"] > 1.5 and 1.0 < out["recompute_cost"] < 1.5
    assert out["fits"] == {"rtx_4090": False, "a100_sxm4_40gb": False, "h100_sxm5_80gb": False, "mi300x": True}
    assert out["mfu_gain"] > 1.2


def test_c12_unified_memory(tmp_path):
    out = run_example("c12_unified_memory", tmp_path)
    assert not out["h100_fits"]
    assert out["slowdown"] > 2


def test_c06_tiling(tmp_path):
    out = run_example("c06_tiling", tmp_path)
    assert out["traffic_ratio"] > 2  # 4x larger tiles read each operand 4x less often
    assert out["speedup"] > 2
    assert out["pipelining_speedup"] >= 0.95


def test_c19_inference(tmp_path):
    out = run_example("c19_inference", tmp_path)
    assert out["throughput_gain"] > 5 and out["decode_latency_growth"] < 2
    assert out["h100_vs_orin"] > 3
    assert out["verdict"].startswith("confirmed")


def test_c21_mi300x_tpu(tmp_path):
    out = run_example("c21_mi300x_tpu", tmp_path)
    assert out["mi300x_capacity_bytes"] == 192 * 2**30
    assert out["speedup_over_h100"]["layernorm_bf16"]["mi300x"] > 1  # 5.3 vs 3.35 TB/s
    assert out["speedup_over_h100"]["gemm_8192_bf16"]["tpu_like_systolic"] < 1
