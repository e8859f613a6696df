"""Split-accumulator FP8 GEMMs: the partial sums promoted into FP32 every 128 elements of K, in series
with the products (cuBLASLt into 2025) or overlapping them (CUDA 13 cuBLAS), derived by hand."""

from __future__ import annotations

import textwrap
from dataclasses import replace

import pytest

from gpusim.config.library import load_hardware
from gpusim.engine.simulate import machine_of, simulate
from gpusim.errors import ConfigError
from gpusim.engine.kernel import cta_profile
from gpusim.mapping import best_gemm, map_op
from gpusim.mapping.gemm import (ACCUMULATOR_OVERHEAD_REGISTERS, FP8_PROMOTION_INTERVAL_K, gemm_plan,
                                 promotion_adds_per_cta, tile_misfit_reason)
from gpusim.mapping.plan import Tile
from gpusim.workload.ops import Matmul
from gpusim.workload import load_workload

SIZE = 8192


PROMOTING_TILE = "128x160x64_s2_w8_cluster2"
"""A tile both kernels can run: two warpgroups of 64 x 160 outputs, 80 accumulator registers per
thread (160 when split)."""


def _gemm_time_s(tmp_path, dtype: str, split: bool, promotion: str, gpu: str = "h100_sxm5_80gb",
                 tile: str | None = None) -> float:
    pinned = f"\n            tile: {tile}" if tile else ""
    path = tmp_path / "gemm.yaml"
    path.write_text(textwrap.dedent(f"""\
        schema_version: 1
        name: fp8-gemm
        fp8_promotion: {promotion}
        ops:
          - name: gemm
            op: matmul
            m: {SIZE}
            n: {SIZE}
            k: {SIZE}
            dtype: {dtype}
            split_accumulator: {str(split).lower()}{pinned}
        """))
    result = simulate(load_hardware(gpu), load_workload(path))
    return result.kernels[0].time_s


def test_one_add_per_output_element_and_promotion():
    assert FP8_PROMOTION_INTERVAL_K == 128
    tile = Tile.parse("128x256x128_s4_w8")
    # K = 1000 per CTA: promotions after elements 128, 256, ..., 896 and at the end: ceil(1000/128) = 8
    assert promotion_adds_per_cta(tile, 1000) == 128 * 256 * 8
    assert promotion_adds_per_cta(tile, 128) == 128 * 256


def test_in_series_promotion_adds_at_most_the_adds_share_of_the_products(tmp_path):
    # Per output element, the products take 2K FLOP at the SM's FP8 matrix rate m and the adds K/128
    # FP32 instructions at half its FP32 FLOP rate v (an add is one instruction, an FMA two FLOP): in
    # series they add m / (128 v) of the products' time, 24% on the calibrated H100. The kernel's
    # fill, drain and wave overheads do not grow, so its time grows by less than that (same tile).
    machine = machine_of(load_hardware("h100_sxm5_80gb"))
    share = machine.matrix_rate_per_unit("fp8") / (FP8_PROMOTION_INTERVAL_K * machine.vector_rate_per_unit("fp32"))
    assert share == pytest.approx(0.243, abs=0.002)
    fast = _gemm_time_s(tmp_path, "fp8", False, "in_series", tile=PROMOTING_TILE)
    in_series = _gemm_time_s(tmp_path, "fp8", True, "in_series", tile=PROMOTING_TILE)
    assert 0.75 * share < in_series / fast - 1 <= share


def test_overlapped_promotion_hides_behind_the_products(tmp_path):
    # the adds (24% of the products' time) fit under the next products: on the same tile the time
    # stays within 0.1% (0.005% here, from the last partial wave)
    fast = _gemm_time_s(tmp_path, "fp8", False, "overlapped", tile=PROMOTING_TILE)
    assert _gemm_time_s(tmp_path, "fp8", True, "overlapped", tile=PROMOTING_TILE) == pytest.approx(fast, rel=1e-3)


