"""``gpusim plot ...``: figures. The ``plot`` group and its sweep figures (``plot sweep``, ``plot pareto``)
live here; the figures of one run (roofline, timeline, breakdown) are registered from
:mod:`gpusim.commands.plot_results`. Each figure kind is one subcommand added in :func:`register`; matplotlib is imported inside the functions (Agg backend), and
the output format follows the file extension (.png, .svg, .pdf)."""

from __future__ import annotations

import argparse

from gpusim.errors import ConfigError
from gpusim.results.export import announce_written

METRIC_LABELS = {
    "total_time_s": "time (s)", "step_time_s": "step time (s)", "tokens_per_s": "tokens/s",
    "samples_per_s": "samples/s", "mfu_fraction": "MFU", "energy_j": "energy (J)", "avg_power_w": "average power (W)",
    "peak_power_w": "peak power (W)", "flop_per_j": "FLOP/J", "cost_usd": "cost (USD)",
    "tokens_per_usd": "tokens/USD", "samples_per_usd": "samples/USD", "clock_fraction_min": "lowest clock fraction",
}

PARETO_OBJECTIVES = {"time": "total_time_s", "energy": "energy_j", "cost": "cost_usd"}


def register(sub: argparse._SubParsersAction) -> None:
    plot = sub.add_parser("plot", help="figures: roofline, timeline, breakdown, sweeps, Pareto fronts",
                          description="Figures of one simulated run or of a sweep results file.",
                          epilog="Example: gpusim plot roofline h100_sxm5_80gb bert_large_train -o roofline.png "
                                 "(each PLOT_COMMAND's --help has its own)")
    plot_sub = plot.add_subparsers(dest="plot_command", metavar="PLOT_COMMAND")
    plot_sub.required = True
    _register_sweep(plot_sub)
    _register_pareto(plot_sub)
    from gpusim.commands.plot_results import register_plot_subcommands  # roofline, timeline, breakdown

    register_plot_subcommands(plot_sub)


# --------------------------------------------------------------------------------------- plot sweep


def _register_sweep(plot_sub) -> None:
    p = plot_sub.add_parser("sweep", help="a metric against a swept parameter",
                            description="Plot METRIC (--y) against a swept parameter (--x) from a sweep results "
                                        "file; one line per value of --hue. Values with units are plotted in SI.",
                            epilog="Example: gpusim plot sweep sweep.csv --x gpu.dram.bandwidth_bytes_per_s "
                                   "--y tokens_per_s --hue batch_size --out bw.png")
    p.add_argument("results", metavar="RESULTS")
    p.add_argument("--x", required=True, metavar="KEY")
    p.add_argument("--y", required=True, metavar="METRIC")
    p.add_argument("--hue", metavar="KEY", help="one line per value of this column")
    p.add_argument("--logx", action="store_true")
    p.add_argument("--logy", action="store_true")
    p.add_argument("-o", "--out", default="sweep.png", metavar="PATH", help="figure file (.png, .svg, .pdf)")
    p.set_defaults(func=cmd_plot_sweep)


def _numeric_column(rows, column: str, source: str) -> list:
    from gpusim.sweep import numeric_value

    if rows and column not in rows[0]:
        known = ", ".join(k for k in rows[0] if k != "point_key")
        raise ConfigError(source, column, f"no such column (columns: {known})")
    return [numeric_value(r[column]) for r in rows]


def cmd_plot_sweep(args: argparse.Namespace) -> int:
    from gpusim.sweep import read_results

    rows = [r for r in read_results(args.results) if not r.get("error")]
    if not rows:
        raise ConfigError(args.results, "", "no successful points to plot")
    xs = _numeric_column(rows, args.x, args.results)
    ys = _numeric_column(rows, args.y, args.results)
    if args.hue and args.hue not in rows[0]:
        known = ", ".join(k for k in rows[0] if k != "point_key")
        raise ConfigError(args.results, args.hue, f"no such column (columns: {known})")
    for column, values in ((args.x, xs), (args.y, ys)):
        if all(v is None for v in values):
            raise ConfigError(args.results, column, "no numeric values to plot")
    groups: dict[str, list[tuple[float, float]]] = {}
    for r, x, y in zip(rows, xs, ys):
        if x is None or y is None:
            continue
        label = r[args.hue] if args.hue else ""
        groups.setdefault(label, []).append((x, y))
    if not groups:
        raise ConfigError(args.results, f"{args.x}, {args.y}", "no point has numbers in both columns")
    from gpusim.report.plots import new_figure

    fig = new_figure(6.4, 4.2)
    ax = fig.subplots()
    for label, pts in sorted(groups.items(), key=lambda kv: _sort_key(kv[0])):
        pts.sort()
        # points sharing x (other parameters varied): show all, join their mean
        xs_sorted = sorted({x for x, _ in pts})
        means = [sum(y for x2, y in pts if x2 == x) / sum(1 for x2, _ in pts if x2 == x) for x in xs_sorted]
        (line,) = ax.plot(xs_sorted, means, marker="o", label=f"{args.hue}={label}" if args.hue else None)
        if len(pts) > len(xs_sorted):  # other parameters varied too: show every point, the line is the mean
            ax.scatter([x for x, _ in pts], [y for _, y in pts], s=12, alpha=0.4, color=line.get_color())
    ax.set_xlabel(args.x)
    ax.set_ylabel(METRIC_LABELS.get(args.y, args.y))
    if args.logx:
        ax.set_xscale("log")
    if args.logy:
        ax.set_yscale("log")
    if args.hue:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax.set_title(f"{rows[0]['workload']} on {rows[0]['hardware']}", fontsize=10)
    _save(fig, args.out)
    announce_written(args.out)
    return 0


