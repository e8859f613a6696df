"""``gpusim plot roofline | timeline | breakdown``: figures of one simulated run.

:func:`register_plot_subcommands` adds the three subcommands to the ``plot`` group's subparsers.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gpusim.commands.hw import add_launch_argument, add_set_argument


def simulate_named(hardware_name: str, workload_name: str, overrides: list[str], *, launch_mode: str = "eager",
                   unified_memory: bool = False, record_spans: bool = False, energy: bool = True):
    """Load and simulate like ``gpusim run`` does, kernels above TDP throttled by the power cap and the
    energy filled in (``energy`` False: neither, the run at the rated clock); returns (hardware
    description, result)."""
    from gpusim.config.loader import parse_set_items
    from gpusim.energy import with_energy
    from gpusim.runner import load_and_simulate, split_overrides

    hw_overrides, wl_items = split_overrides(parse_set_items(overrides))
    hardware, result = load_and_simulate(hardware_name, workload_name, hw_overrides, wl_items,
                                         launch_mode=launch_mode, unified_memory=unified_memory,
                                         record_spans=record_spans)
    return hardware, (with_energy(result, hardware) if energy else result)


def _common(p: argparse.ArgumentParser, default_name: str) -> None:
    add_set_argument(p)
    p.add_argument("-o", "--output", metavar="PATH", default=None,
                   help=f"image file, .png, .svg or .pdf (default {default_name}_<hw>_<workload>.png)")
    add_launch_argument(p)
    p.add_argument("--unified-memory", action="store_true", help="page an oversubscribed working set")
    p.add_argument("--title", default=None, help="figure title")


def register_plot_subcommands(plot_subparsers: argparse._SubParsersAction) -> None:
    p = plot_subparsers.add_parser(
        "roofline", help="every kernel on the device's roofline, per dtype, sized by time",
        description="Simulate WORKLOAD on HW and draw each kernel at its arithmetic intensity and achieved "
                    "FLOP/s under the roofs of the dtypes it uses (marker area = kernel time).",
        epilog="Example: gpusim plot roofline h100_sxm5_80gb bert_base_train -o roofline.svg")
    p.add_argument("hardware", metavar="HW")
    p.add_argument("workload", metavar="WORKLOAD")
    _common(p, "roofline")
    p.set_defaults(func=cmd_roofline)

    p = plot_subparsers.add_parser(
        "timeline", help="Gantt view of kernels, SM occupancy, L2, HBM and host-link use",
        description="Simulate WORKLOAD on HW (or read RESULT.json from `gpusim run --json`) and draw a Gantt "
                    "chart with one row per track. A JSON result has kernels only (no SM/HBM tracks).",
        epilog="Example: gpusim plot timeline h100_sxm5_80gb resnet50_train -o timeline.png\n"
               "         gpusim plot timeline result.json -o timeline.svg")
    p.add_argument("source", metavar="HW_OR_RESULT_JSON")
    p.add_argument("workload", metavar="WORKLOAD", nargs="?")
    _common(p, "timeline")
    p.set_defaults(func=cmd_timeline)

    p = plot_subparsers.add_parser(
        "breakdown", help="where the time goes, per category, kernel kind and layer",
        description="Time split into compute, memory, latency, launch, transfer, communication and bubble, "
                    "for the whole run, per kernel kind and per layer. HW WORKLOAD or a RESULT.json.",
        epilog="Example: gpusim plot breakdown a100_sxm4_80gb gpt2_large_train -o breakdown.png")
    p.add_argument("source", metavar="HW_OR_RESULT_JSON")
    p.add_argument("workload", metavar="WORKLOAD", nargs="?")
    _common(p, "breakdown")
    p.set_defaults(func=cmd_breakdown)


def _result_of(args, record_spans: bool):
    from gpusim.errors import ConfigError
    from gpusim.report.data import read_result

    if args.workload is None:
        if not args.source.endswith(".json"):
            raise ConfigError("command line", "WORKLOAD", "give HW WORKLOAD, or a RESULT.json written by "
                                                          "`gpusim run --json`")
        return None, read_result(args.source)
    return simulate_named(args.source, args.workload, args.overrides, launch_mode=args.launch,
                          unified_memory=args.unified_memory, record_spans=record_spans)


def _save(fig, args, kind: str, result) -> int:
    from gpusim.report.plots import save_figure
    from gpusim.results.export import announce_written

    path = args.output or f"{kind}_{Path(result.hardware).name}_{result.workload}.png"
    save_figure(fig, path)
    announce_written(path)
    return 0


def cmd_roofline(args: argparse.Namespace) -> int:
    from gpusim.report.plots import roofline_figure

    hardware, result = simulate_named(args.hardware, args.workload, args.overrides, launch_mode=args.launch,
                                      unified_memory=args.unified_memory)
    return _save(roofline_figure(result, hardware, title=args.title), args, "roofline", result)


def cmd_timeline(args: argparse.Namespace) -> int:
    from gpusim.report.plots import timeline_figure

    _, result = _result_of(args, record_spans=True)
    return _save(timeline_figure(result, title=args.title), args, "timeline", result)


def cmd_breakdown(args: argparse.Namespace) -> int:
    from gpusim.report.plots import breakdown_figure

    _, result = _result_of(args, record_spans=False)
    return _save(breakdown_figure(result, title=args.title), args, "breakdown", result)
