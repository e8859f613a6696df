"""Every calibration block that says it was fitted by ``gpusim calibrate`` must still come out of a
refit on the published data (engine changes move the fits), and a value that does not is reported."""

from __future__ import annotations

import pytest

from gpusim.calibration import stale_calibration
from gpusim.cli import main
from gpusim.config.library import list_hardware, load_hardware
from gpusim.engine.machine import machine_of
from gpusim.measurements import load_kernel_cases


@pytest.fixture(scope="module")
def cases():
    return load_kernel_cases()


def test_every_built_in_calibration_reproduces(cases):
    stale = [str(s) for stem, _ in list_hardware() for s in stale_calibration(stem, cases)]
    assert not stale, "refresh these (gpusim calibrate --check lists them):\n" + "\n".join(stale)


def _overlay(tmp_path, base: str, body: str):
    path = tmp_path / f"{base}_edited.yaml"
    path.write_text(f"schema_version: 1\nextends: {base}\ngpu:\n  calibration:\n{body}", encoding="utf-8")
    return path


def test_a_changed_fitted_value_is_reported_with_the_refit(tmp_path, cases):
    recorded = machine_of(load_hardware("h100_sxm5_80gb")).calibration.tensor_efficiency_fraction
    path = _overlay(tmp_path, "h100_sxm5_80gb", "    tensor_efficiency_fraction: 0.5\n")
    stale = {s.factor: s for s in stale_calibration(str(path), cases)}
    assert stale["tensor_efficiency_fraction"].recorded == 0.5
    assert stale["tensor_efficiency_fraction"].expected == pytest.approx(recorded)
    # the energy factor was fitted with the recorded tensor efficiency, so it no longer fits either
    assert "dynamic_energy_factor" in stale


def test_a_transferred_value_must_equal_its_source(tmp_path, cases):
    h100 = machine_of(load_hardware("h100_sxm5_80gb")).calibration
    path = _overlay(tmp_path, "h200_sxm_141gb", "    vector_efficiency_fraction: 0.5\n")
    stale = {s.factor: s for s in stale_calibration(str(path), cases)}
    assert stale["vector_efficiency_fraction"].expected == h100.vector_efficiency_fraction
    assert "h100_sxm5_80gb" in stale["vector_efficiency_fraction"].how


def test_inherited_blocks_are_not_refitted(cases):
    # GH200 inherits the H100's block on purpose; its own two GEMMs would fit a different tensor factor
    assert stale_calibration("gh200_144gb", cases) == []


def test_check_command_exit_codes(tmp_path, capsys):
    assert main(["calibrate", "--check", "--base", "h100_sxm5_80gb"]) == 0
    path = _overlay(tmp_path, "h100_sxm5_80gb", "    tensor_efficiency_fraction: 0.5\n")
    assert main(["calibrate", "--check", "--base", str(path)]) == 1
    assert "tensor_efficiency_fraction is 0.5" in capsys.readouterr().out


# ------------------------------------------------------------------------ leave one source out


@pytest.fixture(scope="module")
def a100_pcie_cross_validated(cases):
    from gpusim.accuracy import run_accuracy
    from gpusim.calibration import leave_one_source_out

    results, _ = run_accuracy([c for c in cases if c.gpu == "a100_pcie_40gb"])
    return results, leave_one_source_out(cases, results)


def test_a_gemm_is_resimulated_with_the_factors_its_reference_fitted_refitted_without_it(
        cases, a100_pcie_cross_validated):
    from dataclasses import replace

    from gpusim.accuracy import _to_metric, simulate_case
    from gpusim.accuracy_cluster import reference_of
    from gpusim.calibration import CV_DATASHEET, fit_calibration

    results, cross = a100_pcie_cross_validated
    i = next(i for i, r in enumerate(results) if r.case_id == "a100_pcie_40gb_bf16_mm_10240")
    others = [c for c in cases if reference_of(c.source) != reference_of(results[i].source)]
    refit = {f.name: f.value for f in fit_calibration("a100_pcie_40gb", others)}
    assert "gemm_wave_overhead_s" not in refit  # only its own reference has 3 small A100 PCIe GEMMs
    assert cross[i].note == CV_DATASHEET
    # the case is simulated with the tensor factor refitted and the wave overhead back at 0
    desc = load_hardware("a100_pcie_40gb")
    machine = machine_of(desc)
    machine = replace(machine, calibration=replace(machine.calibration, gemm_wave_overhead_s=0.0,
                                                   tensor_efficiency_fraction=refit["tensor_efficiency_fraction"]))
    case = next(c for c in cases if c.case_id == "a100_pcie_40gb_bf16_mm_10240")
    seconds, _ = simulate_case(case, machine, desc.gpu)
    assert cross[i].simulated == pytest.approx(_to_metric(case, seconds), rel=1e-9)
    assert cross[i].simulated != pytest.approx(results[i].simulated, rel=1e-3)


