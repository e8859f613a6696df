"""Writing results: JSON and Chrome/Perfetto trace-event files. The only module that writes files."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gpusim.errors import GpusimError
from gpusim.results.result import SimulationResult

TRACK_ORDER = ("host", "stream 0", "host link", "SMs", "L2", "HBM")


def write_json(data: Any, destination: str) -> None:
    """Write ``data`` as JSON to a path, or to stdout for ``-``."""
    text = json.dumps(data, indent=2, default=float)
    if destination == "-":
        sys.stdout.write(text + "\n")
        return
    _write_text(Path(destination), text + "\n")


def _write_text(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise GpusimError(f"{path}: cannot write: {exc.strerror}") from None


def trace_events(result: SimulationResult) -> list[dict[str, Any]]:
    """Chrome trace events (microseconds): one process for the device, a thread per track, plus
    counter tracks for HBM utilization, L2 hit rate and SM occupancy."""
    tracks = list(TRACK_ORDER) + sorted({s.track for s in result.spans} - set(TRACK_ORDER))
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
    _write_text(Path(destination), json.dumps(data))