def test_a_split_accumulator_doubles_the_accumulator_registers():
    # two FP32 accumulators per output element: 128 x 160 outputs over 256 threads are 80 registers
    # each, 160 split, plus the 40 every GEMM thread needs besides
    machine = machine_of(load_hardware("h100_sxm5_80gb"))
    tile = Tile.parse("128x160x64_s2_w8_cluster2")
    plain = gemm_plan(machine, "g", "matmul", SIZE, SIZE, SIZE, 1, "fp8", tile, 1.0)
    split = gemm_plan(machine, "g", "matmul", SIZE, SIZE, SIZE, 1, "fp8", tile, 1.0, split_accumulator=True)
    assert plain.registers_per_thread == 80 + ACCUMULATOR_OVERHEAD_REGISTERS
    assert split.registers_per_thread == 160 + ACCUMULATOR_OVERHEAD_REGISTERS
    assert split.name.endswith("[split_acc]") and not plain.name.endswith("[split_acc]")
    # 128 x 256 over 256 threads: 2 x 128 + 40 = 296 registers, beyond the 255 a thread may hold
    wide = Tile.parse("128x256x64_s2_w8_cluster2")
    assert tile_misfit_reason(machine, "fp8", wide) is None
    assert "registers per thread" in tile_misfit_reason(machine, "fp8", wide, promotes=True)
    assert gemm_plan(machine, "g", "matmul", SIZE, SIZE, SIZE, 1, "fp8", wide, 1.0, split_accumulator=True) is None


def test_the_library_search_picks_a_tile_whose_two_accumulators_fit(tmp_path):
    # the fast kernel's 128 x 256 tile cannot hold two accumulators; the split kernel runs one of the
    # two-warpgroup tiles cuBLAS's promoting kernels use (up to 128 x 160), a little slower when overlapped
    machine = machine_of(load_hardware("h100_sxm5_80gb"))
    fast = best_gemm(machine, "g", "matmul", SIZE, SIZE, SIZE, 1, "fp8", 1.0)
    split = best_gemm(machine, "g", "matmul", SIZE, SIZE, SIZE, 1, "fp8", 1.0, split_accumulator=True)
    assert fast.tile.block_m * fast.tile.block_n == 128 * 256
    assert split.tile.block_m == 128 and split.tile.block_n <= 160 and split.tile.num_warps == 8
    assert split.registers_per_thread <= machine.max_registers_per_thread
    fast_s = _gemm_time_s(tmp_path, "fp8", False, "overlapped")
    assert 1.0 <= _gemm_time_s(tmp_path, "fp8", True, "overlapped") / fast_s < 1.05


def test_map_op_keeps_one_plan_per_promotion_setting():
    # map_op is cached per (op, machine): the in-series machine must not get the overlapped plan
    machine = machine_of(load_hardware("h100_sxm5_80gb"))
    op = Matmul(m=SIZE, n=SIZE, k=SIZE, dtype="fp8", split_accumulator=True)
    (overlapped,) = map_op(op, machine)
    (in_series,) = map_op(op, machine.with_in_series_fp8_promotion())
    assert overlapped.vector_ops_overlap_math and not in_series.vector_ops_overlap_math
    assert overlapped.vector_ops_per_cta == in_series.vector_ops_per_cta > 0
    (blackwell,) = map_op(op, machine_of(load_hardware("b200")))
    assert blackwell.vector_ops_per_cta == 0 and not blackwell.name.endswith("[split_acc]")


def test_the_adds_are_named_the_limiter_where_they_outlast_the_products():
    # on a device with a sixteenth of the H100's FP32 lanes the adds take 16 x 24% = 3.9 times the
    # products' time: overlapped, the CTA's compute time is the adds' and they are its limiter
    machine = machine_of(load_hardware("h100_sxm5_80gb"))
    slow = replace(machine, vector_flop_per_cycle={**machine.vector_flop_per_cycle,
                                                   "fp32": machine.vector_flop_per_cycle["fp32"] / 16})
    tile = Tile.parse(PROMOTING_TILE)
    limiters = []
    for m in (machine, slow):
        plan = gemm_plan(m, "g", "matmul", SIZE, SIZE, SIZE, 1, "fp8", tile, 1.0, split_accumulator=True)
        limiters.append(cta_profile(plan, m, plan.ctas_per_unit * m.num_units, 0.0).compute_limiter)
    assert limiters[0] != "vector" and limiters[1] == "vector"


def test_blackwell_accumulates_in_fp32_and_never_promotes(tmp_path):
    # tcgen05 keeps its sums in tensor memory in FP32: nothing to add, even in series
    fast = _gemm_time_s(tmp_path, "fp8", False, "in_series", gpu="b200")
    assert _gemm_time_s(tmp_path, "fp8", True, "in_series", gpu="b200") == fast


def test_a_split_accumulator_on_a_bf16_product_is_refused_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match="split_accumulator"):
        _gemm_time_s(tmp_path, "bf16", True, "overlapped")