def test_cases_whose_reference_fitted_nothing_keep_their_result(cases):
    from gpusim.accuracy import run_accuracy
    from gpusim.calibration import leave_one_source_out

    # the GH200 inherits the H100's block, whose factors were fitted for the H100 alone
    results, _ = run_accuracy([c for c in cases if c.gpu == "gh200_144gb"])
    assert results
    assert leave_one_source_out(cases, results) == results


def test_cross_validate_flag(capsys):
    assert main(["accuracy", "--suite", "kernels", "--cross-validate", "--gpu", "v100_sxm2_32gb"]) == 0
    assert "leave one source out (10 cases" in capsys.readouterr().out
    assert main(["accuracy", "--suite", "kernels", "--cross-validate", "--uncalibrated"]) != 0


def test_t4_hand_set_calibration_reproduces_the_measured_maxima():
    # t4.yaml's block is set by hand from the maxima over square torch.mm sizes 1024-10240 (the only
    # T4 GEMM data found: FP32 4.43, FP16 42.71 TFLOP/s); the best simulated rate over those sizes must
    # still match them, or the block is stale
    from gpusim.mapping import best_gemm
    from gpusim.engine.kernel import simulate_kernel

    t4 = machine_of(load_hardware("t4"))

    def best_flop_per_s(dtype):
        rates = []
        for n in (1024, 2048, 4096, 8192, 10240):
            plan = best_gemm(t4, "mm", "matmul", n, n, n, 1, dtype, 2.0 * n**3)
            rates.append(2.0 * n**3 / (simulate_kernel(plan, t4).time_s + t4.graph_kernel_launch_s))
        return max(rates)

    assert best_flop_per_s("fp32") == pytest.approx(4.43e12, rel=0.01)
    assert best_flop_per_s("fp16") == pytest.approx(42.71e12, rel=0.01)


def test_t4_dram_fraction_is_the_fit_of_its_scored_elementwise_rows(cases):
    # the one fitted factor of t4.yaml's otherwise hand-set block: calibrate --check does not refit
    # hand-set blocks, so this test does
    from gpusim.calibration import fit_calibration

    fitted = {f.name: f for f in fit_calibration("t4", cases)}
    assert fitted["dram_bandwidth_fraction"].num_cases == 3
    assert load_hardware("t4").gpu.calibration.dram_bandwidth_fraction == fitted["dram_bandwidth_fraction"].value


def test_the_read_write_loss_is_fitted_within_one_benchmark(cases):
    # BabelStream measures only streams that read and write: it says nothing about the read/write
    # loss, so the MI300X (BabelStream only) gets none, and the H200 keeps the one fitted on
    # gpu-benches' own init/read/scale/triad when the held-out BabelStream rows join its cases
    from gpusim.calibration import fit_calibration
    from gpusim.measurements import heldout_dir

    assert "dram_mixed_traffic_loss_fraction" not in {f.name for f in fit_calibration("mi300x", cases)}
    extra = load_kernel_cases(heldout_dir() / "azure_babelstream_hbm.csv")
    fitted = {f.name: f for f in fit_calibration("h200_sxm_141gb", [*cases, *extra])}
    loss = fitted["dram_mixed_traffic_loss_fraction"]
    assert loss.num_cases == 4 and all(c.startswith("h200_stream_") for c in loss.case_ids)
    assert loss.value == machine_of(load_hardware("h200_sxm_141gb")).calibration.dram_mixed_traffic_loss_fraction
