"""Golden tests: kernel times on a 2-SM GPU with 1 GB/s DRAM, derived by hand."""

from dataclasses import replace
from pathlib import Path

import pytest

from gpusim.config import load_hardware
from gpusim.engine.kernel import estimate_kernel_s, simulate_kernel
from gpusim.engine.machine import machine_of
from gpusim.mapping.gemm import gemm_plan
from gpusim.mapping.plan import Tile
from gpusim.mapping.streaming import elementwise_launch, streaming_plan

TINY = Path(__file__).parent / "data" / "tiny_2sm.yaml"


@pytest.fixture(scope="module")
def tiny():
    return machine_of(load_hardware(str(TINY)))


def test_streaming_add_is_dram_time_plus_one_latency(tiny):
    # 2^20 fp32 adds: 2 reads + 1 write = 12 MiB through 1 GB/s DRAM, plus one DRAM latency (1 us)
    # to fill the pipe and one L2 latency (100 ns) for the last stores to complete.
    # 128-thread CTAs, each thread 4 x 16-byte vectors = 16 elements: 512 CTAs, 16 per SM.
    n = 2**20
    ctas, threads, in_flight = elementwise_launch(tiny, n, "fp32", 2)
    assert (ctas, threads) == (512, 128)
    plan = streaming_plan(tiny, "add", "elementwise", "fp32", bytes_read=8.0 * n, bytes_written=4.0 * n,
                          flop=float(n), sfu_ops=0.0, num_ctas=ctas, threads_per_cta=threads,
                          bytes_in_flight_per_thread=in_flight)
    assert plan.ctas_per_unit == 16
    timing = simulate_kernel(plan, tiny)
    expected = 1e-6 + 12 * 2**20 / 1e9 + 100e-9
    assert timing.time_s == pytest.approx(expected, rel=1e-12)
    assert timing.bound == "memory"
    assert estimate_kernel_s(plan, tiny) == pytest.approx(expected, rel=1e-12)
    # a kernel that only reads waits for no store
    read_only = replace(plan, store_bytes_per_cta=0.0)
    assert simulate_kernel(read_only, tiny).time_s == pytest.approx(1e-6 + 12 * 2**20 / 1e9, rel=1e-12)


def test_gemm_waves_and_l2_reuse(tiny):
    # 256 x 256 x 1024 fp16 GEMM, 128x128x64 tiles, 2 stages: 64 KiB shared memory per CTA, so one CTA
    # per SM and 2 waves of 2 CTAs. Wave 1 reads A row-panels 0,1 and B column-panel 0 (256 KiB each)
    # and writes two 32 KiB C tiles; wave 2 finds both A panels in the 1 MiB L2 and reads only B panel 1.
    tile = Tile(128, 128, 64, 2, 4)
    plan = gemm_plan(tiny, "gemm", "matmul", 256, 256, 1024, 1, "fp16", tile, 2.0 * 256 * 256 * 1024)
    assert plan.grid == 4 and plan.ctas_per_unit == 1 and plan.num_waves == 2
    kib = 1024
    assert plan.wave_dram_bytes == (3 * 256 * kib + 2 * 32 * kib, 256 * kib + 2 * 32 * kib)
    timing = simulate_kernel(plan, tiny)
    # each wave: one DRAM latency (1 us) to fill the pipeline, then its DRAM bytes at 1 GB/s (compute is
    # 32.8 us), then the epilogue drain: each SM stores its 32 KiB C tile at its own 64 B/cycle x 1 GHz
    # (slower than the wave's 64 KiB at the 1 TB/s L2) and waits one L2 latency (100 ns)
    drain = 100e-9 + 32 * kib / 64e9
    expected = 2 * (1e-6 + drain) + (832 * kib + 320 * kib) / 1e9
    assert timing.time_s == pytest.approx(expected, rel=1e-12)
    assert timing.bound == "memory"


def test_gemm_compute_bound_when_dram_is_fast(tiny):
    # Same GEMM with 1 TB/s DRAM: each CTA does 2*128*128*1024 FLOP at 1024 FLOP/cycle x 1 GHz alone on
    # its SM = 32.768 us; two waves, each with a 1 us pipeline fill and a 100 ns + 32 KiB / 64 GB/s drain.

    fast = replace(tiny, dram_bandwidth_bytes_per_s=1e12)
    plan = gemm_plan(fast, "gemm", "matmul", 256, 256, 1024, 1, "fp16", Tile(128, 128, 64, 2, 4), 2.0 * 256**2 * 1024)
    timing = simulate_kernel(plan, fast)
    assert timing.time_s == pytest.approx(2 * (1e-6 + 100e-9 + 32 * 1024 / 64e9) + 2 * 2 * 128 * 128 * 1024 / 1024e9,
                                          rel=1e-12)
    assert timing.bound == "compute"


