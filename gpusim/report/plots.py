"""Matplotlib figures of simulation results: roofline, timeline (Gantt), time breakdown, comparison.

Every function returns a :class:`matplotlib.figure.Figure` built without pyplot (no global state, the
Agg canvas), so callers and tests can inspect titles, labels and legends before saving it with
:func:`save_figure` (PNG, SVG or PDF, chosen by the file suffix).
"""

from __future__ import annotations

import io
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from gpusim.config.derived import summary
from gpusim.report.text import launch_summary

BOUND_COLORS = {
    "compute": "#1f77b4",
    "memory": "#d62728",
    "latency": "#9467bd",
    "launch": "#ff7f0e",
    "transfer": "#8c564b",
    "paging": "#e377c2",
    "communication": "#2ca02c",
    "bubble": "#7f7f7f",
    "other": "#bcbd22",
}
DTYPE_COLORS = {"fp64": "#17becf", "fp32": "#1f77b4", "tf32": "#9467bd", "fp16": "#2ca02c", "bf16": "#d62728",
                "fp8": "#ff7f0e", "int8": "#8c564b", "fp4": "#e377c2"}
TRACK_ORDER = ("host", "host link", "stream 0", "SMs", "L2", "HBM")
COLLECTIVE_WORDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send", "recv",
                    "collective", "p2p")


def new_figure(width_in: float, height_in: float):
    """A figure of that size in inches with constrained layout, on the Agg canvas (no pyplot)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in), layout="constrained")


def _legend(ax) -> None:
    """A small legend in the upper right, where the axes have labelled artists (a run without
    kernels has none, and matplotlib would warn)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper right")


def save_figure(fig, path: str | Path, flag: str = "-o", dpi: float | None = None) -> Path:
    """Write ``fig`` to ``path`` (.png, .svg or .pdf: :data:`gpusim.results.export.PLOT_SUFFIXES`,
    refused in one line naming ``flag`` otherwise) through a temporary file, so a failed write leaves
    no half figure; PNGs at ``dpi`` (110 unless given). Returns the path."""
    from gpusim.results.export import atomic_output, check_figure_path

    p = Path(path)
    check_figure_path(flag, str(p))
    with atomic_output(p) as tmp:
        fig.savefig(tmp, dpi=(dpi or 110) if p.suffix.lower() == ".png" else None)
    return p


def figure_png_bytes(fig, dpi: int = 100) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def _time_unit(seconds: float) -> tuple[float, str]:
    if seconds >= 1.0:
        return 1.0, "s"
    if seconds >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


def kernel_category(record) -> str:
    """Where a kernel's time goes: compute, memory, latency, launch, transfer or communication."""
    name = f"{record.op} {record.name}".lower()
    if any(w in name for w in COLLECTIVE_WORDS):
        return "communication"
    if record.on_link or record.op in ("host_to_device", "device_to_host"):
        return "transfer"
    return record.bound if record.bound in BOUND_COLORS else "other"


# ---- roofline -----------------------------------------------------------------------------------


def roofline_points(result) -> list[dict[str, Any]]:
    """One point per kernel with FLOP: arithmetic intensity (FLOP per DRAM byte) and achieved FLOP/s.
    Host copies and collectives are not kernels on the device's roofline (a collective's reduction
    FLOP ride on link time)."""
    points = []
    for k in result.kernels:
        work = k.flop if k.executed_flop is None else k.executed_flop
        if work <= 0 or k.time_s <= 0 or k.on_link:
            continue
        points.append({
            "name": k.name, "op": k.op, "dtype": str(k.plan.get("dtype", "fp32")), "bound": k.bound,
            "intensity_flop_per_byte": work / k.dram_bytes if k.dram_bytes > 0 else float("inf"),
            "achieved_flop_per_s": work / k.time_s, "time_s": k.time_s,
        })
    return points


