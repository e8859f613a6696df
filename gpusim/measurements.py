"""Published reference measurements: loading ``measurements/published/*.csv`` into frozen cases.

Three tidy CSV files, transcribed from published sources (each row names its source):

* ``kernels.csv``: single-GPU kernels and microbenchmarks (GEMMs, memory-bound ops, STREAM, cache
  bandwidth, pointer-chase latency, host copies) -> :class:`KernelCase`.
* ``communication.csv``: collectives and peer-to-peer copies inside one node -> :class:`CommunicationCase`.
* ``training.csv``: end-to-end training and inference throughput/latency -> :class:`TrainingCase`.

Every value is in SI units (seconds, bytes, FLOP/s, bytes/s, fractions). An empty cell means "not
applicable or not stated" and is read as ``None``. A row whose ``notes`` start with ``EXCLUDE:`` is
kept for the record but should not be scored (``excluded`` is True); the reason follows the prefix.

Bad input raises :class:`gpusim.errors.ConfigError` naming the file and ``row N.column``, where N is
the line number in the file (the header is line 1).

The column meanings are documented in ``measurements/published/README.md``.
"""

from __future__ import annotations

import csv
import difflib
import io
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

from gpusim.config.hardware import DTYPES
from gpusim.config.library import builtin_dir, builtin_files
from gpusim.config.loader import read_text_file
from gpusim.errors import ConfigError

EXCLUDE_PREFIX = "EXCLUDE:"
CHECKPOINTING = ("none", "selective", "full")
"""Values of a training row's ``activation_checkpointing``, as the workload's setting of that name."""

KINDS = frozenset({"M", "D", "T"})
CONFIDENCES = frozenset({"A", "B", "C"})

KERNEL_OPS = frozenset({
    "matmul", "attention", "elementwise", "softmax", "layernorm", "rmsnorm", "stream", "l1_bandwidth",
    "l2_bandwidth", "pointer_chase", "memcpy_h2d", "memcpy_d2h", "memcpy_p2p",
})
ATTENTION_VARIANTS = frozenset({"forward", "forward_causal", "backward", "backward_causal"})
ATTENTION_LIBRARIES = frozenset({"flash-attn2", "flash-attn3", "cudnn"})
TIMING_METHODS = frozenset({"kernel_only", "loop_with_launch_gaps", "profiler_kernel", "benchmark_suite",
                            "eager_call_events"})
COLLECTIVES = frozenset({"all_reduce", "all_gather", "reduce_scatter", "p2p_unidirectional", "p2p_bidirectional"})
TRAINING_MODES = frozenset({"train", "inference", "decode", "prefill", "serve_throughput"})
OPTIONAL_COLUMNS = frozenset({"block_bytes", "kernel_tile", "warmup_calls", "timed_calls"})
"""Columns added after the format was published: a file without them reads them as empty."""

# Columns an op needs besides the measured value.
_KERNEL_OP_REQUIRED: Mapping[str, tuple[str, ...]] = {
    "matmul": ("m", "n", "k", "batch", "dtype"),
    # attention: batch, rows = heads, m = query length, n = key length, k = head dim
    "attention": ("variant", "m", "n", "k", "batch", "rows", "dtype", "library"),
    "elementwise": ("variant", "num_elements", "dtype"),
    "softmax": ("rows", "cols", "dtype"),
    "layernorm": ("rows", "cols", "dtype"),
    "rmsnorm": ("rows", "cols", "dtype"),
    "stream": ("variant",),
    "l1_bandwidth": ("working_set_bytes",),
    "l2_bandwidth": ("working_set_bytes",),
    "pointer_chase": ("working_set_bytes",),
    "memcpy_h2d": (),
    "memcpy_d2h": (),
    "memcpy_p2p": (),
}

_KERNEL_METRICS: Mapping[str, str] = {
    "time_s": "measured_time_s",
    "flop_per_s": "measured_flop_per_s",
    "bytes_per_s": "measured_bytes_per_s",
    "latency_s": "measured_latency_s",
}
_TRAINING_METRICS: Mapping[str, str] = {
    "time_s": "measured_time_s",
    "tokens_per_s": "measured_tokens_per_s",
    "tokens_per_s_per_gpu": "measured_tokens_per_s_per_gpu",
    "model_flop_per_s_per_gpu": "measured_model_flop_per_s_per_gpu",
    "mfu_fraction": "measured_mfu_fraction",
}


