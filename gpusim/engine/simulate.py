"""Simulate a workload on one device: the host issues kernels, a compute stream runs them in order,
a copy engine moves data over the host link, and dependencies between ops are events.

Each distinct KernelPlan is simulated once (its own SimPy run, :func:`simulate_kernel`) and the
timing is reused for every launch of an identical kernel (the 96 identical layers of a transformer).
The timeline is a second SimPy run over streams: a kernel starts when the host has launched it, its
dependencies are done and the stream is free; eager launches cost ``kernel_launch_s`` of host time each,
launches from a compiled runtime ``native_kernel_launch_s``, CUDA-graph replays ``graph_kernel_launch_s``,
and back-to-back kernels on the device are separated by
at least the graph gap. Kernels shorter than the host's launch cost leave the GPU waiting (launch-bound).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import simpy

from gpusim.config.derived import peak_flop_per_s
from gpusim.config.hardware import LAUNCH_MODES, HardwareDescription
from gpusim.engine.kernel import KernelTiming, simulate_kernel
from gpusim.engine.machine import Machine, calibration_note, machine_of
from gpusim.errors import SimulationError
from gpusim.mapping import LINK_CATEGORIES, map_op
from gpusim.results.result import KernelRecord, SimulationResult, Span
from gpusim.units import plural

PRECISION_PEAK_DTYPE = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "bf16": "bf16", "fp8": "fp8"}


@dataclass(frozen=True)
class _Item:
    node: Any
    plan: Any  # KernelPlan | None for transfers
    timing: KernelTiming | None
    transfer_s: float
    launch_s: float


def opening_warnings(notes: tuple[str, ...], workload, machine: Machine) -> list[str]:
    """The warnings a run starts with, each once: the caller's ``notes``, the workload's own, and which
    of the device's rates no calibration fits (those run at datasheet peaks: times ideal)."""
    out = list(notes)
    calibration = calibration_note(machine)
    for note in (*getattr(workload, "notes", ()), *((calibration,) if calibration else ())):
        if note not in out:
            out.append(note)
    return out


def transfer_time_s(machine: Machine, num_bytes: float) -> float:
    """One host<->device copy over the host link: the calibrated fixed cost per copy, the link's
    latency and the bytes at the achievable rate."""
    return (machine.calibration.host_copy_overhead_s + machine.host_link_latency_s
            + num_bytes / machine.host_link_achievable_bytes_per_s)


def link_time_s(op, hardware: HardwareDescription, machine: Machine, launch_mode: str = "eager") -> float | None:
    """Seconds one link op (a host copy or a collective) takes; None when it is a no-op here."""
    if op.category == "transfer":
        return transfer_time_s(machine, float(op.link_bytes()))
    gpus = int(getattr(op, "num_gpus", 1) or 1)
    if gpus <= 1:
        return None
    if hardware.kind == "system" and gpus <= hardware.num_gpus:
        from gpusim.engine.collectives import fabric_of, plan_collective

        return plan_collective(op.kind, float(op.num_bytes), gpus, fabric_of(hardware, launch_mode)).time_s
    num_gpus = hardware.num_gpus if hardware.kind == "system" else 1
    raise SimulationError(
        f"{op.kind} across {gpus} GPUs needs a system description with at least {gpus} GPUs (e.g. dgx_h100); "
        f"{hardware.name} has {num_gpus}")


def _device(desc: HardwareDescription):
    return desc.cpu if desc.kind == "cpu" else desc.gpu


def model_peak_flop_per_s(device, device_name: str, precision: str, warnings: list[str]) -> float | None:
    """The peak MFU divides by: the device's dense rate in ``precision``'s math dtype. None, with a
    warning appended, when the device has no such rate (a T4 or a CPU without BF16 math runs the
    products in FP32 lanes): there is no peak for the MFU to be a fraction of."""
    dtype = PRECISION_PEAK_DTYPE.get(precision, "fp32")
    peak = peak_flop_per_s(device, dtype) or 0.0
    if peak > 0:
        return peak
    note = (f"{device_name} has no {dtype} math (the {dtype} products run in FP32 lanes): MFU, a fraction of "
            f"a {dtype} peak, is not defined")
    if note not in warnings:
        warnings.append(note)
    return None


