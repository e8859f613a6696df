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
from gpusim.mapping.gemm import (gemm_lower_bound_s, gemm_plan, output_bytes_per_element, tile_candidates,
                                 uses_matrix_pipe)
from gpusim.mapping.occupancy import ctas_per_unit
from gpusim.mapping.plan import KernelPlan, Tile
from gpusim.mapping.streaming import elementwise_launch, framework_row_launch, row_launch, streaming_plan

__all__ = ["KernelPlan", "Tile", "map_op", "best_gemm", "LINK_CATEGORIES"]

LINK_CATEGORIES = frozenset({"transfer", "collective"})
"""Op categories that move data over links (host link, NVLink, network) rather than run on SMs."""

TRANSCENDENTAL_FUNCTIONS = frozenset({"gelu", "gelu_new", "silu", "sigmoid", "tanh", "exp", "swiglu", "geglu",
                                      "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward",
                                      "swiglu_backward", "geglu_backward"})


def best_gemm(machine: Machine, name: str, op_kind: str, m: int, n: int, k: int, batch: int, dtype: str,
              useful_flop: float, *, a_unique_fraction: float = 1.0, b_unique_fraction: float = 1.0,
              b_group: int = 1, extra_c_bytes_per_element: float = 0.0, sfu_ops_per_output: float = 0.0,
              sparse: bool = False, row_strides_bytes: tuple[int, ...] = ()) -> KernelPlan:
    """The fastest predicted tile configuration for a (batched) GEMM. ``row_strides_bytes`` are the
    row strides of A, B and C in memory: on a device whose native matrix path needs aligned strides
    (Hopper's TMA-fed ``wgmma``), a GEMM with any other stride is planned and run on the
    warp-synchronous MMA path."""
    if machine.matrix_rate_per_unit(dtype) is None and (
            dtype in ("fp8", "int8", "fp4") or machine.vector_rate_per_unit(dtype) is None):
        # low-precision formats exist only as tensor-core (matrix-unit) inputs
        raise SimulationError(f"{machine.name} has no pipe for {dtype} matrix multiplication")
    warp_mma = (uses_matrix_pipe(machine, dtype) and dtype not in NATIVE_ONLY_MATRIX_DTYPES
                and machine.strides_block_native_mma(row_strides_bytes))
    if warp_mma:
        machine = machine.with_warp_mma_libraries()
    eb = DTYPE_BYTES[dtype]
    if sparse:
        # 2:4 structured sparsity: the tensor cores skip half of A's products, and A is stored as its
        # kept half plus 2 bits of position metadata per kept value (9/16 of the dense bytes at 16 bits)
        a_unique_fraction *= 0.5 + 1.0 / (8 * eb)
    min_bytes = ((m * k * a_unique_fraction + k * n * b_unique_fraction * batch / max(1, b_group)) * eb
                 + m * n * output_bytes_per_element(dtype)) * (batch if b_group else 1)
    speedup = machine.sparsity_speedup if sparse else 1.0
    ranked = sorted(((gemm_lower_bound_s(machine, m, n, k, batch, dtype, t, min_bytes, speedup), i, t)
                     for i, t in enumerate(tile_candidates(machine, dtype, m, n, k, batch))),
                    key=lambda x: (x[0], x[1]))
    best: tuple[float, int, KernelPlan] | None = None
    for bound, _, tile in ranked:
        if best is not None and bound >= best[0] or bound == math.inf:
            break
        plan = gemm_plan(machine, name, op_kind, m, n, k, batch, dtype, tile, useful_flop, a_unique_fraction,
                         b_unique_fraction, b_group, extra_c_bytes_per_element, sfu_ops_per_output)
        if plan is None:
            continue
        if sparse:
            plan = replace(plan, flop_per_cta=plan.flop_per_cta / machine.sparsity_speedup,
                           name=plan.name + "[2:4]")
        key = (estimate_kernel_s(plan, machine), plan.grid)
        if best is None or key < best[:2]:
            best = (key[0], key[1], plan)
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
                     sparse=bool(getattr(op, "sparse", False)), row_strides_bytes=op.row_strides_bytes())


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


UNPIPELINED_WAITS_PER_TRIP = 3
"""Loads the 2022 Triton FlashAttention waits for in each trip of its main loop (flash_attn_triton.py,
num_stages=1): forward the K block, a scratch store-and-reload of the rescale factors (its
workaround for a compiler bug) and the V block; backward the Q block, the dO block and the row
statistics (LSE and D)."""

_FLASH_NAMES = {"fused": "flash", "fused_async": "flash_async", "fused_unpipelined": "flash_unpipelined"}


