"""``gpusim measure --suite micro|kernels|library|block``: time kernels on a real GPU.

Writes, under ``--out DIR/<gpu stem or name>/``: ``<suite>.csv`` in the published kernels.csv format
(``gpusim accuracy --measurements`` reads it), ``<suite>_timings.csv`` (every case: median, min, max),
``<suite>_plans.csv`` (the exact plan of each own kernel and the engine's time for it) and
``<suite>_provenance.json`` (GPU, clocks, driver, versions, date); the kernels suite also writes
``kernels_sass.csv`` (what each own kernel's compiled code issues and waits on, as ``gpusim sass``
counts it) where numba-cuda and the CUDA toolkit's ``ptxas`` and ``nvdisasm`` are installed. The ``library`` suite times cuBLAS through
PyTorch instead of gpusim's own kernels and writes ``library.csv`` (each row naming the kernels the
library ran and the tile their names state; :mod:`gpusim.cuda_backend.library`) and
``library_provenance.json`` (GPU, PyTorch and CUDA versions, date). The ``block`` suite times a
transformer block's training step in PyTorch and writes ``block.csv``, measured beside simulated per
phase and kernel class (:mod:`gpusim.cuda_backend.block`), ``block_kernels.csv`` (every profiled kernel) and
``block_provenance.json``. On a machine
without a CUDA GPU (or, for ``library`` and ``block``, without PyTorch) it says so in one line and exits 2.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import io
import json
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

from gpusim.config.loader import read_text_file
from gpusim.errors import ConfigError
from gpusim.results.export import atomic_output, write_text_file

SUITE_NAMES = ("micro", "kernels", "library", "block")
TORCH_SUITES = ("library", "block")
"""Suites that run PyTorch (the others run gpusim's own Numba kernels); each runs on its own."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("measure", help="time the CUDA kernels and microbenchmarks on a real GPU, write CSVs",
                       description="Time kernels with CUDA events after warm-ups (median, min and max of repeats, "
                                   "inputs rotated so the L2 does not flatter) and write tidy CSVs with provenance. "
                                   "Needs a CUDA GPU; without one it exits with code 2.",
                       epilog="Example: gpusim measure --suite micro --suite kernels --out measurements")
    p.add_argument("--suite", action="append", required=True, choices=SUITE_NAMES,
                   help="micro (pointer chase, stream, L2, FMA, host copies), kernels (GEMM, elementwise, "
                        "softmax, layernorm, reduction, attention), library (torch.mm and, for FP8, "
                        "torch._scaled_mm: time and the kernels it ran; needs PyTorch) or block (a Llama "
                        "block's forward and backward in PyTorch beside gpusim's, per kernel class); repeatable")
    p.add_argument("--out", default="measurements", metavar="DIR",
                   help="parent folder; files go to DIR/<gpu>/ (default: measurements)")
    p.add_argument("--hardware", default=None, metavar="NAME_OR_PATH",
                   help="hardware description to plan for (default: the detected GPU's built-in description)")
    p.add_argument("--op", action="append", default=[], metavar="OP", help="only cases of these ops (repeatable)")
    p.add_argument("--repeats", type=int, default=20, help="timed repeats per case (default 20)")
    p.add_argument("--warmups", type=int, default=3, help="untimed launches before the repeats (default 3)")
    p.set_defaults(func=cmd_measure)


def no_gpu_reason() -> str | None:
    """Why no CUDA GPU can be measured here (None when one can). Does not import numba when no
    driver library exists at all."""
    from gpusim.cuda_backend import cuda_driver_library_present, gpu_status, simulator_requested

    if simulator_requested():
        return "Numba's CUDA simulator is enabled (NUMBA_ENABLE_CUDASIM); measure needs real hardware"
    if not cuda_driver_library_present():
        return "no CUDA driver library on this machine"
    ok, reason = gpu_status()
    return None if ok else reason


def _write_csv(path: Path, columns: Iterable[str], rows: list[dict[str, Any]]) -> None:
    columns = list(columns)
    with atomic_output(path) as tmp, tmp.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: _cell(row.get(c, "")) for c in columns})


