"""Overlays: ``extends:`` with deep merge and ``null`` removal, ``--set KEY.PATH=VALUE`` overrides,
and the ``hw show --json`` summary they feed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpusim.cli import main
from gpusim.config import load_hardware, summary
from gpusim.config.loader import deep_merge, parse_set_items
from gpusim.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
H100 = REPO / "hwconfigs" / "h100_sxm5_80gb.yaml"
TEST_SYSTEM = Path(__file__).resolve().parent / "data" / "hw" / "test_system.yaml"

# H100 SXM5 datasheet arithmetic (see the sources in hwconfigs/h100_sxm5_80gb.yaml)
H100_BF16_FLOP_PER_S = 132 * 4096 * 1.83e9
H100_DRAM_BYTES_PER_S = 3.35e12


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------ extends


def test_deep_merge_overlay_wins_and_null_removes():
    base = {"a": 1, "b": {"c": 2, "d": 3}, "e": {"f": 4}}
    merged = deep_merge(base, {"b": {"c": 20}, "e": None, "g": [1]})
    assert merged == {"a": 1, "b": {"c": 20, "d": 3}, "g": [1]}
    assert base == {"a": 1, "b": {"c": 2, "d": 3}, "e": {"f": 4}}  # the base is not modified


def test_extends_by_relative_path_merges_deeply(tmp_path):
    child = write(tmp_path / "h100_hbm3e.yaml", f"""\
extends: {os.path.relpath(H100, tmp_path)}
name: h100_hbm3e
description: H100 with faster memory
gpu:
  dram:
    type: HBM3e
    bandwidth_bytes_per_s: 4.8 TB/s
sources:
  gpu.dram: a what-if, not a product
