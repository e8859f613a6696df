"""GEMM-like kernels (matmul, implicit-GEMM convolution, attention): tile candidates, the L2 reuse
model of concurrently running CTAs, and library-like selection of the fastest predicted tile.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Callable, Iterable

import numpy as np

from gpusim.config.hardware import DTYPE_BYTES
from gpusim.engine.machine import Machine
from gpusim.mapping.occupancy import ctas_per_unit
from gpusim.mapping.plan import KernelPlan, Tile

ACCUMULATOR_OVERHEAD_REGISTERS = 40
"""Registers a GEMM thread needs besides its accumulators (addresses, fragments, loop state);
CUTLASS sm80 kernels with 128 accumulators per thread report about 160-170 registers."""


def output_bytes_per_element(dtype: str) -> float:
    """GEMM outputs: FP8/INT8/FP4 GEMMs write BF16/INT32-scaled-to-16-bit results, others their dtype."""
    return 2.0 if dtype in ("fp8", "int8", "fp4") else float(DTYPE_BYTES[dtype])


def uses_matrix_pipe(machine: Machine, dtype: str) -> bool:
    return machine.matrix_rate_per_unit(dtype) is not None


def _swizzled_rows_cols(num_tiles: int, mt: int, nt: int, swizzle: int) -> tuple[np.ndarray, np.ndarray]:
    u = np.arange(num_tiles, dtype=np.int64)
    group = u // (swizzle * nt)
    first_row = group * swizzle
    rows_in_group = np.minimum(swizzle, mt - first_row)
    within = u % (swizzle * nt)
    return first_row + within % rows_in_group, within // rows_in_group


def wave_dram_bytes(machine: Machine, m: int, n: int, k: int, batch: int, tile: Tile, in_bytes: float,
                    out_bytes: float, slots: int, a_unique_fraction: float = 1.0, b_unique_fraction: float = 1.0,
                    b_group: int = 1, extra_c_bytes_per_element: float = 0.0) -> tuple[float, ...]:
    """DRAM bytes per wave of ``slots`` concurrently resident CTAs.

    CTAs are issued batch by batch, split-K slice by slice, tiles in a swizzled raster (groups of
    ``tile.swizzle`` row-blocks). The A row-panels and B column-panels a wave needs are read from DRAM
    once per wave unless an earlier wave left them in L2 (least-recently-used, L2 capacity); the CTAs of
    a wave that share a panel hit in L2. C tiles are written once. ``b_group`` consecutive batch
    entries share one B matrix (a weight shared by a batch; grouped-query attention). The unique
    fractions scale panels whose DRAM bytes are smaller than the GEMM view (implicit-GEMM convolution
    reads each input pixel once, not once per filter tap).
    """
    bm, bn, sk = tile.block_m, tile.block_n, tile.split_k
    mt, nt = math.ceil(m / bm), math.ceil(n / bn)
    tiles = mt * nt
    k_len = math.ceil(k / sk)
    total = batch * sk * tiles
    rows, cols = _swizzled_rows_cols(tiles, mt, nt, tile.swizzle)
    row_size = np.minimum(bm, m - np.arange(mt) * bm) * k_len * in_bytes * a_unique_fraction
    col_size = np.minimum(bn, n - np.arange(nt) * bn) * k_len * in_bytes * b_unique_fraction
    c_elements = np.minimum(bm, m - rows * bm) * np.minimum(bn, n - cols * bn)
    # Each CTA writes its share of C; with split-K it also writes FP32 partials that are read back.
    c_bytes_per_element = (out_bytes + extra_c_bytes_per_element) / sk + (8.0 if sk > 1 else 0.0)
    capacity = machine.l2_capacity_bytes
    cache: OrderedDict[int, float] = OrderedDict()
    cached = 0.0
    waves: list[float] = []
    for start in range(0, total, slots):
        idx = np.arange(start, min(start + slots, total), dtype=np.int64)
        b = idx // (sk * tiles)
        ks = (idx // tiles) % sk
        t = idx % tiles
        bk_key = b * sk + ks
        a_ids = np.unique((bk_key * mt + rows[t]) * 2)
        b_key = (b // max(1, b_group)) * sk + ks
        b_ids = np.unique((b_key * nt + cols[t]) * 2 + 1)
        traffic = float(c_elements[t].sum()) * c_bytes_per_element
        for ids, sizes, base in ((a_ids, row_size, mt), (b_ids, col_size, nt)):
            for pid in ids.tolist():
                if pid in cache:
                    cache.move_to_end(pid)
                    continue
                size = float(sizes[(pid // 2) % base])
                traffic += size
                cache[pid] = size
                cached += size
                while cached > capacity and len(cache) > 1:
                    _, old = cache.popitem(last=False)
                    cached -= old
        waves.append(traffic)
    return tuple(waves)


def tile_candidates(machine: Machine, dtype: str, m: int, n: int, k: int, batch: int) -> list[Tile]:
    """Realistic tile configurations for this device and dtype (as CUTLASS/cuBLAS enumerate)."""
    eb = DTYPE_BYTES[dtype]
    out: list[Tile] = []
    if machine.kind == "cpu":
        for bm in (64, 128, 256):
            for bn in (64, 128, 256):
                for bk in (128, 256, 512):
                    out.append(Tile(bm, bn, bk, 2, 1, 1, 8))
        return out
    matrix = uses_matrix_pipe(machine, dtype)
    if matrix:
        shapes = [(64, 64), (64, 128), (128, 64), (128, 128), (128, 256), (256, 128), (64, 256), (256, 64)]
        bk_options = sorted({max(8, int(64 // eb)), max(8, int(128 // eb))})
    else:
        # CUDA-core (SIMT) GEMMs: the register-blocked tiles cuBLAS and CUTLASS ship (8x8 outputs per
        # thread), e.g. ampere_sgemm_128x64, volta_sgemm_128x128.
        shapes = [(64, 64), (128, 64), (64, 128), (128, 128), (256, 128)]
        bk_options = [8, 16]
    output_tiles = batch * math.ceil(m / 64) * math.ceil(n / 64)
    splits = [1]
    if output_tiles < 2 * machine.num_units and k >= 1024:
        splits += [s for s in (2, 4, 8, 16) if k // s >= 256]
    for bm, bn in shapes:
        warps = 4 if bm * bn <= 128 * 128 else 8
        if not matrix:
            warps = max(2, min(16, bm * bn // (8 * 8 * 32)))
        for bk in bk_options:
            for stages in (2, 3, 4, 5, 6) if matrix else (2,):
                for sk in splits:
                    out.append(Tile(bm, bn, bk, stages, warps, sk, 8))
                    if matrix and machine.max_cluster_size >= 2 and bm * bn >= 128 * 128:
                        out.append(Tile(bm, bn, bk, stages, warps, sk, 8, cluster=2))
    return out


def gemm_plan(machine: Machine, name: str, op_kind: str, m: int, n: int, k: int, batch: int, dtype: str,
              tile: Tile, useful_flop: float, a_unique_fraction: float = 1.0, b_unique_fraction: float = 1.0,
              b_group: int = 1, extra_c_bytes_per_element: float = 0.0,
              sfu_ops_per_output: float = 0.0) -> KernelPlan | None:
    """The plan of one tile configuration, or None if it cannot run (resources, unsupported dtype)."""
    eb = DTYPE_BYTES[dtype]
    ob = output_bytes_per_element(dtype)
    matrix = uses_matrix_pipe(machine, dtype)
    if not matrix and machine.vector_rate_per_unit(dtype) is None:
        return None
    bm, bn, bk, sk = tile.block_m, tile.block_n, tile.block_k, tile.split_k
    k_len = math.ceil(k / sk)
    k_iters = max(1, math.ceil(k_len / bk))
    if machine.kind == "cpu":
        threads = machine.max_threads_per_cta
        registers = 32
        shared = int(tile.num_stages * (bm + bn) * bk * eb)
        in_flight = machine.max_bytes_in_flight_per_unit or 0.0
    else:
        threads = tile.num_warps * machine.warp_size
        acc_words = bm * bn * (2 if dtype == "fp64" else 1)
        registers = math.ceil(acc_words / threads) + ACCUMULATOR_OVERHEAD_REGISTERS
        shared = int(tile.num_stages * (bm + bn) * bk * eb)
        in_flight = max(1, tile.num_stages - 1) * (bm + bn) * bk * eb
    per_unit, limiter = ctas_per_unit(machine, threads, registers, shared)
    if per_unit == 0 or in_flight <= 0:
        return None
    grid = batch * sk * math.ceil(m / bm) * math.ceil(n / bn)
    slots = per_unit * machine.num_units
    waves = wave_dram_bytes(machine, m, n, k, batch, tile, eb, ob, slots, a_unique_fraction, b_unique_fraction,
                            b_group, extra_c_bytes_per_element)
    partials = (bm * bn * 4.0 * 2) if sk > 1 else 0.0
    l2_per_cta = (bm + bn / tile.cluster) * k_iters * bk * eb + bm * bn * (ob + extra_c_bytes_per_element) + partials
    flop_per_cta = 2.0 * bm * bn * k_iters * bk
    return KernelPlan(
        name=f"{name}[{tile.label()}]",
        op_kind=op_kind,
        pipe="matrix" if matrix else "vector",
        dtype=dtype,
        grid=grid,
        threads_per_cta=threads,
        registers_per_thread=registers,
        shared_bytes_per_cta=shared,
        ctas_per_unit=per_unit,
        occupancy_limiter=limiter,
        flop_per_cta=flop_per_cta,
        sfu_ops_per_cta=sfu_ops_per_output * bm * bn,
        l2_bytes_per_cta=l2_per_cta,
        bytes_in_flight_per_cta=in_flight,
        wave_dram_bytes=waves,
        prologue_per_wave=True,
        useful_flop=useful_flop,
        tile=tile,
    )


def select_fastest(plans: Iterable[KernelPlan | None], estimate: Callable[[KernelPlan], float]) -> KernelPlan:
    """Library-like heuristic: the candidate with the lowest predicted time (ties: fewer CTAs)."""
    best: tuple[float, int, KernelPlan] | None = None
    for plan in plans:
        if plan is None:
            continue
        key = (estimate(plan), plan.grid)
        if best is None or key < best[:2]:
            best = (key[0], key[1], plan)
    if best is None:
        raise ValueError("no tile configuration fits this device")
    return best[2]
