"""``gpusim compare HW1 HW2 [...] WORKLOAD``: one workload on several devices, side by side."""

from __future__ import annotations

import argparse
import sys

from gpusim.commands.hw import add_set_argument
from gpusim.errors import GpusimError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare", help="one workload on several hardware descriptions: table and bar chart",
        usage="gpusim compare [options] HW HW [HW ...] WORKLOAD",
        description="Simulate WORKLOAD on every HW and print time, throughput, MFU, memory and energy side "
                    "by side, with the speed-up relative to the first HW.",
        epilog="Example: gpusim compare xeon_8480 a100_sxm4_80gb h100_sxm5_80gb resnet50_train -o compare.png")
    p.add_argument("names", metavar="HW... WORKLOAD", nargs="+", help="two or more HW, then the WORKLOAD")
    add_set_argument(p)
    p.add_argument("-o", "--output", metavar="PATH", help="also draw a bar chart (.png, .svg or .pdf)")
    p.add_argument("--json", metavar="PATH", help="write the rows as JSON to PATH (- for stdout)")
    p.add_argument("--no-energy", action="store_true",
                   help="skip the energy model and its power cap (every kernel at the rated clock)")
    p.set_defaults(func=cmd_compare)


def run_compare(hardware_names: list[str], workload_name: str, overrides: list[str], *, energy: bool = True,
                progress=None) -> list:
    """Simulate the workload on each hardware; returns the results (energy filled in when asked)."""
    from gpusim.commands.plot_results import simulate_named

    results = []
    for i, name in enumerate(hardware_names):
        if progress is not None:
            progress(i, len(hardware_names), name)
        try:
            _, result = simulate_named(name, workload_name, overrides, energy=energy)
        except GpusimError as exc:  # which of the descriptions it was
            raise GpusimError(f"on {name}: {exc}") from None
        results.append(result)
    if progress is not None:
        progress(len(hardware_names), len(hardware_names), "done")
    return results


def _progress(i: int, n: int, label: str) -> None:
    if not sys.stderr.isatty():
        return
    width = 24
    filled = width * i // max(n, 1)
    end = "\n" if i >= n else ""
    print(f"\r[{'#' * filled}{'.' * (width - filled)}] {i}/{n} {label:<24}", end=end, file=sys.stderr, flush=True)


def _refuse_workloads_among_hardware(names: list[str]) -> None:
    """A workload name where a HW is expected (a second workload, or the order reversed) is named as
    one, instead of failing its simulation as an unknown description."""
    from gpusim.config.library import resolve
    from gpusim.errors import ConfigError

    for name in names:
        try:
            resolve(name, "hwconfigs")
        except ConfigError:
            try:
                resolve(name, "workloads")
            except ConfigError:
                continue  # neither: its own error comes when it is loaded
            raise ConfigError("command line", "HW", f"{name} is a workload: compare runs one WORKLOAD, given last, "
                                                    "on two or more HW") from None


def cmd_compare(args: argparse.Namespace) -> int:
    from gpusim.errors import ConfigError
    from gpusim.report.plots import compare_figure, compare_rows, save_figure
    from gpusim.results.export import announce_written, check_outputs, write_json
    from gpusim.units import format_duration, format_quantity, plural

    if len(args.names) < 3:
        raise ConfigError("command line", "HW", f"give two or more HW and a WORKLOAD (got {plural(len(args.names), 'name')}; "
                          "`gpusim run HW WORKLOAD` simulates one)")
    *hardware_names, workload_name = args.names
    _refuse_workloads_among_hardware(hardware_names)
    # outputs are checked before the simulations
    from gpusim.commands.run import input_files

    check_outputs({"--output": args.output or None, "--json": args.json or None},
                  inputs=input_files(hardware_names, workload_name), figures=("--output",))
    results = run_compare(hardware_names, workload_name, args.overrides, energy=not args.no_energy,
                          progress=_progress)
    rows = compare_rows(results)
    if args.json:
        write_json(rows, args.json)
    if args.output:
        save_figure(compare_figure(results), args.output, "--output")
    if args.json == "-":
        return 0
    print(f"{results[0].workload}:")
    header = f"  {'hardware':<22} {'time':>10} {'speed-up':>8} {'TFLOP/s':>8} {'samples/s':>10} {'MFU':>6} " \
             f"{'memory GiB':>11} {'energy':>10}"
    print(header)
    for row in rows:
        samples = f"{row['samples_per_s']:,.1f}" if "samples_per_s" in row else "-"
        mfu = f"{row['mfu_fraction']:.1%}" if row.get("mfu_fraction") is not None else "-"
        energy = format_quantity(row["energy_j"], "j") if "energy_j" in row else "-"
        mem = f"{row['peak_memory_bytes'] / 2**30:.1f}/{row['memory_capacity_bytes'] / 2**30:.0f}" + \
              ("" if row["fits_in_memory"] else "!")
        print(f"  {row['hardware'][:22]:<22} {format_duration(row['time_s']):>10} "
              f"{row['speedup_vs_first']:>7.2f}x {row['achieved_flop_per_s'] / 1e12:8.1f} {samples:>10} {mfu:>6} "
              f"{mem:>11} {energy:>10}")
    if any(not r["fits_in_memory"] for r in rows):
        print("  ! does not fit in device memory (times assume it did)")
    if args.output:
        announce_written(args.output)
    return 0
