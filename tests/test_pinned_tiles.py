"""Pinned GEMM tiles: a matmul may name the tile its kernel uses (the kernel a profile shows the library
ran), and a measured row may name it in ``kernel_tile``; the mapper then plans exactly that tile."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpusim.accuracy import simulate_case
from gpusim.config import load_hardware
from gpusim.engine.kernel import estimate_kernel_s
from gpusim.engine.machine import machine_of
from gpusim.errors import SimulationError
from gpusim.mapping import best_gemm, map_op
from gpusim.mapping.gemm import gemm_plan, tile_candidates
from gpusim.mapping.plan import Tile
from gpusim.measurements import load_kernel_cases
from gpusim.workload.expand import backward_ops
from gpusim.workload.layers import FwdOp
from gpusim.workload.ops import Matmul


@pytest.mark.parametrize("tile", [
    Tile(128, 128, 32, 3, 4),
    Tile(64, 64, 8, 2, 2, split_k=4),
    Tile(128, 256, 64, 4, 8, cluster=2),
    Tile(128, 240, 64, 4, 8, cluster=2, cluster_n=2),
])
def test_a_tile_label_parses_back_to_the_tile(tile):
    assert Tile.parse(tile.label()) == tile


@pytest.mark.parametrize("label", ["128x128", "128x128x32_s3", "64x64_32x6", "0x64x32_s2_w4", "128x128x32_s3_w4_"])
def test_a_malformed_label_is_refused(label):
    with pytest.raises(ValueError, match="tile"):
        Tile.parse(label)


def test_a_pinned_tile_is_planned_as_given_and_never_beats_the_search():
    machine = machine_of(load_hardware("rtx_4090"))
    m = n = k = 2056
    tile = Tile(64, 64, 32, 6, 4)
    assert tile in tile_candidates(machine, "bf16", m, n, k, 1)
    flop = 2.0 * m * n * k
    pinned = best_gemm(machine, "matmul", "matmul", m, n, k, 1, "bf16", flop, tile=tile)
    assert pinned.tile == tile
    assert pinned == gemm_plan(machine, "matmul", "matmul", m, n, k, 1, "bf16", tile, flop)
    # 2056 / 64 = 32.1 -> 33 tiles per side
    assert pinned.grid == 33 * 33
    searched = best_gemm(machine, "matmul", "matmul", m, n, k, 1, "bf16", flop)
    assert estimate_kernel_s(pinned, machine) >= estimate_kernel_s(searched, machine)


def test_a_workload_matmul_carries_its_tile_to_the_plan():
    machine = machine_of(load_hardware("h100_sxm5_80gb"))
    (plan,) = map_op(Matmul(m=4096, n=4096, k=4096, tile="128x128x64_s4_w4"), machine)
    assert plan.tile == Tile(128, 128, 64, 4, 4)
    assert plan.name == "matmul[128x128x64_s4_w4]"


def test_a_tile_that_does_not_fit_says_which_limit_it_breaks():
    h100 = machine_of(load_hardware("h100_sxm5_80gb"))
    # 256 x 256 FP32 accumulators over 8 warps = 256 per thread, + 40 for addresses and operands = 296 > 255
    with pytest.raises(SimulationError, match="296 registers per thread.*registers per thread"):
        best_gemm(h100, "matmul", "matmul", 4096, 4096, 4096, 1, "bf16", 1.0, tile=Tile(256, 256, 64, 4, 8))
    a100 = machine_of(load_hardware("a100_sxm4_80gb"))  # Ampere has no thread-block clusters
    with pytest.raises(SimulationError, match="cluster of 2 CTAs"):
        best_gemm(a100, "matmul", "matmul", 4096, 4096, 4096, 1, "bf16", 1.0, tile=Tile(128, 128, 64, 4, 4, cluster=2))
    # 4096^2 in 128x128 tiles is 1,024 tiles: 7 full waves of 132 and a tail of 100, more than half full
    with pytest.raises(SimulationError, match="runs no stream-K tail"):
        best_gemm(h100, "matmul", "matmul", 4096, 4096, 4096, 1, "bf16", 1.0,
                  tile=Tile.parse("128x128x64_s4_w4_streamk"))
    # on A100 (one CTA per tile) there is no tail at all; 10240^2 on H100 (tail of 32) has one
    with pytest.raises(SimulationError, match="runs no stream-K tail"):
        best_gemm(a100, "matmul", "matmul", 10240, 10240, 4096, 1, "bf16", 1.0,
                  tile=Tile.parse("128x256x32_s3_w8_streamk"))
    plan = best_gemm(h100, "matmul", "matmul", 10240, 10240, 4096, 1, "bf16", 1.0,
                     tile=Tile.parse("128x256x32_s3_w8_streamk"))
    assert plan.tail_work_fraction == pytest.approx(32 / 132)


def test_a_malformed_tile_on_a_matmul_op_is_refused():
    with pytest.raises(ValueError, match="MxNxK_sSTAGES_wWARPS"):
        Matmul(m=8, n=8, k=8, tile="big")


def test_the_backward_gemms_do_not_inherit_the_forward_tile():
    forward = Matmul(m=2048, n=4096, k=1024, tile="128x128x64_s4_w4")
    kernels = dict(backward_ops(FwdOp("fc", forward, weight=True), grad_accumulation=False, fusion="none"))
    assert kernels["dgrad"].tile is None and kernels["wgrad"].tile is None


def test_a_measured_row_with_a_kernel_tile_is_simulated_with_that_tile():
    case = next(c for c in load_kernel_cases() if c.case_id == "rtx4090_torch_bf16_mm_2056")
    assert case.kernel_tile == "64x64x32_s6_w4"
    machine = machine_of(load_hardware(case.gpu))
    device = load_hardware(case.gpu).gpu
    pinned_s, _ = simulate_case(case, machine, device)
    free_s, _ = simulate_case(replace(case, kernel_tile=None), machine, device)
    assert pinned_s > free_s  # the library's 64x64 kernel is not the fastest tile gpusim knows