@dataclass(frozen=True)
class KernelCase:
    """One row of ``kernels.csv``: a single-GPU kernel or microbenchmark measurement."""

    case_id: str
    gpu: str
    op: str
    variant: str | None
    dtype: str | None
    m: int | None
    n: int | None
    k: int | None
    batch: int | None
    rows: int | None
    cols: int | None
    num_elements: int | None
    num_bytes: int | None
    working_set_bytes: int | None
    block_bytes: int | None
    """L2 bandwidth: the bytes one thread block of the benchmark reads (its slice of the footprint),
    where the source states it; blocks reading the same slice at once share its misses."""
    occupancy_fraction: float | None
    measured_time_s: float | None
    measured_flop_per_s: float | None
    measured_bytes_per_s: float | None
    measured_latency_s: float | None
    metric: str
    timing_method: str
    library: str | None
    kernel_tile: str | None
    """Matmul: the tiling of the kernel the source's profile shows the library ran, as a gpusim tile
    label (``64x64x32_s6_w4``); empty when the source does not name it (gpusim then picks the tile)."""
    source: str
    kind: str
    confidence: str
    notes: str
    warmup_calls: int | None
    """A back-to-back loop (``loop_with_launch_gaps``): the untimed calls run before the timed ones,
    where the source's script states it; with ``timed_calls``, the loop's busy time from rest."""
    timed_calls: int | None
    """A back-to-back loop: the calls the timer spans (the figure is their mean)."""
    excluded: bool

    @property
    def measured_value(self) -> float:
        """The primary measured value (the column ``metric`` names), in SI units."""
        return getattr(self, _KERNEL_METRICS[self.metric])


@dataclass(frozen=True)
class CommunicationCase:
    """One row of ``communication.csv``: a collective or a peer-to-peer copy inside one system.

    ``num_bytes`` is the nccl-tests message size; busbw follows nccl-tests (all-reduce:
    ``algbw * 2(n-1)/n``; all-gather and reduce-scatter: ``algbw * (n-1)/n``). Peer-to-peer rows
    carry their copy bandwidth in ``measured_algbw_bytes_per_s`` (bidirectional: both directions summed).
    """

    case_id: str
    system: str
    collective: str
    algorithm: str | None
    num_gpus: int
    num_bytes: int | None
    measured_time_s: float | None
    measured_busbw_bytes_per_s: float | None
    measured_algbw_bytes_per_s: float | None
    nvls: bool | None
    source: str
    kind: str
    confidence: str
    notes: str
    excluded: bool

    @property
    def measured_value(self) -> float:
        """busbw for collectives, the copy bandwidth (algbw column) for peer-to-peer rows, bytes/s."""
        if self.collective.startswith("p2p_"):
            return self.measured_algbw_bytes_per_s  # type: ignore[return-value]
        return self.measured_busbw_bytes_per_s  # type: ignore[return-value]


@dataclass(frozen=True)
class TrainingCase:
    """One row of ``training.csv``: an end-to-end training or inference measurement."""

    case_id: str
    gpu: str
    system: str | None
    num_gpus: int | None
    model: str
    mode: str
    precision: str | None
    seq_len: int | None
    input_tokens: int | None
    output_tokens: int | None
    global_batch_size: int | None
    micro_batch_size: int | None
    grad_accum_steps: int | None
    parallelism: str | None
    activation_checkpointing: str | None
    """``none``, ``selective`` (Megatron's: the attention scores and softmax are recomputed) or ``full``."""
    measured_time_s: float | None
    measured_forward_time_s: float | None
    measured_backward_time_s: float | None
    measured_tokens_per_s: float | None
    measured_tokens_per_s_per_gpu: float | None
    measured_model_flop_per_s_per_gpu: float | None
    measured_mfu_fraction: float | None
    measured_hfu_fraction: float | None
    measured_bytes_per_s: float | None
    mfu_peak_flop_per_s: float | None
    metric: str
    software: str | None
    source: str
    kind: str
    confidence: str
    notes: str
    excluded: bool

    @property
    def measured_value(self) -> float:
        """The primary measured value (the column ``metric`` names), in SI units."""
        return getattr(self, _TRAINING_METRICS[self.metric])


# ---------------------------------------------------------------------------------------------
# Locating the files


def _measurements_dir(name: str, what: str) -> Path:
    path = builtin_dir("measurements") / name
    if not path.is_dir():
        raise ConfigError(str(path), "", f"{what} measurements folder not found; is gpusim installed correctly?")
    return path


def published_dir() -> Path:
    """The folder of the published reference CSVs (installed copy first, then the source tree)."""
    return _measurements_dir("published", "published")


