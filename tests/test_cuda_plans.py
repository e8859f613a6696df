"""The CUDA kernels' plans are the mapper's plans (same grid, CTA size, tile, shared memory)."""

from __future__ import annotations

import math
import sys

import pytest

from gpusim.cuda_backend import plans as P
from gpusim.mapping import map_op
from gpusim.mapping.gemm import gemm_plan, tile_candidates
from gpusim.mapping.plan import Tile
from gpusim.workload.ops import Elementwise, Softmax


@pytest.fixture(scope="module")
def h100():
    return P.load_machine("h100_sxm5_80gb")


def test_importing_the_backend_does_not_import_numba():
    import subprocess

    code = ("import sys, gpusim.cuda_backend, gpusim.cuda_backend.plans, gpusim.cuda_backend.verify, "
            "gpusim.cuda_backend.measure, gpusim.cuda_backend.kernels, gpusim.cuda_backend.micro, gpusim.cli; "
            "gpusim.cli.build_parser(); print('numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_gemm_layout_of_a_16x16_tile_with_one_warp():
    layout = P.gemm_layout(Tile(16, 16, 8, 2, 1))
    # 32 threads, 256 outputs: 8 per thread as a 4x2 register tile, 8 threads along N.
    assert (layout.threads, layout.threads_m, layout.threads_n, layout.reg_m, layout.reg_n) == (32, 4, 8, 4, 2)


def test_every_runnable_candidate_tile_is_covered_exactly(h100):
    for dtype in P.KERNEL_DTYPES:
        for tile in tile_candidates(h100, dtype, 4096, 4096, 4096, 1):
            if P.unsupported_tile_reason(tile, dtype):
                continue
            layout = P.gemm_layout(tile)
            assert layout.threads == tile.num_warps * 32
            assert layout.threads * layout.reg_m * layout.reg_n == tile.block_m * tile.block_n


def test_clusters_and_big_shared_tiles_are_refused():
    assert "cluster" in P.unsupported_tile_reason(Tile(128, 128, 32, 2, 4, cluster=2), "fp16")
    # 4 stages of (128+128) x 64 FP16 = 131072 bytes > 48 KiB of static shared memory.
    assert "shared memory" in P.unsupported_tile_reason(Tile(128, 128, 64, 4, 4), "fp16")


def test_gemm_plan_is_gemm_plans_for_fp32(h100):
    tile = Tile(16, 16, 8, 2, 1)
    mine = P.plan_for_gemm(h100, 37, 45, 70, "fp32", tile)
    theirs = gemm_plan(h100, "gemm_fp32", "matmul", 37, 45, 70, 1, "fp32", tile, 2.0 * 37 * 45 * 70)
    assert mine == theirs
    assert mine.grid == math.ceil(37 / 16) * math.ceil(45 / 16) == 9
    assert mine.threads_per_cta == 32
    assert mine.shared_bytes_per_cta == 2 * (16 + 16) * 8 * 4


def test_fp16_gemm_plan_runs_on_cuda_cores_with_fp16_bytes(h100):
    tile = Tile(16, 16, 16, 3, 1)
    plan = P.plan_for_gemm(h100, 37, 45, 70, "fp16", tile)
    ref = gemm_plan(h100, "gemm_fp16", "matmul", 37, 45, 70, 1, "fp16", tile, 2.0 * 37 * 45 * 70)
    assert ref.pipe == "matrix"  # the mapper would use tensor cores; Numba cannot
    assert (plan.pipe, plan.dtype) == ("vector", "fp32")
    assert plan.name.endswith("[cuda_cores]")
    assert (plan.grid, plan.threads_per_cta, plan.shared_bytes_per_cta, plan.l2_bytes_per_cta) == \
        (ref.grid, ref.threads_per_cta, 3 * 32 * 16 * 2, ref.l2_bytes_per_cta)


def test_split_k_and_batch_multiply_the_grid(h100):
    plan = P.plan_for_gemm(h100, 17, 20, 40, "fp32", Tile(16, 16, 8, 3, 1, split_k=2, swizzle=2), batch=2)
    assert plan.grid == 2 * 2 * 2 * 2


def test_chosen_gemm_tiles_are_runnable(h100):
    for dtype in P.KERNEL_DTYPES:
        plan = P.choose_gemm_plan(h100, 1000, 1000, 1000, dtype)
        assert P.unsupported_tile_reason(plan.tile, dtype) is None
        assert plan.shared_bytes_per_cta <= P.STATIC_SHARED_LIMIT_BYTES


def test_elementwise_plan_is_the_mappers(h100):
    plan = P.plan_for_elementwise(h100, "add", 2500, "fp32")
    (theirs,) = map_op(Elementwise(num_elements=2500, function="add", dtype="fp32"), h100)
    assert plan == theirs
    layout = P.elementwise_layout(plan, 2500, "fp32")
    # 128 threads x 4 vectors x 4 FP32 = 2048 elements per CTA -> 2 CTAs for 2500.
    assert (plan.grid, layout.elements_per_cta) == (2, 2048)


def test_row_plans_follow_row_launch(h100):
    short = P.plan_for_rows(h100, "softmax", 7, 37, "fp32")
    (theirs,) = map_op(Softmax(rows=7, cols=37, dtype="fp32"), h100)
    assert (short.grid, short.threads_per_cta, short.l2_bytes_per_cta) == \
        (theirs.grid, theirs.threads_per_cta, theirs.l2_bytes_per_cta)
    assert short.shared_bytes_per_cta == 128 * 4  # one FP32 word per thread for the reductions
    assert P.row_layout(short, 7, 37, "fp32") == P.RowLayout(128, 4, 32, 4)
    long = P.plan_for_rows(h100, "softmax", 2, 600, "fp32")
    # 600 / 4 = 150 vectors -> 160 threads (5 warps), one row per CTA.
    assert (long.grid, long.threads_per_cta) == (2, 160)
    assert P.row_layout(long, 2, 600, "fp32") == P.RowLayout(160, 1, 160, 4)
    # layer norm runs PyTorch's launch: one 128-thread CTA per row, short rows too
    for cols in (37, 600):
        norm = P.plan_for_rows(h100, "layernorm", 2, cols, "fp32")
        assert (norm.grid, norm.threads_per_cta) == (2, 128)
        assert P.row_layout(norm, 2, cols, "fp32") == P.RowLayout(128, 1, 128, 4)


def test_attention_plan_has_one_thread_per_query_row(h100):
    plan = P.plan_for_attention(h100, 1, 2, 20, 150, 16, "fp32")
    assert plan.tile.block_m <= plan.threads_per_cta
    assert plan.grid == 2 * math.ceil(20 / plan.tile.block_m)
    assert plan.shared_bytes_per_cta == (plan.tile.block_m + 4 * plan.tile.block_n) * 16 * 4


def test_stream_launch_fills_each_sm_to_the_occupancy(h100):
    # H100 SXM: 132 SMs, 2048 resident threads per SM.
    assert P.stream_launch(h100, 0.125) == (132, 256)
    assert P.stream_launch(h100, 0.5) == (132, 1024)
    assert P.stream_launch(h100, 1.0) == (264, 1024)
    plan = P.plan_for_stream(h100, "triad", 1000, 1.0)
    assert plan.num_waves == 1
    assert plan.dram_bytes == pytest.approx(3 * 1000 * 8.0)
