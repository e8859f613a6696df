"""Scalar one-CTA-per-row kernels (the first-generation vLLM norm and SwiGLU kernels) and the
loaded-DRAM-latency calibration fit."""

from dataclasses import replace

import pytest

from gpusim.accuracy import _memory_plan, _to_metric, simulate_case
from gpusim.calibration import fit_loaded_latency_slope
from gpusim.config import load_hardware
from gpusim.engine.kernel import simulate_kernel
from gpusim.engine.machine import Calibration, machine_of
from gpusim.mapping.streaming import scalar_row_launch
from gpusim.measurements import load_kernel_cases


def test_scalar_row_launch_shapes():
    # block = min(hidden, 1024), one CTA per token, one element's loads in flight per thread
    assert scalar_row_launch(4096, 4096, "fp16", 1) == (4096, 1024, 2.0)
    assert scalar_row_launch(1, 512, "fp32", 2) == (1, 512, 8.0)
    assert scalar_row_launch(7, 11008, "bf16", 2) == (7, 1024, 4.0)
    assert scalar_row_launch(4096, 4096, "fp16", 1.5) == (4096, 1024, 3.0)  # the norm's loops: 1 and 2 loads


@pytest.fixture(scope="module")
def cases():
    return {c.case_id: c for c in load_kernel_cases()}


@pytest.mark.parametrize("tokens", [1, 128, 1024, 4096])
def test_scalar_rowwise_norm_is_never_faster_than_the_vectorized_kernel(cases, tokens):
    # Same bytes, same CTAs, but 2 bytes in flight per thread instead of 16-byte vectors: Little's
    # law can only make it slower.
    desc = load_hardware("a100_sxm4_80gb")
    machine = machine_of(desc)
    scalar = cases[f"a100_vidur_llama2_7b_rmsnorm_{tokens}tok"]
    assert scalar.variant == "scalar_rowwise"
    vectorized = replace(scalar, variant=None)
    t_scalar = simulate_kernel(_memory_plan(scalar, machine), machine).time_s
    t_vector = simulate_kernel(_memory_plan(vectorized, machine), machine).time_s
    assert t_scalar >= t_vector
    if tokens == 1:
        # one CTA: 4 elements per thread, each a dependent round trip of at least an L2 latency
        assert t_scalar >= 4 * machine.l2_latency_s


def test_scalar_row_kernels_issue_their_compiled_instructions_between_loads(cases):
    # 43 instructions per element for silu_and_mul, 24 for rms_norm (SASS counts), one warp
    # instruction per 32 elements: 11008 / 32 x 43 and 4096 / 32 x 24 per CTA (one CTA per token).
    desc = load_hardware("a100_sxm4_80gb")
    machine = machine_of(desc)
    silu = _memory_plan(cases["a100_vidur_llama2_7b_silu_mul_1024tok"], machine)
    norm = _memory_plan(cases["a100_vidur_llama2_7b_rmsnorm_1024tok"], machine)
    assert silu.serial_warp_instructions_per_cta == 11008 / 32 * 43
    assert norm.serial_warp_instructions_per_cta == 4096 / 32 * 24
    # the norm's round trips: 4 elements per thread, one trip each in each of its two loops (the
    # second loads x again and the weight together)
    assert (norm.l2_bytes_per_cta - norm.store_bytes_per_cta) / norm.bytes_in_flight_per_cta == 8
    # and that time is not hidden: without it the same kernels are faster
    for plan in (silu, norm):
        hidden = replace(plan, serial_warp_instructions_per_cta=0.0)
        assert simulate_kernel(plan, machine).time_s > simulate_kernel(hidden, machine).time_s


def test_only_the_norm_reduces_across_its_block(cases):
    # rms_norm sums its row's squares between its loops (blockReduceSum); silu_and_mul reduces nothing.
    # On an A100 (shared-memory latency 18.2 ns) the reduction's 14 dependent steps take 0.255 us,
    # and every norm CTA lives that much longer: the one-token kernel (one CTA) by that (less 0.2%:
    # a slower CTA loads DRAM less, so its trips see a slightly lower loaded latency).
    from gpusim.engine.kernel import block_reduction_s
    machine = machine_of(load_hardware("a100_sxm4_80gb"))
    assert block_reduction_s(machine) == pytest.approx(14 * 18.2e-9, rel=1e-9)
    silu = _memory_plan(cases["a100_vidur_llama2_7b_silu_mul_1tok"], machine)
    norm = _memory_plan(cases["a100_vidur_llama2_7b_rmsnorm_1tok"], machine)
    assert (silu.block_reductions_per_cta, norm.block_reductions_per_cta) == (0, 1)
    without = replace(norm, block_reductions_per_cta=0)
    assert simulate_kernel(norm, machine).time_s - simulate_kernel(without, machine).time_s == pytest.approx(
        14 * 18.2e-9, rel=5e-3)


def test_silu_mul_rowwise_needs_its_row_shape(cases):
    desc = load_hardware("a100_sxm4_80gb")
    machine = machine_of(desc)
    case = replace(cases["a100_vidur_llama2_7b_silu_mul_1024tok"], rows=None)
    with pytest.raises(ValueError, match="needs rows and cols"):
        simulate_case(case, machine, desc.gpu)


