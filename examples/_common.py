"""Shared helpers of the example scripts: simulate by name, draw a bar chart, print a verdict."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from gpusim.commands.plot_results import simulate_named
from gpusim.config import load_hardware, summary
from gpusim.errors import GpusimError

__all__ = ["simulate_named", "load_hardware", "summary", "GpusimError", "run", "try_run", "bar_chart",
           "verdict", "cli", "ratio_text", "published", "published_training"]


def run(hw: str, workload: str, *overrides: str, **kwargs):
    """(hardware description, SimulationResult) for built-in names and KEY=VALUE overrides."""
    return simulate_named(hw, workload, list(overrides), **kwargs)


def try_run(hw: str, workload: str, *overrides: str, **kwargs):
    """Like :func:`run`, but (None, None) where the device cannot run it (e.g. no FP8 pipe)."""
    try:
        return run(hw, workload, *overrides, **kwargs)
    except GpusimError:
        return None, None


def published(*case_ids: str) -> list[dict[str, Any]]:
    """Published measurements of the same cases (measurements/published/kernels.csv), each simulated
    exactly as `gpusim accuracy` does, printed beside each other; returns one row per case."""
    from gpusim.accuracy import run_accuracy
    from gpusim.measurements import load_kernel_cases

    results, _ = run_accuracy([c for c in load_kernel_cases() if c.case_id in case_ids])
    return _printed(results)


def published_training(file_name: str, *case_ids: str) -> list[dict[str, Any]]:
    """As :func:`published`, for training rows of ``file_name`` in measurements/heldout (or
    ``training.csv`` for the scored set), simulated as `gpusim accuracy --suite training` does."""
    from gpusim.accuracy_cluster import run_training
    from gpusim.measurements import heldout_dir, load_training_cases

    path = None if file_name == "training.csv" else heldout_dir() / file_name
    results, _ = run_training([c for c in load_training_cases(path) if c.case_id in case_ids])
    return _printed(results)


def _printed(results) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        print(f"  published {r.case_id}: measured {r.measured:.4g} {r.metric}, simulated {r.simulated:.4g} "
              f"({r.signed_error_fraction:+.0%}); {r.source}")
        rows.append({"case_id": r.case_id, "metric": r.metric, "measured": r.measured, "simulated": r.simulated})
    return rows


def bar_chart(path: Path, title: str, labels: Sequence[str], series: dict[str, Sequence[float]], ylabel: str,
              xlabel: str, log: bool = False, reference: dict[str, Sequence[float | None]] | None = None) -> Path:
    """Grouped bars (one group per label, one bar per series); optional reference markers."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(6.0, 1.1 * len(labels) + 3), 4.5), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    n = max(len(series), 1)
    width = 0.8 / n
    for i, (name, values) in enumerate(series.items()):
        xs = [j + (i - (n - 1) / 2) * width for j in range(len(labels))]
        ax.bar(xs, [v if v is not None else 0 for v in values], width, label=name)
    for name, values in (reference or {}).items():
        pts = [(j, v) for j, v in enumerate(values) if v is not None]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker="*", s=120, color="black", zorder=3,
                       label=name)
    ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=8)
    if log:
        ax.set_yscale("log")
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.set_xlabel(xlabel)
    ax.legend(fontsize=8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return path


def verdict(status: str, reason: str) -> str:
    assert status in ("confirmed", "qualified", "refuted"), status
    return f"{status}: {reason}"


def ratio_text(x: float) -> str:
    return f"{x:,.1f}x" if x < 100 else f"{x:,.0f}x"


def cli(main: Callable[..., dict[str, Any]]) -> None:
    """``python examples/cNN_x.py [--quick] [--out DIR] [--json]``."""
    script = sys.modules.get(main.__module__)  # the example script: its docstring's first paragraph names the claim
    doc = (getattr(script, "__doc__", None) or "").strip()
    parser = argparse.ArgumentParser(description=" ".join(doc.split("\n\n")[0].split()) or None)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (what the tests run)")
    parser.add_argument("--out", default="example-output", help="folder for plots (default example-output)")
    parser.add_argument("--json", action="store_true", help="print the returned numbers as JSON")
    args = parser.parse_args()
    out = main(quick=args.quick, out_dir=Path(args.out))
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    print(f"VERDICT: {out['verdict']}")
    sys.exit(0)
