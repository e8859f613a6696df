"""Load a hardware description and a workload by name and simulate them with the engine that fits:
the multi-GPU engine for a system running a collective or a multi-GPU layout, the single-device engine
otherwise (a multi-GPU layout on one device is simulated whole on that device, with a warning). The one
place `gpusim run`, the plots, `gpusim compare` and sweeps decide this."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from gpusim.errors import KeyPathError

HARDWARE_ROOTS = ("gpu", "cpu", "num_nodes", "num_gpus_per_node", "intra_node", "inter_node", "host_cpu",
                  "num_cpus_per_node")
"""First key segments that belong to a hardware description; every other ``--set`` key is the workload's."""

SINGLE_DEVICE_LAYOUT = ("parallelism.data=1", "parallelism.tensor=1", "parallelism.pipeline=1",
                        "parallelism.context=1", "parallelism.expert=1", "parallelism.zero_stage=0")


SHARED_ROOTS = ("name", "description")
"""Top-level keys both a hardware description and a workload have: a ``--set`` of one says which
(``hardware.name=...`` or ``workload.name=...``)."""


def route_key(key: str) -> tuple[bool, str]:
    """(whether ``key`` is the hardware's, the key without its ``hardware.``/``workload.`` prefix), by its
    first segment; a bare ``name`` or ``description`` is refused (both files have one)."""
    root, _, rest = key.partition(".")
    if root in ("hardware", "workload") and rest:
        return root == "hardware", rest
    if root in SHARED_ROOTS:
        raise KeyPathError("--set", key, f"both the hardware and the workload have a {root}: write hardware.{key}=... "
                                        f"or workload.{key}=...")
    return root in HARDWARE_ROOTS, key


def split_overrides(pairs: Iterable[tuple[str, Any]]) -> tuple[list[tuple[str, Any]], list[str]]:
    """(hardware ``(key, value)`` pairs, workload ``KEY=VALUE`` strings), routed by :func:`route_key`."""
    hw: list[tuple[str, Any]] = []
    wl: list[str] = []
    for key, value in pairs:
        is_hardware, key = route_key(key)
        if is_hardware:
            hw.append((key, value))
        else:
            wl.append(f"{key}={'null' if value is None else value}")  # read back as YAML: None is null
    return hw, wl


def load_and_simulate(hardware_name: str, workload_name: str, hw_overrides: Sequence[Any] = (),
                      wl_items: Sequence[str] = (), *, launch_mode: str = "eager", unified_memory: bool = False,
                      record_spans: bool = False):
    """(hardware description, SimulationResult) for named (or path) hardware and workload."""
    from gpusim.config import load_hardware
    from gpusim.engine.simulate import simulate
    from gpusim.workload import load_workload

    hardware = load_hardware(hardware_name, list(hw_overrides))
    workload = load_workload(workload_name, list(wl_items))
    layout = getattr(workload, "parallelism", None)
    if hardware.kind == "system" and (workload.kind != "model" or layout.num_gpus > 1):
        from gpusim.engine.cluster import simulate_system

        return hardware, simulate_system(hardware, workload, launch_mode=launch_mode, record_spans=record_spans)
    notes: list[str] = []
    if hardware.kind == "system":
        notes.append(f"the layout uses 1 of the {hardware.num_gpus} GPUs of {hardware.name} (set parallelism.data, "
                     "tensor or pipeline to use more)")
    if layout is not None and layout.num_gpus > 1:
        # the single-device engine runs the whole graph: drop the layout so the memory footprint
        # describes what is simulated
        notes.append(f"the workload's layout (data {layout.data}, context {layout.context}, tensor {layout.tensor}, "
                     f"pipeline {layout.pipeline}, expert {layout.expert}) is for several GPUs; simulated here on one "
                     f"{hardware.name} device")
        workload = load_workload(workload_name, list(wl_items) + list(SINGLE_DEVICE_LAYOUT))
    return hardware, simulate(hardware, workload, launch_mode=launch_mode, unified_memory=unified_memory,
                              record_spans=record_spans, notes=tuple(notes))
