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
                  "collective_algorithm", "energy_j", "avg_power_w", "peak_power_w", "flop_per_j",
                  "energy_breakdown_j", "tdp_w", "clock_fraction_min", "price_usd_per_s", "cost_usd")


_KERNEL_NUMBERS = ("start_s", "time_s", "flop", "dram_bytes", "l2_hit_fraction", "launch_gap_s", "executed_flop",
                   "energy_j", "avg_power_w")
_KERNEL_REQUIRED_NUMBERS = ("start_s", "time_s")
_KERNEL_REQUIRED = ("name", "op", "start_s", "time_s", "flop", "dram_bytes", "l2_hit_fraction", "bound")
"""What every kernel record must have (``kernel_from_dict`` fills in node, phase, layer and repeat)."""
_RESULT_NUMBERS = ("total_time_s", "peak_memory_bytes", "memory_capacity_bytes", "step_time_s", "samples_per_s",
                   "tokens_per_s", "mfu_fraction", "energy_j", "avg_power_w", "peak_power_w", "flop_per_j", "tdp_w",
                   "clock_fraction_min", "price_usd_per_s", "cost_usd")


def _check_numbers(data: dict[str, Any], keys: tuple[str, ...], required: tuple[str, ...], source: str,
                   prefix: str) -> None:
    """Each of ``keys`` present in ``data`` is a finite number (or null where not ``required``)."""
    for key in keys:
        if key not in data:
            continue
        value = data[key]
        if value is None and key not in required:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(source, f"{prefix}{key}", f"expected a finite number, got {value!r}")


def kernel_from_dict(data: dict[str, Any]) -> KernelRecord:
    fields = {k: data[k] for k in _KERNEL_FIELDS if k in data}
    plan = {k: v for k, v in data.items() if k not in _KERNEL_FIELDS and k not in _DERIVED}
    fields.setdefault("node", fields.get("name", "?"))
    fields.setdefault("phase", "single")
    fields.setdefault("layer", None)
    fields.setdefault("repeat", 1)
    return KernelRecord(plan=plan, **fields)


def result_from_dict(data: dict[str, Any], source: str = "result") -> SimulationResult:
    """The inverse of ``SimulationResult.to_dict`` (spans excepted)."""
    if not isinstance(data, dict) or "kernels" not in data or "total_time_s" not in data:
        raise ConfigError(source, "kernels", "not a gpusim result (expected the JSON of `gpusim run --json`)")
    _check_numbers(data, _RESULT_NUMBERS, ("total_time_s",), source, "")
    if not isinstance(data["kernels"], list):
        raise ConfigError(source, "kernels", "expected a list of kernels")
    for i, kernel in enumerate(data["kernels"]):
        if not isinstance(kernel, dict):
            raise ConfigError(source, f"kernels.{i}", "expected a mapping")
        missing = [key for key in _KERNEL_REQUIRED if key not in kernel]
        if missing:
            raise ConfigError(source, f"kernels.{i}.{missing[0]}",
                              f"missing (a kernel record has {', '.join(_KERNEL_REQUIRED)})")
        _check_numbers(kernel, _KERNEL_NUMBERS, _KERNEL_REQUIRED_NUMBERS, source, f"kernels.{i}.")
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
    p = Path(path)
    text = read_text_file(p)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(str(p), "", f"not valid JSON: {exc}") from None
    return result_from_dict(data, str(p))
