"""Split-K: which tiles are offered split, and where the FP32 partial sums travel."""

import pytest

from gpusim.config.library import load_hardware
from gpusim.engine.machine import machine_of
from gpusim.mapping import best_gemm
from gpusim.mapping.gemm import (SPLIT_K_MAX_WAVES, compulsory_dram_bytes, split_k_workspace_bytes,
                                 split_k_workspace_in_l2, tile_candidates)
from gpusim.mapping.plan import Tile

MIB = 2**20


@pytest.fixture(scope="module")
def h100():
    return machine_of(load_hardware("h100_sxm5_80gb"))


@pytest.fixture(scope="module")
def mi300x():
    return machine_of(load_hardware("mi300x"))


def test_workspace_stays_in_a_shared_l2_up_to_half_of_it():
    # 1024 x 1024 FP32 partials, 4 slices = 16 MiB: in a 50 MiB L2, not in a 24 MiB one
    assert split_k_workspace_bytes(1024, 1024, 1, 4) == 16 * MIB
    assert split_k_workspace_bytes(1024, 1024, 1, 1) == 0.0
    assert split_k_workspace_in_l2(16 * MIB, 50 * MIB, 1)
    assert not split_k_workspace_in_l2(16 * MIB, 24 * MIB, 1)
    assert not split_k_workspace_in_l2(16 * MIB, 256 * MIB, 8)  # XCD-private L2s: partials go to memory
    assert not split_k_workspace_in_l2(0.0, 50 * MIB, 1)


def test_partials_in_l2_add_no_dram_bytes(h100, mi300x):
    m = n = 1024
    k = 4096
    tile = Tile(128, 128, 64, 4, 4, split_k=4)
    compulsory = compulsory_dram_bytes(m, n, k, 1, "bf16")  # A 8 MiB + B 8 MiB + C 2 MiB
    assert compulsory == 18 * MIB
    plan = best_gemm(h100, "mm", "matmul", m, n, k, 1, "bf16", 2.0 * m * n * k, tile=tile)
    # the 16 MiB workspace leaves 34 MiB of H100's L2 to the 16 MiB of panels: each is read once
    assert sum(plan.wave_dram_bytes) == pytest.approx(compulsory)
    amd = best_gemm(mi300x, "mm", "matmul", m, n, k, 1, "bf16", 2.0 * m * n * k,
                    tile=Tile(128, 128, 64, 2, 4, split_k=4))  # two stages fit its 64 KiB of LDS
    # MI300X: every partial is written to memory and read back, 4 B each way: 18 + 32 MiB
    assert sum(amd.wave_dram_bytes) == pytest.approx(compulsory + 8.0 * m * n * 4)


def test_split_k_offered_per_tile_whose_grid_underfills(h100):
    tiles = tile_candidates(h100, "bf16", 1024, 1024, 4096, 1)
    splits = {(t.block_m, t.block_n): set() for t in tiles}
    for t in tiles:
        splits[(t.block_m, t.block_n)].add(t.split_k)
    # 64 x 64 tiles: 256 of them fill H100's 132 SMs, so no split
    assert splits[(64, 64)] == {1}
    # 128 x 128: 64 tiles; split until 64 s <= 2 x 132 CTAs
    assert SPLIT_K_MAX_WAVES == 2
    assert splits[(128, 128)] == {1, 2, 4}
    # 128 x 256: 32 tiles -> up to 8 slices
    assert splits[(128, 256)] == {1, 2, 4, 8}
