"""The ``gpusim`` command line: a thin layer over the public API.

Each command group lives in ``gpusim/commands/<group>.py`` with a ``register(subparsers)`` function.
Every user error is printed as one line on stderr with exit code 2; no tracebacks.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from gpusim import __version__
from gpusim.errors import GpusimError

COMMAND_MODULES = (
    "gpusim.commands.hw",
    "gpusim.commands.check",
    "gpusim.commands.workload",
    "gpusim.commands.run",
    "gpusim.commands.accuracy",
    "gpusim.commands.calibrate",
    "gpusim.commands.verify",
    "gpusim.commands.measure",
    "gpusim.commands.sass",
    "gpusim.commands.sweep",
    "gpusim.commands.plot",
    "gpusim.commands.compare",
    "gpusim.commands.report",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse with its usage errors on one line (the usage block stays in --help); subcommand
    parsers inherit the class."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="gpusim",
        description="Simulate GPUs (and CPUs) running deep-learning workloads, from YAML descriptions.",
        epilog="Example: gpusim hw show h100_sxm5_80gb",
    )
    parser.add_argument("--version", action="version", version=f"gpusim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except GpusimError as exc:
        print(f"gpusim: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpusim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
