"""CUDA-core (SIMT) GEMMs with few rows: the narrow tiles and the GEMV cuBLAS runs there, so a
batch-1 FP32 linear layer is not padded to 64 rows of FP32 math."""

import pytest

from gpusim.config.library import load_hardware
from gpusim.engine.kernel import simulate_kernel
from gpusim.engine.machine import machine_of
from gpusim.mapping import best_gemm
from gpusim.mapping.gemm import SIMT_GEMV_TILES, SIMT_NARROW_TILES, tile_candidates


@pytest.fixture(scope="module")
def a100():
    return machine_of(load_hardware("a100_pcie_40gb"))


def _shapes(machine, m, n, k, dtype="fp32"):
    return _shapes_batched(machine, m, n, k, 1, dtype)


def _shapes_batched(machine, m, n, k, batch, dtype="fp32"):
    return {(t.block_m, t.block_n) for t in tile_candidates(machine, dtype, m, n, k, batch)}


def test_narrow_tiles_only_where_64x64_tiles_underfill(a100):
    # 512^3: 64 tiles of 64 x 64 on 108 SMs -> cuBLAS's 32-wide tiles are offered
    assert set(SIMT_NARROW_TILES) <= _shapes(a100, 512, 512, 512)
    # 1024^3: 256 tiles of 64 x 64 fill the SMs -> only the 64-wide and larger tiles
    assert not set(SIMT_NARROW_TILES) & _shapes(a100, 1024, 1024, 1024)
    # a batch of 32 x 32 products: a 64 x 64 tile would pad each to four times its FLOP
    assert set(SIMT_NARROW_TILES) <= _shapes_batched(a100, 32, 32, 32, 1024)
    # tensor-core tiles are untouched
    assert not set(SIMT_NARROW_TILES) & _shapes(a100, 512, 512, 512, "bf16")


def test_gemv_tiles_only_for_one_row(a100):
    assert set(SIMT_GEMV_TILES) <= _shapes(a100, 1, 4096, 4096)
    assert not set(SIMT_GEMV_TILES) & _shapes(a100, 2, 4096, 4096)
    assert not set(SIMT_GEMV_TILES) & _shapes(a100, 1, 4096, 4096, "bf16")


def test_fp32_gemv_executes_no_padded_flop_and_streams_the_weight(a100):
    n = k = 4096
    useful = 2.0 * n * k
    plan = best_gemm(a100, "mm", "matmul", 1, n, k, 1, "fp32", useful)
    assert plan.tile.block_m == 1
    assert plan.flop_per_cta * plan.grid == pytest.approx(useful)
    weight_bytes = 4.0 * n * k
    # memory-bound: no faster than the weight at the achievable DRAM rate, within 1.5x of it
    floor_s = weight_bytes / a100.dram_achievable_bytes_per_s
    seconds = simulate_kernel(plan, a100).time_s
    assert floor_s <= seconds <= 1.5 * floor_s


def test_fewer_rows_never_take_longer(a100):
    n = k = 4096
    times = []
    for m in (1, 2, 16, 32, 64, 128):
        plan = best_gemm(a100, "mm", "matmul", m, n, k, 1, "fp32", 2.0 * m * n * k)
        times.append(simulate_kernel(plan, a100).time_s)
        if 1 < m <= 32:
            assert plan.tile.block_m == 32  # a 32-row tile, not 64 rows of padded FP32 math
    assert times == sorted(times)