def _kept_rows(path: Path, new_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of an earlier ``path`` whose cases ``new_rows`` do not measure again."""
    if not path.is_file():
        return []
    replaced = {row["case_id"] for row in new_rows}
    return [row for row in csv.DictReader(io.StringIO(read_text_file(path), newline=""))
            if row.get("case_id") not in replaced]


def _write_rows(path: Path, columns: Iterable[str], rows: list[dict[str, Any]], ops: list[str] | None) -> None:
    """Write ``rows`` to ``path``; an ``--op`` run replaces its own cases' rows and keeps the file's others."""
    _write_csv(path, columns, _kept_rows(path, rows) + rows if ops else rows)


def _check_ops(ops: list[str] | None, cases: Iterable, where: str) -> None:
    """A ConfigError naming the first of ``ops`` that no case has."""
    known = sorted({c.op for c in cases})
    unknown = [op for op in ops or [] if op not in known]
    if unknown:
        raise ConfigError("--op", unknown[0], f"no such op in {where} (ops: {', '.join(known)})")


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_text_file(path, json.dumps(data, indent=2) + "\n")


def execute(suites: list[str], machine, gpu: str, provenance: dict[str, Any], out_dir: Path,
            make_launcher: Callable, timer: Callable, num_warmups: int, num_repeats: int,
            ops: list[str] | None = None, progress: Callable | None = None) -> list[Path]:
    """Run the suites with the given launcher factory and timer; write the files; return their paths."""
    from gpusim.cuda_backend.measure import (KERNEL_COLUMNS, PLAN_COLUMNS, SUITES, TIMING_COLUMNS, kernel_rows,
                                             plan_rows, run_suite, timing_rows)

    written: list[Path] = []
    all_cases = {suite: SUITES[suite](machine) for suite in suites}
    _check_ops(ops, [c for cases in all_cases.values() for c in cases], f"--suite {','.join(suites)}")
    for suite, cases in all_cases.items():
        if ops:
            cases = [c for c in cases if c.op in ops]
        timings = run_suite(cases, make_launcher, timer, num_warmups, num_repeats, progress)
        tables = (
            (out_dir / f"{suite}.csv", KERNEL_COLUMNS, kernel_rows(cases, timings, gpu, provenance)),
            (out_dir / f"{suite}_timings.csv", TIMING_COLUMNS, timing_rows(cases, timings)),
            (out_dir / f"{suite}_plans.csv", PLAN_COLUMNS, plan_rows(cases, timings, machine)),
        )
        for path, columns, rows in tables:
            if rows:
                _write_rows(path, columns, rows, ops)
                written.append(path)
        # one per suite, as the library and block suites write theirs: suites measured in separate
        # runs can share a folder
        path = out_dir / f"{suite}_provenance.json"
        _write_json(path, {**provenance, "suites": [suite]})
        written.append(path)
    return written


def execute_library(probes, machine, gpu: str, provenance: dict[str, Any], out_dir: Path, runner: Callable,
                    num_warmups: int, num_repeats: int, progress: Callable | None = None) -> list[Path]:
    """Run the library probes with ``runner`` (:func:`gpusim.cuda_backend.library.run_library_probes` or a
    stand-in) and write ``library.csv`` and ``library_provenance.json``; return their paths."""
    from gpusim.cuda_backend.library import library_rows
    from gpusim.measurements import KernelCase, columns

    results = runner(probes, num_warmups, num_repeats, provenance.get("l2_bytes") or machine.l2_capacity_bytes,
                     progress)
    path = out_dir / "library.csv"
    _write_csv(path, columns(KernelCase), library_rows(results, gpu, provenance, machine))
    provenance_path = out_dir / "library_provenance.json"
    _write_json(provenance_path, provenance)
    return [path, provenance_path]


def execute_block(probes, hardware_name: str, gpu: str, provenance: dict[str, Any], out_dir: Path,
                  runner: Callable, num_warmups: int, num_repeats: int, progress: Callable | None = None) -> list[Path]:
    """Run the block probes with ``runner`` (:func:`gpusim.cuda_backend.block.run_block_probes` or a
    stand-in), simulate each on ``hardware_name`` and write ``block.csv``, ``block_kernels.csv`` (every
    profiled kernel) and ``block_provenance.json``."""
    from gpusim.cuda_backend.block import BLOCK_COLUMNS, KERNEL_COLUMNS, block_rows, kernel_rows, summary_lines

    results = runner(probes, num_warmups, num_repeats, progress=progress)
    rows = block_rows(results, gpu, hardware_name, provenance)
    for line in summary_lines(rows):
        print(line, file=sys.stderr)
    path = out_dir / "block.csv"
    _write_csv(path, BLOCK_COLUMNS, rows)
    kernels_path = out_dir / "block_kernels.csv"
    _write_csv(kernels_path, KERNEL_COLUMNS, kernel_rows(results, gpu))
    provenance_path = out_dir / "block_provenance.json"
    _write_json(provenance_path, provenance)
    return [path, kernels_path, provenance_path]


def _torch_setup(args: argparse.Namespace, suite: str) -> tuple[dict[str, Any], str, dict[str, Any], Path] | None:
    """(device, description stem, provenance, output folder) for a suite that runs PyTorch; None (after
    saying why in one line) when PyTorch or its GPU is missing."""
    from gpusim.cuda_backend.library import torch_provenance, torch_unavailable_reason
    from gpusim.cuda_backend.measure import base_provenance, folder_name, gpu_stem

    reason = torch_unavailable_reason()
    if reason is not None:
        print(f"gpusim: measure --suite {suite}: {reason}", file=sys.stderr)
        return None
    device = torch_provenance()
    stem = args.hardware or gpu_stem(device["gpu_name"])
    if stem is None:
        raise ConfigError("--hardware", "", f"no built-in description for {device['gpu_name']!r}; pass --hardware NAME")
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    provenance = {**device, **base_provenance(stem, now), "num_warmups": args.warmups, "num_repeats": args.repeats,
                  "suites": [suite]}
    return device, stem, provenance, Path(args.out) / folder_name(device["gpu_name"])


def _cmd_library(args: argparse.Namespace) -> int:
    from gpusim.cuda_backend.library import LIBRARY_PROBES, run_library_probes, supported_probes
    from gpusim.cuda_backend.plans import load_machine

    setup = _torch_setup(args, "library")
    if setup is None:
        return 2
    device, stem, provenance, out_dir = setup

    def progress(probe, result) -> None:
        print(f"{probe.case_id(stem):<44} median {result.median_s:.4g} s  {result.gemm_kernel or ''}", file=sys.stderr)

    probes = supported_probes(LIBRARY_PROBES, device["compute_capability"])
    written = execute_library(probes, load_machine(stem), stem, provenance, out_dir, run_library_probes, args.warmups,
                              args.repeats, progress)
    for path in written:
        print(path)
    return 0


def _cmd_block(args: argparse.Namespace) -> int:
    from gpusim.cuda_backend.block import BLOCK_PROBES, run_block_probes
    from gpusim.cuda_backend.library import has_fp8_tensor_cores

    setup = _torch_setup(args, "block")
    if setup is None:
        return 2
    device, stem, provenance, out_dir = setup
    fp8 = has_fp8_tensor_cores(device["compute_capability"])
    probes = [p for p in BLOCK_PROBES if fp8 or p.precision != "fp8"]

    def progress(probe, result) -> None:
        print(f"{probe.case_id(stem):<60} forward {result.forward_s:.4g} s, step {result.step_s:.4g} s",
              file=sys.stderr)

    written = execute_block(probes, args.hardware or stem, stem, provenance, out_dir, run_block_probes,
                            args.warmups, args.repeats, progress)
    for path in written:
        print(path)
    return 0


def cmd_measure(args: argparse.Namespace) -> int:
    if args.repeats < 1 or args.warmups < 0:
        raise ConfigError("--repeats/--warmups", "", "repeats must be at least 1 and warm-ups at least 0")
    if args.hardware:  # a misspelled name is reported before the search for a GPU
        from gpusim.config.library import load_hardware

        load_hardware(args.hardware)
    torch_suites = [s for s in TORCH_SUITES if s in args.suite]
    if torch_suites:
        if len(set(args.suite)) > 1:
            raise ConfigError("--suite", "", f"{torch_suites[0]} runs PyTorch; run it on its own, not with "
                                             + ", ".join(sorted(set(args.suite) - {torch_suites[0]})))
        return _cmd_library(args) if torch_suites[0] == "library" else _cmd_block(args)
    reason = no_gpu_reason()
    if reason is not None:
        print(f"gpusim: no CUDA GPU found ({reason})", file=sys.stderr)
        return 2
    from gpusim.cuda_backend.measure import (base_provenance, cuda_event_timer, cuda_launcher, device_provenance,
                                             folder_name, gpu_stem)
    from gpusim.cuda_backend.plans import load_machine

    device = device_provenance()
    stem = args.hardware or gpu_stem(device["gpu_name"])
    if stem is None:
        raise ConfigError("--hardware", "", f"no built-in description for {device['gpu_name']!r}; pass --hardware NAME")
    machine = load_machine(stem)
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    provenance = {**device, **base_provenance(stem, now), "num_warmups": args.warmups, "num_repeats": args.repeats,
                  "suites": args.suite}
    out_dir = Path(args.out) / folder_name(device["gpu_name"])

    def progress(case, timing) -> None:
        print(f"{case.case_id:<44} median {timing.median_s:.4g} s  (min {timing.min_s:.4g}, max {timing.max_s:.4g})",
              file=sys.stderr)

    written = execute(args.suite, machine, stem, provenance, out_dir, lambda case: cuda_launcher(case, machine),
                      cuda_event_timer, args.warmups, args.repeats, args.op, progress)
    if "kernels" in args.suite:
        written += _write_kernel_code(machine, device, out_dir, args.op)
    for path in written:
        print(path)
    return 0


def _write_kernel_code(machine, device: dict[str, Any], out_dir: Path, ops: list[str]) -> list[Path]:
    """``kernels_sass.csv`` beside the kernels suite's files (what ``gpusim sass`` writes), compiled
    for the measured device, where numba-cuda and the CUDA toolkit's ptxas and nvdisasm are; else a
    line saying so."""
    from gpusim.cuda_backend.code import CODE_COLUMNS, CannotCompile, code_rows
    from gpusim.cuda_backend.measure import kernels_suite

    major, _, minor = str(device.get("compute_capability", "")).partition(".")
    if not (major.isdigit() and minor.isdigit()):
        print("gpusim: kernels_sass.csv not written (the device reported no compute capability)", file=sys.stderr)
        return []
    cases = [c for c in kernels_suite(machine) if not ops or c.op in ops]
    try:
        rows = code_rows(cases, machine, (int(major), int(minor)))
    except CannotCompile as exc:
        print(f"gpusim: kernels_sass.csv not written ({exc}); gpusim sass writes it where the toolkit is",
              file=sys.stderr)
        return []
    path = out_dir / "kernels_sass.csv"
    _write_rows(path, CODE_COLUMNS, rows, ops)
    return [path]
