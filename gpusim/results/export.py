"""Writing results: JSON and Chrome/Perfetto trace-event files. The only module that writes files."""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable

from gpusim.errors import ConfigError, GpusimError
from gpusim.results.result import SimulationResult, Span, track_stage

TRACK_ORDER = ("host", "stream 0", "host link", "SMs", "L2", "HBM")
STEP_TRACK_ORDER = ("compute", "layers", "NVLink port", "network port", "context ring")
"""A multi-GPU training step's tracks per GPU (the engine's spans on ``stage S TRACK``): each pass
(``F0``, ``B3``) on ``compute``, each of its layers' compute on ``layers``."""


def announce_written(destination: str | Path, detail: str = "") -> None:
    """Say on stderr that an output file was written, with an optional ``detail`` (stdout carries
    results only)."""
    print(f"wrote {destination}" + (f" ({detail})" if detail else ""), file=sys.stderr)


def write_json(data: Any, destination: str) -> None:
    """Write ``data`` as JSON to a path (saying so on stderr), or to stdout for ``-``."""
    text = json.dumps(data, indent=2, default=float)
    if destination == "-":
        sys.stdout.write(text + "\n")
        return
    write_text_file(destination, text + "\n")
    announce_written(destination)


def check_output_path(destination: str | Path, *, flag: str = "", inputs: Iterable[str | Path | None] = ()) -> None:
    """Refuse, before any work, an output path that cannot be a file: empty, a directory, or under a
    file; and, given the command's ``inputs`` (the files it reads), one that is one of them (the run
    would replace what it read: ``flag`` names the option that gave the path)."""
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
    for source in inputs:
        if source is not None and str(source) != "-" and same_file(destination, source):
            raise ConfigError("command line", flag or str(destination),
                              f"{destination} is also a file this command reads ({source}); "
                              "write the output elsewhere")


def check_outputs(outputs: dict[str, str | Path | None], *, inputs: Iterable[str | Path | None] = (),
                  figures: Iterable[str] = ()) -> None:
    """Check, before any work, every output option of a command (``{flag: path}``; None: not given,
    ``-``: stdout): each with :func:`check_output_path` against the command's ``inputs`` (the
    ``figures`` flags with :func:`check_figure_path`), then that no two options would write the same
    file (the second would replace the first)."""
    figures = set(figures)
    given = {flag: path for flag, path in outputs.items() if path is not None and str(path) != "-"}
    for flag, path in given.items():
        if flag in figures:
            check_figure_path(flag, str(path), inputs=inputs)
        else:
            check_output_path(path, flag=flag, inputs=inputs)
    seen: list[tuple[str, str | Path]] = []
    for flag, path in given.items():
        for other_flag, other in seen:
            if same_file(path, other):
                raise ConfigError("command line", flag, f"{path} is also {other_flag}'s output; give each its own file")
        seen.append((flag, path))


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file (links followed; a path that does not exist yet by where it would be)."""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        return False
    return os.path.realpath(a) == os.path.realpath(b)


PLOT_SUFFIXES = (".png", ".svg", ".pdf")
"""What ``--out``/``--plot`` figures may be written as (matplotlib picks the format from the suffix)."""


def check_figure_path(flag: str, destination: str, inputs: Iterable[str | Path | None] = ()) -> None:
    """Refuse, before any work, a figure path with another suffix or one that cannot be written
    (see :func:`check_output_path` for ``inputs``)."""
    if Path(destination).suffix.lower() not in PLOT_SUFFIXES:
        raise ConfigError(flag, destination, "figure file must end in .png, .svg or .pdf")
    check_output_path(destination, flag=flag, inputs=inputs)


@contextmanager
def atomic_output(destination: str | Path):
    """Yield a temporary path beside ``destination``; once the block has written it, it replaces
    ``destination`` in one step. A write that fails (a full disk, a directory in the way) leaves the
    old file as it was and is one line: ``PATH: cannot write: REASON``. The file gets the permissions
    a plain ``open(..., "w")`` would give it: those of the file it replaces, else 0666 less the umask
    (the temporary file itself is created private, 0600). A symbolic link's target is replaced, not
    the link; a device or pipe (``/dev/stdout``, a FIFO) is written into directly."""
    check_output_path(destination)
    if os.path.exists(destination) and not os.path.isfile(destination):
        # a device, pipe or socket (/dev/stdout, /dev/null, a FIFO a reader waits on), or a link to
        # one: written into, not replaced by a file
        try:
            yield Path(destination)
        except OSError as exc:
            raise GpusimError(f"{destination}: cannot write: {exc.strerror or exc}") from None
        return
    # through a symbolic link, the file it names is the one to replace
    path = Path(os.path.realpath(destination))
    tmp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = stat.S_IMODE(path.stat().st_mode) if path.is_file() else 0o666 & ~_umask()
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + path.suffix, dir=path.parent)
        os.close(fd)
        tmp = Path(name)
        os.chmod(tmp, mode)
        yield tmp
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise GpusimError(f"{destination}: cannot write: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def _umask() -> int:
    """The process's file-creation mask (read by setting it, then restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_file(destination: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``destination`` atomically (see :func:`atomic_output`)."""
    with atomic_output(destination) as tmp:
        tmp.write_text(text, encoding="utf-8")


