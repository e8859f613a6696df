"""What one warp of gpusim's own kernels issues, stalls on and loads, read from their compiled code
(gpusim.cuda_backend.sass, .code), and how the engine times it."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import pytest

from gpusim.config.library import load_hardware
from gpusim.accuracy import load_code_rows
from gpusim.cuda_backend.code import compiled_plan, gemm_path, load_loop_path
from gpusim.cuda_backend.sass import ALU_RESULT_CYCLES, WarpPath, count, innermost_loops, parse_sass, walk
from gpusim.engine.kernel import TripIssue, _latency_cap_rate
from gpusim.engine.machine import machine_of

DATA = Path(__file__).resolve().parent / "data" / "sass"
FOLDER = Path(__file__).resolve().parent.parent / "measurements" / "h200_sxm_141gb"
SHARED = 29  # shared-memory latency in cycles for these tests


def _sass(name: str) -> str:
    return gzip.decompress((DATA / name).read_bytes()).decode()


STRAIGHT = """
        /*0000*/                   IADD3 R1, R0, 0x1, RZ ;
        /*0010*/                   IMAD R2, R1, R1, RZ ;
        /*0020*/                   LDG.E R4, desc[UR4][R2.64] ;
        /*0030*/                   LDG.E R5, desc[UR4][R6.64] ;
        /*0040*/                   FADD R7, R4, R5 ;
        /*0050*/                   LDS R8, [R7] ;
        /*0060*/                   FFMA R9, R8, R8, R8 ;
        /*0070*/                   STG.E desc[UR4][R2.64], R9 ;
        /*0080*/                   EXIT ;
"""


def test_one_warp_issues_in_order_and_waits_for_its_results():
    instructions, _ = parse_sass(STRAIGHT)
    path = walk(instructions, 0, len(instructions), SHARED)
    # IADD3 at 0; IMAD waits for R1 until 4; the loads issue at 8 and 9; the FADD reads both loads'
    # results (one round trip, which the engine times) and issues at 10; the LDS waits for R7 until
    # 14; the FFMA for R8 until 14 + 29 = 43; the store for R9 until 47; EXIT at 48
    assert ALU_RESULT_CYCLES == 4
    assert path == WarpPath(instructions=9.0, cycles=49.0, round_trips=1.0, loads=2.0)
    assert path.stall_cycles == 40.0


def test_a_64_bit_address_reads_its_register_pair():
    (load,) = parse_sass("        /*0000*/                   LDG.E R4, desc[UR4][R2.64] ;\n")[0]
    written, read = load.destinations_and_sources()
    assert written == ("R4",) and {"R2", "R3", "UR4"} <= set(read)
    (wide,) = parse_sass("        /*0000*/                   IMAD.WIDE.U32 R84, R14, UR22, R84 ;\n")[0]
    assert wide.destinations_and_sources()[0] == ("R84", "R85")
    (carry,) = parse_sass("        /*0000*/                   IADD3 R150, P1, R147, 0x8, RZ ;\n")[0]
    assert carry.destinations_and_sources() == (("R150", "P1"), ("R147",))


LOOP = """
        /*0000*/                   MOV R1, RZ ;
