"""Every plot works on every built-in hardware description and every built-in workload: each
description is plotted with a small workload, each workload on one GPU (systems run their multi-GPU
workloads through the cluster engine), and every figure is a non-empty PNG with a title, axis labels
and a legend."""

from __future__ import annotations

import pytest

from gpusim.commands.plot_results import simulate_named
from gpusim.config import list_hardware, load_hardware
from gpusim.report.plots import breakdown_figure, figure_png_bytes, roofline_figure, timeline_figure
from gpusim.workload import list_workloads

HARDWARE = [name for name, _ in list_hardware()]
WORKLOADS = [name for name, _ in list_workloads()]


def _check(fig) -> None:
    data = figure_png_bytes(fig, dpi=30)
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    assert fig._suptitle is not None or any(ax.get_title() for ax in fig.axes)
    labelled = [ax for ax in fig.axes if ax.get_xlabel() or ax.get_ylabel()]
    assert labelled
    assert any(ax.get_legend() is not None for ax in fig.axes) or fig.legends


def _all_figures(hw: str, wl: str) -> None:
    hardware, result = simulate_named(hw, wl, [], record_spans=True)
    if hardware.kind != "system" or result.kernels:
        _check(roofline_figure(result, hardware))
    _check(timeline_figure(result))
    _check(breakdown_figure(result))


@pytest.mark.parametrize("hw", HARDWARE)
def test_every_hardware_description_plots(hw):
    workload = "all_reduce_1gib" if load_hardware(hw).kind == "system" else "mlp_block_chain"
    _all_figures(hw, workload)


@pytest.mark.parametrize("wl", [w for w in WORKLOADS if w != "all_reduce_1gib"])
def test_every_workload_plots(wl):
    _all_figures("h100_sxm5_80gb", wl)
