"""The built-in hardware library: datasheet numbers, citations, round trips, systems and hypotheticals.

Expected values are the vendor figures of the published-measurements tables (datasheet peaks in
TFLOP/s, bandwidths, counts), so each assertion can be checked against a datasheet by hand.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

import pytest

from gpusim.config import load_hardware
from gpusim.config.derived import (matrix_peak_flop_per_s, num_fp32_lanes, peak_flop_per_s, summary,
                                   vector_peak_flop_per_s)
from gpusim.config.hardware import CpuDescription, GpuDescription, SystemDescription
from gpusim.config.library import builtin_dir, builtin_files
from gpusim.config.loader import read_yaml

T = 1e12
GiB = 2**30
MiB = 2**20

REAL_GPUS = [
    "v100_sxm2_32gb", "a100_sxm4_40gb", "a100_sxm4_80gb", "a100_pcie_40gb", "h100_sxm5_80gb", "h100_pcie_80gb",
    "h200_sxm_141gb", "mi300x", "rtx_4090", "rtx_3090", "jetson_agx_orin",
    "l40", "mi210", "mi100", "b200", "gh200_144gb", "mi325x",
]
REAL_CPUS = ["xeon_8480"]
SYSTEMS = ["dgx_a100", "dgx_h100", "hgx_h200", "mi300x_x8", "hgx_b200"]
HYPOTHETICAL = ["h100_h200_memory", "h100_2x_l2", "tiny_gpu_4sm", "tpu_like_systolic"]
ALL_BUILTINS = REAL_GPUS + REAL_CPUS + SYSTEMS + HYPOTHETICAL


def close(actual: float | None, expected: float, rel: float) -> bool:
    return actual is not None and abs(actual - expected) <= rel * expected


# ------------------------------------------------------------------------------ every file


def test_every_expected_builtin_exists():
    files = builtin_files("hwconfigs")
    missing = [n for n in ALL_BUILTINS if n not in files]
    assert not missing
    for name in HYPOTHETICAL:
        assert files[name].parent.name == "hypothetical"


@pytest.mark.parametrize("name", sorted(builtin_files("hwconfigs")))
def test_builtin_loads_and_round_trips(name):
    desc = load_hardware(name)
    assert desc.name == name  # the name users type is the file stem
    dumped = desc.model_dump(mode="json")
    again = type(desc).model_validate(dumped)
    assert again == desc


# ------------------------------------------------------------------------------ citations


_NUMBER_START = re.compile(r"^\s*[-+]?(\d|\.\d)")
_NOT_SPEC = {"schema_version", "kind", "name", "description", "sources", "extends"}


def numeric_leaves(node: Any, prefix: str = "") -> Iterator[str]:
    """Key paths of every number, or quantity string such as '3.35 TB/s', in a raw YAML mapping."""
    for key, value in node.items():
        path = f"{prefix}{key}"
        if not prefix and key in _NOT_SPEC:
            continue
        if isinstance(value, dict):
            yield from numeric_leaves(value, path + ".")
        elif isinstance(value, bool):
            continue
        elif isinstance(value, (int, float)) or (isinstance(value, str) and _NUMBER_START.match(value)):
            yield path


def uncited(raw: dict[str, Any]) -> list[str]:
    """Numeric leaves with no ``sources`` entry at their key path or at an ancestor of it.

    A ``calibration:`` block cites its own data in its required ``source`` field."""
    cited = set((raw.get("sources") or {}).keys())
    body = raw.get("gpu") or raw.get("cpu")
    calibration = body.get("calibration") if isinstance(body, dict) else None
    if isinstance(calibration, dict) and calibration.get("source"):
        cited |= {"gpu.calibration", "cpu.calibration"}
    out = []
    for path in numeric_leaves(raw):
        parts = path.split(".")
        if not any(".".join(parts[:i]) in cited for i in range(1, len(parts) + 1)):
            out.append(path)
    return out


def test_uncited_helper_finds_a_missing_citation():
    raw = {
        "schema_version": 1, "name": "x",
        "gpu": {"num_sms": 4, "clocks": {"sm_clock_hz": "1 GHz"}, "dram": {"type": "HBM3", "latency_s": "300 ns"},
                "tensor_core": {"enabled": True}},
        "sources": {"gpu.clocks": "cited"},
    }
    assert uncited(raw) == ["gpu.num_sms", "gpu.dram.latency_s"]
    raw["sources"]["gpu"] = "everything"
    assert uncited(raw) == []


@pytest.mark.parametrize("name", sorted(builtin_files("hwconfigs")))
def test_every_number_is_cited(name):
    raw = read_yaml(builtin_files("hwconfigs")[name])
    assert uncited(raw) == []
    assert all(isinstance(text, str) and len(text) > 20 for text in raw["sources"].values())


@pytest.mark.parametrize("name", REAL_GPUS + REAL_CPUS)
def test_energy_estimates_say_they_are_estimates(name):
    raw = read_yaml(builtin_files("hwconfigs")[name])
    body = "gpu" if raw["kind"] == "gpu" else "cpu"
    assert "ESTIMATE" in raw["sources"][f"{body}.power"].upper()


# ------------------------------------------------------------------------------ datasheet peaks

# published-measurements section 1b (dense TFLOP/s; INT8 in TOPS). None = the product has no such
# pipe. Keys: vector pipes (fp64_vec, fp32_vec) and tensor pipes (the rest).
SECTION_1B: dict[str, dict[str, float | None]] = {
    "v100_sxm2_32gb": dict(fp64_vec=7.8, fp64_tc=None, fp32_vec=15.7, tf32=None, fp16=125, bf16=None, fp8=None, int8=None),
    "a100_sxm4_40gb": dict(fp64_vec=9.7, fp64_tc=19.5, fp32_vec=19.5, tf32=156, fp16=312, bf16=312, fp8=None, int8=624),
    "a100_sxm4_80gb": dict(fp64_vec=9.7, fp64_tc=19.5, fp32_vec=19.5, tf32=156, fp16=312, bf16=312, fp8=None, int8=624),
    "a100_pcie_40gb": dict(fp64_vec=9.7, fp64_tc=19.5, fp32_vec=19.5, tf32=156, fp16=312, bf16=312, fp8=None, int8=624),
    "h100_sxm5_80gb": dict(fp64_vec=33.5, fp64_tc=66.9, fp32_vec=66.9, tf32=494.7, fp16=989.4, bf16=989.4, fp8=1978.9,
                           int8=1978.9),
    "h100_pcie_80gb": dict(fp64_vec=25.6, fp64_tc=51, fp32_vec=51.2, tf32=378, fp16=756, bf16=756, fp8=1513, int8=1513),
    "h200_sxm_141gb": dict(fp64_vec=33.5, fp64_tc=66.9, fp32_vec=66.9, tf32=494.7, fp16=989.4, bf16=989.4, fp8=1978.9,
                           int8=1978.9),
    "mi300x": dict(fp64_vec=81.7, fp64_tc=163.4, fp32_vec=163.4, tf32=653.7, fp16=1307.4, bf16=1307.4, fp8=2614.9,
                   int8=2614.9),
    "rtx_4090": dict(fp64_vec=1.3, fp64_tc=None, fp32_vec=82.6, tf32=82.6, fp16=330.3, bf16=165.2, fp8=660.6, int8=660.6),
    "rtx_3090": dict(fp64_vec=0.56, fp64_tc=None, fp32_vec=35.6, tf32=35.6, fp16=142, bf16=71, fp8=None, int8=284),
}

# Hopper rates FP64 tensor math at the 1.98 / 1.755 GHz SM clock but every other tensor peak at the
# lower tensor clock; the schema has one tensor clock, so gpusim's FP64 tensor peak is 256 FLOP/cycle/SM
# at the tensor clock (stated in the files' sources). It must sit exactly there, 7-8 % under the spec.
HOPPER_FP64_TENSOR = {"h100_sxm5_80gb", "h100_pcie_80gb", "h200_sxm_141gb"}


def _device(name):
    return load_hardware(name).gpu


@pytest.mark.parametrize("name", sorted(SECTION_1B))
def test_section_1b_peaks_within_1_percent(name):
    gpu = _device(name)
    spec = SECTION_1B[name]
    assert close(vector_peak_flop_per_s(gpu, "fp64"), spec["fp64_vec"] * T, 0.01)
    assert close(vector_peak_flop_per_s(gpu, "fp32"), spec["fp32_vec"] * T, 0.01)
    for column, dtype in (("tf32", "tf32"), ("fp16", "fp16"), ("bf16", "bf16"), ("fp8", "fp8"), ("int8", "int8")):
        expected = spec[column]
        actual = matrix_peak_flop_per_s(gpu, dtype)
        if expected is None:
            assert actual is None, f"{name} has no {dtype} tensor rate"
        else:
            assert close(actual, expected * T, 0.01), (dtype, actual, expected)
    fp64_tc = matrix_peak_flop_per_s(gpu, "fp64")
    if spec["fp64_tc"] is None:
        assert fp64_tc is None
    elif name in HOPPER_FP64_TENSOR:
        assert fp64_tc == pytest.approx(256 * gpu.num_sms * gpu.clocks.tensor_clock_hz)
        assert 0.92 * spec["fp64_tc"] * T < fp64_tc < spec["fp64_tc"] * T
    else:
        assert close(fp64_tc, spec["fp64_tc"] * T, 0.01)
    # The best pipe per dtype: the tensor pipe wherever the product has one.
    for dtype in ("tf32", "fp16", "bf16", "fp8", "int8"):
        if spec[dtype] is not None:
            assert close(peak_flop_per_s(gpu, dtype), spec[dtype] * T, 0.01)


# Vendor datasheets of the GPUs described beyond published-measurements section 1b (dense TFLOP/s, INT8
# TOPS, DRAM TB/s), as each file's sources cite them: NVIDIA L40 datasheet; AMD Instinct MI210 and MI100
# product pages / datasheets; NVIDIA HGX and DGX B200 pages (dense = half the sparse figures printed);
# GH200 (the H100's GH100 die with HBM3e); AMD Instinct MI325X product page.
DATASHEETS: dict[str, dict[str, float | None]] = {
    "l40": dict(fp32_vec=90.5, tf32=90.5, bf16=181.05, fp8=362, int8=362, dram=0.864),
    "mi210": dict(fp32_vec=22.6, tf32=None, bf16=181.0, fp8=None, int8=181.0, dram=1.6384),
    "mi100": dict(fp32_vec=23.1, tf32=None, bf16=92.3, fp8=None, int8=184.6, dram=1.2288),
    "b200": dict(fp32_vec=75, tf32=1125, bf16=2250, fp8=4500, int8=4500, dram=8.0),
    "gh200_144gb": dict(fp32_vec=66.9, tf32=494.7, bf16=989.4, fp8=1978.9, int8=1978.9, dram=4.9),
    "mi325x": dict(fp32_vec=163.4, tf32=653.7, bf16=1307.4, fp8=2614.9, int8=2614.9, dram=6.0),
}


@pytest.mark.parametrize("name", sorted(DATASHEETS))
def test_datasheet_peaks_within_1_percent(name):
    gpu = _device(name)
    spec = DATASHEETS[name]
    assert close(vector_peak_flop_per_s(gpu, "fp32"), spec["fp32_vec"] * T, 0.01)
    for dtype in ("tf32", "bf16", "fp8", "int8"):
        if spec[dtype] is None:
            assert matrix_peak_flop_per_s(gpu, dtype) is None, f"{name} has no {dtype} tensor rate"
        else:
            assert close(matrix_peak_flop_per_s(gpu, dtype), spec[dtype] * T, 0.01), dtype
    assert close(gpu.dram.bandwidth_bytes_per_s, spec["dram"] * T, 0.01)


def test_v100_has_only_fp16_tensor_math():
    tc = _device("v100_sxm2_32gb").tensor_core
    assert tc.dense_flop_per_cycle_per_sm.supported() == ("fp16",)
    assert tc.sparsity_speedup == 1.0


# ------------------------------------------------------------------------------ pinned products


def test_h100_sxm5():
    gpu = _device("h100_sxm5_80gb")
    assert gpu.num_sms == 132
    assert num_fp32_lanes(gpu) == 16_896
    assert close(matrix_peak_flop_per_s(gpu, "bf16"), 989.4 * T, 0.001)
    assert close(peak_flop_per_s(gpu, "fp32"), 66.9 * T, 0.001)
    assert gpu.dram.bandwidth_bytes_per_s == pytest.approx(3.35e12)


def test_a100_sxm4_80gb():
    gpu = _device("a100_sxm4_80gb")
    assert close(peak_flop_per_s(gpu, "fp16"), 312 * T, 0.005)
    assert close(peak_flop_per_s(gpu, "fp32"), 19.5 * T, 0.005)
    assert gpu.dram.capacity_bytes == 80 * GiB


def test_mi300x():
    gpu = _device("mi300x")
    assert num_fp32_lanes(gpu) == 19_456  # AMD's stream-processor count
    # AMD's "192 GB" is 8 stacks x 24 GiB; rocm-smi reports 206,141,652,992 bytes (the file's sources).
    assert gpu.dram.capacity_bytes == 192 * GiB
    assert gpu.dram.capacity_bytes > 206_141_652_992
    assert close(peak_flop_per_s(gpu, "bf16"), 1307.4 * T, 0.001)
    assert gpu.llc is not None and gpu.llc.capacity_bytes == 256 * MiB
    assert gpu.peer_links.num_links * gpu.peer_links.link_bandwidth_bytes_per_s == pytest.approx(448e9)


@pytest.mark.parametrize("name, fp16_acc, fp32_acc", [("rtx_4090", 330.3, 165.2), ("rtx_3090", 142, 71)])
def test_geforce_fp16_rate_halves_with_fp32_accumulation(name, fp16_acc, fp32_acc):
    gpu = _device(name)
    assert close(peak_flop_per_s(gpu, "fp16"), fp16_acc * T, 0.005)
    assert close(matrix_peak_flop_per_s(gpu, "fp16", fp32_accumulate=True), fp32_acc * T, 0.005)
    # BF16 always accumulates in FP32: no separate slower rate, and the same ceiling.
    assert matrix_peak_flop_per_s(gpu, "bf16", fp32_accumulate=True) == matrix_peak_flop_per_s(gpu, "bf16")
    assert close(matrix_peak_flop_per_s(gpu, "bf16"), fp32_acc * T, 0.005)


def test_datacenter_parts_have_no_slower_fp32_accumulation():
    for name in ("a100_sxm4_80gb", "h100_sxm5_80gb", "mi300x"):
        gpu = _device(name)
        assert matrix_peak_flop_per_s(gpu, "fp16", fp32_accumulate=True) == matrix_peak_flop_per_s(gpu, "fp16")


def test_xeon_8480():
    desc = load_hardware("xeon_8480")
    assert isinstance(desc, CpuDescription)
    cpu = desc.cpu
    assert cpu.num_cores == 56
    assert peak_flop_per_s(cpu, "fp32") == pytest.approx(56 * 64 * cpu.clocks.core_clock_hz)
    assert cpu.dram.bandwidth_bytes_per_s == pytest.approx(307.2e9)
    assert cpu.dram.bandwidth_bytes_per_s == pytest.approx(cpu.dram.num_channels * 4800e6 * 8)  # DDR5-4800
    assert matrix_peak_flop_per_s(cpu, "bf16") == pytest.approx(56 * 1024 * cpu.clocks.core_clock_hz)
    assert matrix_peak_flop_per_s(cpu, "int8") == pytest.approx(56 * 2048 * cpu.clocks.core_clock_hz)
    assert cpu.llc.capacity_bytes == 105 * MiB
    assert cpu.l2.capacity_bytes == 2 * MiB and cpu.l1.capacity_bytes == 48 * 1024
    assert cpu.power.tdp_w == 350


def test_jetson_shares_its_dram_with_the_cpu():
    gpu = _device("jetson_agx_orin")
    assert gpu.host_link.type == "on_chip"
    assert gpu.dram.type == "LPDDR5"
    assert gpu.host_link.host_memory_bytes == gpu.dram.capacity_bytes
    assert gpu.host_link.bandwidth_bytes_per_s == gpu.dram.bandwidth_bytes_per_s
    assert gpu.peer_links is None
    # NVIDIA's "170 sparse INT8 TOPS" for the GPU.
    assert close(matrix_peak_flop_per_s(gpu, "int8") * gpu.tensor_core.sparsity_speedup, 170e12, 0.01)


# ------------------------------------------------------------------------------ systems


def test_dgx_h100_scales_to_1024_gpus():
    desc = load_hardware("dgx_h100", ["num_nodes=128"])
    assert isinstance(desc, SystemDescription)
    assert desc.num_gpus == 1024
    assert load_hardware("dgx_h100").num_gpus == 8


@pytest.mark.parametrize("system, gpu, reduction, topology, nic_bytes_per_s", [
    ("dgx_a100", "a100_sxm4_80gb", False, "nvswitch", 25e9),
    ("dgx_h100", "h100_sxm5_80gb", True, "nvswitch", 50e9),
    ("hgx_h200", "h200_sxm_141gb", True, "nvswitch", 50e9),
    ("mi300x_x8", "mi300x", False, "full_mesh", 50e9),
])
def test_systems_embed_their_builtin_parts(system, gpu, reduction, topology, nic_bytes_per_s):
    desc = load_hardware(system)
    assert desc.gpu == load_hardware(gpu).gpu
    assert desc.host_cpu == load_hardware("xeon_8480").cpu
    assert desc.num_gpus_per_node == 8 and desc.num_cpus_per_node == 2 and desc.num_nodes == 1
    assert desc.intra_node.topology == topology
    assert desc.intra_node.in_switch_reduction is reduction
    assert desc.inter_node.num_nics_per_node == 8
    assert desc.inter_node.nic_bandwidth_bytes_per_s == pytest.approx(nic_bytes_per_s)
    assert desc.inter_node.oversubscription == 1.0
    # The embedded GPU's citations come along under gpu.*.
    assert any(key.startswith("gpu.") for key in desc.sources)


# ------------------------------------------------------------------------------ hypotheticals


def leaf_diff(a: Any, b: Any, prefix: str = "") -> set[str]:
    """Dotted paths of the leaves where two model dumps differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: set[str] = set()
        for key in set(a) | set(b):
            out |= leaf_diff(a.get(key), b.get(key), f"{prefix}{key}.")
        return out
    return set() if a == b else {prefix.rstrip(".")}