TRACE_GPUS_MAX = 64
"""A multi-GPU trace shows one process per GPU up to this many GPUs; above it, one process per pipeline
stage stands for the stage's GPUs (identical by symmetry: the engine simulates one per stage)."""

def _track_names(used: set[str]) -> list[str]:
    """A device's tracks in their usual order (all of them, the host link too when nothing crossed it),
    then a training step's that are used, in their order."""
    device = list(TRACK_ORDER) if used & set(TRACK_ORDER) else []
    step = [t for t in STEP_TRACK_ORDER if t in used]
    return device + step + sorted(used - set(TRACK_ORDER) - set(STEP_TRACK_ORDER))


def _gpu_label(rank: int, per_stage: int, layout: dict[str, Any]) -> str:
    """``GPU 12 (stage 1, data 0, tensor 4)``: where rank ``rank`` sits in Megatron-LM's order
    (tensor fastest, then context, data, pipeline)."""
    t, cp = int(layout.get("tensor", 1)), int(layout.get("context", 1))
    i = rank % per_stage
    parts = [f"stage {rank // per_stage}", f"data {i // (t * cp)}"]
    if cp > 1:
        parts.append(f"context {(i // t) % cp}")
    parts.append(f"tensor {i % t}")
    return f"GPU {rank} ({', '.join(parts)})"


def _processes(result: SimulationResult, staged: bool) -> list[tuple[str, int | None]]:
    """The trace's processes as (name, pipeline stage; None: every stage). One process for a single
    device, for an op workload on a system (its ops run on one GPU or, for a collective, alike on
    all) and for inference (one tensor-parallel rank's kernels, through every pipeline stage in turn); for a
    training step (``staged``: its spans name their stage) one per GPU, or one per stage above
    :data:`TRACE_GPUS_MAX` GPUs."""
    title = f"{result.hardware}: {result.workload}"
    if result.num_gpus <= 1 or not result.parallelism:
        return [(title, None)]
    if not staged:
        stages = int(result.parallelism.get("pipeline", 1))
        if stages > 1:  # inference: a token passes the stages in turn, each stage's ranks identical
            return [(f"{title}: GPUs 0-{result.num_gpus - 1} (one tensor-parallel rank of each of the {stages} "
                     "pipeline stages, in turn)", None)]
        return [(f"{title}: GPUs 0-{result.num_gpus - 1} ({result.num_gpus} identical ranks, one shown)", None)]
    stages = int(result.parallelism.get("pipeline", 1))
    per_stage = result.num_gpus // stages
    if result.num_gpus <= TRACE_GPUS_MAX:
        return [(_gpu_label(r, per_stage, result.parallelism), r // per_stage) for r in range(result.num_gpus)]
    return [(f"GPUs {s * per_stage}-{(s + 1) * per_stage - 1} (stage {s}: {per_stage} identical GPUs, one shown)", s)
            for s in range(stages)]


def trace_events(result: SimulationResult) -> list[dict[str, Any]]:
    """Chrome trace events (microseconds): a process per device with a thread per track, plus counter
    tracks for HBM utilization, L2 hit rate and SM occupancy. A parallel training step's trace has a
    process per GPU (see :func:`_processes`) whose threads are its compute, its NVLink port and its
    network port: the engine's spans on ``stage S TRACK`` go to every GPU of stage S."""
    by_stage: dict[int | None, list[tuple[str, Span]]] = {}
    for span in result.spans:
        stage, track = track_stage(span.track)
        by_stage.setdefault(stage, []).append((track, span))
    processes = _processes(result, staged=any(stage is not None for stage in by_stage))
    if len(processes) == 1:  # one device (or a system's op workload): every span on it, whatever its stage
        by_stage = {None: [item for items in by_stage.values() for item in items]}
    events: list[dict[str, Any]] = []
    for pid, (name, stage) in enumerate(processes, start=1):
        spans = by_stage.get(None, []) + (by_stage.get(stage, []) if stage is not None else [])
        tid = {track: i + 1 for i, track in enumerate(_track_names({track for track, _ in spans}))}
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        for track, i in tid.items():
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": i, "args": {"name": track}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": i, "args": {"sort_index": i}})
        for track, span in spans:
            args = dict(span.args)
            events.append({"name": span.name, "ph": "X", "pid": pid, "tid": tid[track], "ts": span.start_s * 1e6,
                           "dur": max(0.0, (span.end_s - span.start_s) * 1e6), "args": args})
            counter = {"HBM": "utilization_fraction", "L2": "hit_fraction", "SMs": "occupancy_fraction"}.get(track)
            if counter and counter in args:
                events.append({"name": f"{track} {counter}", "ph": "C", "pid": pid, "ts": span.start_s * 1e6,
                               "args": {counter: args[counter]}})
                events.append({"name": f"{track} {counter}", "ph": "C", "pid": pid, "ts": span.end_s * 1e6,
                               "args": {counter: 0.0}})
    return events


def write_trace(result: SimulationResult, destination: str) -> None:
    data = {"traceEvents": trace_events(result), "displayTimeUnit": "ns",
            "otherData": {"hardware": result.hardware, "workload": result.workload, "generator": "gpusim"}}
    write_text_file(destination, json.dumps(data))
    announce_written(destination)
