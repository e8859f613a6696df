"""Reading the GEMM tile out of cuBLAS and CUTLASS kernel names (gpusim.mapping.kernel_names)."""

import pytest

from gpusim.config.library import load_hardware
from gpusim.engine.machine import machine_of
from gpusim.mapping import best_gemm
from gpusim.mapping.gemm import tile_misfit_reason
from gpusim.mapping.kernel_names import stages_that_fit, tile_of_kernel_name
from gpusim.mapping.plan import Tile
from gpusim.measurements import load_kernel_cases


@pytest.fixture(scope="module")
def machines():
    return {name: machine_of(load_hardware(name))
            for name in ("h100_sxm5_80gb", "a100_sxm4_80gb", "v100_sxm2_32gb", "rtx_4090", "b200")}


def test_cutlass_2x_name_gives_block_kstep_and_stages(machines):
    name = "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_nn_align8"
    assert tile_of_kernel_name(name, machines["rtx_4090"], "bf16") == Tile(64, 64, 32, 6, 4)


def test_the_dataset_pins_what_the_profiled_name_says(machines):
    # pytorch issue #181718 profiles this CUTLASS kernel for the RTX 4090 rows at N = 2056 and 2072
    name = "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_nn_align8"
    pinned = {c.kernel_tile for c in load_kernel_cases() if c.case_id.startswith("rtx4090_torch_bf16_mm_20")
              and c.kernel_tile}
    assert pinned == {tile_of_kernel_name(name, machines["rtx_4090"], "bf16").label()}


def test_cublas_ampere_names(machines):
    a100 = machines["a100_sxm4_80gb"]
    assert tile_of_kernel_name("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn", a100, "bf16") \
        == Tile(128, 128, 64, 3, 4)
    # CUDA-core SGEMM: 8 x 8 outputs per thread -> 128 x 64 / (64 x 32) = 4 warps, k-step 8, 2 stages
    assert tile_of_kernel_name("ampere_sgemm_128x64_nn", a100, "fp32") == Tile(128, 64, 8, 2, 4)
    assert tile_of_kernel_name("ampere_sgemm_128x128_nn", a100, "fp32") == Tile(128, 128, 8, 2, 8)
    assert tile_of_kernel_name(
        "sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32_stage3_warpsize2x2x1_tensor16x8x16_kernel",
        a100, "fp16") == Tile(128, 128, 32, 3, 4)


def test_volta_name_without_stages_fills_shared_memory(machines):
    v100 = machines["v100_sxm2_32gb"]
    tile = tile_of_kernel_name("volta_h884gemm_256x128_ldg8_nn", v100, "fp16")
    # k-step of 64 bytes = 32 FP16 values; (256 + 128) x 32 x 2 B = 24 KiB a stage; 96 KiB per CTA -> 4
    assert tile == Tile(256, 128, 32, 4, 8)
    assert stages_that_fit(v100, "fp16", 256, 128, 32) == 98304 // 24576


def test_hopper_names_give_warpgroups_cluster_and_stream_k(machines):
    h100 = machines["h100_sxm5_80gb"]
    name = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_"
            "execute_segment_k_on_kernel__5x_cublas")
    # (128 + 256) x 64 x 2 B = 48 KiB a stage; 227 KiB per CTA -> 4 stages; 2 warpgroups = 8 warps
    assert tile_of_kernel_name(name, h100, "bf16") == Tile(128, 256, 64, 4, 8, stream_k=True)
    off = tile_of_kernel_name(name.replace("segment_k_on", "segment_k_off").replace(
        "warpgroupsize2x1x1", "warpgroupsize2x1x1_cluster2x1x1"), h100, "bf16")
    assert off == Tile(128, 256, 64, 4, 8, cluster=2)
    assert tile_of_kernel_name("nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNT", machines["b200"], "bf16") \
        == Tile(256, 128, 64, 4, 8, cluster=2)
    # a 1x2 cluster pairs CTAs along N (gpusim's cluster_n)
    tile = tile_of_kernel_name("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", h100, "bf16")
    assert tile == Tile(256, 128, 64, 4, 8, cluster_n=2) and tile.label() == "256x128x64_s4_w8_cluster1x2"
    assert Tile.parse(tile.label()) == tile
    # ``coop``: two consumer warpgroups share the tile, so a 128x128 one has 8 warps, not the 4 of
    # gpusim's default for that size (the FP8 kernels that promote their partial sums run these)
    assert tile_of_kernel_name("nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_coopA_algo2_TNT", h100, "fp8") \
        == Tile(128, 128, 128, 6, 8, cluster=2)
    assert tile_of_kernel_name("nvjet_sm90_qqtst_128x64_128x8_1x2_h_bz_algo2_TNT", h100, "fp8").num_warps == 4
    # a cooperative schedule needs two warpgroups of 64 rows: a 64-row tile keeps its one
    assert tile_of_kernel_name("nvjet_sm90_qqtst_64x128_128x8_1x2_h_bz_coopA_algo2_TNT", h100, "fp8").num_warps == 4


@pytest.mark.parametrize("name", ["void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
                                  "splitKreduce_kernel", "flash_fwd_kernel", ""])
def test_other_kernels_give_none(machines, name):
    assert tile_of_kernel_name(name, machines["h100_sxm5_80gb"], "bf16") is None


def test_parsed_tiles_fit_and_can_be_simulated(machines):
    h100 = machines["h100_sxm5_80gb"]
    tile = tile_of_kernel_name("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_"
                               "execute_segment_k_off_kernel__5x_cublas", h100, "bf16")
    assert tile_misfit_reason(h100, "bf16", tile) is None
    plan = best_gemm(h100, "mm", "matmul", 4096, 4096, 4096, 1, "bf16", 2.0 * 4096 ** 3, tile=tile)
    assert (plan.tile.block_m, plan.tile.block_n, plan.tile.block_k) == (128, 256, 64)
    assert plan.grid == (4096 // 128) * (4096 // 256)
