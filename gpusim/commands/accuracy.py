"""``gpusim accuracy``: simulate every measured case and report signed error, MAPE and worst cases."""

from __future__ import annotations

import argparse

from gpusim.accuracy import op_group, run_accuracy, summarize
from gpusim.commands.hw import non_negative_int
from gpusim.errors import ConfigError, GpusimError
from gpusim.results.export import announce_written, check_outputs, write_json
from gpusim.units import plural


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("accuracy", help="simulated vs measured: per-case error, MAPE, worst cases",
                       description="Simulate every measured case and compare. Also prints the error of a plain "
                                   "roofline (datasheet peak FLOP/s and DRAM bandwidth) for the same cases.",
                       epilog="Example: gpusim accuracy --reference published --worst 15")
    p.add_argument("--reference", choices=("published",), default="published",
                   help="which reference set to score (default: published measurements)")
    p.add_argument("--measurements", metavar="PATH", action="append", default=[],
                   help="a kernels CSV in the published format (repeatable); default: the built-in dataset")
    p.add_argument("--training-measurements", metavar="PATH",
                   help="a training CSV in the published format for --suite training (e.g. "
                        "measurements/heldout/llmfoundry_h100_sequence_sweep.csv); default: the built-in dataset")
    p.add_argument("--communication-measurements", metavar="PATH",
                   help="a communication CSV in the published format for --suite communication (e.g. "
                        "measurements/heldout/azure_nccl_all_reduce.csv); default: the built-in dataset")
    p.add_argument("--uncalibrated", action="store_true", help="ignore calibration blocks (pure datasheet physics)")
    p.add_argument("--include-excluded", action="store_true", help="also score rows the dataset flags as unreliable")
    p.add_argument("--cross-validate", action="store_true",
                   help="kernels: score every case whose reference helped fit its GPU's calibration with that "
                        "calibration refitted on the other references (leave one source out)")
    p.add_argument("--ignore-kernel-tile", action="store_true",
                   help="let gpusim choose every GEMM's tile, also where a row names the tile of the kernel its "
                        "library ran (the kernel_tile column): the error of gpusim's own tile choice")
    p.add_argument("--workload-set", action="append", default=[], metavar="KEY=VALUE",
                   help="training and heldout suites: apply this workload setting to every training and serving case after its row's "
                        "own (repeatable), e.g. fp8_promotion=overlapped: the error had every run used it")
    p.add_argument("--gpu", action="append", default=[], help="only these hardware stems")
    p.add_argument("--op", action="append", default=[], help="only these op kinds (matmul, stream, ...)")
    p.add_argument("--cases", action="store_true", help="print every case, not only the worst")
    p.add_argument("--worst", type=non_negative_int, default=10, metavar="N", help="how many worst cases to print (default 10)")
    p.add_argument("--json", metavar="PATH", help="write per-case results and summaries as JSON (- for stdout)")
    p.add_argument("--plot", metavar="PATH", help="save a measured-vs-simulated scatter (.png, .svg or .pdf)")
    p.add_argument("--block", metavar="CASE",
                   help="with --suite measured: one block of a block.csv (its case id, with or without the GPU "
                        "prefix), its profiled kernels of class other beside gpusim's, kernel by kernel")
    p.add_argument("--suite", choices=("kernels", "communication", "training", "all", "heldout", "measured"),
                   default="all",
                   help="which measurements: single-GPU kernels, collectives (communication.csv), multi-GPU "
                        "training/inference (training.csv), or all (default; training takes about a minute); "
                        "heldout scores every file of measurements/heldout, none of which the model was fitted "
                        "to, one summary line each (about two minutes); measured scores this project's own "
                        "measurements (measurements/<gpu>/ from gpusim measure), one line per file and op, "
                        "then every block of the block suite simulated again, phase by kernel class")
    p.set_defaults(func=cmd_accuracy)