def _gpu_dump(name):
    return load_hardware(name).gpu.model_dump(mode="json")


def test_h100_h200_memory_changes_only_the_memory():
    parent, child, h200 = _gpu_dump("h100_sxm5_80gb"), _gpu_dump("h100_h200_memory"), _gpu_dump("h200_sxm_141gb")
    assert leaf_diff(parent, child) == {"dram.type", "dram.capacity_bytes", "dram.bandwidth_bytes_per_s",
                                        "dram.bus_width_bits"}
    for key in ("type", "capacity_bytes", "bandwidth_bytes_per_s", "bus_width_bits"):
        assert child["dram"][key] == h200["dram"][key]
    assert child["num_sms"] == parent["num_sms"] == 132
    assert child["dram"]["bandwidth_bytes_per_s"] == pytest.approx(4.8e12)


def test_h100_2x_l2_changes_only_the_l2_capacity():
    parent, child = _gpu_dump("h100_sxm5_80gb"), _gpu_dump("h100_2x_l2")
    assert leaf_diff(parent, child) == {"l2.capacity_bytes"}
    assert child["l2"]["capacity_bytes"] == 2 * parent["l2"]["capacity_bytes"] == 100 * MiB


def test_h200_is_h100_with_different_memory():
    """The real H200 differs from the H100 SXM5 only in its memory system: HBM3e (and its energy per
    byte), and the L2 size and the L2 and DRAM latencies measured on an H200
    (measurements/h200_sxm_141gb); its calibration takes the H100's fitted compute factors and adds
    its own host-link and memory fits (from gpu-benches' H200 STREAM and L2 results)."""
    h100, h200 = _gpu_dump("h100_sxm5_80gb"), _gpu_dump("h200_sxm_141gb")
    cal100, cal200 = h100.pop("calibration"), h200.pop("calibration")
    h100.pop("price_usd_per_s"), h200.pop("price_usd_per_s")  # a rental price, not hardware
    assert leaf_diff(h100, h200) == {
        "dram.type", "dram.capacity_bytes", "dram.bandwidth_bytes_per_s", "dram.bus_width_bits",
        "dram.latency_s", "l2.capacity_bytes", "l2.near_latency_s", "l2.far_latency_s",
        "power.energy.dram_j_per_byte"}
    assert h200["l2"]["capacity_bytes"] == 60 * MiB and h100["l2"]["capacity_bytes"] == 50 * MiB
    assert h200["dram"]["latency_s"] > h100["dram"]["latency_s"]
    for factor in ("tensor_efficiency_fraction", "vector_efficiency_fraction"):
        assert cal200[factor] == cal100[factor]
    assert cal200["cta_turnaround_cycles"] > 0 and cal200["dram_mixed_traffic_loss_fraction"] > 0