def heldout_dir() -> Path:
    """The folder of held-out measurements: published cases kept out of the score (``measurements/heldout``)."""
    return _measurements_dir("heldout", "held-out")


def heldout_files() -> list[tuple[str, Path]]:
    """(``kernels``, ``communication`` or ``training``, path) of every held-out CSV, by name; the kind
    comes from its header."""
    files = []
    for path in sorted(heldout_dir().glob("*.csv")):
        with path.open(newline="", encoding="utf-8") as fh:
            header = next(csv.reader(fh), [])
        kind = "training" if "model" in header else "communication" if "collective" in header else "kernels"
        files.append((kind, path))
    return files


OWN_MEASUREMENT_FILES = ("library.csv", "micro.csv", "kernels.csv")
"""The published-format files ``gpusim measure`` writes into ``measurements/<gpu>/`` (the block suite's
``block.csv`` carries its own simulated column)."""


def own_measurement_files(names: tuple[str, ...] = OWN_MEASUREMENT_FILES) -> list[Path]:
    """This project's own measurements: ``measurements/<gpu>/{library,micro,kernels}.csv`` (or the
    files ``names``; ``("block.csv",)`` for the block suite's), by GPU."""
    root = builtin_dir("measurements")
    return [path for folder in sorted(p for p in root.iterdir() if p.is_dir() and p.name not in ("published", "heldout"))
            for path in (folder / name for name in names) if path.is_file()]


def _display(path: Path) -> str:
    try:
        root = published_dir().resolve()
    except ConfigError:
        return str(path)
    resolved = path.resolve()
    if resolved.is_relative_to(root):
        return f"measurements/published/{resolved.relative_to(root)}"
    return str(path)


# ---------------------------------------------------------------------------------------------
# Cell parsers: each takes the stripped cell text and returns a value or raises ValueError(message)


def _req_str(text: str) -> str:
    if not text:
        raise ValueError("must not be empty")
    return text


def _opt_str(text: str) -> str | None:
    return text or None


def _notes(text: str) -> str:
    return text


def _opt_int(text: str) -> int | None:
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"not an integer: {text!r}") from None
    if value < 0:
        raise ValueError(f"must not be negative, got {value}")
    return value


def _req_int(text: str) -> int:
    value = _opt_int(text)
    if value is None:
        raise ValueError("must not be empty")
    return value


def _opt_float(text: str) -> float | None:
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"must be finite, got {text!r}")
    if value <= 0:
        raise ValueError(f"must be positive, got {text!r}")
    return value


def _opt_bool(text: str) -> bool | None:
    if not text:
        return None
    if text in ("true", "false"):
        return text == "true"
    raise ValueError(f"must be true, false or empty, got {text!r}")


_PARSERS: Mapping[str, Callable[[str], Any]] = {
    "str": _req_str,
    "str | None": _opt_str,
    "int": _req_int,
    "int | None": _opt_int,
    "float | None": _opt_float,
    "bool | None": _opt_bool,
}

_Case = TypeVar("_Case", KernelCase, CommunicationCase, TrainingCase)


def columns(case_type: type) -> tuple[str, ...]:
    """The CSV columns of a case type, in file order (every field except the derived ``excluded``)."""
    return tuple(f.name for f in fields(case_type) if f.name != "excluded")


