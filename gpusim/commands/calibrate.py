"""``gpusim calibrate``: fit calibration factors for one device to measurements, as a YAML overlay, or
check that the built-in descriptions' calibration blocks still reproduce from the published data."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpusim.calibration import fit_calibration, overlay_yaml, stale_calibration
from gpusim.errors import GpusimError
from gpusim.results.export import announce_written, check_output_path, write_text_file
from gpusim.units import plural


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="fit a hardware description's calibration block to measurements",
                       description="Fit tensor, vector, DRAM, L2 and host-link efficiency factors of HW to a "
                                   "measurement CSV (the published kernels format) and write an overlay whose "
                                   "calibration block cites it. With --check, refit every built-in description "
                                   "whose calibration says it was fitted by this command (or only --base) and list "
                                   "the values the refit no longer reproduces.",
                       epilog="Examples: gpusim calibrate published --base h100_sxm5_80gb -o h100_calibrated.yaml; "
                              "gpusim calibrate --check")
    p.add_argument("measurements", metavar="MEASUREMENTS", nargs="?", default="published",
                   help="a kernels CSV, or 'published' for the built-in dataset (default)")
    p.add_argument("--base", metavar="HW", help="the description to calibrate (a built-in stem)")
    p.add_argument("--check", action="store_true",
                   help="list stale calibration values instead of writing an overlay (exit 1 if any)")
    p.add_argument("-o", "--output", metavar="PATH", help="write the overlay here (default: print it)")
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from gpusim.config.library import builtin_files, read_description
    from gpusim.errors import ConfigError
    from gpusim.measurements import load_kernel_cases

    files = builtin_files("hwconfigs")
    if args.base and not args.check and (
            args.base not in files or read_description(files[args.base]).get("kind") not in ("gpu", "cpu")):
        # a fit selects the measurements by their gpu column, which names a built-in stem (--check
        # also takes an edited description's path)
        raise ConfigError("--base", args.base, "takes a built-in GPU or CPU name, the stem the measurements' gpu "
                                               "column uses (e.g. h100_sxm5_80gb; see `gpusim hw list`)")
    if args.measurements == "published":
        cases = load_kernel_cases()
        label = "measurements/published/kernels.csv"
    else:
        cases = load_kernel_cases(args.measurements)
        label = Path(args.measurements).name
    if args.check:
        return _check(args.base, cases, label)
    if not args.base:
        raise GpusimError("calibrate: --base HW is required (or pass --check)")
    if args.output:
        # before the fit, which takes a while
        read = None if args.measurements == "published" else args.measurements
        check_output_path(args.output, flag="--output", inputs=(read,))
    factors = fit_calibration(args.base, cases)
    if not factors:
        raise GpusimError(f"{label}: no case calibrates {args.base} (need large GEMMs, streams or copies)")
    text = overlay_yaml(args.base, factors, label)
    if args.output:
        write_text_file(args.output, text)
        announce_written(args.output)
    else:
        print(text, end="")
    for f in factors:
        print(f"# {f.name} = {f.value} from {plural(f.num_cases, 'case')}", flush=True)
    return 0


def _check(base: str | None, cases, label: str) -> int:
    from gpusim.config.library import list_hardware

    stems = [base] if base else [stem for stem, _ in list_hardware()]
    stale = [s for stem in stems for s in stale_calibration(stem, cases)]
    for s in stale:
        print(s)
    if stale:
        print(f"{plural(len(stale), 'calibration value')} no longer reproduce from {label}")
        return 1
    print(f"every checked calibration block reproduces from {label} ({plural(len(stems), 'description')} checked)")
    return 0