def simulate(hardware: HardwareDescription, workload, *, launch_mode: str = "eager",
             unified_memory: bool = False, record_spans: bool = True, notes: tuple[str, ...] = ()
             ) -> SimulationResult:
    """Simulate ``workload`` (a loaded Workload) on ``hardware`` (a loaded description).

    ``notes`` are caller warnings carried into the result (e.g. a parallel layout that was dropped)."""
    if launch_mode not in LAUNCH_MODES:
        raise SimulationError(f"launch mode must be one of {', '.join(LAUNCH_MODES)}, not {launch_mode!r}")
    machine = machine_of(hardware)
    if getattr(getattr(workload, "spec", None), "tensor_instructions", "native") == "warp_mma":
        machine = machine.with_warp_mma_libraries()
    if getattr(getattr(workload, "spec", None), "fp8_promotion", "overlapped") == "in_series":
        machine = machine.with_in_series_fp8_promotion()
    warnings = opening_warnings(notes, workload, machine)

    # ---- memory: does it fit? ---------------------------------------------------------------
    memory = getattr(workload, "memory", None)
    peak_memory = float(memory.total_bytes) if memory is not None else _ops_footprint(workload)
    capacity = machine.dram_capacity_bytes
    fits = peak_memory <= capacity
    paging_fraction = 0.0
    if not fits:
        over = peak_memory - capacity
        if unified_memory and over > machine.host_memory_bytes:
            # the overflow has nowhere to page to: like a run that does not fit, timed as if it did
            warnings.append(
                f"does not fit even with unified memory: the {over / 2**30:.1f} GiB over device memory "
                f"({capacity / 2**30:.1f} GiB) exceed host memory ({machine.host_memory_bytes / 2**30:.1f} GiB); "
                "times assume it fit")
        elif unified_memory:
            paging_fraction = over / peak_memory
            warnings.append(
                f"working set {peak_memory / 2**30:.1f} GiB exceeds device memory {capacity / 2**30:.1f} GiB by "
                f"{over / 2**30:.1f} GiB; unified memory pages {paging_fraction:.0%} of DRAM traffic over the host link")
        else:
            warnings.append(
                f"does not fit: needs {peak_memory / 2**30:.1f} GiB, device has {capacity / 2**30:.1f} GiB "
                f"(short by {over / 2**30:.1f} GiB); times assume it fit (use unified memory to page)")

    # ---- map every op, simulate each distinct kernel once -------------------------------------
    launch_s = machine.host_launch_s(launch_mode)
    where = f"{workload.source}: " if getattr(workload, "source", None) else ""  # the file an error is in
    timings: dict[Any, KernelTiming] = {}
    items: list[_Item] = []
    for node in workload.graph.nodes:
        op = node.op
        if op.category in LINK_CATEGORIES:
            try:
                seconds = link_time_s(op, hardware, machine, launch_mode)
            except SimulationError as exc:
                raise SimulationError(f"{where}{node.name}: {exc}") from None
            if seconds is not None:
                items.append(_Item(node, None, None, seconds, 0.0))
            continue
        try:
            plans = map_op(op, machine)
        except SimulationError as exc:
            raise SimulationError(f"{where}{node.name}: {exc}") from None
        for plan in plans:
            timing = timings.get(plan)
            if timing is None:
                timing = timings[plan] = simulate_kernel(plan, machine)
            items.append(_Item(node, plan, timing, 0.0, launch_s))

    # ---- timeline ----------------------------------------------------------------------------
    records, spans, breakdown, total = _timeline(machine, items, paging_fraction, launch_mode, record_spans)

    result_kwargs: dict[str, Any] = {}
    if getattr(workload, "kind", "ops") == "model":
        step = total
        precision = getattr(workload.spec, "precision", "fp32")
        peak = model_peak_flop_per_s(_device(hardware), machine.name, precision, warnings)
        result_kwargs = {
            "step_time_s": step,
            "samples_per_s": workload.samples_per_step / step if step > 0 else 0.0,
            "tokens_per_s": (workload.tokens_per_step / step) if getattr(workload, "tokens_per_step", None) else None,
            "mfu_fraction": (workload.model_flop_per_step / (step * peak) if step > 0 else 0.0) if peak else None,
        }
    memory_dict = {}
    if memory is not None:
        memory_dict = {k: float(getattr(memory, k)) for k in
                       ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                        "kv_cache_bytes", "workspace_bytes", "total_bytes") if hasattr(memory, k)}
    return SimulationResult(
        hardware=hardware.name,
        workload=workload.name,
        total_time_s=total,
        kernels=tuple(records),
        peak_memory_bytes=peak_memory,
        memory_capacity_bytes=capacity,
        fits_in_memory=fits,
        launch_mode=launch_mode,
        calibration_source=machine.calibration.source,
        memory=memory_dict,
        time_breakdown_s=breakdown,
        warnings=tuple(warnings),
        spans=tuple(spans),
        num_unique_kernels=len(timings),
        **result_kwargs,
    )


