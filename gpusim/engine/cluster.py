"""Simulate a workload on a multi-GPU system: data, tensor, pipeline and expert parallelism at any scale.

Symmetry keeps it small. Every GPU of a pipeline stage runs the same kernels (tensor-parallel shards
are equal, data-parallel replicas identical), so the engine simulates **one representative GPU per
pipeline stage**: its kernels are timed by the single-GPU engine (:func:`gpusim.engine.simulate.simulate`,
one transformer block, the embedding and the head, each once), and its collectives run as fluid flows
over the representative's NVLink and network ports (:mod:`gpusim.engine.collectives`), where the
tensor-parallel all-reduces, the pipeline sends and the overlapped data-parallel gradient reduction
share bandwidth. A SimPy run plays the pipeline schedule (GPipe, 1F1B, interleaved) over the stages;
bubbles are what the schedule leaves idle, not a formula. 10,240 GPUs cost what 16 stages cost.

Rank layout follows Megatron-LM: tensor-parallel ranks are adjacent (inside a node), then data-parallel,
then pipeline; a group whose stride times size exceeds a node spans nodes and uses the network.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import simpy

from gpusim.engine.collectives import (CollectivePlan, Fabric, fabric_of, intra_node_all_reduce_plan,
                                       plan_collective)
from gpusim.engine.fluid import FluidSystem
from gpusim.engine.machine import machine_of
from gpusim.engine.simulate import model_peak_flop_per_s, opening_warnings, simulate
from gpusim.errors import ConfigError, SimulationError
from gpusim.results.result import SimulationResult, Span, stage_track
from gpusim.workload.graph import OpNode, WorkloadGraph
from gpusim.workload.schedule import pipeline_order

# ------------------------------------------------------------------------------------ stage model


@dataclass(frozen=True)
class LayerCollective:
    """A blocking collective of one layer's pass and where it falls in the layer's compute."""

    plan: CollectivePlan
    at: float = 1.0
    """The fraction of the compute done when it starts (a block's first tensor-parallel all-reduce
    after its attention, the second after its MLP); 1: after the compute."""
    until: float | None = None
    """The fraction of the compute by which it must have ended: one that may end after it starts runs
    beside the compute between the two (Megatron-LM's input-gradient all-reduce beside the
    weight-gradient GEMM). None: it ends where it starts, holding the compute."""

    def __post_init__(self):
        if not (0 <= self.at <= 1 and (self.until is None or 0 <= self.until <= 1)):
            raise ValueError("a collective's positions must be fractions of the compute in [0, 1]")
        if self.until is not None and self.until < self.at:
            raise ValueError("a collective cannot have to end before it starts")

    @property
    def end(self) -> float:
        """The fraction of the compute by which it must have ended."""
        return self.at if self.until is None else self.until


@dataclass(frozen=True)
class LayerRing:
    """One attention's context-parallel ring in a layer's pass (a backward with a recompute has two):
    its traffic beside the compute from where the attention starts (it shares the ports with the
    other flows), and what the compute waits for it beyond the attention steps it overlaps, where the
    attention ends."""

    plan: CollectivePlan | None = None
    wait_s: float = 0.0
    at: float = 1.0
    """The fraction of the layer's compute done when the attention ends."""
    start: float = 0.0
    """The fraction done when the attention starts."""

    def __post_init__(self):
        if not (0 <= self.start <= self.at <= 1 and self.wait_s >= 0):
            raise ValueError("a ring runs from its attention's start to its end, fractions of the compute in "
                             "[0, 1], and waits a non-negative time")


@dataclass
class ChunkModel:
    """One model chunk on one representative GPU, per micro-batch.

    A pass runs the chunk's layers in turn (the forward from the embedding, the backward from the
    head): each layer's compute, with its blocking collectives where they fall in it."""

    forward_s: float
    backward_s: float
    """Backward including recompute."""
    num_layers: int
    layer_comm_forward: tuple[tuple[LayerCollective, ...], ...] = ()
    """The blocking collectives of each layer's forward (tensor-parallel all-reduces, expert
    all-to-alls, context-parallel gathers), each with where it falls in the layer's compute, layer by
    layer in the forward's order. Empty: none."""
    layer_comm_backward: tuple[tuple[LayerCollective, ...], ...] = ()
    """The same for the backward, layer by layer in the backward's order (the head's first)."""
    forward_layer_s: tuple[float, ...] = ()
    """Each layer's forward compute in the forward's order. Empty: ``forward_s`` split evenly."""
    backward_layer_s: tuple[float, ...] = ()
    """Each layer's backward compute (with its recompute) in the backward's order. Empty: even."""
    grad_bytes: float = 0.0
    """Gradient bytes this GPU holds for the chunk (data-parallel reduction)."""
    param_bytes: float = 0.0
    layer_param_bytes: tuple[float, ...] = ()
    """Each layer's share of ``param_bytes`` in the forward's order (what ZeRO-3 gathers before the
    layer runs). Empty: even."""
    grad_layers: tuple[tuple[float, ...], ...] = ()
    """Gradient bytes per weight tensor, layer by layer, in the order the backward finishes them (the
    head's first, the embedding's last); buckets fill tensor by tensor, as PyTorch DDP's and
    Megatron-LM's do. Empty: ``grad_bytes`` spread evenly over ``num_layers`` layers."""
    grad_layers_at: tuple[tuple[float, ...], ...] = ()
    """Where in its layer's backward each of ``grad_layers``' gradients is finished, as the fraction of
    the backward's compute done (the end of its weight-gradient kernel). Empty: at a steady rate of
    bytes through the layer's backward."""
    send_bytes: float = 0.0
    """Activation bytes each GPU sends to the next pipeline stage per micro-batch (and gradients back):
    its tensor-parallel rank's share."""
    layer_ring_forward: tuple[tuple[LayerRing, ...], ...] = ()
    """The context-parallel rings of each layer's forward, layer by layer in the forward's order (none
    where a layer has no attention). Empty: none."""
    layer_ring_backward: tuple[tuple[LayerRing, ...], ...] = ()
    """The same for the backward, in the backward's order."""
    layer_names: tuple[str, ...] = ()
    """The layers' names in the forward's order, for the trace. Empty: ``layer 0``, ``layer 1``..."""
    first_forward_s: float = 0.0
    """Compute the first micro-batch's forward runs before its layers, once per step: the chunk's FP8
    weight casts where the copies are kept for the other micro-batches."""

    def __post_init__(self):
        n = self.num_layers
        for total, layers in ((self.forward_s, self.forward_layer_s), (self.backward_s, self.backward_layer_s)):
            if layers and not math.isclose(sum(layers), total, rel_tol=1e-9, abs_tol=1e-15):
                raise ValueError(f"ChunkModel's layer times add up to {sum(layers)} s, not the pass's {total} s")
        for name in ("layer_comm_forward", "layer_comm_backward", "forward_layer_s", "backward_layer_s",
                     "layer_param_bytes", "grad_layers", "grad_layers_at", "layer_names", "layer_ring_forward",
                     "layer_ring_backward"):
            if getattr(self, name) and len(getattr(self, name)) != n:
                raise ValueError(f"ChunkModel.{name} has {len(getattr(self, name))} entries for {n} layers")
        if any(not isinstance(c, LayerCollective) for layers in (self.layer_comm_forward, self.layer_comm_backward)
               for layer in layers for c in layer):
            raise TypeError("ChunkModel's layer collectives are LayerCollective: a plan and where it runs")
        if any(not isinstance(x, LayerRing) for layers in (self.layer_ring_forward, self.layer_ring_backward)
               for layer in layers for x in layer):
            raise TypeError("ChunkModel's rings are LayerRing: traffic and a wait, and where they run")

    def layer_steps(self, kind: str) -> list[LayerStep]:
        """The pass's layers in the order it runs them (``kind`` "F" or "B"), comm plans not merged."""
        n = max(1, self.num_layers)
        forward = kind == "F"
        total = self.forward_s if forward else self.backward_s
        times = (self.forward_layer_s if forward else self.backward_layer_s) or (total / n,) * n
        comm = (self.layer_comm_forward if forward else self.layer_comm_backward) or ((),) * n
        params = self.layer_param_bytes or (self.param_bytes / n,) * n
        names = self.layer_names or tuple(f"layer {j}" for j in range(n))
        if not forward:  # given in the forward's order
            params, names = params[::-1], names[::-1]
        grads = self.grad_layers or ((self.grad_bytes / n,),) * n
        grads_at = self.grad_layers_at or ((),) * n
        ring = (self.layer_ring_forward if forward else self.layer_ring_backward) or ((),) * n
        return [LayerStep(names[j], times[j], comm[j], params[j], grads[j] if not forward else (), ring[j],
                          grads_at[j] if not forward else ()) for j in range(n)]


