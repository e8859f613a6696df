"""Property tests of the hardware loader.

(a) Random valid H100 variants (numbers replaced inside their valid ranges, keeping the cross-field
    rules, written as SI numbers or as unit strings) load, and every value comes back in SI units.
(b) Random corruptions of the H100 description either still validate or fail with a one-line
    ConfigError that names the file and a key path related to the corruption; never another exception.

Each example is written to a YAML file and loaded with ``load_hardware``, so reading, source
checks and validation are all exercised.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpusim.config import load_hardware, summary
from gpusim.config.loader import read_yaml
from gpusim.errors import ConfigError

H100 = Path(__file__).resolve().parent.parent / "hwconfigs" / "h100_sxm5_80gb.yaml"
RAW = read_yaml(H100)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

BYTE_UNITS = [("B", 1), ("KB", 10**3), ("KiB", 2**10), ("MB", 10**6), ("MiB", 2**20), ("GB", 10**9),
              ("GiB", 2**30), ("TB", 10**12), ("TiB", 2**40), ("kb", 125), ("Mb", 125_000), ("Gb", 125_000_000)]


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory) -> Path:
    """Where each example is written (module scope: hypothesis reruns the test body many times)."""
    return tmp_path_factory.mktemp("hw_properties") / "spec.yaml"


def write_and_load(data: dict[str, Any], path: Path):
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return load_hardware(path)


# --------------------------------------------------------------------------- (a) valid variants


@st.composite
def byte_text(draw, value: int) -> Any:
    """An exact spelling of a whole number of bytes: a plain integer or ``<n> <unit>``."""
    units = [(u, s) for u, s in BYTE_UNITS if value % s == 0]
    choice = draw(st.sampled_from([None, *units]))
    if choice is None:
        return value
    unit, scale = choice
    return f"{value // scale} {unit}"


@st.composite
def scaled_text(draw, value: int, base: str, unit_scales: list[tuple[str, int]], si_scale: float) -> Any:
    """``value`` whole units of ``base`` (e.g. MHz) written in ``base``, in a coarser unit, or as an SI number."""
    options: list[Any] = [f"{value} {base}", value * si_scale]
    options += [f"{value // s} {u}" for u, s in unit_scales if value % s == 0]
    return draw(st.sampled_from(options))


@st.composite
def valid_variant(draw):
    """(raw dict, expected SI values by key path)."""
    data = copy.deepcopy(RAW)
    expected: dict[str, float] = {}

    def put(path: str, text: Any, si: float) -> None:
        node = data
        *parents, last = path.split(".")
        for part in parents:
            node = node[part]
        node[last] = text
        expected[path] = si

    num_sms = draw(st.integers(1, 1000))
    put("gpu.num_sms", num_sms, num_sms)

    sm_mhz = draw(st.integers(500, 3000))
    tensor_mhz = draw(st.integers(1, sm_mhz))
    ghz = [("GHz", 1000)]
    put("gpu.clocks.sm_clock_hz", draw(scaled_text(sm_mhz, "MHz", ghz, 1e6)), sm_mhz * 1e6)
    put("gpu.clocks.tensor_clock_hz", draw(scaled_text(tensor_mhz, "MHz", ghz, 1e6)), tensor_mhz * 1e6)

    for key in ("gpu.dram.bandwidth_bytes_per_s", "gpu.l2.bandwidth_bytes_per_s",
                "gpu.host_link.bandwidth_bytes_per_s", "gpu.peer_links.link_bandwidth_bytes_per_s"):
        mb_per_s = draw(st.integers(1, 10**8))  # 1 MB/s .. 100 TB/s
        text = draw(st.sampled_from([f"{mb_per_s} MB/s", mb_per_s * 10**6, f"{mb_per_s * 8} Mb/s"]
                                    + ([f"{mb_per_s // 10**6} TB/s"] if mb_per_s % 10**6 == 0 else [])))
        put(key, text, mb_per_s * 1e6)

    dram_gib = draw(st.integers(1, 1024))
    l2_bytes = draw(st.integers(1, min(dram_gib * 2**30 - 1, 2**30)))
    put("gpu.dram.capacity_bytes", draw(byte_text(dram_gib * 2**30)), dram_gib * 2**30)
    put("gpu.l2.capacity_bytes", draw(byte_text(l2_bytes)), l2_bytes)

    pool_kib = draw(st.integers(16, 1024))
    shared_kib = draw(st.integers(1, pool_kib))
    cta_kib = draw(st.integers(1, shared_kib))
    for key, kib in (("gpu.sm.l1_shared_pool_bytes", pool_kib), ("gpu.sm.max_shared_bytes", shared_kib),
                     ("gpu.sm.max_shared_bytes_per_cta", cta_kib)):
        put(key, draw(byte_text(kib * 1024)), kib * 1024)

    cta_threads = draw(st.integers(32, 1024))
    max_threads = draw(st.integers(cta_threads, 4096))
    max_warps = draw(st.integers(-(-max_threads // 32), 4096))
    put("gpu.sm.max_threads_per_cta", cta_threads, cta_threads)
    put("gpu.sm.max_threads", max_threads, max_threads)
    put("gpu.sm.max_warps", max_warps, max_warps)

    near_ns = draw(st.integers(1, 2000))
    far_ns = near_ns + draw(st.integers(0, 2000))
    put("gpu.l2.near_latency_s", draw(st.sampled_from([f"{near_ns} ns", near_ns * 1e-9])), near_ns * 1e-9)
    put("gpu.l2.far_latency_s", draw(st.sampled_from([f"{far_ns} ns", far_ns * 1e-9])), far_ns * 1e-9)
    dram_ps = draw(st.integers(1000, 10**6))
    put("gpu.dram.latency_s", draw(scaled_text(dram_ps, "ps", [("ns", 1000), ("us", 10**6)], 1e-12)),
        dram_ps * 1e-12)

    tdp = draw(st.integers(2, 100_000))
    idle = draw(st.integers(1, tdp - 1))
    put("gpu.power.tdp_w", draw(scaled_text(tdp, "W", [("kW", 1000)], 1.0)), tdp)
    put("gpu.power.idle_w", draw(scaled_text(idle, "W", [("kW", 1000)], 1.0)), idle)

    bf16_rate = draw(st.integers(1, 100_000))
    put("gpu.tensor_core.dense_flop_per_cycle_per_sm.bf16", bf16_rate, bf16_rate)
    fp32_rate = draw(st.integers(1, 100_000))
    put("gpu.sm.vector_flop_per_cycle.fp32", fp32_rate, fp32_rate)
    return data, expected


def get_path(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


@SETTINGS
@given(valid_variant())
def test_random_valid_specs_load_and_round_trip(spec_path, variant):
    data, expected = variant
    desc = write_and_load(data, spec_path)
    for path, si in expected.items():
        assert get_path(desc, path) == pytest.approx(si, rel=1e-12), path
    # the derived peak is the datasheet arithmetic on the values just written
    info = summary(desc)
    assert info["peak_flop_per_s"]["bf16"] == pytest.approx(
        max(expected["gpu.num_sms"] * expected["gpu.tensor_core.dense_flop_per_cycle_per_sm.bf16"]
            * expected["gpu.clocks.tensor_clock_hz"],
            expected["gpu.num_sms"] * 512 * expected["gpu.clocks.sm_clock_hz"]), rel=1e-12)
    assert info["ridge_point_flop_per_byte"]["bf16"] == pytest.approx(
        info["peak_flop_per_s"]["bf16"] / expected["gpu.dram.bandwidth_bytes_per_s"], rel=1e-12)


# --------------------------------------------------------------------------- (b) corruptions


def key_paths(node: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            out.append(prefix + (key,))
            out.extend(key_paths(value, prefix + (key,)))
    return out


PATHS = key_paths(RAW)

WRONG_UNIT_STRINGS = ["3 GHz", "80 GB", "600 ns", "700 W", "3.35 TB/s", "2 pJ/B", "1 GFLOP", "5 USD", "12 parsecs",
                      "1.5 GiHz", "3 TB/", "-4 GB", "1e400 B"]


@st.composite
def typo(draw, key: str) -> str:
    i = draw(st.integers(0, len(key)))
    kind = draw(st.sampled_from(["insert", "delete", "swap", "replace"]))
    letter = draw(st.sampled_from("abcdefghijklmnopqrstuvwxyz_"))
    if kind == "insert" or len(key) < 2:
        return key[:i] + letter + key[i:]
    i = min(i, len(key) - 2)
    if kind == "delete":
        return key[:i] + key[i + 1:]
    if kind == "swap":
        return key[:i] + key[i + 1] + key[i] + key[i + 2:]
    return key[:i] + letter + key[i + 1:]


CORRUPT_VALUES = st.one_of(
    st.text(max_size=12),
    st.sampled_from(WRONG_UNIT_STRINGS),
    st.floats(max_value=-1e-30, allow_nan=False, allow_infinity=False),
    st.integers(max_value=-1),
    st.sampled_from([0, 0.0, 1e30, 1e300, float("inf"), float("nan"), 0.5, 132.5]),
    st.lists(st.integers(0, 9), max_size=3),
    st.none(),
    st.booleans(),
    st.dictionaries(st.sampled_from(["a", "gpu", "num_sms"]), st.integers(0, 9), max_size=2),
)


@st.composite
def corruption(draw):
    data = copy.deepcopy(RAW)
    path = draw(st.sampled_from(PATHS))
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    how = draw(st.sampled_from(["delete", "rename", "value"]))
    renamed = path
    if how == "delete":
        del parent[path[-1]]
    elif how == "rename":
        value = parent.pop(path[-1])
        renamed = (*path[:-1], draw(typo(path[-1])))
        parent[renamed[-1]] = value
    else:
        parent[path[-1]] = draw(CORRUPT_VALUES)
    return data, (".".join(path), ".".join(renamed)), how


def related(error_path: str, corrupted: str | tuple[str, ...]) -> bool:
    """An error is about a corruption when its key path is the corrupted key, inside it, or near it:
    at most two levels up, where a cross-field rule compares it with a sibling (``gpu.l2`` for a
    corrupted ``gpu.dram.capacity_bytes``). A stale citation ``sources.<path>`` counts as ``<path>``.
    A rename counts under its old and its new (misspelled) name."""
    names = (corrupted,) if isinstance(corrupted, str) else corrupted
    for candidate in {error_path, error_path.removeprefix("sources.")}:
        for name in names:
            a, b = candidate.split("."), name.split(".")
            common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            if common >= max(1, len(b) - 2):
                return True
    return False


@SETTINGS
@given(corruption())
def test_random_corruptions_fail_cleanly(spec_path, case):
    data, corrupted, how = case
    try:
        write_and_load(data, spec_path)
    except ConfigError as exc:
        text = str(exc)
        assert "\n" not in text
        assert exc.source == str(spec_path)
        assert text.startswith(f"{spec_path}: ")
        assert exc.message
        assert related(exc.key_path, corrupted), (how, corrupted, text)


def split_path(path: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, Any], str]:
    """A copy of the raw H100 dict, the mapping holding ``path`` in it, and the last key."""
    data = copy.deepcopy(RAW)
    node = data
    for part in path[:-1]:
        node = node[part]
    return data, node, path[-1]


@pytest.mark.parametrize("path", PATHS, ids=".".join)
def test_deleting_any_key_is_harmless_or_a_clean_error(tmp_path, path):
    """The exhaustive version of the delete corruption: every key of the H100 description."""
    data, node, last = split_path(path)
    del node[last]
    dotted = ".".join(path)
    try:
        write_and_load(data, tmp_path / "spec.yaml")
    except ConfigError as exc:
        assert "\n" not in str(exc)
        if path[0] == "sources" and len(path) == 2:
            raise AssertionError(f"a single citation is optional: {exc}")
        # reported at the deleted key, at the section whose rule needs it (vector_flop_per_cycle needs
        # fp32), or, for an optional key that is gone, as a stale citation of it
        assert (exc.key_path == dotted or dotted.startswith(exc.key_path + ".")
                or exc.key_path == f"sources.{dotted}"), str(exc)
        if exc.key_path == dotted:
            assert exc.message.startswith(("missing required key", "a PCIe host link needs")), str(exc)


@pytest.mark.parametrize("path", PATHS, ids=".".join)
def test_misspelling_any_key_names_the_typo(tmp_path, path):
    """Every key of the H100 description, misspelled, is reported at the misspelled key with a hint."""
    data, node, last = split_path(path)
    typo_key = last + "x"
    node[typo_key] = node.pop(last)
    with pytest.raises(ConfigError) as info:
        write_and_load(data, tmp_path / "spec.yaml")
    text = str(info.value)
    if path in (("kind",), ("schema_version",)):  # read before the schema, to pick it
        assert text.endswith(f"{path[0]}: missing required key " + ("(gpu, cpu or system)" if path[0] == "kind"
                             else "(this gpusim reads schema_version: 1)"))
    elif path[0] == "sources" and len(path) == 2:
        assert info.value.key_path == f"sources.{typo_key}"
        assert info.value.message == "cites a key that is not in this description"
    else:
        typo_path = ".".join((*path[:-1], typo_key))
        assert info.value.key_path == typo_path
        assert info.value.message == f"unknown key; did you mean {last}?"


SYSTEM = Path(__file__).resolve().parent / "data" / "hw" / "test_system.yaml"


def system_raw() -> dict[str, Any]:
    """test_system.yaml with its file references made absolute, so a copy loads from any folder."""
    raw = read_yaml(SYSTEM)
    for key in ("gpu", "host_cpu"):
        if (SYSTEM.parent / raw[key]).is_file():
            raw[key] = str((SYSTEM.parent / raw[key]).resolve())
    return raw


SYSTEM_RAW = system_raw()


@st.composite
def system_corruption(draw):
    data = copy.deepcopy(SYSTEM_RAW)
    path = draw(st.sampled_from(key_paths(SYSTEM_RAW)))
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    how = draw(st.sampled_from(["delete", "rename", "value"]))
    if how == "delete":
        del parent[path[-1]]
    elif how == "rename":
        parent[draw(typo(path[-1]))] = parent.pop(path[-1])
    else:  # besides bad values, references to descriptions of the wrong kind or to nothing
        parent[path[-1]] = draw(CORRUPT_VALUES | st.sampled_from(
            ["h100_sxm5_80gb", str(SYSTEM.parent / "test_cpu.yaml"), str(SYSTEM), "no_such_gpu", "../none.yaml"]))
    return data


def test_system_fixture_loads_from_a_copy(spec_path):
    desc = write_and_load(SYSTEM_RAW, spec_path)
    assert (desc.num_gpus, desc.host_cpu.num_cores) == (16, 32)


@SETTINGS
@given(system_corruption())
def test_random_system_corruptions_fail_cleanly(spec_path, data):
    """Systems embed a GPU and a CPU description by reference; corrupting that also fails cleanly."""
    try:
        write_and_load(data, spec_path)
    except ConfigError as exc:
        assert "\n" not in str(exc)
        assert exc.source == str(spec_path)
        assert exc.message
