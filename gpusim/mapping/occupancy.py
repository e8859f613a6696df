"""Occupancy: how many CTAs of a kernel fit on one SM (or core), and what limits it."""

from __future__ import annotations

import math

from gpusim.engine.machine import Machine

REGISTER_BYTES = 4
REGISTER_ALLOCATION_UNIT = 256
"""Registers are allocated per warp in units of 256 (CUDA occupancy calculator, cc 7.x-9.x)."""


def ctas_per_unit(machine: Machine, threads_per_cta: int, registers_per_thread: int,
                  shared_bytes_per_cta: float) -> tuple[int, str]:
    """(CTAs resident per unit, the limiting resource). 0 CTAs means the plan does not fit."""
    if threads_per_cta > machine.max_threads_per_cta:
        return 0, "threads_per_cta"
    if registers_per_thread > machine.max_registers_per_thread:
        return 0, "registers_per_thread"
    if shared_bytes_per_cta > machine.max_shared_bytes_per_cta:
        return 0, "shared_memory_per_cta"
    warps = math.ceil(threads_per_cta / machine.warp_size)
    regs_per_warp = math.ceil(registers_per_thread * machine.warp_size / REGISTER_ALLOCATION_UNIT) \
        * REGISTER_ALLOCATION_UNIT
    limits = {
        "max_ctas": machine.max_ctas_per_unit,
        "threads": machine.max_threads_per_unit // threads_per_cta,
        "warps": machine.max_warps_per_unit // warps,
        "registers": int(machine.register_file_bytes // (regs_per_warp * warps * REGISTER_BYTES))
        if machine.kind == "gpu" else machine.max_ctas_per_unit,
        "shared_memory": int(machine.max_shared_bytes_per_unit // shared_bytes_per_cta)
        if shared_bytes_per_cta > 0 else machine.max_ctas_per_unit,
    }
    limiter = min(limits, key=lambda k: limits[k])
    return max(0, limits[limiter]), limiter
