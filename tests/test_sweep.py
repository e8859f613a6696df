"""Design-space sweeps on Dask: point construction, per-point evaluation, identical results on a local
cluster and on a separately started ``dask scheduler`` + ``dask worker``, no lost or duplicated point
when a worker is killed, resume after an interruption, and the sweep plots."""

from __future__ import annotations

import csv
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")

from gpusim.cli import main  # noqa: E402
from gpusim.errors import ConfigError  # noqa: E402
from gpusim.sweep import (  # noqa: E402
    METRICS,
    ResultsJournal,
    SweepPoint,
    columns_for,
    evaluate_point,
    grid_points,
    numeric_value,
    pareto_front,
    parse_grid,
    parse_ranges,
    random_points,
    read_results,
    run_sweep,
    split_params,
)

HW, GEMM = "h100_sxm5_80gb", "gemm_8192_bf16"
THREE_PARAMS = ["--grid", "gpu.dram.bandwidth_bytes_per_s=2TB/s,5TB/s", "--grid", "gpu.num_sms=66,132",
                "--grid", "ops.0.m=2048,4096,1.5"]  # 1.5 rows: an invalid point, recorded


# --------------------------------------------------------------------------------------- points


def test_grid_is_the_product_with_stable_keys():
    grid = parse_grid(["gpu.num_sms=66,132", "batch_size=1,2,4"])
    points = grid_points(HW, GEMM, grid)
    assert len(points) == 6
    assert points[0].params == (("gpu.num_sms", "66"), ("batch_size", "1"))
    again = grid_points(HW, GEMM, parse_grid(["gpu.num_sms=66,132", "batch_size=1,2,4"]))
    assert [p.key for p in points] == [p.key for p in again]
    assert len({p.key for p in points}) == 6
    # the key does not depend on the order parameters are given in
    a = SweepPoint(HW, GEMM, (("a", "1"), ("b", "2")))
    b = SweepPoint(HW, GEMM, (("b", "2"), ("a", "1")))
    assert a.key == b.key != SweepPoint(HW, "other", (("a", "1"), ("b", "2"))).key


def test_bad_grid_and_range_items_are_config_errors():
    for bad in (["gpu.num_sms"], ["=1,2"], ["gpu.num_sms=1,,2"], ["a=1", "a=2"]):
        with pytest.raises(ConfigError):
            parse_grid(bad)
    for bad in (["x=1"], ["x=5..1"], ["x=1TB/s..2GB/s"], ["x=log:0..1"]):
        with pytest.raises(ConfigError):
            parse_ranges(bad)


def test_random_points_keep_units_and_are_reproducible():
    ranges = parse_ranges(["gpu.dram.bandwidth_bytes_per_s=2TB/s..5TB/s", "batch_size=1..64",
                           "gpu.l2.capacity_bytes=log:10MiB..200MiB"])
    pts = random_points(HW, GEMM, ranges, 50, seed=3)
    assert pts == random_points(HW, GEMM, ranges, 50, seed=3)
    assert pts != random_points(HW, GEMM, ranges, 50, seed=4)
    for p in pts:
        values = dict(p.params)
        assert 2e12 <= numeric_value(values["gpu.dram.bandwidth_bytes_per_s"]) <= 5e12
        assert values["gpu.dram.bandwidth_bytes_per_s"].endswith("TB/s")
        assert 1 <= int(values["batch_size"]) <= 64
        assert 10 * 2**20 <= numeric_value(values["gpu.l2.capacity_bytes"]) <= 200 * 2**20


def test_split_params_by_hardware_root():
    hw, wl = split_params([("gpu.num_sms", "66"), ("num_nodes", "2"), ("batch_size", "4"), ("config.x", "1")])
    assert hw == ["gpu.num_sms=66", "num_nodes=2"]
    assert wl == ["batch_size=4", "config.x=1"]