def test_persistent_gemm_fills_once_and_hides_the_drain_latency_between_waves(tiny):
    # The compute-bound GEMM above on a device whose native MMA is issued per warpgroup (Hopper-like):
    # its library kernel is persistent, so the 1 us pipeline fill and the fixed per-wave cost are paid
    # once, and between the two waves only the epilogue's 32 KiB per SM at 64 B/cycle x 1 GHz remains;
    # the last wave drains in full (plus the 100 ns L2 latency). With a 2 us fixed cost per wave:
    hopper_like = replace(tiny, dram_bandwidth_bytes_per_s=1e12, native_mma_issuer="warpgroup",
                          calibration=replace(tiny.calibration, gemm_wave_overhead_s=2e-6))
    assert hopper_like.persistent_matrix_kernels("fp16")
    plan = gemm_plan(hopper_like, "gemm", "matmul", 256, 256, 1024, 1, "fp16", Tile(128, 128, 64, 2, 4),
                     2.0 * 256**2 * 1024)
    assert plan.persistent and plan.num_waves == 2
    epilogue = 32 * 1024 / 64e9
    math_s = 2 * 2 * 128**2 * 1024 / 1024e9
    persistent = (1e-6 + 2e-6) + epilogue + (100e-9 + epilogue) + math_s
    assert simulate_kernel(plan, hopper_like).time_s == pytest.approx(persistent, rel=1e-12)
    assert estimate_kernel_s(plan, hopper_like) == pytest.approx(persistent, rel=1e-12)
    # the same kernel launched one CTA per tile pays both fills, both fixed costs and both latencies
    per_tile = replace(plan, persistent=False)
    assert simulate_kernel(per_tile, hopper_like).time_s == pytest.approx(
        persistent + (1e-6 + 2e-6) + 100e-9, rel=1e-12)
    # legacy libraries (warp-synchronous MMA) launch one CTA per tile, except FP8's native-only kernels
    legacy = hopper_like.with_warp_mma_libraries()
    assert not legacy.persistent_matrix_kernels("fp16") and legacy.persistent_matrix_kernels("fp8")


def test_stream_k_tail_shares_the_leftover_tile_among_all_slots(tiny):
    # 640 x 128 x 1024 fp16 in 128x128 tiles on the persistent (Hopper-like) device given 4 SMs: 5 tiles
    # on 4 slots. Whole tiles take two waves of 32.768 us of math each. The last wave is less than half
    # full and each tile has 16 k-steps, so a stream-K tail runs instead: after one full wave all four
    # SMs take a quarter of the fifth tile's k-iterations (8.192 us). Its fixup: each SM stores a 64 KiB
    # FP32 partial tile and the owner reads the other three at its 64 B/cycle x 1 GHz (3.072 us, slower
    # than the 448 KiB at the 1 TB/s L2), one L2 latency (100 ns); then the one leftover C tile drains
    # (100 ns + 32 KiB / 64 GB/s). Fill and fixed cost (1 + 2 us) once; between the waves the first
    # wave's epilogue bandwidth term (0.512 us) remains.
    hopper_like = replace(tiny, num_units=4, dram_bandwidth_bytes_per_s=1e12, native_mma_issuer="warpgroup",
                          calibration=replace(tiny.calibration, gemm_wave_overhead_s=2e-6))

    def plan(m, k, stream_k):
        return gemm_plan(hopper_like, "gemm", "matmul", m, 128, k, 1, "fp16",
                         Tile(128, 128, 64, 2, 4, stream_k=stream_k), 2.0 * m * 128 * k)

    whole, tail = plan(640, 1024, False), plan(640, 1024, True)
    assert (whole.grid, whole.num_waves) == (5, 2)
    assert (tail.grid, tail.num_waves, tail.tail_work_fraction) == (8, 2, 0.25)
    math_s = 2 * 128**2 * 1024 / 1024e9
    epilogue = 32 * 1024 / 64e9
    start = 1e-6 + 2e-6
    expected_whole = start + math_s + epilogue + math_s + (100e-9 + epilogue)
    expected_tail = start + math_s + epilogue + math_s / 4 + (3 * 64 * 1024 / 64e9 + 100e-9) + (100e-9 + epilogue)
    for p, expected in ((whole, expected_whole), (tail, expected_tail)):
        assert simulate_kernel(p, hopper_like).time_s == pytest.approx(expected, rel=1e-12)
        assert estimate_kernel_s(p, hopper_like) == pytest.approx(expected, rel=1e-12)
    # the work is conserved: five tiles' worth of L2 traffic, not eight
    assert tail.l2_bytes == pytest.approx(whole.l2_bytes, rel=1e-12)
    # whole tiles when no wave is full (3 tiles), when the last wave is at least half full (7 tiles), when
    # a tile has only 8 k-steps to share, and on a device whose libraries launch one CTA per tile
    assert plan(384, 1024, True) is None and plan(896, 1024, True) is None and plan(640, 512, True) is None
    assert gemm_plan(replace(tiny, num_units=4), "gemm", "matmul", 640, 128, 1024, 1, "fp16",
                     Tile(128, 128, 64, 2, 4, stream_k=True), 2.0 * 640 * 128 * 1024) is None
    assert Tile.parse(Tile(128, 128, 64, 2, 4, stream_k=True, cluster=2).label()).stream_k