def roofline_figure(result, hardware, *, title: str | None = None):
    """Every kernel of ``result`` on the roofline of ``hardware`` (one roof per dtype the kernels use,
    plus FP32), marker area proportional to kernel time, colour by dtype, shape by bound."""
    from matplotlib.lines import Line2D

    info = summary(hardware)
    bandwidth = float(info["dram_bandwidth_bytes_per_s"])
    peaks: dict[str, float] = info["peak_flop_per_s"]
    points = roofline_points(result)
    dtypes = sorted({p["dtype"] for p in points} | ({"fp32"} if "fp32" in peaks else set()),
                    key=lambda d: list(DTYPE_COLORS).index(d) if d in DTYPE_COLORS else 99)
    finite = [p["intensity_flop_per_byte"] for p in points if p["intensity_flop_per_byte"] != float("inf")]
    ridges = [peaks[d] / bandwidth for d in dtypes if d in peaks]
    x_lo = min(finite + ridges + [1.0]) / 4
    x_hi = max(finite + ridges + [10.0]) * 4
    fig = new_figure(9, 6)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    handles = []
    import numpy as np

    xs = np.logspace(np.log10(x_lo), np.log10(x_hi), 200)
    for d in dtypes:
        if d not in peaks:
            continue
        color = DTYPE_COLORS.get(d, "k")
        ax.plot(xs, np.minimum(peaks[d], xs * bandwidth), color=color, lw=1.6, alpha=0.8)
        ax.annotate(f"{d.upper()} {peaks[d] / 1e12:,.1f} TFLOP/s", (x_hi, peaks[d]), ha="right", va="bottom",
                    fontsize=8, color=color)
        handles.append(Line2D([], [], color=color, lw=1.6, label=f"{d.upper()} roof"))
    max_time = max((p["time_s"] for p in points), default=1.0)
    markers = {"compute": "o", "memory": "^", "latency": "s", "launch": "D"}
    for p in points:
        x = p["intensity_flop_per_byte"] if p["intensity_flop_per_byte"] != float("inf") else x_hi / 1.5
        ax.scatter([x], [p["achieved_flop_per_s"]], s=15 + 600 * p["time_s"] / max_time,
                   c=DTYPE_COLORS.get(p["dtype"], "k"), marker=markers.get(p["bound"], "o"), alpha=0.55,
                   edgecolors="black", linewidths=0.4)
    for bound, marker in markers.items():
        if any(p["bound"] == bound for p in points):
            handles.append(Line2D([], [], ls="", marker=marker, color="gray", label=f"{bound}-bound kernel"))
    if not points:
        handles.append(Line2D([], [], ls="", marker="o", color="gray", label="no kernel with FLOP"))
    ax.set_xlim(x_lo, x_hi)
    y_lo = min([p["achieved_flop_per_s"] for p in points] + [min(peaks.values()) / 1e3]) / 3
    ax.set_ylim(y_lo, max(peaks.values()) * 3)
    ax.set_xlabel("arithmetic intensity (FLOP per DRAM byte)")
    ax.set_ylabel("achieved throughput (FLOP/s)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(handles=handles, loc="upper left", fontsize=8)
    skipped = sum(1 for k in result.kernels if k.flop <= 0)
    ax.set_title(title or f"Roofline: {result.workload} on {result.hardware} "
                          f"(DRAM {bandwidth / 1e12:.2f} TB/s; {len(points)} kernels"
                          + (f", {skipped} without FLOP not shown" if skipped else "") + ")", fontsize=10)
    return fig


# ---- timeline -----------------------------------------------------------------------------------


def _spans_of(result) -> list:
    if result.spans:
        return list(result.spans)
    from gpusim.results.result import Span

    spans = []
    for k in result.kernels:
        track = "host link" if kernel_category(k) == "transfer" else "stream 0"
        spans.append(Span(track, k.name, k.start_s, k.start_s + k.time_s, (("bound", k.bound),)))
    return spans


def timeline_figure(result, *, title: str | None = None, max_spans: int = 50_000):
    """A Gantt chart: one row per track (host launches, host link, stream 0, SMs, L2, HBM and any
    cluster tracks); kernels coloured by bound, SM waves shaded by occupancy, HBM by utilization."""
    from matplotlib.patches import Patch

    spans = _spans_of(result)[:max_spans]
    tracks = [t for t in TRACK_ORDER if any(s.track == t for s in spans)]
    for s in spans:
        if s.track not in tracks:
            tracks.append(s.track)
    end = max([s.end_s for s in spans] + [result.total_time_s, 1e-9])
    scale, unit = _time_unit(end)
    groups: dict[tuple[int, str, float], list[tuple[float, float]]] = defaultdict(list)
    used_bounds = set()
    for s in spans:
        args = dict(s.args)
        row = tracks.index(s.track)
        if "bound" in args:
            color = BOUND_COLORS.get(str(args["bound"]), BOUND_COLORS["other"])
            used_bounds.add(str(args["bound"]))
            alpha = 0.9
        else:
            shade = args.get("occupancy_fraction", args.get("utilization_fraction", args.get("hit_fraction", 0.8)))
            alpha = round(0.15 + 0.8 * min(1.0, max(0.0, float(shade))), 1)
            color = {"host": "#555555", "host link": BOUND_COLORS["transfer"], "SMs": "#17becf",
                     "L2": "#bcbd22", "HBM": BOUND_COLORS["memory"]}.get(s.track, BOUND_COLORS["communication"])
        width = max(s.end_s - s.start_s, 0.0) * scale
        groups[(row, color, alpha)].append((s.start_s * scale, width))
    fig = new_figure(11, 1.2 + 0.6 * max(len(tracks), 1))
    ax = fig.add_subplot(1, 1, 1)
    for (row, color, alpha), bars in groups.items():
        ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=color, alpha=alpha, linewidth=0)
    ax.set_yticks(range(len(tracks)), tracks)
    ax.set_ylim(max(len(tracks), 1) - 0.5, -0.5)
    ax.set_xlim(0, end * scale * 1.01)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("track")
    handles = [Patch(color=BOUND_COLORS.get(b, BOUND_COLORS["other"]), label=f"{b}-bound kernel")
               for b in sorted(used_bounds)]
    shaded = {"SMs": ("#17becf", "SM waves (shade = occupancy)"), "HBM": (BOUND_COLORS["memory"],
              "HBM (shade = utilization)"), "host link": (BOUND_COLORS["transfer"], "host-link copy"),
              "host": ("#555555", "host launch")}
    handles += [Patch(color=c, label=label) for t, (c, label) in shaded.items() if t in tracks]
    if not handles:
        handles = [Patch(color=BOUND_COLORS["other"], label="span")]
    # below the axes, in room the constrained layout keeps for it (a one-track chart clipped it)
    ncol = min(len(handles), 5)
    fig.set_figheight(fig.get_figheight() + 0.25 * math.ceil(len(handles) / ncol))
    fig.legend(handles=handles, loc="outside lower center", ncol=ncol, fontsize=8)
    ax.set_title(title or f"Timeline: {result.workload} on {result.hardware} "
                          f"({end * scale:,.3g} {unit}, {launch_summary(result).rsplit(', launch ', 1)[0]})", fontsize=10)
    return fig


