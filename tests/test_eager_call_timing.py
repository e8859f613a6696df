"""NeuSight's timing (CUDA events around one eager call on an idle GPU): the host's dispatch of the
call, the device-side launch and the kernel, in that order (timing_method ``eager_call_events``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpusim.accuracy import simulate_case
from gpusim.config import load_hardware
from gpusim.engine.machine import machine_of
from gpusim.measurements import heldout_dir, load_kernel_cases

NEUSIGHT_FILES = ("neusight_linear_fp32_sample.csv", "neusight_bmm_fp32_sample.csv",
                  "neusight_memory_bound_sample.csv")


@pytest.fixture(scope="module")
def h100():
    desc = load_hardware("h100_sxm5_80gb")
    return desc, machine_of(desc)


def test_an_eager_call_costs_the_host_dispatch_more_than_the_kernel_alone(h100):
    desc, machine = h100
    case = next(c for c in load_kernel_cases() if c.case_id == "h100_sxm_neusight_fp32_linear_1024x1024x1024")
    assert case.timing_method == "eager_call_events"
    call_s, _ = simulate_case(case, machine, desc.gpu)
    kernel_only_s, _ = simulate_case(replace(case, timing_method="kernel_only"), machine, desc.gpu)
    profiled_s, _ = simulate_case(replace(case, timing_method="profiler_kernel"), machine, desc.gpu)
    # kernel_only adds the device-side launch to the kernel; the eager call adds the host's dispatch too
    assert kernel_only_s - profiled_s == pytest.approx(machine.graph_kernel_launch_s)
    assert call_s - kernel_only_s == pytest.approx(machine.kernel_launch_s)
    # and only that: a host ten times slower adds nine more dispatch costs, the kernel unchanged
    slow = replace(machine, kernel_launch_s=10 * machine.kernel_launch_s)
    assert simulate_case(case, slow, desc.gpu)[0] - call_s == pytest.approx(9 * machine.kernel_launch_s)


def test_every_neusight_row_is_timed_as_neusight_timed_it():
    """sitar-lab/NeuSight neusight/Dataset/collect.py ``measure_once``: start event, the op, end event,
    synchronize; scored and held-out rows alike."""
    scored = [c for c in load_kernel_cases() if "NeuSight" in c.source]
    assert len(scored) == 37 and all(c.timing_method == "eager_call_events" for c in scored)
    for name in NEUSIGHT_FILES:
        cases = load_kernel_cases(heldout_dir() / name)
        assert cases and all(c.timing_method == "eager_call_events" for c in cases), name
    others = [c for c in load_kernel_cases() if "NeuSight" not in c.source]
    assert not any(c.timing_method == "eager_call_events" for c in others)