def test_evaluate_point_metrics_and_invalid_point():
    row = evaluate_point(HW, GEMM, [("gpu.dram.bandwidth_bytes_per_s", "5TB/s")])
    assert row["error"] is None
    assert set(METRICS) <= set(row)
    assert row["energy_j"] == pytest.approx(row["avg_power_w"] * row["total_time_s"])
    assert row["cost_usd"] == pytest.approx(2.69 / 3600 * row["total_time_s"])
    assert row["fits_in_memory"] is True
    bad = evaluate_point(HW, GEMM, [("gpu.dram.bandwidth_bytes_per_s", "5 GHz")])
    assert bad["total_time_s"] is None
    assert "gpu.dram.bandwidth_bytes_per_s" in bad["error"] and "\n" not in bad["error"]
    also_bad = evaluate_point(HW, GEMM, [("gpu.power.tdp_w", "10 W")])
    assert "idle_w" in also_bad["error"]


def test_pareto_front():
    rows = [{"t": 1, "e": 5}, {"t": 2, "e": 2}, {"t": 3, "e": 3}, {"t": 5, "e": 1}, {"t": 2, "e": 2.5}]
    assert pareto_front(rows, ["t", "e"]) == [0, 1, 3]


# --------------------------------------------------------------------------------------- clusters


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dask_cli() -> list[str]:
    exe = Path(sys.executable).with_name("dask")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "dask"]


