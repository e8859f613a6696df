"""``gpusim measure`` without a GPU: the exit code, the suites, and the files a (fake) timing writes."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import textwrap

import pytest

from gpusim.cuda_backend import measure as M
from gpusim.cuda_backend import plans as P


@pytest.fixture(scope="module")
def h100():
    return P.load_machine("h100_sxm5_80gb")


def test_no_gpu_exits_2_with_one_line():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")  # never a real GPU, whatever the machine has
    proc = subprocess.run([sys.executable, "-m", "gpusim", "measure", "--suite", "micro"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpusim: no CUDA GPU found (")


def test_no_gpu_in_process(monkeypatch, capsys):
    from gpusim.cli import main
    from gpusim.commands import measure as command

    monkeypatch.setattr(command, "no_gpu_reason", lambda: "no CUDA driver library on this machine")
    assert main(["measure", "--suite", "kernels"]) == 2
    err = capsys.readouterr().err
    assert err == "gpusim: no CUDA GPU found (no CUDA driver library on this machine)\n"
    # a misspelled --hardware is the first thing to fix: it is named before the missing GPU, for every suite
    for suite in ("kernels", "library", "block"):
        assert main(["measure", "--suite", suite, "--hardware", "h100_sxm"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("gpusim: h100_sxm: no such file or built-in name") and err.count("\n") == 1


def test_micro_suite_definitions(h100):
    cases = M.micro_suite(h100)
    chase = [c for c in cases if c.op == "pointer_chase"]
    edges = [1024 * s for s in (112, 120, 128, 136, 176, 184, 192, 200, 240, 248, 264)]
    assert [c.get("working_set_bytes") for c in chase] == sorted({16 * 1024 * 4**i for i in range(9)} | set(edges))
    assert chase[-1].get("working_set_bytes") == 2**30
    stream = [c for c in cases if c.op == "stream"]
    assert {(c.variant, c.get("occupancy_fraction")) for c in stream} == \
        {(v, o) for v in ("init", "read", "scale", "triad") for o in (0.125, 0.25, 0.5, 1.0)}
    triad = next(c for c in stream if c.variant == "triad" and c.get("occupancy_fraction") == 1.0)
    assert triad.moved_bytes == 3 * 2**30  # three 1 GiB FP64 arrays
    assert (triad.get("grid"), triad.get("threads")) == (264, 1024)
    l2 = [c for c in cases if c.op == "l2_bandwidth"]
    assert [c.get("working_set_bytes") for c in l2] == [2**20 * 2**i for i in range(9)]
    assert all(c.moved_bytes == c.get("working_set_bytes") * c.get("passes") for c in l2)
    fma = next(c for c in cases if c.op == "fma")
    assert fma.flop == 2 * 8 * 4096 * fma.get("grid") * fma.get("threads")
    copies = [c for c in cases if c.op.startswith("memcpy_")]
    assert len(copies) == 8
    assert len({c.case_id for c in cases}) == len(cases)


def test_kernels_suite_plans_are_runnable_and_exact(h100):
    cases = M.kernels_suite(h100)
    assert len({c.case_id for c in cases}) == len(cases)
    gemms = [c for c in cases if c.op == "matmul"]
    assert len(gemms) == 2 * len(M.GEMM_SHAPES)
    for case in gemms:
        tile = case.plan.tile
        assert P.unsupported_tile_reason(tile, case.dtype) is None
        assert case.plan.grid == (tile.split_k * math.ceil(case.get("m") / tile.block_m)
                                  * math.ceil(case.get("n") / tile.block_n))
        assert case.plan.threads_per_cta == tile.num_warps * 32
        assert case.flop == 2.0 * case.get("m") * case.get("n") * case.get("k")
    for case in cases:
        if case.op in ("elementwise", "reduction"):
            P.elementwise_layout(case.plan, case.get("num_elements"), case.dtype)  # raises if the grid differs
        if case.op in ("softmax", "layernorm"):
            P.row_layout(case.plan, case.get("rows"), case.get("cols"), case.dtype)
        if case.plan is not None:
            assert case.plan.shared_bytes_per_cta <= P.STATIC_SHARED_LIMIT_BYTES


def test_rotation_count():
    l2, dram = 50 * 2**20, 80 * 2**30
    # 12 MiB of inputs: floor(100 MiB / 12 MiB) + 1 = 9 copies (108 MiB) exceed twice the L2.
    assert M.num_rotations(12 * 2**20, l2, dram) == 9
    assert M.num_rotations(1 * 2**20, l2, dram) == 16  # capped
    assert M.num_rotations(2**30, l2, dram) == 1
    assert M.num_rotations(30 * 2**30, l2, dram) == 1  # a quarter of device memory at most
    assert M.num_rotations(0, l2, dram) == 1


def test_gpu_names_map_to_stems():
    assert M.gpu_stem("NVIDIA H100 80GB HBM3") == "h100_sxm5_80gb"
    assert M.gpu_stem("NVIDIA H100 PCIe") == "h100_pcie_80gb"
    assert M.gpu_stem("NVIDIA A100-SXM4-40GB") == "a100_sxm4_40gb"
    assert M.gpu_stem("Tesla T4") is None
    assert M.folder_name("Tesla T4") == "tesla_t4"
    assert M.folder_name("NVIDIA H200") == "h200_sxm_141gb"


class FakeLauncherFactory:
    def __init__(self):
        self.calls = {}

    def __call__(self, case):
        def launch(i):
            self.calls[case.case_id] = self.calls.get(case.case_id, 0) + 1
        return M.Launcher(launch, num_rotations=3, registers_per_thread=64 if case.op == "matmul" else None)


def fake_timer(launch, num_warmups, num_repeats):
    """Calls the launch like the event timer; times 3, 1, 2, 3, 1, 2, ... milliseconds."""
    for i in range(num_warmups):
        launch(i)
    times = []
    for r in range(num_repeats):
        launch(num_warmups + r)
        times.append((3, 1, 2)[r % 3] * 1e-3)
    return times


def test_measure_files_with_a_fake_timer(h100, tmp_path):
    from gpusim.accuracy import run_accuracy
    from gpusim.commands.measure import execute
    from gpusim.measurements import load_kernel_cases

    provenance = {**M.base_provenance("h100_sxm5_80gb", "2025-01-01T00:00:00+00:00"),
                  "gpu_name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "num_sms": 132,
                  "cuda_driver_api_version": "12.4", **M.nvml_clocks()}
    factory = FakeLauncherFactory()
    written = execute(["micro", "kernels"], h100, "h100_sxm5_80gb", provenance, tmp_path, factory, fake_timer,
                      num_warmups=2, num_repeats=3)
    names = sorted(p.name for p in written)
    assert names == ["kernels.csv", "kernels_plans.csv", "kernels_provenance.json", "kernels_timings.csv",
                     "micro.csv", "micro_plans.csv", "micro_provenance.json", "micro_timings.csv"]
    # Every case launched warm-ups + repeats times.
    assert set(factory.calls.values()) == {5}

    # The published-format files load with the published loader and the accuracy code simulates them.
    published_header = (tmp_path / "kernels.csv").read_text().splitlines()[0].split(",")
    assert tuple(published_header) == M.KERNEL_COLUMNS
    cases = list(load_kernel_cases(tmp_path / "micro.csv")) + list(load_kernel_cases(tmp_path / "kernels.csv"))
    assert {c.op for c in cases} == {"pointer_chase", "stream", "l2_bandwidth", "memcpy_h2d", "memcpy_d2h",
                                     "matmul", "elementwise", "softmax", "layernorm"}
    gemm = next(c for c in cases if c.case_id == "gemm_fp32_1024x1024x1024")
    assert gemm.measured_time_s == pytest.approx(2e-3)  # median of 3, 1, 2 ms
    assert gemm.measured_flop_per_s == pytest.approx(2 * 1024**3 / 2e-3, rel=1e-5)
    chase = next(c for c in cases if c.op == "pointer_chase")
    assert chase.metric == "latency_s"
    assert chase.measured_latency_s == pytest.approx(2e-3 / M.CHASE_STEPS, rel=1e-5)
    results, skipped = run_accuracy([c for c in cases if c.op != "matmul" or c.m == 1000])
    assert not [s for s in skipped if "cannot simulate" in s.reason]
    assert len(results) > 0

    with (tmp_path / "kernels_timings.csv").open() as handle:
        timings = {r["case_id"]: r for r in csv.DictReader(handle)}
    row = timings["gemm_fp16_2048x2048x2048"]
    assert (float(row["median_time_s"]), float(row["min_time_s"]), float(row["max_time_s"])) == (2e-3, 1e-3, 3e-3)
    assert row["num_rotations"] == "3" and row["num_repeats"] == "3" and row["num_warmups"] == "2"
    assert any(r["op"] == "reduction" for r in timings.values())

    with (tmp_path / "kernels_plans.csv").open() as handle:
        plans = {r["case_id"]: r for r in csv.DictReader(handle)}
    plan = plans["gemm_fp32_1000x1000x1000"]
    bm, bn = int(plan["block_m"]), int(plan["block_n"])
    assert int(plan["grid"]) == math.ceil(1000 / bm) * math.ceil(1000 / bn) * int(plan["split_k"])
    assert int(plan["threads_per_cta"]) == 32 * int(plan["num_warps"])
    assert plan["measured_registers_per_thread"] == "64"
    assert float(plan["simulated_time_s"]) > 0

    info = json.loads((tmp_path / "kernels_provenance.json").read_text())
    assert info["suites"] == ["kernels"]
    for key in ("gpu_name", "compute_capability", "sm_clock_hz", "driver_version", "numba_version",
                "numba_cuda_version", "gpusim_version", "gpusim_commit", "date"):
        assert key in info


def test_launchers_run_tiny_cases_under_the_simulator():
    """The GPU launch builders, exercised under the simulator on tiny cases (no events there)."""
    script = textwrap.dedent("""
        import numpy as np
        from gpusim.cuda_backend import measure as M, plans as P
        machine = P.load_machine("h100_sxm5_80gb")
        plan_g = P.plan_for_gemm(machine, 20, 24, 20, "fp32", P.Tile(16, 16, 8, 2, 1))
        cases = [
            M.MeasureCase("g", "kernels", "matmul", None, "fp32", "time_s", plan=plan_g,
                          shape=(("m", 20), ("n", 24), ("k", 20), ("batch", 1)), input_set_bytes=1e9),
            M.MeasureCase("e", "kernels", "elementwise", "add", "fp32", "time_s",
                          plan=P.plan_for_elementwise(machine, "add", 300, "fp32"), shape=(("num_elements", 300),)),
            M.MeasureCase("r", "kernels", "reduction", "sum", "fp32", "time_s",
                          plan=P.plan_for_reduction(machine, 300, "fp32"), shape=(("num_elements", 300),)),
            M.MeasureCase("s", "kernels", "softmax", None, "fp32", "time_s",
                          plan=P.plan_for_rows(machine, "softmax", 3, 20, "fp32"), shape=(("rows", 3), ("cols", 20))),
            M.MeasureCase("c", "micro", "pointer_chase", "ld_global", None, "latency_s",
                          shape=(("working_set_bytes", 4096),), params=(("steps", 10),), rotate=False),
            M.MeasureCase("t", "micro", "stream", "triad", "fp64", "bytes_per_s",
                          shape=(("num_bytes", 800),), params=(("grid", 1), ("threads", 32)), rotate=False),
            M.MeasureCase("l", "micro", "l2_bandwidth", "read", "fp64", "bytes_per_s",
                          shape=(("working_set_bytes", 800),), params=(("grid", 1), ("threads", 32), ("passes", 2)),
                          rotate=False),
            M.MeasureCase("f", "micro", "fma", "fp32", "fp32", "flop_per_s",
                          params=(("grid", 1), ("threads", 32), ("iterations", 4)), rotate=False),
        ]
        def timer(launch, w, r):
            for i in range(w + r):
                launch(i)
            return [1e-3] * r
        timings = M.run_suite(cases, lambda c: M.cuda_launcher(c, machine), timer, 1, 2)
        print(len(timings), timings[0].num_rotations)
    """)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    # A 1 GB input set is larger than twice the L2: no rotation needed.
    assert proc.stdout.split() == ["8", "1"]


def test_accuracy_simulates_own_kernels_with_their_exact_plans(h100, tmp_path):
    """Own-kernel measurements are simulated with the plan they ran (from *_plans.csv), not re-planned:
    the simulated time equals the engine's time for that plan recorded at measurement time."""
    from gpusim.accuracy import load_plan_rows, run_accuracy
    from gpusim.commands.measure import execute
    from gpusim.measurements import load_kernel_cases

    provenance = {**M.base_provenance("h100_sxm5_80gb", "2025-01-01T00:00:00+00:00"), "gpu_name": "NVIDIA H100"}
    execute(["kernels"], h100, "h100_sxm5_80gb", provenance, tmp_path, FakeLauncherFactory(), fake_timer,
            num_warmups=1, num_repeats=3)
    cases = list(load_kernel_cases(tmp_path / "kernels.csv"))
    plan_rows = load_plan_rows(tmp_path / "kernels.csv")
    assert len({c.case_id for c in cases} & set(plan_rows)) >= 5  # plans also cover timing-only kernels
    results, skipped = run_accuracy(cases, plan_rows=plan_rows)
    assert not [s for s in skipped if "cannot simulate" in s.reason]
    by_id = {r.case_id: r for r in results}
    checked = 0
    for case in cases:
        if case.case_id in plan_rows and case.metric == "time_s" and case.case_id in by_id:
            recorded = float(plan_rows[case.case_id]["simulated_time_s"])  # written with 5 significant digits
            assert by_id[case.case_id].simulated == pytest.approx(recorded, rel=1e-4)
            checked += 1
    assert checked >= 5


