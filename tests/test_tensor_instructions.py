"""``tensor_instructions: warp_mma``: libraries built without the device's own tensor-core
instructions (PyTorch 1.x with CUDA 11.x on Hopper) run every matrix kernel with warp-synchronous MMA,
at the device's ``warp_mma_fraction`` of the matrix rate and without thread-block clusters."""

from __future__ import annotations

import pytest

from gpusim.config.library import load_hardware
from gpusim.engine.cluster import simulate_system
from gpusim.engine.machine import machine_of
from gpusim.engine.simulate import simulate
from gpusim.errors import ConfigError
from gpusim.workload import load_workload


def _gemm(hardware: str, items: list[str]):
    result = simulate(load_hardware(hardware), load_workload("gemm_8192_bf16", items))
    (kernel,) = result.kernels
    return kernel


def test_warp_mma_caps_a_hopper_gemm_at_the_warp_synchronous_rate_without_clusters():
    machine = machine_of(load_hardware("h100_sxm5_80gb"))
    assert machine.warp_mma_fraction < 1
    native = _gemm("h100_sxm5_80gb", [])
    legacy = _gemm("h100_sxm5_80gb", ["tensor_instructions=warp_mma"])
    peak_flop_per_s = machine.matrix_rate_per_unit("bf16") * machine.num_units
    assert legacy.achieved_flop_per_s <= machine.warp_mma_fraction * peak_flop_per_s * (1 + 1e-9)
    assert legacy.time_s > native.time_s
    assert "cluster" in native.name and "cluster" not in legacy.name
    assert legacy.flop == native.flop and legacy.dram_bytes > 0


def test_warp_mma_changes_nothing_where_mma_sync_is_the_native_instruction():
    assert machine_of(load_hardware("a100_sxm4_80gb")).warp_mma_fraction == 1
    native = _gemm("a100_sxm4_80gb", [])
    legacy = _gemm("a100_sxm4_80gb", ["tensor_instructions=warp_mma"])
    assert (legacy.time_s, legacy.name) == (native.time_s, native.name)


def test_fp8_matrix_kernels_keep_the_native_rate():
    native = _gemm("h100_sxm5_80gb", ["ops.0.dtype=fp8"])
    legacy = _gemm("h100_sxm5_80gb", ["ops.0.dtype=fp8", "tensor_instructions=warp_mma"])
    # only the cluster tiles are gone: the rate is the native one, so the time moves by tile choice alone
    assert legacy.time_s == pytest.approx(native.time_s, rel=0.1)


def test_warp_mma_slows_a_data_parallel_hopper_training_step():
    items = ["config.num_layers=2", "parallelism.data=8", "parallelism.zero_stage=3"]
    system = load_hardware("dgx_h100")
    native = simulate_system(system, load_workload("gpt2_large_train", items))
    legacy = simulate_system(system, load_workload("gpt2_large_train", items + ["tensor_instructions=warp_mma"]))
    assert legacy.step_time_s > native.step_time_s
    assert legacy.mfu_fraction < native.mfu_fraction


def test_an_unknown_instruction_set_is_a_one_line_error_naming_the_key():
    with pytest.raises(ConfigError) as err:
        load_workload("gpt2_large_train", ["tensor_instructions=wgmma"])
    assert "tensor_instructions" in str(err.value) and "\n" not in str(err.value)
