"""``gpusim calibrate``: fit calibration factors for one device to measurements, as a YAML overlay."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpusim.calibration import fit_calibration, overlay_yaml
from gpusim.errors import GpusimError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="fit a hardware description's calibration block to measurements",
                       description="Fit tensor, vector, DRAM, L2 and host-link efficiency factors of HW to a "
                                   "measurement CSV (the published kernels format) and write an overlay whose "
                                   "calibration block cites it.",
                       epilog="Example: gpusim calibrate published --base h100_sxm5_80gb -o h100_calibrated.yaml")
    p.add_argument("measurements", metavar="MEASUREMENTS", nargs="?", default="published",
                   help="a kernels CSV, or 'published' for the built-in dataset (default)")
    p.add_argument("--base", required=True, metavar="HW", help="the description to calibrate (a built-in stem)")
    p.add_argument("-o", "--output", metavar="PATH", help="write the overlay here (default: print it)")
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from gpusim.measurements import load_kernel_cases

    if args.measurements == "published":
        cases = load_kernel_cases()
        label = "measurements/published/kernels.csv"
    else:
        cases = load_kernel_cases(args.measurements)
        label = Path(args.measurements).name
    factors = fit_calibration(args.base, cases)
    if not factors:
        raise GpusimError(f"{label}: no case calibrates {args.base} (need large GEMMs, streams or copies)")
    text = overlay_yaml(args.base, factors, label)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}")
    else:
        print(text, end="")
    for f in factors:
        print(f"# {f.name} = {f.value} from {f.num_cases} cases", flush=True)
    return 0
