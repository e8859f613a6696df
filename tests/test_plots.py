"""Every figure renders to a non-empty PNG/SVG and carries a title, axis labels and a legend."""

from __future__ import annotations

import argparse
import json

import pytest

from gpusim.config import load_hardware
from gpusim.engine.simulate import simulate
from gpusim.report.data import read_result
from gpusim.report.plots import (breakdown_figure, breakdown_table, compare_figure, compare_rows,
                                 figure_png_bytes, roofline_figure, roofline_points, save_figure, timeline_figure)
from gpusim.workload import load_workload

CASES = [("h100_sxm5_80gb", "bert_base_train"), ("xeon_8480", "mlp_mnist"),
         ("a100_sxm4_80gb", "gemm_8192_bf16"), ("tiny_gpu_4sm", "softmax_bf16"),
         ("jetson_agx_orin", "resnet50_inference")]
_cache: dict = {}


def _run(hw: str, wl: str):
    if (hw, wl) not in _cache:
        hardware = load_hardware(hw)
        _cache[(hw, wl)] = hardware, simulate(hardware, load_workload(wl))
    return _cache[(hw, wl)]


def _check_png(fig) -> None:
    data = figure_png_bytes(fig, dpi=40)
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000


def _labelled(ax) -> None:
    assert ax.get_xlabel() and ax.get_ylabel()
    assert ax.get_legend() is not None and ax.get_legend().get_texts()


@pytest.mark.parametrize("hw,wl", CASES)
def test_roofline_has_roofs_points_and_labels(hw, wl):
    hardware, result = _run(hw, wl)
    fig = roofline_figure(result, hardware)
    ax = fig.axes[0]
    assert "Roofline" in ax.get_title() and result.hardware in ax.get_title()
    _labelled(ax)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "FP32 roof" in labels
    points = roofline_points(result)
    assert len(ax.collections) == len(points) > 0
    # no kernel beats the roof of its dtype: achieved <= peak (same numbers the plot draws)
    from gpusim.config import summary

    peaks = summary(hardware)["peak_flop_per_s"]
    for p in points:
        assert p["achieved_flop_per_s"] <= peaks.get(p["dtype"], max(peaks.values())) * 1.001
    _check_png(fig)


@pytest.mark.parametrize("hw,wl", CASES)
def test_timeline_tracks(hw, wl):
    _, result = _run(hw, wl)
    fig = timeline_figure(result)
    ax = fig.axes[0]
    assert "Timeline" in ax.get_title()
    assert ax.get_xlabel() and ax.get_ylabel()
    # the legend is the figure's, below the axes in room the layout keeps for it
    assert len(fig.legends) == 1 and fig.legends[0].get_texts()
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert "stream 0" in ticks and "SMs" in ticks and "HBM" in ticks
    # the x range covers the whole run
    scale = {"s": 1.0, "ms": 1e3, "µs": 1e6}[ax.get_xlabel().split("(")[1].rstrip(")")]
    assert ax.get_xlim()[1] >= result.total_time_s * scale
    _check_png(fig)


@pytest.mark.parametrize("hw,wl", CASES)
def test_breakdown_panels_sum_to_kernel_time(hw, wl):
    _, result = _run(hw, wl)
    fig = breakdown_figure(result)
    assert fig.get_suptitle().startswith("Time breakdown")
    assert len(fig.axes) == 3
    for ax in fig.axes:
        assert ax.get_title()
        _labelled(ax)
    table = breakdown_table(result, "op")
    assert sum(sum(c.values()) for c in table.values()) == pytest.approx(sum(k.time_s for k in result.kernels))
    _check_png(fig)


def test_compare_figure_and_rows():
    results = [_run("xeon_8480", "mlp_mnist")[1], _run("h100_sxm5_80gb", "bert_base_train")[1]]
    rows = compare_rows(results)
    assert rows[0]["speedup_vs_first"] == 1.0
    assert rows[1]["speedup_vs_first"] == pytest.approx(results[0].total_time_s / results[1].total_time_s)
    fig = compare_figure(results)
    assert fig.get_suptitle()
    assert fig.legends and [t.get_text() for t in fig.legends[0].get_texts()][:2] == ["xeon_8480", "h100_sxm5_80gb"]
    for ax in fig.axes:
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    _check_png(fig)


def test_save_figure_png_and_svg(tmp_path):
    hardware, result = _run("a100_sxm4_80gb", "gemm_8192_bf16")
    fig = roofline_figure(result, hardware)
    png = save_figure(fig, tmp_path / "r.png")
    svg = save_figure(fig, tmp_path / "r.svg")
    assert png.stat().st_size > 2000
    assert "<svg" in svg.read_text()[:500] and "Roofline" in svg.read_text()
    from gpusim.errors import ConfigError

    with pytest.raises(ConfigError):
        save_figure(fig, tmp_path / "r.jpg")


