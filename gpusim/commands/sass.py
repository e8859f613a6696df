"""``gpusim sass``: compile gpusim's own kernels to machine code and count, per kernel, what one warp
issues, stalls on and loads; writes ``DIR/<hardware>/kernels_sass.csv``, which ``gpusim accuracy``
reads beside ``kernels.csv`` to time each measured own kernel as its compiled code runs it
(:mod:`gpusim.cuda_backend.code`). Needs numba-cuda and the CUDA toolkit's compiler (NVVM, NVRTC,
``ptxas``, ``nvdisasm``), not a GPU; without them it says so in one line and exits 2."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpusim.errors import ConfigError

COMPUTE_CAPABILITY = {"volta": (7, 0), "turing": (7, 5), "ada": (8, 9), "hopper": (9, 0), "blackwell": (10, 0)}
"""The compute capability of an architecture that has one (Ampere's is 8.0 or 8.6: pass it)."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sass", help="count what gpusim's own kernels' compiled code issues between its loads",
                       description="Compile each kernel of the kernels suite as `gpusim measure` launches it (Numba "
                                   "to PTX, ptxas to SASS) for the description's GPU and count, for one warp over "
                                   "the whole kernel, its instructions, the cycles it stalls on its own results and "
                                   "its round trips to memory. `gpusim accuracy` then times each measured own kernel "
                                   "as that code runs it. Needs numba-cuda and the CUDA toolkit, no GPU.",
                       epilog="Example: gpusim sass --hardware h200_sxm_141gb --out measurements")
    p.add_argument("--hardware", required=True, metavar="NAME_OR_PATH", help="the description the kernels were planned for")
    p.add_argument("--out", default="measurements", metavar="DIR",
                   help="parent folder; the file goes to DIR/<hardware>/kernels_sass.csv (default: measurements)")
    p.add_argument("--compute-capability", metavar="MAJOR.MINOR", default=None,
                   help="the GPU's compute capability (default: its architecture's; Ampere needs it)")
    p.add_argument("--op", action="append", default=[], metavar="OP", help="only cases of these ops (repeatable)")
    p.set_defaults(func=cmd_sass)


def _compute_capability(text: str | None, architecture: str) -> tuple[int, int]:
    if text is None:
        if architecture not in COMPUTE_CAPABILITY:
            raise ConfigError("--compute-capability", "", f"architecture {architecture!r} has more than one or none "
                                                          "known; pass it, e.g. 8.0")
        return COMPUTE_CAPABILITY[architecture]
    major, dot, minor = text.partition(".")
    if not (dot and major.isdigit() and minor.isdigit()):
        raise ConfigError("--compute-capability", text, "must be MAJOR.MINOR, e.g. 9.0")
    return int(major), int(minor)


def describe(case, row: dict, machine) -> str:
    """One line of what a kernel's compiled code does per round trip, and the kernel's simulated time
    as its plan describes it beside the time as its code runs it."""
    from gpusim.cuda_backend.code import plan_from_code_row
    from gpusim.engine.kernel import simulate_kernel

    trips = row["round_trips"]
    line = (f"{row['case_id']:<32} {row['registers_per_thread']:4d} registers {trips:7.0f} round trips "
            f"{row['warp_instructions'] / trips:6.1f} instructions + {row['warp_stall_cycles'] / trips:6.1f} stall "
            f"cycles per trip;")
    plan_s = simulate_kernel(case.plan, machine).time_s
    try:
        code_s = simulate_kernel(plan_from_code_row(case.plan, row, machine), machine).time_s
    except ValueError as exc:  # more registers than an SM has for the plan's threads
        return f"{line} plan {plan_s * 1e6:,.1f} us, code: {exc}"
    return f"{line} plan {plan_s * 1e6:,.1f} us, as compiled {code_s * 1e6:,.1f} us ({code_s / plan_s:.1f}x)"


def cmd_sass(args: argparse.Namespace) -> int:
    from gpusim.commands.measure import _check_ops, _write_rows
    from gpusim.config.library import load_hardware
    from gpusim.cuda_backend.code import CODE_COLUMNS, CannotCompile, code_rows
    from gpusim.cuda_backend.measure import kernels_suite
    from gpusim.engine.machine import machine_of

    hardware = load_hardware(args.hardware)
    if hardware.kind != "gpu":
        raise ConfigError(args.hardware, "kind", "gpusim sass compiles CUDA kernels: the description must be a GPU")
    capability = _compute_capability(args.compute_capability, hardware.gpu.architecture)
    machine = machine_of(hardware)
    suite = kernels_suite(machine)
    _check_ops(args.op, suite, "the kernels suite")
    cases = [c for c in suite if not args.op or c.op in args.op]
    try:
        rows = code_rows(cases, machine, capability,
                         lambda case, row: print(describe(case, row, machine), file=sys.stderr))
    except CannotCompile as exc:
        print(f"gpusim: cannot compile to SASS ({exc})", file=sys.stderr)
        return 2
    out = Path(args.out) / Path(args.hardware).stem / "kernels_sass.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    _write_rows(out, CODE_COLUMNS, rows, args.op)
    print(out)
    return 0