""")
    assert not os.path.isabs(os.path.relpath(H100, tmp_path))
    desc = load_hardware(child)
    base = load_hardware(H100)
    assert desc.name == "h100_hbm3e"
    assert desc.description == "H100 with faster memory"
    assert desc.gpu.dram.type == "HBM3e"
    assert desc.gpu.dram.bandwidth_bytes_per_s == 4.8e12
    # siblings of the changed keys come from the parent
    assert desc.gpu.dram.capacity_bytes == 80 * 2**30
    assert desc.gpu.dram.latency_s == base.gpu.dram.latency_s
    assert desc.gpu.dram.bus_width_bits == 5120
    assert desc.gpu.l2 == base.gpu.l2
    assert desc.gpu.num_sms == 132
    # sources merge key by key: the child's citation replaces the parent's for gpu.dram only
    assert desc.sources["gpu.dram"] == "a what-if, not a product"
    assert desc.sources["gpu.l2"] == base.sources["gpu.l2"]


def test_extends_by_built_in_name(tmp_path):
    child = write(tmp_path / "big_l2.yaml", "extends: h100_sxm5_80gb\nname: big_l2\ngpu:\n  l2:\n    capacity_bytes: 100 MiB\n")
    desc = load_hardware(child)
    assert desc.gpu.l2.capacity_bytes == 100 * 2**20
    assert desc.gpu.l2.num_partitions == 2
    assert desc.kind == "gpu"  # inherited


def test_extends_chain_of_three(tmp_path):
    write(tmp_path / "a.yaml", "extends: h100_sxm5_80gb\nname: a\ngpu:\n  num_sms: 144\n")
    write(tmp_path / "b.yaml", "extends: a.yaml\nname: b\ngpu:\n  clocks:\n    sm_clock_hz: 2.1 GHz\n")
    desc = load_hardware(write(tmp_path / "c.yaml", "extends: b.yaml\nname: c\n"))
    assert (desc.name, desc.gpu.num_sms, desc.gpu.clocks.sm_clock_hz) == ("c", 144, 2.1e9)
    assert desc.gpu.clocks.tensor_clock_hz == 1.83e9


def test_extends_cycle_of_one_file(tmp_path):
    path = write(tmp_path / "self.yaml", "extends: self.yaml\n")
    with pytest.raises(ConfigError) as info:
        load_hardware(path)
    assert str(info.value) == f"{path}: extends: cycle: self.yaml -> self.yaml"


def test_null_removes_peer_links(tmp_path):
    child = write(tmp_path / "h100_no_nvlink.yaml", "extends: h100_sxm5_80gb\nname: h100_no_nvlink\ngpu:\n  peer_links: null\n")
    desc = load_hardware(child)
    assert desc.gpu.peer_links is None
    # the parent's citation of the removed section goes with it
    assert "gpu.peer_links" not in desc.sources
    assert "gpu.host_link" in desc.sources
    info = summary(desc)
    assert "peer_bandwidth_bytes_per_s" not in info
    assert "peer_bandwidth_bytes_per_s" in summary(load_hardware(H100))


def test_null_removes_an_optional_key_deep_inside(tmp_path):
    child = write(tmp_path / "no_clusters.yaml", "extends: h100_sxm5_80gb\ngpu:\n  sm:\n    max_cluster_size: null\n")
    desc = load_hardware(child)
    assert desc.gpu.sm.max_cluster_size is None
    assert desc.gpu.sm.max_shared_bytes == 228 * 2**10


def test_child_citation_of_a_removed_section_is_still_an_error(tmp_path):
    child = write(tmp_path / "c.yaml", "extends: h100_sxm5_80gb\ngpu:\n  peer_links: null\n"
                                       "sources:\n  gpu.peer_links: still cited here\n")
    with pytest.raises(ConfigError) as info:
        load_hardware(child)
    assert str(info.value) == f"{child}: sources.gpu.peer_links: cites a key that is not in this description"


def test_system_overlay_in_another_folder_keeps_the_parents_relative_references(tmp_path):
    """test_system.yaml names its host CPU as ``test_cpu.yaml`` next to it; a child elsewhere inherits that."""
    child = write(tmp_path / "bigger.yaml", f"extends: {TEST_SYSTEM}\nname: bigger\nnum_nodes: 4\n")
    desc = load_hardware(child)
    assert desc.num_gpus == 32
    assert desc.host_cpu.num_cores == 32
    assert desc.gpu.num_sms == 132
    assert desc.inter_node.nic_bandwidth_bytes_per_s == 50e9  # 400 Gb/s
    assert "gpu.num_sms" in desc.sources and "host_cpu" in desc.sources


def test_system_overlay_can_swap_the_gpu(tmp_path):
    write(tmp_path / "slow.yaml", "extends: h100_sxm5_80gb\nname: slow\ngpu:\n  num_sms: 66\n")
    child = write(tmp_path / "sys.yaml", f"extends: {TEST_SYSTEM}\ngpu: slow.yaml\n")
    desc = load_hardware(child)
    assert desc.gpu.num_sms == 66  # the child's own reference resolves relative to the child


# ------------------------------------------------------------------------------------ --set


def test_set_with_units():
    desc = load_hardware("h100_sxm5_80gb", ["gpu.dram.bandwidth_bytes_per_s=4.8TB/s"])
    assert desc.gpu.dram.bandwidth_bytes_per_s == 4.8e12
    assert desc.gpu.dram.capacity_bytes == 80 * 2**30


@pytest.mark.parametrize(
    ("item", "getter", "value"),
    [
        ("gpu.dram.bandwidth_bytes_per_s=4.8 TB/s", lambda d: d.gpu.dram.bandwidth_bytes_per_s, 4.8e12),
        ("gpu.dram.capacity_bytes=141 GB", lambda d: d.gpu.dram.capacity_bytes, 141e9),
        ("gpu.l2.capacity_bytes=25MiB", lambda d: d.gpu.l2.capacity_bytes, 25 * 2**20),
        ("gpu.num_sms=144", lambda d: d.gpu.num_sms, 144),
        ("gpu.clocks.sm_clock_hz=2.2e9", lambda d: d.gpu.clocks.sm_clock_hz, 2.2e9),
        ("gpu.host_link.bandwidth_bytes_per_s=400 Gb/s", lambda d: d.gpu.host_link.bandwidth_bytes_per_s, 50e9),
        ("gpu.peer_links=null", lambda d: d.gpu.peer_links, None),
        ("gpu.tensor_core.dense_flop_per_cycle_per_sm.fp4=16384",
         lambda d: d.gpu.tensor_core.dense_flop_per_cycle_per_sm.fp4, 16384),
        ("name=what_if", lambda d: d.name, "what_if"),
    ],
)
def test_set_values(item, getter, value):
    assert getter(load_hardware("h100_sxm5_80gb", [item])) == value


def test_set_is_applied_on_top_of_extends(tmp_path):
    child = write(tmp_path / "c.yaml", "extends: h100_sxm5_80gb\ngpu:\n  num_sms: 144\n")
    desc = load_hardware(child, ["gpu.num_sms=100", "gpu.dram.latency_s=300 ns"])
    assert desc.gpu.num_sms == 100
    assert desc.gpu.dram.latency_s == pytest.approx(300e-9)


def test_set_accepts_parsed_pairs():
    desc = load_hardware("h100_sxm5_80gb", parse_set_items(["gpu.num_sms=100"]))
    assert desc.gpu.num_sms == 100


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["gpu.dram.bandwith_bytes_per_s=4.8TB/s"],
         "--set: gpu.dram.bandwith_bytes_per_s: unknown key; did you mean bandwidth_bytes_per_s?"),
        (["gpux.num_sms=1"], "--set: gpux: unknown key; did you mean gpu?"),
        (["gpu.dram.bandwidth_bytes_per_s=4.8 GHz"],
         "--set: gpu.dram.bandwidth_bytes_per_s: expected a bandwidth such as 3.35 TB/s, got '4.8 GHz' (hz)"),
        (["gpu.clocks.sm_clock_hz=2 GB"],
         "--set: gpu.clocks.sm_clock_hz: expected a frequency such as 1.98 GHz, got '2 GB' (bytes)"),
        (["gpu.num_sms=-4"], "--set: gpu.num_sms: input should be greater than or equal to 1 (got -4)"),
        (["gpu.num_sms=lots"], "--set: gpu.num_sms: expected a whole number, got 'lots'"),
        (["gpu.num_sms=true"], "--set: gpu.num_sms: expected a whole number, got a boolean"),
        (["gpu.dram=null"], "--set: gpu.dram: expected a mapping of keys, got None"),
        (["kind=cpu"], "--set: kind: cannot be overridden"),
        (["schema_version=2"], "--set: schema_version: cannot be overridden"),
        (["gpu.num_sms"], "--set: gpu.num_sms: expected KEY.PATH=VALUE"),
        (["=5"], "--set: =5: empty key path"),
        (["gpu..num_sms=5"], "--set: gpu..num_sms: empty key path"),
        (["gpu.num_sms.x=5"], "--set: gpu.num_sms: is a value, not a section"),
        (["gpu.clocks={sm_clock_hz: 1 GHz}"], "--set: gpu.clocks: value must be a single number, quantity or word"),
        # a cross-field contradiction the --set value causes is reported against --set
        (["gpu.clocks.tensor_clock_hz=2.5 GHz"], "--set: gpu.clocks.tensor_clock_hz: tensor clock (2.5 GHz) is above"),
        (["gpu.clocks.sm_clock_hz=1.5 GHz"],
         "--set: gpu.clocks.tensor_clock_hz: tensor clock (1.83 GHz) is above the maximum SM clock "
         "sm_clock_hz (1.5 GHz)"),
        (["gpu.dram.capacity_bytes=40 MiB"], "--set: gpu.l2: L2 capacity is not below DRAM capacity"),
        (["gpu.clocks.sustained_tensor_clock_hz=1.9 GHz"],
         "--set: gpu.clocks.sustained_tensor_clock_hz: sustained tensor clock (1.9 GHz) is above the rated "
         "tensor_clock_hz (1.83 GHz)"),
    ],
)
def test_set_errors_are_reported_against_set(items, message):
    with pytest.raises(ConfigError) as info:
        load_hardware("h100_sxm5_80gb", items)
    assert str(info.value).startswith(message), str(info.value)
    assert info.value.source == "--set"


def test_a_bad_file_is_still_blamed_on_the_file_when_set_is_fine(tmp_path):
    child = write(tmp_path / "bad.yaml", "extends: h100_sxm5_80gb\ngpu:\n  num_sms: 0\n")
    with pytest.raises(ConfigError) as info:
        load_hardware(child, ["gpu.dram.latency_s=300 ns"])
    assert str(info.value) == f"{child}: gpu.num_sms: input should be greater than or equal to 1 (got 0)"


def test_cli_set_error_is_one_line(capsys):
    code = main(["hw", "show", "h100_sxm5_80gb", "--set", "gpu.dram.bandwith_bytes_per_s=4.8TB/s"])
    assert code == 2
    assert capsys.readouterr().err == (
        "gpusim: --set: gpu.dram.bandwith_bytes_per_s: unknown key; did you mean bandwidth_bytes_per_s?\n")


def test_cli_set_kind_refused(capsys):
    assert main(["hw", "show", "h100_sxm5_80gb", "--set", "kind=cpu"]) == 2
    assert capsys.readouterr().err == "gpusim: --set: kind: cannot be overridden\n"


# ------------------------------------------------------------------------------------ hw show --json


def show_json(capsys, *args: str) -> dict:
    assert main(["hw", "show", *args, "--json"]) == 0
    out = capsys.readouterr().out
    info = json.loads(out)  # one JSON document, nothing else on stdout
    assert isinstance(info, dict)
    return info


def test_hw_show_json(capsys):
    info = show_json(capsys, "h100_sxm5_80gb")
    for key in ("name", "kind", "num_sms", "num_fp32_lanes", "peak_flop_per_s", "dram_bandwidth_bytes_per_s",
                "dram_capacity_bytes", "l2_capacity_bytes", "ridge_point_flop_per_byte"):
        assert key in info
    assert info["name"] == "h100_sxm5_80gb"
    assert info["kind"] == "gpu"
    assert info["num_sms"] == 132
    assert info["num_fp32_lanes"] == 132 * 128
    assert info["dram_bandwidth_bytes_per_s"] == H100_DRAM_BYTES_PER_S
    assert info["dram_capacity_bytes"] == 80 * 2**30
    assert info["l2_capacity_bytes"] == 50 * 2**20
    peak_bf16 = info["peak_flop_per_s"]["bf16"]
    assert peak_bf16 == pytest.approx(H100_BF16_FLOP_PER_S, rel=1e-12)  # 989.4 TFLOP/s
    assert info["ridge_point_flop_per_byte"]["bf16"] == pytest.approx(peak_bf16 / info["dram_bandwidth_bytes_per_s"])
    assert info["ridge_point_flop_per_byte"]["bf16"] == pytest.approx(295.35, abs=0.01)
    assert info["peak_flop_per_s"]["fp32"] == pytest.approx(132 * 256 * 1.98e9)


def test_hw_show_json_with_set(capsys):
    info = show_json(capsys, "h100_sxm5_80gb", "--set", "gpu.dram.bandwidth_bytes_per_s=4.8TB/s",
                     "--set", "gpu.num_sms=144")
    assert info["dram_bandwidth_bytes_per_s"] == 4.8e12
    assert info["num_sms"] == 144
    assert info["peak_flop_per_s"]["bf16"] == pytest.approx(144 * 4096 * 1.83e9)
    assert info["ridge_point_flop_per_byte"]["bf16"] == pytest.approx(144 * 4096 * 1.83e9 / 4.8e12)


def test_hw_show_json_of_an_overlay_file(capsys, tmp_path):
    child = write(tmp_path / "h100_no_nvlink.yaml", "extends: h100_sxm5_80gb\nname: h100_no_nvlink\ngpu:\n  peer_links: null\n")
    info = show_json(capsys, str(child))
    assert info["name"] == "h100_no_nvlink"
    assert "peer_bandwidth_bytes_per_s" not in info
    assert info["spec"]["gpu"]["peer_links"] is None


def test_hw_list_takes_the_kind_through_extends(capsys):
    # dgx_a100_320gb writes no kind of its own: it extends dgx_a100, a system
    assert main(["hw", "list"]) == 0
    rows = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()}
    assert rows["dgx_a100_320gb"] == rows["dgx_a100"] == "system"
    assert rows["h100_sxm5_80gb"] == "gpu" and rows["xeon_8480"] == "cpu"
    assert "?" not in rows.values()


def _leaf_paths(data, prefix=""):
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and key != "sources":
            yield path
            yield from _leaf_paths(value, path + ".")
        else:
            yield path


@pytest.mark.parametrize("name, kind", [("h100_sxm5_80gb", "gpu"), ("xeon_8480", "cpu"), ("dgx_h100", "system")])
def test_hw_keys_lists_every_key_a_built_in_description_uses(name, kind):
    from gpusim.config.library import builtin_files, read_description
    from gpusim.config.reference import key_rows

    rows = {r.path: r for r in key_rows(kind)}
    data = read_description(builtin_files("hwconfigs")[name])
    if kind == "system":
        data = {k: v for k, v in data.items() if k not in ("gpu", "host_cpu")}  # references by name
    used = set(_leaf_paths(data))
    assert used <= set(rows), sorted(used - set(rows))
    # a required key is present wherever the mapping that holds it is
    for path, row in rows.items():
        parent = path.rpartition(".")[0]
        if kind == "system" and path.split(".")[0] in ("gpu", "host_cpu"):
            continue  # the system names its GPU and CPU descriptions
        if row.required and (not parent or parent in used):
            assert path in used, path


def test_hw_keys_names_units_defaults_and_meanings(capsys):
    assert main(["hw", "keys"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "bytes/s (a number with a unit, e.g. 3.35 TB/s); required" in lines["gpu.dram.bandwidth_bytes_per_s"]
    assert "Hz (a number with a unit, e.g. 1.98 GHz); optional. Where it was measured" in \
        lines["gpu.clocks.sustained_tensor_clock_hz"]
    assert "bytes per cycle; required" in lines["gpu.l1.bandwidth_bytes_per_cycle_per_sm"]
    assert "bytes (a number with a unit, e.g. 80 GiB); required" in lines["gpu.sm.max_shared_bytes_per_cta"]
    assert "whole number; default 16. Ways per set" in lines["gpu.l2.set_associativity"]
    assert "FLOP per cycle; optional" in lines["gpu.sm.vector_flop_per_cycle.bf16"]
    assert "one of HBM2," in lines["gpu.dram.type"] and "HBM4" in lines["gpu.dram.type"]
    assert main(["hw", "keys", "--kind", "system", "--json"]) == 0
    keys = {row["key"]: row for row in json.loads(capsys.readouterr().out)}
    assert keys["intra_node.topology"]["value"] == "one of nvswitch, full_mesh, ring, pcie_switch"
    assert keys["num_nodes"] == {"key": "num_nodes", "value": "whole number", "required": False, "default": 1,
                                 "doc": ""}