def _ops_footprint(workload) -> float:
    """Device memory of a plain op list: every op's inputs and outputs resident at once (upper bound)."""
    return float(sum(n.op.bytes_read() + n.op.bytes_written() for n in workload.graph.nodes
                     if n.op.category not in LINK_CATEGORIES))


def _timeline(machine: Machine, items: list[_Item], paging_fraction: float, launch_mode: str,
              record_spans: bool):
    env = simpy.Environment()
    compute_queue: simpy.Store = simpy.Store(env)
    copy_queue: simpy.Store = simpy.Store(env)
    node_done: dict[str, simpy.Event] = {}
    remaining_parts: dict[str, int] = {}
    for it in items:
        remaining_parts[it.node.name] = remaining_parts.get(it.node.name, 0) + 1
        node_done.setdefault(it.node.name, env.event())
    records: list[KernelRecord] = []
    spans: list[Span] = []
    breakdown = {"compute": 0.0, "memory": 0.0, "latency": 0.0, "launch": 0.0, "transfer": 0.0, "paging": 0.0}
    device_gap = machine.graph_kernel_launch_s

    def finish_part(name: str) -> None:
        remaining_parts[name] -= 1
        if remaining_parts[name] == 0 and not node_done[name].triggered:
            node_done[name].succeed()

    def deps_of(node):
        return [node_done[d] for d in getattr(node, "after", ()) if d in node_done]

    def host():
        for it in items:
            repeat = max(1, int(getattr(it.node, "repeat", 1)))
            if it.plan is None:
                copy_queue.put((it, env.now))
                continue
            yield env.timeout(it.launch_s)
            issued = env.now
            if record_spans:
                spans.append(Span("host", f"launch {it.plan.op_kind}", issued - it.launch_s, issued))
            compute_queue.put((it, issued))
            if repeat > 1:
                yield env.timeout(it.launch_s * (repeat - 1))
        compute_queue.put(None)
        copy_queue.put(None)

    def copy_engine():
        while True:
            entry = yield copy_queue.get()
            if entry is None:
                return
            it, _ = entry
            deps = deps_of(it.node)
            if deps:
                yield simpy.AllOf(env, deps)
            repeat = max(1, int(getattr(it.node, "repeat", 1)))
            start = env.now
            yield env.timeout(it.transfer_s * repeat)
            op = it.node.op
            # the bytes one launch moves over its link: a host copy's buffer, a collective's wire bytes per GPU
            link_bytes = op.wire_bytes_per_gpu() if op.category == "collective" else op.link_bytes()
            records.append(_record(it, start, env.now - start, repeat, "memory",
                                   {"engine": "copy", "link_bytes_per_launch": float(link_bytes)}, 0.0))
            if record_spans:
                spans.append(Span("host link", f"{it.node.op.kind} {it.node.name}", start, env.now))
            finish_part(it.node.name)

    compute_end = [0.0]

    def compute_stream():
        last_end = 0.0
        while True:
            entry = yield compute_queue.get()
            if entry is None:
                compute_end[0] = last_end
                return
            it, issued = entry
            # the stream's idle time before this kernel: waiting for the host's launch, then for the
            # copies or collectives it depends on, then the device-side launch gap
            dequeued = env.now
            breakdown["launch"] += max(0.0, min(dequeued, issued) - last_end)
            deps = [d for d in deps_of(it.node) if not d.triggered]
            if deps:
                yield simpy.AllOf(env, deps)
            breakdown["transfer"] += env.now - dequeued
            repeat = max(1, int(getattr(it.node, "repeat", 1)))
            timing = it.timing
            kernel_s = timing.time_s
            paging_s = paging_fraction * timing.dram_bytes / machine.host_link_achievable_bytes_per_s
            per_launch = kernel_s + paging_s
            start = max(env.now, last_end + device_gap)
            gap = start - last_end if records else 0.0
            breakdown["launch"] += start - env.now
            yield env.timeout(start - env.now)
            # Repeated launches: the device runs them back to back unless the host cannot keep up.
            busy = repeat * (per_launch + device_gap) - device_gap
            host_bound = (repeat - 1) * it.launch_s + per_launch
            duration = max(busy, host_bound)
            yield env.timeout(duration)
            last_end = env.now
            launch_bound = (gap > per_launch and gap > device_gap * 1.5) or host_bound > busy
            bound = "launch" if launch_bound else timing.bound
            breakdown[timing.bound] += repeat * kernel_s
            breakdown["paging"] += repeat * paging_s
            breakdown["launch"] += duration - repeat * per_launch  # device gaps between repeats, host-bound waits
            records.append(_record(it, start, duration, repeat, bound,
                                   {**it.plan.describe(), "compute_limiter": timing.compute_limiter,
                                    "memory_limiter": timing.memory_limiter}, gap))
            if record_spans:
                spans.append(Span("stream 0", it.plan.name, start, env.now,
                                  (("bound", bound), ("repeat", repeat))))
                for w in timing.spans:
                    spans.append(Span("SMs", f"{plural(w.num_ctas, 'CTA')} x {plural(w.num_waves, 'wave')}",
                                      start + w.start_s, start + w.end_s,
                                      (("limiter", w.limiter), ("ctas", w.num_ctas),
                                       ("occupancy_fraction", w.num_ctas / (it.plan.ctas_per_unit * machine.num_units)))))
                if duration > 0:
                    spans.append(Span("HBM", f"{timing.dram_bytes / duration / 1e9:.0f} GB/s", start, env.now,
                                      (("utilization_fraction",
                                        timing.dram_bytes * repeat / (duration * machine.dram_bandwidth_bytes_per_s)),)))
                    spans.append(Span("L2", f"hit {it.plan.l2_hit_fraction:.0%}", start, env.now,
                                      (("hit_fraction", it.plan.l2_hit_fraction),)))
            finish_part(it.node.name)

    env.process(host())
    env.process(copy_engine())
    env.process(compute_stream())
    env.run()
    breakdown["transfer"] += env.now - compute_end[0]  # copies (or collectives) after the last kernel
    records.sort(key=lambda r: r.start_s)
    return records, spans, breakdown, env.now


def _record(it: _Item, start: float, duration: float, repeat: int, bound: str, plan: dict, gap: float) -> KernelRecord:
    node = it.node
    executed = None
    if it.plan is None:
        flop, dram, hit, name = float(node.op.flop()) * repeat, 0.0, 0.0, node.op.kind
    else:
        flop = it.plan.useful_flop * repeat
        executed = it.plan.work_flop * repeat
        dram = it.plan.dram_bytes * repeat
        hit = it.plan.l2_hit_fraction
        name = it.plan.name
    return KernelRecord(
        name=name,
        op=node.op.kind,
        node=node.name,
        phase=getattr(node, "phase", "single"),
        layer=getattr(node, "layer", None),
        start_s=start,
        time_s=duration,
        repeat=repeat,
        flop=flop,
        dram_bytes=dram,
        l2_hit_fraction=hit,
        bound=bound,
        plan=plan,
        launch_gap_s=gap,
        executed_flop=executed,
    )