def _load_cases(paths: list[str], ignore_kernel_tile: bool = False):
    """(cases, exact plans of own-kernel measurements keyed by case id, their compiled code's rows
    keyed the same way); with ``ignore_kernel_tile`` the rows' library tiles are dropped, so gpusim
    picks every tile."""
    from dataclasses import replace

    from gpusim.accuracy import load_code_rows, load_plan_rows
    from gpusim.measurements import load_kernel_cases

    cases, plans, code = [], {}, {}
    for path in paths or [None]:
        loaded = load_kernel_cases(path)
        if not loaded:
            raise ConfigError(str(path), "", "no cases: the file has a header and no rows")
        cases.extend(loaded)
        if path is not None:
            plans.update(load_plan_rows(path))
            code.update(load_code_rows(path))
    if ignore_kernel_tile:
        cases = [replace(c, kernel_tile=None) if c.kernel_tile else c for c in cases]
    return cases, plans, code


def save_scatter(results, destination: str) -> None:
    """Measured vs simulated, one log-log panel per metric (FLOP/s, bytes/s, time, latency), one colour
    per op kind, with the y = x line and the +-25% band."""
    from gpusim.report.plots import new_figure, save_figure

    metrics = sorted({r.metric for r in results})
    fig = new_figure(4.2 * len(metrics), 4.4)
    axes = fig.subplots(1, len(metrics), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        rows = [r for r in results if r.metric == metric]
        lo = min(min(r.measured, r.simulated) for r in rows) / 1.5
        hi = max(max(r.measured, r.simulated) for r in rows) * 1.5
        ax.fill_between([lo, hi], [lo * 0.75, hi * 0.75], [lo * 1.25, hi * 1.25], color="grey", alpha=0.2,
                        label="within 25%")
        ax.plot([lo, hi], [lo, hi], color="black", linewidth=1, label="simulated = measured")
        for group in sorted({op_group(r) for r in rows}):
            sel = [r for r in rows if op_group(r) == group]
            ax.scatter([r.measured for r in sel], [r.simulated for r in sel], s=14, alpha=0.8, label=group)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel(f"measured {metric}")
        ax.set_ylabel(f"simulated {metric}")
        ax.set_title(f"{metric}: {plural(len(rows), 'case')}")
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"gpusim vs measurements ({plural(len(results), 'case')})")
    save_figure(fig, destination, "--plot")
    announce_written(destination)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


SUMMARY_HEADER = f"{'cases':>5} {'MAPE':>7} {'<=10%':>6} {'<=25%':>6} {'worst':>8}  {'roofline MAPE':>13}"


def _summary_cells(s) -> str:
    """A summary's cells under :data:`SUMMARY_HEADER`."""
    roof = "-" if s.roofline_mape_fraction is None else f"{s.roofline_mape_fraction:.1%}"
    return (f"{s.num_cases:5d} {s.mape_fraction:7.1%} {s.within_10_fraction:6.0%} {s.within_25_fraction:6.0%} "
            f"{_pct(s.worst_error_fraction):>8}  {roof:>13}")


