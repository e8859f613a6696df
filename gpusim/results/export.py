"""Writing results: JSON and Chrome/Perfetto trace-event files. The only module that writes files."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpusim.errors import ConfigError, GpusimError
from gpusim.results.result import SimulationResult

TRACK_ORDER = ("host", "stream 0", "host link", "SMs", "L2", "HBM")


def write_json(data: Any, destination: str) -> None:
    """Write ``data`` as JSON to a path, or to stdout for ``-``."""
    text = json.dumps(data, indent=2, default=float)
    if destination == "-":
        sys.stdout.write(text + "\n")
        return
    write_text_file(destination, text + "\n")


def check_output_path(destination: str | Path) -> None:
    """Refuse, before any work, an output path that cannot be a file: empty, a directory, or under a
    file."""
    path = Path(destination)
    if not str(destination).strip():
        raise GpusimError("output path is empty")
    if path.is_dir():
        raise GpusimError(f"{path}: cannot write: Is a directory")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise GpusimError(f"{path}: cannot write: {parent} is not a directory")
            break


PLOT_SUFFIXES = (".png", ".svg", ".pdf")
"""What ``--out``/``--plot`` figures may be written as (matplotlib picks the format from the suffix)."""


def check_figure_path(flag: str, destination: str) -> None:
    """Refuse, before any work, a figure path with another suffix or one that cannot be written."""
    if Path(destination).suffix.lower() not in PLOT_SUFFIXES:
        raise ConfigError(flag, destination, "figure file must end in .png, .svg or .pdf")
    check_output_path(destination)


@contextmanager
def atomic_output(destination: str | Path):
    """Yield a temporary path beside ``destination``; once the block has written it, it replaces
    ``destination`` in one step. A write that fails (a full disk, a directory in the way) leaves the
    old file as it was and is one line: ``PATH: cannot write: REASON``."""
    check_output_path(destination)
    path = Path(destination)
    tmp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + path.suffix, dir=path.parent)
        os.close(fd)
        tmp = Path(name)
        yield tmp
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise GpusimError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def write_text_file(destination: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``destination`` atomically (see :func:`atomic_output`)."""
    with atomic_output(destination) as tmp:
        tmp.write_text(text, encoding="utf-8")


def trace_events(result: SimulationResult) -> list[dict[str, Any]]:
    """Chrome trace events (microseconds): one process for the device, a thread per track, plus
    counter tracks for HBM utilization, L2 hit rate and SM occupancy."""
    used = {s.track for s in result.spans}
    # a device's tracks in their usual order (all of them, the host link too when nothing crossed it),
    # then the others: a multi-GPU step's per-stage compute, NVLink and network tracks, without the
    # device tracks it does not use
    device = list(TRACK_ORDER) if used & set(TRACK_ORDER) else []
    tracks = device + sorted(used - set(TRACK_ORDER))
    tid = {name: i + 1 for i, name in enumerate(tracks)}
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": f"{result.hardware}: {result.workload}"}},
    ]
    for name, i in tid.items():
        events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": i, "args": {"name": name}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": i, "args": {"sort_index": i}})
    for span in result.spans:
        args = dict(span.args)
        events.append({"name": span.name, "ph": "X", "pid": 1, "tid": tid[span.track], "ts": span.start_s * 1e6,
                       "dur": max(0.0, (span.end_s - span.start_s) * 1e6), "args": args})
        counter = {"HBM": "utilization_fraction", "L2": "hit_fraction", "SMs": "occupancy_fraction"}.get(span.track)
        if counter and counter in args:
            events.append({"name": f"{span.track} {counter}", "ph": "C", "pid": 1, "ts": span.start_s * 1e6,
                           "args": {counter: args[counter]}})
            events.append({"name": f"{span.track} {counter}", "ph": "C", "pid": 1, "ts": span.end_s * 1e6,
                           "args": {counter: 0.0}})
    return events


def write_trace(result: SimulationResult, destination: str) -> None:
    data = {"traceEvents": trace_events(result), "displayTimeUnit": "ns",
            "otherData": {"hardware": result.hardware, "workload": result.workload, "generator": "gpusim"}}
    write_text_file(destination, json.dumps(data))
