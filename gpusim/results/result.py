"""Frozen simulation results and their plain-data (JSON-ready) form."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Span:
    """An interval on a trace track (a wave of CTAs, a copy, a host launch)."""

    track: str
    name: str
    start_s: float
    end_s: float
    args: tuple[tuple[str, Any], ...] = ()


_STAGE_TRACK = re.compile(r"^stage (\d+) (.+)$")


def stage_track(stage: int, track: str) -> str:
    """The name of a multi-GPU step's track on the GPUs of pipeline stage ``stage`` (``stage 1 compute``)."""
    return f"stage {stage} {track}"


def track_stage(track: str) -> tuple[int | None, str]:
    """``(stage, track)`` of a :func:`stage_track` name; ``(None, track)`` for a device's own track."""
    m = _STAGE_TRACK.match(track)
    return (int(m.group(1)), m.group(2)) if m else (None, track)


@dataclass(frozen=True)
class KernelRecord:
    name: str
    op: str
    node: str
    phase: str
    layer: int | None
    start_s: float
    time_s: float
    """Total time of this kernel over all its launches (``repeat``)."""
    repeat: int
    flop: float
    dram_bytes: float
    l2_hit_fraction: float
    bound: str
    plan: dict[str, Any]
    launch_gap_s: float = 0.0
    executed_flop: float | None = None
    """FLOP the kernel really executes (differs from ``flop`` for causal fused attention)."""
    energy_j: float | None = None
    """Energy of all launches (dynamic + static), set by :func:`gpusim.energy.with_energy`."""
    avg_power_w: float | None = None

    @property
    def on_link(self) -> bool:
        """A host copy or a collective: time on a link (the copy engine's queue), not a kernel on the SMs."""
        return (self.plan or {}).get("engine") == "copy"

    @property
    def achieved_flop_per_s(self) -> float:
        work = self.flop if self.executed_flop is None else self.executed_flop
        return work / self.time_s if self.time_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "op": self.op,
            "node": self.node,
            "phase": self.phase,
            "layer": self.layer,
            "start_s": self.start_s,
            "time_s": self.time_s,
            "repeat": self.repeat,
            "flop": self.flop,
            "executed_flop": self.flop if self.executed_flop is None else self.executed_flop,
            "dram_bytes": self.dram_bytes,
            "l2_hit_fraction": self.l2_hit_fraction,
            "achieved_flop_per_s": self.achieved_flop_per_s,
            "achieved_dram_bytes_per_s": self.dram_bytes / self.time_s if self.time_s > 0 else 0.0,
            "bound": self.bound,
            "launch_gap_s": self.launch_gap_s,
            **({"energy_j": self.energy_j, "avg_power_w": self.avg_power_w} if self.energy_j is not None else {}),
            **self.plan,
        }


@dataclass(frozen=True)
class SimulationResult:
    hardware: str
    workload: str
    total_time_s: float
    kernels: tuple[KernelRecord, ...]
    peak_memory_bytes: float
    memory_capacity_bytes: float
    fits_in_memory: bool
    launch_mode: str
    calibration_source: str
    step_time_s: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    mfu_fraction: float | None = None
    memory: dict[str, float] = field(default_factory=dict)
    time_breakdown_s: dict[str, float] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    spans: tuple[Span, ...] = ()
    num_unique_kernels: int = 0
    # multi-GPU (gpusim.engine.cluster); absent for single-device runs
    num_gpus: int = 1
    parallelism: dict[str, Any] = field(default_factory=dict)
    link_utilization: dict[str, float] = field(default_factory=dict)
    """Busy fraction of each representative port over the step (per direction)."""
    algbw_bytes_per_s: float | None = None
    busbw_bytes_per_s: float | None = None
    collective_algorithm: str | None = None
    collective_loops: int | None = None
    """Loops of chunks the collective moves its message in, each paying its own latency (NVLS)."""
    # energy, power and cost (gpusim.energy.with_energy); absent unless computed
    energy_j: float | None = None
    avg_power_w: float | None = None
    """Per device, over the run."""
    peak_power_w: float | None = None
    """Highest kernel average power of one device."""
    flop_per_j: float | None = None
    energy_breakdown_j: dict[str, float] = field(default_factory=dict)
    tdp_w: float | None = None
    """Power cap applied (the description's TDP unless overridden)."""
    clock_fraction_min: float | None = None
    """Lowest clock fraction the power cap chose (1.0: no kernel throttled)."""
    price_usd_per_s: float | None = None
    """Price of one device-second."""
    cost_usd: float | None = None
    """Cost of the run (one step for a model workload) on all its devices."""

    @property
    def total_flop(self) -> float:
        return sum(k.flop for k in self.kernels)

    @property
    def total_dram_bytes(self) -> float:
        return sum(k.dram_bytes for k in self.kernels)

    @property
    def num_kernel_launches(self) -> int:
        """Kernel launches, each record's repeats counted (host copies and collectives are not kernels)."""
        return sum(max(1, int(k.repeat)) for k in self.kernels if not k.on_link)

    @property
    def num_link_ops(self) -> int:
        """Host copies and collectives, repeats counted."""
        return sum(max(1, int(k.repeat)) for k in self.kernels if k.on_link)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "hardware": self.hardware,
            "workload": self.workload,
            "total_time_s": self.total_time_s,
            "total_flop": self.total_flop,
            "total_dram_bytes": self.total_dram_bytes,
            "peak_memory_bytes": self.peak_memory_bytes,
            "memory_capacity_bytes": self.memory_capacity_bytes,
            "fits_in_memory": self.fits_in_memory,
            "launch_mode": self.launch_mode,
            "calibration_source": self.calibration_source,
            "num_kernel_records": len(self.kernels),
            "num_kernel_launches": self.num_kernel_launches,
            "num_link_ops": self.num_link_ops,
            "num_unique_kernels": self.num_unique_kernels,
            "time_breakdown_s": dict(self.time_breakdown_s),
            "memory": dict(self.memory),
            "warnings": list(self.warnings),
        }
        if self.step_time_s is not None:
            out["step_time_s"] = self.step_time_s
            out["samples_per_s"] = self.samples_per_s
            if self.tokens_per_s is not None:
                out["tokens_per_s"] = self.tokens_per_s
            out["mfu_fraction"] = self.mfu_fraction
        if self.num_gpus > 1 or self.parallelism:
            out["num_gpus"] = self.num_gpus
            out["parallelism"] = dict(self.parallelism)
            out["link_utilization"] = dict(self.link_utilization)
        if self.algbw_bytes_per_s is not None:
            out["algbw_bytes_per_s"] = self.algbw_bytes_per_s
            out["busbw_bytes_per_s"] = self.busbw_bytes_per_s
            out["collective_algorithm"] = self.collective_algorithm
            out["collective_loops"] = self.collective_loops
        if self.energy_j is not None:
            out["energy_j"] = self.energy_j
            out["avg_power_w"] = self.avg_power_w
            out["peak_power_w"] = self.peak_power_w
            out["flop_per_j"] = self.flop_per_j
            out["energy_breakdown_j"] = dict(self.energy_breakdown_j)
            out["tdp_w"] = self.tdp_w
            out["clock_fraction_min"] = self.clock_fraction_min
        if self.cost_usd is not None:
            out["price_usd_per_s"] = self.price_usd_per_s
            out["cost_usd"] = self.cost_usd
        out["kernels"] = [k.to_dict() for k in self.kernels]
        return out