@pytest.mark.parametrize("name", HYPOTHETICAL)
def test_hypotheticals_say_so(name):
    desc = load_hardware(name)
    assert "hypothetical" in desc.description.lower()
    raw = read_yaml(builtin_files("hwconfigs")[name])
    own_sources = " ".join(raw["sources"].values()).lower()
    assert "hypothetical" in own_sources or "changed" in own_sources


def test_tiny_gpu_numbers_are_hand_derivable():
    gpu = _device("tiny_gpu_4sm")
    assert gpu.num_sms == 4
    assert gpu.clocks.sm_clock_hz == gpu.clocks.tensor_clock_hz == 1e9
    assert num_fp32_lanes(gpu) == 256
    assert peak_flop_per_s(gpu, "fp32") == 512e9  # 4 x 64 lanes x 2 FLOP x 1 GHz
    assert peak_flop_per_s(gpu, "fp16") == 4.096e12  # 4 x 1024 x 1 GHz
    assert gpu.l2.capacity_bytes == MiB
    assert gpu.dram.capacity_bytes == GiB
    assert gpu.dram.bandwidth_bytes_per_s == 100e9


def test_tpu_like_is_matrix_heavy():
    gpu = _device("tpu_like_systolic")
    assert close(peak_flop_per_s(gpu, "bf16"), 275e12, 0.005)  # TPU v4 paper
    assert gpu.dram.capacity_bytes == 32 * GiB
    assert gpu.dram.bandwidth_bytes_per_s == pytest.approx(1.2e12)
    assert peak_flop_per_s(gpu, "bf16") / vector_peak_flop_per_s(gpu, "fp32") >= 50  # little vector math
    assert gpu.sm.max_shared_bytes >= 16 * MiB  # big on-chip scratchpad
    assert vector_peak_flop_per_s(gpu, "fp64") is None