class ExternalCluster:
    """``dask scheduler`` and ``dask worker`` processes on 127.0.0.1 with a random free port."""

    def __init__(self, num_workers: int):
        self.port = _free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.workers: list[subprocess.Popen] = []
        env = dict(os.environ, DASK_DISTRIBUTED__WORKER__DAEMON="False")
        self.procs.append(subprocess.Popen(
            _dask_cli() + ["scheduler", "--host", "127.0.0.1", "--port", str(self.port), "--no-dashboard"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
        for _ in range(num_workers):
            w = subprocess.Popen(
                _dask_cli() + ["worker", self.address, "--host", "127.0.0.1", "--nthreads", "1", "--no-nanny",
                               "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            self.workers.append(w)
            self.procs.append(w)

    def client(self, num_workers: int):
        client = distributed.Client(self.address, timeout="30s")
        client.wait_for_workers(num_workers, timeout=60)
        return client

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture
def external_cluster():
    clusters: list[ExternalCluster] = []

    def start(num_workers: int) -> ExternalCluster:
        c = ExternalCluster(num_workers)
        clusters.append(c)
        return c

    try:
        yield start
    finally:
        for c in clusters:
            c.stop()


def _rows(path: Path) -> list[dict]:
    return sorted(read_results(path), key=lambda r: r["point_key"])


def test_local_and_external_clusters_give_identical_results(tmp_path, external_cluster, capsys):
    local_csv, remote_csv = tmp_path / "local.csv", tmp_path / "remote.csv"
    assert main(["sweep", HW, GEMM, *THREE_PARAMS, "--workers", "2", "--no-progress",
                 "--out", str(local_csv)]) == 0
    cluster = external_cluster(1)
    cluster.client(1).close()  # wait until the worker is up
    assert main(["sweep", HW, GEMM, *THREE_PARAMS, "--scheduler", cluster.address, "--no-progress",
                 "--out", str(remote_csv)]) == 0
    local, remote = _rows(local_csv), _rows(remote_csv)
    assert len(local) == 12
    assert local == remote
    errors = [r for r in local if r["error"]]
    assert len(errors) == 4 and all("ops" in r["error"] for r in errors)
    assert all(r["ops.0.m"] == "1.5" for r in errors)
    # plots of the sweep
    captured = capsys.readouterr()
    assert "12 points: 12 computed" in captured.out
    # each run's summary names one of its failed points and why
    first = [line for line in captured.err.splitlines() if line.startswith("first error: ")]
    assert len(first) == 2 and all("ops.0.m: input should be a valid integer" in line for line in first)
    png, svg = tmp_path / "bw.png", tmp_path / "pareto.svg"
    assert main(["plot", "sweep", str(local_csv), "--x", "gpu.dram.bandwidth_bytes_per_s", "--y",
                 "total_time_s", "--hue", "gpu.num_sms", "--out", str(png)]) == 0
    assert main(["plot", "pareto", str(local_csv), "--label", "gpu.num_sms", "--out", str(svg)]) == 0
    written = capsys.readouterr()
    assert not written.out  # the figures are announced on stderr only
    assert written.err.splitlines()[-1].startswith(f"wrote {svg} (") and "Pareto-optimal points)" in written.err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert svg.read_text().lstrip().startswith("<?xml")
    assert main(["plot", "sweep", str(local_csv), "--x", "nope", "--y", "total_time_s"]) == 2


def test_killed_worker_loses_no_point(tmp_path, external_cluster):
    cluster = external_cluster(2)
    client = cluster.client(2)
    points = grid_points(HW, "gpt3_175b_train", parse_grid(["batch_size=1,2", "gpu.num_sms=100,110,120,132"]),
                         fixed=[("config.num_layers", "1")])
    journal = ResultsJournal(tmp_path / "kill.csv", columns_for(points))
    killed = []

    def progress(done, total, row):
        if done == 2 and not killed:  # the other worker is mid-task: kill it
            victim = cluster.workers[0]
            os.kill(victim.pid, signal.SIGKILL)
            killed.append(victim.pid)

    try:
        summary = run_sweep(client, points, journal, progress=progress)
        assert len(client.scheduler_info()["workers"]) == 1  # the scheduler saw the worker die
    finally:
        client.close()
    assert killed and cluster.workers[0].wait(timeout=10) == -signal.SIGKILL
    rows = read_results(tmp_path / "kill.csv")
    keys = [r["point_key"] for r in rows]
    assert sorted(keys) == sorted(p.key for p in points)  # every point, once
    assert summary.num_failed == 0 and summary.num_computed == len(points)
    assert all(not r["error"] for r in rows)


class _Interrupt(Exception):
    pass


def test_resume_computes_only_missing_points(tmp_path):
    from gpusim.sweep import local_client

    points = grid_points(HW, GEMM, parse_grid(["ops.0.m=1024,2048,3072,4096", "gpu.num_sms=100,132"]))
    path = tmp_path / "resume.csv"
    client = local_client(1)
    try:
        def stop_after_three(done, total, row):
            if done == 3:
                raise _Interrupt()

        with pytest.raises(_Interrupt):
            run_sweep(client, points, ResultsJournal(path, columns_for(points)), progress=stop_after_three)
        first = {r["point_key"]: r for r in read_results(path)}
        assert len(first) == 3
        # an interrupted write leaves a torn last line: it is dropped on resume
        with open(path, "a") as f:
            f.write(next(iter(first)) + ",h100_sxm5_80g")
        # without --resume an existing file is refused
        with pytest.raises(ConfigError):
            run_sweep(client, points, ResultsJournal(path, columns_for(points)))
        computed = []
        summary = run_sweep(client, points, ResultsJournal(path, columns_for(points)), resume=True,
                            progress=lambda d, t, row: computed.append(row.get("point_key")) if row else None)
    finally:
        cluster = client.cluster
        client.close()
        cluster.close()
    assert summary.num_skipped == 3 and summary.num_computed == len(points) - 3
    assert not set(computed) & set(first)  # nothing finished was recomputed
    rows = read_results(path)
    assert sorted(r["point_key"] for r in rows) == sorted(p.key for p in points)
    for r in rows:  # the rows kept are the rows written the first time
        if r["point_key"] in first:
            assert r == first[r["point_key"]]
    with open(path) as f:
        assert all(len(row) == len(columns_for(points)) for row in csv.reader(f))


def test_sweep_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["sweep", HW, GEMM, "--out", str(tmp_path / "x.csv")]) == 2
    assert "--grid" in capsys.readouterr().err
    # a misspelled name or a missing file is refused before any point runs, and nothing is written
    assert main(["sweep", "h100_sxm5", GEMM, "--grid", "gpu.num_sms=1,2", "--out", str(tmp_path / "x.csv")]) == 2
    assert "did you mean h100_sxm5_80gb" in capsys.readouterr().err
    assert main(["sweep", HW, "gemm.yaml", "--grid", "gpu.num_sms=1,2", "--out", str(tmp_path / "x.csv")]) == 2
    assert capsys.readouterr().err.strip() == "gpusim: gemm.yaml: file not found"
    assert not (tmp_path / "x.csv").exists()
    # a bad --set every point shares stops the sweep before a good results file is replaced
    good = tmp_path / "good.csv"
    good.write_text("keep")
    for extra in (["--set", "gpu.num_smz=3"], ["--workers", "0"], ["--resume"]):
        assert main(["sweep", HW, GEMM, "--grid", "gpu.num_sms=100,132", "--out", str(good), "--overwrite",
                     *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and err.startswith("gpusim: ")
    assert good.read_text() == "keep"
    # a swept key the description does not have would fail every point: one line before any work
    assert main(["sweep", HW, GEMM, "--grid", "gpu.l2.capacity=1MiB,2MiB", "--workers", "1", "--no-progress",
                 "--out", str(tmp_path / "unknown_key.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "gpusim: --grid: gpu.l2.capacity: unknown key; did you mean capacity_bytes?"
    assert not (tmp_path / "unknown_key.csv").exists()
    # keys under a model's config: and an op of an op list are checked the same way
    for workload, key, said in (("llama2_7b_train", "config.num_layer=2,4", "did you mean num_layers?"),
                                (GEMM, "ops.0.mm=1,2", "did you mean m?")):
        assert main(["sweep", HW, workload, "--grid", key, "--workers", "1", "--no-progress",
                     "--out", str(tmp_path / "unknown_key.csv")]) == 2
        assert capsys.readouterr().err.strip() == f"gpusim: --grid: {key.partition('=')[0]}: unknown key; {said}"
        assert not (tmp_path / "unknown_key.csv").exists()
    # values no point accepts are found point by point
    assert main(["sweep", HW, GEMM, "--grid", "gpu.num_sms=0,-1", "--workers", "1", "--no-progress",
                 "--out", str(tmp_path / "all_fail.csv")]) == 2
    err = capsys.readouterr().err
    assert "first error: " in err and "gpu.num_sms: input should be greater than or equal to 1" in err
    assert "every point failed" in err
    assert main(["sweep", HW, GEMM, "--grid", "gpu.num_sms=100,132", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"gpusim: {tmp_path}: cannot write: Is a directory"
    assert main(["sweep", HW, GEMM, "--grid", "gpu.num_sms=1,2", "--range", "x=1..2",
                 "--out", str(tmp_path / "x.csv")]) == 2
    assert main(["sweep", HW, GEMM, "--grid", "gpu.num_sms=1,2", "--set", "gpu.num_sms=3",
                 "--out", str(tmp_path / "x.csv")]) == 2
    import importlib.util

    if importlib.util.find_spec("pyarrow") is None:
        assert main(["sweep", HW, GEMM, "--grid", "gpu.num_sms=1,2", "--out", str(tmp_path / "x.parquet")]) == 2
        assert "pyarrow" in capsys.readouterr().err


def test_plot_group_holds_sweep_and_run_figures():
    from gpusim.cli import build_parser

    parser = build_parser()
    plot = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "plot")[1]
    names = set(plot._subparsers._group_actions[0].choices)
    assert {"sweep", "pareto", "roofline", "timeline", "breakdown"} <= names


def _subcommands(parser):
    """(name, parser) of every command and nested subcommand under ``parser``."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield name, child
                yield from _subcommands(child)


def test_every_command_help_has_an_example():
    from gpusim.cli import build_parser

    commands = list(_subcommands(build_parser()))
    assert len(commands) >= 15  # the 12 commands and the plot, hw and workload subcommands
    missing = [name for name, p in commands if "Example" not in p.format_help()]
    assert missing == []
