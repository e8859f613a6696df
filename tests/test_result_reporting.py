"""What a run's summary and report say about the devices it used: energy and launches counted on the
GPUs that ran, collectives charged their wire bytes, MFU left undefined where the device has no peak in
the workload's precision, and the report carrying the layout, the per-GPU memory and the run costs."""

from __future__ import annotations

import json

import pytest

from gpusim.cli import main
from gpusim.config import load_hardware
from gpusim.energy import with_energy
from gpusim.engine.machine import machine_of
from gpusim.runner import load_and_simulate
from gpusim.workload.ops import AllReduce


def _run(hw: str, workload: str, *items: str):
    hardware, result = load_and_simulate(hw, workload, wl_items=list(items))
    return with_energy(result, hardware, power_cap=False)


def test_an_op_list_on_a_system_is_charged_for_the_one_gpu_it_runs_on():
    alone = _run("h100_sxm5_80gb", "gemm_8192_bf16")
    system = _run("dgx_h100", "gemm_8192_bf16")
    assert system.num_gpus == 1 and system.total_time_s == pytest.approx(alone.total_time_s)
    assert system.energy_j == pytest.approx(alone.energy_j, rel=1e-9)
    assert system.flop_per_j == pytest.approx(system.total_flop / system.energy_j, rel=1e-9)
    assert "the op list uses 1 of the 8 GPUs of dgx_h100" in system.warnings


def test_a_collective_is_charged_its_wire_bytes_on_links_and_dram():
    # 1 GiB all-reduce on 8 GPUs: each GPU sends 2 x 7/8 GiB over NVLink, read from DRAM where it
    # leaves and written where it lands
    result = _run("dgx_h100", "all_reduce_1gib")
    power = load_hardware("h100_sxm5_80gb").gpu.power
    factor = machine_of(load_hardware("dgx_h100")).calibration.dynamic_energy_factor
    wire = AllReduce(num_bytes=2**30, num_gpus=8).wire_bytes_per_gpu()
    assert wire == pytest.approx(2 * 7 / 8 * 2**30)
    per_gpu = (wire * (power.energy.peer_link_j_per_byte + 2 * power.energy.dram_j_per_byte) * factor
               + power.idle_w * result.total_time_s)
    assert result.num_gpus == 8 and result.energy_j == pytest.approx(8 * per_gpu, rel=1e-9)
    assert not any("not counted" in w for w in result.warnings)
    assert result.num_kernel_launches == 0 and result.num_link_ops == 1


def test_a_model_without_a_layout_on_a_system_says_it_uses_one_gpu():
    result = _run("dgx_h100", "bert_base_train")
    assert any(w.startswith("the layout uses 1 of the 8 GPUs of dgx_h100") for w in result.warnings)


def test_mfu_is_undefined_without_a_peak_in_the_precision(capsys):
    result = _run("t4", "bert_base_train")  # BF16 training on a GPU without BF16 math
    assert result.mfu_fraction is None
    assert any("t4 has no bf16 math" in w for w in result.warnings)
    assert _run("h100_sxm5_80gb", "bert_base_train").mfu_fraction > 0
    assert main(["run", "t4", "bert_base_train"]) == 0
    assert "MFU -" in capsys.readouterr().out


def test_launches_count_repeats_and_leave_out_copies(tmp_path, capsys):
    result = _run("h100_sxm5_80gb", "llama2_7b_inference")
    kernels = [k for k in result.kernels if (k.plan or {}).get("engine") != "copy"]
    assert result.num_kernel_launches == sum(k.repeat for k in kernels) > len(kernels)
    assert result.num_link_ops == 1  # the prompt's host-to-device copy
    path = tmp_path / "r.json"
    assert main(["run", "h100_sxm5_80gb", "llama2_7b_inference", "--json", str(path)]) == 0
    data = json.loads(path.read_text())
    assert data["num_kernel_launches"] == result.num_kernel_launches
    assert data["num_kernel_records"] == len(result.kernels)
    out = capsys.readouterr().out
    assert f"{result.num_kernel_launches:,} kernel launches" in out and "1 host copy" in out
    # the slowest-kernels table says how many launches each row's time covers
    slowest = max(result.kernels, key=lambda k: k.time_s)
    assert main(["report", str(path)]) == 0
    report = capsys.readouterr().out
    assert "| kernel | launches | time |" in report and f"| {slowest.name} | {slowest.repeat:,} |" in report


def test_report_carries_the_layout_per_gpu_memory_and_run_costs(tmp_path, capsys):
    path = tmp_path / "r.json"
    assert main(["run", "dgx_h100", "llama2_7b_train", "--set", "parallelism.data=8", "--epoch-samples", "1000",
                 "--train-tokens", "1e9", "--json", str(path)]) == 0
    capsys.readouterr()
    assert main(["report", str(path)]) == 0
    report = capsys.readouterr().out
    assert "- 8 GPUs: data 8, tensor 1, pipeline 1" in report
    assert "- memory per GPU: " in report and "- energy on 8 GPUs: " in report
    assert "- epoch of 1,000 samples: " in report
    assert "- training run of 1,000,000,000 tokens: " in report and "on 8 devices" in report
    assert "## Time per kernel kind (one representative block of the step)" in report
    assert "in one representative block of the step" in report
    assert main(["report", str(path), "--top", "0"]) == 0
    assert "Slowest" not in capsys.readouterr().out


@pytest.mark.parametrize("hw, said", [
    ("h100_sxm5_80gb", None),  # every rate fitted
    ("p100_pcie_16gb", None),  # no tensor cores: only its CUDA-core GEMM and DRAM rates need a fit, and have one
    ("rtx_4090", "rtx_4090's calibration fits no DRAM rate from measurements: that runs at the datasheet peak"),
    ("l40", "l40's calibration fits no tensor-core or CUDA-core GEMM rate from measurements: those run at the "
            "datasheet peak"),
    ("xeon_8480", "xeon_8480 has no calibration: block"),
])
def test_a_run_names_the_rates_no_calibration_fits(hw, said):
    notes = [w for w in _run(hw, "gemm_8192_bf16").warnings if "calibration" in w]
    assert (notes == []) if said is None else (len(notes) == 1 and notes[0].startswith(said))