# ---- breakdown ----------------------------------------------------------------------------------


def breakdown_table(result, by: str = "op") -> dict[str, dict[str, float]]:
    """Seconds per group (``by`` = "op", "layer" or "phase") and per category."""
    table: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for k in result.kernels:
        if by == "layer":
            key = "other" if k.layer is None else f"layer {k.layer}"
        else:
            key = str(getattr(k, by))
        table[key][kernel_category(k)] += k.time_s
    return {g: dict(c) for g, c in table.items()}


def _stacked(ax, table: dict[str, dict[str, float]], scale: float, max_groups: int, sort: bool) -> set[str]:
    groups = list(table)
    if sort:
        groups.sort(key=lambda g: -sum(table[g].values()))
    if len(groups) > max_groups:
        keep, rest = groups[:max_groups - 1], groups[max_groups - 1:]
        merged: dict[str, float] = defaultdict(float)
        for g in rest:
            for c, v in table[g].items():
                merged[c] += v
        table = {**{g: table[g] for g in keep}, f"{len(rest)} more": dict(merged)}
        groups = keep + [f"{len(rest)} more"]
    cats = [c for c in BOUND_COLORS if any(c in table[g] for g in groups)]
    bottoms = [0.0] * len(groups)
    for c in cats:
        values = [table[g].get(c, 0.0) * scale for g in groups]
        ax.bar(range(len(groups)), values, bottom=bottoms, color=BOUND_COLORS[c], label=c)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    ax.set_xticks(range(len(groups)), [g[:18] for g in groups], rotation=60, ha="right", fontsize=7)
    return set(cats)


def breakdown_figure(result, *, title: str | None = None, max_groups: int = 24):
    """Where the time goes: the run's totals by category, then per kernel kind, then per layer
    (per phase for workloads without layers)."""
    total = sum(k.time_s for k in result.kernels) or result.total_time_s or 1e-9
    scale, unit = _time_unit(max(total, result.total_time_s))
    fig = new_figure(13, 5)
    ax0, ax1, ax2 = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 2.2, 2.2]})
    overall = dict(result.time_breakdown_s) or {c: v for c, v in
                                                _sum_categories(breakdown_table(result)).items()}
    overall = {k: v for k, v in overall.items() if v > 0}
    denom = sum(overall.values()) or 1.0
    bottom = 0.0
    for c, v in overall.items():
        ax0.bar([0], [v * scale], bottom=bottom, color=BOUND_COLORS.get(c, BOUND_COLORS["other"]),
                label=f"{c} {v / denom:.0%}")
        bottom += v * scale
    ax0.set_xticks([0], ["whole run"])
    ax0.set_ylabel(f"time ({unit})")
    ax0.set_xlabel("category")
    ax0.set_title("time by category", fontsize=9)
    _legend(ax0)
    _stacked(ax1, breakdown_table(result, "op"), scale, max_groups, sort=True)
    ax1.set_title("per kernel kind", fontsize=9)
    ax1.set_xlabel("kernel kind (op)")
    ax1.set_ylabel(f"time ({unit})")
    _legend(ax1)
    by_layer = breakdown_table(result, "layer")
    second = "layer" if len(by_layer) > 1 else "phase"
    table = by_layer if second == "layer" else breakdown_table(result, "phase")
    if second == "layer":
        table = dict(sorted(table.items(), key=lambda kv: (kv[0] == "other", _layer_index(kv[0]))))
    _stacked(ax2, table, scale, max(max_groups, 130) if second == "layer" else max_groups, sort=False)
    ax2.set_title(f"per {second}", fontsize=9)
    ax2.set_xlabel(second)
    ax2.set_ylabel(f"time ({unit})")
    _legend(ax2)
    if second == "layer" and len(table) > 30:
        ax2.set_xticks([])
    fig.suptitle(title or f"Time breakdown: {result.workload} on {result.hardware} "
                          f"({result.total_time_s * scale:,.4g} {unit})", fontsize=11)
    return fig


