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


def test_a_thread_tile_s_instructions_are_counted_as_cutlass_compiles_them():
    """FMAs, shared loads and the loop's copies per step of k (8) for one thread, by hand: a
    128 x 128 tile of 4 warps holds 128 outputs per thread (16 x 8): 1,024 FMAs, 8 x (4 + 2) = 48
    128-bit shared loads, 37.5 loop instructions and 6.9 per copied element, (128 + 128) x 8 / 128 =
    16 of them: 1,024 + 48 + 37.5 + 110.4 = 1,219.9 (CUTLASS's compiled loop: 1,224)."""
    from gpusim.mapping.gemm import simt_thread_instructions
    from gpusim.mapping.plan import Tile

    assert simt_thread_instructions(Tile(128, 128, 8, 3, 4), 128) == pytest.approx((1024.0, 1219.9))
    # 64 x 64 with 4 warps: 32 outputs (8 x 4): 256 + 8 x (2 + 1) + 37.5 + 6.9 x 8 (CUTLASS: 367)
    assert simt_thread_instructions(Tile(64, 64, 8, 3, 4), 128) == pytest.approx((256.0, 372.7))


def test_small_register_tiles_lose_issue_slots_only_where_the_fmas_need_every_one():
    """On an SM with 32 FP32 lanes per scheduler (H100) an FMA takes the scheduler's one issue slot
    of its cycle, so every other instruction costs a cycle: a tile with fewer outputs per thread
    issues more of them per FMA and runs slower, relative to the leanest tile (256 x 128 of 8 warps,
    1,024 + 48 + 37.5 + 6.9 x 12 = 1,192.3 instructions per 1,024 FMAs). On 16 lanes per scheduler (A100, V100) an FMA takes two
    cycles and the rest issue in between; Pascal's second dispatch unit pairs them with the FMAs."""
    from gpusim.mapping.gemm import simt_issue_factor
    from gpusim.mapping.plan import Tile

    h100 = machine_of(load_hardware("h100_sxm5_80gb"))
    leanest = 1192.3 / 1024
    assert simt_issue_factor(h100, "fp32", Tile(256, 128, 8, 2, 8)) == pytest.approx(1.0)
    assert simt_issue_factor(h100, "fp32", Tile(128, 64, 8, 2, 4)) == pytest.approx(664.3 / 512 / leanest)
    assert simt_issue_factor(h100, "fp32", Tile(64, 64, 8, 2, 4)) == pytest.approx(372.7 / 256 / leanest)
    factors = [simt_issue_factor(h100, "fp32", Tile(bm, bn, 8, 2, w)) for bm, bn, w in
               ((256, 128, 8), (128, 128, 8), (128, 64, 4), (64, 64, 4), (32, 32, 4))]
    assert factors == sorted(factors) and factors[-1] > 1.5
    for name in ("a100_pcie_40gb", "v100_sxm2_32gb", "p100_pcie_16gb", "p4"):
        machine = machine_of(load_hardware(name))
        assert simt_issue_factor(machine, "fp32", Tile(64, 64, 8, 2, 4)) == 1.0, name
    # tensor-core plans carry no issue factor; a SIMT plan carries its tile's and the engine uses it
    plan = best_gemm(h100, "mm", "matmul", 1024, 1024, 1024, 1, "fp32", 2.0 * 1024**3)
    assert plan.issue_factor == pytest.approx(simt_issue_factor(h100, "fp32", plan.tile))
    assert best_gemm(h100, "mm", "matmul", 1024, 1024, 1024, 1, "bf16", 2.0 * 1024**3).issue_factor == 1.0
    assert plan.describe()["issue_factor"] == plan.issue_factor > 1.0  # in run --json's kernel records
    from dataclasses import replace
    slow = simulate_kernel(replace(plan, issue_factor=2.0 * plan.issue_factor), h100).time_s
    assert slow > 1.5 * simulate_kernel(plan, h100).time_s


def test_large_cuda_core_gemms_run_the_leanest_register_tiles():
    """With 128 outputs per thread on offer, a large FP32 GEMM on an H100 takes one of them (as
    cuBLAS's profiles show, sm80_xmma 128x128 with 2x2 warps), not a 64-output tile."""
    from gpusim.mapping.gemm import SIMT_WIDE_TILES

    h100 = machine_of(load_hardware("h100_sxm5_80gb"))
    offered = {(t.block_m, t.block_n, t.num_warps) for t in tile_candidates(h100, "fp32", 4096, 4096, 4096, 1)}
    assert set(SIMT_WIDE_TILES) <= offered
    tile = best_gemm(h100, "mm", "matmul", 8192, 8192, 8192, 1, "fp32", 2.0 * 8192**3).tile
    assert tile.block_m * tile.block_n / (32 * tile.num_warps) == 128


def test_the_loop_constants_are_the_fit_to_cutlass_s_compiled_loops():
    """SIMT_LOOP_INSTRUCTIONS and SIMT_COPY_INSTRUCTIONS are the least-squares line through the
    committed counts of CUTLASS's SIMT main loops (measurements/cutlass_simt/loops.csv), once each
    tile's FMAs and modelled shared loads are taken off, and every loop is within 14 instructions."""
    import csv
    from pathlib import Path

    import numpy as np

    from gpusim.mapping.gemm import SIMT_COPY_INSTRUCTIONS, SIMT_LOOP_INSTRUCTIONS, simt_thread_instructions
    from gpusim.mapping.plan import Tile

    path = Path(__file__).resolve().parent.parent / "measurements" / "cutlass_simt" / "loops.csv"
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 7
    copies, rest, total = [], [], []
    for row in rows:
        tile = Tile(int(row["block_m"]), int(row["block_n"]), int(row["block_k"]), 3, int(row["warps"]))
        threads = 32 * tile.num_warps
        fmas, modelled = simt_thread_instructions(tile, threads)
        assert fmas == int(row["ffma"])
        copied = (tile.block_m + tile.block_n) * tile.block_k / threads
        assert copied == int(row["ldgsts"])  # one 4-byte copy instruction per element
        shared = modelled - fmas - SIMT_LOOP_INSTRUCTIONS - SIMT_COPY_INSTRUCTIONS * copied
        copies.append(copied)
        rest.append(int(row["loop_instructions"]) - fmas - shared)
        total.append((modelled, int(row["loop_instructions"])))
    intercept_slope = np.linalg.lstsq(np.column_stack([np.ones(len(copies)), copies]), np.array(rest), rcond=None)[0]
    assert intercept_slope == pytest.approx([SIMT_LOOP_INSTRUCTIONS, SIMT_COPY_INSTRUCTIONS], abs=0.05)
    assert all(abs(modelled - counted) <= 14 for modelled, counted in total)
