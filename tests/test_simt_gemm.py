"""CUDA-core (SIMT) GEMMs: the narrow tiles and the GEMV cuBLAS runs for few rows (so a batch-1 FP32
linear layer is not padded to 64 rows of FP32 math), and 16-bit inputs multiplied in FP32."""

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


def test_smaller_tiles_only_where_larger_ones_underfill(a100):
    # 512^3: 64 tiles of 64 x 64 on 108 SMs -> cuBLAS's 32-wide tiles are offered
    assert set(SIMT_NARROW_TILES) | {(64, 64)} <= _shapes(a100, 512, 512, 512)
    # 1024^3: 256 tiles of 64 x 64 fill the SMs -> no narrow tiles; 128 tiles of 128 x 64 do too ->
    # no 64 x 64 (cuBLAS runs ampere_sgemm_128x64 there)
    assert not set(SIMT_NARROW_TILES) & _shapes(a100, 1024, 1024, 1024)
    assert (64, 64) not in _shapes(a100, 1024, 1024, 1024)
    assert (128, 64) in _shapes(a100, 1024, 1024, 1024)
    # 768 x 768: 36 tiles of 128 x 64 underfill, 144 of 64 x 64 fill -> 64 x 64 but no narrow tiles
    shapes = _shapes(a100, 768, 768, 768)
    assert (64, 64) in shapes and not set(SIMT_NARROW_TILES) & shapes
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


def test_half_precision_simt_gemm_runs_at_the_fp32_rate():
    # P100: packed FP16 math is twice the FP32 rate, but cuBLAS accumulates PyTorch's half GEMMs in
    # FP32, so they run at the FP32 rate (measured: 8.4 TFLOP/s FP16 vs 8.6 FP32 at 8192^3)
    p100 = machine_of(load_hardware("p100_pcie_16gb"))
    assert p100.vector_rate_per_unit("fp16") == pytest.approx(2 * p100.vector_rate_per_unit("fp32"))
    assert p100.simt_gemm_rate_per_unit("fp16") == p100.vector_rate_per_unit("fp32")
    n = 8192
    times = {}
    for dtype in ("fp32", "fp16"):
        plan = best_gemm(p100, "mm", "matmul", n, n, n, 1, dtype, 2.0 * n**3)
        times[dtype] = simulate_kernel(plan, p100).time_s
    # compute-bound either way: half the bytes buy at most a few percent
    assert times["fp16"] == pytest.approx(times["fp32"], rel=0.05)
