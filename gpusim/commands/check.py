"""``gpusim check FILE...``: validate hardware and workload descriptions (exit 0 or 2)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpusim.config import load_hardware
from gpusim.config.loader import read_yaml
from gpusim.errors import GpusimError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="validate hardware and workload files",
                       description="Validate hardware and workload descriptions. Exit 0 if all are valid, 2 otherwise.",
                       epilog="Example: gpusim check hwconfigs/*.yaml workloads/*.yaml")
    p.add_argument("files", metavar="FILE", nargs="+")
    p.add_argument("--all", action="store_true",
                   help="every problem the schema finds in a file, one line each (default: the first)")
    p.set_defaults(func=cmd_check)


def check_file(path: str) -> str:
    """Validate one file, or a built-in description or workload by name (as ``gpusim run`` takes it);
    returns what it is ('gpu', 'cpu', 'system' or 'workload'). Raises GpusimError."""
    if not Path(path).is_file():
        path = str(_builtin(path))
    data = read_yaml(path)
    if "kind" in data or not ("ops" in data or "model" in data):
        return load_hardware(path).kind  # kind may be inherited through extends:
    from gpusim.workload import load_workload

    load_workload(path)
    return "workload"


def _builtin(name: str) -> Path:
    """The file of a built-in hardware description or workload named ``name`` (hardware first, as
    ``gpusim run`` reads its first argument); the hardware lookup's error if neither has it."""
    from gpusim.config.library import resolve

    try:
        return resolve(name, "hwconfigs")
    except GpusimError as hardware_error:
        try:
            return resolve(name, "workloads")
        except GpusimError:
            raise hardware_error from None


def cmd_check(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.files:
        try:
            what = check_file(path)
        except GpusimError as exc:
            for line in (str(exc), *(getattr(exc, "further", ()) if args.all else ())):
                print(f"gpusim: {line}", file=sys.stderr)
            failed += 1
        else:
            print(f"ok  {path} ({what})")
    return 2 if failed else 0
