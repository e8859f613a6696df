"""``gpusim run HW WORKLOAD``: simulate a workload on a hardware description."""

from __future__ import annotations

import argparse
import math
import re
from typing import Sequence

from gpusim.commands.hw import add_launch_argument, add_set_argument
from gpusim.config.loader import parse_set_items
from gpusim.energy import with_energy
from gpusim.results.export import check_outputs, write_json, write_trace
from gpusim.runner import load_and_simulate, split_overrides
from gpusim.report.text import cost_lines, launch_summary, layout_summary, step_summary
from gpusim.units import format_binary_bytes, format_duration, format_quantity


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="simulate a workload on hardware",
                       description="Simulate WORKLOAD on HW. Both are built-in names or YAML paths. "
                                   "--set applies to the hardware (gpu.*, cpu.*, num_nodes, ...) or the "
                                   "workload (batch_size, config.num_layers, ops.0.m, ...).",
                       epilog="Example: gpusim run h100_sxm5_80gb gemm_8192_bf16 --json - --trace gemm.trace.json")
    p.add_argument("hardware", metavar="HW")
    p.add_argument("workload", metavar="WORKLOAD")
    add_set_argument(p)
    p.add_argument("--json", metavar="PATH", help="write the result as JSON to PATH (- for stdout)")
    p.add_argument("--trace", metavar="PATH", help="write a Chrome/Perfetto trace (open in ui.perfetto.dev)")
    add_launch_argument(p)
    p.add_argument("--unified-memory", action="store_true",
                   help="page a working set larger than device memory over the host link")
    add_energy_arguments(p)
    p.add_argument("--epoch-samples", type=positive_count, metavar="N",
                   help="report the time and cost of an epoch of N samples (model workloads)")
    p.add_argument("--train-tokens", type=positive_count, metavar="N",
                   help="report the time and cost of a training run of N tokens, e.g. 300e9 (language models)")
    p.set_defaults(func=cmd_run)


