"""``gpusim report RESULT.json``: a readable Markdown summary of a run; ``--html`` for one self-contained
page with the breakdown, timeline and roofline plots embedded."""

from __future__ import annotations

import argparse
import base64
import html
import sys

from gpusim.commands.hw import non_negative_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report", help="a Markdown summary of a result JSON, or a self-contained HTML page with plots",
        description="Summarize RESULT.json (written by `gpusim run --json`): totals, memory, time by category, "
                    "the slowest kernels and warnings. --html writes one page with the plots embedded.",
        epilog="Example: gpusim run h100_sxm5_80gb bert_base_train --json r.json && gpusim report r.json --html r.html")
    p.add_argument("result", metavar="RESULT.json")
    p.add_argument("--html", metavar="PATH", help="write a self-contained HTML page to PATH")
    p.add_argument("--top", type=non_negative_int, default=10, help="how many of the slowest kernels to list (default 10)")
    p.set_defaults(func=cmd_report)


def markdown_summary(result, top: int = 10, run_cost: dict | None = None) -> str:
    """The report as Markdown text; ``run_cost`` is the result JSON's epoch and training-run costs."""
    from gpusim.report.plots import breakdown_table
    from gpusim.report.text import cost_lines, launch_summary, layout_summary, representative_block, step_summary
    from gpusim.units import format_binary_bytes, format_duration, format_quantity, format_usd

    lines = [f"# {result.workload} on {result.hardware}", ""]
    lines.append(f"- total time: {format_duration(result.total_time_s)} "
                 f"({launch_summary(result)})")
    if result.step_time_s is not None:
        lines.append(f"- {step_summary(result).replace('step', 'step:', 1)}")
    layout = layout_summary(result)
    if layout is not None:
        lines.append(f"- {layout}")
    per_gpu = " per GPU" if result.num_gpus > 1 else ""
    stage = result.memory.get("pipeline_stage")
    lines.append(f"- memory{per_gpu}: {format_binary_bytes(result.peak_memory_bytes)} of "
                 f"{format_binary_bytes(result.memory_capacity_bytes)}"
                 + (f" on pipeline stage {stage}, the fullest" if stage is not None else "")
                 + f" ({'fits' if result.fits_in_memory else 'does NOT fit'})")
    if result.energy_j is not None:
        devices = f" on {result.num_gpus} GPUs" if result.num_gpus > 1 else ""
        lines.append(f"- energy{devices}: {format_quantity(result.energy_j, 'j')}, average power "
                     f"{result.avg_power_w:,.0f} W{per_gpu}, {result.flop_per_j / 1e9:,.1f} GFLOP/J")
    if result.cost_usd is not None:
        lines.append(f"- cost: {format_usd(result.cost_usd)}")
    lines += [f"- {line}" for line in cost_lines(run_cost or {})]
    if result.calibration_source:
        lines.append(f"- calibration: {result.calibration_source}")
    total = sum(result.time_breakdown_s.values()) or 1.0
    lines += ["", "## Time by category", "", "| category | time | share |", "|---|---:|---:|"]
    for k, v in sorted(result.time_breakdown_s.items(), key=lambda kv: -kv[1]):
        if v > 0:
            lines.append(f"| {k} | {format_duration(v)} | {v / total:.1%} |")
    block = " (one representative block of the step)" if representative_block(result) else ""
    lines += ["", f"## Time per kernel kind{block}", "", "| op | time | share | main bound |", "|---|---:|---:|---|"]
    table = breakdown_table(result, "op")
    ktotal = sum(sum(c.values()) for c in table.values()) or 1.0
    for op, cats in sorted(table.items(), key=lambda kv: -sum(kv[1].values())):
        t = sum(cats.values())
        lines.append(f"| {op} | {format_duration(t)} | {t / ktotal:.1%} | {max(cats, key=cats.get)} |")
    if top > 0:
        lines += ["", f"## Slowest {top} kernels{block}", "",
                  "| kernel | launches | time | TFLOP/s | GB/s | L2 hit | bound |", "|---|---:|---:|---:|---:|---:|---|"]
    for k in sorted(result.kernels, key=lambda k: -k.time_s)[:top]:
        gbs = k.dram_bytes / k.time_s / 1e9 if k.time_s > 0 else 0.0
        lines.append(f"| {k.name} | {max(1, int(k.repeat)):,} | {format_duration(k.time_s)} | "
                     f"{k.achieved_flop_per_s / 1e12:.1f} | "
                     f"{gbs:,.0f} | {k.l2_hit_fraction:.0%} | {k.bound} |")
    if result.warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in result.warnings]
    return "\n".join(lines) + "\n"


