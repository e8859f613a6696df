"""``gpusim sweep HW WORKLOAD --grid KEY=V1,V2 ...``: a design-space sweep on a Dask cluster."""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from gpusim.commands.hw import add_launch_argument
from gpusim.errors import ConfigError, KeyPathError
from gpusim.units import plural


def register(sub: argparse._SubParsersAction) -> None:
    from gpusim.commands.run import add_energy_arguments

    p = sub.add_parser(
        "sweep", help="simulate a grid (or random samples) of hardware/workload variants on Dask",
        description="Simulate WORKLOAD on HW for every combination of --grid values (or --random N samples "
                    "of --range intervals). Keys address the hardware (gpu.*, cpu.*, num_nodes, ...) or the "
                    "workload (batch_size, config.num_layers, ...), values may carry units. Points run on a "
                    "local Dask cluster (one worker process per core) or on --scheduler ADDRESS. Rows are "
                    "appended to --out as they finish; --resume finishes an interrupted sweep. A point whose "
                    "configuration is invalid is recorded with its error.",
        epilog="Example: gpusim sweep h100_sxm5_80gb gpt3_175b_train --set config.num_layers=1 "
               "--grid gpu.dram.bandwidth_bytes_per_s=2TB/s,3.35TB/s,5TB/s --grid batch_size=4,8 "
               "--out sweep.csv")
    p.add_argument("hardware", metavar="HW")
    p.add_argument("workload", metavar="WORKLOAD")
    p.add_argument("--grid", action="append", default=[], metavar="KEY.PATH=V1,V2,...",
                   help="values of one parameter; several --grid give their product")
    p.add_argument("--random", type=int, metavar="N", help="N random points instead of the grid product")
    p.add_argument("--range", dest="ranges", action="append", default=[], metavar="KEY=LO..HI",
                   help="interval sampled by --random (uniform; KEY=log:LO..HI for log-uniform)")
    p.add_argument("--seed", type=int, default=0, help="random seed for --random (default 0)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="an override applied to every point")
    p.add_argument("--out", default="sweep.csv", metavar="PATH",
                   help="results file, .csv (default sweep.csv) or .parquet (needs pyarrow; the CSV journal "
                        "PATH.csv is kept for --resume)")
    p.add_argument("--resume", action="store_true", help="keep the rows already in --out, compute the rest")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="an existing Dask scheduler (tcp://host:8786); default: a local cluster")
    p.add_argument("--workers", type=int, metavar="N", help="local cluster size (default: one per core)")
    add_launch_argument(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_energy_arguments(p)
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> int:
    from gpusim.commands.run import energy_options, input_files
    from gpusim.config import load_hardware
    from gpusim.config.loader import parse_set_items
    from gpusim.results.export import check_output_path
    from gpusim.sweep import ResultsJournal, columns_for, grid_points, parse_grid, parse_ranges, random_points, \
        run_sweep, split_params, write_parquet
    from gpusim.workload import load_workload

    try:
        import distributed  # noqa: F401
    except ImportError:
        raise ConfigError("gpusim sweep", "", "needs Dask: pip install 'dask[distributed]'") from None
    # a description given as a file path travels to the workers as an absolute path
    for attr in ("hardware", "workload"):
        value = getattr(args, attr)
        if (value.endswith((".yaml", ".yml")) or "/" in value) and Path(value).is_file():
            setattr(args, attr, str(Path(value).resolve()))
    fixed = [(k, str(v)) for k, v in parse_set_items(args.overrides)]
    grid = parse_grid(args.grid)
    ranges = parse_ranges(args.ranges)
    if args.random is not None:
        if not ranges and not grid:
            raise ConfigError("--random", "", "give at least one --range (or --grid) to sample")
        points = random_points(args.hardware, args.workload, ranges, args.random, args.seed, grid, fixed)
    else:
        if ranges:
            raise ConfigError("--range", args.ranges[0], "ranges are sampled with --random N")
        if not grid:
            raise ConfigError("gpusim sweep", "", "give at least one --grid KEY=V1,V2,... (or --random N --range ...)")
        points = grid_points(args.hardware, args.workload, grid, fixed)
    fixed_keys = {k for k, _ in fixed}
    clash = [k for k, _ in grid if k in fixed_keys] + [r.key for r in ranges if r.key in fixed_keys]
    if clash:
        raise ConfigError("--set", clash[0], "is also swept")
    if args.resume and args.overwrite:
        raise ConfigError("command line", "--resume", "keeps the rows in --out; --overwrite replaces them: give one")
    if args.workers is not None and args.workers < 1:
        raise ConfigError("command line", "--workers", f"must be at least 1, got {args.workers}")
    # what every point shares is checked once here: a misspelled name, a missing file or a bad --set
    # stops the sweep before --out is touched, instead of failing every point
    hw_fixed, wl_fixed = split_params(fixed)
    load_hardware(args.hardware, hw_fixed)
    load_workload(args.workload, wl_fixed)
    # so is a swept key the description does not have (every point would fail on it); a bad value of
    # a real key fails only its own points, as an error row
    swept = [("--grid", key, values[0]) for key, values in grid]
    swept += [("--range", r.key, r.sample(random.Random(args.seed))) for r in ranges]
    for flag, key, value in swept:
        try:
            hw_items, wl_items = split_params([*fixed, (key, value)])
            load_hardware(args.hardware, hw_items)
            load_workload(args.workload, wl_items)
        except KeyPathError as exc:
            raise ConfigError(flag, exc.key_path or key, exc.message) from None
        except ConfigError:
            pass  # a bad value of a real key fails only its own points
    options = energy_options(args)
    options["launch_mode"] = args.launch

    check_output_path(args.out, flag="--out")  # an empty path before it becomes "."
    out = Path(args.out)
    parquet = out.suffix.lower() == ".parquet"
    if parquet:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConfigError(str(out), "", "writing Parquet needs pyarrow (pip install pyarrow); use a .csv "
                                            "--out") from None
    journal_path = out.with_name(out.name + ".csv") if parquet else out
    read = input_files([args.hardware], args.workload)
    for path in {out, journal_path}:
        check_output_path(path, flag="--out", inputs=read)
    journal = ResultsJournal(journal_path, columns_for(points))

    client = _client(args)
    bar = None if args.no_progress else ProgressBar()
    try:
        where = args.scheduler or f"a local cluster of {plural(len(client.scheduler_info()['workers']), 'worker')}"
        print(f"sweep: {plural(len(points), 'point')} on {where}, results to {journal_path}", file=sys.stderr)
        summary = run_sweep(client, points, journal, resume=args.resume, overwrite=args.overwrite,
                            options=options, progress=bar.update if bar else None)
    finally:
        if bar:
            bar.close()
        _close(client, args)
    if parquet:
        write_parquet(journal_path, out)
    rate = summary.num_computed / summary.wall_s if summary.wall_s > 0 else 0.0
    print(f"{plural(summary.num_points, 'point')}: {summary.num_computed} computed ({rate:.1f}/s), "
          f"{summary.num_skipped} already done, {summary.num_errors} with errors; results in {out}")
    if summary.first_error:
        print(f"first error: {summary.first_error}", file=sys.stderr)
    if summary.num_computed and summary.num_errors == summary.num_computed:
        # nothing of the design space ran: as bad an input as a misspelled key (a key of the grid the
        # description does not have, a value no point accepts)
        print("gpusim: sweep: every point failed (see the first error above)", file=sys.stderr)
        return 2
    if summary.num_failed:
        print(f"{plural(summary.num_failed, 'point')} could not finish (workers kept dying); run again with --resume",
              file=sys.stderr)
        return 1
    return 0


def _client(args):
    from distributed import Client

    from gpusim.sweep import local_client

    if args.scheduler:
        try:
            return Client(args.scheduler, timeout="20s")
        except OSError as exc:
            raise ConfigError("--scheduler", args.scheduler, f"cannot connect: {exc}") from None
        except (ValueError, TypeError) as exc:  # not an address: no port, an unknown scheme
            raise ConfigError("--scheduler", args.scheduler, f"not a scheduler address ({exc}); "
                                                             "give one like tcp://HOST:8786") from None
    return local_client(args.workers)


def _close(client, args) -> None:
    cluster = client.cluster if not args.scheduler else None
    client.close()
    if cluster is not None:
        cluster.close()


class ProgressBar:
    """A one-line progress bar on stderr: done/total, rate, time left."""

    def __init__(self, width: int = 30, stream=None):
        self.width = width
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.first_done: int | None = None
        self.errors = 0
        self.last_draw = 0.0

    def update(self, done: int, total: int, row: dict) -> None:
        if self.first_done is None:
            self.first_done = done
            self.start = time.perf_counter()
        if row.get("error"):
            self.errors += 1
        now = time.perf_counter()
        if done < total and now - self.last_draw < 0.2:
            return
        self.last_draw = now
        elapsed = now - self.start
        fresh = done - self.first_done
        rate = fresh / elapsed if elapsed > 0 else 0.0
        left = (total - done) / rate if rate > 0 else float("nan")
        filled = int(self.width * done / total) if total else self.width
        text = (f"\r[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} points, {rate:.1f}/s"
                f"{f', {left:.0f} s left' if left == left else ''}"
                f"{', ' + plural(self.errors, 'error') if self.errors else ''}")
        self.stream.write(text)
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()
