"""Energy, power, power capping (DVFS) and cost: hand-derived numbers on the tiny 2-SM GPU, and the
physical properties a design study relies on (data movement dominates memory-bound kernels, math
dominates large GEMMs, the cap throttles only above TDP)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gpusim.cli import main
from gpusim.config import load_hardware
from gpusim.cost import price_of, run_cost
from gpusim.energy import (
    MIN_CLOCK_FRACTION,
    apply_power_cap,
    kernel_energy,
    math_j_per_flop,
    run_energy,
    throttled_clock_fraction,
    with_energy,
)
from gpusim.engine.machine import machine_of
from gpusim.engine.simulate import simulate
from gpusim.results.result import KernelRecord
from gpusim.workload import load_workload

TINY = Path(__file__).parent / "data" / "tiny_2sm.yaml"
PJ = 1e-12


def _record(flop: float, time_s: float, *, dram_bytes: float = 0.0, l2_bytes: float = 0.0, pipe="matrix",
            dtype="fp16", repeat=1, start_s=0.0, bound="compute") -> KernelRecord:
    return KernelRecord(name="k", op="matmul", node="n", phase="single", layer=None, start_s=start_s,
                        time_s=time_s, repeat=repeat, flop=flop, dram_bytes=dram_bytes, l2_hit_fraction=0.0,
                        bound=bound, plan={"pipe": pipe, "dtype": dtype, "l2_bytes_per_launch": l2_bytes / repeat},
                        executed_flop=flop)


@pytest.fixture(scope="module")
def tiny():
    hw = load_hardware(TINY)
    return hw, machine_of(hw)


# --------------------------------------------------------------------------------------- hand-derived


def test_kernel_energy_by_hand(tiny):
    hw, machine = tiny
    # 1 GFLOP of fp16 on tensor cores (1 pJ/FLOP), 1 MB from DRAM (20 pJ/B), 4 MB through L2 (5 pJ/B)
    # and once through L1 (1 pJ/B), 2 ms at 10 W idle.
    rec = _record(1e9, 2e-3, dram_bytes=1e6, l2_bytes=4e6)
    e = kernel_energy(rec, hw.gpu.power, machine)
    assert e.math_j == pytest.approx(1e9 * 1 * PJ)
    assert e.dram_j == pytest.approx(1e6 * 20 * PJ)
    assert e.l2_j == pytest.approx(4e6 * 5 * PJ)
    assert e.l1_j == pytest.approx(4e6 * 1 * PJ)
    assert e.static_j == pytest.approx(10 * 2e-3)
    total = 1e-3 + 2e-5 + 2e-5 + 4e-6 + 2e-2
    assert e.total_j == pytest.approx(total)
    assert e.avg_power_w == pytest.approx(total / 2e-3)


def test_vector_dtype_without_entry_is_charged_fp32(tiny):
    hw, _ = tiny
    energy = hw.gpu.power.energy
    assert math_j_per_flop(energy, "vector", "bf16") == pytest.approx(2 * PJ)  # computed in FP32 lanes
    assert math_j_per_flop(energy, "matrix", "fp8") == pytest.approx(1 * PJ)  # nearest wider tensor dtype
    assert math_j_per_flop(energy, "none", "fp16") == 0.0


def test_dvfs_cube_law_by_hand(tiny):
    """A kernel that runs exactly at its math rate, with no data movement: power above idle is
    E r^2 / (t / r) = P_dyn r^3, so a cap halfway into the dynamic power gives r = 0.5^(1/3)."""
    hw, machine = tiny
    rate = 2 * 1024 * 1e9  # 2 SMs x 1024 FLOP/cycle x 1 GHz, uncalibrated
    t = 1e-3
    rec = _record(rate * t, t)
    e = kernel_energy(rec, hw.gpu.power, machine)
    p_dyn = rate * t * PJ / t  # 2.048 W
    assert e.avg_power_w == pytest.approx(10 + p_dyn)
    cap = 10 + p_dyn / 2
    r, stretched = throttled_clock_fraction(e, rec, machine, cap, 10.0)
    assert r == pytest.approx(0.5 ** (1 / 3), rel=1e-9)
    assert stretched == pytest.approx(t / r, rel=1e-9)
    # within TDP: untouched
    assert throttled_clock_fraction(e, rec, machine, 10 + p_dyn * 1.01, 10.0) == (1.0, t)
    # a cap below what the floor clock reaches stops at the floor
    r_floor, _ = throttled_clock_fraction(e, rec, machine, 10.001, 10.0)
    assert r_floor == MIN_CLOCK_FRACTION


def test_power_cap_memory_energy_does_not_scale(tiny):
    """DRAM energy per byte is in another clock domain: a memory-bound kernel's time does not stretch
    at a moderate clock cut, so only the core-domain energy falls (r^2)."""
    hw, machine = tiny
    t = 1e-3
    rec = _record(1e6, t, dram_bytes=1e9 * t, pipe="vector", dtype="fp32", bound="memory")  # 1 GB/s for 1 ms
    e = kernel_energy(rec, hw.gpu.power, machine)
    assert e.dram_j == pytest.approx(1e6 * 20 * PJ)
    cap = e.avg_power_w - e.math_j / t * 0.5  # remove half the (core-domain) math power
    r, stretched = throttled_clock_fraction(e, rec, machine, cap, 10.0)
    assert stretched == pytest.approx(t)  # math at r still fits in the memory time
    assert r == pytest.approx(math.sqrt(0.5), rel=1e-6)


def test_a_compute_bound_kernel_on_few_units_stretches_by_the_clock_cut(tiny):
    """A compute-bound kernel that fills few SMs computes slower than the device's rate; its time is
    still all core-clock time, so at clock fraction r it takes t / r (and its power falls to the cap)."""
    hw, machine = tiny
    t = 1e-3
    rec = _record(1e6, t)  # far below the device's rate: its own pipes set the 1 ms
    e = kernel_energy(rec, hw.gpu.power, machine)
    idle = hw.gpu.power.idle_w
    cap = idle + (e.avg_power_w - idle) * 0.5  # half the dynamic power
    r, stretched = throttled_clock_fraction(e, rec, machine, cap, idle)
    assert stretched == pytest.approx(t / r)
    # power at r: idle + core energy r^2 over t / r = idle + dynamic power x r^3
    assert idle + (e.avg_power_w - idle) * r**3 == pytest.approx(cap, rel=1e-6)


# --------------------------------------------------------------------------------------- physics


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100_sxm5_80gb")


def test_memory_bound_kernel_spends_most_energy_moving_data(h100):
    result = simulate(h100, load_workload("softmax_bf16"), record_spans=False)
    e = run_energy(result, h100)
    b = e.breakdown_j
    movement = b["l1_j"] + b["l2_j"] + b["dram_j"] + b["link_j"]
    assert movement > 3 * b["math_j"]
    assert b["dram_j"] > b["math_j"]
    assert e.energy_j == pytest.approx(sum(b.values()))


def test_large_gemm_spends_most_energy_in_math(h100):
    result = simulate(h100, load_workload("gemm_8192_bf16"), record_spans=False)
    e = run_energy(result, h100)
    b = e.breakdown_j
    movement = b["l1_j"] + b["l2_j"] + b["dram_j"] + b["link_j"]
    assert b["math_j"] > 2 * movement
    assert b["math_j"] > b["static_j"]
    # FLOP/J is model FLOP over all energy; 2 x 8192^3 FLOP
    assert e.flop_per_j == pytest.approx(2 * 8192**3 / e.energy_j)
    # published calibration point: a dense BF16 GEMM keeps an H100 SXM below its 700 W TDP and
    # above idle (measured boards draw most of TDP; gpusim's per-op energies are estimates)
    assert h100.gpu.power.idle_w < e.peak_power_w <= h100.gpu.power.tdp_w


def test_power_cap_only_when_uncapped_power_exceeds_tdp(h100):
    result = simulate(h100, load_workload("gemm_8192_bf16"), record_spans=False)
    uncapped = run_energy(result, h100)
    p = uncapped.peak_power_w
    # at or above the kernel's power: exactly the uncapped run
    same, energy = apply_power_cap(result, h100, tdp_w=p * 1.001)
    assert same is result
    assert energy.clock_fraction_min == 1.0 and energy.num_throttled_kernels == 0
    # below it: slower, lower clock, power within the cap, less energy per FLOP spent in math
    capped, energy = apply_power_cap(result, h100, tdp_w=p * 0.7)
    assert energy.clock_fraction_min < 1.0
    assert capped.total_time_s > result.total_time_s
    assert energy.peak_power_w <= p * 0.7 * (1 + 1e-6)
    assert energy.breakdown_j["math_j"] < uncapped.breakdown_j["math_j"]
    assert energy.breakdown_j["dram_j"] == pytest.approx(uncapped.breakdown_j["dram_j"])
    # a deeper cap throttles more
    deeper, energy2 = apply_power_cap(result, h100, tdp_w=p * 0.5)
    assert energy2.clock_fraction_min < energy.clock_fraction_min
    assert deeper.total_time_s > capped.total_time_s


def test_default_run_unchanged_below_tdp(h100):
    # a memory-bound workload never reaches TDP: the default (capped) run keeps its times exactly
    result = simulate(h100, load_workload("softmax_bf16"), record_spans=False)
    out = with_energy(result, h100)
    assert out.peak_power_w < h100.gpu.power.tdp_w
    assert out.total_time_s == result.total_time_s
    assert out.clock_fraction_min == 1.0
    assert out.energy_j == pytest.approx(out.avg_power_w * out.total_time_s)
    assert out.peak_power_w >= out.avg_power_w


def test_step_power_cap_stretches_model_metrics(h100):
    wl = load_workload("gpt3_175b_train", ["config.num_layers=1"])
    hw = load_hardware("h100_sxm5_80gb", [("gpu.power.tdp_w", "250 W")])
    result = simulate(hw, wl, record_spans=False)
    out = with_energy(result, hw)
    assert out.clock_fraction_min < 1.0
    assert out.step_time_s == pytest.approx(out.total_time_s)
    assert out.tokens_per_s == pytest.approx(result.tokens_per_s * result.total_time_s / out.total_time_s)
    # kernels stay in order and back to back as before: every start moved by the stretch before it
    starts = [k.start_s for k in out.kernels]
    assert starts == sorted(starts)
    assert any("power cap 250 W" in w for w in out.warnings)


# --------------------------------------------------------------------------------------- cost


def test_cost_per_step_epoch_and_training_run(h100):
    wl = load_workload("gpt3_175b_train", ["config.num_layers=1"])
    result = with_energy(simulate(h100, wl, record_spans=False), h100, price_usd_per_s=3600 / 3600)  # 1 USD/s
    assert result.cost_usd == pytest.approx(result.total_time_s)
    c = run_cost(result, 1.0, epoch_samples=1000, train_tokens=300e9)
    assert c.step_usd == pytest.approx(result.step_time_s)
    assert c.epoch_s == pytest.approx(1000 / result.samples_per_s)
    assert c.epoch_usd == pytest.approx(c.epoch_s)
    assert c.training_usd == pytest.approx(300e9 / result.tokens_per_s)
    assert c.tokens_per_usd == pytest.approx(result.tokens_per_s)


def test_price_from_description_and_override(h100):
    assert price_of(h100) == pytest.approx(2.69 / 3600)  # hwconfig price, USD/h converted to USD/s
    assert price_of(h100, 1.0) == 1.0
    assert price_of(load_hardware(TINY)) is None


def test_run_cli_reports_energy_and_cost(capsys):
    assert main(["run", "h100_sxm5_80gb", "gemm_8192_bf16", "--price-per-hour", "7.2 USD/h", "--json", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["price_usd_per_s"] == pytest.approx(0.002)
    assert out["cost_usd"] == pytest.approx(0.002 * out["total_time_s"])
    assert out["energy_j"] == pytest.approx(sum(out["energy_breakdown_j"].values()))
    assert out["kernels"][0]["energy_j"] > 0
    assert main(["run", "h100_sxm5_80gb", "gemm_8192_bf16", "--price-per-hour", "7 W"]) == 2
    assert "--price-per-hour" in capsys.readouterr().err


def test_run_cli_power_cap_flag(capsys):
    assert main(["run", "h100_sxm5_80gb", "gemm_8192_bf16", "--power-cap", "200 W", "--json", "-"]) == 0
    capped = json.loads(capsys.readouterr().out)
    assert main(["run", "h100_sxm5_80gb", "gemm_8192_bf16", "--no-power-cap", "--json", "-"]) == 0
    free = json.loads(capsys.readouterr().out)
    assert capped["tdp_w"] == 200
    assert capped["clock_fraction_min"] < 1.0 <= free["clock_fraction_min"]
    assert capped["total_time_s"] > free["total_time_s"]
    assert capped["avg_power_w"] <= 200 * (1 + 1e-6) < free["avg_power_w"]


def test_multi_gpu_energy_covers_the_whole_step(h100):
    """The multi-GPU engine records one representative block; its energy is scaled to the GPU's compute
    time, so FLOP per joule stays that of the same kernels on one GPU (less idle time in communication)."""
    from gpusim.engine.cluster import simulate_system

    dgx = load_hardware("dgx_h100")
    wl = load_workload("gpt3_175b_train", ["config.num_layers=2", "parallelism.tensor=8"])
    multi = with_energy(simulate_system(dgx, wl), dgx)
    single = with_energy(simulate(h100, load_workload("gpt3_175b_train", ["config.num_layers=2"]),
                                  record_spans=False), h100)
    assert multi.num_gpus == 8
    assert multi.energy_j == pytest.approx(multi.avg_power_w * multi.total_time_s * 8)
    assert 0.3 * single.flop_per_j < multi.flop_per_j < 1.2 * single.flop_per_j
    assert dgx.gpu.power.idle_w < multi.avg_power_w <= multi.peak_power_w <= dgx.gpu.power.tdp_w * (1 + 1e-9)


def test_the_trace_of_a_capped_run_shows_the_throttled_kernels(h100):
    """Throttled kernels take longer; the trace's stream, SM-wave and HBM spans move and stretch with
    them, so the trace and the result tell the same run."""
    wl = load_workload("gemm_8192_bf16", ["ops.0.m=4096"])
    uncapped = simulate(h100, wl, record_spans=True)
    capped = with_energy(uncapped, h100, tdp_w=350.0)
    kernel, before = capped.kernels[0], uncapped.kernels[0]
    assert kernel.plan["clock_fraction"] < 1.0 and kernel.time_s > 1.05 * before.time_s
    stream = [s for s in capped.spans if s.track == "stream 0"]
    assert len(stream) == 1
    assert stream[0].start_s == pytest.approx(kernel.start_s)
    assert stream[0].end_s == pytest.approx(kernel.start_s + kernel.time_s)
    waves = [s for s in capped.spans if s.track == "SMs"]
    assert waves[0].start_s >= kernel.start_s and waves[-1].end_s <= kernel.start_s + kernel.time_s + 1e-12
    hbm = next(s for s in capped.spans if s.track == "HBM")
    assert float(hbm.name.split()[0]) == pytest.approx(kernel.dram_bytes / kernel.time_s / 1e9, abs=1.0)
    old_hbm = next(s for s in uncapped.spans if s.track == "HBM")
    assert dict(hbm.args)["utilization_fraction"] == pytest.approx(
        dict(old_hbm.args)["utilization_fraction"] * before.time_s / kernel.time_s)


def test_the_trace_of_a_capped_training_step_ends_with_the_step():
    from gpusim.engine.cluster import simulate_system

    hw = load_hardware("dgx_h100")
    wl = load_workload("llama2_7b_train", ["config.num_layers=4", "parallelism.data=2", "parallelism.pipeline=2",
                                           "parallelism.microbatches=4"])
    uncapped = simulate_system(hw, wl, record_spans=True)
    capped = with_energy(uncapped, hw, tdp_w=400.0)
    assert capped.total_time_s > 1.05 * uncapped.total_time_s
    assert max(s.end_s for s in capped.spans) == pytest.approx(capped.total_time_s)


def test_unified_memory_pages_only_into_the_hosts_memory():
    wl = load_workload("llama2_7b_train", ["batch_size=32"])
    roomy = load_hardware("h100_sxm5_80gb")  # 2 TiB of host memory: the 552 GiB overflow pages there
    small = load_hardware("h100_sxm5_80gb", ["gpu.host_link.host_memory_bytes=1GiB"])
    paged = simulate(roomy, wl, unified_memory=True, record_spans=False)
    nowhere = simulate(small, wl, unified_memory=True, record_spans=False)
    plain = simulate(small, wl, record_spans=False)
    assert paged.total_time_s > 10 * plain.total_time_s
    assert nowhere.total_time_s == pytest.approx(plain.total_time_s)  # not paged: timed as if it fit
    assert any("does not fit even with unified memory" in w and "exceed host memory (1.0 GiB)" in w
               for w in nowhere.warnings)
    assert not nowhere.fits_in_memory and not paged.fits_in_memory
