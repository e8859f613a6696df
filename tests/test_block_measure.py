"""``gpusim measure --suite block`` without a GPU: classification, the rows a stand-in run writes, and
(where PyTorch is installed) that the PyTorch block is the block gpusim simulates."""

from __future__ import annotations

import csv

import pytest

from gpusim.cuda_backend import block as B
from gpusim.cuda_backend import library as L

SMALL = B.BlockProbe(hidden_size=256, num_heads=4, num_kv_heads=2, ffn_hidden_size=512, seq_len=128, batch=2)


def test_block_suite_without_pytorch_exits_2_with_one_line(monkeypatch, capsys):
    from gpusim.cli import main

    monkeypatch.setattr(L, "torch_unavailable_reason", lambda: "PyTorch is not installed")
    assert main(["measure", "--suite", "block"]) == 2
    assert capsys.readouterr().err == "gpusim: measure --suite block: PyTorch is not installed\n"


def test_block_suite_runs_on_its_own(capsys):
    from gpusim.cli import main

    assert main(["measure", "--suite", "block", "--suite", "library"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "run it on its own" in err[0]


@pytest.mark.parametrize("name,cls", [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_"
     "kernel__5x_cublas", "gemm"),
    ("nvjet_tst_256x128_64x4_1x2_h_bz_coopB_TNT", "gemm"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false>>", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0", "attention"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>", "other"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>",
     "other"),
])
def test_kernels_are_classed_by_name(name, cls):
    assert B.kernel_class(name) == cls


def test_the_attention_kernel_gpusim_simulates_follows_the_profile():
    fa2 = (("void pytorch_flash::flash_fwd_kernel<...>", 1e-4, "forward"),)
    cudnn = (("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16", 1e-4, "forward"),)
    assert B.gpusim_attention_kernel(fa2) == "fused"
    assert B.gpusim_attention_kernel(cudnn) == "fused_async"


def test_a_stand_in_run_writes_measured_beside_simulated(tmp_path, capsys):
    from gpusim.commands.measure import execute_block

    kernels = (("sm90_xmma_gemm_bf16", 3e-4, "forward"), ("flash_fwd_kernel", 1e-4, "forward"),
               ("vectorized_elementwise_kernel", 5e-5, "forward"), ("sm90_xmma_gemm_bf16", 6e-4, "backward"),
               ("flash_bwd_dq_dk_dv_loop_kernel", 3e-4, "backward"))

    def runner(probes, num_warmups, num_repeats, progress=None):
        return [B.BlockResult(p, (5e-4, 6e-4, 4e-4), (1.6e-3, 1.5e-3, 1.4e-3), kernels, 2.5e-4) for p in probes]

    paths = execute_block([SMALL], "h100_sxm5_80gb", "h100_sxm5_80gb", {"gpu_name": "NVIDIA H100"}, tmp_path,
                          runner, 3, 3)
    rows = list(csv.DictReader(paths[0].open()))
    assert len(rows) == 3 + 2 * len(B.BLOCK_CLASSES)
    by = {(r["phase"], r["kernel_class"]): r for r in rows}
    assert float(by[("forward", "all")]["measured_s"]) == pytest.approx(5e-4)
    assert float(by[("step", "all")]["measured_s"]) == pytest.approx(1.5e-3)
    assert float(by[("backward", "attention")]["measured_s"]) == pytest.approx(3e-4)
    assert by[("forward", "gemm")]["num_kernels"] == "1"
    # the projections timed alone are set beside gpusim's forward GEMMs, as the in-block ones are
    assert float(by[("forward", "gemm_isolated")]["measured_s"]) == pytest.approx(2.5e-4)
    assert by[("forward", "gemm_isolated")]["simulated_s"] == by[("forward", "gemm")]["simulated_s"]
    # gpusim's forward is its three classes together, and the step its forward and backward
    forward = sum(float(by[("forward", c)]["simulated_s"]) for c in B.BLOCK_CLASSES)
    step = forward + sum(float(by[("backward", c)]["simulated_s"]) for c in B.BLOCK_CLASSES)
    assert float(by[("forward", "all")]["simulated_s"]) == pytest.approx(forward, rel=1e-5)  # 6 digits in the CSV
    assert float(by[("step", "all")]["simulated_s"]) == pytest.approx(step, rel=1e-5)
    assert all(float(by[(p, c)]["simulated_s"]) > 0 for p in ("forward", "backward") for c in B.BLOCK_CLASSES)
    kernel_table = list(csv.DictReader(paths[1].open()))
    assert [(r["phase"], r["kernel"], r["kernel_class"]) for r in kernel_table] == [
        (p, n, B.kernel_class(n)) for n, _, p in kernels]
    assert float(kernel_table[3]["device_s"]) == pytest.approx(6e-4)
    assert paths[2].name == "block_provenance.json"
    summary = capsys.readouterr().err.splitlines()
    assert len(summary) == len(rows) and "forward: measured 0.500 ms" in summary[0]


def test_the_pytorch_block_is_the_block_gpusim_simulates():
    torch = pytest.importorskip("torch")
    from gpusim.workload import load_workload
    from gpusim.workload.models import transformer as T
    from gpusim.workload.precision import policy

    block, x = B._block_module(torch, SMALL, "cpu")
    wl = load_workload("llama2_7b_train", SMALL.workload_items("fused"))
    r = T.resolve("llama", wl.spec.config)
    layers = T.build_layers(r, policy("bf16"), batch=SMALL.batch, seq_q=SMALL.seq_len, seq_kv=SMALL.seq_len,
                            training=True)
    assert sum(p.numel() for p in block.parameters()) == layers[1].num_parameters()
    assert block(x).shape == x.shape
    results = B.run_block_probes([SMALL], 1, 2, device="cpu")
    assert len(results[0].step_times_s) == 2 and results[0].step_s > 0 and results[0].kernels == ()


def test_the_fp8_projections_compute_what_the_bf16_ones_do():
    # per-tensor scaled E4M3 (forward) and E5M2 (gradients) carry 3 and 2 mantissa bits: the products
    # agree with BF16 to a few percent, and the gradients flow to the input and the weight
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    FP8Linear = B._fp8_linear(torch)
    ref = torch.nn.Linear(256, 128, bias=False, dtype=torch.bfloat16)
    fp8 = FP8Linear(256, 128, bias=False, dtype=torch.bfloat16)
    fp8.weight.data.copy_(ref.weight.data)
    x = torch.randn(4, 64, 256, dtype=torch.bfloat16, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    y, y_ref = fp8(x), ref(x_ref)
    grad = torch.randn_like(y)
    y.backward(grad)
    y_ref.backward(grad)

    def rel(a, b):
        return float((a.detach().float() - b.detach().float()).norm() / b.detach().float().norm())

    assert y.shape == y_ref.shape and rel(y, y_ref) < 0.06
    assert rel(x.grad, x_ref.grad) < 0.12 and rel(fp8.weight.grad, ref.weight.grad) < 0.12


def test_the_fp8_probes_are_simulated_in_fp8():
    # the same Llama 3 8B block: FP8 halves gpusim's GEMM time on an H100 (twice the tensor rate) and
    # adds its cast kernels to the rest; attention stays BF16
    fp8 = next(p for p in B.BLOCK_PROBES if p.precision == "fp8" and p.hidden_size == 4096)
    bf16 = next(p for p in B.BLOCK_PROBES if p.precision == "bf16" and p.hidden_size == 4096
                and p.seq_len == fp8.seq_len and p.num_kv_heads == fp8.num_kv_heads)
    assert fp8.case_id("x").endswith("_fp8") and "precision=fp8" in fp8.workload_items("fused")
    sim = {p.precision: B.simulated_block(p, "h100_sxm5_80gb", "fused") for p in (bf16, fp8)}
    for phase in ("forward", "backward"):
        ratio = sim["fp8"][(phase, "gemm")][0] / sim["bf16"][(phase, "gemm")][0]
        assert 0.4 < ratio < 0.6
        assert sim["fp8"][(phase, "other")][0] > sim["bf16"][(phase, "other")][0]
        assert sim["fp8"][(phase, "attention")][0] == pytest.approx(sim["bf16"][(phase, "attention")][0])


def test_an_fp8_block_runs_in_pytorch():
    torch = pytest.importorskip("torch")
    probe = B.BlockProbe(256, 4, 2, 512, 128, 2, "fp8")
    block, x = B._block_module(torch, probe, "cpu")
    assert {type(m).__name__ for m in (block.qkv, block.proj, block.up, block.down)} == {"FP8Linear"}
    (result,) = B.run_block_probes([probe], 1, 2, device="cpu")
    assert len(result.forward_times_s) == len(result.step_times_s) == 2
