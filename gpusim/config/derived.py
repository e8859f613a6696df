"""Numbers derived from a hardware description: peaks per dtype, lane counts, ridge points.

These are the plain datasheet arithmetic (no calibration), used by ``gpusim hw show``, by the
roofline baseline and by the engine as ceilings.
"""

from __future__ import annotations

from typing import Any

from gpusim.config.hardware import (
    DTYPES,
    Cpu,
    CpuDescription,
    Gpu,
    GpuDescription,
    HardwareDescription,
    SystemDescription,
)

REPORTED_DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4")


def vector_peak_flop_per_s(device: Gpu | Cpu, dtype: str) -> float | None:
    if isinstance(device, Gpu):
        rate = device.sm.vector_flop_per_cycle.get(dtype)
        return None if rate is None else rate * device.num_sms * device.clocks.sm_clock_hz
    rate = device.core.vector_flop_per_cycle.get(dtype)
    return None if rate is None else rate * device.num_cores * device.clocks.core_clock_hz


def matrix_peak_flop_per_s(device: Gpu | Cpu, dtype: str, fp32_accumulate: bool = False) -> float | None:
    """Dense tensor-core (GPU) or matrix-unit (CPU AMX) peak; with ``fp32_accumulate`` the slower
    FP32-accumulate rate where the product has one."""
    if isinstance(device, Gpu):
        tc = device.tensor_core
        if tc is None:
            return None
        rate = tc.dense_flop_per_cycle_per_sm.get(dtype)
        if fp32_accumulate and tc.fp32_accumulate_flop_per_cycle_per_sm is not None:
            slower = tc.fp32_accumulate_flop_per_cycle_per_sm.get(dtype)
            rate = slower if slower is not None else rate
        return None if rate is None else rate * device.num_sms * device.clocks.tensor_clock_hz
    if device.core.matrix_flop_per_cycle is None:
        return None
    rate = device.core.matrix_flop_per_cycle.get(dtype)
    return None if rate is None else rate * device.num_cores * device.clocks.core_clock_hz


def peak_flop_per_s(device: Gpu | Cpu, dtype: str) -> float | None:
    """Best dense rate for ``dtype`` on any pipe; None where unsupported."""
    rates = [r for r in (vector_peak_flop_per_s(device, dtype), matrix_peak_flop_per_s(device, dtype)) if r]
    return max(rates) if rates else None


def num_fp32_lanes(device: Gpu | Cpu) -> int:
    if isinstance(device, Gpu):
        return device.num_sms * device.sm.num_fp32_lanes
    return device.num_cores * device.core.num_fma_units * device.core.simd_width_bits // 32


def l2_capacity_bytes(device: Gpu | Cpu) -> float:
    if isinstance(device, Gpu):
        return device.l2.capacity_bytes
    return device.l2.capacity_bytes * device.num_cores


def device_of(desc: HardwareDescription) -> Gpu | Cpu:
    """The compute device a description simulates (a system's GPU)."""
    if isinstance(desc, GpuDescription):
        return desc.gpu
    if isinstance(desc, CpuDescription):
        return desc.cpu
    return desc.gpu


def summary(desc: HardwareDescription) -> dict[str, Any]:
    """The derived numbers of ``gpusim hw show --json`` (SI units, keys carry units)."""
    device = device_of(desc)
    peaks = {d: peak_flop_per_s(device, d) for d in REPORTED_DTYPES}
    peaks = {d: v for d, v in peaks.items() if v}
    bandwidth = device.dram.bandwidth_bytes_per_s
    out: dict[str, Any] = {
        "name": desc.name,
        "kind": desc.kind,
        "description": desc.description,
        "num_sms": device.num_sms if isinstance(device, Gpu) else device.num_cores,
        "num_fp32_lanes": num_fp32_lanes(device),
        "peak_flop_per_s": peaks,
        "vector_peak_flop_per_s": {d: v for d in DTYPES if (v := vector_peak_flop_per_s(device, d))},
        "matrix_peak_flop_per_s": {d: v for d in DTYPES if (v := matrix_peak_flop_per_s(device, d))},
        "dram_bandwidth_bytes_per_s": bandwidth,
        "dram_capacity_bytes": device.dram.capacity_bytes,
        "l2_capacity_bytes": l2_capacity_bytes(device),
        "ridge_point_flop_per_byte": {d: v / bandwidth for d, v in peaks.items()},
        "tdp_w": device.power.tdp_w,
    }
    if isinstance(device, Gpu):
        out["sparse_peak_flop_per_s"] = {
            d: v * device.tensor_core.sparsity_speedup
            for d, v in out["matrix_peak_flop_per_s"].items() if d != "fp64"
        } if device.tensor_core is not None else {}
        out["register_file_bytes"] = device.sm.register_file_bytes * device.num_sms
        out["l2_bandwidth_bytes_per_s"] = device.l2.bandwidth_bytes_per_s
        # every SM's L1 (or, where it is a separate array, shared-memory) port at the SM clock
        shared = device.l1.shared_bandwidth_bytes_per_cycle_per_sm or device.l1.bandwidth_bytes_per_cycle_per_sm
        out["shared_bandwidth_bytes_per_s"] = shared * device.clocks.sm_clock_hz * device.num_sms
        out["host_link_bandwidth_bytes_per_s"] = device.host_link.bandwidth_bytes_per_s
        if device.peer_links is not None:
            out["peer_bandwidth_bytes_per_s"] = device.peer_links.num_links * device.peer_links.link_bandwidth_bytes_per_s
        if device.llc is not None:
            out["llc_capacity_bytes"] = device.llc.capacity_bytes
        if device.clocks.sustained_tensor_clock_hz is not None:
            out["sustained_tensor_clock_hz"] = device.clocks.sustained_tensor_clock_hz
    else:
        out["llc_capacity_bytes"] = device.llc.capacity_bytes
    if isinstance(desc, SystemDescription):
        out["num_nodes"] = desc.num_nodes
        out["num_gpus_per_node"] = desc.num_gpus_per_node
        out["num_gpus"] = desc.num_gpus
        out["system_peak_flop_per_s"] = {d: v * desc.num_gpus for d, v in peaks.items()}
        out["node_network_bandwidth_bytes_per_s"] = (
            desc.inter_node.num_nics_per_node * desc.inter_node.nic_bandwidth_bytes_per_s)
    return out
