"""Fused attention kernels: FlashAttention-2 style (warp-synchronous MMA, softmax after the products)
against warp-specialized asynchronous kernels (FlashAttention-3), on Hopper and Ampere."""

import pytest

from gpusim.config import load_hardware
from gpusim.engine.kernel import estimate_kernel_s, simulate_kernel
from gpusim.engine.machine import machine_of
from gpusim.mapping import map_op
from gpusim.workload.ops import Attention
from gpusim.workload import load_workload


def _rate(machine, kernel, variant="forward", seq=8192):
    op = Attention(batch=16384 // seq, heads=16, seq_len_q=seq, seq_len_kv=seq, head_dim=128, kernel=kernel,
                   variant=variant)
    plans = map_op(op, machine)
    # the backward runs a preprocess and a postprocess kernel around its main kernel
    assert len(plans) == (1 if variant == "forward" else 3)
    plan = next(p for p in plans if p.name.startswith(f"attention_{variant}["))
    return plan, op.flop() / sum(estimate_kernel_s(p, machine) for p in plans)


@pytest.fixture(scope="module")
def h100():
    return machine_of(load_hardware("h100_sxm5_80gb"))


def test_hopper_declares_two_thirds_rate_for_warp_mma(h100):
    assert h100.warp_mma_fraction == pytest.approx(0.67)
    assert machine_of(load_hardware("a100_sxm4_80gb")).warp_mma_fraction == 1.0


def test_flashattention2_on_h100_uses_about_a_third_of_the_peak(h100):
    # FlashAttention-3 (Shah et al. 2024) abstract: FlashAttention-2 reaches only 35 % of the H100's
    # peak. Warp MMA at 0.67 x the calibrated tensor rate, plus exponentials after the products.
    plan, rate = _rate(h100, "fused")
    assert plan.warp_mma and not plan.sfu_overlaps_math
    assert 0.30 <= rate / 989.4e12 <= 0.45


def test_flashattention3_style_kernel_is_1p5_to_2x_faster_on_h100(h100):
    # Same abstract: FlashAttention-3 is 1.5-2.0x faster than FlashAttention-2 in FP16/BF16.
    plan, fast = _rate(h100, "fused_async")
    assert not plan.warp_mma and plan.sfu_overlaps_math
    _, slow = _rate(h100, "fused")
    assert 1.5 <= fast / slow <= 2.0
    _, fast_bwd = _rate(h100, "fused_async", "backward")
    _, slow_bwd = _rate(h100, "fused", "backward")
    assert 1.5 <= fast_bwd / slow_bwd <= 2.0


def test_on_ampere_only_the_softmax_overlap_differs():
    # A100: warp MMA is the native instruction, so the asynchronous kernel gains only the hidden
    # exponentials: the forward's per-score work is 4*d = 512 matrix FLOP plus one exponential.
    a100 = machine_of(load_hardware("a100_sxm4_80gb"))
    _, fa2 = _rate(a100, "fused")
    _, fa3 = _rate(a100, "fused_async")
    matrix_s = 512 / (a100.matrix_rate_per_unit("bf16") * a100.num_units)
    sfu_s = 1 / (a100.sfu_ops_per_cycle * a100.unit_clock_hz * a100.num_units)
    assert fa3 / fa2 == pytest.approx((matrix_s + sfu_s) / matrix_s, rel=0.03)


@pytest.mark.parametrize("hw", ["a100_sxm4_80gb", "h100_sxm5_80gb"])
@pytest.mark.parametrize("variant", ["forward", "backward"])
def test_unpipelined_kernel_is_flashattention1_class(hw, variant):
    # The FlashAttention-2 paper (Dao 2023, section 4.1, A100) measures FlashAttention-2 1.3-2.5x
    # faster than "FlashAttention in Triton", the 2022 kernel of flash_attn_triton.py (num_stages=1,
    # 128 x 128 blocks, 8 warps). Modelled: one register-limited CTA per SM that waits for each block
    # it loads.
    machine = machine_of(load_hardware(hw))
    plan, slow = _rate(machine, "fused_unpipelined", variant)
    assert plan.tile.num_stages == 1 and not plan.pipelined and plan.threads_per_cta == 256
    assert plan.ctas_per_unit == 1 and plan.occupancy_limiter == "registers"
    assert plan.load_waits_per_cta > 0 and plan.name.startswith(f"attention_{variant}[flash_unpipelined_128]")
    timing = simulate_kernel(plan, machine)
    assert timing.bound == "latency"
    _, fa2 = _rate(machine, "fused", variant)
    assert 1.3 <= fa2 / slow <= 2.5


def test_transformer_config_selects_the_attention_kernel():
    def kernels(items):
        wl = load_workload("gpt2_large_train", ["config.num_layers=1", *items])
        return {n.op.kernel for n in wl.graph.nodes if isinstance(n.op, Attention)}

    assert kernels([]) == {"fused"}
    assert kernels(["config.attention_kernel=fused_async"]) == {"fused_async"}
    assert kernels(["config.attention_kernel=fused_unpipelined"]) == {"fused_unpipelined"}
    assert kernels(["config.attention_kernel=fused_async", "fusion=none"]) == set()  # lowered to GEMMs