# ------------------------------------------------------------------------------ library layout


def test_builtin_names_are_unique_across_folders():
    paths = sorted(builtin_dir("hwconfigs").rglob("*.yaml"))
    stems = [p.stem for p in paths]
    assert len(stems) == len(set(stems))


def test_descriptions_are_of_the_declared_kind():
    for name in REAL_GPUS + HYPOTHETICAL:
        assert isinstance(load_hardware(name), GpuDescription)
    for name in SYSTEMS:
        assert isinstance(load_hardware(name), SystemDescription)


def test_the_l1_is_the_pool_minus_the_shared_memory_carve_out():
    from gpusim.engine.machine import machine_of
    # MI300X: a fixed 64 KiB LDS beside the 32 KiB vector L1 (ROCm GPU-spec table) in a 96 KiB pool
    assert machine_of(load_hardware("mi300x")).l1_capacity_bytes == 32 * 1024
    # H100: the driver picks the carve-out per kernel; a kernel without shared memory gets the smallest, 8 KiB
    assert machine_of(load_hardware("h100_sxm5_80gb")).l1_capacity_bytes == (256 - 8) * 1024


def _extending_gpus_with_their_own_clock() -> list[tuple[str, str]]:
    pairs = []
    for stem, path in builtin_files("hwconfigs").items():
        parent = read_yaml(path).get("extends")
        if parent and read_yaml(path).get("kind") == "gpu":
            child_desc, parent_desc = load_hardware(stem), load_hardware(str(parent))
            if child_desc.gpu.clocks.sm_clock_hz != parent_desc.gpu.clocks.sm_clock_hz:
                pairs.append((stem, str(parent)))
    return pairs