def _plot_parser():
    from gpusim.commands.plot_results import register_plot_subcommands

    p = argparse.ArgumentParser()
    register_plot_subcommands(p.add_subparsers())
    return p


def test_plot_subcommands_and_report_from_json(tmp_path, capsys):
    from gpusim.cli import main

    rj = tmp_path / "r.json"
    assert main(["run", "tiny_gpu_4sm", "softmax_bf16", "--json", str(rj)]) == 0
    parser = _plot_parser()
    for argv in (["roofline", "xeon_8480", "gemm_8192_bf16", "--set", "gpu.num_sms=2"],
                 ["roofline", "h100_sxm5_80gb", "gemm_8192_bf16", "--set", "ops.0.m=1024"],
                 ["timeline", "h100_sxm5_80gb", "mlp_mnist"], ["timeline", str(rj)], ["breakdown", str(rj)]):
        out = tmp_path / f"{argv[0]}_{len(list(tmp_path.iterdir()))}.svg"
        args = parser.parse_args(argv + ["-o", str(out)])
        if "num_sms" in argv[-1]:  # a GPU key on a CPU description is a one-line config error
            from gpusim.errors import ConfigError

            with pytest.raises(ConfigError):
                args.func(args)
            continue
        assert args.func(args) == 0
        assert out.stat().st_size > 2000
    # the JSON round trip keeps every kernel
    data = json.loads(rj.read_text())
    assert len(read_result(rj).kernels) == len(data["kernels"])
    assert main(["report", str(rj)]) == 0
    text = capsys.readouterr().out
    assert "# softmax-bf16 on tiny_gpu_4sm" in text or "softmax" in text.splitlines()[0]
    page = tmp_path / "r.html"
    assert main(["report", str(rj), "--html", str(page)]) == 0
    html = page.read_text()
    assert html.count("data:image/png;base64,") == 3 and "<table>" in html


def test_compare_command(tmp_path, capsys):
    from gpusim.cli import main

    out = tmp_path / "c.png"
    assert main(["compare", "xeon_8480", "h100_sxm5_80gb", "mlp_mnist", "-o", str(out), "--json", "-"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["hardware"] for r in rows] == ["xeon_8480", "h100_sxm5_80gb"]
    assert rows[1]["speedup_vs_first"] == pytest.approx(rows[0]["time_s"] / rows[1]["time_s"])
    assert out.stat().st_size > 2000
    assert main(["compare", "mlp_mnist"]) == 2
    assert main(["compare", "h100_sxm5_80gb", "mlp_mnist"]) == 2  # one HW: nothing to compare
    assert "two or more HW" in capsys.readouterr().err


def test_a_run_without_kernels_plots_without_warnings(tmp_path, recwarn):
    """A one-GPU all-reduce moves nothing: zero kernels, zero seconds. Its report and figures are drawn
    without matplotlib's warnings (empty legends, a zero-height track axis)."""
    from gpusim.cli import main

    wl = tmp_path / "ar1.yaml"
    wl.write_text("schema_version: 1\nname: ar1\nops:\n"
                  "  - {name: ar, op: all_reduce, num_bytes: 1 MiB, num_gpus: 1, dtype: bf16}\n")
    result = tmp_path / "ar1.json"
    assert main(["run", "h100_sxm5_80gb", str(wl), "--json", str(result)]) == 0
    assert json.loads(result.read_text())["kernels"] == []
    assert main(["report", str(result), "--html", str(tmp_path / "ar1.html")]) == 0
    assert main(["plot", "timeline", str(result), "-o", str(tmp_path / "t.png")]) == 0
    assert main(["plot", "breakdown", str(result), "-o", str(tmp_path / "b.png")]) == 0
    assert [str(w.message) for w in recwarn if issubclass(w.category, UserWarning)] == []


def test_collectives_and_host_copies_are_not_roofline_points():
    # a 1 GiB all-reduce's reduction FLOP ride on link time: no point at the roofline's right edge
    _, result = _run("dgx_h100", "all_reduce_1gib")
    assert result.total_flop > 0 and roofline_points(result) == []
    _, result = _run("h100_sxm5_80gb", "mlp_mnist")  # its input's host-to-device copy is not a point
    assert {p["op"] for p in roofline_points(result)}.isdisjoint({"host_to_device", "device_to_host"})
