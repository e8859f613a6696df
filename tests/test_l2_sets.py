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