def cmd_accuracy(args: argparse.Namespace) -> int:
    asked = getattr(args, "suite", "all")
    if args.measurements and asked not in ("all", "kernels"):
        raise ConfigError("--measurements", args.measurements[0],
                          f"is read by --suite kernels, not --suite {asked}")
    if getattr(args, "training_measurements", None) and asked not in ("all", "training"):
        raise ConfigError("--training-measurements", args.training_measurements, f"is not read by --suite {asked}")
    if getattr(args, "communication_measurements", None) and asked not in ("all", "communication"):
        raise ConfigError("--communication-measurements", args.communication_measurements,
                          f"is not read by --suite {asked}")
    workload_set = getattr(args, "workload_set", [])
    if workload_set and asked not in ("training", "heldout"):
        raise ConfigError("--workload-set", workload_set[0], f"is read by --suite training and heldout, not --suite {asked}")
    for item in workload_set:
        if "=" not in item:
            raise ConfigError("--workload-set", item, "expected KEY=VALUE")
    if workload_set:
        # a key no model workload has would skip every row; say so before simulating any
        from gpusim.workload import load_workload
        try:
            load_workload("gpt2_large_train", list(workload_set))
        except ConfigError as exc:
            raise ConfigError("--workload-set", exc.key_path, exc.message) from None
    # outputs are checked before the (sometimes long) simulation
    check_outputs({"--plot": args.plot or None, "--json": args.json or None},
                  inputs=(*args.measurements, args.training_measurements, args.communication_measurements),
                  figures=("--plot",))
    suite = "kernels" if args.measurements else asked
    if suite == "heldout":
        return _heldout_suite(args)
    if getattr(args, "block", None) and suite != "measured":
        raise GpusimError("accuracy: --block lists a block of --suite measured")
    if suite == "measured":
        return _block_kernels(args.block) if getattr(args, "block", None) else _measured_suite(args)
    if suite in ("communication", "training"):
        if args.cross_validate:
            raise GpusimError(f"accuracy: --cross-validate refits the kernel calibration; --suite {suite} has none")
        return _cluster_suites(args, (suite,))
    if suite != "all":
        return _kernel_suite(args)
    cluster = {s: _run_cluster_suite(args, s) for s in ("communication", "training")}
    rc = _kernel_suite(args, cluster)
    if args.json != "-":
        print()
        _print_cluster_suites(args, cluster)
    return rc


def _heldout_suite(args: argparse.Namespace) -> int:
    """Every held-out file (measurements/heldout), one summary line each: the error on measurements
    nothing was fitted to."""
    from gpusim.accuracy_cluster import run_communication, run_training
    from gpusim.measurements import heldout_files, load_communication_cases, load_training_cases

    if args.cross_validate:
        raise GpusimError("accuracy: --cross-validate refits the calibration on the scored set; --suite heldout "
                          "scores files that are not in it")
    rows = []
    for kind, path in heldout_files():
        if kind == "training":
            results, skipped = run_training(load_training_cases(path), args.include_excluded,
                                            args.workload_set)
        elif kind == "communication":
            results, skipped = run_communication(load_communication_cases(path), args.include_excluded)
        else:
            cases, plans, code = _load_cases([str(path)], getattr(args, "ignore_kernel_tile", False))
            if args.gpu:
                cases = [c for c in cases if c.gpu in args.gpu]
            results, skipped = run_accuracy(cases, calibrated=not args.uncalibrated,
                                            include_excluded=args.include_excluded, plan_rows=plans,
                                            code_rows=code)
        summary = summarize(results)[0] if results else None
        rows.append((path.name, kind, results, skipped, summary))
    if args.json:
        write_json({name: {"kind": kind, "num_cases": len(results), "num_skipped": len(skipped),
                           "summary": summary.__dict__ if summary else None,
                           "gpus": sorted({getattr(r, "gpu", "") for r in results} - {""})}
                    for name, kind, results, skipped, summary in rows}, args.json)
        if args.json == "-":
            return 0
    if args.workload_set:
        print(f"training files: every row with {' '.join(args.workload_set)}")
    print(f"{'held-out file':<40} {SUMMARY_HEADER}")
    for name, _kind, _results, skipped, s in rows:
        if s is None:
            print(f"{name[:40]:<40} {0:5d}  (nothing scored: {len(skipped)} skipped)")
            continue
        print(f"{name[:40]:<40} {_summary_cells(s)}")
    return 0


