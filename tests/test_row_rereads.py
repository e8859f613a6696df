"""Row kernels that read their row twice (norm statistics, softmax passes): the second read stays
on chip only while the rows of all resident CTAs fit in L2; PyTorch's native LayerNorm launch."""

from __future__ import annotations

import pytest

from gpusim.config import load_hardware
from gpusim.engine.kernel import simulate_kernel
from gpusim.engine.machine import machine_of
from gpusim.mapping import map_op
from gpusim.mapping.streaming import reread_miss_fraction, streaming_plan, torch_layer_norm_launch
from gpusim.workload.ops import LayerNorm


@pytest.fixture(scope="module")
def h100():
    return machine_of(load_hardware("h100_sxm5_80gb"))


def _norm_plan(machine, rows, cols, threads):
    n = rows * cols * 4.0
    return streaming_plan(machine, "ln", "layernorm", "fp32", bytes_read=n, bytes_written=n, flop=4.0 * rows * cols,
                          sfu_ops=0.0, num_ctas=rows, threads_per_cta=threads, bytes_in_flight_per_thread=16.0,
                          l2_reread_fraction=1.0)


def test_torch_layer_norm_launch_is_one_128_thread_cta_per_row():
    assert torch_layer_norm_launch(4096, 8192, "fp32") == (4096, 128, 16.0)
    assert torch_layer_norm_launch(3, 1024, "bf16") == (3, 128, 8.0)


def test_reread_miss_fraction_is_zero_far_below_l2_and_one_far_above(h100):
    assert reread_miss_fraction(h100, h100.l2_capacity_bytes / 100) == pytest.approx(0.0, abs=1e-9)
    assert reread_miss_fraction(h100, h100.l2_capacity_bytes * 10) == pytest.approx(1.0, abs=1e-9)


def test_rows_that_fit_in_l2_are_reread_on_chip(h100):
    # 1024-thread CTAs: 2 per SM x 132 SMs x 64 KiB of row read and written = 17 MB << 50 MB L2
    rows, cols = 4096, 8192
    plan = _norm_plan(h100, rows, cols, 1024)
    assert sum(plan.wave_dram_bytes) == pytest.approx(2 * rows * cols * 4.0, rel=1e-4)


def test_rows_that_overflow_l2_are_reread_from_dram(h100):
    # 128-thread CTAs: 16 per SM x 132 SMs x 64 KiB = 138 MB >> 50 MB L2: read, re-read, write
    rows, cols = 4096, 8192
    plan = _norm_plan(h100, rows, cols, 128)
    assert sum(plan.wave_dram_bytes) == pytest.approx(3 * rows * cols * 4.0, rel=1e-3)
    assert plan.l2_bytes_per_cta * rows == pytest.approx(3 * rows * cols * 4.0)


def test_overflowing_rereads_make_the_kernel_slower(h100):
    fits = simulate_kernel(_norm_plan(h100, 4096, 8192, 1024), h100).time_s
    spills = simulate_kernel(_norm_plan(h100, 4096, 8192, 128), h100).time_s
    assert spills > 1.3 * fits


def test_layer_norm_forward_maps_to_the_framework_launch(h100):
    (plan,) = map_op(LayerNorm(rows=2048, cols=1024, dtype="fp32"), h100)
    assert (plan.grid, plan.threads_per_cta) == (2048, 128)