def _read_cases(path: Path, case_type: type[_Case], check: Callable[[_Case, Callable[[str, str], ConfigError]], None]) -> tuple[_Case, ...]:
    display = _display(path)
    names = columns(case_type)
    parsers = {f.name: (_notes if f.name == "notes" else _PARSERS[str(f.type)]) for f in fields(case_type) if f.name != "excluded"}
    handle = io.StringIO(read_text_file(path, display), newline="")
    cases: list[_Case] = []
    seen: dict[str, int] = {}
    with handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise ConfigError(display, "", "empty file; expected a header row")
        header = [h.strip() for h in header]
        missing = [c for c in names if c not in header and c not in OPTIONAL_COLUMNS]
        if missing:
            other = next((kind for kind, t in (("kernels", KernelCase), ("communication", CommunicationCase),
                                                ("training", TrainingCase))
                          if t is not case_type and set(header) >= {c for c in columns(t) if c not in OPTIONAL_COLUMNS}),
                         None)
            hint = f" (its header is a {other} file's)" if other else ""
            raise ConfigError(display, "header", f"missing column {missing[0]!r}{hint}")
        absent = dict.fromkeys(c for c in names if c not in header)  # optional columns the file lacks
        unknown = [c for c in header if c not in names]
        if unknown:
            raise ConfigError(display, "header", f"unknown column {unknown[0]!r}")
        if len(set(header)) != len(header):
            raise ConfigError(display, "header", "a column appears twice")
        for cells in reader:
            line = reader.line_num
            if not any(c.strip() for c in cells):
                continue
            if len(cells) != len(header):
                raise ConfigError(display, f"row {line}", f"has {len(cells)} cells, the header has {len(header)}")
            values: dict[str, Any] = dict(absent)
            for name, cell in zip(header, cells):
                try:
                    values[name] = parsers[name](cell.strip())
                except ValueError as exc:
                    raise ConfigError(display, f"row {line}.{name}", str(exc)) from None
            case = case_type(**values, excluded=values["notes"].startswith(EXCLUDE_PREFIX))

            def error(column: str, message: str, _line: int = line) -> ConfigError:
                return ConfigError(display, f"row {_line}.{column}", message)

            if case.case_id in seen:
                raise error("case_id", f"duplicate case_id {case.case_id!r} (first on line {seen[case.case_id]})")
            seen[case.case_id] = line
            if case.kind not in KINDS:
                raise error("kind", f"must be one of {sorted(KINDS)}, got {case.kind!r}")
            if case.confidence not in CONFIDENCES:
                raise error("confidence", f"must be one of {sorted(CONFIDENCES)}, got {case.confidence!r}")
            check(case, error)
            cases.append(case)
    return tuple(cases)


def _check_kernel(case: KernelCase, error: Callable[[str, str], ConfigError]) -> None:
    if case.dtype is not None and not (case.dtype in DTYPES or case.dtype.startswith("fp8_")):
        raise error("dtype", f"must be one of {', '.join(DTYPES)} (or an fp8_ format such as fp8_e4m3), "
                             f"got {case.dtype!r}")
    if case.op not in KERNEL_OPS:
        raise error("op", f"unknown op {case.op!r}; one of {', '.join(sorted(KERNEL_OPS))}")
    if case.timing_method not in TIMING_METHODS:
        raise error("timing_method", f"must be one of {sorted(TIMING_METHODS)}, got {case.timing_method!r}")
    if case.metric not in _KERNEL_METRICS:
        raise error("metric", f"must be one of {sorted(_KERNEL_METRICS)}, got {case.metric!r}")
    column = _KERNEL_METRICS[case.metric]
    if getattr(case, column) is None:
        raise error(column, f"empty, but metric is {case.metric}")
    for name in _KERNEL_OP_REQUIRED[case.op]:
        if getattr(case, name) in (None, 0):
            raise error(name, f"required (and nonzero) for op {case.op}")
    if case.op == "attention":
        if case.variant not in ATTENTION_VARIANTS:
            raise error("variant", f"attention must be one of {sorted(ATTENTION_VARIANTS)}, got {case.variant!r}")
        if case.library not in ATTENTION_LIBRARIES:
            raise error("library", f"attention rows name their kernel's library, one of {sorted(ATTENTION_LIBRARIES)}; "
                                   f"got {case.library!r}")
    if case.occupancy_fraction is not None and case.occupancy_fraction > 1:
        raise error("occupancy_fraction", f"must be in (0, 1], got {case.occupancy_fraction}")
    if case.block_bytes is not None:
        if case.op != "l2_bandwidth":
            raise error("block_bytes", f"only L2-bandwidth rows have a per-block slice, not op {case.op}")
        if case.block_bytes == 0:
            raise error("block_bytes", "must be positive (empty = not stated)")
    if (case.warmup_calls is None) != (case.timed_calls is None):
        raise error("timed_calls" if case.timed_calls is None else "warmup_calls",
                    "a loop's warmup_calls and timed_calls are given together or not at all")
    if case.timed_calls is not None:
        if case.op != "matmul":
            raise error("timed_calls", f"only matmul rows count their back-to-back calls, not op {case.op}")
        if case.timed_calls == 0:
            raise error("timed_calls", "must be positive (empty = not stated)")
    if case.kernel_tile is not None:
        if case.op != "matmul":
            raise error("kernel_tile", f"only matmul rows name a GEMM tile, not op {case.op}")
        from gpusim.mapping.plan import Tile

        try:
            Tile.parse(case.kernel_tile)
        except ValueError as exc:
            raise error("kernel_tile", str(exc)) from None


