"""Memory-bound kernels (elementwise, normalizations, softmax, reductions, copies): CTAs that stream
their inputs once from DRAM, with the launch shapes the common framework kernels use."""

from __future__ import annotations

import math

from gpusim.config.hardware import DTYPE_BYTES
from gpusim.engine.machine import Machine
from gpusim.mapping.occupancy import ctas_per_unit
from gpusim.mapping.plan import KernelPlan

VECTOR_LOAD_BYTES = 16
"""Widest per-thread load (LDG.128 / one 16-byte vector), which framework kernels use when aligned."""


def streaming_plan(machine: Machine, name: str, op_kind: str, dtype: str, *, bytes_read: float,
                   bytes_written: float, flop: float, sfu_ops: float, num_ctas: int, threads_per_cta: int,
                   bytes_in_flight_per_thread: float, registers_per_thread: int = 32,
                   shared_bytes_per_cta: int = 0, l2_reread_fraction: float = 0.0,
                   serial_warp_instructions_per_cta: float = 0.0, block_reductions_per_cta: int = 0) -> KernelPlan:
    """A kernel whose CTAs each stream an equal share of the data once.

    ``l2_reread_fraction`` is extra L2 traffic (as a fraction of bytes read) for kernels that make
    several passes over their row (softmax max/sum passes, layernorm statistics). The row stays on
    chip only while the data of all resident CTAs fits in L2: the re-reads that miss
    (:func:`reread_miss_fraction`) go to DRAM too. ``serial_warp_instructions_per_cta`` and
    ``block_reductions_per_cta`` are for kernels whose threads compute between their loads (see
    :class:`KernelPlan`).
    """
    num_ctas = max(1, int(num_ctas))
    threads = min(threads_per_cta, machine.max_threads_per_cta)
    if machine.kind == "cpu":
        threads = machine.max_threads_per_cta
    per_unit, limiter = ctas_per_unit(machine, threads, registers_per_thread, shared_bytes_per_cta)
    per_unit = max(1, per_unit)
    slots = per_unit * machine.num_units
    per_cta_dram = (bytes_read + bytes_written) / num_ctas
    if l2_reread_fraction > 0:
        per_cta_dram += l2_reread_fraction * bytes_read / num_ctas * reread_miss_fraction(
            machine, min(num_ctas, slots) * (bytes_read + bytes_written) / num_ctas)
    num_waves = math.ceil(num_ctas / slots)
    waves = tuple(min(slots, num_ctas - i * slots) * per_cta_dram for i in range(num_waves))
    in_flight = threads * bytes_in_flight_per_thread
    if machine.kind == "cpu" and machine.max_bytes_in_flight_per_unit:
        in_flight = machine.max_bytes_in_flight_per_unit
    return KernelPlan(
        name=name,
        op_kind=op_kind,
        pipe="vector" if flop > 0 else "none",
        dtype=dtype,
        grid=num_ctas,
        threads_per_cta=threads,
        registers_per_thread=registers_per_thread,
        shared_bytes_per_cta=shared_bytes_per_cta,
        ctas_per_unit=per_unit,
        occupancy_limiter=limiter,
        flop_per_cta=flop / num_ctas,
        sfu_ops_per_cta=sfu_ops / num_ctas,
        l2_bytes_per_cta=(bytes_read * (1.0 + l2_reread_fraction) + bytes_written) / num_ctas,
        bytes_in_flight_per_cta=in_flight,
        store_bytes_per_cta=bytes_written / num_ctas,
        wave_dram_bytes=waves,
        prologue_per_wave=False,
        useful_flop=flop,
        serial_warp_instructions_per_cta=serial_warp_instructions_per_cta,
        block_reductions_per_cta=block_reductions_per_cta,
    )


def reread_miss_fraction(machine: Machine, resident_bytes: float) -> float:
    """Share of a row's second read that misses L2 when the CTAs resident at once stream
    ``resident_bytes`` (their rows read and written) between a row's first and second read: the
    L2 behaves as for a cyclic sweep over that many bytes (:meth:`Machine.cyclic_l2_hit_fraction`)."""
    return 1.0 - machine.cyclic_l2_hit_fraction(resident_bytes)