def test_measuring_one_op_keeps_the_other_rows_and_an_unknown_op_is_refused(h100, tmp_path):
    from gpusim.commands.measure import execute
    from gpusim.errors import ConfigError
    from gpusim.measurements import load_kernel_cases

    provenance = {**M.base_provenance("h100_sxm5_80gb", "2025-01-01T00:00:00+00:00"), "gpu_name": "NVIDIA H100"}
    execute(["kernels"], h100, "h100_sxm5_80gb", provenance, tmp_path, FakeLauncherFactory(), fake_timer,
            num_warmups=1, num_repeats=3)
    before = {c.case_id: c for c in load_kernel_cases(tmp_path / "kernels.csv")}
    softmax = {k for k, c in before.items() if c.op == "softmax"}
    assert softmax and len(softmax) < len(before)
    factory = FakeLauncherFactory()
    execute(["kernels"], h100, "h100_sxm5_80gb", provenance, tmp_path, factory, fake_timer,
            num_warmups=1, num_repeats=3, ops=["softmax"])
    assert set(factory.calls) == softmax  # only the softmax cases ran again
    after = {c.case_id: c for c in load_kernel_cases(tmp_path / "kernels.csv")}
    assert set(after) == set(before)  # every other op's rows are still there, once
    timings = (tmp_path / "kernels_timings.csv").read_text().splitlines()
    assert len(timings) == len(set(timings)) and sum(1 for line in timings if ",softmax," in line) == len(softmax)
    with pytest.raises(ConfigError, match="--op: matmull: no such op"):
        execute(["kernels"], h100, "h100_sxm5_80gb", provenance, tmp_path, FakeLauncherFactory(), fake_timer,
                num_warmups=1, num_repeats=3, ops=["matmull"])