def test_warp_mma_runs_at_the_devices_warp_mma_fraction(tiny):
    # The compute-bound GEMM above, issued with warp-synchronous MMA on a device where that reaches
    # half the tensor rate: each CTA's 2*128*128*1024 FLOP now take 65.536 us; fills and drains unchanged.

    fast = replace(tiny, dram_bandwidth_bytes_per_s=1e12, warp_mma_fraction=0.5)
    plan = gemm_plan(fast, "gemm", "matmul", 256, 256, 1024, 1, "fp16", Tile(128, 128, 64, 2, 4), 2.0 * 256**2 * 1024)
    overhead = 2 * (1e-6 + 100e-9 + 32 * 1024 / 64e9)
    assert simulate_kernel(plan, fast).time_s == pytest.approx(overhead + 2 * 2 * 128**2 * 1024 / 1024e9, rel=1e-12)
    warp = replace(plan, warp_mma=True)
    assert simulate_kernel(warp, fast).time_s == pytest.approx(overhead + 2 * 2 * 128**2 * 1024 / 512e9, rel=1e-12)


def test_sfu_work_follows_or_overlaps_the_math(tiny):
    # Give each CTA of the compute-bound GEMM 2^16 exponentials: 4 SFUs x 1 GHz = 16.384 us per CTA.
    # A FlashAttention-2 style kernel runs them after its products (32.768 + 16.384 us per CTA); a
    # warp-specialized one overlaps them (max = 32.768 us, as without them).

    fast = replace(tiny, dram_bandwidth_bytes_per_s=1e12)
    plan = gemm_plan(fast, "gemm", "matmul", 256, 256, 1024, 1, "fp16", Tile(128, 128, 64, 2, 4), 2.0 * 256**2 * 1024)
    overhead = 2 * (1e-6 + 100e-9 + 32 * 1024 / 64e9)
    math_s = 2 * 128**2 * 1024 / 1024e9
    serial = replace(plan, sfu_ops_per_cta=2.0**16)
    assert simulate_kernel(serial, fast).time_s == pytest.approx(overhead + 2 * (math_s + 2**16 / 4e9), rel=1e-12)
    overlapped = replace(serial, sfu_overlaps_math=True)
    assert simulate_kernel(overlapped, fast).time_s == pytest.approx(overhead + 2 * math_s, rel=1e-12)


def _with_loaded_latency(machine, slope):
    return replace(machine, calibration=replace(machine.calibration, dram_loaded_latency_slope=slope))


@pytest.mark.parametrize("slope", [0.0, 1.0, 2.5])
def test_little_law_with_loaded_dram_latency(tiny, slope):
    # 2 CTAs (one per SM) of 32 threads with 4 bytes in flight each: N = 256 B outstanding. Latency
    # L(R) = 1 us x (1 + slope x R / 1 GB/s), so R = N / L(R): slope x 1e-15 R^2 + 1e-6 R - 256 = 0
    # (R = 256 MB/s at slope 0). Each CTA reads 64 KiB; the kernel pays one idle DRAM latency first.
    plan = streaming_plan(tiny, "chase", "elementwise", "fp32", bytes_read=2 * 65536.0, bytes_written=0.0,
                          flop=0.0, sfu_ops=0.0, num_ctas=2, threads_per_cta=32, bytes_in_flight_per_thread=4.0)
    machine = _with_loaded_latency(tiny, slope)
    a, b, c = slope * 1e-15, 1e-6, -256.0
    rate = -c / b if a == 0 else (-b + (b * b - 4 * a * c) ** 0.5) / (2 * a)
    expected = 1e-6 + 2 * 65536 / rate
    timing = simulate_kernel(plan, machine)
    assert timing.time_s == pytest.approx(expected, rel=1e-9)
    assert timing.bound == "latency"
    assert estimate_kernel_s(plan, machine) == pytest.approx(expected, rel=1e-9)


def test_loaded_latency_saturates_at_full_bandwidth(tiny):
    # With far more bytes in flight than DRAM needs, the latency stops growing at utilization 1 and
    # the kernel runs at DRAM bandwidth: 2^20 fp32 adds as in the first test, whatever the slope.
    n = 2**20
    ctas, threads, in_flight = elementwise_launch(tiny, n, "fp32", 2)
    plan = streaming_plan(tiny, "add", "elementwise", "fp32", bytes_read=8.0 * n, bytes_written=4.0 * n,
                          flop=float(n), sfu_ops=0.0, num_ctas=ctas, threads_per_cta=threads,
                          bytes_in_flight_per_thread=in_flight)
    timing = simulate_kernel(plan, _with_loaded_latency(tiny, 3.0))
    assert timing.time_s == pytest.approx(1e-6 + 12 * 2**20 / 1e9 + 100e-9, rel=1e-12)


