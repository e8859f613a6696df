"""Command-line outputs and values: every bad one is one line (exit 2) before any simulation runs, and
a failed write leaves the old file as it was."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from gpusim.cli import main
from gpusim.config import library
from gpusim.errors import GpusimError
from gpusim.results.export import atomic_output, write_text_file

HW, GEMM = "h100_sxm5_80gb", "gemm_8192_bf16"


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "result.json"
    target.write_text("old")

    class DiskFull(OSError):
        pass

    with pytest.raises(GpusimError, match=r"result.json: cannot write: disk full"):
        with atomic_output(target) as tmp:
            tmp.write_text("half of the new")
            raise DiskFull(28, "disk full")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]
    write_text_file(target, "new")
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def test_a_written_file_gets_the_permissions_a_plain_write_would(tmp_path):
    """A new file: 0666 less the umask (not the private 0600 of the temporary file it was written
    as); a replaced file keeps its own mode."""
    old_mask = os.umask(0o027)
    try:
        fresh = tmp_path / "fresh.json"
        write_text_file(fresh, "{}")
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o640
    finally:
        os.umask(old_mask)
    kept = tmp_path / "kept.json"
    kept.write_text("old")
    kept.chmod(0o604)
    write_text_file(kept, "new")
    assert stat.S_IMODE(kept.stat().st_mode) == 0o604 and kept.read_text() == "new"


def test_an_output_through_a_link_or_into_a_pipe_is_written_not_replaced(tmp_path):
    """A symbolic link keeps pointing at its file, which gets the new text; a FIFO (as /dev/stdout
    or /dev/null would be) is written into and stays a FIFO."""
    target = tmp_path / "kept.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_text_file(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    write_text_file(fifo, "through the pipe")
    reader.join(timeout=10)
    assert received == ["through the pipe"] and stat.S_ISFIFO(fifo.stat().st_mode)


def test_an_output_that_is_an_input_is_refused_before_any_work(tmp_path, capsys):
    """Writing a result over the description, measurements or result file the command reads would lose
    it: one line, exit 2, the input untouched. So is one file for two outputs."""
    hw = tmp_path / "hw.yaml"
    hw.write_text((Path(__file__).parents[1] / "hwconfigs" / "h100_sxm5_80gb.yaml").read_text())
    before = hw.read_text()
    assert main(["run", str(hw), GEMM, "--json", str(hw)]) == 2
    assert "--json: " in one_line_error(capsys) and hw.read_text() == before
    # a built-in name stands for its file (here a copy of the built-in folder, so nothing real is at stake)
    builtin = tmp_path / "builtin_hwconfigs"
    builtin.mkdir()
    (builtin / "h100_sxm5_80gb.yaml").write_text(before)
    real_dir = library.builtin_dir
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(library, "builtin_dir", lambda kind: builtin if kind == "hwconfigs" else real_dir(kind))
        assert main(["run", HW, GEMM, "--json", str(builtin / "h100_sxm5_80gb.yaml")]) == 2
    assert "--json: " in one_line_error(capsys) and (builtin / "h100_sxm5_80gb.yaml").read_text() == before
    same = tmp_path / "same.json"
    assert main(["run", HW, GEMM, "--json", str(same), "--trace", str(same)]) == 2
    assert "--trace: " in one_line_error(capsys) and not same.exists()
    result = tmp_path / "r.json"
    assert main(["run", HW, GEMM, "--json", str(result)]) == 0
    capsys.readouterr()
    kept = result.read_text()
    assert main(["report", str(result), "--html", str(result)]) == 2
    assert "--html: " in one_line_error(capsys) and result.read_text() == kept
    csv = tmp_path / "k.csv"
    csv.write_text((Path(__file__).parents[1] / "measurements" / "published" / "kernels.csv").read_text())
    assert main(["calibrate", str(csv), "--base", HW, "-o", str(csv)]) == 2
    assert "--output: " in one_line_error(capsys)


@pytest.mark.parametrize("flag, value, message", [
    ("--json", "", "output path is empty"),
    ("--json", "{dir}", "cannot write: Is a directory"),
    ("--trace", "{file}/x.json", "is not a directory"),
    ("--trace", "-", "--trace: give a file path"),
])
def test_run_refuses_an_output_it_cannot_write_before_simulating(tmp_path, capsys, flag, value, message):
    (tmp_path / "f").write_text("keep")
    value = value.format(dir=tmp_path, file=tmp_path / "f")
    assert main(["run", HW, "no_such_workload_is_loaded_first", flag, value]) == 2
    assert message in one_line_error(capsys)
    assert (tmp_path / "f").read_text() == "keep"


@pytest.mark.parametrize("args, message", [
    (["--price-per-hour", "2.5"], "--price-per-hour: give a unit, e.g. 2.5USD/h, got '2.5'"),
    (["--price-per-hour=-2USD/h"], "--price-per-hour: must be above 0"),
    (["--power-cap", "500"], "--power-cap: give a unit, e.g. 500W"),
    (["--power-cap=-100W"], "--power-cap: must be above 0"),
    (["--price-per-hour", "0"], "--price-per-hour: must be above 0, got '0'"),  # zero in any unit
    (["--power-cap=-5"], "--power-cap: must be above 0, got '-5'"),
    (["--power-cap", "50W"], "a power cap of 50 W is not above h100_sxm5_80gb's idle power (70 W)"),
])
def test_run_values_need_units_and_sense(capsys, args, message):
    assert main(["run", HW, GEMM, "--set", "ops.0.m=256", "--set", "ops.0.n=256", "--set", "ops.0.k=256",
                 *args]) == 2
    assert message in one_line_error(capsys)


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "1e400", "abc"])
def test_epoch_and_token_counts_are_positive_finite_numbers(capsys, value):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", HW, "gpt2_large_train", f"--epoch-samples={value}"])
    assert exit_info.value.code == 2
    err = one_line_error(capsys)
    assert err.startswith("gpusim run: error: argument --epoch-samples:") and err.endswith("(see gpusim run --help)")


def test_a_gemm_too_large_to_walk_is_refused_in_one_line(capsys):
    assert main(["run", HW, GEMM, "--set", "ops.0.m=10000000", "--set", "ops.0.n=10000000",
                 "--set", "ops.0.k=1024"]) == 2
    err = one_line_error(capsys)
    assert "a 1 x 10000000 x 10000000 output (1e+14 elements, 2e+05 GB) is beyond what gpusim simulates" in err


def test_measurement_files_that_are_not_utf8_text_or_carry_a_bom(tmp_path, capsys):
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    for args in (["accuracy", "--suite", "training", "--training-measurements", str(binary)],
                 ["accuracy", "--suite", "kernels", "--measurements", str(binary)],
                 ["plot", "sweep", str(binary), "--x", "a", "--y", "b"],
                 ["report", str(binary)]):
        assert main(args) == 2
        assert one_line_error(capsys) == f"gpusim: {binary}: not a UTF-8 text file"
    # a spreadsheet's byte-order mark is not part of the first column's name
    source = Path(__file__).parents[1] / "measurements" / "heldout" / "torchtitan_a100_llama.csv"
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + source.read_bytes())
    out = tmp_path / "bom.json"
    assert main(["accuracy", "--suite", "training", "--training-measurements", str(bom), "--json", str(out)]) == 0
    assert len(json.loads(out.read_text())["training"]["cases"]) == 3


def test_a_sweep_row_longer_than_its_header_is_named(tmp_path, capsys):
    results = tmp_path / "s.csv"
    results.write_text("point_key,total_time_s\nabc,1.0\ndef,2.0,extra\n")
    assert main(["plot", "sweep", str(results), "--x", "point_key", "--y", "total_time_s"]) == 2
    assert one_line_error(capsys) == f"gpusim: {results}: line 3: has more cells than the header"


@pytest.mark.parametrize("args, message", [
    (["--suite", "communication", "--measurements", "x.csv"], "--measurements: x.csv: is read by --suite kernels"),
    (["--suite", "kernels", "--training-measurements", "x.csv"], "is not read by --suite kernels"),
    (["--suite", "kernels", "--plot", "x.pdfx"], "--plot: x.pdfx: figure file must end in .png, .svg or .pdf"),
    (["--suite", "kernels", "--json", "{dir}"], "cannot write: Is a directory"),
])
def test_accuracy_options_that_do_not_go_together_are_refused_first(tmp_path, capsys, args, message):
    args = [a.format(dir=tmp_path) for a in args]
    assert main(["accuracy", *args]) == 2
    assert message in one_line_error(capsys)


def test_calibrate_checks_its_output_before_fitting(tmp_path, capsys):
    assert main(["calibrate", "published", "--base", HW, "-o", str(tmp_path)]) == 2
    assert one_line_error(capsys) == f"gpusim: {tmp_path}: cannot write: Is a directory"


def test_a_result_file_with_a_bad_number_names_the_key(tmp_path, capsys):
    good = tmp_path / "good.json"
    assert main(["run", HW, "mlp_mnist", "--json", str(good)]) == 0
    assert capsys.readouterr().err == f"wrote {good}\n"  # stdout has the summary, stderr the file written
    data = json.loads(good.read_text())
    for key_path, value in (("total_time_s", "abc"), ("kernels.3.time_s", None), ("kernels.0.flop", True)):
        bad = json.loads(json.dumps(data))
        node = bad
        *parents, leaf = key_path.split(".")
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[leaf] = value
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(bad))
        for command in (["report", str(path)], ["plot", "timeline", str(path), "-o", str(tmp_path / "t.png")]):
            assert main(command) == 2
            assert one_line_error(capsys) == f"gpusim: {path}: {key_path}: expected a finite number, got {value!r}"
    # a run result is not a sweep results file
    assert main(["plot", "pareto", str(good)]) == 2
    assert "not a sweep results file (no point_key column" in one_line_error(capsys)


def test_a_key_written_twice_is_refused(tmp_path, capsys):
    path = tmp_path / "dup.yaml"
    path.write_text("schema_version: 1\nname: dup\nops:\n"
                    "  - {name: mm, op: matmul, m: 8, n: 16, k: 16, m: 32, dtype: bf16}\n")
    assert main(["run", HW, str(path)]) == 2
    assert one_line_error(capsys) == f"gpusim: {path}: ops.0.m: line 4: key written twice in one mapping"
    # with its path in the file, as any other key
    hw = tmp_path / "dup_hw.yaml"
    hw.write_text("schema_version: 1\nkind: gpu\nname: x\ngpu:\n  num_sms: 4\n  num_sms: 5\n")
    assert main(["check", str(hw)]) == 2
    assert one_line_error(capsys) == f"gpusim: {hw}: gpu.num_sms: line 6: key written twice in one mapping"


def test_a_bandwidth_without_its_unit_is_refused(capsys):
    assert main(["run", HW, GEMM, "--set", "gpu.dram.bandwidth_bytes_per_s=3.35"]) == 2
    assert one_line_error(capsys) == ("gpusim: --set: gpu.dram.bandwidth_bytes_per_s: input should be greater than "
                                      "or equal to 1000 (got 3.35); a bare number is in bytes/s: write the unit, e.g. "
                                      "3.35 TB/s")
    assert main(["run", HW, GEMM, "--set", "gpu.clocks.sm_clock_hz=1.98"]) == 2
    assert one_line_error(capsys).endswith("(got 1.98); a bare number is in Hz: write the unit, e.g. 1.98 GHz")


@pytest.mark.parametrize("column, value, message", [
    ("gpu", "h999", "row 2.gpu: no built-in hardware description 'h999'"),
    ("system", "dgx_h999", "row 2.system: no built-in system description 'dgx_h999'"),
    ("precision", "amp_bf17", "row 2.precision: must be one of"),
    ("num_gpus", "0", "row 2.num_gpus: must be 1 or more"),
])
def test_a_training_row_names_known_hardware_and_formats(tmp_path, capsys, column, value, message):
    import csv

    source = Path(__file__).parents[1] / "measurements" / "heldout" / "torchtitan_a100_llama.csv"
    with open(source, newline="") as f:
        reader = csv.DictReader(f)
        header, row = reader.fieldnames, next(reader)
    row[column] = value
    path = tmp_path / "rows.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerow(row)
    assert main(["accuracy", "--suite", "training", "--training-measurements", str(path)]) == 2
    assert message in one_line_error(capsys)


@pytest.mark.parametrize("item, message", [
    ("ops.0.m=abc", "gpusim: --set: ops.0.m: expected a whole number, got 'abc'"),
    ("ops.gemm.m=0", "gpusim: --set: ops.0.m: input should be greater than or equal to 1 (got 0)"),
    ("ops.0.dtype=BF16", "gpusim: --set: ops.0.dtype: unknown dtype 'BF16'"),
])
def test_a_bad_op_value_given_with_set_is_blamed_on_set(capsys, item, message):
    assert main(["run", HW, GEMM, "--set", item]) == 2
    assert one_line_error(capsys).startswith(message)


def test_a_bad_value_in_the_file_is_still_blamed_on_the_file(tmp_path, capsys):
    path = tmp_path / "w.yaml"
    path.write_text("schema_version: 1\nname: w\nops:\n  - {name: mm, op: matmul, m: 0, n: 16, k: 16, dtype: bf16}\n")
    assert main(["run", HW, str(path), "--set", "ops.0.n=32"]) == 2
    assert one_line_error(capsys).startswith(f"gpusim: {path}: ops.0.m: input should be greater than or equal to 1")


def test_calibrate_base_is_a_built_in_device_stem(capsys):
    for base in ("dgx_h100", "hwconfigs/h100_sxm5_80gb.yaml"):
        assert main(["calibrate", "published", "--base", base]) == 2
        assert f"--base: {base}: takes a built-in GPU or CPU name" in one_line_error(capsys)


def test_a_measurements_file_of_another_kind_is_named(capsys):
    root = Path(__file__).parents[1] / "measurements" / "published"
    assert main(["accuracy", "--suite", "training", "--training-measurements", str(root / "kernels.csv")]) == 2
    assert one_line_error(capsys).endswith("header: missing column 'system' (its header is a kernels file's)")


def test_exponent_numbers_that_yaml_reads_as_text_are_numbers():
    from gpusim.workload import load_workload

    workload = load_workload(GEMM, ["ops.0.m=1e3", "ops.0.n=2.5e3"])
    assert (workload.spec.ops[0].m, workload.spec.ops[0].n) == (1000, 2500)


def test_set_gpu_swaps_a_systems_gpu_by_name(capsys):
    from gpusim.config import load_hardware

    system = load_hardware("dgx_h100", ["gpu=a100_sxm4_80gb", "gpu.num_sms=100"])
    assert system.gpu.num_sms == 100 and system.gpu.dram.capacity_bytes == load_hardware(
        "a100_sxm4_80gb").gpu.dram.capacity_bytes
    assert main(["run", "dgx_h100", "all_reduce_1gib", "--set", "gpu=xeon_8480"]) == 2
    assert one_line_error(capsys) == "gpusim: --set: gpu: 'xeon_8480' is not a gpu description"


def test_a_run_on_a_description_without_calibration_says_its_times_are_ideal(tmp_path):
    from gpusim.config import load_hardware
    from gpusim.engine.simulate import simulate
    from gpusim.workload import load_workload

    bare = tmp_path / "bare.yaml"
    bare.write_text("schema_version: 1\nextends: h100_sxm5_80gb\nname: bare\ngpu:\n  calibration: null\n")
    workload = load_workload(GEMM, ["ops.0.m=2048"])
    ideal = simulate(load_hardware(bare), workload, record_spans=False)
    fitted = simulate(load_hardware(HW), workload, record_spans=False)
    note = [w for w in ideal.warnings if "has no calibration: block" in w]
    assert len(note) == 1 and note[0].startswith("bare has no calibration: block")
    assert not any("calibration" in w for w in fitted.warnings)
    assert ideal.total_time_s < fitted.total_time_s  # datasheet peaks: faster than the fitted H100


def test_a_memory_bound_kernel_names_the_level_that_bound_it():
    from dataclasses import replace

    from gpusim.engine.kernel import simulate_kernel
    from gpusim.engine.machine import machine_of
    from gpusim.config import load_hardware
    from gpusim.mapping import best_gemm

    machine = machine_of(load_hardware(HW))
    gemv = best_gemm(machine, "gemv", "matmul", 1, 8192, 8192, 1, "bf16", 2.0 * 8192 * 8192)
    assert simulate_kernel(gemv, machine).memory_limiter == "dram"  # a weight read once: DRAM
    # the same square GEMM with a sixth of the L2 bandwidth: its L2 traffic binds
    square = best_gemm(machine, "gemm", "matmul", 8192, 8192, 8192, 1, "bf16", 2.0 * 8192 ** 3)
    starved = replace(machine, l2_bandwidth_bytes_per_s=machine.l2_bandwidth_bytes_per_s / 6)
    timing = simulate_kernel(square, starved)
    assert timing.bound == "memory" and timing.memory_limiter == "l2"


def test_check_lists_every_problem_of_a_file_and_run_the_first(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("schema_version: 1\nextends: h100_sxm5_80gb\nname: bad\ngpu:\n  num_sms: 0\n"
                    "  dram:\n    bandwidth_bytes_per_s: 6\n  l2:\n    capacity: 1 MiB\n")
    assert main(["check", str(path)]) == 2
    assert one_line_error(capsys) == f"gpusim: {path}: gpu.l2.capacity: unknown key; did you mean capacity_bytes?"
    assert main(["check", "--all", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == f"gpusim: {path}: gpu.l2.capacity: unknown key; did you mean capacity_bytes?"
    assert sorted(line.split(": ")[2] for line in lines[1:]) == ["gpu.dram.bandwidth_bytes_per_s", "gpu.num_sms"]
    assert main(["run", str(path), GEMM]) == 2
    assert one_line_error(capsys) == lines[0]


def test_a_multi_gpu_run_on_an_uncalibrated_system_warns_once(capsys):
    assert main(["run", "dgx_h100", "llama2_7b_train", "--set", "config.num_layers=2", "--set", "parallelism.data=8",
                 "--set", "gpu.calibration=null"]) == 0
    out = capsys.readouterr().out
    assert out.count("warning: dgx_h100 has no calibration: block") == 1


def test_plot_sweep_names_the_column_that_is_wrong(tmp_path, capsys):
    """An unknown --hue is one line listing the columns (it was a KeyError); a --y column without
    numbers is blamed on --y, not on --x."""
    results = tmp_path / "s.csv"
    results.write_text("point_key,hardware,gpu.num_sms,total_time_s,tokens_per_s,error\n"
                       "a,h100,66,0.002,,\nb,h100,132,0.001,,\n")
    out = str(tmp_path / "p.png")
    assert main(["plot", "sweep", str(results), "--x", "gpu.num_sms", "--y", "total_time_s", "--hue", "nosuch",
                 "-o", out]) == 2
    assert one_line_error(capsys).startswith(f"gpusim: {results}: nosuch: no such column (columns: hardware,")
    assert main(["plot", "sweep", str(results), "--x", "gpu.num_sms", "--y", "tokens_per_s", "-o", out]) == 2
    assert one_line_error(capsys) == f"gpusim: {results}: tokens_per_s: no numeric values to plot"
    assert not Path(out).exists()


@pytest.mark.parametrize("address", ["garbage", "http://localhost:1", "tcp://localhost:notaport"])
def test_a_scheduler_that_is_not_an_address_is_one_line(tmp_path, capsys, address):
    pytest.importorskip("distributed")
    assert main(["sweep", HW, GEMM, "--scheduler", address, "--grid", "gpu.num_sms=66",
                 "--out", str(tmp_path / "x.csv")]) == 2
    assert one_line_error(capsys).startswith(f"gpusim: --scheduler: {address}: not a scheduler address")


def test_a_power_cap_and_no_power_cap_together_are_refused(capsys):
    assert main(["run", HW, GEMM, "--power-cap", "500W", "--no-power-cap"]) == 2
    assert one_line_error(capsys) == "gpusim: command line: --no-power-cap: turns off the cap --power-cap sets: give one"


def test_an_empty_sweep_output_is_named_as_such(capsys):
    pytest.importorskip("distributed")
    assert main(["sweep", HW, GEMM, "--grid", "gpu.num_sms=66", "--out", ""]) == 2
    assert one_line_error(capsys) == "gpusim: output path is empty"


def test_accuracy_names_the_rows_it_skips(tmp_path, capsys):
    """A row of the user's own file that gpusim cannot score is named in the skipped line, not only
    counted; one naming a GPU gpusim has no description of is refused at its row and column."""
    published = (Path(__file__).parents[1] / "measurements" / "published" / "kernels.csv").read_text().splitlines()
    row = next(line for line in published if line.startswith("h100_sxm_bf16_mm_4096,"))
    mine = tmp_path / "mine.csv"
    mine.write_text("\n".join([published[0], row.replace("h100_sxm_bf16_mm_4096,h100_sxm5_80gb,",
                                                          "mine_a,h100_sxm5_80gbb,", 1)]) + "\n")
    assert main(["accuracy", "--suite", "kernels", "--measurements", str(mine)]) == 2
    assert one_line_error(capsys).endswith("row 2.gpu: no built-in hardware description is named "
                                           "'h100_sxm5_80gbb'; did you mean h100_sxm5_80gb?")
    flagged = next(line for line in published if line.startswith("h100_sxm_anon_stream_copy_256mb_132blocks,"))
    mine.write_text("\n".join([published[0], row, flagged]) + "\n")
    assert main(["accuracy", "--suite", "kernels", "--measurements", str(mine)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        "skipped: 1 excluded by the dataset (flagged source) (h100_sxm_anon_stream_copy_256mb_132blocks)")


def test_a_set_key_both_files_have_names_its_file(capsys):
    assert main(["run", HW, "mlp_mnist", "--set", "name=x"]) == 2
    assert "write hardware.name=... or workload.name=..." in one_line_error(capsys)
    assert main(["run", HW, "mlp_mnist", "--set", "hardware.name=my_gpu", "--set", "workload.name=my_mlp"]) == 0
    assert capsys.readouterr().out.startswith("my_mlp on my_gpu: ")


def test_accuracy_prints_its_tables_unless_the_json_goes_to_stdout(tmp_path, capsys):
    out = tmp_path / "comm.json"
    assert main(["accuracy", "--suite", "communication", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert "MAPE" in table and len(data["communication"]["cases"]) > 20
    assert all(c["case_id"] in table for c in data["communication"]["cases"])
    assert main(["accuracy", "--suite", "communication", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out) == data


def test_a_result_whose_kernel_lacks_a_required_key_names_it(tmp_path, capsys):
    result = tmp_path / "r.json"
    assert main(["run", HW, "mlp_mnist", "--json", str(result)]) == 0
    data = json.loads(result.read_text())
    del data["kernels"][2]["time_s"]
    result.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["report", str(result)]) == 2
    err = one_line_error(capsys)
    assert "kernels.2.time_s: missing" in err and "dataclass" not in err and "__init__" not in err


def test_counts_in_run_output_are_kernel_launches_with_plurals(capsys):
    assert main(["run", HW, GEMM]) == 0
    assert "(1 kernel launch, 1 distinct kernel, launch eager)" in capsys.readouterr().out
    assert main(["run", HW, "llama2_7b_inference", "--set", "generate_len=8", "--set", "decode_buckets=2"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "kernel launches" in first and "distinct kernels" in first


@pytest.mark.parametrize(("corrupt", "message"), [
    (lambda d: d.update(time_breakdown_s=[1, 2]), "time_breakdown_s: expected a mapping of names to numbers"),
    (lambda d: d["time_breakdown_s"].update(compute="x"), "time_breakdown_s.compute: expected a finite number"),
    (lambda d: d.update(warnings=5), "warnings: expected a list of text lines"),
    (lambda d: d.update(hardware=None), "hardware: expected text"),
    (lambda d: d.pop("workload"), "workload: missing"),
    (lambda d: d.update(total_time_s=-1.0), "total_time_s: expected a number of at least 0"),
    (lambda d: d["kernels"][0].update(repeat=0), "kernels.0.repeat: expected a whole number of at least 1"),
    (lambda d: d["kernels"][1].update(op=7), "kernels.1.op: expected text"),
])
def test_a_malformed_result_is_one_line_for_report_and_plots(tmp_path, capsys, corrupt, message):
    good = tmp_path / "r.json"
    assert main(["run", HW, "mlp_mnist", "--json", str(good)]) == 0
    data = json.loads(good.read_text())
    corrupt(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    capsys.readouterr()
    for command in (["report", str(bad)], ["report", str(bad), "--html", str(tmp_path / "x.html")],
                    ["plot", "breakdown", str(bad), "-o", str(tmp_path / "b.png")]):
        assert main(command) == 2, command
        err = one_line_error(capsys)
        assert message in err and "bad.json" in err
    assert not (tmp_path / "x.html").exists() and not (tmp_path / "b.png").exists()


def test_costs_need_the_right_workload_and_whole_counts(capsys):
    assert main(["run", HW, "llama2_7b_inference", "--train-tokens", "1000"]) == 2
    assert "--train-tokens: a training-run cost needs a training workload" in one_line_error(capsys)
    with pytest.raises(SystemExit):
        main(["run", HW, "mlp_mnist", "--epoch-samples", "1.5"])
    assert "expected a whole number" in capsys.readouterr().err
    # small costs and short epochs keep their digits: 60,000 MNIST samples take well under a second
    assert main(["run", HW, "mlp_mnist", "--epoch-samples", "60000"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if "epoch of" in l)
    assert "epoch of 60,000 samples: " in line and " ms, $0.000" in line and not line.endswith("$0.00")


def test_errors_name_the_description_or_file_they_are_in(capsys):
    assert main(["hw", "compare", HW, "xeon_8480", "--set", "gpu.num_sms=100"]) == 2
    assert one_line_error(capsys).endswith("(in xeon_8480)")
    assert main(["run", "xeon_8480", "mlp_mnist", "--launch", "native"]) == 2
    assert "cpu.launch.native_kernel_launch_s is not set" in one_line_error(capsys)
    assert main(["run", HW, "all_reduce_1gib"]) == 2
    assert one_line_error(capsys).startswith("gpusim: workloads/all_reduce_1gib.yaml: ")


def test_a_measurements_file_with_an_unknown_gpu_dtype_or_no_rows_is_refused(tmp_path, capsys):
    from gpusim.measurements import published_dir

    header, *rows = (Path(published_dir()) / "kernels.csv").read_text().splitlines()
    row = next(r for r in rows if r.startswith("h100_sxm_fp32_mm_1024,"))
    for name, text, message in (
            ("empty.csv", header, "no cases: the file has a header and no rows"),
            ("gpu.csv", header + "\n" + row.replace(",h100_sxm5_80gb,", ",h999,"),
             "row 2.gpu: no built-in hardware description is named 'h999'"),
            ("dtype.csv", header + "\n" + row.replace(",fp32,", ",fp99,"), "row 2.dtype: must be one of")):
        path = tmp_path / name
        path.write_text(text + "\n")
        assert main(["accuracy", "--measurements", str(path)]) == 2
        assert message in one_line_error(capsys)


def test_workload_show_counts_op_launches_with_plurals_and_prints_warnings(capsys):
    assert main(["workload", "show", "all_reduce_1gib"]) == 0
    assert "1 op launch from 1 node, 1 distinct op" in capsys.readouterr().out
    assert main(["workload", "show", "llama2_7b_inference", "--set", "prompt_len=5000"]) == 0
    assert "warning: prompt_len + generate_len (5128) is longer than config.seq_len (4096)" in capsys.readouterr().out
    assert main(["workload", "show", "llama2_7b_inference", "--set", "prompt_len=5000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["warnings"]


def test_compare_commands_need_two_descriptions_and_one_workload(capsys):
    assert main(["hw", "compare", HW]) == 2
    assert one_line_error(capsys).startswith("gpusim: command line: HW: give two or more descriptions to compare")
    # a second workload (or the order reversed) is named as a workload, before anything is simulated
    assert main(["compare", HW, "a100_sxm4_80gb", GEMM, "bert_base_train"]) == 2
    assert one_line_error(capsys) == (f"gpusim: command line: HW: {GEMM} is a workload: compare runs one WORKLOAD, "
                                      "given last, on two or more HW")


def test_integer_peaks_are_operations_not_flop(capsys):
    assert main(["hw", "show", HW]) == 0
    lines = {" ".join(line.split()) for line in capsys.readouterr().out.splitlines()}
    assert {"peak INT8 1.979 POP/s", "peak FP8 1.979 PFLOP/s"} <= lines


def test_communication_measurements_are_read_by_the_communication_suite_only(capsys):
    path = "measurements/heldout/azure_nccl_all_reduce.csv"
    assert main(["accuracy", "--suite", "kernels", "--communication-measurements", path]) == 2
    assert one_line_error(capsys) == f"gpusim: --communication-measurements: {path}: is not read by --suite kernels"
    assert main(["accuracy", "--suite", "communication", "--communication-measurements", path]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"communication ({path}):") and "65 cases" in out
