"""Mapping: each workload op becomes one or more KernelPlans for a device.

GEMM-like ops (matmul, implicit-GEMM conv, fused attention) enumerate tile configurations and keep
the fastest predicted one, as cuBLAS/cuDNN heuristics do; memory-bound ops get the launch shapes of
the common framework kernels. ``map_op`` is pure and cached per (op, machine).
"""

from __future__ import annotations

import functools
import math

from gpusim.config.hardware import DTYPE_BYTES
from gpusim.engine.kernel import estimate_kernel_s
from gpusim.engine.machine import Machine
from gpusim.errors import SimulationError
from gpusim.mapping.gemm import gemm_plan, select_fastest, tile_candidates, uses_matrix_pipe
from gpusim.mapping.occupancy import ctas_per_unit
from gpusim.mapping.plan import KernelPlan, Tile
from gpusim.mapping.streaming import elementwise_launch, row_launch, streaming_plan

__all__ = ["KernelPlan", "Tile", "map_op", "best_gemm", "NOT_KERNELS"]

NOT_KERNELS = frozenset({"host_to_device", "device_to_host", "all_reduce", "all_gather", "reduce_scatter",
                         "all_to_all", "send_recv", "broadcast"})
"""Ops that are transfers over links rather than kernels on the SMs."""

SOFTMAX_FLOP_PER_ELEMENT = 4.0   # subtract max, compare, add to sum, scale (exp counted on the SFU)
LAYERNORM_FLOP_PER_ELEMENT = 8.0  # mean, variance, normalize, scale, shift
RMSNORM_FLOP_PER_ELEMENT = 4.0    # square-accumulate, scale, weight


def best_gemm(machine: Machine, name: str, op_kind: str, m: int, n: int, k: int, batch: int, dtype: str,
              useful_flop: float, a_unique_fraction: float = 1.0, sparse: bool = False,
              b_shared_across_batch: bool = False) -> KernelPlan:
    if machine.matrix_rate_per_unit(dtype) is None and machine.vector_rate_per_unit(dtype) is None:
        raise SimulationError(f"{machine.name} has no pipe for {dtype} matrix multiplication")
    candidates = (gemm_plan(machine, name, op_kind, m, n, k, batch, dtype, t, useful_flop, a_unique_fraction,
                            b_shared_across_batch=b_shared_across_batch)
                  for t in tile_candidates(machine, dtype, m, n, k, batch))
    try:
        plan = select_fastest(candidates, lambda p: estimate_kernel_s(p, machine))
    except ValueError:
        raise SimulationError(f"{name}: no tile configuration fits {machine.name}") from None
    if sparse:
        from dataclasses import replace

        plan = replace(plan, flop_per_cta=plan.flop_per_cta / machine.sparsity_speedup,
                       name=plan.name + "[2:4]")
    return plan