def test_small_tiles_are_capped_by_shared_memory_bandwidth(tiny):
    # A 256 x 256 x 1024 fp16 GEMM in 64x64 tiles with 4 warps (2 x 2 warps of 32 x 32). Per step of k a
    # CTA writes its 64 A rows and 64 B columns into shared memory and its warps read back 2 x 64 rows and
    # 2 x 64 columns: 384 elements = 768 bytes, against 2 * 64 * 64 = 8192 FLOP. At the SM's 64 B/cycle
    # that is 683 FLOP/cycle, below the 1024 of the tensor cores: each CTA takes 1024 * 768 B / 64 GB/s
    # = 12.288 us, not 8.192 us of math. 16 CTAs, 7 resident per SM (registers): waves of 14 and 2.
    fast = replace(tiny, dram_bandwidth_bytes_per_s=1e12)
    tile = Tile(64, 64, 64, 2, 4)
    plan = gemm_plan(fast, "gemm", "matmul", 256, 256, 1024, 1, "fp16", tile, 2.0 * 256**2 * 1024)
    assert plan.shared_operand_bytes_per_cta == 1024 * 768
    assert plan.grid == 16 and plan.ctas_per_unit == 3
    per_unit = plan.ctas_per_unit
    waves = [min(2 * per_unit, plan.grid - i) for i in range(0, plan.grid, 2 * per_unit)]
    drain = [100e-9 + max(c * 64 * 64 * 2 / 1e12, -(-c // 2) * 64 * 64 * 2 / 64e9) for c in waves]
    # the CTAs on one SM share its shared-memory bandwidth: a wave of c CTAs runs ceil(c / 2) per SM
    main = [-(-c // 2) * 1024 * 768 / 64e9 for c in waves]
    expected = len(waves) * 1e-6 + sum(drain) + sum(main)
    timing = simulate_kernel(plan, fast)
    assert timing.time_s == pytest.approx(expected, rel=1e-9)
    assert (timing.bound, timing.compute_limiter) == ("compute", "shared_memory")
    # with 128x128 tiles the same SM bandwidth feeds 1365 FLOP/cycle: the math (1024) binds again
    big = gemm_plan(fast, "gemm", "matmul", 256, 256, 1024, 1, "fp16", Tile(128, 128, 64, 2, 4), 2.0 * 256**2 * 1024)
    assert big.shared_operand_bytes_per_cta == 1024 * 768 * 2
    assert 2 * 128 * 128 / (big.shared_operand_bytes_per_cta / 1024) * 64 > 1024
    assert simulate_kernel(big, fast).compute_limiter == "matrix"


def test_warpgroup_mma_reads_its_operands_once_per_warpgroup(tiny):
    # Where the native instruction is warpgroup MMA (Hopper wgmma), the 4 warps of a 128x128 CTA are
    # one warpgroup that reads its 128 A rows and 128 B columns once per step of k; warp-level MMA reads
    # each (2 x 2 warps) twice.
    from gpusim.mapping.gemm import shared_operand_elements_per_k

    tile = Tile(128, 128, 64, 2, 4)
    assert shared_operand_elements_per_k(tiny, tile, 4) == 2 * 128 * 2 + 256
    hopper_like = replace(tiny, warp_mma_fraction=0.67, native_mma_issuer="warpgroup")
    assert shared_operand_elements_per_k(hopper_like, tile, 4) == 256 + 256
    assert shared_operand_elements_per_k(hopper_like.with_warp_mma_libraries(), tile, 4) == 2 * 128 * 2 + 256


def test_cta_mma_reads_the_tile_once_and_a_cluster_pair_splits_b(tiny):
    # Blackwell tcgen05: one MMA for the whole CTA reads its A rows and B columns once per step of k,
    # whatever its warp count; in a 2-CTA cluster each CTA stages and reads half of B.
    from gpusim.mapping.gemm import shared_operand_elements_per_k

    blackwell_like = replace(tiny, warp_mma_fraction=0.31, native_mma_issuer="cta")
    assert shared_operand_elements_per_k(blackwell_like, Tile(128, 256, 64, 2, 8), 8) == 2 * (128 + 256)
    assert shared_operand_elements_per_k(blackwell_like, Tile(128, 256, 64, 2, 8, cluster=2), 8) == 2 * (128 + 128)
    # built without tcgen05 (mma.sync kernels), each of the 2 x 4 warps reads its own slices
    assert shared_operand_elements_per_k(blackwell_like.with_warp_mma_libraries(), Tile(128, 256, 64, 2, 8), 8) \
        == min(128 * wn + 256 * (8 // wn) for wn in (1, 2, 4, 8)) + 128 + 256


def test_a_2x2_cluster_multicasts_a_as_well_as_b(tiny):
    # A 2x2 cluster: each A tile is loaded once for the 2 CTAs beside each other along N and each B
    # tile once for the 2 along M, so a 128x256 CTA reads 128/2 rows of A and 256/2 columns of B from
    # L2 per step of k (against 128 + 256 alone, 128 + 128 in a pair). Shared memory still receives
    # every row it computes with: the multicast saves L2 reads, not staging.
    from gpusim.mapping.gemm import (
        gemm_plan,
        shared_operand_elements_per_k,
        tile_candidates,
    )

    quad = Tile(128, 256, 64, 2, 8, cluster=2, cluster_n=2)
    assert quad.l2_operand_elements_per_k() == 64 + 128
    assert Tile(128, 256, 64, 2, 8, cluster=2).l2_operand_elements_per_k() == 128 + 128
    assert Tile(128, 256, 64, 2, 8).l2_operand_elements_per_k() == 128 + 256
    blackwell_like = replace(tiny, warp_mma_fraction=0.31, native_mma_issuer="cta", max_cluster_size=8)
    assert shared_operand_elements_per_k(blackwell_like, quad, 8) == 2 * (128 + 128)
    # L2 bytes of one CTA over k = 1024 in FP16: operands (64 + 128) x 1024 x 2 B plus its C tile
    plan = gemm_plan(blackwell_like, "mm", "matmul", 256, 512, 1024, 1, "fp16", quad, 2.0 * 256 * 512 * 1024)
    assert plan.l2_bytes_per_cta == (64 + 128) * 1024 * 2 + 128 * 256 * 2
    assert plan.tile.label().endswith("_cluster2x2")
    # offered only where the native MMA is issued per CTA (Blackwell), never to warp or warpgroup MMA
    assert any(t.cluster_n == 2 for t in tile_candidates(blackwell_like, "fp16", 4096, 4096, 4096, 1))
    hopper_like = replace(blackwell_like, native_mma_issuer="warpgroup")
    assert not any(t.cluster_n > 1 for t in tile_candidates(hopper_like, "fp16", 4096, 4096, 4096, 1))
    assert not any(t.cluster_n > 1 for t in tile_candidates(blackwell_like.with_warp_mma_libraries(), "fp16",
                                                           4096, 4096, 4096, 1))


def test_per_cta_mma_offers_tile_widths_in_steps_of_16(tiny):
    # tcgen05 takes any N that is a multiple of 16 up to 256: 128 x 144 ... 128 x 240 besides the
    # power-of-two tiles. Warp and warpgroup MMA keep the power-of-two menu.
    from gpusim.mapping.gemm import tile_candidates

    def widths(machine):
        return {t.block_n for t in tile_candidates(machine, "fp16", 4096, 4096, 4096, 1) if t.block_m == 128}

    blackwell_like = replace(tiny, warp_mma_fraction=0.31, native_mma_issuer="cta", max_cluster_size=8)
    assert widths(blackwell_like) == {64, 128, 256} | set(range(144, 256, 16))
    assert widths(replace(blackwell_like, native_mma_issuer="warpgroup")) == {64, 128, 256}
    assert widths(blackwell_like.with_warp_mma_libraries()) == {64, 128, 256}


def _chiplet(tiny, llc_bytes_per_s):
    """The tiny GPU with its 1 MiB L2 split into two private 512 KiB partitions (one per SM, CTAs
    round-robin), and, unless ``llc_bytes_per_s`` is None, a 4 MiB memory-side cache (500 ns)."""
    if llc_bytes_per_s is None:
        return replace(tiny, l2_private_partitions=2)
    return replace(tiny, l2_private_partitions=2, llc_capacity_bytes=4 * 2**20,
                   llc_bandwidth_bytes_per_s=llc_bytes_per_s, llc_latency_s=500e-9)


def test_private_l2_partitions_reread_shared_panels(tiny):
    # The 256 x 256 x 1024 GEMM of test_gemm_waves_and_l2_reuse (256 KiB panels, waves of 2 CTAs:
    # tiles (0,0),(1,0) then (0,1),(1,1)). CTA i runs on partition i % 2, so both CTAs of a wave need
    # the wave's B panel in their own L2: wave 1 reads A0, B0 | A1, B0; wave 2 finds A0 and A1 in
    # their partitions and reads B1 twice. Without a memory-side cache every miss reads DRAM.
    tile = Tile(128, 128, 64, 2, 4)
    kib = 1024
    plan = gemm_plan(_chiplet(tiny, None), "gemm", "matmul", 256, 256, 1024, 1, "fp16", tile, 2.0 * 256**2 * 1024)
    assert plan.wave_dram_bytes == (4 * 256 * kib + 2 * 32 * kib, 2 * 256 * kib + 2 * 32 * kib)
    assert plan.wave_llc_bytes == ()


def test_memory_side_cache_serves_rereads_at_its_own_bandwidth(tiny):
    # With the 4 MiB memory-side cache, the second read of B0 (wave 1) and of B1 (wave 2) hit it: DRAM
    # moves what the shared L2 case moved (each panel once), the cache 256 KiB per wave.
    tile = Tile(128, 128, 64, 2, 4)
    kib = 1024
    flop = 2.0 * 256**2 * 1024
    drain = 100e-9 + 32 * kib / 64e9
    fast = _chiplet(tiny, 2e9)
    plan = gemm_plan(fast, "gemm", "matmul", 256, 256, 1024, 1, "fp16", tile, flop)
    assert plan.wave_dram_bytes == (3 * 256 * kib + 2 * 32 * kib, 256 * kib + 2 * 32 * kib)
    assert plan.wave_llc_bytes == (256 * kib, 256 * kib)
    # at 2 GB/s the cache's 256 KiB per wave take 131 us beside DRAM's 852 us and 328 us: the time of
    # the shared-L2 GEMM
    expected = 2 * (1e-6 + drain) + (832 * kib + 320 * kib) / 1e9
    assert simulate_kernel(plan, fast).time_s == pytest.approx(expected, rel=1e-12)
    assert estimate_kernel_s(plan, fast) == pytest.approx(expected, rel=1e-12)
    # at 0.1 GB/s the cache is the bottleneck of both waves: 256 KiB / 0.1 GB/s = 2.62 ms each
    slow = _chiplet(tiny, 0.1e9)
    plan = gemm_plan(slow, "gemm", "matmul", 256, 256, 1024, 1, "fp16", tile, flop)
    expected = 2 * (1e-6 + drain) + 2 * 256 * kib / 0.1e9
    assert simulate_kernel(plan, slow).time_s == pytest.approx(expected, rel=1e-12)
    assert estimate_kernel_s(plan, slow) == pytest.approx(expected, rel=1e-12)
    assert plan.describe()["llc_hit_bytes_per_launch"] == 2 * 256 * kib


def test_unpipelined_cta_adds_its_loads_to_its_math(tiny):
    # A 128 x 256 x 1024 fp16 GEMM in two 128x128 tiles, one per SM, with ONE pipeline stage and 16
    # waited-for loads per CTA (one per 64-deep k step). Without software pipelining a CTA's time is
    # its math (2*128*128*1024 FLOP at 1024 FLOP/cycle x 1 GHz = 32.768 us), plus its 544 KiB of L2
    # traffic (A and B panels of 256 KiB, its 32 KiB C tile) at its SM's half of the 1 TB/s L2
    # (1.114112 us), plus one 100 ns L2 latency per waited-for load (1.6 us). The wave adds its 1 us
    # pipeline fill and its drain (100 ns + 32 KiB at the SM's 64 GB/s), as a pipelined tile does.
    fast = replace(tiny, dram_bandwidth_bytes_per_s=1e12)
    tile = Tile(128, 128, 64, 1, 4)
    plan = replace(gemm_plan(fast, "gemm", "matmul", 128, 256, 1024, 1, "fp16", tile, 2.0 * 128 * 256 * 1024),
                   load_waits_per_cta=16)
    assert not plan.pipelined and plan.grid == 2 and plan.l2_bytes_per_cta == 544 * 1024
    cta_s = 2 * 128 * 128 * 1024 / 1024e9 + 544 * 1024 / 0.5e12 + 16 * 100e-9
    timing = simulate_kernel(plan, fast)
    assert timing.time_s == pytest.approx(1e-6 + cta_s + 100e-9 + 32 * 1024 / 64e9, rel=1e-12)
    assert timing.bound == "latency"
    assert estimate_kernel_s(plan, fast) == pytest.approx(timing.time_s, rel=1e-12)
    # With two such CTAs on each SM (the 256 x 256 GEMM), one computes while the other waits: the
    # SM's shared math (2 x 32.768 us) is longer than one CTA's math plus loads, so it paces the wave.
    four = replace(gemm_plan(fast, "gemm", "matmul", 256, 256, 1024, 1, "fp16", tile, 2.0 * 256**2 * 1024),
                   load_waits_per_cta=16)
    assert four.ctas_per_unit >= 2 and four.grid == 4
    expected = 1e-6 + 2 * 2 * 128 * 128 * 1024 / 1024e9 + 100e-9 + 2 * 32 * 1024 / 64e9
    assert simulate_kernel(four, fast).time_s == pytest.approx(expected, rel=1e-12)


def _with_memory_calibration(machine, **values):
    return replace(machine, calibration=replace(machine.calibration, **values))


def test_stores_are_posted_and_travel_with_the_loads(tiny):
    # 2 CTAs (one per SM) of 32 threads, each thread one 4-byte load in flight: 128 B per CTA per round trip
    # of 1 us. Each CTA loads 64 KiB (512 trips = 512 us) and stores 64 KiB, which no thread waits for: the
    # kernel takes the one idle DRAM latency plus 512 us whether or not it stores (256 KiB at 1 GB/s would
    # take only 262 us), and, if it stores, one L2 latency (100 ns) for its last stores to complete.
    def plan(written):
        return streaming_plan(tiny, "copy", "elementwise", "fp32", bytes_read=2 * 65536.0, bytes_written=written,
                              flop=0.0, sfu_ops=0.0, num_ctas=2, threads_per_cta=32, bytes_in_flight_per_thread=4.0)
    for written, expected in ((0.0, 1e-6 + 512e-6), (2 * 65536.0, 1e-6 + 512e-6 + 100e-9)):
        assert simulate_kernel(plan(written), tiny).time_s == pytest.approx(expected, rel=1e-12)
        assert estimate_kernel_s(plan(written), tiny) == pytest.approx(expected, rel=1e-12)


def test_math_between_loads_adds_the_sms_issue_time_to_each_cta(tiny):
    # The posted-stores kernel above (2 CTAs of one warp, 512 round trips of 1 us each) whose threads
    # also compute between their loads: 4,000 warp instructions per CTA. One warp keeps one of the SM's
    # 4 schedulers busy (1 instruction per cycle at 1 GHz), so each CTA lives 4 us longer.
    from gpusim.engine.kernel import serial_issue_s
    plan = streaming_plan(tiny, "scale", "elementwise", "fp32", bytes_read=2 * 65536.0, bytes_written=0.0,
                          flop=0.0, sfu_ops=0.0, num_ctas=2, threads_per_cta=32, bytes_in_flight_per_thread=4.0,
                          serial_warp_instructions_per_cta=4000.0)
    expected = 1e-6 + 512e-6 + 4e-6
    assert simulate_kernel(plan, tiny).time_s == pytest.approx(expected, rel=1e-12)
    assert estimate_kernel_s(plan, tiny) == pytest.approx(expected, rel=1e-12)
    assert simulate_kernel(plan, tiny).bound == "latency"
    # CTAs on one SM share its schedulers once they fill them: 1-4 one-warp CTAs per SM each take
    # 4 us; 8 per SM issue 32,000 instructions at 4 per cycle, so every CTA waits 8 us; 16 per SM, 16 us.
    for count, seconds in ((2, 4e-6), (4, 4e-6), (8, 4e-6), (16, 8e-6), (32, 16e-6)):
        assert serial_issue_s(plan, tiny, count) == pytest.approx(seconds, rel=1e-12)
    assert serial_issue_s(replace(plan, serial_warp_instructions_per_cta=0.0), tiny, 32) == 0.0
    # Two waves that share the SMs differently: 34 one-warp CTAs of 1 KiB of loads each (8 trips of
    # 1 us) and 40,000 instructions. The first wave holds 16 per SM (16 warps fill the 4 schedulers):
    # each CTA lives 8 us + 40,000 x 16 / 4e9 s = 168 us, longer than its 32 KiB at 1 GB/s (32.8 us);
    # the second holds one per SM: 8 us + 40 us. After the one idle DRAM latency: 1 + 168 + 48 us.
    two_waves = streaming_plan(tiny, "scale", "elementwise", "fp32", bytes_read=34 * 1024.0, bytes_written=0.0,
                               flop=0.0, sfu_ops=0.0, num_ctas=34, threads_per_cta=32, bytes_in_flight_per_thread=4.0,
                               serial_warp_instructions_per_cta=40000.0)
    assert two_waves.ctas_per_unit == 16 and two_waves.num_waves == 2
    expected = 1e-6 + 168e-6 + 48e-6
    assert simulate_kernel(two_waves, tiny).time_s == pytest.approx(expected, rel=1e-12)
    assert estimate_kernel_s(two_waves, tiny) == pytest.approx(expected, rel=1e-12)


def test_scheduler_residence_is_mean_value_analysis_of_warps_sharing_a_scheduler():
    # W warps each alternately issue for K at one scheduler and wait D for their loads. One warp never
    # queues: K. Two warps with K = D = 1: the first alone spends 1 there and is there half of its
    # loop (queue 1 / 2); the second finds that half a warp ahead of it: 1 x (1 + 1/2) = 1.5.
    from gpusim.engine.kernel import scheduler_residence_s
    assert scheduler_residence_s(1.0, 1, 1.0) == pytest.approx(1.0, rel=1e-12)
    assert scheduler_residence_s(1.0, 2, 1.0) == pytest.approx(1.5, rel=1e-12)
    # three warps: after 1.5 the queue is 2 x 1.5 / 2.5 = 1.2, so 1 x 2.2
    assert scheduler_residence_s(1.0, 3, 1.0) == pytest.approx(2.2, rel=1e-12)
    # with no delay the scheduler is saturated: every warp waits for all the others (W x K)
    assert scheduler_residence_s(2.0, 16, 0.0) == pytest.approx(32.0, rel=1e-12)
    # a long delay hides the others' issue: just K
    assert scheduler_residence_s(2.0, 16, 1e9) == pytest.approx(2.0, rel=1e-6)
    assert float(scheduler_residence_s(0.0, 16, 1.0)) == 0.0
    # between the bounds, and never less with more warps or a shorter delay
    values = [float(scheduler_residence_s(1.0, w, 10.0)) for w in range(1, 33)]
    assert all(1.0 <= v <= w for w, v in zip(range(1, 33), values))
    assert values == sorted(values)
    assert scheduler_residence_s(1.0, 16, 5.0) >= scheduler_residence_s(1.0, 16, 10.0)


def test_issue_between_trips_overlaps_the_other_warps_waits(tiny):
    # The posted-stores kernel above (2 one-warp CTAs, one per SM, 512 round trips of 1 us) whose warps
    # issue 1,000 instructions (1 us at 1 GHz) between their trips, with no barrier between warps: one
    # warp per scheduler never queues, so each trip lasts 2 us.
    plan = streaming_plan(tiny, "mul", "elementwise", "fp32", bytes_read=2 * 65536.0, bytes_written=0.0,
                          flop=0.0, sfu_ops=0.0, num_ctas=2, threads_per_cta=32, bytes_in_flight_per_thread=4.0)
    plan = replace(plan, warp_instructions_per_trip=1000.0)
    expected = 1e-6 + 512 * 2e-6
    assert simulate_kernel(plan, tiny).time_s == pytest.approx(expected, rel=1e-12)
    assert estimate_kernel_s(plan, tiny) == pytest.approx(expected, rel=1e-12)
    # 16 such CTAs of 8 trips (1 KiB of loads) each: 8 one-warp CTAs per SM, 2 warps per scheduler,
    # each trip 1 us of latency plus 1.5 us at the scheduler (mean-value analysis, K = D = 1 us).
    # 16 KiB in 21 us is below the 1 GB/s DRAM.
    many = streaming_plan(tiny, "mul", "elementwise", "fp32", bytes_read=16 * 1024.0, bytes_written=0.0,
                          flop=0.0, sfu_ops=0.0, num_ctas=16, threads_per_cta=32, bytes_in_flight_per_thread=4.0)
    many = replace(many, warp_instructions_per_trip=1000.0)
    assert many.num_waves == 1
    expected = 1e-6 + 8 * (1e-6 + 1.5e-6)
    assert simulate_kernel(many, tiny).time_s == pytest.approx(expected, rel=1e-12)
    assert estimate_kernel_s(many, tiny) == pytest.approx(expected, rel=1e-12)
    # the same instructions issued with every warp waiting at once (serial) cost more
    serial = replace(many, warp_instructions_per_trip=0.0, serial_warp_instructions_per_cta=8 * 1000.0)
    assert simulate_kernel(serial, tiny).time_s > simulate_kernel(many, tiny).time_s


def test_a_block_reduction_adds_its_dependent_steps_to_each_cta(tiny):
    # The kernel above (2 one-warp CTAs, 512 round trips of 1 us, 4,000 serial instructions = 4 us) whose
    # CTAs also sum a value across the block once: 5 + 5 dependent shuffles (32-thread warps) and two
    # store-then-load exchanges through shared memory, 14 steps of the 10 ns shared-memory latency.
    from gpusim.engine.kernel import block_reduction_s
    assert block_reduction_s(tiny) == pytest.approx(14 * 10e-9, rel=1e-12)
    plan = streaming_plan(tiny, "norm", "rmsnorm", "fp32", bytes_read=2 * 65536.0, bytes_written=0.0,
                          flop=0.0, sfu_ops=0.0, num_ctas=2, threads_per_cta=32, bytes_in_flight_per_thread=4.0,
                          serial_warp_instructions_per_cta=4000.0, block_reductions_per_cta=1)
    expected = 1e-6 + 512e-6 + 4e-6 + 0.14e-6
    assert simulate_kernel(plan, tiny).time_s == pytest.approx(expected, rel=1e-12)
    assert estimate_kernel_s(plan, tiny) == pytest.approx(expected, rel=1e-12)
    twice = replace(plan, block_reductions_per_cta=2)
    assert simulate_kernel(twice, tiny).time_s == pytest.approx(expected + 0.14e-6, rel=1e-12)


def test_cta_turnaround_bounds_store_only_ctas(tiny):
    # Two CTAs (one per SM) that only store 128 B each: nothing waits for DRAM, but each CTA lives its
    # calibrated turnaround, 5,000 cycles at 1 GHz = 5 us (the 256 B take 0.26 us at 1 GB/s), after the
    # kernel's one idle DRAM latency, and the last stores complete one L2 latency (100 ns) later.
    # Without a turnaround the stores run at DRAM bandwidth.
    plan = streaming_plan(tiny, "init", "elementwise", "fp32", bytes_read=0.0, bytes_written=256.0, flop=0.0,
                          sfu_ops=0.0, num_ctas=2, threads_per_cta=32, bytes_in_flight_per_thread=4.0)
    machine = _with_memory_calibration(tiny, cta_turnaround_cycles=5000.0)
    assert simulate_kernel(plan, machine).time_s == pytest.approx(1e-6 + 5e-6 + 100e-9, rel=1e-12)
    assert estimate_kernel_s(plan, machine) == pytest.approx(1e-6 + 5e-6 + 100e-9, rel=1e-12)
    assert simulate_kernel(plan, tiny).time_s == pytest.approx(1e-6 + 256 / 1e9 + 100e-9, rel=1e-12)


@pytest.mark.parametrize("loss", [0.0, 0.15, 0.3])
def test_read_write_mix_costs_dram_bandwidth(tiny, loss):
    # The 2^20 fp32 add of the first test (8 MiB read, 4 MiB written: write share 1/3, mix 2 x 1/3) at DRAM
    # bandwidth loses loss x 2/3 of it; a read-only kernel of the same 12 MiB loses nothing (and waits
    # for no last stores: the add waits one L2 latency, 100 ns, for its).
    n = 2**20
    ctas, threads, in_flight = elementwise_launch(tiny, n, "fp32", 2)
    machine = _with_memory_calibration(tiny, dram_mixed_traffic_loss_fraction=loss)
    add = streaming_plan(tiny, "add", "elementwise", "fp32", bytes_read=8.0 * n, bytes_written=4.0 * n,
                         flop=float(n), sfu_ops=0.0, num_ctas=ctas, threads_per_cta=threads,
                         bytes_in_flight_per_thread=in_flight)
    expected = 1e-6 + 12 * 2**20 / (1e9 * (1.0 - loss * 2.0 / 3.0)) + 100e-9
    assert simulate_kernel(add, machine).time_s == pytest.approx(expected, rel=1e-12)
    assert estimate_kernel_s(add, machine) == pytest.approx(expected, rel=1e-12)
    assert simulate_kernel(add, machine).dram_bytes == 12 * 2**20  # the bytes themselves are not inflated
    read_only = replace(add, store_bytes_per_cta=0.0)
    assert simulate_kernel(read_only, machine).time_s == pytest.approx(1e-6 + 12 * 2**20 / 1e9, rel=1e-12)
