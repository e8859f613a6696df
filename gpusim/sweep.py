"""Design-space sweeps: many (hardware, workload) variants simulated in parallel on a Dask cluster.

A sweep is a list of *points*; each point is a set of ``KEY.PATH=VALUE`` overrides (hardware keys such
as ``gpu.dram.bandwidth_bytes_per_s`` and workload keys such as ``batch_size``), from the product of
grids or from random samples of ranges. :func:`evaluate_point` is a pure function of a point: it loads
the hardware and the workload with the overrides, simulates, adds energy, power and cost, and returns a
flat dict of metrics. A point whose overrides fail validation (or that cannot be simulated) returns
its one-line error in the ``error`` column instead of metrics; it never stops the sweep.

Execution (:func:`run_sweep`) submits one Dask task per point with ``client.map`` (explicit, stable
task keys and ``retries``) and consumes them with ``as_completed``. Tasks of a worker that dies are
rescheduled by the Dask scheduler onto the others (and ``retries`` covers a task that raised while its
worker was going down), so no point is lost; each completed point is written once, keyed by its stable
point key, so none is duplicated. Results are appended to a CSV journal as they arrive;
:class:`ResultsJournal` reads an interrupted journal back so a resumed sweep computes only the points
that are missing.

Library code: nothing here prints. The CLI (:mod:`gpusim.commands.sweep`) owns the cluster, the
progress bar and the files.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import logging
import math
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from gpusim.config.loader import read_text_file
from gpusim.errors import ConfigError, GpusimError
from gpusim.runner import route_key

SWEEP_SOURCE = "sweep"

METRICS = (
    "total_time_s", "step_time_s", "samples_per_s", "tokens_per_s", "mfu_fraction",
    "energy_j", "avg_power_w", "peak_power_w", "flop_per_j", "clock_fraction_min",
    "cost_usd", "tokens_per_usd", "samples_per_usd",
    "peak_memory_bytes", "fits_in_memory", "num_gpus",
)
"""The metric columns of every sweep row, in order (empty where not applicable or on error)."""

FIXED_COLUMNS = ("point_key", "hardware", "workload")


# --------------------------------------------------------------------------------------- points


@dataclass(frozen=True)
class SweepPoint:
    hardware: str
    workload: str
    params: tuple[tuple[str, str], ...]
    """(key, value as written) pairs, in the order of the sweep's parameters."""

    @property
    def key(self) -> str:
        """Stable identity of the point: the same hardware, workload and overrides give the same key
        in every run (it is what --resume matches)."""
        text = "\n".join([self.hardware, self.workload] + [f"{k}={v}" for k, v in sorted(self.params)])
        return hashlib.sha256(text.encode()).hexdigest()[:20]


def parse_grid(items: Sequence[str]) -> list[tuple[str, list[str]]]:
    """``KEY.PATH=V1,V2,...`` strings -> [(key, [values])]."""
    out: list[tuple[str, list[str]]] = []
    for item in items:
        key, values = _split_item(item, "--grid", "KEY.PATH=V1,V2,...")
        parts = [v.strip() for v in values.split(",")]
        if any(not p for p in parts):
            raise ConfigError("--grid", key, f"empty value in {values!r}")
        out.append((key, parts))
    _no_duplicates([k for k, _ in out])
    return out


_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$")


@dataclass(frozen=True)
class Range:
    key: str
    low: float
    high: float
    unit: str
    integer: bool
    log: bool = False

    def sample(self, rng: random.Random) -> str:
        if self.log:
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = rng.uniform(self.low, self.high)
        if self.integer:
            return str(int(round(value)))
        return f"{value:.6g}{(' ' + self.unit) if self.unit else ''}"


