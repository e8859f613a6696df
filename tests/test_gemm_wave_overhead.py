"""The fitted fixed cost of every wave of a GEMM-like kernel (calibration ``gemm_wave_overhead_s``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpusim.accuracy import simulate_case
from gpusim.calibration import fit_gemm_wave_overhead_s
from gpusim.cli import main
from gpusim.config import load_hardware
from gpusim.engine.kernel import estimate_kernel_s, simulate_kernel
from gpusim.engine.machine import machine_of
from gpusim.mapping.gemm import gemm_lower_bound_s, gemm_plan
from gpusim.mapping.plan import Tile
from gpusim.measurements import load_kernel_cases

TINY = Path(__file__).parent / "data" / "tiny_2sm.yaml"


def _with_overhead(machine, overhead_s):
    return replace(machine, calibration=replace(machine.calibration, gemm_wave_overhead_s=overhead_s))


@pytest.mark.parametrize("overhead_s", [0.5e-6, 3e-6])
def test_each_gemm_wave_pays_the_overhead_once(overhead_s):
    # the 2-SM GPU's 256 x 256 x 1024 fp16 GEMM in 128x128 tiles runs in 2 waves of 2 CTAs
    # (test_engine_golden.test_gemm_waves_and_l2_reuse derives its time by hand)
    tiny = machine_of(load_hardware(str(TINY)))
    plan = gemm_plan(tiny, "gemm", "matmul", 256, 256, 1024, 1, "fp16", Tile(128, 128, 64, 2, 4),
                     2.0 * 256 * 256 * 1024)
    assert plan.num_waves == 2
    paying = _with_overhead(tiny, overhead_s)
    assert simulate_kernel(plan, paying).time_s - simulate_kernel(plan, tiny).time_s == pytest.approx(2 * overhead_s)
    assert estimate_kernel_s(plan, paying) - estimate_kernel_s(plan, tiny) == pytest.approx(2 * overhead_s)
    # the tile search's bound stays a lower bound
    bound = gemm_lower_bound_s(paying, 256, 256, 1024, 1, "fp16", plan.tile, 0.0)
    assert bound <= estimate_kernel_s(plan, paying)


@pytest.mark.parametrize("overhead_s", [0.0, 1.5e-6, 4.25e-6])
def test_fit_recovers_a_known_overhead(overhead_s):
    desc = load_hardware("h100_sxm5_80gb")
    machine = machine_of(desc)
    truth = _with_overhead(machine, overhead_s)
    ids = ("h100_xla_bf16_out_bf16_mm_512", "h100_xla_bf16_out_bf16_mm_1024", "h100_xla_tf32_out_fp32_mm_512")
    cases = [c for c in load_kernel_cases() if c.case_id in ids]
    assert len(cases) == 3
    flop = {c.case_id: 2.0 * c.m * c.n * c.k for c in cases}
    synthetic = [replace(c, measured_flop_per_s=flop[c.case_id] / simulate_case(c, truth, desc.gpu)[0])
                 for c in cases]
    assert fit_gemm_wave_overhead_s(_with_overhead(machine, 0.0), desc.gpu, synthetic) == pytest.approx(
        overhead_s, abs=1e-12)


def test_fitted_overhead_is_in_the_h100_calibration_block():
    cal = load_hardware("h100_sxm5_80gb").gpu.calibration
    assert cal.gemm_wave_overhead_s == pytest.approx(2.5e-6)
    assert "GEMM wave overhead = least-error fit over 19 small GEMM case(s)" in cal.source


def test_a_negative_overhead_is_a_one_line_error(capsys):
    args = ["run", "h100_sxm5_80gb", "gemm_8192_bf16", "--set", "gpu.calibration.gemm_wave_overhead_s=-1 us"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "gemm_wave_overhead_s" in err and "Traceback" not in err


def test_a_wrong_quoted_case_count_is_stale(tmp_path):
    from gpusim.calibration import stale_calibration
    from gpusim.config.library import builtin_files

    text = builtin_files("hwconfigs")["h100_sxm5_80gb"].read_text()
    path = tmp_path / "h100_sxm5_80gb.yaml"
    path.write_text(text.replace("least-error fit over 19 small", "least-error fit over 18 small"))
    stale = {s.factor: s for s in stale_calibration(str(path), load_kernel_cases())}
    assert set(stale) == {"gemm_wave_overhead_s case count"}
    assert (stale["gemm_wave_overhead_s case count"].recorded, stale["gemm_wave_overhead_s case count"].expected) == (18, 19)