CLOCKED_CHILDREN = _extending_gpus_with_their_own_clock()


def test_the_parts_clocked_differently_from_their_parents_are_found():
    assert {stem for stem, _ in CLOCKED_CHILDREN} >= {"v100_pcie_32gb", "h100_nvl_94gb"}


@pytest.mark.parametrize("stem, parent", CLOCKED_CHILDREN)
def test_a_part_clocked_differently_from_its_parent_keeps_the_on_chip_latencies_in_cycles(stem, parent):
    # On-chip latency is a number of SM cycles: a part that extends another but runs its SMs at another
    # clock must not inherit nanoseconds converted at the parent's clock (V100 PCIe and H100 NVL did)
    child, base = load_hardware(stem).gpu, load_hardware(parent).gpu
    for latency in (lambda g: g.l1.latency_s, lambda g: g.l1.shared_latency_s,
                    lambda g: g.l2.near_latency_s, lambda g: g.l2.far_latency_s):
        cycles = latency(child) * child.clocks.sm_clock_hz
        assert cycles == pytest.approx(latency(base) * base.clocks.sm_clock_hz, rel=0.01), stem


def test_the_matrix_pipes_run_at_the_measured_sustained_clock_where_one_is_given():
    # AMD measured the median clock of its best-case BF16 GEMM: 1,207 MHz on the 750 W MI300X, 1,447 MHz
    # on the 1000 W MI325X (same dies). The datasheet peak stays at the 2.1 GHz rated clock; the
    # simulated matrix rate, with the inherited tensor efficiency, scales by 1447 / 1207.
    from gpusim.engine.machine import machine_of

    mi300x, mi325x = load_hardware("mi300x").gpu, load_hardware("mi325x").gpu
    assert matrix_peak_flop_per_s(mi300x, "bf16") == matrix_peak_flop_per_s(mi325x, "bf16") \
        == pytest.approx(304 * 2048 * 2.1e9)
    m300, m325 = machine_of(load_hardware("mi300x")), machine_of(load_hardware("mi325x"))
    efficiency = m300.calibration.tensor_efficiency_fraction
    assert m325.calibration.tensor_efficiency_fraction == efficiency
    assert m300.matrix_rate_per_unit("bf16") == pytest.approx(2048 * 1.207e9 * efficiency)
    assert m325.matrix_rate_per_unit("bf16") / m300.matrix_rate_per_unit("bf16") == pytest.approx(1447 / 1207)
    # without a measured clock the pipes run at the rated tensor clock
    h100 = machine_of(load_hardware("h100_sxm5_80gb"))
    assert h100.matrix_clock_hz == load_hardware("h100_sxm5_80gb").gpu.clocks.tensor_clock_hz == 1.83e9
    # `gpusim hw show` lists the measured clock, and only where there is one
    assert summary(load_hardware("mi325x"))["sustained_tensor_clock_hz"] == pytest.approx(1.447e9)
    assert "sustained_tensor_clock_hz" not in summary(load_hardware("h100_sxm5_80gb"))