def _measured_suite(args: argparse.Namespace) -> int:
    """Every file ``gpusim measure`` wrote into measurements/<gpu>/, one summary line per file and op:
    the error on real runs of the cuBLAS products, microbenchmarks and gpusim's own kernels."""
    from gpusim.measurements import own_measurement_files

    if args.cross_validate:
        raise GpusimError("accuracy: --cross-validate refits the calibration on the published set; --suite measured "
                          "scores files that are not in it")
    rows = []
    for path in own_measurement_files():
        cases, plans, code = _load_cases([str(path)], getattr(args, "ignore_kernel_tile", False))
        cases = [c for c in cases if (not args.gpu or c.gpu in args.gpu) and (not args.op or c.op in args.op)]
        results, skipped = run_accuracy(cases, calibrated=not args.uncalibrated,
                                        include_excluded=args.include_excluded, plan_rows=plans, code_rows=code)
        for summary in summarize(results, key=lambda r: r.op):
            rows.append((f"{path.parent.name}/{path.name}", summary, len(skipped)))
    blocks = [] if args.op or args.uncalibrated else _block_rows(args.gpu)
    if args.json:
        write_json({"files": [{"file": name, "op": s.group, "file_num_skipped": n, "summary": s.__dict__}
                              for name, s, n in rows],
                    "blocks": blocks}, args.json)
        if args.json == "-":
            return 0
    if not rows and not blocks:
        print("no own measurements found (gpusim measure writes them to measurements/<gpu>/)")
        return 0
    print(f"{'file':<34} {'op':<14} {SUMMARY_HEADER}")
    for name, s, _ in rows:
        print(f"{name[:34]:<34} {s.group[:14]:<14} {_summary_cells(s)}")
    if blocks:
        print("\nblock.csv, each block simulated again with the model as it is now (time in s):")
        print(f"{'gpu / case':<66} {'phase':<9} {'class':<10} {'measured':>10} {'simulated':>10} {'error':>8}")
        for r in blocks:
            error = "" if r["error_fraction"] is None else f"{r['error_fraction']:+.1%}"
            case = r["case_id"].removeprefix(f"{r['gpu']}_")
            print(f"{(r['gpu'] + ' ' + case)[:66]:<66} {r['phase']:<9} {r['kernel_class']:<10} "
                  f"{r['measured_s']:10.4g} {r['simulated_s']:10.4g} {error:>8}")
    return 0


def _block_kernels(case: str) -> int:
    """``--suite measured --block CASE``: the block's profiled kernels of class ``other`` beside the
    ones gpusim simulates for it, per phase, in launch order (:func:`gpusim.cuda_backend.block.block_kernel_listing`)."""
    from itertools import zip_longest

    from gpusim.cuda_backend.block import block_kernel_listing
    from gpusim.measurements import own_measurement_files

    errors = []
    for path in own_measurement_files(("block.csv",)):
        try:
            listing = block_kernel_listing(path, case)
        except GpusimError as exc:
            errors.append(str(exc))
            continue
        break
    else:
        raise GpusimError(f"accuracy: --block {case}: " + ("; ".join(errors) or "no block.csv among the own measurements"))
    print(f"{case} ({path.parent.name}/{path.name}), kernels of class other, time in us:")
    for phase, measured, simulated in listing:
        total_m, total_s = sum(t for _, t in measured) * 1e6, sum(t for _, t in simulated) * 1e6
        print(f"\n{phase}: measured {len(measured)} kernels, {total_m:.1f} us; gpusim {len(simulated)} kernels, "
              f"{total_s:.1f} us ({(total_s - total_m) / total_m:+.1%})")
        print(f"  {'measured (profile)':<58} {'us':>7}   {'gpusim (node)':<40} {'us':>7}")
        for m, g in zip_longest(measured, simulated):
            left = f"{m[0][:58]:<58} {m[1] * 1e6:7.1f}" if m else " " * 66
            right = f"{g[0][:40]:<40} {g[1] * 1e6:7.1f}" if g else ""
            print(f"  {left}   {right}".rstrip())
    return 0


def _block_rows(gpus) -> list[dict]:
    """Every own ``block.csv`` row of ``gpus`` (all when empty), re-simulated
    (:func:`gpusim.cuda_backend.block.resimulated_rows`), each with its file."""
    from gpusim.cuda_backend.block import resimulated_rows
    from gpusim.measurements import own_measurement_files

    return [{"file": f"{path.parent.name}/{path.name}", **r} for path in own_measurement_files(("block.csv",))
            for r in resimulated_rows(path) if not gpus or r["gpu"] in gpus]