def _layer_index(label: str) -> int:
    try:
        return int(label.split()[-1])
    except ValueError:
        return 10**9


def _sum_categories(table: dict[str, dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for cats in table.values():
        for c, v in cats.items():
            out[c] += v
    return dict(out)


# ---- comparison ---------------------------------------------------------------------------------


def compare_rows(results: Sequence, hardware: Sequence | None = None) -> list[dict[str, Any]]:
    """One row per result with the numbers ``gpusim compare`` tabulates (SI units)."""
    rows = []
    for i, r in enumerate(results):
        flop = sum((k.executed_flop if k.executed_flop is not None else k.flop) for k in r.kernels)
        row: dict[str, Any] = {
            "hardware": r.hardware, "workload": r.workload, "time_s": r.total_time_s,
            "achieved_flop_per_s": flop / r.total_time_s if r.total_time_s > 0 else 0.0,
            "peak_memory_bytes": r.peak_memory_bytes, "memory_capacity_bytes": r.memory_capacity_bytes,
            "fits_in_memory": r.fits_in_memory,
        }
        if r.step_time_s is not None:
            row["samples_per_s"] = r.samples_per_s
            row["mfu_fraction"] = r.mfu_fraction
            if r.tokens_per_s:
                row["tokens_per_s"] = r.tokens_per_s
        if r.energy_j is not None:
            row["energy_j"] = r.energy_j
        rows.append(row)
    if rows:
        base = rows[0]["time_s"]
        for row in rows:
            row["speedup_vs_first"] = base / row["time_s"] if row["time_s"] > 0 else 0.0
    return rows


def compare_figure(results: Sequence, *, title: str | None = None):
    """Side-by-side bars (one colour per device): time, throughput, MFU, memory and energy when known."""
    from matplotlib.patches import Patch

    rows = compare_rows(results)
    names = [r["hardware"] for r in rows]
    colors = [f"C{i % 10}" for i in range(len(rows))]
    metrics: list[tuple[str, list[float], str]] = []
    t_scale, t_unit = _time_unit(max(r["time_s"] for r in rows))
    metrics.append(("time", [r["time_s"] * t_scale for r in rows], f"time ({t_unit})"))
    if all("samples_per_s" in r for r in rows):
        key = "tokens_per_s" if all("tokens_per_s" in r for r in rows) else "samples_per_s"
        metrics.append(("throughput", [r[key] for r in rows], key.replace("_per_s", " per second")))
        metrics.append(("MFU", [100 * (r["mfu_fraction"] or 0.0) for r in rows], "model FLOP utilization (%)"))
    else:
        metrics.append(("throughput", [r["achieved_flop_per_s"] / 1e12 for r in rows], "achieved TFLOP/s"))
    metrics.append(("memory", [r["peak_memory_bytes"] / 2**30 for r in rows], "peak memory (GiB)"))
    if all("energy_j" in r for r in rows):
        metrics.append(("energy", [r["energy_j"] for r in rows], "energy (J)"))
    fig = new_figure(3.2 * len(metrics) + 1, 4.5)
    axes = fig.subplots(1, len(metrics))
    axes = list(axes) if len(metrics) > 1 else [axes]
    for ax, (label, values, ylabel) in zip(axes, metrics):
        ax.bar(range(len(values)), values, color=colors)
        ax.set_xticks(range(len(values)), [n[:14] for n in names], rotation=30, ha="right", fontsize=8)
        ax.set_title(label, fontsize=9)
        ax.set_ylabel(ylabel)
        ax.set_xlabel("hardware")
        if label == "memory":
            caps = [r["memory_capacity_bytes"] / 2**30 for r in rows]
            ax.scatter(range(len(caps)), caps, marker="_", s=400, color="black", zorder=3)
    fig.legend(handles=[Patch(color=c, label=n) for c, n in zip(colors, names)] +
               [Patch(color="black", label="device memory capacity")], loc="outside lower center",
               ncol=min(len(names) + 1, 6), fontsize=8)
    fig.suptitle(title or f"{rows[0]['workload']}: " + " vs ".join(names), fontsize=11)
    return fig