def elementwise_launch(machine: Machine, num_elements: int, dtype: str, num_inputs: int) -> tuple[int, int, float]:
    """(CTAs, threads per CTA, bytes in flight per thread) of a vectorized elementwise kernel:
    128 threads, each loading one 16-byte vector per input and handling 4 vectors' worth."""
    eb = DTYPE_BYTES[dtype]
    per_thread = 4 * max(1, int(VECTOR_LOAD_BYTES // eb))
    threads = 128
    ctas = math.ceil(num_elements / (threads * per_thread))
    return ctas, threads, VECTOR_LOAD_BYTES * max(1, num_inputs) * 2


TORCH_SCALAR_THREADS = 128
"""Threads per CTA of PyTorch's index-computing and casting element-wise kernels
(``elementwise_kernel<128, vt>``, ``unrolled_elementwise_kernel`` in a profile)."""

TORCH_SCALAR_INSTRUCTIONS = {"base": 15.5, "per_input": 5.0, "per_dim": 8.0, "per_dim_per_operand": 2.0,
                             "per_cast_operand": 11.0}
"""Instructions one thread of PyTorch's scalar element-wise kernels issues per element, as counted
on the executed path of equivalent kernels compiled for sm_90 by nvcc 13.0 (-O3, read with
nvdisasm): a kernel that splits the element's index over the iterator's dimensions by multiply-high
division and adds every operand's stride per dimension, loads the inputs, computes and stores,
with 128 threads of 2 or 4 elements each. Per element: 15.5 for the index, bounds test, loop and
convergence barriers, 5 per input (its address and load), per index dimension 8 (the division and
the dimension test) plus 2 per operand (inputs and output: its stride product), and, where the
operands' dtypes are read at run time, 11 per operand for its compare-and-branch dtype switch and
conversion. Executed-path counts of the equivalents: a product of two BF16 (FP32) operands over
1 / 2 / 3 dimensions 38.75 (40.5) / 52.75 (54.5) / 66.75 (68.5); a negation over 1 / 2 / 3
dimensions 32.5 / 44.5 / 56.5; a BF16 x FP32 product cast through dtype switches 72.5 / 86.5 /
100.5; a contiguous cast copy 41.5. The formula is within 1 instruction of each."""


def torch_scalar_instructions(tensor_inputs: int, index_dims: int, casts: bool) -> float:
    """Instructions per element of a PyTorch scalar element-wise kernel (:data:`TORCH_SCALAR_INSTRUCTIONS`)
    with ``tensor_inputs`` inputs and one output, ``index_dims`` index dimensions, casting every
    operand or none."""
    c = TORCH_SCALAR_INSTRUCTIONS
    operands = tensor_inputs + 1
    return (c["base"] + c["per_input"] * tensor_inputs
            + (c["per_dim"] + c["per_dim_per_operand"] * operands) * index_dims
            + (c["per_cast_operand"] * operands if casts else 0.0))


def torch_scalar_elementwise_launch(num_elements: int, out_dtype: str, casts: bool, load_bytes_per_element: float
                                    ) -> tuple[int, int, float]:
    """(CTAs, threads per CTA, bytes in flight per thread) of PyTorch's element-wise kernel for
    operands it cannot load as vectors: 128 threads, each handling ``vt`` elements 128 apart, one
    after another. An index-computing kernel (``elementwise_kernel<128, vt>``) calls the op on each
    element through ``char`` pointers, so the compiler cannot move an element's loads above the
    previous element's store; a casting kernel converts each element inside its dtype switch as it
    loads it. Either way a thread has one element's loads (``load_bytes_per_element``) in flight.
    ``vt`` is 4, or 2 for an output of 4 bytes or more without casts (PyTorch's ``Loops.cuh``:
    ``unroll_factor = sizeof(arg0_t) >= 4 ? 2 : 4``; its casting kernels handle 4), as the
    profile's kernel names show (``elementwise_kernel<128, 2>`` for an FP32 product,
    ``<128, 4>`` for a BF16 one)."""
    per_thread = 2 if DTYPE_BYTES[out_dtype] >= 4 and not casts else 4
    ctas = math.ceil(num_elements / (TORCH_SCALAR_THREADS * per_thread))
    return max(1, ctas), TORCH_SCALAR_THREADS, float(load_bytes_per_element)


TORCH_CAT_THREADS = 512
"""Threads per CTA of PyTorch's ``CatArrayBatchedCopy`` for inputs it cannot load as vectors."""

TORCH_CAT_CTAS_PER_UNIT = 2
"""CTAs per SM and input of that kernel: the grid is 2 x SMs along x, one row per input along y, each
thread striding over its input one element at a time (PyTorch's ``getCatGrid``)."""

TORCH_CAT_INSTRUCTIONS_PER_ELEMENT = 117.0
"""Instructions one thread of the strided ``CatArrayBatchedCopy`` issues per element (4 dimensions,
32-bit indices), counted in the loop of an equivalent kernel compiled for sm_90 by nvcc 13.0 (-O3,
read with nvdisasm): the output offset and the input offset each split the element's index over the
dimensions by unsigned division, with the concatenated dimension's size chosen per input (three
divisors' reciprocals rebuilt per element, I2F + MUFU.RCP + F2I, and the other divisions as
multiply-high with corrections: 45 IMAD, 16 ISETP, 11 IADD3 among them), a 2-byte load and a store."""


def torch_cat_launch(machine: Machine, num_elements: int, load_bytes_per_element: float, num_inputs: int = 2
                     ) -> tuple[int, int, float]:
    """(CTAs, threads per CTA, bytes in flight per thread) of PyTorch's ``CatArrayBatchedCopy`` joining
    ``num_inputs`` equal strided inputs of ``num_elements`` in all: up to
    :data:`TORCH_CAT_CTAS_PER_UNIT` x SMs CTAs of 512 threads per input, each thread with one
    element's load (``load_bytes_per_element``) in flight."""
    per_input = math.ceil(num_elements / max(1, num_inputs))
    ctas = min(TORCH_CAT_CTAS_PER_UNIT * machine.num_units, math.ceil(per_input / TORCH_CAT_THREADS))
    return max(1, ctas) * max(1, num_inputs), TORCH_CAT_THREADS, float(load_bytes_per_element)


def row_launch(machine: Machine, rows: int, cols: int, dtype: str) -> tuple[int, int, float]:
    """(CTAs, threads per CTA, bytes in flight per thread) of a row-wise kernel (softmax, norms):
    one CTA per row with up to 1024 threads each loading 16-byte vectors; short rows pack several
    rows (a warp each) into one CTA."""
    eb = DTYPE_BYTES[dtype]
    vec = max(1, int(VECTOR_LOAD_BYTES // eb))
    threads_needed = math.ceil(cols / vec)
    if threads_needed >= 128:
        threads = min(1024, 32 * math.ceil(threads_needed / 32))
        ctas = rows
        per_thread_vectors = math.ceil(threads_needed / threads)
    else:
        rows_per_cta = 4
        threads = 32 * rows_per_cta
        ctas = math.ceil(rows / rows_per_cta)
        per_thread_vectors = math.ceil(threads_needed / 32)
    return ctas, threads, VECTOR_LOAD_BYTES * min(per_thread_vectors, 4)


TORCH_LAYER_NORM_THREADS = 128
"""PyTorch's native LayerNorm forward (``vectorized_layer_norm_kernel``, aten/src/ATen/native/cuda/
layer_norm_kernel.cu): one CTA of 4 warps per row, each thread loading vectors of 4 elements, a
Welford pass over the row, then a second pass that re-reads it and writes the output."""


def torch_layer_norm_launch(rows: int, cols: int, dtype: str) -> tuple[int, int, float]:
    """(CTAs, threads per CTA, bytes in flight per thread) of PyTorch's native LayerNorm forward:
    one 128-thread CTA per row, one 4-element vector in flight per thread."""
    return max(1, int(rows)), TORCH_LAYER_NORM_THREADS, 4.0 * DTYPE_BYTES[dtype]


def framework_row_launch(machine: Machine, kind: str, rows: int, cols: int, dtype: str) -> tuple[int, int, float]:
    """The launch a framework uses for a row kernel's forward: PyTorch's LayerNorm launch for a layer
    norm on a GPU, :func:`row_launch` otherwise."""
    if kind == "layernorm" and machine.kind == "gpu":
        return torch_layer_norm_launch(rows, cols, dtype)
    return row_launch(machine, rows, cols, dtype)


SCALAR_ROW_MAX_THREADS = 1024
"""Block size cap of the first-generation vLLM row kernels: ``dim3 block(std::min(hidden, 1024))``."""


def scalar_row_launch(rows: int, cols: int, dtype: str, loads_per_element: float) -> tuple[int, int, float]:
    """(CTAs, threads per CTA, bytes in flight per thread) of a row kernel with scalar loads: one CTA
    per row (token) of min(cols, 1024) threads, each thread striding through the row one element at
    a time, so it has only its current element's ``loads_per_element`` loads outstanding (on average
    over its round trips, for a kernel whose loops load different counts). This is the
    shape of the first-generation vLLM ``rms_norm`` and ``silu_and_mul`` CUDA kernels that
    sarathi-serve (and so Vidur's profiles) run (microsoft/sarathi-serve csrc/layernorm_kernels.cu
    and csrc/activation_kernels.cu): Little's law then caps their bandwidth far below DRAM's."""
    eb = DTYPE_BYTES[dtype]
    return max(1, int(rows)), min(int(cols), SCALAR_ROW_MAX_THREADS), float(loads_per_element * eb)


SCALAR_ROW_INSTRUCTIONS_PER_ELEMENT = {"silu_and_mul": 43, "norm": 24}
"""Instructions each thread of a first-generation vLLM row kernel issues per element of its row, as
counted in the SASS of an equivalent kernel compiled for sm_80 by nvcc 13.0 (the loop bodies, the
IEEE division on its fast path). ``silu_and_mul``: 43 (two 16-bit loads, the IEEE ``expf`` around
one MUFU.EX2, the division around one MUFU.RCP, conversions, 64-bit index arithmetic, the store and
the loop test; 42 for sm_90). ``norm`` (``rms_norm``): 24, 9 in the loop that sums the squares and
15 in the loop that scales, multiplies by the weight and stores; the block reduction between them
is a chain of dependent steps, timed by its latency instead (``KernelPlan.block_reductions_per_cta``)."""


def scalar_row_serial_instructions(kernel: str, cols: int, warp_size: int) -> float:
    """Warp instructions one CTA of a scalar row kernel (:func:`scalar_row_launch`) issues between its
    loads: :data:`SCALAR_ROW_INSTRUCTIONS_PER_ELEMENT` for each of the row's ``cols`` elements, one
    warp instruction serving ``warp_size`` of them. Each thread waits for its element's loads before
    computing on it and issues the next loads only after, so none of this overlaps its own loads."""
    return SCALAR_ROW_INSTRUCTIONS_PER_ELEMENT[kernel] * cols / warp_size
