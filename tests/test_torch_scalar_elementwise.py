"""PyTorch's scalar element-wise kernels (index-computing and casting) in the eager lowering."""

import pytest

from gpusim.config import load_hardware
from gpusim.engine.kernel import simulate_kernel
from gpusim.engine.machine import machine_of
from gpusim.mapping import map_op
from gpusim.mapping.streaming import torch_scalar_elementwise_launch, torch_scalar_instructions
from gpusim.workload.expand import eager_rmsnorm_ops
from gpusim.workload.ops import Elementwise


@pytest.fixture(scope="module")
def h200():
    return machine_of(load_hardware("h200_sxm_141gb"))


def test_instruction_formula_reproduces_the_counted_kernels():
    # executed-path counts of the equivalent kernels (sm_90, nvcc 13.0): within 1 instruction
    counted = [((2, 1, False), 38.75), ((2, 2, False), 52.75), ((2, 3, False), 66.75),
               ((1, 1, False), 32.5), ((1, 2, False), 44.5), ((1, 3, False), 56.5),
               ((2, 1, True), 72.5), ((2, 2, True), 86.5), ((2, 3, True), 100.5), ((1, 0, True), 41.5)]
    for args, instructions in counted:
        assert torch_scalar_instructions(*args) == pytest.approx(instructions, abs=1.0)
    # 15.5 + 5 x 2 inputs + (8 + 2 x 3 operands) x 2 dims
    assert torch_scalar_instructions(2, 2, False) == 53.5


def test_launch_follows_pytorchs_unroll_rule():
    # 128 threads; 2 elements each for an output of 4 bytes or more, else 4; casting kernels 4
    assert torch_scalar_elementwise_launch(1 << 20, "fp32", False, 4.0) == (4096, 128, 4.0)
    assert torch_scalar_elementwise_launch(1 << 20, "bf16", False, 2.0) == (2048, 128, 2.0)
    assert torch_scalar_elementwise_launch(1 << 20, "fp32", True, 2.0) == (2048, 128, 2.0)
    assert torch_scalar_elementwise_launch(1, "fp32", False, 4.0)[0] == 1


def test_which_ops_take_the_scalar_path():
    n = 1 << 20
    assert not Elementwise(num_elements=n, function="add").scalar_loads
    assert Elementwise(num_elements=n, function="mul_bcast", broadcast_elements=1024, index_dims=2).scalar_loads
    up = Elementwise(num_elements=n, function="cast", dtype="fp32", input_dtype="bf16")
    down = Elementwise(num_elements=n, function="cast", dtype="bf16", input_dtype="fp32")
    assert up.casts_on_load and up.scalar_loads
    assert not down.casts_on_load and not down.scalar_loads  # PyTorch vectorizes the narrowing copy
    mixed = Elementwise(num_elements=n, function="mul_bcast", dtype="fp32", input_dtype="bf16",
                        broadcast_elements=1024, index_dims=2)
    assert mixed.casts_on_load
    # the broadcast operand is a second input of the kernel
    assert mixed.tensor_inputs == 2 and Elementwise(num_elements=n, function="add").tensor_inputs == 2
    with pytest.raises(ValueError, match="index_dims"):
        Elementwise(num_elements=n, function="add", index_dims=-1)


def test_eager_rmsnorm_kernels_map_to_the_kernels_pytorch_runs(h200):
    ops = {name: op for name, op, _ in eager_rmsnorm_ops(4096, 4096, "bf16")}
    plans = {name: map_op(op, h200)[0] for name, op in ops.items()}
    # x.float(): a casting copy, 4 elements per thread, 2 bytes loaded per trip
    cast = plans["cast"]
    assert (cast.threads_per_cta, cast.grid) == (128, 4096 * 4096 // 512)
    assert cast.bytes_in_flight_per_cta == 128 * 2.0
    assert cast.warp_instructions_per_trip == torch_scalar_instructions(1, 0, True)
    # x * rsqrt(mean): FP32 over 2 index dimensions (elementwise_kernel<128, 2>), 4 bytes per trip
    normalize = plans["normalize"]
    assert normalize.grid == 4096 * 4096 // 256
    assert normalize.bytes_in_flight_per_cta == 128 * 4.0
    assert normalize.warp_instructions_per_trip == torch_scalar_instructions(2, 2, False)
    # the BF16 weight product: elementwise_kernel<128, 4>
    assert plans["weight"].grid == 4096 * 4096 // 512
    # the square and the cast back run the vectorized kernel
    for name in ("square", "cast_back"):
        assert plans[name].warp_instructions_per_trip == 0.0


def test_scalar_path_is_never_faster_than_the_vectorized_kernel(h200):
    # same bytes, one element in flight per thread and instructions between trips: only slower
    n = 4096 * 4096
    for op in (Elementwise(num_elements=n, function="mul_bcast", dtype="fp32", broadcast_elements=4096),
               Elementwise(num_elements=n, function="mul_table", dtype="bf16"),
               Elementwise(num_elements=n, function="add", dtype="bf16")):
        vectorized = simulate_kernel(map_op(op, h200)[0], h200).time_s
        previous = vectorized
        for dims in (1, 2, 3, 4):
            scalar = simulate_kernel(map_op(op.__class__(**{**op.__dict__, "index_dims": dims}), h200)[0],
                                     h200).time_s
            assert scalar >= previous
            previous = scalar


def test_cpu_runs_eager_ops_with_its_own_kernels():
    cpu = machine_of(load_hardware("xeon_8480"))
    op = Elementwise(num_elements=1 << 20, function="mul_bcast", dtype="fp32", broadcast_elements=1024, index_dims=2)
    assert map_op(op, cpu)[0].warp_instructions_per_trip == 0.0
