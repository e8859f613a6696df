"""``gpusim verify``: run the CUDA kernels on small shapes and compare with numpy.

Without a usable GPU (or with ``--simulator``) the kernels run under Numba's CUDA simulator. The
simulator is chosen when numba is first imported, so this command sets ``NUMBA_ENABLE_CUDASIM=1``
before that import, or, if numba is already loaded without it, runs itself again in a fresh process.
Exit codes: 0 every case within tolerance, 1 a numerical mismatch, 2 a usage error.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

OP_KINDS = ("gemm_fp32", "gemm_fp16", "elementwise_add", "elementwise_gelu", "softmax", "layernorm", "reduction",
            "attention", "pointer_chase", "stream", "l2_read", "fma")
PLANTED_BUGS = ("drop-last-k-tile",)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="check the CUDA kernels' numerics against numpy (GPU or Numba's simulator)",
                       description="Run every CUDA kernel (tiled GEMM, elementwise, softmax, layernorm, reduction, "
                                   "attention, microbenchmarks) on small shapes with edge tiles, following the "
                                   "plans the simulator uses, and compare with a float64 numpy reference. "
                                   "Exit 0: all within tolerance; 1: a mismatch; 2: usage error.",
                       epilog="Example: gpusim verify --op gemm_fp32 --op softmax --simulator")
    p.add_argument("--op", action="append", default=[], choices=OP_KINDS, metavar="KIND",
                   help=f"only these op kinds (repeatable): {', '.join(OP_KINDS)}")
    p.add_argument("--simulator", action="store_true",
                   help="use Numba's CUDA simulator even when a GPU is present (slow: keep to the default shapes)")
    p.add_argument("--hardware", default=None, metavar="NAME_OR_PATH",
                   help="hardware description the plans are made for (default h100_sxm5_80gb)")
    p.add_argument("--plant-bug", choices=PLANTED_BUGS, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_verify)


def _argv(args: argparse.Namespace) -> list[str]:
    out = ["verify"]
    for op in args.op:
        out += ["--op", op]
    if args.hardware:
        out += ["--hardware", args.hardware]
    if args.plant_bug:
        out += ["--plant-bug", args.plant_bug]
    return out + ["--simulator"]


def _rerun_with_simulator(args: argparse.Namespace) -> int:
    env = dict(os.environ)
    env["NUMBA_ENABLE_CUDASIM"] = "1"
    sys.stdout.flush()
    return subprocess.run([sys.executable, "-m", "gpusim", *_argv(args)], env=env, check=False).returncode


def cmd_verify(args: argparse.Namespace) -> int:
    from gpusim.cuda_backend import (SIMULATOR_ENV, cuda_driver_library_present, gpu_status, numba_loaded,
                                     simulator_active, simulator_requested)

    use_simulator = args.simulator or simulator_requested() or not cuda_driver_library_present()
    if use_simulator and not simulator_active():
        if numba_loaded():
            return _rerun_with_simulator(args)
        os.environ[SIMULATOR_ENV] = "1"
    where = "Numba CUDA simulator"
    if not simulator_active():
        ok, reason = gpu_status()
        if not ok:
            print(f"gpusim: no usable CUDA GPU ({reason}); running on Numba's CUDA simulator", file=sys.stderr)
            return _rerun_with_simulator(args)
        from numba import cuda

        name = cuda.get_current_device().name
        where = name.decode() if isinstance(name, bytes) else str(name)

    from gpusim.cuda_backend.plans import DEFAULT_HARDWARE, load_machine
    from gpusim.cuda_backend.verify import run_cases, select_cases

    machine = load_machine(args.hardware or DEFAULT_HARDWARE)
    cases = select_cases(args.op)
    results = run_cases(cases, machine, planted_bug=args.plant_bug)
    header = (f"{'op':<17} {'case':<58} {'grid x threads':>14} {'shared B':>8} {'tile':<24} "
              f"{'error':>9} {'tolerance':>9}  result  {'wall s':>6}")
    print(f"verify on {where}; plans for {machine.name}" + (f"; planted bug: {args.plant_bug}" if args.plant_bug else ""))
    print(header)
    for r in results:
        launch = f"{r.grid}x{r.threads_per_cta}" if r.grid is not None else "-"
        shared = str(r.shared_bytes_per_cta) if r.shared_bytes_per_cta is not None else "-"
        print(f"{r.op_kind:<17} {r.label[:58]:<58} {launch:>14} {shared:>8} {r.tile or '-':<24} "
              f"{r.error_fraction:9.2e} {r.tolerance_fraction:9.0e}  {'ok' if r.passed else 'FAIL':<6}  {r.wall_s:6.2f}")
    failed = [r for r in results if not r.passed]
    print(f"{len(results) - len(failed)}/{len(results)} cases within tolerance")
    return 1 if failed else 0