def html_page(result, hardware=None, top: int = 10, run_cost: dict | None = None) -> str:
    """One self-contained HTML page: the summary tables and the plots as base64 PNGs."""
    from gpusim.report.plots import breakdown_figure, figure_png_bytes, roofline_figure, timeline_figure

    figures = [("Time breakdown", breakdown_figure(result)), ("Timeline", timeline_figure(result))]
    if hardware is not None:
        figures.append(("Roofline", roofline_figure(result, hardware)))
    body = [_markdown_to_html(markdown_summary(result, top, run_cost))]
    for title, fig in figures:
        data = base64.b64encode(figure_png_bytes(fig)).decode("ascii")
        body.append(f"<h2>{html.escape(title)}</h2>\n<img alt=\"{html.escape(title)}\" "
                    f"src=\"data:image/png;base64,{data}\" style=\"max-width:100%\">")
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}"
             "td:not(:first-child){text-align:right}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(result.workload)} on "
            f"{html.escape(result.hardware)}</title><style>{style}</style></head><body>\n" + "\n".join(body) +
            "\n</body></html>\n")


def _markdown_to_html(text: str) -> str:
    out, in_table, in_list = [], False, False
    for line in text.splitlines():
        if line.startswith("|") and set(line.replace("|", "").strip()) <= set("-:") and line.strip("|"):
            continue
        if line.startswith("|"):
            cells = [html.escape(c.strip()) for c in line.strip("|").split("|")]
            tag = "td" if in_table else "th"
            if not in_table:
                out.append("<table>")
                in_table = True
            out.append("<tr>" + "".join(f"<{tag}>{c}</{tag}>" for c in cells) + "</tr>")
            continue
        if in_table:
            out.append("</table>")
            in_table = False
        if line.startswith("- "):
            if not in_list:
                out.append("<ul>")
                in_list = True
            out.append(f"<li>{html.escape(line[2:])}</li>")
            continue
        if in_list:
            out.append("</ul>")
            in_list = False
        if line.startswith("## "):
            out.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("# "):
            out.append(f"<h1>{html.escape(line[2:])}</h1>")
    if in_table:
        out.append("</table>")
    if in_list:
        out.append("</ul>")
    return "\n".join(out)


def cmd_report(args: argparse.Namespace) -> int:
    from gpusim.report.data import read_result_data

    if args.html:
        from gpusim.results.export import announce_written, check_output_path

        check_output_path(args.html, flag="--html", inputs=(args.result,))
    result, data = read_result_data(args.result)
    run_cost = data.get("run_cost") if isinstance(data.get("run_cost"), dict) else None
    if args.html:
        from gpusim.config import load_hardware
        from gpusim.errors import GpusimError
        from gpusim.results.export import write_text_file

        try:
            hardware = load_hardware(result.hardware)
        except GpusimError:
            hardware = None  # a description not in the library: no roofs to draw
        page = html_page(result, hardware, args.top, run_cost)
        write_text_file(args.html, page)
        announce_written(args.html)
        return 0
    sys.stdout.write(markdown_summary(result, args.top, run_cost))
    return 0