@dataclass(frozen=True)
class LayerStep:
    """One layer of a pass: its compute and its blocking collectives, each where it falls in the
    compute."""

    name: str
    compute_s: float
    comm: tuple[LayerCollective, ...]
    param_bytes: float
    grad_tensor_bytes: tuple[float, ...]
    """Backward only: the bytes of each weight gradient it finishes, in order."""
    rings: tuple[LayerRing, ...] = ()
    """The context-parallel rings beside the compute."""
    grad_tensor_at: tuple[float, ...] = ()
    """The fraction of the compute at which each gradient tensor is finished (empty: a steady rate)."""

    def comm_groups(self) -> list[tuple[float, float, tuple[CollectivePlan, ...]]]:
        """The layer's collectives by where they run in its compute: (fraction done when they start,
        fraction by which they must end, plans), in order."""
        groups: dict[tuple[float, float], list[CollectivePlan]] = {}
        for c in self.comm:
            groups.setdefault((c.at, c.end), []).append(c.plan)
        return [(a, b, tuple(groups[a, b])) for a, b in sorted(groups)]


@dataclass
class StageModel:
    chunks: list[ChunkModel]
    optimizer_s: float = 0.0
    grad_norm_s: float = 0.0
    """The part of ``optimizer_s`` that takes the stage's local gradient norm, before the norm's
    all-reduce (``LayoutPlan.norm_plan``); the rest, the update, runs after it."""

    def __post_init__(self):
        if not 0 <= self.grad_norm_s <= self.optimizer_s:
            raise ValueError("StageModel's gradient norm is part of its optimizer time")


@dataclass
class LayoutPlan:
    """Collective plans and placement the step needs (all per representative GPU)."""

    schedule: str
    num_stages: int
    num_microbatches: int
    num_chunks: int
    zero_stage: int = 0
    overlap: bool = True
    tp_overlap: bool = False
    p2p_overlap: bool = False
    """Sends between stages run beside the sender's next compute; off, the sender waits for them."""
    bucket_bytes: float = 25e6
    dp_plan: Any = None  # callable(collective, bytes) -> CollectivePlan over the data-parallel group
    p2p_plan: Any = None  # callable(bytes, from stage, to stage) -> CollectivePlan of a send between stages
    tied_plan: Any = None
    """The all-reduce of tied embedding gradients between the first and the last stage, which each
    hold a copy (Megatron-LM's embedding group), after their gradients are reduced and before the
    optimizer; None: no such copy."""
    norm_plan: Any = None
    """The all-reduce of the gradient norm's local sums over every GPU holding a distinct share of
    the gradients: every stage takes its local norm, then waits for all of them and this all-reduce
    before its update (gradient clipping); None: no global norm, or no other GPU to reduce it with."""


@dataclass
class StepStats:
    step_s: float
    compute_s: float
    exposed_comm_s: float
    bubble_s: float
    optimizer_s: float
    link_utilization: dict[str, float]
    spans: list[Span]


def _ports(stage: int) -> tuple[str, str, str, str]:
    return (f"stage{stage}.nvlink_tx", f"stage{stage}.nvlink_rx", f"stage{stage}.nic_tx", f"stage{stage}.nic_rx")