def _attention_fused(machine: Machine, op, name: str) -> KernelPlan:
    """A flash-attention forward: each CTA owns block_m queries of one head and streams that head's K
    and V through shared memory; scores never reach DRAM."""
    dtype = op.dtype
    eb = DTYPE_BYTES[dtype]
    d = op.head_dim
    heads = op.batch * op.heads
    block_m = 128 if op.seq_len_q >= 128 else max(16, 16 * math.ceil(op.seq_len_q / 16))
    block_n = 64 if d > 64 else 128
    q_blocks = math.ceil(op.seq_len_q / block_m)
    grid = heads * q_blocks
    useful = op.flop()
    # Keys each CTA visits: all of them, or (causal) those up to its last query.
    if op.causal and op.seq_len_q > 1:
        avg_keys = min(op.seq_len_kv, op.seq_len_kv - op.seq_len_q + (op.seq_len_q + block_m) / 2)
    else:
        avg_keys = op.seq_len_kv
    keys_padded = math.ceil(avg_keys / block_n) * block_n
    flop_per_cta = 4.0 * block_m * keys_padded * d
    sfu_per_cta = block_m * keys_padded
    threads = 128 if block_m <= 128 else 256
    shared = int((block_m + 2 * block_n * 2) * d * eb)
    per_unit, limiter = ctas_per_unit(machine, threads, 255 if machine.kind == "gpu" else 32, shared)
    if per_unit == 0:
        raise SimulationError(f"{name}: the fused attention tile does not fit {machine.name}")
    slots = per_unit * machine.num_units
    kv_per_head = op.seq_len_kv * d * eb * 2
    group = max(1, op.heads // max(1, op.kv_heads))
    q_o_per_cta = 2 * min(block_m, op.seq_len_q) * d * eb
    waves = []
    for start in range(0, grid, slots):
        end = min(grid, start + slots)
        first_head, last_head = start // q_blocks, (end - 1) // q_blocks
        kv_heads_touched = (last_head // group) - (first_head // group) + 1
        waves.append(kv_heads_touched * kv_per_head + (end - start) * q_o_per_cta)
    l2_per_cta = q_o_per_cta + keys_padded * d * eb * 2
    matrix = uses_matrix_pipe(machine, dtype)
    return KernelPlan(
        name=f"{name}[flash_{block_m}x{block_n}]",
        op_kind="attention",
        pipe="matrix" if matrix else "vector",
        dtype=dtype,
        grid=grid,
        threads_per_cta=threads,
        registers_per_thread=255 if machine.kind == "gpu" else 32,
        shared_bytes_per_cta=shared,
        ctas_per_unit=per_unit,
        occupancy_limiter=limiter,
        flop_per_cta=flop_per_cta,
        sfu_ops_per_cta=sfu_per_cta,
        l2_bytes_per_cta=l2_per_cta,
        bytes_in_flight_per_cta=2 * block_n * d * eb * 2,
        wave_dram_bytes=tuple(waves),
        prologue_per_wave=True,
        useful_flop=useful,
        tile=Tile(block_m, block_n, d, 2, threads // 32),
    )


def _streaming(machine: Machine, op, name: str) -> KernelPlan:
    kind = op.kind
    dtype = op.dtype
    read, written, flop = float(op.bytes_read()), float(op.bytes_written()), float(op.flop())
    sfu = 0.0
    reread = 0.0
    if kind in ("softmax", "layernorm", "rmsnorm"):
        ctas, threads, in_flight = row_launch(machine, op.rows, op.cols, dtype)
        if kind == "softmax":
            sfu = float(op.rows) * op.cols
            reread = 2.0
        else:
            reread = 1.0
    else:
        elements = getattr(op, "num_elements", None)
        if elements is None:
            elements = max(1, int((read + written) // max(1, DTYPE_BYTES.get(dtype, 4))))
        inputs = getattr(op, "num_inputs", 1)
        ctas, threads, in_flight = elementwise_launch(machine, int(elements), dtype, inputs)
        if kind == "elementwise" and getattr(op, "function", "") in ("gelu", "silu", "tanh", "sigmoid", "exp", "swiglu"):
            sfu = float(elements)
    return streaming_plan(machine, name, kind, dtype, bytes_read=read, bytes_written=written, flop=flop,
                          sfu_ops=sfu, num_ctas=ctas, threads_per_cta=threads,
                          bytes_in_flight_per_thread=in_flight, l2_reread_fraction=reread)


@functools.lru_cache(maxsize=8192)
def map_op(op, machine: Machine) -> tuple[KernelPlan, ...]:
    """The kernels that execute ``op`` on ``machine`` (empty for link transfers)."""
    kind = op.kind
    label = kind
    if kind in NOT_KERNELS:
        return ()
    if kind == "matmul":
        return (best_gemm(machine, label, "matmul", op.m, op.n, op.k, getattr(op, "batch", 1) or 1, op.dtype,
                          op.flop(), sparse=bool(getattr(op, "sparse", False))),)
    if kind == "conv2d":
        m, n, k = op.implicit_gemm()
        groups = getattr(op, "groups", 1) or 1
        eb = DTYPE_BYTES[op.dtype]
        input_bytes = op.batch * op.in_channels * op.height * op.width * eb
        a_unique = min(1.0, input_bytes / max(1.0, m * k * eb * groups))
        return (best_gemm(machine, label, "conv2d", m, n, k, groups, op.dtype, op.flop(), a_unique),)
    if kind == "attention":
        if getattr(op, "kernel", "fused") == "fused":
            return (_attention_fused(machine, op, label),)
        plans: list[KernelPlan] = []
        for sub in op.decompose():
            plans.extend(map_op(sub, machine))
        return tuple(plans)
    return (_streaming(machine, op, label),)
