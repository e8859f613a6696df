"""Split-accumulator FP8 GEMMs: the partial sums promoted into FP32 every 128 elements of K, in series
with the products (cuBLASLt into 2025) or overlapping them (CUDA 13 cuBLAS), derived by hand."""

from __future__ import annotations

import textwrap

import pytest

from gpusim.config.library import load_hardware
from gpusim.engine.simulate import machine_of, simulate
from gpusim.errors import ConfigError
from gpusim.mapping.gemm import FP8_PROMOTION_INTERVAL_K, promotion_adds_per_cta
from gpusim.mapping.plan import Tile
from gpusim.workload import load_workload

SIZE = 8192


def _gemm_time_s(tmp_path, dtype: str, split: bool, promotion: str, gpu: str = "h100_sxm5_80gb") -> float:
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
            split_accumulator: {str(split).lower()}
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
    # fill, drain and wave overheads do not grow, so its time grows by less than that.
    machine = machine_of(load_hardware("h100_sxm5_80gb"))
    share = machine.matrix_rate_per_unit("fp8") / (FP8_PROMOTION_INTERVAL_K * machine.vector_rate_per_unit("fp32"))
    assert share == pytest.approx(0.243, abs=0.002)
    fast = _gemm_time_s(tmp_path, "fp8", False, "in_series")
    in_series = _gemm_time_s(tmp_path, "fp8", True, "in_series")
    assert 0.75 * share < in_series / fast - 1 <= share


def test_overlapped_promotion_hides_behind_the_products(tmp_path):
    # the adds (24% of the products' time) fit under the next products: no change
    fast = _gemm_time_s(tmp_path, "fp8", False, "overlapped")
    assert _gemm_time_s(tmp_path, "fp8", True, "overlapped") == fast


def test_blackwell_accumulates_in_fp32_and_never_promotes(tmp_path):
    # tcgen05 keeps its sums in tensor memory in FP32: nothing to add, even in series
    fast = _gemm_time_s(tmp_path, "fp8", False, "in_series", gpu="b200")
    assert _gemm_time_s(tmp_path, "fp8", True, "in_series", gpu="b200") == fast


def test_a_split_accumulator_on_a_bf16_product_is_refused_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match="split_accumulator"):
        _gemm_time_s(tmp_path, "bf16", True, "overlapped")