def run_step(fabric: Fabric | None, stages: list[StageModel], lp: LayoutPlan, *, record_spans: bool = False
             ) -> StepStats:
    """Play one training step of the pipeline schedule in SimPy (one representative GPU per stage)."""
    env = simpy.Environment()
    p, m, v = lp.num_stages, lp.num_microbatches, lp.num_chunks
    intra_cap = fabric.intra_port_bytes_per_s if fabric and fabric.intra_port_bytes_per_s > 0 else 1e12
    nic_cap = fabric.nic_port_bytes_per_s if fabric and fabric.nic_port_bytes_per_s > 0 else 1e12
    caps = {}
    for s in range(p):
        a, b, c, d = _ports(s)
        caps.update({a: intra_cap, b: intra_cap, c: nic_cap, d: nic_cap})
    fluid = FluidSystem(env, caps)
    spans: list[Span] = []
    fwd_done = {(i, vs): env.event() for i in range(m) for vs in range(p * v)}
    fwd_arrived = {(i, vs): env.event() for i in range(m) for vs in range(p * v)}
    bwd_arrived = {(i, vs): env.event() for i in range(m) for vs in range(p * v)}
    stats = [{"compute": 0.0, "comm": 0.0, "bubble": 0.0, "optimizer": 0.0, "end": 0.0} for _ in range(p)]

    sm_fraction = fabric.collective_sm_fraction if fabric is not None else 0.0
    collectives_running = [0] * p
    computing: list[Any] = [None] * p
    """The process computing on each stage, if any: a collective kernel starting or ending there
    interrupts it to change its rate."""

    def collective_kernel(s: int, delta: int):
        collectives_running[s] += delta
        if sm_fraction > 0 and computing[s] is not None:
            computing[s].interrupt()
            computing[s] = None

    def compute_for(s: int, seconds: float):
        """Run ``seconds`` of compute on stage ``s``. While collective kernels run there they hold
        ``sm_fraction`` of the SMs, so the compute advances at the remaining share; the extra time
        is exposed communication."""
        remaining = seconds
        t0 = env.now
        while remaining > 0:
            rate = 1.0 - sm_fraction if collectives_running[s] else 1.0
            start = env.now
            computing[s] = env.active_process
            try:
                yield env.timeout(remaining / rate)
            except simpy.Interrupt:
                remaining -= (env.now - start) * rate
                continue
            computing[s] = None
            break
        stats[s]["compute"] += seconds
        stats[s]["comm"] += max(0.0, env.now - t0 - seconds)  # float noise of the interrupted timeouts

    def port_bytes(plan: CollectivePlan) -> tuple[float, float]:
        """(NVLink, network) bytes of ``plan`` at the ports' full rates: its bytes scaled by how far
        its own rate falls short of the port's, so a port carries it for as long as it takes."""
        intra = plan.intra_bytes * intra_cap / plan.intra_bytes_per_s if plan.intra_bytes > 0 else 0.0
        nic = plan.nic_bytes * nic_cap / plan.nic_bytes_per_s if plan.nic_bytes > 0 else 0.0
        return intra, nic

    def flow(plan: CollectivePlan, src: int, dst: int | None = None, label: str = ""):
        """Run ``plan`` on the ports of stage ``src`` (and ``dst`` for a send): latency, then a fluid flow.
        A collective's kernel holds its SMs from launch to end (point-to-point sends are copies of a few
        CTAs and are not counted)."""
        start = env.now
        holds_sms = sm_fraction > 0 and plan.collective != "send_recv"
        if holds_sms:
            collective_kernel(src, +1)
        if plan.latency_s > 0:
            yield env.timeout(plan.latency_s)
        demands: dict[str, float] = {}
        tx_i, rx_i, tx_n, rx_n = _ports(src)
        rd = _ports(dst if dst is not None else src)
        intra, nic = port_bytes(plan)
        if intra > 0:
            demands[tx_i] = demands.get(tx_i, 0.0) + intra
            demands[rd[1]] = demands.get(rd[1], 0.0) + intra
        if nic > 0:
            demands[tx_n] = demands.get(tx_n, 0.0) + nic
            demands[rd[3]] = demands.get(rd[3], 0.0) + nic
        if demands:
            # work in seconds on its busiest port (the one that limits it alone): flows limited by the
            # same port get equal bytes per second there, as NCCL's connections do, so a small send
            # beside a large all-reduce takes its share of the port, not a share in proportion to size
            size = max(v / caps[k] for k, v in demands.items())
            if size > 0:  # (a few bytes can take less than the smallest float of seconds)
                f = fluid.add_flow(1.0, size, {k: v / size for k, v in demands.items()}, max_rate=1e30,
                                   label=label)
                yield f.done
        if holds_sms:
            collective_kernel(src, -1)
        if record_spans:
            # on the sending GPU's port, and for a send between stages on the receiver's too
            port = "network port" if plan.nic_bytes > 0 else "NVLink port"
            args = (("algorithm", plan.algorithm), ("protocol", plan.protocol), ("bytes", plan.num_bytes))
            spans.append(Span(stage_track(src, port), f"{plan.collective} {label}", start, env.now, args))
            if dst is not None and dst != src:
                spans.append(Span(stage_track(dst, port), f"{plan.collective} {label} from stage {src}", start,
                                  env.now, args))

    def merged(plans: tuple[CollectivePlan, ...]) -> tuple[CollectivePlan, ...]:
        """One layer's blocking collectives as few flows, run in turn: those that use the same ports
        (NVLink only, network only, or both at once, as a hierarchical collective does) merge into one
        flow with their bytes, each part at its own rate, and the sum of their latencies."""
        groups: dict[tuple[bool, bool], list[CollectivePlan]] = {}
        for x in plans:
            groups.setdefault((x.intra_bytes > 0, x.nic_bytes > 0), []).append(x)
        out = []
        for group in groups.values():
            lat = sum(x.latency_s for x in group)
            intra, nic = (sum(b) for b in zip(*(port_bytes(x) for x in group)))
            first = group[0]
            name = "+".join(dict.fromkeys(x.collective for x in group))
            out.append(CollectivePlan(name, first.algorithm, first.protocol, sum(x.num_bytes for x in group),
                                      first.num_gpus, lat, intra, nic, intra_cap, nic_cap))
        return tuple(out)

    def flows_in_turn(plans: tuple[CollectivePlan, ...], s: int, label: str):
        for plan in plans:
            yield from flow(plan, s, label=label)

    # each pass's layers with their collectives merged, per stage, chunk and kind
    passes = [[{kind: [(step, [(a, b, merged(plans)) for a, b, plans in step.comm_groups()])
                       for step in ch.layer_steps(kind)] for kind in "FB"}
               for ch in st.chunks] for st in stages]
    dp_queues = [simpy.Store(env) for _ in range(p)]
    dp_pending = [0] * p
    dp_idle = [env.event() for _ in range(p)]
    for ev in dp_idle:
        ev.succeed()

    def dp_stream(s: int):
        while True:
            item = yield dp_queues[s].get()
            if item is None:
                return
            plan, label = item
            yield from flow(plan, s, label=label)
            dp_pending[s] -= 1
            if dp_pending[s] == 0 and not dp_idle[s].triggered:
                dp_idle[s].succeed()

    def submit(s: int, plan: CollectivePlan | None, label: str):
        if plan is None:
            return
        if dp_pending[s] == 0:
            dp_idle[s] = env.event()
        dp_pending[s] += 1
        dp_queues[s].put((plan, label))

    def send(s: int, plan: CollectivePlan, event: simpy.Event, dst: int, label: str):
        yield from flow(plan, s, dst, label)
        event.succeed()

    def run_pass(s: int, kind: str, c: int, layers: list, reduce_grads: bool, name: str):
        """Run one forward or backward pass of chunk ``c`` on stage ``s``, layer by layer: ZeRO-3's
        gather of the layer's weights, its compute with its blocking collectives where they fall in it
        (beside the compute with ``tp_overlap``), and in the backward ZeRO-3's reduce-scatter of its
        gradients. ``reduce_grads``
        (the last micro-batch's backward, ZeRO 0-2): gradient buckets reduce as they fill."""
        zero3 = lp.zero_stage == 3 and lp.dp_plan is not None

        def label(what: str, j: int) -> str:
            """``zero3 F0 layer 12``; a layer's own collectives (tensor-, expert- or context-parallel)
            by their kind alone: ``all_reduce F0 layer 12``."""
            return " ".join(x for x in (what, name, layers[j][0].name) if x)

        gathered: list[simpy.Event] = []
        started: list[simpy.Event] = []
        if zero3 and lp.overlap:
            # FSDP's prefetch: one stream of gathers, each layer's starting once the layer before it
            # has started computing, so it runs beside that layer
            gathered = [env.event() for _ in layers]
            started = [env.event() for _ in layers]

            def gather_stream():
                for j, (step, _) in enumerate(layers):
                    if j > 0:
                        yield started[j - 1]
                    if step.param_bytes > 0:
                        yield from flow(lp.dp_plan("all_gather", step.param_bytes), s, label=label("zero3", j))
                    gathered[j].succeed()
            env.process(gather_stream())
        collective = "all_reduce" if lp.zero_stage == 0 else "reduce_scatter"
        bucket = 0.0

        for j, (step, groups) in enumerate(layers):
            if zero3:
                t1 = env.now
                if gathered:
                    yield gathered[j]
                    started[j].succeed()
                elif step.param_bytes > 0:
                    yield from flow(lp.dp_plan("all_gather", step.param_bytes), s, label=label("zero3", j))
                stats[s]["comm"] += env.now - t1
            beside = []
            if groups and lp.tp_overlap:
                # the collectives run beside the compute, which slows while they hold SMs
                beside.append(env.process(flows_in_turn(tuple(x for *_, plans in groups for x in plans), s,
                                                        label("overlapped", j))))
                groups = []
            tensors = step.grad_tensor_bytes
            grads = sum(tensors)
            # the compute runs in pieces: up to each collective that starts inside the layer (holding
            # the compute, or beside it until its deadline), up to each deadline, where buckets fill
            # up to each weight gradient it finishes (where the layer says; else at a steady rate),
            # and up to where each context-parallel ring starts and where the layer waits for it. At a
            # tie: a ring starts, a gradient lands, a ring is waited for, then a collective starts
            marks: list[tuple[float, int, str, Any]] = []  # (fraction, order at a tie, kind, what)
            for a, b, plans in groups:
                if a < 1.0:
                    marks.append((a, 3, "collective", (b, plans)))
            for ring_ in step.rings:
                if ring_.plan is not None:
                    marks.append((ring_.start, 0, "ring", ring_.plan))
                if ring_.wait_s > 0:
                    marks.append((ring_.at, 2, "ring wait", ring_.wait_s))
            if reduce_grads and grads > 0:
                finished = 0.0
                for k, nbytes in enumerate(tensors):
                    finished += nbytes
                    ready = step.grad_tensor_at[k] if step.grad_tensor_at else finished / grads
                    marks.append((min(1.0, ready), 1, "gradient", nbytes))
            marks.sort(key=lambda x: x[:2])
            t_compute = env.now
            done = 0.0
            pending: list[tuple[float, Any]] = []  # (deadline, process) of collectives beside the compute
            i = 0
            while i < len(marks) or any(d < 1.0 for d, _ in pending):
                due = min((d for d, _ in pending), default=2.0)
                # a deadline at the fraction where a collective starts is met first: the next
                # collective on the stream waits for the one before it (Megatron-LM's handle.wait())
                if i < len(marks) and marks[i][0] < due:
                    f, _, kind_, what = marks[i]
                    i += 1
                else:  # a collective's deadline comes first: the compute waits there for it
                    f, kind_, what = due, "deadline", None
                if f > done:
                    yield from compute_for(s, step.compute_s * (f - done))
                    done = f
                if kind_ == "deadline":
                    t1 = env.now
                    for _, proc in [x for x in pending if x[0] <= f]:
                        yield proc
                    pending = [x for x in pending if x[0] > f]
                    stats[s]["comm"] += env.now - t1
                elif kind_ == "ring":
                    env.process(flow(what, s, label=label("context ring", j)))
                elif kind_ == "ring wait":
                    t1 = env.now
                    yield env.timeout(what)
                    stats[s]["comm"] += what
                    if record_spans:
                        spans.append(Span(stage_track(s, "context ring"), label("ring attention (exposed)", j), t1,
                                          env.now))
                elif kind_ == "collective":
                    until, plans = what
                    if until > f:
                        pending.append((until, env.process(flows_in_turn(plans, s, label("", j)))))
                    else:
                        t1 = env.now
                        yield from flows_in_turn(plans, s, label("", j))
                        stats[s]["comm"] += env.now - t1
                else:
                    bucket += what
                    if lp.overlap and bucket >= lp.bucket_bytes:
                        submit(s, lp.dp_plan(collective, bucket), f"gradient bucket {name}")
                        bucket = 0.0
            if done < 1.0:
                yield from compute_for(s, step.compute_s * (1.0 - done))
            beside += [proc for _, proc in pending]
            if record_spans and step.compute_s > 0:
                spans.append(Span(stage_track(s, "layers"), f"{name} {step.name}", t_compute, env.now,
                                  (("layer", step.name), ("compute_s", step.compute_s))))
            t1 = env.now
            for proc in beside:
                yield proc
            for a, _, plans in groups:
                if a >= 1.0:
                    yield from flows_in_turn(plans, s, label("", j))
            stats[s]["comm"] += env.now - t1
            if zero3 and kind == "B" and grads > 0:
                plan = lp.dp_plan("reduce_scatter", grads)
                if lp.overlap:
                    submit(s, plan, label("zero3", j))
                else:
                    t1 = env.now
                    yield from flow(plan, s, label=label("zero3", j))
                    stats[s]["comm"] += env.now - t1
        if bucket > 0:
            submit(s, lp.dp_plan(collective, bucket), f"gradient bucket {name}")
        if zero3 and kind == "B":
            # FSDP's backward ends by waiting for its reduce-scatters
            t1 = env.now
            yield dp_idle[s]
            stats[s]["comm"] += env.now - t1

    def stage_proc(s: int):
        st = stages[s]
        order = pipeline_order(lp.schedule, p, m, s, v)
        last_b = {}
        for idx, (kind, i, c) in enumerate(order):
            if kind == "B":
                last_b[c] = idx
        if lp.zero_stage in (1, 2) and lp.dp_plan is not None:
            # parameter all-gather after the previous step's sharded optimizer; overlapped it hides
            # behind the forwards
            for c, ch in enumerate(st.chunks):
                submit(s, lp.dp_plan("all_gather", ch.param_bytes), f"param all-gather chunk {c}")
            if not lp.overlap:
                t0 = env.now
                yield dp_idle[s]
                stats[s]["comm"] += env.now - t0
        for idx, (kind, i, c) in enumerate(order):
            ch = st.chunks[c]
            vs = c * p + s
            t0 = env.now
            if kind == "F":
                if vs > 0:
                    yield fwd_arrived[(i, vs)]
            else:
                yield (bwd_arrived[(i, vs)] if vs < p * v - 1 else fwd_done[(i, vs)])
            stats[s]["bubble"] += env.now - t0
            start = env.now
            reduce_grads = (kind == "B" and idx == last_b.get(c) and lp.dp_plan is not None and lp.zero_stage < 3
                            and ch.grad_bytes > 0)
            name = f"{kind}{i}" + (f".{c}" if v > 1 else "")
            if kind == "F" and i == 0 and ch.first_forward_s > 0:
                yield from compute_for(s, ch.first_forward_s)
            yield from run_pass(s, kind, c, passes[s][c][kind], reduce_grads, name)
            if record_spans:
                spans.append(Span(stage_track(s, "compute"), name, start, env.now,
                                  (("microbatch", i), ("chunk", c))))
            if kind == "F":
                fwd_done[(i, vs)].succeed()
                to, arrived = (vs + 1, fwd_arrived[(i, vs + 1)]) if vs < p * v - 1 else (None, None)
            else:
                to, arrived = (vs - 1, bwd_arrived[(i, vs - 1)]) if vs > 0 else (None, None)
            if to is not None:
                if lp.p2p_plan is not None and ch.send_bytes > 0 and p > 1:
                    sending = env.process(send(s, lp.p2p_plan(ch.send_bytes, s, to % p), arrived, to % p, name))
                    if not lp.p2p_overlap:
                        t1 = env.now
                        yield sending
                        stats[s]["comm"] += env.now - t1
                else:
                    arrived.succeed()
        t0 = env.now
        yield dp_idle[s]
        stats[s]["comm"] += env.now - t0
        dp_queues[s].put(None)
        if lp.tied_plan is not None and s in tied_ready:
            # the two ends of the embedding group meet, then all-reduce the copies' gradients
            tied_ready[s].succeed()
            t0 = env.now
            yield env.all_of(list(tied_ready.values()))
            stats[s]["bubble"] += env.now - t0
            t0 = env.now
            yield from flow(lp.tied_plan, s, label="tied embedding gradients")
            stats[s]["comm"] += env.now - t0
        update_s = st.optimizer_s
        if lp.norm_plan is not None:
            # the local gradient norm, then every stage meets to all-reduce it
            t0 = env.now
            yield env.timeout(st.grad_norm_s)
            stats[s]["optimizer"] += env.now - t0
            if record_spans and st.grad_norm_s > 0:
                spans.append(Span(stage_track(s, "compute"), "gradient norm", t0, env.now))
            update_s -= st.grad_norm_s
            norm_ready[s].succeed()
            t0 = env.now
            yield env.all_of(norm_ready)
            stats[s]["bubble"] += env.now - t0
            t0 = env.now
            yield from flow(lp.norm_plan, s, label="gradient norm")
            stats[s]["comm"] += env.now - t0
        t0 = env.now
        yield env.timeout(update_s)
        stats[s]["optimizer"] += env.now - t0
        if record_spans and update_s > 0:
            spans.append(Span(stage_track(s, "compute"), "optimizer", t0, env.now))
        stats[s]["end"] = env.now

    tied_ready = {s: env.event() for s in (0, p - 1)} if p > 1 else {}
    norm_ready = [env.event() for _ in range(p)]
    for s in range(p):
        env.process(dp_stream(s))
        env.process(stage_proc(s))
    env.run()
    step = max(x["end"] for x in stats)
    util = {}
    for res in caps:
        u = fluid.utilization(res, step)
        if u > 0:
            util[res] = u
    n = float(p)
    return StepStats(
        step_s=step,
        compute_s=sum(x["compute"] for x in stats) / n,
        exposed_comm_s=sum(x["comm"] for x in stats) / n,
        bubble_s=sum(x["bubble"] + (step - x["end"]) for x in stats) / n,
        optimizer_s=sum(x["optimizer"] for x in stats) / n,
        link_utilization=util,
        spans=spans,
    )


