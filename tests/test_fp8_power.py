"""FP8 GEMMs at steady state run at the clock the power cap sets: the FP8 tensor energy per FLOP
(``fp8_tensor_energy_factor`` times the description's estimate) decides how far, it is fitted to the
H100's sustained FP8 GEMMs, and measured loops that count their calls are scored at that clock."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest

from gpusim.accuracy import loop_calls, matmul_flop, matmul_plan, simulate_case
from gpusim.accuracy_cluster import sustained
from gpusim.calibration import _steady_fp8, fit_dynamic_energy_factor, fit_fp8_tensor_energy_factor
from gpusim.config import load_hardware
from gpusim.energy import capped_kernel_time_s, kernel_energy, throttled_clock_fraction
from gpusim.engine.kernel import simulate_kernel
from gpusim.engine.machine import machine_of
from gpusim.engine.simulate import simulate
from gpusim.measurements import load_kernel_cases
from gpusim.workload import load_workload


@pytest.fixture(scope="module")
def h100():
    desc = load_hardware("h100_sxm5_80gb")
    return desc, machine_of(desc)


def _with_factor(machine, factor: float):
    return replace(machine, calibration=replace(machine.calibration, fp8_tensor_energy_factor=factor))


def _gemm(hw, dtype: str, size: int = 8192):
    return simulate(hw, load_workload("gemm_8192_bf16", [f"ops.gemm.dtype={dtype}", f"ops.gemm.m={size}",
                                                         f"ops.gemm.n={size}", f"ops.gemm.k={size}"]),
                    record_spans=False)


def test_the_factor_scales_fp8_tensor_math_only(h100):
    desc, machine = h100
    fp8 = _gemm(desc, "fp8").kernels[0]
    bf16 = _gemm(desc, "bf16").kernels[0]
    for record in (fp8, bf16):
        one = kernel_energy(record, desc.gpu.power, _with_factor(machine, 1.0))
        two = kernel_energy(record, desc.gpu.power, _with_factor(machine, 2.0))
        scale = 2.0 if record is fp8 else 1.0
        assert two.math_j == pytest.approx(scale * one.math_j)
        assert (two.l1_j, two.l2_j, two.dram_j) == (one.l1_j, one.l2_j, one.dram_j)
    # the estimate times the factor: 0.15 pJ per FP8 FLOP x 1.7 x the TDP-fitted dynamic factor
    cal = machine.calibration
    assert kernel_energy(fp8, desc.gpu.power, machine).math_j == pytest.approx(
        fp8.executed_flop * 0.15e-12 * cal.fp8_tensor_energy_factor * cal.dynamic_energy_factor)


def test_a_capped_kernel_draws_the_tdp_and_one_within_it_keeps_its_time(h100):
    """The H100's sustained FP8 8192^3 GEMM is power-limited (its clock falls until it draws 700 W);
    the BF16 one, which fitted the dynamic energy factor at TDP, is not."""
    desc, machine = h100
    power = desc.gpu.power
    for dtype, limited in (("fp8", True), ("bf16", False)):
        case = dataclasses.replace(next(c for c in load_kernel_cases() if c.case_id.startswith("h100_azure_cublaslt_fp8_e4m3_8192")),
                                   dtype=dtype)
        plan = matmul_plan(case, machine)
        timing = simulate_kernel(plan, machine)
        capped_s = capped_kernel_time_s(plan, timing, machine, power)
        if not limited:
            assert capped_s == timing.time_s
            continue
        assert capped_s > 1.05 * timing.time_s
        record = _gemm(desc, dtype).kernels[0]
        r, stretched_s = throttled_clock_fraction(kernel_energy(record, power, machine), record, machine,
                                                  power.tdp_w, power.idle_w)
        assert stretched_s == pytest.approx(capped_s)
        # at r the core-domain energy scales by r^2 (voltage with frequency): the average power is the TDP
        e = kernel_energy(record, power, machine)
        at_r = power.idle_w + (e.core_j * r * r + e.dynamic_j - e.core_j) / stretched_s
        assert at_r == pytest.approx(power.tdp_w, rel=1e-6)


def test_loops_that_count_their_calls_are_scored_at_the_capped_clock(h100):
    """The Azure rows (10,000 warm-up calls) run at steady state; the same GEMM without counted calls
    (a short benchmark) runs at the rated clock. kernel_only: the kernel plus the device-side launch."""
    desc, machine = h100
    case = next(c for c in load_kernel_cases() if c.case_id == "h100_azure_cublaslt_fp8_e4m3_16384x16384x16384")
    assert loop_calls(case) == (10_000, 1_000) and _steady_fp8(case)
    plan = matmul_plan(case, machine)
    timing = simulate_kernel(plan, machine)
    loop_s, _ = simulate_case(case, machine, desc.gpu)
    short_s, _ = simulate_case(replace(case, warmup_calls=None, timed_calls=None), machine, desc.gpu)
    launch_s = machine.graph_kernel_launch_s
    assert loop_s == pytest.approx(capped_kernel_time_s(plan, timing, machine, desc.gpu.power) + launch_s)
    assert short_s == pytest.approx(timing.time_s + launch_s)
    assert loop_s > 1.1 * short_s


def test_the_fit_recovers_the_factor_that_made_the_rows(h100):
    """The H100's steady-state FP8 rows 'measured' on a card whose FP8 FLOP costs 2.3 x the estimate:
    the fit finds 2.3 again, with the other factors as recorded."""
    desc, machine = h100
    truth = _with_factor(machine, 2.3)
    rows = [c for c in load_kernel_cases() if c.gpu == "h100_sxm5_80gb" and _steady_fp8(c)]
    assert len(rows) == 9
    made = []
    for case in rows:
        seconds, _ = simulate_case(case, truth, desc.gpu)
        made.append(replace(case, measured_flop_per_s=matmul_flop(case) / seconds))
    assert fit_fp8_tensor_energy_factor(_with_factor(machine, 1.0), desc.gpu, made) == pytest.approx(2.3)


def test_the_fitted_factor_predicts_the_held_out_h200_rows():
    """Fitted on the H100's rows and transferred to the H200 (same die): the H200's sustained FP8 GEMMs
    of 4096^3 and up, held out, come within 5%; without the power cap they were 15-21% too fast."""
    from gpusim.accuracy import run_accuracy
    from gpusim.measurements import heldout_dir

    h200 = [c for c in load_kernel_cases(heldout_dir() / "azure_gemm_tables.csv")
            if c.gpu == "h200_sxm_141gb" and c.m == c.n == c.k and c.m >= 4096]
    assert len(h200) == 4
    results, _ = run_accuracy(h200)
    assert all(abs(r.simulated / r.measured - 1) < 0.05 for r in results)
    uncapped, _ = run_accuracy([replace(c, warmup_calls=None, timed_calls=None) for c in h200])
    assert all(r.simulated / r.measured - 1 > 0.12 for r in uncapped)


def test_the_energy_fit_holds_every_gemm_format_within_tdp():
    """The dynamic energy factor holds the hungrier of a 16-bit tensor and an FP32 GEMM at TDP: on the
    RTX 4090, whose estimates charge CUDA-core FP32 more per second, the FP32 GEMM binds and the BF16
    one draws less; on the H100 the BF16 one binds."""
    for stem, binding in (("rtx_4090", "fp32"), ("h100_sxm5_80gb", "bf16")):
        factor, label = fit_dynamic_energy_factor(stem)
        assert label == f"8192^3 {binding} GEMM"
        desc = load_hardware(stem)
        machine = machine_of(desc)
        assert machine.calibration.dynamic_energy_factor == pytest.approx(factor)
        power = {}
        for dtype in ("bf16", "fp32"):
            record = _gemm(desc, dtype).kernels[0]
            power[dtype] = kernel_energy(record, desc.gpu.power, machine).avg_power_w
        assert power[binding] == pytest.approx(desc.gpu.power.tdp_w, rel=2e-3)
        assert max(power.values()) <= desc.gpu.power.tdp_w


def test_sustained_runs_slow_only_the_kernels_above_tdp(h100):
    """A training or serving row is scored as a sustained run: the power cap stretches the FP8 GEMM and
    leaves a BF16 one (within TDP) as it was; it never makes a run faster."""
    desc, _ = h100
    for dtype, slower in (("fp8", True), ("bf16", False)):
        result = _gemm(desc, dtype)
        capped = sustained(result, desc)
        assert capped.total_time_s >= result.total_time_s
        assert (capped.total_time_s > 1.05 * result.total_time_s) == slower


def test_plots_examples_and_compare_see_the_run_gpusim_run_prints(capsys):
    """``simulate_named`` (plots, compare, the claim examples) applies the power cap as ``gpusim run``
    does: the same throttled FP8 GEMM, and the rated-clock run only when asked for without energy."""
    import json

    from gpusim.cli import main
    from gpusim.commands.plot_results import simulate_named

    _, capped = simulate_named("h100_sxm5_80gb", "gemm_8192_bf16", ["ops.gemm.dtype=fp8"])
    _, rated = simulate_named("h100_sxm5_80gb", "gemm_8192_bf16", ["ops.gemm.dtype=fp8"], energy=False)
    assert main(["run", "h100_sxm5_80gb", "gemm_8192_bf16", "--set", "ops.gemm.dtype=fp8", "--json", "-"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert capped.total_time_s == pytest.approx(printed["total_time_s"])
    assert capped.total_time_s > 1.05 * rated.total_time_s and capped.energy_j is not None
