"""Back-to-back loops on a power-limited card, run from rest: the first ``boost_window_s`` of busy time
at the rated clock, the rest at ``sustained_clock_fraction`` of it (``loop_from_rest_s``), and the fit of
both factors to loops of several lengths (``fit_boost``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpusim.accuracy import loop_calls, loop_from_rest_s, matmul_flop, matmul_plan, simulate_case
from gpusim.calibration import fit_boost
from gpusim.config import load_hardware
from gpusim.engine.kernel import simulate_kernel
from gpusim.engine.machine import machine_of
from gpusim.errors import ConfigError
from gpusim.measurements import load_kernel_cases, published_dir


@pytest.fixture(scope="module")
def l4():
    desc = load_hardware("l4")
    return desc, machine_of(desc)


def _with(machine, fraction: float, window_s: float):
    return replace(machine, calibration=replace(machine.calibration, sustained_clock_fraction=fraction,
                                                boost_window_s=window_s))


def _fp16_loop(size: int):
    return next(c for c in load_kernel_cases() if c.case_id == f"l4_fp16_mm_{size}")


def test_the_loop_rows_count_the_calls_of_their_script():
    """zzc0721/torch-performance-test-data test.py: ``benchmark_precision(..., warmup=6, test_iters=30)``
    in the L4 issue; the earlier issues' rows say "10 warm-up + 30 timed" in their notes, and their
    columns say the same. The Azure guide's H100 FP8 GEMMs (superbench's cublaslt_gemm, its
    harness's defaults) run 10,000 warm-up and 1,000 timed calls. No other row counts calls."""
    cases = load_kernel_cases()
    l4 = [c for c in cases if c.gpu == "l4" and c.op == "matmul"]
    assert len(l4) == 20 and all(loop_calls(c) == (6, 30) for c in l4)
    stated = [c for c in cases if "10 warm-up + 30 timed" in c.notes]
    assert len(stated) == 90 and all(loop_calls(c) == (10, 30) for c in stated)
    azure = [c for c in cases if "10,000 warm-up and 1,000 timed calls" in c.notes and c.op == "matmul"]
    assert len(azure) == 9 and all(loop_calls(c) == (10_000, 1_000) for c in azure)
    assert all(loop_calls(c) is None for c in cases if c not in l4 and c not in stated and c not in azure)


def test_a_card_that_is_never_limited_runs_every_call_at_one_rate(l4):
    _, machine = l4
    kernel = simulate_kernel(matmul_plan(_fp16_loop(1024), machine), machine)
    sustained_s = max(kernel.time_s + machine.graph_kernel_launch_s, machine.kernel_launch_s)
    for fraction, window_s in ((1.0, 1.0), (0.5, 0.0)):
        assert loop_from_rest_s(_with(machine, fraction, window_s), kernel, 6, 30) == pytest.approx(sustained_s)


def test_the_window_splits_the_timed_calls_by_hand(l4):
    """Boosted call b = max(r t, DRAM time) + device launch (the kernel's launch gap is shorter); the window
    holds w / b calls; the first 6 are warm-up; of the 30 timed, the rest of the window's run at b."""
    _, machine = l4
    kernel = simulate_kernel(matmul_plan(_fp16_loop(2048), machine), machine)
    launch_s = machine.graph_kernel_launch_s
    sustained_s = kernel.time_s + launch_s
    boosted_s = 0.5 * kernel.time_s + launch_s
    assert 0.5 * kernel.time_s > kernel.dram_bytes / machine.dram_achievable_bytes_per_s  # compute-bound
    # a window of 10.5 boosted calls: 6 warm-up, 4.5 timed at the rated clock, 25.5 at the sustained one
    window_s = 10.5 * boosted_s
    expected = (4.5 * boosted_s + 25.5 * sustained_s) / 30
    assert loop_from_rest_s(_with(machine, 0.5, window_s), kernel, 6, 30) == pytest.approx(expected)
    # a window shorter than the warm-up leaves every timed call at the sustained clock; one longer than
    # the whole loop speeds all of them up by 1 / r (less the fixed launch)
    assert loop_from_rest_s(_with(machine, 0.5, 5 * boosted_s), kernel, 6, 30) == pytest.approx(sustained_s)
    assert loop_from_rest_s(_with(machine, 0.5, 40 * boosted_s), kernel, 6, 30) == pytest.approx(boosted_s)


def test_short_loops_finish_inside_the_window_and_long_ones_settle(l4):
    """The fitted L4: a 1024^3 loop (36 calls of tens of microseconds) runs wholly at the rated clock,
    an 8192^3 loop (tens of milliseconds per call) wholly at the sustained one."""
    desc, machine = l4
    cal = machine.calibration
    assert cal.sustained_clock_fraction < 1.0 and cal.boost_window_s > 0.0
    for size, boosted in ((1024, True), (8192, False)):
        case = _fp16_loop(size)
        loop_s, _ = simulate_case(case, machine, desc.gpu)
        steady_s, _ = simulate_case(replace(case, warmup_calls=None, timed_calls=None), machine, desc.gpu)
        if boosted:
            kernel = simulate_kernel(matmul_plan(case, machine), machine)
            assert loop_s == pytest.approx(kernel.time_s * cal.sustained_clock_fraction + machine.graph_kernel_launch_s)
        else:
            assert loop_s == pytest.approx(steady_s)


def test_the_fit_recovers_the_factors_that_made_the_loops(l4):
    """Loops 'measured' on a card with a known sustained clock and window: the fit finds both again."""
    _, machine = l4
    truth = _with(machine, 0.7, 0.0105)
    cases = []
    for case in (c for c in load_kernel_cases() if c.gpu == "l4" and c.op == "matmul"):
        kernel = simulate_kernel(matmul_plan(case, truth), truth)
        seconds = loop_from_rest_s(truth, kernel, *loop_calls(case))
        cases.append(replace(case, measured_flop_per_s=matmul_flop(case) / seconds))
    assert fit_boost(_with(machine, 1.0, 0.0), cases) == pytest.approx((0.7, 0.0105))


def test_call_counts_are_checked(tmp_path):
    """Both counts or neither, only on matmul rows (loops of one GEMM), and a positive timed count: one
    line naming the file, the row and the column otherwise."""
    lines = (published_dir() / "kernels.csv").read_text(encoding="utf-8").splitlines()
    row = next(line for line in lines if line.startswith("l4_fp16_mm_1024,")).rsplit(",", 2)[0]
    assert row + ",6,30" in lines
    stream = next(line for line in lines if ",stream," in line and line.endswith(",,")).rsplit(",", 2)[0]
    for bad, column in ((row + ",6,", "timed_calls"), (row + ",,30", "warmup_calls"),
                        (stream + ",6,30", "timed_calls"), (row + ",6,0", "timed_calls")):
        path = tmp_path / "k.csv"
        path.write_text(lines[0] + "\n" + bad + "\n", encoding="utf-8")
        with pytest.raises(ConfigError, match=rf"k\.csv.*row 2\.{column}"):
            load_kernel_cases(path)
