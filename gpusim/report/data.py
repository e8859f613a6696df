"""Rebuild a :class:`SimulationResult` from the JSON that ``gpusim run --json`` writes.

The JSON has every kernel (start, time, FLOP, bytes, bound, plan) but no trace spans, so a result read
back can be drawn as a roofline, a breakdown and a kernel-level timeline (without the SM/HBM tracks).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from gpusim.config.loader import read_text_file
from gpusim.errors import ConfigError
from gpusim.results.result import KernelRecord, SimulationResult

_KERNEL_FIELDS = ("name", "op", "node", "phase", "layer", "start_s", "time_s", "repeat", "flop", "dram_bytes",
                  "l2_hit_fraction", "bound", "launch_gap_s", "executed_flop", "energy_j", "avg_power_w")
_DERIVED = ("achieved_flop_per_s", "achieved_dram_bytes_per_s")
_RESULT_FIELDS = ("hardware", "workload", "total_time_s", "peak_memory_bytes", "memory_capacity_bytes",
                  "fits_in_memory", "launch_mode", "calibration_source", "step_time_s", "samples_per_s",
                  "tokens_per_s", "mfu_fraction", "memory", "time_breakdown_s", "num_unique_kernels", "num_gpus",
                  "parallelism", "link_utilization", "algbw_bytes_per_s", "busbw_bytes_per_s",
                  "collective_algorithm", "collective_loops", "energy_j", "avg_power_w", "peak_power_w", "flop_per_j",
                  "energy_breakdown_j", "tdp_w", "clock_fraction_min", "price_usd_per_s", "cost_usd")


_KERNEL_NUMBERS = ("start_s", "time_s", "flop", "dram_bytes", "l2_hit_fraction", "launch_gap_s", "executed_flop",
                   "energy_j", "avg_power_w")
_KERNEL_REQUIRED = ("name", "op", "start_s", "time_s", "flop", "dram_bytes", "l2_hit_fraction", "bound")
"""What every kernel record must have (``kernel_from_dict`` fills in node, phase, layer and repeat)."""
_KERNEL_STRINGS = ("name", "op", "bound", "node", "phase")
_RESULT_NUMBERS = ("total_time_s", "peak_memory_bytes", "memory_capacity_bytes", "step_time_s", "samples_per_s",
                   "tokens_per_s", "mfu_fraction", "energy_j", "avg_power_w", "peak_power_w", "flop_per_j", "tdp_w",
                   "clock_fraction_min", "price_usd_per_s", "cost_usd", "algbw_bytes_per_s", "busbw_bytes_per_s",
                   "collective_loops")
_RESULT_REQUIRED = ("hardware", "workload", "total_time_s", "kernels")
_RESULT_STRINGS = ("hardware", "workload", "launch_mode", "calibration_source", "collective_algorithm")
_RESULT_NUMBER_MAPS = ("memory", "time_breakdown_s", "link_utilization", "energy_breakdown_j")


def _check_numbers(data: dict[str, Any], keys: tuple[str, ...], required: tuple[str, ...], source: str,
                   prefix: str) -> None:
    """Each of ``keys`` present in ``data`` is a finite number, not negative (or null where not
    ``required``): every number of a result is a time, a count, an amount or a rate."""
    for key in keys:
        if key not in data:
            continue
        value = data[key]
        if value is None and key not in required:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(source, f"{prefix}{key}", f"expected a finite number, got {value!r}")
        if value < 0:
            raise ConfigError(source, f"{prefix}{key}", f"expected a number of at least 0, got {value!r}")


def _check_strings(data: dict[str, Any], keys: tuple[str, ...], required: tuple[str, ...], source: str,
                   prefix: str) -> None:
    for key in keys:
        if key in data and not isinstance(data[key], str) and (data[key] is not None or key in required):
            raise ConfigError(source, f"{prefix}{key}", f"expected text, got {data[key]!r}")


def _check_result(data: Any, source: str) -> None:
    """One line naming the first key of ``data`` that a result of ``gpusim run --json`` cannot have."""
    if not isinstance(data, dict) or "kernels" not in data or "total_time_s" not in data:
        raise ConfigError(source, "kernels", "not a gpusim result (expected the JSON of `gpusim run --json`)")
    missing = [key for key in _RESULT_REQUIRED if key not in data]
    if missing:
        raise ConfigError(source, missing[0], f"missing (a result has {', '.join(_RESULT_REQUIRED)})")
    _check_strings(data, _RESULT_STRINGS, ("hardware", "workload"), source, "")
    _check_numbers(data, _RESULT_NUMBERS, ("total_time_s",), source, "")
    for key in _RESULT_NUMBER_MAPS:
        if key in data:
            if not isinstance(data[key], dict):
                raise ConfigError(source, key, f"expected a mapping of names to numbers, got {data[key]!r}")
            _check_numbers(data[key], tuple(data[key]), tuple(data[key]), source, f"{key}.")
    if "parallelism" in data and not isinstance(data["parallelism"], dict):
        raise ConfigError(source, "parallelism", f"expected a mapping, got {data['parallelism']!r}")
    if "fits_in_memory" in data and not isinstance(data["fits_in_memory"], bool):
        raise ConfigError(source, "fits_in_memory", f"expected true or false, got {data['fits_in_memory']!r}")
    warnings = data.get("warnings", [])
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise ConfigError(source, "warnings", "expected a list of text lines")
    for key in ("num_unique_kernels", "num_gpus"):
        value = data.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(source, key, f"expected a whole number of at least 0, got {value!r}")
    if not isinstance(data["kernels"], list):
        raise ConfigError(source, "kernels", "expected a list of kernels")
    for i, kernel in enumerate(data["kernels"]):
        if not isinstance(kernel, dict):
            raise ConfigError(source, f"kernels.{i}", "expected a mapping")
        missing = [key for key in _KERNEL_REQUIRED if key not in kernel]
        if missing:
            raise ConfigError(source, f"kernels.{i}.{missing[0]}",
                              f"missing (a kernel record has {', '.join(_KERNEL_REQUIRED)})")
        _check_strings(kernel, _KERNEL_STRINGS, _KERNEL_STRINGS, source, f"kernels.{i}.")
        _check_numbers(kernel, _KERNEL_NUMBERS, ("start_s", "time_s"), source, f"kernels.{i}.")
        repeat = kernel.get("repeat", 1)
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise ConfigError(source, f"kernels.{i}.repeat", f"expected a whole number of at least 1, got {repeat!r}")
        layer = kernel.get("layer")
        if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int)):
            raise ConfigError(source, f"kernels.{i}.layer", f"expected a whole number or null, got {layer!r}")


def kernel_from_dict(data: dict[str, Any]) -> KernelRecord:
    fields = {k: data[k] for k in _KERNEL_FIELDS if k in data}
    plan = {k: v for k, v in data.items() if k not in _KERNEL_FIELDS and k not in _DERIVED}
    fields.setdefault("node", fields.get("name", "?"))
    fields.setdefault("phase", "single")
    fields.setdefault("layer", None)
    fields.setdefault("repeat", 1)
    return KernelRecord(plan=plan, **fields)


def result_from_dict(data: dict[str, Any], source: str = "result") -> SimulationResult:
    """The inverse of ``SimulationResult.to_dict`` (spans excepted); a malformed one is one line naming
    its first bad key."""
    _check_result(data, source)
    fields = {k: data[k] for k in _RESULT_FIELDS if k in data}
    fields["warnings"] = tuple(data.get("warnings", ()))
    try:
        kernels = tuple(kernel_from_dict(k) for k in data["kernels"])
        for key in ("peak_memory_bytes", "memory_capacity_bytes"):
            fields.setdefault(key, 0.0)
        fields.setdefault("fits_in_memory", True)
        fields.setdefault("launch_mode", "eager")
        fields.setdefault("calibration_source", "")
        return SimulationResult(kernels=kernels, **fields)
    except TypeError as exc:
        raise ConfigError(source, "kernels", f"malformed result: {exc}") from None


def read_result(path: str | Path) -> SimulationResult:
    return read_result_data(path)[0]


def read_result_data(path: str | Path) -> tuple[SimulationResult, dict]:
    """The result a ``gpusim run --json`` file holds, and the file's whole JSON object (for what the
    result does not carry, such as ``run_cost``)."""
    p = Path(path)
    text = read_text_file(p)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(str(p), "", f"not valid JSON: {exc}") from None
    return result_from_dict(data, str(p)), data