def parse_ranges(items: Sequence[str]) -> list[Range]:
    """``KEY=LO..HI`` strings (``gpu.dram.bandwidth_bytes_per_s=2TB/s..5TB/s``, ``batch_size=1..64``;
    ``KEY=log:LO..HI`` samples log-uniformly) -> ranges. Both ends carry the same unit (or the high end
    none, taking the low end's); integers at both ends sample integers."""
    out = []
    for item in items:
        key, text = _split_item(item, "--range", "KEY=LO..HI")
        log = text.startswith("log:")
        if log:
            text = text[4:]
        if ".." not in text:
            raise ConfigError("--range", key, f"expected LO..HI, got {text!r}")
        lo_text, hi_text = text.split("..", 1)
        lo, hi = _QUANTITY.match(lo_text), _QUANTITY.match(hi_text)
        if not lo or not hi:
            raise ConfigError("--range", key, f"expected numbers with an optional unit, got {text!r}")
        unit_lo, unit_hi = lo.group(2), hi.group(2) or lo.group(2)
        if unit_lo != unit_hi:
            raise ConfigError("--range", key, f"both ends need the same unit ({unit_lo!r} vs {unit_hi!r})")
        low, high = float(lo.group(1)), float(hi.group(1))
        if not low < high:
            raise ConfigError("--range", key, f"low end {lo_text} is not below high end {hi_text}")
        if log and low <= 0:
            raise ConfigError("--range", key, "a log range needs a positive low end")
        integer = not unit_lo and _is_int(lo.group(1)) and _is_int(hi.group(1))
        out.append(Range(key, low, high, unit_lo, integer, log))
    _no_duplicates([r.key for r in out])
    return out


def _is_int(text: str) -> bool:
    return re.fullmatch(r"[-+]?\d+", text) is not None


def _split_item(item: str, flag: str, form: str) -> tuple[str, str]:
    if "=" not in item:
        raise ConfigError(flag, item, f"expected {form}")
    key, _, values = item.partition("=")
    key = key.strip()
    if not key or any(not p for p in key.split(".")) or not values.strip():
        raise ConfigError(flag, item, f"expected {form}")
    return key, values.strip()


def _no_duplicates(keys: Sequence[str]) -> None:
    seen = set()
    for k in keys:
        if k in seen:
            raise ConfigError(SWEEP_SOURCE, k, "given twice")
        seen.add(k)


def grid_points(hardware: str, workload: str, grid: Sequence[tuple[str, Sequence[str]]],
                fixed: Sequence[tuple[str, str]] = ()) -> list[SweepPoint]:
    """The product of the grids (first grid varies slowest), each with the ``fixed`` overrides too."""
    keys = [k for k, _ in grid]
    points = []
    for combo in itertools.product(*[values for _, values in grid]):
        points.append(SweepPoint(hardware, workload, tuple(fixed) + tuple(zip(keys, combo))))
    return points


def random_points(hardware: str, workload: str, ranges: Sequence[Range], num_points: int, seed: int = 0,
                  grid: Sequence[tuple[str, Sequence[str]]] = (), fixed: Sequence[tuple[str, str]] = ()
                  ) -> list[SweepPoint]:
    """``num_points`` samples: range keys uniformly (or log-uniformly), grid keys uniformly among their
    values. Deterministic for a given ``seed``; repeated samples are kept once."""
    if num_points < 1:
        raise ConfigError("--random", str(num_points), "needs at least 1 point")
    rng = random.Random(seed)
    points: dict[str, SweepPoint] = {}
    for _ in range(num_points):
        params = list(fixed)
        params += [(k, rng.choice(list(values))) for k, values in grid]
        params += [(r.key, r.sample(rng)) for r in ranges]
        p = SweepPoint(hardware, workload, tuple(params))
        points.setdefault(p.key, p)
    return list(points.values())


def param_keys(points: Sequence[SweepPoint]) -> list[str]:
    keys: list[str] = []
    for p in points:
        for k, _ in p.params:
            if k not in keys:
                keys.append(k)
    return keys


# --------------------------------------------------------------------------------------- one point