def test_the_event_timer_queues_a_spin_ahead_of_each_timed_launch(monkeypatch):
    """An idle GPU records the start event at once and would count the host's launch time as the
    kernel's; a spin kernel queued first must cover four times the warm-up's enqueue time (at least
    the floor), and the events must bracket only the launch."""
    import types

    from gpusim.cuda_backend import micro as U

    log: list[tuple] = []

    class Event:
        def __init__(self):
            self.name = f"event{sum(1 for x in log if x[0] == 'new event')}"
            log.append(("new event",))

        def record(self):
            log.append(("record", self.name))

        def synchronize(self):
            pass

    fake = types.SimpleNamespace(event=lambda timing: Event(), synchronize=lambda: None,
                                 device_array=lambda n, dtype: object(),
                                 event_elapsed_time=lambda a, b: 0.25)  # milliseconds
    import numba

    monkeypatch.setattr(numba, "cuda", fake, raising=False)
    monkeypatch.setitem(sys.modules, "numba.cuda", fake)
    monkeypatch.setattr(M, "_spin_seconds_per_iteration", lambda: 1e-6)
    monkeypatch.setattr(U, "launch_spin", lambda out, iterations: log.append(("spin", iterations)))
    clock = iter(range(100))
    monkeypatch.setattr("time.perf_counter", lambda: next(clock) * 1e-3)  # every enqueue "takes" 1 ms

    def launch(i):
        log.append(("launch", i))

    times = M.cuda_event_timer(launch, 2, 3)
    assert times == [0.25e-3] * 3
    timed = [x for x in log if x[0] in ("spin", "launch", "record")]
    assert timed[:2] == [("launch", 0), ("launch", 1)]  # warm-ups, not timed
    probes = M.ENQUEUE_PROBES
    assert [x[0] for x in timed[2:2 + probes]] == ["launch"] * probes  # enqueue probes, not timed
    # 4 x 1 ms of enqueue over 1 us per spin iteration; then start, launch, end, for each repeat
    for r in range(3):
        spin, start, run, end = timed[2 + probes + 4 * r: 6 + probes + 4 * r]
        assert spin[0] == "spin" and spin[1] == pytest.approx(4000, abs=1) and run == ("launch", 2 + r)
        assert start[0] == end[0] == "record" and start[1] != end[1]
    # a fast enqueue still gets the floor
    log.clear()
    monkeypatch.setattr("time.perf_counter", lambda: 0.0)
    M.cuda_event_timer(launch, 1, 1)
    assert [x[1] for x in log if x[0] == "spin"] == [pytest.approx(1000, abs=1)]
    # a first launch that compiles (seconds to enqueue) does not set the spin: the least probe does
    log.clear()
    ticks = iter([0.0, 5.0, 5.0, 5.001])  # probe 1 enqueues in 5 s, probe 2 in 1 ms
    monkeypatch.setattr("time.perf_counter", lambda: next(ticks))
    M.cuda_event_timer(launch, 0, 1)
    assert [x[1] for x in log if x[0] == "spin"] == [pytest.approx(4000, abs=1)]
