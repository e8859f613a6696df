"""The fitted fixed cost of one host<->device copy call (calibration ``host_copy_overhead_s``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpusim.accuracy import simulate_case
from gpusim.calibration import fit_calibration, fit_host_copy_overhead_s, overlay_yaml
from gpusim.config import load_hardware
from gpusim.engine.machine import machine_of
from gpusim.engine.simulate import transfer_time_s
from gpusim.measurements import load_kernel_cases


@pytest.fixture(scope="module")
def v100():
    desc = load_hardware("v100_pcie_32gb")
    return desc, machine_of(desc)


def test_transfer_time_is_overhead_plus_latency_plus_bytes(v100):
    _, machine = v100
    overhead = machine.calibration.host_copy_overhead_s
    assert overhead == pytest.approx(15.4e-6)
    expected = overhead + machine.host_link_latency_s + 1e6 / machine.host_link_achievable_bytes_per_s
    assert transfer_time_s(machine, 1e6) == pytest.approx(expected)


@pytest.mark.parametrize("overhead_s", [0.0, 5e-6, 30e-6])
def test_fit_recovers_a_known_overhead(v100, overhead_s):
    desc, machine = v100
    truth = replace(machine, calibration=replace(machine.calibration, host_copy_overhead_s=overhead_s))
    start = replace(machine, calibration=replace(machine.calibration, host_copy_overhead_s=0.0))
    copies = [c for c in load_kernel_cases() if c.case_id in ("v100_pcie_memcpy_h2d_128kb", "v100_pcie_memcpy_h2d_1mb")]
    synthetic = [replace(c, measured_bytes_per_s=c.num_bytes / simulate_case(c, truth, desc.gpu)[0]) for c in copies]
    assert fit_host_copy_overhead_s(start, desc.gpu, synthetic) == pytest.approx(overhead_s, abs=1e-7)


def test_calibrate_fits_the_v100_overhead_from_the_dataset_and_the_overlay_loads(tmp_path):
    factors = {f.name: f for f in fit_calibration("v100_pcie_32gb", load_kernel_cases())}
    fitted = factors["host_copy_overhead_s"]
    # gpu-benches: 3.46 GB/s at 128 kB and 9.25 GB/s at 1 MB over a 12.35 GB/s link: ~27 us per call,
    # of which the eager launch (10 us) and the link latency (1.5 us) are already modelled
    assert fitted.value == pytest.approx(15.4e-6, abs=0.3e-6)
    assert fitted.num_cases == 2 and "median gap" in fitted.method
    path = tmp_path / "v100_fit.yaml"
    path.write_text(overlay_yaml("v100_pcie_32gb", list(factors.values()), "kernels.csv"))
    loaded = machine_of(load_hardware(path))
    assert loaded.calibration.host_copy_overhead_s == pytest.approx(fitted.value)


def test_an_overlay_with_a_zero_overhead_fit_loads(tmp_path):
    # copies no slower than the link predicts fit an overhead of 0, which must stay a valid overlay
    from gpusim.calibration import FittedFactor

    path = tmp_path / "zero.yaml"
    path.write_text(overlay_yaml("v100_pcie_32gb", [FittedFactor("host_copy_overhead_s", 0.0, 2, ("a", "b"))], "x"))
    assert machine_of(load_hardware(path)).calibration.host_copy_overhead_s == 0.0


def test_gpus_without_small_copy_measurements_pay_no_overhead():
    assert machine_of(load_hardware("h100_sxm5_80gb")).calibration.host_copy_overhead_s == 0.0