def _run_cluster_suite(args: argparse.Namespace, suite: str):
    from gpusim.accuracy_cluster import run_communication, run_training
    from gpusim.measurements import load_communication_cases, load_training_cases

    if suite == "communication":
        return run_communication(load_communication_cases(getattr(args, "communication_measurements", None)),
                                 args.include_excluded)
    return run_training(load_training_cases(getattr(args, "training_measurements", None)), args.include_excluded,
                        getattr(args, "workload_set", ()))


def _cluster_json(out: dict) -> dict:
    return {suite: {"cases": [{"case_id": r.case_id, "metric": r.metric, "measured": r.measured,
                               "simulated": r.simulated, "signed_error_fraction": r.signed_error_fraction,
                               "note": r.note, "source": r.source} for r in res],
                    "skipped": [s.__dict__ for s in sk]} for suite, (res, sk) in out.items()}


def _cluster_suites(args: argparse.Namespace, suites: tuple[str, ...]) -> int:
    """Collectives and multi-GPU end-to-end cases (gpusim.accuracy_cluster): the tables (unless the JSON
    goes to stdout) and the JSON."""
    out = {suite: _run_cluster_suite(args, suite) for suite in suites}
    if args.json != "-":
        _print_cluster_suites(args, out)
    if args.json:
        write_json(_cluster_json(out), args.json)
    return 0


def _print_cluster_suites(args: argparse.Namespace, out: dict) -> None:
    from gpusim.accuracy_cluster import source_group

    for suite, (results, skipped) in out.items():
        source = getattr(args, f"{suite}_measurements", None)
        overrides = getattr(args, "workload_set", []) if suite == "training" else []
        print(f"{suite} ({source or ('communication.csv' if suite == 'communication' else 'training.csv')})"
              + (f", every row with {' '.join(overrides)}" if overrides else "") + ":")
        print(f"{'case':<52} {'metric':<20} {'measured':>11} {'simulated':>11} {'error':>8}  note")
        for r in results:
            print(f"{r.case_id[:52]:<52} {r.metric:<20} {r.measured:11.4g} {r.simulated:11.4g} "
                  f"{_pct(r.signed_error_fraction):>8}  {r.note}")
        groups = summarize(results) + summarize(results, lambda r: r.op)
        if suite == "training":
            groups += summarize(results, source_group)
        for s in groups:
            print(f"  {s.group:<40} {s.num_cases:4d} cases  MAPE {s.mape_fraction:6.1%}  <=10% {s.within_10_fraction:4.0%}"
                  f"  <=25% {s.within_25_fraction:4.0%}  worst {_pct(s.worst_error_fraction)}")
        if skipped:
            print(f"  skipped {_skipped_line(skipped)}")
        print()