def _sort_key(label: str):
    from gpusim.sweep import numeric_value

    n = numeric_value(label)
    return (0, n, "") if n is not None else (1, 0.0, label)


# --------------------------------------------------------------------------------------- plot pareto


def _register_pareto(plot_sub) -> None:
    p = plot_sub.add_parser("pareto", help="time vs energy (vs cost) with the Pareto front",
                            description="Scatter every successful point of a sweep by time and energy, coloured by "
                                        "cost when the sweep has prices, and mark the points no other point beats "
                                        "on all of time, energy and cost (the Pareto front).",
                            epilog="Example: gpusim plot pareto sweep.csv --out pareto.svg")
    p.add_argument("results", metavar="RESULTS")
    p.add_argument("--objectives", default="time,energy,cost", metavar="LIST",
                   help="objectives to minimize, from time, energy, cost (default all three; cost is "
                        "skipped when the sweep has no prices)")
    p.add_argument("--label", metavar="KEY", help="annotate front points with this column")
    p.add_argument("-o", "--out", default="pareto.png", metavar="PATH", help="figure file (.png, .svg, .pdf)")
    p.set_defaults(func=cmd_plot_pareto)


def cmd_plot_pareto(args: argparse.Namespace) -> int:
    from gpusim.sweep import pareto_front, read_results

    rows = [r for r in read_results(args.results) if not r.get("error")]
    if not rows:
        raise ConfigError(args.results, "", "no successful points to plot")
    names = [o.strip() for o in args.objectives.split(",") if o.strip()]
    for n in names:
        if n not in PARETO_OBJECTIVES:
            raise ConfigError("--objectives", n, f"unknown objective (use {', '.join(PARETO_OBJECTIVES)})")
    has_cost = any(r.get("cost_usd") for r in rows)
    if "cost" in names and not has_cost:
        names.remove("cost")
    if len(names) < 2:
        raise ConfigError("--objectives", args.objectives, "needs at least two objectives with values")
    columns = [PARETO_OBJECTIVES[n] for n in names]
    front = set(pareto_front(rows, columns))
    times = _numeric_column(rows, "total_time_s", args.results)
    energies = _numeric_column(rows, "energy_j", args.results)
    costs = _numeric_column(rows, "cost_usd", args.results) if has_cost else [None] * len(rows)
    from gpusim.report.plots import new_figure

    fig = new_figure(6.4, 4.6)
    ax = fig.subplots()
    idx = [i for i in range(len(rows)) if times[i] is not None and energies[i] is not None]
    colour = [costs[i] for i in idx] if has_cost and all(costs[i] is not None for i in idx) else None
    sc = ax.scatter([times[i] for i in idx], [energies[i] for i in idx], c=colour, s=16,
                    cmap="viridis" if colour else None, alpha=0.6, label="points")
    if colour:
        fig.colorbar(sc, ax=ax, label="cost (USD)")
    f_idx = sorted((i for i in idx if i in front), key=lambda i: times[i])
    ax.scatter([times[i] for i in f_idx], [energies[i] for i in f_idx], s=60, facecolors="none",
               edgecolors="red", label=f"Pareto front ({', '.join(names)})")
    # the time-energy staircase of the front
    stair, best = [], float("inf")
    for i in sorted(idx, key=lambda i: (times[i], energies[i])):
        if energies[i] < best:
            best = energies[i]
            stair.append(i)
    ax.step([times[i] for i in stair], [energies[i] for i in stair], where="post", color="red", alpha=0.5,
            linewidth=1)
    if args.label:
        if args.label not in rows[0]:
            raise ConfigError(args.results, args.label, "no such column")
        for i in f_idx:
            ax.annotate(rows[i][args.label], (times[i], energies[i]), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")
    ax.set_xlabel(METRIC_LABELS["total_time_s"])
    ax.set_ylabel(METRIC_LABELS["energy_j"])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{rows[0]['workload']} on {rows[0]['hardware']}: {len(front)} of {len(rows)} points on the front",
                 fontsize=10)
    _save(fig, args.out)
    announce_written(args.out, f"{len(front)} Pareto-optimal points")
    return 0


# --------------------------------------------------------------------------------------- helpers


def _save(fig, path: str) -> None:
    from gpusim.report.plots import save_figure

    save_figure(fig, path, "--out", dpi=150)