def _attention_fused(machine: Machine, op) -> KernelPlan:
    """A flash-attention kernel. Forward: each CTA owns ``block`` queries of one head and streams that
    head's K and V; backward: each CTA owns ``block`` keys and streams the head's Q, dO and dQ
    (FlashAttention-2). Scores never reach DRAM; CTAs of one (KV) head share its data in L2.
    ``fused`` kernels issue warp-synchronous MMA and run the softmax between the matrix products (as
    FlashAttention-2 does); ``fused_async`` kernels use the native asynchronous MMA and overlap the
    softmax with the products (FlashAttention-3's warp specialization); ``fused_unpipelined`` kernels
    are ``fused`` with one pipeline stage, waiting for every block they load (the 2022 Triton kernel)."""
    asynchronous = op.kernel == "fused_async"
    # The unpipelined kernel (2022 Triton FlashAttention) loads one K/V block at a time (num_stages=1)
    # into 128 x 128 blocks with 8 warps in both passes (flash_attn_triton.py's launch parameters).
    stages = 1 if op.kernel == "fused_unpipelined" else 2
    dtype = op.dtype
    eb = DTYPE_BYTES[dtype]
    d = op.head_dim
    heads = op.batch * op.heads
    forward = op.variant == "forward"
    own_len, streamed_len = (op.seq_len_q, op.seq_len_kv) if forward else (op.seq_len_kv, op.seq_len_q)
    threads = (128 if forward and stages > 1 else 256) if machine.kind == "gpu" else machine.max_threads_per_cta
    registers = 255 if machine.kind == "gpu" else 32
    # The largest tile whose shared memory fits (own block; streamed blocks of kv_block rows, one per
    # pipeline stage): devices with less shared memory per CTA (MI300X: 64 KB LDS) get smaller tiles.
    first = ((128, 128),) if stages == 1 else ()
    for block, kv_block in first + ((128, 64), (64, 64), (64, 32), (32, 32), (16, 16)):
        block = block if own_len >= block else max(16, 16 * math.ceil(own_len / 16))
        if forward:
            shared = int((block + 2 * kv_block * stages) * d * eb)
        else:
            shared = int((2 * block + 2 * kv_block) * d * eb)
        per_unit, limiter = ctas_per_unit(machine, threads, registers, shared)
        if per_unit > 0:
            break
    else:
        raise SimulationError(f"attention: no fused attention tile fits {machine.name}")
    blocks_per_head = math.ceil(own_len / block)
    grid = heads * blocks_per_head
    executed = op.executed_flop()
    frac = op.useful_fraction()
    flop_per_cta = executed / grid * (blocks_per_head * block / own_len)  # padded last block
    sfu_per_cta = op.num_scores() * frac * (1 if forward else 2) / grid
    slots = per_unit * machine.num_units
    # DRAM: each CTA's own block (Q and O rows forward; K, V, dK, dV rows backward) once, and the data
    # it streams once per wave for every head group the wave touches (shared in L2 by its CTAs).
    group = max(1, op.heads // op.num_kv_heads) if forward else 1
    own_per_cta = (2 * block * d * eb + block * 4.0) if forward else 4 * block * d * eb
    units = heads // group
    shared_per_unit = max(0.0, op.bytes_read() + op.bytes_written() - own_per_cta * grid) / units
    if forward:  # Q block + its output; streams K and V of the head (read from a KV cache: its storage format)
        l2_per_cta = own_per_cta + 2 * streamed_len * d * DTYPE_BYTES[op.kv_dtype or dtype] * frac
    else:  # K, V block + dK, dV; streams Q, dO, O rows and read-modify-writes dQ in FP32
        l2_per_cta = own_per_cta + streamed_len * d * (3 * eb + 2 * 4) * frac
    waves = []
    for start in range(0, grid, slots):
        end = min(grid, start + slots)
        units_touched = (end - 1) // (blocks_per_head * group) - start // (blocks_per_head * group) + 1
        waves.append(units_touched * shared_per_unit + (end - start) * own_per_cta)
    epilogue = (block * d * eb + block * 4.0) if forward else 2 * block * d * eb  # O, LSE | dK, dV
    return KernelPlan(
        name=f"attention_{op.variant}[{_FLASH_NAMES[op.kernel]}_{block}]",
        op_kind="attention",
        pipe="matrix" if uses_matrix_pipe(machine, dtype) else "vector",
        dtype=dtype,
        grid=grid,
        threads_per_cta=threads,
        registers_per_thread=registers,
        shared_bytes_per_cta=shared,
        ctas_per_unit=per_unit,
        occupancy_limiter=limiter,
        flop_per_cta=flop_per_cta,
        sfu_ops_per_cta=sfu_per_cta,
        l2_bytes_per_cta=l2_per_cta,
        bytes_in_flight_per_cta=2 * kv_block * d * eb * stages,
        wave_dram_bytes=tuple(waves),
        prologue_per_wave=True,
        useful_flop=op.flop(),
        tile=Tile(block, kv_block, d, stages, max(1, threads // 32)),
        load_waits_per_cta=0.0 if stages > 1 else UNPIPELINED_WAITS_PER_TRIP * streamed_len * frac / kv_block,
        epilogue_bytes_per_cta=epilogue,
        store_bytes_per_cta=epilogue,
        executed_flop=executed,
        warp_mma=not asynchronous,
        sfu_overlaps_math=asynchronous,
    )


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
    plan = streaming_plan(machine, kind, kind, dtype, bytes_read=read, bytes_written=written, flop=flop,
                          sfu_ops=sfu, num_ctas=ctas, threads_per_cta=threads,
                          bytes_in_flight_per_thread=in_flight, l2_reread_fraction=reread)
    return replace(plan, useful_flop=float(op.flop()), executed_flop=flop)


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
            return (_attention_fused(machine, op),)
        return tuple(plan for sub in op.decompose() for plan in map_op(sub, machine))
    return (_streaming(machine, op),)