def _kernel_suite(args: argparse.Namespace, cluster: dict | None = None) -> int:
    """The single-GPU kernel cases; ``cluster`` (suite -> results, skipped), when given, goes into the JSON
    too (``--suite all --json``)."""
    cases, plan_rows, code_rows = _load_cases(args.measurements, getattr(args, "ignore_kernel_tile", False))
    all_cases = cases
    for flag, values, attr in (("--gpu", args.gpu, "gpu"), ("--op", args.op, "op")):
        known = {getattr(c, attr) for c in all_cases}
        unknown = [v for v in values if v not in known]
        if unknown:
            raise ConfigError(flag, unknown[0], f"no case has it (the measurements have: {', '.join(sorted(known))})")
    if args.gpu:
        cases = [c for c in cases if c.gpu in args.gpu]
    if args.op:
        cases = [c for c in cases if c.op in args.op]
    results, skipped = run_accuracy(cases, calibrated=not args.uncalibrated, include_excluded=args.include_excluded,
                                    plan_rows=plan_rows, code_rows=code_rows)
    cross_note = ""
    if args.cross_validate:
        if args.uncalibrated:
            raise GpusimError("accuracy: --cross-validate refits the calibration; it cannot go with --uncalibrated")
        from gpusim.calibration import CV_DATASHEET, CV_REFIT, leave_one_source_out

        in_sample = {r.case_id: r for r in results}
        results = leave_one_source_out(all_cases, results)

        def mape(rs) -> float:
            return summarize(rs)[0].mape_fraction if rs else 0.0

        lines = [f"leave one source out ({len(results)} cases; MAPE out of sample / in sample):"]
        for note in (CV_REFIT, CV_DATASHEET):
            group = [r for r in results if r.note == note]
            lines.append(f"  {len(group):4d} whose reference helped fit their calibration, {note}: "
                         f"{mape(group):.1%} / {mape([in_sample[r.case_id] for r in group]):.1%}")
        rest = [r for r in results if r.note not in (CV_REFIT, CV_DATASHEET)]
        lines.append(f"  {len(rest):4d} from references that fitted nothing they use: unchanged, {mape(rest):.1%}")
        cross_note = "\n".join(lines)
    if args.plot and results:
        save_scatter(results, args.plot)
    from gpusim.accuracy_cluster import source_group

    by_kind = summarize(results, op_group)
    by_gpu = summarize(results, lambda r: r.gpu)
    by_op = summarize(results, lambda r: f"{r.gpu}/{r.op}")
    by_source = summarize(results, source_group)
    overall = summarize(results)
    if args.json:
        payload = {
            "cases": [{"case_id": r.case_id, "gpu": r.gpu, "op": r.op, "metric": r.metric, "measured": r.measured,
                       "simulated": r.simulated, "signed_error_fraction": r.signed_error_fraction,
                       "roofline": r.roofline, "roofline_error_fraction": r.roofline_error_fraction,
                       "source": r.source} for r in results],
            "skipped": [s.__dict__ for s in skipped],
            "summary": {s.group: s.__dict__ for s in overall + by_kind},
            "by_gpu": {s.group: s.__dict__ for s in by_gpu},
            "by_source": {s.group: s.__dict__ for s in by_source},
        }
        if cross_note:
            payload["cross_validation"] = cross_note
        if cluster:
            payload.update(_cluster_json(cluster))
        write_json(payload, args.json)
        if args.json == "-":
            return 0
    rows = sorted(results, key=lambda r: abs(r.signed_error_fraction), reverse=True)
    shown = rows if args.cases else rows[: args.worst]
    if cross_note:
        print(cross_note + "\n")
    print(f"{'case':<44} {'metric':<11} {'measured':>11} {'simulated':>11} {'error':>8} {'roofline':>9}")
    for r in shown:
        print(f"{r.case_id[:44]:<44} {r.metric:<11} {r.measured:11.4g} {r.simulated:11.4g} "
              f"{_pct(r.signed_error_fraction):>8} {_pct(r.roofline_error_fraction):>9}")
    print()
    header = f"{'group':<34} {SUMMARY_HEADER}"
    for title, summaries in (("by op kind", overall + by_kind), ("by GPU", by_gpu), ("by source", by_source),
                             ("by GPU and op", by_op)):
        print(f"{title}:")
        print(header)
        for s in summaries:
            print(f"{s.group[:34]:<34} {_summary_cells(s)}")
        print()
    if skipped:
        print(f"skipped: {_skipped_line(skipped)}")
    return 0


def _skipped_line(skipped) -> str:
    """``3 no such hardware (a, b, c); 1 ...``: the skipped cases by reason, naming up to three of each."""
    by_reason: dict[str, list[str]] = {}
    for s in skipped:
        by_reason.setdefault(s.reason, []).append(s.case_id)
    parts = []
    for reason, ids in sorted(by_reason.items()):
        named = ", ".join(ids[:3]) + (f", ... {len(ids) - 3} more" if len(ids) > 3 else "")
        parts.append(f"{len(ids)} {reason} ({named})")
    return "; ".join(parts)