.L_x_0:
        /*0010*/                   LDG.E R4, desc[UR4][R2.64] ;
        /*0020*/                   LDG.E R5, desc[UR4][R2.64+0x4] ;
        /*0030*/                   FADD R1, R4, R5 ;
        /*0040*/                   ISETP.NE.AND P0, PT, R1, RZ, PT ;
        /*0050*/               @P0 BRA `(.L_x_0) ;
        /*0060*/                   EXIT ;
"""


def test_a_load_loop_runs_until_the_thread_has_made_its_loads():
    instructions, labels = parse_sass(LOOP)
    assert innermost_loops(instructions, labels) == [(1, 6)]
    body = walk(instructions, 1, 6, SHARED)
    # two loads (0, 1), FADD after the trip (2), ISETP waits for R1 (6), BRA waits for P0 (10)
    assert body == WarpPath(5.0, 11.0, 1.0, 2.0)
    path = load_loop_path(instructions, labels, loads_per_thread=8, shared_cycles=SHARED)
    # 8 loads, 2 per iteration: 4 iterations, plus the MOV and EXIT once
    assert path == WarpPath(2.0 + 4 * 5.0, 2.0 + 4 * 11.0, 4.0, 8.0)


def test_the_tiled_gemm_copies_element_by_element_and_multiplies_its_register_tile():
    """gpusim's FP32 GEMM, 128x64x8 tile, 128 threads of 8x8 outputs, as numba-cuda 0.30.4 and
    ptxas 13.0 compile it for sm_90 (tests/data/sass)."""
    instructions, labels = parse_sass(_sass("gemm_fp32_128x64x8_s2_w4.sass.gz"))
    (math_loop,) = [s for s in innermost_loops(instructions, labels) if count(instructions, *s, "FFMA")]
    # one step of k per iteration: the 8x8 register tile's 64 FMAs, from 8 + 8 shared-memory loads
    assert count(instructions, *math_loop, "FFMA") == 8 * 8
    assert count(instructions, *math_loop, "LDS") == 8 + 8
    one = gemm_path(instructions, labels, 128, 64, 8, 128, 8, 8, num_k_tiles=1, shared_cycles=SHARED)
    two = gemm_path(instructions, labels, 128, 64, 8, 128, 8, 8, num_k_tiles=2, shared_cycles=SHARED)
    step = WarpPath(*(b - a for a, b in zip((one.instructions, one.cycles, one.round_trips, one.loads),
                                            (two.instructions, two.cycles, two.round_trips, two.loads))))
    # each step of k, a thread copies (128 x 8 + 8 x 64) / 128 = 12 elements, a round trip each (the
    # store to shared memory uses the load at once)
    assert step.round_trips == pytest.approx(12.0)
    assert step.loads == pytest.approx(12.0)
    # and issues at least its 8 x 64 FMAs and 8 x 16 shared loads
    assert step.instructions >= 8 * (64 + 16)


def test_the_committed_code_rows_are_this_code_s():
    """kernels_sass.csv's FP32 1024^3 GEMM row is the path of the compiled code in tests/data (same
    numba-cuda, ptxas and target as its columns say), over its 1024 / 8 = 128 steps of k."""
    row = load_code_rows(FOLDER / "kernels.csv")["gemm_fp32_1024x1024x1024"]
    assert (row["compute_capability"], row["numba_cuda_version"]) == ("9.0", "0.30.4")
    assert "cuda_13.0" in row["ptxas_version"] and row["registers_per_thread"] == "158"
    instructions, labels = parse_sass(_sass("gemm_fp32_128x64x8_s2_w4.sass.gz"))
    path = gemm_path(instructions, labels, 128, 64, 8, 128, 8, 8, num_k_tiles=128,
                     shared_cycles=float(row["shared_latency_cycles"]))
    assert path.round_trips == pytest.approx(float(row["round_trips"]))
    assert path.instructions == pytest.approx(float(row["warp_instructions"]))
    assert path.stall_cycles == pytest.approx(float(row["warp_stall_cycles"]), rel=1e-5)
    assert row["delayed_hits"] == "True"


def test_gelu_groups_its_loads_and_waits_once_per_group():
    """gpusim's FP32 GELU (128 threads, 4 vectors of 4 per thread, loads in groups of 2 vectors)."""
    instructions, labels = parse_sass(_sass("elementwise_gelu_fp32_128x4x4.sass.gz"))
    path = load_loop_path(instructions, labels, loads_per_thread=16, shared_cycles=SHARED)
    assert path.loads == 16 and path.round_trips == 2  # 8 loads in flight per trip


@pytest.fixture(scope="module")
def h200():
    return machine_of(load_hardware("h200_sxm_141gb"))


def test_a_trip_lasts_its_latency_stalls_and_issue(h200):
    """One warp per scheduler and no DRAM traffic: each of 1000 / 100 = 10 trips takes the L2 latency,
    the warp's stalls and its issue; with delayed hits, the DRAM latency instead."""
    issue_s, stall_s = 50 / h200.unit_clock_hz, 30 / h200.unit_clock_hz
    trip = TripIssue(issue_s, 1, stall_s)
    rate = _latency_cap_rate(100.0, 1000.0, 0.0, h200, trip_issue=trip)
    assert 1.0 / rate == pytest.approx(10 * (h200.l2_latency_s + stall_s + issue_s))
    delayed = _latency_cap_rate(100.0, 1000.0, 0.0, h200, trip_issue=trip, delayed_hits=True)
    assert 1.0 / delayed == pytest.approx(10 * (h200.dram_latency_s + stall_s + issue_s))


def test_stalls_overlap_other_warps_issue(h200):
    """With four warps per scheduler, a warp's stalls are others' issue slots: the trip takes less
    than latency + stalls + four warps' issue, and no less than their issue alone."""
    issue_s, stall_s = 200 / h200.unit_clock_hz, 100 / h200.unit_clock_hz
    lifetime = 1.0 / _latency_cap_rate(100.0, 1000.0, 0.0, h200, trip_issue=TripIssue(issue_s, 4, stall_s)) / 10
    assert 4 * issue_s <= lifetime < h200.l2_latency_s + stall_s + 4 * issue_s


def test_the_compiled_plan_counts_the_code_s_trips_and_registers(h200):
    from gpusim.cuda_backend.plans import plan_for_elementwise
    from gpusim.engine.kernel import estimate_kernel_s

    plan = plan_for_elementwise(h200, "add", 1 << 24, "fp16")
    path = WarpPath(instructions=1000.0, cycles=1500.0, round_trips=32.0, loads=32.0)
    compiled = compiled_plan(plan, path, 55, h200)
    loads = plan.l2_bytes_per_cta - plan.store_bytes_per_cta
    assert loads / compiled.bytes_in_flight_per_cta == pytest.approx(32.0)
    assert compiled.warp_instructions_per_trip == pytest.approx(1000 / 32)
    assert compiled.warp_stall_cycles_per_trip == pytest.approx(500 / 32)
    # 55 registers round to 56 per thread: 65536 / (56 x 128) = 9 CTAs of 128 threads per SM
    assert compiled.ctas_per_unit == 9 and compiled.registers_per_thread == 55
    assert estimate_kernel_s(compiled, h200) > estimate_kernel_s(plan, h200)
    with pytest.raises(ValueError, match="cannot launch"):
        compiled_plan(plan, path, 1024, h200)
    with pytest.raises(ValueError, match="no round trip"):
        compiled_plan(plan, WarpPath(10.0, 10.0, 0.0, 0.0), 32, h200)
    assert math.isfinite(estimate_kernel_s(compiled, h200))


def test_the_sass_command_says_in_one_line_what_it_lacks(monkeypatch, capsys, tmp_path):
    """Without a CUDA compiler (here ``ptxas`` and ``nvdisasm`` are hidden; without numba-cuda the
    same line names it) the command exits 2 with one line and writes nothing."""
    import shutil

    from gpusim.cli import main

    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["sass", "--hardware", "h200_sxm_141gb", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpusim: cannot compile to SASS (") and "\n" not in err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args, key", [
    (["--hardware", "a100_sxm4_80gb"], "--compute-capability"),  # Ampere is 8.0 or 8.6
    (["--hardware", "h200_sxm_141gb", "--compute-capability", "nine"], "--compute-capability"),
    (["--hardware", "xeon_8480"], "kind"),
    (["--hardware", "h200_sxm_141gb", "--op", "matmull"], "--op"),
])
def test_the_sass_command_rejects_what_it_cannot_compile_for(args, key, capsys, tmp_path):
    from gpusim.cli import main

    assert main(["sass", *args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert key in err and "\n" not in err and "Traceback" not in err


def test_measure_writes_the_code_rows_only_where_it_can_compile(monkeypatch, capsys, tmp_path, h200):
    """After the kernels suite, gpusim measure also writes kernels_sass.csv; without the compiler (or
    without the device's compute capability) it says so in one line and writes nothing."""
    import shutil

    from gpusim.commands.measure import _write_kernel_code

    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert _write_kernel_code(h200, {"compute_capability": "9.0"}, tmp_path, ["elementwise"]) == []
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpusim: kernels_sass.csv not written (") and "\n" not in err
    assert _write_kernel_code(h200, {}, tmp_path, []) == []
    assert "no compute capability" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_row_kernel_counts_each_pass_s_iterations_once():
    """gpusim's FP32 layernorm (128 threads on one row, 4-element vectors). The compiler unrolled
    pass 1 over 4 iterations (with a remainder loop), pass 2 over 2, pass 3 (row, gamma and beta:
    12 loads per iteration) not at all; at 4096 columns each thread runs 1024 / 128 = 8 iterations
    per pass: pass 1 twice its unrolled loop, pass 2 four times, pass 3 eight times."""
    from gpusim.cuda_backend.code import row_path

    instructions, labels = parse_sass(_sass("layernorm_fp32_128x1x128x4.sass.gz"))
    spans = [s for s in innermost_loops(instructions, labels) if count(instructions, *s, "LDG")]
    bodies = [walk(instructions, *s, SHARED) for s in spans]
    assert [b.loads for b in bodies] == [4, 16, 8, 12]
    path = row_path(instructions, labels, 8, (4, 4, 12), SHARED)
    one_pass = row_path(instructions, labels, 0, (4, 4, 12), SHARED)  # the straight code alone
    _, unrolled1, pass2, pass3 = bodies
    assert path.loads - one_pass.loads == 2 * 16 + 4 * 8 + 8 * 12  # 8 x (4 + 4 + 12) elements
    assert path.round_trips - one_pass.round_trips == 2 * unrolled1.round_trips + 4 * pass2.round_trips \
        + 8 * pass3.round_trips
    with pytest.raises(ValueError, match="passes"):
        row_path(instructions, labels, 8, (4, 4), SHARED)


def test_a_bad_code_row_is_named_by_its_case_and_column(h200):
    from gpusim.cuda_backend.code import plan_from_code_row
    from gpusim.cuda_backend.plans import plan_for_elementwise

    plan = plan_for_elementwise(h200, "add", 1 << 20, "fp32")
    row = {"case_id": "x", "warp_instructions": "665", "warp_stall_cycles": "636", "round_trips": "2",
           "global_loads": "32", "registers_per_thread": "37", "delayed_hits": "False"}
    assert plan_from_code_row(plan, row, h200).warp_instructions_per_trip == pytest.approx(332.5)
    with pytest.raises(ValueError, match="case x: round_trips 'two' is not a number"):
        plan_from_code_row(plan, {**row, "round_trips": "two"}, h200)
    with pytest.raises(ValueError, match="registers_per_thread '37.5' is not a whole number"):
        plan_from_code_row(plan, {**row, "registers_per_thread": "37.5"}, h200)
    with pytest.raises(ValueError, match="delayed_hits 'maybe'"):
        plan_from_code_row(plan, {**row, "delayed_hits": "maybe"}, h200)


def test_the_sass_command_line_puts_the_code_s_time_beside_the_plan_s(h200):
    """Each kernel's line: its trips, and its simulated time as planned and as compiled (the committed
    FP32 1024^3 GEMM row: 15-16x); a kernel whose compiled registers do not fit says it cannot launch."""
    from gpusim.commands.sass import describe
    from gpusim.cuda_backend.measure import kernels_suite

    case = next(c for c in kernels_suite(h200) if c.case_id == "gemm_fp32_1024x1024x1024")
    row = {k: (float(v) if k in ("round_trips", "warp_instructions", "warp_stall_cycles") else v)
           for k, v in load_code_rows(FOLDER / "kernels.csv")[case.case_id].items()}
    row["registers_per_thread"] = int(row["registers_per_thread"])
    line = describe(case, row, h200)
    assert "1542 round trips" in line and "as compiled" in line
    ratio = float(line.rsplit("(", 1)[1].rstrip("x)"))
    assert 14 < ratio < 17
    assert "cannot launch" in describe(case, {**row, "registers_per_thread": 1024}, h200)


def test_a_stale_code_row_skips_its_case_with_the_reason():
    """A kernels_sass.csv row counted for another plan than the one measured is not silently dropped
    (the case would be timed from its plan alone): the case is skipped and says why."""
    from gpusim.accuracy import load_plan_rows, run_accuracy
    from gpusim.measurements import load_kernel_cases

    csv_path = FOLDER / "kernels.csv"
    cases = [c for c in load_kernel_cases(csv_path) if c.case_id == "elementwise_add_fp32_1048576"]
    plans, code = load_plan_rows(csv_path), load_code_rows(csv_path)
    results, skipped = run_accuracy(cases, plan_rows=plans, code_rows=code)
    assert [r.case_id for r in results] == ["elementwise_add_fp32_1048576"] and not skipped
    stale = {case_id: {**row, "plan_name": "elementwise_add[other]"} for case_id, row in code.items()}
    results, skipped = run_accuracy(cases, plan_rows=plans, code_rows=stale)
    assert not results
    assert "counts the code of elementwise_add[other]" in skipped[0].reason
    assert "run gpusim sass again" in skipped[0].reason