def positive_count(text: str) -> float:
    """An argparse type: a whole number above zero, at most 1e18, written plainly or as ``300e9``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= 1e18:
        raise argparse.ArgumentTypeError(f"expected a number above 0 and at most 1e18, got {text!r}")
    if value != math.floor(value):
        raise argparse.ArgumentTypeError(f"expected a whole number (a count), got {text!r}")
    return value


def add_energy_arguments(p: argparse.ArgumentParser) -> None:
    """Power-cap and price options shared by ``run`` and ``sweep``."""
    p.add_argument("--price-per-hour", metavar="PRICE",
                   help="price of one device-hour, e.g. 2.5USD/h (default: the description's price_usd_per_s)")
    p.add_argument("--power-cap", metavar="POWER",
                   help="power cap, e.g. 500W (default: the description's tdp_w); kernels whose power would "
                        "exceed it are throttled (DVFS) and take longer")
    p.add_argument("--no-power-cap", action="store_true",
                   help="report uncapped times and power even where power exceeds TDP")


def energy_options(args: argparse.Namespace) -> dict:
    """Parsed --price-per-hour / --power-cap / --no-power-cap as with_energy keyword arguments."""
    from gpusim.errors import ConfigError, UnitError
    from gpusim.units import parse_quantity

    out: dict = {"power_cap": not getattr(args, "no_power_cap", False)}
    if getattr(args, "no_power_cap", False) and getattr(args, "power_cap", None) is not None:
        raise ConfigError("command line", "--no-power-cap", "turns off the cap --power-cap sets: give one")
    for flag, attr, dim, key, example in (("--price-per-hour", "price_per_hour", "usd_per_s", "price_usd_per_s",
                                           "2.5USD/h"),
                                          ("--power-cap", "power_cap", "w", "tdp_w", "500W")):
        value = getattr(args, attr, None)
        if value is not None:
            try:
                if _is_number(value) and float(value) <= 0:  # wrong in any unit: say that, not "give a unit"
                    raise ConfigError("command line", flag, f"must be above 0, got {value!r}")
                if not _NUMBER_WITH_UNIT.match(str(value).strip()):
                    # a bare number would be read in SI (USD per second, not per hour)
                    raise UnitError(f"give a unit, e.g. {example}, got {value!r}")
                out[key] = parse_quantity(str(value).strip(), dim)
            except UnitError as exc:
                raise ConfigError("command line", flag, str(exc)) from None
            if out[key] <= 0:
                raise ConfigError("command line", flag, f"must be above 0, got {value!r}")
    return out


def _is_number(text) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


_NUMBER_WITH_UNIT = re.compile(r"^[-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?\s*[A-Za-z/$]")


def input_files(hardware_names: Sequence[str], workload: str) -> tuple[str, ...]:
    """The files hardware and workload arguments stand for (a built-in name: its file in hwconfigs/ or
    workloads/), for the output checks; a name that stands for nothing is kept as given (its own
    error comes when it is loaded)."""
    from gpusim.config.library import resolve
    from gpusim.errors import GpusimError

    files = []
    for name, kind in [*((h, "hwconfigs") for h in hardware_names), (workload, "workloads")]:
        try:
            files.append(str(resolve(name, kind)))
        except GpusimError:
            files.append(name)
    return tuple(files)


def cmd_run(args: argparse.Namespace) -> int:
    from gpusim.errors import ConfigError

    # outputs are checked before the simulation, which may be long
    if args.trace == "-":
        raise ConfigError("command line", "--trace", "give a file path (only --json writes to stdout with -)")
    check_outputs({"--json": args.json, "--trace": args.trace}, inputs=input_files([args.hardware], args.workload))
    hw_overrides, wl_items = split_overrides(parse_set_items(args.overrides))
    hardware, result = load_and_simulate(args.hardware, args.workload, hw_overrides, wl_items,
                                         launch_mode=args.launch, unified_memory=args.unified_memory,
                                         record_spans=bool(args.trace))
    result = with_energy(result, hardware, **energy_options(args))
    if args.trace:
        write_trace(result, args.trace)
    return _report(result, args)


def _report(result, args: argparse.Namespace) -> int:
    from gpusim.cost import CostError, run_cost
    from gpusim.errors import ConfigError

    cost = None
    if args.epoch_samples is not None or args.train_tokens is not None:
        if result.price_usd_per_s is None:
            raise ConfigError("command line", "--price-per-hour", f"{result.hardware} has no price_usd_per_s; "
                              "give --price-per-hour for epoch or training-run costs")
        try:
            cost = run_cost(result, result.price_usd_per_s, epoch_samples=args.epoch_samples,
                            train_tokens=args.train_tokens)
        except CostError as exc:
            raise ConfigError("command line", "--" + exc.argument.replace("_", "-"), str(exc)) from None
    if args.json:
        data = result.to_dict()
        if cost is not None:
            data["run_cost"] = {k: v for k, v in cost.__dict__.items() if v is not None}
        write_json(data, args.json)
        if args.json == "-":
            return 0
    print_summary(result)
    if cost is not None:
        for line in cost_lines(cost.__dict__):
            print(f"  {line}")
    return 0


def print_summary(result) -> None:
    print(f"{result.workload} on {result.hardware}: {format_duration(result.total_time_s)}"
          f"  ({launch_summary(result)})")
    if result.step_time_s is not None:
        print(f"  {step_summary(result)}")
    if result.algbw_bytes_per_s is not None:
        loops = f" in {result.collective_loops:,} loops" if (result.collective_loops or 1) > 1 else ""
        print(f"  {result.collective_algorithm}{loops}: algbw {result.algbw_bytes_per_s / 1e9:,.1f} GB/s, "
              f"busbw {result.busbw_bytes_per_s / 1e9:,.1f} GB/s")
    layout = layout_summary(result)
    if layout is not None:
        print(f"  {layout}")
        busiest = sorted(result.link_utilization.items(), key=lambda kv: kv[1], reverse=True)[:4]
        if busiest:
            print("  busiest links: " + ", ".join(f"{k} {u:.0%}" for k, u in busiest))
    stage = result.memory.get("pipeline_stage")
    if result.fits_in_memory:
        verdict = "fits"
    elif result.time_breakdown_s.get("paging", 0.0) > 0:
        verdict = "does not fit: unified memory pages the rest over the host link"
    else:
        verdict = "DOES NOT FIT"
    print(f"  memory{' per GPU' if result.num_gpus > 1 else ''} {format_binary_bytes(result.peak_memory_bytes)} of {format_binary_bytes(result.memory_capacity_bytes)}"
          + (f" on pipeline stage {stage}, the fullest" if stage is not None else "") + f" ({verdict})")
    if result.energy_j is not None:
        line = (f"  energy {format_quantity(result.energy_j, 'j')}, power avg {result.avg_power_w:,.0f} W / peak "
                f"{result.peak_power_w:,.0f} W (TDP {result.tdp_w:,.0f} W), {result.flop_per_j / 1e9:,.1f} GFLOP/J")
        if result.cost_usd is not None:
            line += f", cost ${result.cost_usd:,.4g} at ${result.price_usd_per_s * 3600:,.2f}/device-hour"
        print(line)
    for w in result.warnings:
        print(f"  warning: {w}")
    total = sum(result.time_breakdown_s.values()) or 1.0
    parts = ", ".join(f"{k} {v / total:.0%}" for k, v in result.time_breakdown_s.items() if v > 0)
    print(f"  time by bound: {parts}")
    top = sorted(result.kernels, key=lambda k: k.time_s, reverse=True)[:8]
    print(f"  {'kernel':<44} {'launches':>8} {'time':>10} {'TFLOP/s':>8} {'GB/s':>7} {'L2 hit':>6} bound")
    for k in top:
        print(f"  {k.name[:44]:<44} {max(1, int(k.repeat)):>8,} {format_duration(k.time_s):>10} "
              f"{k.achieved_flop_per_s / 1e12:8.1f} "
              f"{(k.dram_bytes / k.time_s / 1e9 if k.time_s else 0):7.0f} {k.l2_hit_fraction:6.0%} {k.bound}"
              + (f" ({k.plan['compute_limiter']})" if k.bound == "compute" and k.plan.get("compute_limiter") else "")
              + (f" ({k.plan['memory_limiter'].upper()})" if k.bound == "memory"
                 and k.plan.get("memory_limiter") else "")
              + (" [warp MMA]" if k.plan.get("warp_mma") else ""))
