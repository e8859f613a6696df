"""Mapping: each workload op becomes one or more KernelPlans for a device.

GEMM-like ops (matmul, implicit-GEMM convolution, fused attention) enumerate tile configurations and
keep the fastest predicted one, as cuBLAS/cuDNN heuristics do; memory-bound ops get the launch
shapes of the common framework kernels. ``map_op`` is pure and cached per (op, machine).

FLOP bookkeeping: a plan's ``useful_flop`` is the op's model FLOP (``op.flop()``), so the kernels of
a workload add up to the workload's FLOP; the time comes from the work the kernel really executes
(padded tiles, the visible half of causal fused attention, recomputation in its backward).
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace

from gpusim.config.hardware import DTYPE_BYTES
from gpusim.engine.kernel import estimate_kernel_s
from gpusim.engine.machine import NATIVE_ONLY_MATRIX_DTYPES, Machine
from gpusim.errors import SimulationError
from gpusim.mapping.attention import fused_attention_plans
from gpusim.mapping.gemm import (STREAM_K_MIN_K_ITERATIONS, compulsory_dram_bytes, gemm_lower_bound_s, gemm_plan,
                                 promotes_partial_sums, tile_candidates, tile_misfit_reason, uses_matrix_pipe)
from gpusim.mapping.plan import KernelPlan, Tile
from gpusim.mapping.streaming import (elementwise_launch, framework_row_launch, row_launch, streaming_plan,
                                     TORCH_CAT_INSTRUCTIONS_PER_ELEMENT, torch_cat_launch,
                                     torch_scalar_elementwise_launch, torch_scalar_instructions)

__all__ = ["KernelPlan", "Tile", "map_op", "best_gemm", "LINK_CATEGORIES"]

LINK_CATEGORIES = frozenset({"transfer", "collective"})
"""Op categories that move data over links (host link, NVLink, network) rather than run on SMs."""

TRANSCENDENTAL_FUNCTIONS = frozenset({"gelu", "gelu_new", "silu", "sigmoid", "tanh", "exp", "swiglu", "geglu",
                                      "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward",
                                      "swiglu_backward", "geglu_backward"})


MAX_GEMM_OUTPUT_ELEMENTS = 2 ** 38
"""The largest GEMM output simulated (2.7e11 elements, 550 GB in BF16, beyond any device's memory):
the L2 traffic model walks every wave of CTAs, so its time grows with the output (about 4 s at this
size on one core); a larger one is refused in one line instead of running for minutes."""


def best_gemm(machine: Machine, name: str, op_kind: str, m: int, n: int, k: int, batch: int, dtype: str,
              useful_flop: float, *, a_unique_fraction: float = 1.0, b_unique_fraction: float = 1.0,
              b_group: int = 1, extra_c_bytes_per_element: float = 0.0, sfu_ops_per_output: float = 0.0,
              sparse: bool = False, row_strides_bytes: tuple[int, ...] = (), tile: Tile | None = None,
              stream_k: bool = True, split_accumulator: bool = False) -> KernelPlan:
    """The fastest predicted tile configuration for a (batched) GEMM, or the plan of ``tile`` when the
    caller pins one (the kernel a profile shows the library ran). ``row_strides_bytes`` are the
    row strides of A, B and C in memory: on a device whose native matrix path needs aligned strides
    (Hopper's TMA-fed ``wgmma``), a GEMM with any other stride is planned and run on the
    warp-synchronous MMA path. ``stream_k`` False leaves out stream-K tails (:attr:`Tile.stream_k`),
    for a library whose persistent scheduler hands out whole tiles only. ``split_accumulator``: an FP8
    product that promotes its partial sums into FP32 registers (see :func:`gemm_plan`)."""
    if machine.matrix_rate_per_unit(dtype) is None and (
            dtype in ("fp8", "int8", "fp4") or machine.vector_rate_per_unit(dtype) is None):
        # low-precision formats exist only as tensor-core (matrix-unit) inputs
        raise SimulationError(f"{machine.name} has no pipe for {dtype} matrix multiplication")
    if float(batch) * m * n > MAX_GEMM_OUTPUT_ELEMENTS:
        raise SimulationError(
            f"{name}: a {batch} x {m} x {n} output ({float(batch) * m * n:.3g} elements, "
            f"{float(batch) * m * n * DTYPE_BYTES[dtype] / 1e9:.3g} GB) is beyond what gpusim simulates wave by wave "
            f"(at most {MAX_GEMM_OUTPUT_ELEMENTS:.3g} output elements per GEMM); use a smaller batch or shape")
    warp_mma = (uses_matrix_pipe(machine, dtype) and dtype not in NATIVE_ONLY_MATRIX_DTYPES
                and machine.strides_block_native_mma(row_strides_bytes))
    if warp_mma:
        machine = machine.with_warp_mma_libraries()
    eb = DTYPE_BYTES[dtype]
    if sparse:
        # 2:4 structured sparsity: the tensor cores skip half of A's products, and A is stored as its
        # kept half plus 2 bits of position metadata per kept value (9/16 of the dense bytes at 16 bits)
        a_unique_fraction *= 0.5 + 1.0 / (8 * eb)
    min_bytes = compulsory_dram_bytes(m, n, k, batch, dtype, a_unique_fraction, b_unique_fraction, b_group)
    speedup = machine.sparsity_speedup if sparse else 1.0
    promotes = promotes_partial_sums(machine, dtype, split_accumulator)
    if tile is not None:
        reason = tile_misfit_reason(machine, dtype, tile, promotes)
        if reason:
            raise SimulationError(f"tile {tile.label()} cannot run on {machine.name}: {reason}")
    candidates = [tile] if tile is not None else [t for t in tile_candidates(machine, dtype, m, n, k, batch, promotes)
                                                  if stream_k or not t.stream_k]
    ranked = sorted(((gemm_lower_bound_s(machine, m, n, k, batch, dtype, t, min_bytes, speedup, promotes), i, t)
                     for i, t in enumerate(candidates)),
                    key=lambda x: (x[0], x[1]))
    best: tuple[float, int, KernelPlan] | None = None
    for bound, _, candidate in ranked:
        if best is not None and bound >= best[0] or bound == math.inf:
            break
        plan = gemm_plan(machine, name, op_kind, m, n, k, batch, dtype, candidate, useful_flop, a_unique_fraction,
                         b_unique_fraction, b_group, extra_c_bytes_per_element, sfu_ops_per_output,
                         split_accumulator)
        if plan is None:
            continue
        if sparse:
            plan = replace(plan, flop_per_cta=plan.flop_per_cta / machine.sparsity_speedup,
                           name=plan.name + "[2:4]")
        key = (estimate_kernel_s(plan, machine), plan.grid)
        if best is None or key < best[:2]:
            best = (key[0], key[1], plan)
    if best is None and tile is not None and tile.stream_k:
        raise SimulationError(f"tile {tile.label()}: {machine.name} runs no stream-K tail for this {dtype} GEMM (only "
                              "persistent kernels do, after a full wave, when the last wave is less than half full and each tile has "
                              f"more than {STREAM_K_MIN_K_ITERATIONS} k-steps)")
    if best is None:
        raise SimulationError(f"{name}: no tile configuration fits {machine.name}")
    return replace(best[2], warp_mma=True) if warp_mma else best[2]


def _epilogue_extras(op, c_elements: float) -> tuple[float, float]:
    """(extra bytes per C element, SFU ops per C element) of a fused epilogue: everything the op moves
    beyond its plain operands and one C write."""
    eb = DTYPE_BYTES[op.dtype]
    ob = DTYPE_BYTES[op.out_dtype]
    if op.kind == "matmul":
        plain = (op.batch * op.m * op.k + op.num_b_matrices * op.k * op.n) * eb + c_elements * ob
    else:  # conv2d: operands per variant, as the op counts them
        plain = op.bytes_read() + op.bytes_written()
        return 0.0, _sfu_per_element(op.epilogue)
    extra = op.bytes_read() + op.bytes_written() - plain
    return max(0.0, extra / c_elements), _sfu_per_element(op.epilogue)


def _sfu_per_element(functions) -> float:
    return float(sum(1 for f in functions if f in TRANSCENDENTAL_FUNCTIONS))


def _matmul(machine: Machine, op) -> KernelPlan:
    c_elements = float(op.batch) * op.m * op.n
    extra, sfu = _epilogue_extras(op, c_elements)
    group = op.batch // op.num_b_matrices if op.num_b_matrices else op.batch
    return best_gemm(machine, "matmul", "matmul", op.m, op.n, op.k, op.batch, op.dtype, op.flop(),
                     b_group=max(1, group), extra_c_bytes_per_element=extra, sfu_ops_per_output=sfu,
                     sparse=bool(getattr(op, "sparse", False)), row_strides_bytes=op.row_strides_bytes(),
                     tile=Tile.parse(op.tile) if getattr(op, "tile", None) else None,
                     split_accumulator=op.split_accumulator)


def _conv2d(machine: Machine, op) -> KernelPlan:
    m, n, k = op.implicit_gemm()
    groups = op.gemm_batch()
    eb = DTYPE_BYTES[op.dtype]
    # Implicit GEMM reads each operand pixel once from DRAM, not once per filter tap.
    if op.variant == "forward":
        a_unique = min(1.0, op.input_elements() * eb / (m * k * eb * groups))
        b_unique = 1.0
    elif op.variant == "dgrad":
        a_unique = min(1.0, op.output_elements() * eb / (m * k * eb * groups))
        b_unique = 1.0
    else:  # wgrad: A = output gradient (oc x npq), B = im2col of the input (npq x ic*kk)
        a_unique = 1.0
        b_unique = min(1.0, op.input_elements() * eb / (k * n * eb * groups))
    sfu = _sfu_per_element(op.epilogue)
    return best_gemm(machine, f"conv2d_{op.variant}", "conv2d", m, n, k, groups, op.dtype, op.flop(),
                     a_unique_fraction=a_unique, b_unique_fraction=b_unique, sfu_ops_per_output=sfu)


def _elements(op) -> float:
    value = getattr(op, "num_elements", None)
    if callable(value):
        value = value()
    if value is None:
        value = max(op.bytes_read(), op.bytes_written()) / DTYPE_BYTES.get(getattr(op, "dtype", "fp32"), 4)
    return float(value)


def _streaming(machine: Machine, op) -> KernelPlan:
    kind = op.kind
    dtype = getattr(op, "dtype", "fp32")
    if dtype not in DTYPE_BYTES:
        dtype = "fp32"
    read, written = float(op.bytes_read()), float(op.bytes_written())
    flop = float(op.executed_flop())
    sfu = 0.0
    reread = 0.0
    if hasattr(op, "rows") and hasattr(op, "cols"):
        if getattr(op, "variant", "forward") == "forward":
            ctas, threads, in_flight = framework_row_launch(machine, kind, op.rows, op.cols, dtype)
        else:
            ctas, threads, in_flight = row_launch(machine, op.rows, op.cols, dtype)
        if kind == "softmax" and getattr(op, "variant", "forward") == "forward":
            sfu = float(op.rows) * op.cols
        reread = 2.0 if kind == "softmax" else 1.0
    else:
        elements = _elements(op)
        inputs = getattr(op, "num_inputs", 1)
        ctas, threads, in_flight = elementwise_launch(machine, int(max(1, elements)), dtype, inputs)
        function = getattr(op, "function", "")
        if function:
            sfu = elements * _sfu_per_element(function.split("+"))
        if getattr(op, "scalar_loads", False) and machine.kind == "gpu":
            return _torch_scalar_elementwise(machine, op, read, written, flop, sfu)
    plan = streaming_plan(machine, kind, kind, dtype, bytes_read=read, bytes_written=written, flop=flop,
                          sfu_ops=sfu, num_ctas=ctas, threads_per_cta=threads,
                          bytes_in_flight_per_thread=in_flight, l2_reread_fraction=reread)
    return replace(plan, useful_flop=float(op.flop()), executed_flop=flop)


def _torch_scalar_elementwise(machine: Machine, op, read: float, written: float, flop: float, sfu: float
                              ) -> KernelPlan:
    """An element-wise op that PyTorch runs with one element's loads in flight per thread
    (:attr:`~gpusim.workload.ops.Elementwise.scalar_loads`): each warp issues the kernel's
    instructions for its next element between two of its round trips
    (:func:`~gpusim.mapping.streaming.torch_scalar_instructions`) while the SM's other warps wait."""
    casts = op.casts_on_load
    reread = 0.0
    if op.num_inputs:
        load_bytes = (read - op.broadcast_elements * DTYPE_BYTES[op.dtype]) / op.num_elements
    else:
        # a copy that expands a smaller tensor (``expand``): each element loads its source element,
        # which DRAM serves once and L2 again for every further repeat
        load_bytes = DTYPE_BYTES[op.dtype]
        reread = max(0.0, op.num_elements / max(1, op.broadcast_elements) - 1.0)
    if op.function == "cat":
        # the concatenation of strided halves: PyTorch's CatArrayBatchedCopy, one element per thread
        ctas, threads, in_flight = torch_cat_launch(machine, op.num_elements, load_bytes)
        instructions = TORCH_CAT_INSTRUCTIONS_PER_ELEMENT
    else:
        ctas, threads, in_flight = torch_scalar_elementwise_launch(op.num_elements, op.dtype, casts, load_bytes)
        instructions = torch_scalar_instructions(op.tensor_inputs, op.index_dims, casts)
    plan = streaming_plan(machine, op.kind, op.kind, op.dtype, bytes_read=read, bytes_written=written, flop=flop,
                          sfu_ops=sfu, num_ctas=ctas, threads_per_cta=threads, bytes_in_flight_per_thread=in_flight,
                          l2_reread_fraction=reread)
    return replace(plan, useful_flop=float(op.flop()), executed_flop=flop, warp_instructions_per_trip=instructions)


@functools.lru_cache(maxsize=8192)
def map_op(op, machine: Machine) -> tuple[KernelPlan, ...]:
    """The kernels that execute ``op`` on ``machine`` (empty for link transfers and collectives)."""
    if op.category in LINK_CATEGORIES:
        return ()
    if op.kind == "matmul":
        return (_matmul(machine, op),)
    if op.kind == "conv2d":
        return (_conv2d(machine, op),)
    if op.kind == "attention":
        if op.kernel != "unfused":
            return fused_attention_plans(machine, op)
        return tuple(plan for sub in op.decompose() for plan in map_op(sub, machine))
    return (_streaming(machine, op),)
