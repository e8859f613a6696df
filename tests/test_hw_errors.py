"""Every broken hardware description fails with one clear line naming the file and the key path.

The corpus lives in ``tests/data/broken_hw/``: one file per rule variant, each starting with a
comment ``# expect: <substring of the error line>``. The library raises ConfigError; the command
line prints that one line on stderr and exits with code 2, never a traceback.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpusim.cli import main
from gpusim.config import load_hardware
from gpusim.config.loader import read_yaml
from gpusim.errors import ConfigError

DATA = Path(__file__).parent / "data"
BROKEN = sorted((DATA / "broken_hw").glob("*.yaml"))
VALID_FIXTURES = sorted((DATA / "hw").glob("*.yaml"))
REPO = Path(__file__).resolve().parent.parent


def expected_substring(path: Path) -> str:
    first_line = path.read_text(encoding="utf-8").splitlines()[0]
    assert first_line.startswith("# expect: "), f"{path.name} must start with '# expect: '"
    return first_line.removeprefix("# expect: ").strip()


def test_corpus_is_large_enough():
    assert len(BROKEN) >= 32
    # every expectation is distinct enough to pin its own rule
    assert len({expected_substring(p) for p in BROKEN}) >= 30


@pytest.mark.parametrize("fixture", VALID_FIXTURES, ids=lambda p: p.name)
def test_valid_fixtures_load(fixture):
    """The bases the broken files extend are themselves valid (so each broken file has one fault)."""
    assert load_hardware(fixture).name == fixture.stem


@pytest.mark.parametrize("path", BROKEN, ids=lambda p: p.name)
def test_library_raises_one_line_config_error(path):
    with pytest.raises(ConfigError) as info:
        load_hardware(path)
    text = str(info.value)
    assert "\n" not in text
    assert expected_substring(path) in text
    assert path.name in text
    assert info.value.source.endswith(path.name)


@pytest.mark.parametrize("path", BROKEN, ids=lambda p: p.name)
def test_cli_check_prints_one_line_and_exits_2(path, capsys):
    assert main(["check", str(path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("gpusim: ")
    assert expected_substring(path) in lines[0]
    assert path.name in lines[0]
    assert "Traceback" not in captured.err + captured.out
    assert captured.out == ""


def test_console_script_never_shows_a_traceback():
    """The real entry point, in a fresh interpreter, on a few of the worst inputs at once."""
    worst = [DATA / "broken_hw" / name for name in (
        "python_object_tag.yaml", "yaml_syntax_error.yaml", "extends_cycle_a.yaml",
        "wrong_type_list_for_mapping.yaml", "system_gpu_names_cpu.yaml")]
    result = subprocess.run([sys.executable, "-m", "gpusim", "check", *map(str, worst)],
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == len(worst)
    for path, line in zip(worst, lines):
        assert line.startswith("gpusim: ") and path.name in line
        assert expected_substring(path) in line
    assert result.stdout == ""


def test_console_script_check_of_a_valid_file_exits_0():
    result = subprocess.run([sys.executable, "-m", "gpusim", "check", "hwconfigs/h100_sxm5_80gb.yaml"],
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok  hwconfigs/h100_sxm5_80gb.yaml (gpu)"


def test_yaml_tag_never_runs(tmp_path):
    """A tag that would call a function is refused, and the function never runs."""
    marker = tmp_path / "ran"
    path = tmp_path / "evil.yaml"
    path.write_text(f"schema_version: 1\nkind: gpu\nname: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(ConfigError, match="line 3: YAML tag 'tag:yaml.org,2002:python/object/apply:os.system'"):
        load_hardware(path)
    assert not marker.exists()


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("schema_version: 1\nkind: gpu\nname: x\ngpu:\n  num_sms: 132\n  clocks: {sm_clock_hz: 1 GHz\n")
    with pytest.raises(ConfigError) as info:
        load_hardware(path)
    assert "YAML syntax error at line 7" in str(info.value)  # the end of the unclosed flow mapping
    assert str(info.value).startswith(f"{path}: ")


@pytest.mark.parametrize("text", ["", " ", "\n\n", "\t\n  \n", "# only a comment\n", "---\n"])
def test_empty_and_whitespace_only_files(tmp_path, text, capsys):
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_hardware(path)
    assert str(info.value) == f"{path}: file is empty"
    assert main(["check", str(path)]) == 2
    assert capsys.readouterr().err == f"gpusim: {path}: file is empty\n"


def test_missing_file(tmp_path, capsys):
    path = tmp_path / "no_such_file.yaml"
    with pytest.raises(ConfigError) as info:
        load_hardware(path)
    assert str(info.value) == f"{path}: file not found"
    assert main(["check", str(path)]) == 2
    assert capsys.readouterr().err == f"gpusim: {path}: file not found\n"


def test_directory_instead_of_file(tmp_path, capsys):
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    with pytest.raises(ConfigError, match="is a directory"):
        read_yaml(folder)
    with pytest.raises(ConfigError) as info:  # a name resolves only to a file, and says what it found
        load_hardware(folder)
    assert str(info.value) == f"{folder}: is a directory, not a file"
    for args in (["check", str(folder)], ["run", str(folder), "gemm_8192_bf16"], ["run", "h100_sxm5_80gb", str(folder)]):
        assert main(args) == 2
        assert capsys.readouterr().err == f"gpusim: {folder}: is a directory, not a file\n"


def test_binary_file(tmp_path):
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00\x81kind: gpu")
    with pytest.raises(ConfigError, match="not a UTF-8 text file"):
        load_hardware(path)


def test_check_reports_every_bad_file_and_still_accepts_good_ones(capsys):
    good = REPO / "hwconfigs" / "h100_sxm5_80gb.yaml"
    bad = [DATA / "broken_hw" / "misspelled_dram_key.yaml", DATA / "broken_hw" / "zero_num_sms.yaml"]
    assert main(["check", str(bad[0]), str(good), str(bad[1])]) == 2
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 2
    assert captured.out == f"ok  {good} (gpu)\n"


def test_check_of_an_overlay_without_its_own_kind(tmp_path, capsys):
    """A valid overlay inherits ``kind`` through ``extends:``; check reports the inherited kind."""
    path = tmp_path / "faster_hbm.yaml"
    path.write_text(f"extends: {REPO / 'hwconfigs' / 'h100_sxm5_80gb.yaml'}\nname: faster_hbm\n"
                    "gpu:\n  dram:\n    bandwidth_bytes_per_s: 4.8 TB/s\n")
    assert main(["check", str(path)]) == 0
    assert capsys.readouterr().out == f"ok  {path} (gpu)\n"


def test_hw_show_unknown_name(capsys):
    assert main(["hw", "show", "nonexistent_gpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("gpusim: nonexistent_gpu: no such file or built-in name; ")
    # nothing is close to this name, so the hint points at the list of names
    assert "gpusim hw list" in err


def test_hw_show_misspelled_name_suggests_the_close_one(capsys):
    assert main(["hw", "show", "h100_sxm5_80bg"]) == 2
    err = capsys.readouterr().err
    assert err == "gpusim: h100_sxm5_80bg: no such file or built-in name; did you mean h100_sxm5_80gb?\n"


def test_hw_show_prefix_suggests_names_that_start_with_it(capsys):
    assert main(["hw", "show", "h100"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpusim: h100: no such file or built-in name; did you mean ")
    suggested = err.split("did you mean ", 1)[1].rstrip("?\n").split(" or ")
    assert suggested and all(name.startswith("h100_") for name in suggested)
    assert "h100_sxm5_80gb" in suggested


def test_hw_show_missing_path(capsys):
    assert main(["hw", "show", "no/such/dir/gpu.yaml"]) == 2
    assert capsys.readouterr().err == "gpusim: no/such/dir/gpu.yaml: file not found\n"


def test_error_from_the_built_in_library_names_it_as_hwconfigs(tmp_path):
    """A child that extends a built-in reports problems against the child, by the path it was given."""
    path = tmp_path / "child.yaml"
    path.write_text("extends: h100_sxm5_80gb\ngpu:\n  l2:\n    capcity_bytes: 60 MiB\n")
    with pytest.raises(ConfigError) as info:
        load_hardware(path)
    assert str(info.value) == f"{path}: gpu.l2.capcity_bytes: unknown key; did you mean capacity_bytes?"


def test_config_error_is_always_one_line():
    error = ConfigError("a.yaml", "gpu.x", "first line\nsecond   line")
    assert str(error) == "a.yaml: gpu.x: first line second line"
    assert (error.source, error.key_path) == ("a.yaml", "gpu.x")
    assert str(ConfigError("a.yaml", "", "file is empty")) == "a.yaml: file is empty"


def test_deep_nesting_and_nested_aliases_are_one_line(tmp_path):
    """A file nested past MAX_YAML_DEPTH, or a few lines of aliases that nest ('billion laughs': 9
    aliases of the level below, 8 levels = 9^8 = 43 million values), is refused in one line, quickly,
    instead of a RecursionError or an exhausted memory."""
    from gpusim.config.loader import MAX_YAML_DEPTH

    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 1000 + "]" * 1000 + "\n")
    with pytest.raises(ConfigError, match=f"nested more than {MAX_YAML_DEPTH} levels deep"):
        read_yaml(deep)
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match="more than 1,000,000 values once its aliases are expanded"):
        read_yaml(bomb)
    # aliases that stay small are plain YAML and still load
    small = tmp_path / "small.yaml"
    small.write_text("a: &a [1, 2]\nb: *a\n")
    assert read_yaml(small) == {"a": [1, 2], "b": [1, 2]}


def test_a_file_without_kind_or_a_hardware_section_may_be_a_workload(tmp_path, capsys):
    """A workload that lost its ops: is checked as a description without kind: the line says what
    either kind of file needs; a hardware file (it has its gpu: section) gets the plain message."""
    lost = tmp_path / "lost_ops.yaml"
    lost.write_text("schema_version: 1\nname: gemm\ndescription: one GEMM\n")
    assert main(["check", str(lost)]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "kind: missing required key (gpu, cpu or system); a workload file has ops: or model: instead")
    hardware = tmp_path / "no_kind.yaml"
    hardware.write_text("schema_version: 1\nname: x\ngpu:\n  vendor: nvidia\n")
    assert main(["check", str(hardware)]) == 2
    assert capsys.readouterr().err.strip().endswith("kind: missing required key (gpu, cpu or system)")


def test_check_takes_built_in_names_as_run_does(capsys):
    assert main(["check", "h100_sxm5_80gb", "llama2_7b_train"]) == 0
    assert capsys.readouterr().out.splitlines() == ["ok  h100_sxm5_80gb (gpu)", "ok  llama2_7b_train (workload)"]
    assert main(["check", "h100_sxm5_80gbb"]) == 2
    assert "did you mean h100_sxm5_80gb" in capsys.readouterr().err
