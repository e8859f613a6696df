"""Properties every kernel simulation must have, over random shapes (hypothesis)."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusim.config import load_hardware
from gpusim.config.derived import matrix_peak_flop_per_s, vector_peak_flop_per_s
from gpusim.config.hardware import DTYPE_BYTES
from gpusim.engine.kernel import simulate_kernel
from gpusim.engine.machine import machine_of
from gpusim.mapping import best_gemm
from gpusim.mapping.streaming import elementwise_launch, streaming_plan

H100 = load_hardware("h100_sxm5_80gb")
MACHINE = machine_of(H100)

dims = st.integers(min_value=1, max_value=12288)
dtypes = st.sampled_from(["fp32", "tf32", "fp16", "bf16", "fp8"])


def gemm_time(machine, m, n, k, dtype, stream_k=True):
    plan = best_gemm(machine, "gemm", "matmul", m, n, k, 1, dtype, 2.0 * m * n * k, stream_k=stream_k)
    return plan, simulate_kernel(plan, machine)


@settings(max_examples=40, deadline=None)
@given(m=dims, n=dims, k=dims, dtype=dtypes)
def test_gemm_never_beats_its_roofline(m, n, k, dtype):
    plan, timing = gemm_time(MACHINE, m, n, k, dtype)
    gpu = H100.gpu
    peak = matrix_peak_flop_per_s(gpu, dtype, fp32_accumulate=True) or vector_peak_flop_per_s(gpu, dtype)
    eb = DTYPE_BYTES[dtype]
    min_bytes = (m * k + k * n) * eb + m * n * (2 if dtype == "fp8" else eb)
    roofline_s = max(2.0 * m * n * k / peak, min_bytes / gpu.dram.bandwidth_bytes_per_s)
    assert timing.time_s >= roofline_s * (1 - 1e-9)
    assert plan.dram_bytes >= min_bytes * (1 - 1e-9)
    assert 0.0 <= plan.l2_hit_fraction <= 1.0


def streaming(machine, n, dtype="bf16"):
    eb = DTYPE_BYTES[dtype]
    ctas, threads, in_flight = elementwise_launch(machine, n, dtype, 2)
    plan = streaming_plan(machine, "add", "elementwise", dtype, bytes_read=2.0 * n * eb, bytes_written=1.0 * n * eb,
                          flop=float(n), sfu_ops=0.0, num_ctas=ctas, threads_per_cta=threads,
                          bytes_in_flight_per_thread=in_flight)
    return simulate_kernel(plan, machine).time_s


@settings(max_examples=40, deadline=None)
@given(n=st.integers(min_value=1, max_value=2**28), factor=st.floats(min_value=1.0, max_value=4.0))
def test_more_dram_bandwidth_never_slows_a_memory_bound_kernel(n, factor):
    faster = replace(MACHINE, dram_bandwidth_bytes_per_s=MACHINE.dram_bandwidth_bytes_per_s * factor)
    assert streaming(faster, n) <= streaming(MACHINE, n) * (1 + 1e-12)


DOUBLED = machine_of(load_hardware("h100_sxm5_80gb", [f"gpu.num_sms={2 * MACHINE.num_units}"]))


@settings(max_examples=30, deadline=None)
@given(m=st.integers(min_value=512, max_value=16384), n=st.integers(min_value=512, max_value=16384),
       k=st.integers(min_value=64, max_value=8192))
def test_more_sms_never_slow_a_kernel_with_more_ctas_than_sms(m, n, k):
    # Twice the SMs: every new wave holds two old waves' CTAs, so it moves at most their DRAM bytes
    # (less when they share panels in L2) with the same per-CTA compute. (Adding a few SMs can
    # legitimately move work from a compute-bound tail wave into a memory-bound first wave.)
    plan, timing = gemm_time(MACHINE, m, n, k, "bf16")
    if plan.grid <= MACHINE.num_units:
        return
    bigger = DOUBLED
    _, timing_big = gemm_time(bigger, m, n, k, "bf16")
    assert timing_big.time_s <= timing.time_s * (1 + 1e-9)


def test_simulation_is_deterministic():
    a = gemm_time(MACHINE, 3000, 5000, 700, "bf16")[1]
    b = gemm_time(MACHINE, 3000, 5000, 700, "bf16")[1]
    assert a == b


def test_awkward_shape_is_slower_per_flop():
    # 4224 x 4096 fills exactly 4 waves of 132 CTAs with 128x256 tiles; one more row needs a 34th row
    # of tiles, 544 CTAs, and a mostly idle 5th wave (wave quantization): much slower per FLOP for a
    # library that hands out whole tiles.
    plan, even = gemm_time(MACHINE, 4224, 4096, 4096, "bf16", stream_k=False)
    assert plan.grid == 4 * MACHINE.num_units
    _, odd = gemm_time(MACHINE, 4225, 4096, 4096, "bf16", stream_k=False)
    assert odd.time_s / even.time_s > 1.1
    # A stream-K tail shares the 16 leftover tiles' k-steps among all 132 SMs: the awkward shape still
    # costs more than its FLOP (the tail's partial tiles are added up), but far less than a 5th wave.
    plan, tail = gemm_time(MACHINE, 4225, 4096, 4096, "bf16")
    assert plan.tail_work_fraction < 1.0
    assert 4225 / 4224 < tail.time_s / even.time_s < 1.1


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8", "tf32"])
def test_large_gemm_is_compute_bound_on_h100(dtype):
    plan, timing = gemm_time(MACHINE, 8192, 8192, 8192, dtype)
    assert timing.bound == "compute"
    assert plan.pipe == "matrix"


@pytest.mark.parametrize("gpu", ["h100_sxm5_80gb", "a100_sxm4_80gb", "mi300x", "rtx_4090"])
@pytest.mark.parametrize("shape", [(512, 512, 512), (1024, 4096, 1024), (4096, 4096, 4096), (128, 12288, 4096)])
def test_tile_search_bound_never_exceeds_the_tiles_time(gpu, shape):
    # The branch-and-bound tile search stops at the first tile whose bound is above the best time
    # found; that is only the fastest tile if no bound overestimates its tile's time.
    from gpusim.config import load_hardware
    from gpusim.engine.kernel import estimate_kernel_s
    from gpusim.engine.machine import machine_of
    from gpusim.mapping.gemm import gemm_lower_bound_s, gemm_plan, tile_candidates

    machine = machine_of(load_hardware(gpu))
    m, n, k = shape
    for tile in tile_candidates(machine, "bf16", m, n, k, 1):
        plan = gemm_plan(machine, "g", "matmul", m, n, k, 1, "bf16", tile, 2.0 * m * n * k)
        if plan is None:
            continue
        bound = gemm_lower_bound_s(machine, m, n, k, 1, "bf16", tile, 0.0)
        assert bound <= estimate_kernel_s(plan, machine) * (1 + 1e-12), tile


@settings(max_examples=30, deadline=None)
@given(m=dims, n=dims, k=dims, dtype=st.sampled_from(["fp16", "bf16", "fp8"]),
       factor=st.floats(min_value=1.0, max_value=4.0))
def test_more_shared_memory_bandwidth_never_slows_a_tensor_core_gemm(m, n, k, dtype, factor):
    # The library picks the fastest tile on either machine; on the faster one every tile is at
    # least as fast (shared memory only caps the math), so its pick is too.
    faster = replace(MACHINE, shared_bytes_per_cycle=MACHINE.shared_bytes_per_cycle * factor)
    assert gemm_time(faster, m, n, k, dtype)[1].time_s <= gemm_time(MACHINE, m, n, k, dtype)[1].time_s * (1 + 1e-9)


@pytest.mark.parametrize("gpu", ["h100_sxm5_80gb", "mi300x"])
@pytest.mark.parametrize("m, n, k, batch, b_group", [(256, 4096, 4096, 4, 1), (512, 1024, 2048, 2, 1),
                                                     (1024, 1024, 64, 16, 1), (128, 4096, 4096, 8, 8),
                                                     (2048, 512, 1024, 4, 2)])
def test_tile_search_finds_the_fastest_candidate_of_a_batched_gemm(gpu, m, n, k, batch, b_group):
    # The branch-and-bound search must return what trying every candidate returns. Its DRAM bound once
    # counted each batch entry's B batch times over, which pruned every tile but the first ranked for
    # 256x4096x4096 x4 on H100 (137 us chosen where a 128x128 pair runs it in 56 us).
    from gpusim.engine.kernel import estimate_kernel_s
    from gpusim.mapping.gemm import compulsory_dram_bytes, gemm_plan, tile_candidates

    machine = machine_of(load_hardware(gpu))
    flop = 2.0 * m * n * k * batch
    chosen = best_gemm(machine, "g", "matmul", m, n, k, batch, "bf16", flop, b_group=b_group)
    plans = (gemm_plan(machine, "g", "matmul", m, n, k, batch, "bf16", tile, flop, b_group=b_group)
             for tile in tile_candidates(machine, "bf16", m, n, k, batch))
    fastest = min(estimate_kernel_s(p, machine) for p in plans if p is not None)
    assert estimate_kernel_s(chosen, machine) == pytest.approx(fastest, rel=1e-12)
    # and the compulsory bytes count one B per group: 256x4096x4096 x4 moves 4 B matrices of 32 MiB
    assert compulsory_dram_bytes(256, 4096, 4096, 4, "bf16") == (4 * 256 * 4096 + 4 * 4096 * 4096
                                                                 + 4 * 256 * 4096) * 2
    assert compulsory_dram_bytes(256, 4096, 4096, 4, "bf16", b_group=4) == (4 * 256 * 4096 + 4096 * 4096
                                                                            + 4 * 256 * 4096) * 2