@pytest.mark.parametrize("slope", [0.0, 0.8, 1.6])
def test_loaded_latency_fit_recovers_a_known_slope(cases, slope):
    # Measurements synthesized by the simulator itself at a known slope are fitted back exactly.
    desc = load_hardware("h100_pcie_80gb")
    machine = machine_of(desc)
    truth = replace(machine, calibration=replace(machine.calibration, dram_loaded_latency_slope=slope))
    partial = [c for c in cases.values() if c.gpu == "h100_pcie_80gb" and c.op == "stream"
               and (c.occupancy_fraction or 1.0) < 1.0]
    assert len(partial) >= 3
    synthetic = [replace(c, measured_bytes_per_s=_rate_of(c, truth, desc.gpu)) for c in partial]
    assert fit_loaded_latency_slope(machine, desc.gpu, synthetic) == pytest.approx(slope)


def _rate_of(case, machine, device):
    seconds, _ = simulate_case(case, machine, device)
    return _to_metric(case, seconds)


@pytest.mark.parametrize("loss", [0.0, 0.1, 0.25])
def test_mixed_traffic_loss_fit_recovers_a_known_loss(cases, loss):
    # Full-occupancy streams synthesized at a known read/write loss (and a DRAM fraction, which the fit
    # must not confuse with it) are fitted back exactly.
    from gpusim.calibration import fit_mixed_traffic_loss
    desc = load_hardware("h200_sxm_141gb")
    machine = replace(machine_of(desc), calibration=Calibration())
    truth = replace(machine, calibration=Calibration(dram_mixed_traffic_loss_fraction=loss, dram_bandwidth_fraction=0.9))
    full = [c for c in cases.values() if c.gpu == "h200_sxm_141gb" and c.op == "stream"
            and (c.occupancy_fraction or 1.0) >= 1.0]
    assert {c.variant for c in full} == {"init", "read", "scale", "triad"}
    synthetic = [replace(c, measured_bytes_per_s=_rate_of(c, truth, desc.gpu)) for c in full]
    assert fit_mixed_traffic_loss(machine, desc.gpu, synthetic) == pytest.approx(loss)


@pytest.mark.parametrize("cycles", [0.0, 300.0, 650.0])
def test_cta_turnaround_fit_recovers_a_known_value(cases, cycles):
    from gpusim.calibration import fit_cta_turnaround_cycles
    desc = load_hardware("h200_sxm_141gb")
    machine = machine_of(desc)
    truth = replace(machine, calibration=replace(machine.calibration, cta_turnaround_cycles=cycles))
    store_only = [c for c in cases.values() if c.gpu == "h200_sxm_141gb" and c.op == "stream"
                  and c.variant == "init" and (c.occupancy_fraction or 1.0) < 1.0]
    assert len(store_only) >= 3
    synthetic = [replace(c, measured_bytes_per_s=_rate_of(c, truth, desc.gpu)) for c in store_only]
    assert fit_cta_turnaround_cycles(machine, desc.gpu, synthetic) == pytest.approx(cycles)


def test_h200_stream_read_is_latency_limited_at_full_occupancy(cases):
    # gpu-benches' read kernel keeps one 8-byte load per thread in flight: 132 SMs x 2,048 threads x 8 B =
    # 2.2 MB, which at the H200's loaded latency cannot cover 4.8 TB/s; the measured 2.76 TB/s is 71 % of
    # the store-only kernel's. The simulation must show the same gap (and the store-only kernel at DRAM rate).
    desc = load_hardware("h200_sxm_141gb")
    machine = machine_of(desc)
    read = _rate_of(cases["h200_stream_read"], machine, desc.gpu)
    init = _rate_of(cases["h200_stream_init"], machine, desc.gpu)
    assert read < 0.8 * init
    assert read == pytest.approx(cases["h200_stream_read"].measured_bytes_per_s, rel=0.15)


def test_eager_rmsnorm_moves_every_pass_through_dram(cases):
    # The benchmark's unfused RMSNorm on BF16 input with an FP32 weight: to_fp32 (2 read + 4 written),
    # pow (4 + 4), mean (4, and 4 per row), + eps and rsqrt (4 + 4 per row each), x * rsqrt (4 + 4, and
    # 4 per row), to_bf16 (4 + 2) and the FP32 weight (4 per column) times the BF16 x, promoted to FP32
    # (2 + 4): 38 bytes per element, none of it faster than DRAM allows.
    from gpusim.accuracy import _unfused_rmsnorm_s, unfused_rmsnorm_plans
    desc = load_hardware("a100_pcie_80gb")
    machine = machine_of(desc)
    case = cases["a100_pcie_80gb_liger_rmsnorm_hf_eager_2048x32768_bf16"]
    n = case.rows * case.cols
    plans = unfused_rmsnorm_plans(case, machine)
    assert len(plans) == 8
    assert sum(p.dram_bytes for p in plans) == 38 * n + 24 * case.rows + 4 * case.cols
    assert _unfused_rmsnorm_s(case, machine) >= 38 * n / machine.dram_achievable_bytes_per_s