# ------------------------------------------------------------------------------------ building the step


def _group_per_node(gpus_per_node: int, stride: int, size: int) -> int:
    """GPUs of a group (members ``stride`` ranks apart) that share a node."""
    if size <= 1:
        return 1
    if stride >= gpus_per_node:
        return 1
    return max(1, min(size, gpus_per_node // stride))


def _phase_times(hardware, nodes: list[OpNode], name: str, spec, launch_mode: str) -> tuple[dict[str, float], Any]:
    """Seconds per phase of ``nodes`` run on one GPU of ``hardware`` (``spec``: the workload's spec, for
    the settings that apply to every kernel)."""
    from gpusim.workload.graph import chain

    workload = SimpleNamespace(name=name, kind="ops", graph=WorkloadGraph(tuple(chain(nodes))), memory=None,
                               spec=spec)
    result = simulate(hardware, workload, launch_mode=launch_mode, record_spans=False)
    phases: dict[str, float] = {}
    for k in result.kernels:
        phases[k.phase] = phases.get(k.phase, 0.0) + k.time_s + k.launch_gap_s
    return phases, result


def _error(workload, key: str, message: str) -> ConfigError:
    return ConfigError(getattr(workload, "source", workload.name), key, message)


def simulate_system(hardware, workload, *, launch_mode: str = "eager", record_spans: bool = False,
                    notes: tuple[str, ...] = ()) -> SimulationResult:
    """Simulate ``workload`` on the system ``hardware`` (a loaded system description).

    Op lists (collectives, copies, kernels) run on the single-device timeline with collectives timed
    by :mod:`gpusim.engine.collectives`; a model workload runs with its ``parallelism:`` layout."""
    if hardware.kind != "system":
        raise SimulationError(f"{hardware.name} is a single device, not a system")
    if getattr(workload, "kind", "ops") != "model":
        return _simulate_ops(hardware, workload, launch_mode, record_spans, notes)
    return _simulate_model(hardware, workload, launch_mode, record_spans, notes)


def _simulate_ops(hardware, workload, launch_mode, record_spans, notes) -> SimulationResult:
    collectives = [n for n in workload.graph.nodes if n.op.category == "collective"]
    # every GPU of the largest collective runs the list (its other ops too); without one it runs on one GPU
    used = max((int(n.op.num_gpus) for n in collectives), default=1)
    if used < hardware.num_gpus:
        notes = (*notes, f"the op list uses {used} of the {hardware.num_gpus} GPUs of {hardware.name}")
    result = simulate(hardware, workload, launch_mode=launch_mode, record_spans=record_spans, notes=notes)
    extra: dict[str, Any] = {"num_gpus": used}
    if len(collectives) == 1:
        op = collectives[0].op
        fabric = fabric_of(hardware, launch_mode)
        plan = plan_collective(op.kind, float(op.num_bytes), int(op.num_gpus), fabric)
        extra.update(algbw_bytes_per_s=plan.algbw_bytes_per_s, busbw_bytes_per_s=plan.busbw_bytes_per_s,
                     collective_algorithm=f"{plan.algorithm}/{plan.protocol}", collective_loops=plan.loops)
    return dataclasses.replace(result, **extra)


def _simulate_model(hardware, workload, launch_mode, record_spans, notes) -> SimulationResult:
    from gpusim.workload.expand import lower_layer, training_nodes
    from gpusim.workload.models import transformer as T
    from gpusim.workload.ops import Matmul, dtype_bytes
    from gpusim.workload.precision import policy as precision_policy
    from gpusim.workload.spec import LANGUAGE_MODELS

    spec = workload.spec
    par = spec.parallelism
    t, p, d, cp = par.tensor, par.pipeline, par.data, par.context
    n_gpus = par.num_gpus
    warnings = opening_warnings(notes, workload, machine_of(hardware))
    if n_gpus > hardware.num_gpus:
        raise _error(workload, "parallelism", f"the layout needs {n_gpus} GPUs (data {d} x context {cp} x tensor {t}"
                     f" x pipeline {p}); {hardware.name} has {hardware.num_gpus} (set num_nodes)")
    if n_gpus < hardware.num_gpus:
        warnings.append(f"the layout uses {n_gpus} of the {hardware.num_gpus} GPUs of {hardware.name}")
    fabric = fabric_of(hardware, launch_mode)
    gpn = hardware.num_gpus_per_node
    if t > gpn:
        warnings.append(f"tensor parallelism {t} spans nodes ({gpn} GPUs per node): its all-reduces use the network")
    if par.tp_all_reduce == "intra_node" and t > 1 and intra_node_all_reduce_plan(0.0, t, fabric) is None:
        warnings.append(f"tp_all_reduce intra_node needs the tensor-parallel GPUs in one node, all directly "
                        f"connected ({hardware.name}: {fabric.intra_topology}, {gpn} per node): NCCL runs them")
    training = spec.mode == "train"
    m = par.microbatches or spec.gradient_accumulation_steps
    v = par.virtual_stages
    pol = precision_policy(spec.precision)
    # bytes per parameter of the ZeRO/FSDP gathers and of the gradient reduction
    grad_b = dtype_bytes(par.grad_reduce_dtype or pol.grad_dtype)
    weight_b = dtype_bytes(par.param_gather_dtype or pol.weight_dtype)
    act_bytes = dtype_bytes(pol.activation_dtype)
    plans: dict[tuple, CollectivePlan] = {}

    def group_plan(collective: str, nbytes: float, size: int, stride: int) -> CollectivePlan:
        key = (collective, round(nbytes), size, stride)
        if key not in plans:
            peer = (intra_node_all_reduce_plan(nbytes, size, fabric) if par.tp_all_reduce == "intra_node"
                    and collective == "all_reduce" and (size, stride) == (t, 1) else None)
            plans[key] = peer or plan_collective(collective, nbytes, size, fabric,
                                                 gpus_per_node=_group_per_node(gpn, stride, size))
        return plans[key]

    lm = spec.model in LANGUAGE_MODELS  # (loading checked that other models have no tensor or pipeline split)
    kernels: tuple = ()
    if lm:
        r = T.resolve(spec.model, spec.config)
        if r.num_experts > 1 and r.num_experts % par.expert:
            raise _error(workload, "parallelism.expert", f"{r.num_experts} experts are not divisible by expert "
                         f"{par.expert}")
        if par.expert > 1 and r.num_experts <= 1:
            raise _error(workload, "parallelism.expert", "expert parallelism needs a mixture-of-experts model")
        rt = dataclasses.replace(r, num_heads=r.num_heads // t, num_kv_heads=max(1, r.num_kv_heads // t),
                                 ffn_hidden_size=math.ceil(r.ffn_hidden_size / t),
                                 vocab_size=math.ceil(r.vocab_size / t))
    if not training:
        if not lm:
            result = simulate(hardware, workload, launch_mode=launch_mode, record_spans=record_spans,
                              notes=tuple(warnings))
            return dataclasses.replace(result, num_gpus=n_gpus)
        return _inference(hardware, workload, rt, r, pol, fabric, group_plan, warnings, launch_mode, record_spans)

    # ---- training: time one block, the embedding and the head on a representative GPU -----------------
    e = par.expert
    if lm:
        seq = r.seq_len // cp  # this GPU's share of each sequence
        tokens = spec.batch_size * seq
        comm = par.context_comm if cp > 1 else None
        a2a = par.context_a2a  # GPUs of each context all-to-all group, ``t`` ranks apart
        ring = cp // a2a if comm in ("p2p", "a2a+p2p") else 1  # groups around the ring, ``t * a2a`` ranks apart
        layers = T.build_layers(rt, pol, batch=spec.batch_size, seq_q=seq, seq_kv=seq, training=True, context=cp,
                                context_comm=par.context_comm, context_a2a=a2a)
        if e > 1:
            layers = tuple(_expert_shard(layer, e, Matmul) for layer in layers)
        units = {"embedding": layers[0], "block": layers[1],
                 "head": T.pipelined_head(rt, layers[-1]) if p > 1 else layers[-1]}
        # the parameters of the last stage's copy of a tied embedding (this rank's vocabulary share)
        tied = float(units["head"].num_parameters() - layers[-1].num_parameters())
        unit_times: dict[str, dict[str, float]] = {}
        unit_params: dict[str, float] = {}
        unit_tensors: dict[str, tuple[float, ...]] = {}
        unit_tensor_ops: dict[str, tuple[str, ...]] = {}
        unit_kernels: dict[str, Any] = {}
        unit_norm_s: dict[str, float] = {}
        unit_first_s: dict[str, float] = {}
        """Compute a unit adds to the first micro-batch's forward (see ``ChunkModel.first_forward_s``)."""
        unit_first_kernels: dict[str, Any] = {}
        # the share of a unit's optimizer work each GPU does: ZeRO shards the dense weights' over the
        # data- and context-parallel GPUs, the experts' over the data-parallel GPUs holding the same experts
        unit_shard: dict[str, float] = {}
        for key, layer in units.items():
            nodes = training_nodes([layer], fusion=spec.fusion, checkpointing=spec.activation_checkpointing,
                                   micro_batches=m, optimizer=spec.optimizer_name, policy=pol,
                                   clip_gradients=spec.gradient_clipping,
                                   fp8_weights_per_step=spec.fp8_weights_per_step)
            # what runs in the first micro-batch only (FP8 weight casts kept for the others) is timed apart
            first_only = [n for n in nodes if n.once_per_step]
            nodes = [dataclasses.replace(n, repeat=1) if n.phase != "optimizer" else n for n in nodes
                     if not n.once_per_step]
            unit_times[key], res = _phase_times(hardware, nodes, f"{workload.name}.{key}", spec, launch_mode)
            unit_first_s[key], unit_first_kernels[key] = 0.0, ()
            if first_only:
                phases, first = _phase_times(hardware, first_only, f"{workload.name}.{key}.first", spec, launch_mode)
                unit_first_s[key], unit_first_kernels[key] = phases.get("forward", 0.0), first.kernels
            unit_params[key] = float(layer.num_parameters())
            # the unit's weight tensors, last first: the backward finishes their gradients in that order
            # (as its kernels hold them: a bias fused into its GEMM's epilogue is finished with it)
            held = [f for f in reversed(lower_layer(layer.ops, spec.fusion, True)) if f.num_parameters > 0]
            unit_tensors[key] = tuple(float(f.num_parameters) for f in held)
            unit_tensor_ops[key] = tuple(f.name for f in held)
            unit_kernels[key] = res.kernels
            unit_norm_s[key] = _grad_norm_s(res.kernels)
            experts = sum(f.num_parameters for f in layer.ops if f.expert) / max(1, layer.num_parameters())
            unit_shard[key] = ((1.0 - experts) / (d * cp) + experts / (d // e) if par.zero_stage >= 1 else 1.0)
        kernels = unit_kernels["block"]
        # the block's kernels as reported: its per-micro-batch ones, then those of its first micro-batch only
        reported_kernels = tuple(kernels) + tuple(unit_first_kernels["block"])
        h = r.hidden_size
        kv_bytes = 2.0 * spec.batch_size * seq * rt.num_kv_heads * r.head_dim * act_bytes  # this GPU's share
        recomputes_attention = spec.activation_checkpointing != "none"
        moe = r.num_experts > 1
        tp_ar = tokens * h * act_bytes
        tp_ar_plan, tp_rs, tp_ag = (group_plan(c, tp_ar, t, 1) if t > 1 else None
                                    for c in ("all_reduce", "reduce_scatter", "all_gather"))

        where = _BlockTimeline(kernels)
        head_where = _BlockTimeline(unit_kernels["head"])

        def column_backward(timeline: _BlockTimeline, column: str, gathers_input: bool = True) -> list[LayerCollective]:
            """The backward collectives of column-parallel GEMM ``column`` (Megatron-LM's
            LinearWithGradAccumulationAndAsyncCommunication): with ``tp_wgrad_overlap``, its input
            gradient all-reduced (with sequence parallelism reduce-scattered) beside its weight
            gradient, from the end of its data gradient, and with sequence parallelism its input,
            kept only as this rank's sequence shard, all-gathered again beside its data gradient
            for the weight gradient (Megatron-LM's and Transformer Engine's linear layers trade this
            second gather for the memory); without it, the reduction after the weight gradient and
            no second gather (PyTorch's tensor parallelism keeps the gathered input)."""
            end = timeline.after("backward", column)
            out = []
            if par.tp_wgrad_overlap:
                start = timeline.after("backward", column, "dgrad")
                if par.sequence_parallel and gathers_input:
                    out.append(LayerCollective(tp_ag, timeline.before("backward", column, "dgrad"), start))
            else:
                start = end
            out.append(LayerCollective(tp_rs if par.sequence_parallel else tp_ar_plan, start, end))
            return out

        def block_tp(phase: str) -> list[LayerCollective]:
            """A block's tensor-parallel collectives in ``phase`` ("forward", "recompute" or
            "backward"), each with where in the pass it starts and by when it must end, as
            Megatron-LM runs them. Each half of the block (attention: QKV then the output projection;
            MLP: FC1 then FC2) is a column-parallel GEMM then a row-parallel one. Forward: without
            sequence parallelism an all-reduce after the row-parallel GEMM; with it an all-gather
            before the column-parallel GEMM and a reduce-scatter after the row-parallel one. Backward
            (the MLP first): the column-parallel GEMM's input gradient is all-reduced (with sequence
            parallelism reduce-scattered) beside its weight-gradient GEMM, from the end of its data
            gradient to the end of its weight gradient (:func:`column_backward`). With sequence
            parallelism the row-parallel GEMM's output gradient is all-gathered before its backward."""
            if t <= 1:
                return []
            out: list[LayerCollective] = []
            if phase == "backward":
                for column, row in (("fc1", "fc2"), ("qkv", "proj")):
                    if par.sequence_parallel:
                        out.append(LayerCollective(tp_ag, where.before(phase, row)))
                    # a mixture-of-experts block's expert GEMMs get their inputs whole from the token
                    # dispatcher (Megatron-LM's experts do no tensor-parallel communication of their own)
                    out += column_backward(where, column, gathers_input=not (moe and column == "fc1"))
                return out
            for column, row in (("qkv", "proj"), ("fc1", "fc2")):
                if par.sequence_parallel:
                    out.append(LayerCollective(tp_ag, where.before(phase, column)))
                out.append(LayerCollective(tp_rs if par.sequence_parallel else tp_ar_plan, where.after(phase, row)))
            return out

        def block_cp(phase: str) -> list[LayerCollective]:
            """The blocking collectives of context parallelism in a block's ``phase``, each with where
            it runs: Ulysses' all-to-alls inside each group around the attention (queries, keys and
            values in before it, the output out after it; their gradients the other way round in the
            backward), or the keys and values gathered before the attention (gathered again in the
            backward, their gradients reduce-scattered back to their owners after it). A recompute
            of the attention repeats the forward's."""
            before, after = where.before(phase, "attention"), where.after(phase, "attention")
            if a2a > 1:
                head_bytes = tokens * r.head_dim * act_bytes
                qkv = group_plan("all_to_all", head_bytes * (rt.num_heads + 2 * rt.num_kv_heads), a2a, t)
                out = group_plan("all_to_all", head_bytes * rt.num_heads, a2a, t)
                first, second = (out, qkv) if phase == "backward" else (qkv, out)
                return [LayerCollective(first, before), LayerCollective(second, after)]
            if comm == "all_gather":
                gather = LayerCollective(group_plan("all_gather", kv_bytes * cp, cp, t), before)
                return [gather, LayerCollective(group_plan("reduce_scatter", kv_bytes * cp, cp, t), after)] \
                    if phase == "backward" else [gather]
            return []

        def block_ep(phase: str) -> list[LayerCollective]:
            """A mixture-of-experts block's all-to-alls: the tokens to their experts after the
            dispatch and back before the combine; in the backward the gradients of the combined
            tokens to the experts after the combine's backward, and of the experts' inputs back once
            the experts' first GEMM has its data gradient."""
            if not moe or e <= 1:
                return []
            plan = group_plan("all_to_all", tokens * r.top_k * h * act_bytes, e, t)
            if phase == "backward":
                there, back = where.after(phase, "combine"), where.after(phase, "fc1", "dgrad")
            else:
                there, back = where.after(phase, "dispatch"), where.before(phase, "combine")
            return [LayerCollective(plan, there), LayerCollective(plan, back)]

        P = p * v
        per_chunk = r.num_layers // P
        # each block passes its keys and values around the ring beside its attention, and waits for
        # what the attention steps do not hide where its attention ends (the backward's, its
        # recompute's wait included, where the backward's attention ends)
        rings: dict[str, tuple[LayerRing, ...]] = {"forward": (), "backward": ()}
        if ring > 1:
            # keys and values of this GPU's share (after the all-to-alls, its group's share for 1/a2a of
            # the key-value heads: as many bytes), passed to the next member of the ring while the
            # attention step on the previous share runs; the backward passes keys, values and their
            # gradients, and a recompute of the attention passes the keys and values again first
            in_node = _group_per_node(gpn, t * a2a, ring) >= ring

            def ring_of(phase: str, hop_bytes: float) -> LayerRing:
                def hop(nbytes: float) -> CollectivePlan:
                    return plan_collective("send_recv", nbytes, 2, fabric, gpus_per_node=2 if in_node else 1)
                return LayerRing(hop((ring - 1) * hop_bytes), _ring_wait_s(kernels, phase, hop(hop_bytes).time_s),
                                 where.after(phase, "attention"), where.before(phase, "attention"))

            rings["forward"] = (ring_of("forward", kv_bytes),)
            rings["backward"] = ((ring_of("recompute", kv_bytes),) if recomputes_attention else ()) + (
                ring_of("backward", 2 * kv_bytes),)
        # each unit's blocking collectives in its forward and in its backward, with where they run: a
        # block's tensor-parallel all-reduces (those of its recompute too, with full checkpointing),
        # its expert all-to-alls and context-parallel exchanges; the all-reduce after the
        # vocabulary-parallel embedding, and the head's in its backward
        backward = block_tp("backward") + block_ep("backward") + block_cp("backward")
        if spec.activation_checkpointing == "full":
            backward += block_tp("recompute") + block_ep("recompute")
        if recomputes_attention:
            backward += block_cp("recompute")
        if t <= 1:
            embedding_comm = head_comm = ([], [])
        elif par.sequence_parallel:
            # the embedding's output is reduce-scattered to the sequence shards, and their gradients
            # all-gathered back; the head's output layer, column-parallel, gathers its input after
            # the final norm, and in the backward treats it as a block's GEMMs do
            embedding_comm = ([LayerCollective(tp_rs)], [LayerCollective(tp_ag, 0.0)])
            head_comm = ([LayerCollective(tp_ag, head_where.before("forward", "logits"))],
                         column_backward(head_where, "logits"))
        else:
            # the vocabulary-parallel embedding's partial lookups are summed; the head's output
            # layer all-reduces its input gradient
            embedding_comm = ([LayerCollective(tp_ar_plan)], [])
            head_comm = ([], column_backward(head_where, "logits"))
        # a unit's gradients are finished with their weight-gradient kernels (a norm's or an
        # embedding's with its one backward kernel), none during a recompute; where one is not
        # found, the unit's at a steady rate
        grads_at: dict[str, tuple[float, ...]] = {}
        for u, unit_k in unit_kernels.items():
            timeline = where if u == "block" else _BlockTimeline(unit_k)
            ready = [timeline.ready(name) for name in unit_tensor_ops[u]]
            grads_at[u] = tuple(ready) if None not in ready else ()
            lost = [name for name, at in zip(unit_tensor_ops[u], ready) if at is None]
            if lost:
                warnings.append(f"the {u} has no weight-gradient kernels named {', '.join(lost)}: its gradients "
                                "reach their buckets at a steady rate through its backward")
        for unit, timeline in (("block", where), ("head", head_where)):
            if timeline.missing:
                names = ", ".join(sorted({f"{name}{'.' + part if part else ''} ({phase})"
                                          for phase, name, part in timeline.missing}))
                warnings.append(f"the {unit} has no kernels named {names}: the collectives that follow or precede "
                                "them run at the end of the layer's pass")
        unit_comm = {
            "embedding": embedding_comm,
            "block": (block_tp("forward") + block_ep("forward") + block_cp("forward"), backward),
            "head": head_comm,
        }

        def backward_s(unit: str) -> float:
            return unit_times[unit].get("backward", 0.0) + unit_times[unit].get("recompute", 0.0)

        stages = []
        for s in range(p):
            chunks = []
            opt = norm = 0.0
            for c in range(v):
                vs = c * p + s
                units = ["embedding"] * (vs == 0) + ["block"] * per_chunk + ["head"] * (vs == P - 1)
                back = units[::-1]
                params = sum(unit_params[u] for u in units)
                opt += sum(unit_times[u].get("optimizer", 0.0) * unit_shard[u] for u in units)
                norm += sum(unit_norm_s[u] * unit_shard[u] for u in units)
                first = vs * per_chunk  # the model's index of the chunk's first block
                names = (["embedding"] * (vs == 0) + [f"layer {first + k}" for k in range(per_chunk)]
                         + ["head"] * (vs == P - 1))
                forward_layer_s = tuple(unit_times[u].get("forward", 0.0) for u in units)
                backward_layer_s = tuple(backward_s(u) for u in back)
                chunks.append(ChunkModel(
                    sum(forward_layer_s), sum(backward_layer_s), len(units),
                    first_forward_s=sum(unit_first_s[u] for u in units),
                    layer_names=tuple(names),
                    layer_comm_forward=tuple(tuple(unit_comm[u][0]) for u in units),
                    layer_comm_backward=tuple(tuple(unit_comm[u][1]) for u in back),
                    forward_layer_s=forward_layer_s, backward_layer_s=backward_layer_s,
                    grad_bytes=params * grad_b, param_bytes=params * weight_b,
                    layer_param_bytes=tuple(unit_params[u] * weight_b for u in units),
                    grad_layers=tuple(tuple(n * grad_b for n in unit_tensors[u]) for u in back),
                    grad_layers_at=tuple(grads_at[u] for u in back),
                    send_bytes=tp_ar / t,
                    layer_ring_forward=tuple(rings["forward"] if u == "block" else () for u in units),
                    layer_ring_backward=tuple(rings["backward"] if u == "block" else () for u in back)))
            stages.append(StageModel(chunks, opt, norm))
    else:
        phases, res = _phase_times(hardware, list(workload.graph.nodes), workload.name, spec, launch_mode)
        kernels = reported_kernels = res.kernels
        params = float(workload.num_parameters)
        layers_with_params = len({n.layer for n in workload.graph.nodes if n.phase == "optimizer"}) or 1
        shards = d if par.zero_stage >= 1 else 1
        norm = _grad_norm_s(kernels) / shards
        stages = [StageModel([ChunkModel(phases.get("forward", 0.0),
                                         phases.get("backward", 0.0) + phases.get("recompute", 0.0),
                                         layers_with_params, grad_bytes=params * grad_b,
                                         param_bytes=params * weight_b)], phases.get("optimizer", 0.0) / shards,
                             norm)]
        m = 1
    pp_stride = t * cp * d  # Megatron's rank order: tensor fastest, then context, data, pipeline
    # the gradient norm's group: every GPU with distinct gradients, Megatron-LM's model-parallel group
    # (the tensor, pipeline and expert ranks of the first context and data-parallel replica) or with
    # ZeRO every GPU; counted on the first node, in Megatron's rank order
    def holds_distinct_gradients(rank: int) -> bool:
        return par.zero_stage >= 1 or ((rank // t) % cp == 0 and (rank // (t * cp)) % d < par.expert)

    norm_gpus = n_gpus if par.zero_stage >= 1 else t * p * par.expert
    norm_per_node = sum(1 for rank in range(min(gpn, n_gpus)) if holds_distinct_gradients(rank))
    norm_plan = (plan_collective("all_reduce", 4.0, norm_gpus, fabric, gpus_per_node=norm_per_node)
                 if training and spec.gradient_clipping and norm_gpus > 1 else None)

    def stage_send(nbytes: float, src: int, dst: int) -> CollectivePlan:
        """A send from stage ``src`` to stage ``dst``: over NVLink when their GPUs share a node, else
        over the network. Each tensor-parallel rank sends its 1/t of the activations; without sequence
        parallelism, where the next stage needs them whole, the receivers then all-gather them over
        NVLink (Megatron-LM's scatter-gather, on by default since 2021: Narayanan et al. 2021 §4.1).
        The two run as one flow on the ports, each part at its own rate."""
        same_node = src * pp_stride // gpn == dst * pp_stride // gpn
        send = plan_collective("send_recv", nbytes, 2, fabric, gpus_per_node=2 if same_node else 1)
        if t == 1 or par.sequence_parallel:
            return send
        gather = group_plan("all_gather", nbytes * t, t, 1)
        rate = send.intra_bytes_per_s if send.intra_bytes > 0 else gather.intra_bytes_per_s
        intra = send.intra_bytes + gather.intra_bytes * rate / gather.intra_bytes_per_s
        return dataclasses.replace(send, algorithm=f"{send.algorithm}+all_gather", latency_s=send.latency_s
                                   + gather.latency_s, intra_bytes=intra, intra_bytes_per_s=rate)
    lp = LayoutPlan(
        schedule=par.schedule if p > 1 else "1f1b", num_stages=p, num_microbatches=m, num_chunks=v if lm else 1,
        zero_stage=par.zero_stage, overlap=par.overlap_communication, tp_overlap=par.tp_comm_overlap,
        p2p_overlap=par.p2p_comm_overlap,
        bucket_bytes=par.bucket_bytes,
        # the gradient reduction and ZeRO sharding span every GPU holding the same weights
        dp_plan=(lambda coll, nbytes: group_plan(coll, nbytes, d * cp, t)) if d * cp > 1 else None,
        p2p_plan=stage_send if p > 1 else None,
        norm_plan=norm_plan,
        tied_plan=plan_collective("all_reduce", tied * grad_b, 2, fabric,
                                  gpus_per_node=2 if (p - 1) * pp_stride < gpn else 1) if lm and tied else None,
    )
    if lm and par.zero_stage == 3 and d * cp == 1:
        warnings.append("zero_stage 3 with data 1 shards nothing")
    if p > 1 and m < p:
        warnings.append(f"{m} micro-batches for {p} pipeline stages: every stage idles while the pipeline fills "
                        f"and drains, so most of the step is bubble ((p - 1) / (m + p - 1) = {(p - 1) / (m + p - 1):.0%} "
                        "on uniform stages); use at least as many micro-batches as stages")
    if p > 1 and par.zero_stage >= 2:
        warnings.append(f"zero_stage {par.zero_stage} with pipeline parallelism: DeepSpeed and Megatron-LM allow only "
                        "ZeRO-1 (optimizer state) under a pipeline; gpusim simulates the stage as without one "
                        "(stage 3 gathers the weights and reduce-scatters the gradients on every micro-batch)")
    stats = run_step(fabric, stages, lp, record_spans=record_spans)
    return _training_result(hardware, workload, stats, n_gpus, m, reported_kernels, warnings, fabric, launch_mode)


class _BlockTimeline:
    """Where a transformer block's collectives fall in its passes, from its kernel records: the
    fraction of a pass's compute done before or after an op's kernels (ops named as the model
    builders name them: ``qkv``, ``proj``, ``fc1``, ``fc2``, ``attention``...; ``part`` picks one
    of an op's backward kernels, ``dgrad`` or ``wgrad``). The backward pass is the recompute, then
    the backward, as the step runs them. An op the block lacks puts the collective after the whole
    pass, and is listed in ``missing``."""

    ALIASES = {"fc1": ("fc1", "experts_up"), "fc2": ("fc2", "experts_down")}
    """A mixture-of-experts block's MLP GEMMs are its experts'."""

    def __init__(self, kernels):
        self.passes: dict[str, list[tuple[str, str, str, float]]] = {"forward": [], "backward": []}
        self.missing: set[tuple[str, str, str | None]] = set()
        for k in kernels:
            key = {"forward": "forward", "recompute": "backward", "backward": "backward"}.get(k.phase)
            if key is not None:
                parts = k.node.split(".")
                op = parts[1] if len(parts) > 1 else k.node
                self.passes[key].append((k.phase, op, parts[2] if len(parts) > 2 else "", k.time_s + k.launch_gap_s))

    def _matches(self, op: str, name: str) -> bool:
        if name == "attention":  # the attention core, fused or not, in one or several kernels
            return op == name or op.startswith("attention_")
        return op in self.ALIASES.get(name, (name,))

    def _edge(self, phase: str, name: str, after: bool, part: str | None) -> float:
        seq = self.passes["forward" if phase == "forward" else "backward"]
        total = sum(x[3] for x in seq)
        hits = [i for i, (ph, op, pt, _) in enumerate(seq)
                if ph == phase and self._matches(op, name) and part in (None, pt)]
        if not hits or total <= 0:
            self.missing.add((phase, name, part))
            return 1.0
        end = hits[-1] + 1 if after else hits[0]
        return min(1.0, sum(x[3] for x in seq[:end]) / total)

    def before(self, phase: str, name: str, part: str | None = None) -> float:
        return self._edge(phase, name, False, part)

    def ready(self, name: str) -> float | None:
        """Where the gradient of op ``name``'s weights is finished in the backward: after its
        weight-gradient kernel, its bias-gradient reduction (a bias added on its own), the reduction
        of an eager norm's weight product, or its one backward kernel (a norm's, an embedding's);
        None if it has none."""
        for part in ("wgrad", "bias_grad", "operand_grad", "grad"):
            if any(ph == "backward" and op == name and pt == part for ph, op, pt, _ in self.passes["backward"]):
                return self._edge("backward", name, True, part)
        return None

    def after(self, phase: str, name: str, part: str | None = None) -> float:
        return self._edge(phase, name, True, part)


def _grad_norm_s(kernels) -> float:
    """Seconds the kernels spend on the local gradient norm (the ``<layer>.grad_norm`` passes of
    :func:`gpusim.workload.expand.training_nodes`)."""
    return sum(k.time_s + k.launch_gap_s for k in kernels if k.node.endswith(".grad_norm"))


def _ring_wait_s(kernels, phase: str, hop_s: float) -> float:
    """Seconds per layer that ``phase``'s context-parallel ring transfers outlast the attention steps
    they overlap: the transfer of the share step k needs runs during step k - 1 (double buffering, as
    Transformer Engine's P2P ring does), so each of the context - 1 hops costs max(0, hop - step).
    ``kernels``: the block's kernel records (attention steps named ``attention``, ``attention_ring1``...)."""
    steps: dict[int, float] = {}
    for k in kernels:
        op_name = k.node.split(".")[1]
        if k.phase == phase and k.op == "attention" and op_name.startswith("attention"):
            index = 0 if op_name == "attention" else int(op_name.removeprefix("attention_ring"))
            steps[index] = steps.get(index, 0.0) + k.time_s + k.launch_gap_s
    overlapped = [steps[i] for i in sorted(steps)][:-1]
    return sum(max(0.0, hop_s - a) for a in overlapped)


def _expert_shard(layer, e: int, Matmul):
    """Split a mixture-of-experts block's experts over ``e`` GPUs: each holds E/e experts and receives the
    tokens routed to them from all ``e`` GPUs (the same number of routed tokens per GPU on average)."""
    ops = []
    for f in layer.ops:
        if f.name in ("experts_up", "experts_down"):
            op = f.op
            local = op.batch // e
            op = Matmul(m=op.m * e, n=op.n, k=op.k, batch=local, b_batch=local, dtype=op.dtype)
            f = dataclasses.replace(f, op=op, num_parameters=f.num_parameters // e)
        ops.append(f)
    return dataclasses.replace(layer, ops=tuple(ops))


def _peak(hardware, precision: str, warnings: list[str]) -> float | None:
    return model_peak_flop_per_s(hardware.gpu, hardware.name, precision, warnings)


def _memory(workload) -> tuple[dict[str, float], float]:
    memory = workload.memory
    keys = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "kv_cache_bytes",
            "workspace_bytes")
    out = {k: float(getattr(memory, k)) for k in keys}
    out["total_bytes"] = float(memory.total_bytes)
    if memory.pipeline_stage is not None:
        out["pipeline_stage"] = memory.pipeline_stage  # the fullest stage, whose bytes these are
    return out, float(memory.total_bytes)


def _fit_warning(hardware, total: float, warnings: list[str]) -> bool:
    capacity = hardware.gpu.dram.capacity_bytes
    if total > capacity:
        warnings.append(f"does not fit: the layout needs {total / 2**30:.1f} GiB per GPU, {hardware.gpu.dram.type} "
                        f"holds {capacity / 2**30:.1f} GiB (short by {(total - capacity) / 2**30:.1f} GiB); "
                        "times assume it fit")
        return False
    return True


def _training_result(hardware, workload, stats: StepStats, n_gpus: int, m: int, kernels, warnings, fabric,
                     launch_mode: str) -> SimulationResult:
    spec = workload.spec
    par = spec.parallelism
    ga = spec.gradient_accumulation_steps
    step = stats.step_s
    scale = par.data * (m / ga if workload.kind == "model" and (par.microbatches or ga) != ga else 1.0)
    model_flop = workload.model_flop_per_step * scale
    samples = workload.samples_per_step * scale
    tokens = workload.tokens_per_step * scale if workload.tokens_per_step else None
    peak = _peak(hardware, spec.precision, warnings)
    memory, total = _memory(workload)
    fits = _fit_warning(hardware, total, warnings)
    return SimulationResult(
        hardware=hardware.name, workload=workload.name, total_time_s=step, kernels=tuple(kernels),
        peak_memory_bytes=total, memory_capacity_bytes=hardware.gpu.dram.capacity_bytes, fits_in_memory=fits,
        launch_mode=launch_mode, calibration_source=(hardware.gpu.calibration.source if hardware.gpu.calibration
                                                 else "uncalibrated (datasheet values)"),
        step_time_s=step, samples_per_s=samples / step, tokens_per_s=(tokens / step) if tokens else None,
        mfu_fraction=model_flop / (step * peak * n_gpus) if peak else None, memory=memory,
        time_breakdown_s={"compute": stats.compute_s, "exposed_communication": stats.exposed_comm_s,
                          "pipeline_bubble": stats.bubble_s, "optimizer": stats.optimizer_s},
        warnings=tuple(warnings), spans=tuple(stats.spans), num_unique_kernels=len(kernels),
        num_gpus=n_gpus, parallelism=par.model_dump(), link_utilization=stats.link_utilization,
    )


def _inference(hardware, workload, rt, r, pol, fabric, group_plan, warnings, launch_mode, record_spans
               ) -> SimulationResult:
    from gpusim.workload.graph import chain
    from gpusim.workload.load import _inference_nodes
    from gpusim.workload.ops import dtype_bytes

    spec = workload.spec
    par = spec.parallelism
    t, p = par.tensor, par.pipeline
    details = dict(workload.details)
    nodes = _inference_nodes(spec, rt, pol, spec.fusion, details)
    rank = SimpleNamespace(name=workload.name, kind="ops", graph=WorkloadGraph(tuple(chain(nodes))), memory=None,
                           spec=workload.spec)
    result = simulate(hardware, rank, launch_mode=launch_mode, record_spans=record_spans)
    compute = result.total_time_s
    token_bytes = r.hidden_size * dtype_bytes(pol.activation_dtype)  # one token's activations
    nbytes = {"prefill": spec.batch_size * details["prompt_len"] * token_bytes}  # per pass
    nbytes.update({f"decode{j}": spec.batch_size * token_bytes for j in range(len(details.get("decode_buckets", [])))})
    gpn = hardware.num_gpus_per_node
    stage_ends = {f"layer{round(r.num_layers * k / p) - 1}" for k in range(1, p)}  # each stage's last layer

    def comm_after(i: int) -> list[tuple[CollectivePlan, int, str]]:
        """The collectives that follow kernel ``i`` of the rank's timeline, as (plan, calls, label): the
        tensor-parallel all-reduce after the embedding, after each layer's attention projection and at
        the end of each layer (2 L + 1 per token pass, Megatron-style), and a pipeline send after the
        last layer of each stage but the last; a kernel record standing for ``repeat`` decode steps is
        followed by as many."""
        k = kernels[i]
        here = k.node.split(".")
        ahead = kernels[i + 1].node.split(".") if i + 1 < len(kernels) else []
        if here[0] not in nbytes or len(here) < 3:
            return []
        out = []
        calls = max(1, k.repeat)
        unit_ends = ahead[:2] != here[:2]
        if t > 1 and (here[1] == "embedding" and unit_ends or here[1].startswith("layer")
                      and (unit_ends or here[2] == "proj" and ahead[:3] != here[:3])):
            out.append((group_plan("all_reduce", nbytes[here[0]], t, 1), calls, "tensor parallel"))
        if p > 1 and unit_ends and here[1] in stage_ends:
            send = plan_collective("send_recv", nbytes[here[0]], 2, fabric, gpus_per_node=1 if t >= gpn else 2)
            out.append((send, calls, "pipeline send"))
        return out

    # the collectives run between the rank's kernels: every later kernel and span moves by their time
    kernels = list(result.kernels)
    comm = 0.0
    moved = {"intra": 0.0, "nic": 0.0}  # bytes one GPU sends (and receives) over its ports
    points: list[float] = []  # kernel ends (unshifted) where collectives were inserted
    shifts: list[float] = []  # the total shift from each point on
    comm_spans = []
    for i, k in enumerate(kernels):
        end = k.start_s + k.time_s
        kernels[i] = dataclasses.replace(k, start_s=k.start_s + comm)
        for plan, calls, label in comm_after(i):
            if record_spans:
                port = "network port" if plan.nic_bytes > 0 else "NVLink port"
                name = f"{plan.collective} {label}" + (f" x{calls}" if calls > 1 else "")
                comm_spans.append(Span(port, name, end + comm, end + comm + calls * plan.time_s,
                                       (("algorithm", plan.algorithm), ("protocol", plan.protocol),
                                        ("bytes", plan.num_bytes), ("calls", calls))))
            comm += calls * plan.time_s
            moved["intra"] += calls * plan.intra_bytes
            moved["nic"] += calls * plan.nic_bytes
            points.append(end - 1e-12)
            shifts.append(comm)

    def moved_span(span: Span) -> Span:
        j = bisect.bisect_right(points, span.start_s)
        d = shifts[j - 1] if j else 0.0
        return dataclasses.replace(span, start_s=span.start_s + d, end_s=span.end_s + d)

    spans = tuple(moved_span(sp) for sp in result.spans) + tuple(comm_spans)
    total = compute + comm
    # the representative GPU's ports, named as a training step names stage 0's
    util = {}
    for port, cap in (("nvlink", fabric.intra_port_bytes_per_s), ("nic", fabric.nic_port_bytes_per_s)):
        key = "intra" if port == "nvlink" else "nic"
        if moved[key] > 0 and cap > 0 and total > 0:
            util[f"stage0.{port}_tx"] = util[f"stage0.{port}_rx"] = moved[key] / (cap * total)
    memory, footprint = _memory(workload)
    fits = _fit_warning(hardware, footprint, warnings)
    peak = _peak(hardware, spec.precision, warnings)
    n_gpus = t * p
    return SimulationResult(
        hardware=hardware.name, workload=workload.name, total_time_s=total, kernels=tuple(kernels),
        peak_memory_bytes=footprint, memory_capacity_bytes=hardware.gpu.dram.capacity_bytes, fits_in_memory=fits,
        launch_mode=launch_mode, calibration_source=result.calibration_source, step_time_s=total,
        samples_per_s=workload.samples_per_step / total,
        tokens_per_s=(workload.tokens_per_step / total) if workload.tokens_per_step else None,
        mfu_fraction=workload.model_flop_per_step / (total * peak * n_gpus) if peak else None,
        memory=memory, time_breakdown_s={"compute": compute, "exposed_communication": comm},
        warnings=tuple(warnings), spans=spans, num_unique_kernels=result.num_unique_kernels,
        num_gpus=n_gpus, parallelism=par.model_dump(), link_utilization=util,
    )
