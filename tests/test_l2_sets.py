"""The hashed set-associative L2: the hit share of a cyclic sweep near the capacity."""

import math
from dataclasses import replace

import pytest

from gpusim.config import load_hardware
from gpusim.engine.machine import machine_of

A100 = machine_of(load_hardware("a100_sxm4_80gb"))


def test_one_way_sets_hit_with_the_chance_that_a_line_has_its_set_alone():
    # ways = 1: a line hits only if no other line maps to its set: P(Poisson(x) = 0) = exp(-x)
    direct = replace(A100, l2_set_associativity=1)
    for x in (0.25, 0.5, 1.0, 2.0):
        assert direct.cyclic_l2_hit_fraction(x * A100.l2_capacity_bytes) == pytest.approx(math.exp(-x), rel=1e-12)


def test_sixteen_ways_by_hand():
    # x = 1, ways = 16: P(Poisson(16) <= 15) = sum_{i<16} e^-16 16^i / i!
    expected = sum(math.exp(-16) * 16**i / math.factorial(i) for i in range(16))
    assert A100.cyclic_l2_hit_fraction(A100.l2_capacity_bytes) == pytest.approx(expected, rel=1e-12)
    assert 0.4 < expected < 0.5


def test_hit_share_falls_from_one_to_zero_around_the_capacity():
    c = A100.l2_capacity_bytes
    fractions = [A100.cyclic_l2_hit_fraction(f * c) for f in (0.1, 0.5, 0.8, 1.0, 1.2, 1.5, 3.0)]
    assert fractions[0] == pytest.approx(1.0, abs=1e-9)
    assert fractions[1] > 0.99
    assert all(a >= b for a, b in zip(fractions, fractions[1:]))
    assert fractions[-1] < 1e-6


def test_more_ways_sharpen_the_fall_off():
    c = A100.l2_capacity_bytes
    few, many = replace(A100, l2_set_associativity=4), replace(A100, l2_set_associativity=64)
    assert many.cyclic_l2_hit_fraction(0.7 * c) > few.cyclic_l2_hit_fraction(0.7 * c)
    assert many.cyclic_l2_hit_fraction(1.3 * c) < few.cyclic_l2_hit_fraction(1.3 * c)


def test_descriptions_may_state_the_ways():
    hw = load_hardware("a100_sxm4_80gb", ["gpu.l2.set_associativity=24"])
    assert machine_of(hw).l2_set_associativity == 24


# ---- the gpu-benches L2 benchmark: blocks that read the same slice at once share its misses

MI210 = machine_of(load_hardware("mi210"))
KIB = 1024


def test_shared_slice_hit_share_by_hand():
    # MI210: 104 CUs; a 512 KiB block fills the 512 KiB register file, so one block per CU and
    # R = 104 resident blocks. A 16.5 MiB footprint is 33 slices: 1 - 33/104 of the loads hit.
    from gpusim.accuracy import l2_shared_slice_hit_fraction

    assert MI210.num_units == 104
    assert l2_shared_slice_hit_fraction(MI210, 33 * 512 * KIB, 512 * KIB) == pytest.approx(1 - 33 / 104)
    # more slices than resident blocks: no two blocks read one slice at once
    assert l2_shared_slice_hit_fraction(MI210, 200 * 512 * KIB, 512 * KIB) == 0.0


def test_small_blocks_fit_several_per_sm_and_share_more():
    # 128 KiB blocks: the register file holds 4 of them, but 2,048 threads allow only 2 blocks of
    # 1,024, so R = 2 x 104 and 33 slices of 128 KiB hit 1 - 33/208
    from gpusim.accuracy import l2_shared_slice_hit_fraction

    assert MI210.max_threads_per_unit == 2048
    assert l2_shared_slice_hit_fraction(MI210, 33 * 128 * KIB, 128 * KIB) == pytest.approx(1 - 33 / 208)


def test_a_row_that_states_its_block_bytes_runs_faster_past_the_capacity_only():
    from dataclasses import replace as copy

    from gpusim.accuracy import _l2_case
    from gpusim.measurements import load_kernel_cases

    rows = {c.case_id: c for c in load_kernel_cases()}
    past = rows["mi210_l2_bandwidth_16mb"]  # 2x the 8 MB L2: the cyclic sweep alone hits nothing
    assert past.block_bytes == 512 * KIB
    assert MI210.cyclic_l2_hit_fraction(past.working_set_bytes) < 0.01
    unstated = copy(past, block_bytes=None)
    assert _l2_case(past, MI210) < 0.7 * _l2_case(unstated, MI210)
    inside = rows["mi210_l2_bandwidth_4mb"]  # within the L2: the cyclic hit share already rules
    assert _l2_case(inside, MI210) == _l2_case(copy(inside, block_bytes=None), MI210)