def split_params(params: Iterable[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """(hardware items, workload items) as ``KEY=VALUE`` strings, routed by :func:`route_key`."""
    hw, wl = [], []
    for key, value in params:
        is_hardware, key = route_key(key)
        (hw if is_hardware else wl).append(f"{key}={value}")
    return hw, wl


def simulate_point(hardware_name: str, workload_name: str, params: Iterable[tuple[str, str]],
                   options: Mapping[str, Any] | None = None):
    """Load, simulate (the engine ``gpusim run`` would pick) and add energy/cost: a SimulationResult."""
    from gpusim.energy import with_energy
    from gpusim.runner import load_and_simulate

    options = dict(options or {})
    hw_items, wl_items = split_params(params)
    hardware, result = load_and_simulate(hardware_name, workload_name, hw_items, wl_items,
                                         launch_mode=options.get("launch_mode", "eager"))
    return with_energy(result, hardware, power_cap=options.get("power_cap", True),
                       tdp_w=options.get("tdp_w"), price_usd_per_s=options.get("price_usd_per_s"))


def evaluate_point(hardware_name: str, workload_name: str, params: Sequence[tuple[str, str]],
                   options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One sweep row: the point's identity, its parameters and its metrics (or its error).

    Pure: the same arguments give the same row on any worker."""
    point = SweepPoint(hardware_name, workload_name, tuple((k, str(v)) for k, v in params))
    row: dict[str, Any] = {"point_key": point.key, "hardware": hardware_name, "workload": workload_name}
    row.update({k: v for k, v in point.params})
    row.update({m: None for m in METRICS})
    row["error"] = None
    try:
        result = simulate_point(hardware_name, workload_name, point.params, options)
    except GpusimError as exc:
        row["error"] = " ".join(str(exc).split())
        return row
    except Exception as exc:  # a bug must not sink a 1,000-point study; it is recorded, not hidden
        row["error"] = " ".join(f"internal error: {type(exc).__name__}: {exc}".split())
        return row
    row.update(metrics_of(result))
    return row


def metrics_of(result) -> dict[str, Any]:
    """The METRICS of a SimulationResult (with energy and cost filled in)."""
    devices = max(1, int(result.num_gpus or 1))
    out = {
        "total_time_s": result.total_time_s,
        "step_time_s": result.step_time_s,
        "samples_per_s": result.samples_per_s,
        "tokens_per_s": result.tokens_per_s,
        "mfu_fraction": result.mfu_fraction,
        "energy_j": result.energy_j,
        "avg_power_w": result.avg_power_w,
        "peak_power_w": result.peak_power_w,
        "flop_per_j": result.flop_per_j,
        "clock_fraction_min": result.clock_fraction_min,
        "cost_usd": result.cost_usd,
        "tokens_per_usd": None,
        "samples_per_usd": None,
        "peak_memory_bytes": result.peak_memory_bytes,
        "fits_in_memory": bool(result.fits_in_memory),
        "num_gpus": devices,
    }
    if result.price_usd_per_s:
        rate = result.price_usd_per_s * devices
        if result.tokens_per_s:
            out["tokens_per_usd"] = result.tokens_per_s / rate
        if result.samples_per_s:
            out["samples_per_usd"] = result.samples_per_s / rate
    return out


# --------------------------------------------------------------------------------------- results file


def columns_for(points: Sequence[SweepPoint]) -> list[str]:
    return list(FIXED_COLUMNS) + param_keys(points) + list(METRICS) + ["error"]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # round-trips exactly
    return str(value)


class ResultsJournal:
    """An append-only CSV of sweep rows, flushed after every row, readable after an interruption.

    ``open(resume=True)`` keeps the complete rows already there (a half-written last line or a duplicate
    is dropped), rewrites the file with them, and reports the keys of this sweep's points among them so
    only the missing points are computed."""

    def __init__(self, path: Path | str, columns: Sequence[str]):
        self.path = Path(path)
        self.columns = list(columns)
        self._file = None
        self._writer = None

    def open(self, *, resume: bool, overwrite: bool, valid_keys: set[str]) -> set[str]:
        done: dict[str, list[str]] = {}
        if self.path.exists() and self.path.stat().st_size > 0:
            if not resume and not overwrite:
                raise ConfigError(str(self.path), "", "results file exists; use --resume to finish it or "
                                                      "--overwrite to start again")
            if resume:
                done = self._read_existing(valid_keys)
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(self.columns)
            for row in done.values():
                w.writerow(row)
        os.replace(tmp, self.path)
        self._file = open(self.path, "a", newline="")
        self._writer = csv.writer(self._file)
        return set(done) & valid_keys

    def _read_existing(self, valid_keys: set[str]) -> dict[str, list[str]]:
        with open(self.path, newline="") as f:
            text = f.read()
        complete = text if text.endswith("\n") else text[: text.rfind("\n") + 1]  # drop a torn last line
        rows = list(csv.reader(complete.splitlines()))
        if not rows:
            return {}
        header, body = rows[0], rows[1:]
        if header != self.columns:
            raise ConfigError(str(self.path), "", "this results file has other columns (another sweep?); "
                                                  "use a new --out or --overwrite")
        done: dict[str, list[str]] = {}
        for row in body:
            if len(row) == len(header):  # complete rows only; rows of other points are kept, not counted
                done.setdefault(row[0], row)
        return done

    def append(self, row: Mapping[str, Any]) -> None:
        self._writer.writerow([_cell(row.get(c)) for c in self.columns])
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_results(path: Path | str) -> list[dict[str, str]]:
    """Rows of a results file (CSV, or Parquet when pyarrow is installed) as dicts of strings."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(str(path), "", "no such results file")
    if path.suffix.lower() == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ConfigError(str(path), "", "reading Parquet needs pyarrow (pip install pyarrow); "
                                             "or read the CSV journal next to it") from None
        table = pq.read_table(path).to_pylist()
        return [{k: _cell(v) for k, v in r.items()} for r in table]
    reader = csv.DictReader(io.StringIO(read_text_file(path), newline=""))
    if "point_key" not in (reader.fieldnames or ()):
        raise ConfigError(str(path), "", "not a sweep results file (no point_key column; `gpusim sweep --out` writes one)")
    rows = list(reader)
    for number, row in enumerate(rows, start=2):
        if None in row:  # DictReader keeps the cells past the header under None
            raise ConfigError(str(path), f"line {number}", "has more cells than the header")
    return rows


def write_parquet(csv_path: Path | str, parquet_path: Path | str) -> None:
    """Convert a finished CSV journal to Parquet (numbers as float64, the rest as strings)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = read_results(csv_path)
    columns: dict[str, list] = {}
    for name in (rows[0].keys() if rows else []):
        values = [r[name] for r in rows]
        numeric = [numeric_value(v) for v in values]
        if name not in FIXED_COLUMNS and name != "error" and all(v == "" or n is not None
                                                                   for v, n in zip(values, numeric)):
            columns[name] = numeric
        else:
            columns[name] = [v if v != "" else None for v in values]
    pq.write_table(pa.table(columns), parquet_path)


def numeric_value(text: str) -> float | None:
    """A cell as a number: plain numbers, booleans, or quantities with units (``3.35TB/s`` -> 3.35e12);
    None when it is not numeric."""
    if text is None or text == "":
        return None
    if text in ("true", "false"):
        return 1.0 if text == "true" else 0.0
    try:
        return float(text)
    except ValueError:
        pass
    from gpusim.errors import UnitError
    from gpusim.units import DIMENSIONS, parse_quantity

    for dim in DIMENSIONS:
        try:
            return parse_quantity(text, dim)
        except (UnitError, KeyError, ValueError):
            continue
    return None


# --------------------------------------------------------------------------------------- execution


@dataclass(frozen=True)
class SweepSummary:
    num_points: int
    num_skipped: int
    """Points already in the results file (resumed)."""
    num_computed: int
    num_errors: int
    """Points recorded with an error (invalid configuration, simulation refused)."""
    first_error: str | None
    """The first of those errors, as recorded in its row."""
    num_failed: int
    """Points whose task could not finish (its workers kept dying): not written, left for --resume."""
    wall_s: float


def run_sweep(client, points: Sequence[SweepPoint], journal: ResultsJournal, *, resume: bool = False,
              overwrite: bool = False, options: Mapping[str, Any] | None = None, retries: int = 2,
              progress: Callable[[int, int, dict], None] | None = None) -> SweepSummary:
    """Evaluate ``points`` on the Dask ``client``, appending each row to ``journal`` as it completes.

    ``progress(done, total, row)`` is called after each row (the CLI draws its bar with it)."""
    import time

    from distributed import as_completed

    start = time.perf_counter()
    by_key = {p.key: p for p in points}
    done = journal.open(resume=resume, overwrite=overwrite, valid_keys=set(by_key))
    todo = [p for k, p in by_key.items() if k not in done]
    total = len(by_key)
    errors = 0
    first_error = None
    failed = 0
    written: set[str] = set(done)
    if progress:
        progress(len(written), total, {})
    try:
        if todo:
            opts = dict(options or {})
            futures = client.map(
                evaluate_point,
                [p.hardware for p in todo], [p.workload for p in todo], [list(p.params) for p in todo],
                [opts] * len(todo),
                key=[f"gpusim-point-{p.key}" for p in todo], retries=retries, pure=False)
            for future in as_completed(futures):
                try:
                    row = future.result()
                except Exception:  # noqa: BLE001 - e.g. KilledWorker: the point is left for --resume
                    failed += 1
                    future.release()
                    continue
                future.release()
                if row["point_key"] in written:
                    continue  # never write a point twice
                written.add(row["point_key"])
                journal.append(row)
                if row.get("error"):
                    errors += 1
                    first_error = first_error or f"{row['point_key']}: {row['error']}"
                if progress:
                    progress(len(written), total, row)
    finally:
        journal.close()
    return SweepSummary(num_points=total, num_skipped=len(done), num_computed=len(written) - len(done),
                        num_errors=errors, first_error=first_error, num_failed=failed, wall_s=time.perf_counter() - start)


def local_client(num_workers: int | None = None, threads_per_worker: int = 1):
    """A Dask client on a local cluster of worker processes, one per core by default (simulation is
    pure-Python and holds the GIL, so processes, not threads, give parallelism)."""
    from distributed import Client, LocalCluster

    workers = num_workers or max(1, os.cpu_count() or 1)
    cluster = LocalCluster(n_workers=workers, threads_per_worker=threads_per_worker, processes=True,
                           dashboard_address=None,
                           # worker heartbeats that race the shutdown log tracebacks at ERROR; a point's own
                           # failure is in its row (error column) or counted as failed
                           silence_logs=logging.CRITICAL)
    return Client(cluster)


def pareto_front(rows: Sequence[Mapping[str, Any]], objectives: Sequence[str]) -> list[int]:
    """Indices of the rows not dominated on ``objectives`` (all minimized; rows missing one are out)."""
    values = []
    for i, r in enumerate(rows):
        vs = [numeric_value(str(r.get(o, ""))) if not isinstance(r.get(o), (int, float)) else float(r[o])
              for o in objectives]
        if all(v is not None for v in vs):
            values.append((i, vs))
    front = []
    for i, vi in values:
        dominated = any(all(a <= b for a, b in zip(vj, vi)) and any(a < b for a, b in zip(vj, vi))
                        for j, vj in values if j != i)
        if not dominated:
            front.append(i)
    return front
