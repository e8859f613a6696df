"""Pointer-chase latency past the caches: L2 hits mixed with DRAM as the hashed sets say, and page
walks for a footprint past the TLBs' reach."""

from __future__ import annotations

import pytest

from gpusim.accuracy import run_accuracy
from gpusim.config import load_hardware
from gpusim.engine.machine import machine_of
from gpusim.measurements import load_kernel_cases

MB = 1e6


def test_latency_is_the_tlb_hit_value_within_reach_and_adds_the_missed_share_of_a_walk():
    machine = machine_of(load_hardware("mi210"))  # latency 337 ns, reach 63 MB, walk 58 ns
    assert machine.random_access_dram_latency_s(32 * MB) == pytest.approx(337e-9)
    assert machine.random_access_dram_latency_s(63 * MB) == pytest.approx(337e-9)
    # twice the reach: half the loads miss the TLBs
    assert machine.random_access_dram_latency_s(126 * MB) == pytest.approx(337e-9 + 29e-9)
    # never more than one walk per load
    assert machine.random_access_dram_latency_s(1e15) == pytest.approx(395e-9, rel=1e-6)
    assert machine.random_access_dram_latency_s(1e15) < 337e-9 + 58e-9


def test_a_description_without_tlb_fields_keeps_one_dram_latency():
    machine = machine_of(load_hardware("h100_sxm5_80gb"))
    assert machine.tlb_reach_bytes is None
    for footprint in (1 * MB, 256 * MB, 64e9):
        assert machine.random_access_dram_latency_s(footprint) == machine.dram_latency_s


def test_mi210_chase_inside_and_beyond_the_tlb_reach():
    # gpu-benches: 335 ns at 32 MB (translations cached) and 382 ns at 256 MB (three in four miss)
    ids = {"mi210_pointer_chase_32mb", "mi210_pointer_chase_256mb"}
    cases = [c for c in load_kernel_cases() if c.case_id in ids]
    results, _ = run_accuracy(cases)
    assert {r.case_id for r in results} == ids
    for r in results:
        assert abs(r.signed_error_fraction) < 0.02, r


def test_a_chase_past_part_of_l2_mixes_its_hits_with_dram_as_the_hashed_sets_say():
    # A100 40GB: 40 MiB of L2 in two 20 MiB partitions. 8 MB stays in the near partition; 32 MB
    # (0.8 of the L2) hits the far one as often as the L2's hashed 16-way sets keep it, the
    # rest goes to DRAM; 256 MB is DRAM (the same hit model as the L2 bandwidth sweeps)
    from gpusim.accuracy import _chase_latency_s

    desc = load_hardware("a100_sxm4_40gb")
    machine, l2 = machine_of(desc), desc.gpu.l2
    assert _chase_latency_s(8e6, machine, desc.gpu) == pytest.approx(l2.near_latency_s, rel=1e-3)
    hit = machine.cyclic_l2_hit_fraction(32e6)
    assert 0.5 < hit < 0.95
    assert _chase_latency_s(32e6, machine, desc.gpu) == pytest.approx(
        hit * l2.far_latency_s + (1 - hit) * machine.dram_latency_s)
    assert _chase_latency_s(256e6, machine, desc.gpu) == pytest.approx(machine.dram_latency_s, rel=1e-6)