def _check_communication(case: CommunicationCase, error: Callable[[str, str], ConfigError]) -> None:
    if case.collective not in COLLECTIVES:
        raise error("collective", f"must be one of {sorted(COLLECTIVES)}, got {case.collective!r}")
    if case.num_gpus < 2:
        raise error("num_gpus", f"a collective needs at least 2 GPUs, got {case.num_gpus}")
    if case.collective.startswith("p2p_"):
        if case.num_gpus != 2:
            raise error("num_gpus", "a peer-to-peer row is one pair of GPUs (2)")
        if case.measured_algbw_bytes_per_s is None:
            raise error("measured_algbw_bytes_per_s", "required for peer-to-peer rows (the copy bandwidth)")
    else:
        if case.measured_busbw_bytes_per_s is None:
            raise error("measured_busbw_bytes_per_s", "required for collectives")
        if case.num_bytes is None:
            raise error("num_bytes", "required for collectives")


TRAINING_PRECISIONS = ("fp32", "fp16", "bf16", "fp8", "amp_bf16", "amp_fp8", "int8", "int4")
"""What a training or inference row ran in: plain formats, ``amp_*`` for PyTorch autocast over FP32
weights (llm-foundry's ``amp_bf16``), ``int8``/``int4`` for weight-only quantized inference."""


def _check_training(case: TrainingCase, error: Callable[[str, str], ConfigError]) -> None:
    known = builtin_files("hwconfigs")
    if case.gpu not in known:
        raise error("gpu", f"no built-in hardware description {case.gpu!r} (see `gpusim hw list`)")
    if case.system and case.system not in known:
        raise error("system", f"no built-in system description {case.system!r} (see `gpusim hw list`)")
    if case.precision and case.precision not in TRAINING_PRECISIONS:
        raise error("precision", f"must be one of {list(TRAINING_PRECISIONS)} or empty, got {case.precision!r}")
    if case.num_gpus is not None and case.num_gpus < 1:
        raise error("num_gpus", f"must be 1 or more (empty = not stated), got {case.num_gpus}")
    if case.activation_checkpointing not in (None, *CHECKPOINTING):
        raise error("activation_checkpointing", f"must be one of {list(CHECKPOINTING)} or empty, "
                                                f"got {case.activation_checkpointing!r}")
    if case.mode not in TRAINING_MODES:
        raise error("mode", f"must be one of {sorted(TRAINING_MODES)}, got {case.mode!r}")
    if case.metric not in _TRAINING_METRICS:
        raise error("metric", f"must be one of {sorted(_TRAINING_METRICS)}, got {case.metric!r}")
    column = _TRAINING_METRICS[case.metric]
    if getattr(case, column) is None:
        raise error(column, f"empty, but metric is {case.metric}")
    for name in ("measured_mfu_fraction", "measured_hfu_fraction"):
        value = getattr(case, name)
        if value is not None and value > 1:
            raise error(name, f"must be in (0, 1], got {value}")


def load_kernel_cases(path: str | Path | None = None) -> tuple[KernelCase, ...]:
    """Every row of a kernels CSV (default: the published ``kernels.csv``); each row's GPU is a built-in
    hardware description."""
    known = builtin_files("hwconfigs")  # listed once per file, not per row

    def check(case: KernelCase, error: Callable[[str, str], ConfigError]) -> None:
        if case.gpu not in known:
            close = difflib.get_close_matches(case.gpu, known, n=1)
            raise error("gpu", f"no built-in hardware description is named {case.gpu!r}"
                               + (f"; did you mean {close[0]}?" if close else " (`gpusim hw list` lists them)"))
        _check_kernel(case, error)

    return _read_cases(Path(path) if path is not None else published_dir() / "kernels.csv", KernelCase, check)


def load_communication_cases(path: str | Path | None = None) -> tuple[CommunicationCase, ...]:
    """Every row of a communication CSV (default: the published ``communication.csv``)."""
    return _read_cases(Path(path) if path is not None else published_dir() / "communication.csv", CommunicationCase, _check_communication)


def load_training_cases(path: str | Path | None = None) -> tuple[TrainingCase, ...]:
    """Every row of a training CSV (default: the published ``training.csv``)."""
    return _read_cases(Path(path) if path is not None else published_dir() / "training.csv", TrainingCase, _check_training)


def included(cases: Sequence[_Case]) -> tuple[_Case, ...]:
    """The cases to score: those not marked ``EXCLUDE:`` in their notes."""
    return tuple(c for c in cases if not c.excluded)
