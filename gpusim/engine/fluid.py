"""Shared bandwidth as fluid flows in SimPy.

A flow is a group of ``count`` identical activities (CTAs of one wave, a DMA copy, a link transfer)
that each must complete ``work`` units of progress. Per unit of progress each member moves
``demands[resource]`` bytes through shared resources (DRAM, L2, host link, ...), and a member can
progress at most at ``max_rate`` (its own compute or latency limit). Rates are weighted max-min fair:
all flows scale up together in proportion to their ``max_rate`` until a resource saturates; flows on
that resource are frozen there and the rest continue. Rates change only when a flow starts or ends,
and only for the flows connected to it through shared resources: max-min fairness splits over the
connected components of the flow-resource graph, so a start or an end re-solves its component alone
(a cluster's pipeline stages, each with its own ports, are many small components).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy

_EPS = 1e-12


@dataclass(eq=False)
class Flow:
    count: float
    work: float
    demands: dict[str, float]
    max_rate: float
    label: str
    done: simpy.Event
    remaining: float = 0.0
    rate: float = 0.0
    limiter: str = "max_rate"
    limiter_time_s: dict[str, float] = field(default_factory=dict)


class FluidSystem:
    def __init__(self, env: simpy.Environment, capacities: dict[str, float]) -> None:
        self.env = env
        self.capacities = dict(capacities)
        self._rank = {k: i for i, k in enumerate(self.capacities)}
        self.flows: list[Flow] = []
        self._flows_on: dict[str, list[Flow]] = {k: [] for k in capacities}
        """Active flows with a demand on each resource, in start order."""
        self.busy_bytes: dict[str, float] = {k: 0.0 for k in capacities}
        self._last = env.now
        self._idle: simpy.Event | None = None
        """What the solver waits on while no flow can progress."""
        self._sleeping = False
        """The solver waits for the next flow to end; a new flow interrupts it."""
        self._solver = env.process(self._run())

    # -------------------------------------------------------------------------------- API
    def add_flow(self, count: float, work: float, demands: dict[str, float], max_rate: float,
                 label: str = "") -> Flow:
        """Start a flow now; ``flow.done`` fires when it has completed its work."""
        self._advance()
        flow = Flow(count=count, work=work, demands={k: v for k, v in demands.items() if v > 0},
                    max_rate=max_rate, label=label, done=self.env.event(), remaining=work)
        for k in flow.demands:
            if k not in self.capacities:
                raise KeyError(f"unknown resource {k!r}")
        self.flows.append(flow)
        for k in flow.demands:
            self._flows_on[k].append(flow)
        self._recompute(self._component(list(flow.demands), [flow]))
        if self._sleeping:
            self._sleeping = False
            self._solver.interrupt()
        elif self._idle is not None and not self._idle.triggered:
            self._idle.succeed()
        return flow

    def utilization(self, resource: str, elapsed_s: float) -> float:
        if elapsed_s <= 0:
            return 0.0
        return self.busy_bytes[resource] / (self.capacities[resource] * elapsed_s)

    # -------------------------------------------------------------------------------- internals
    def _advance(self) -> None:
        dt = self.env.now - self._last
        self._last = self.env.now
        if dt <= 0:
            return
        for f in self.flows:
            progress = f.rate * dt
            f.remaining -= progress
            f.limiter_time_s[f.limiter] = f.limiter_time_s.get(f.limiter, 0.0) + dt
            for k, d in f.demands.items():
                self.busy_bytes[k] += progress * d * f.count

    def _component(self, resources: list[str], seeds: list[Flow]) -> list[Flow]:
        """The active flows connected to ``resources`` (and the ``seeds``) through shared resources,
        in start order."""
        members = {id(f) for f in seeds}
        seen: set[str] = set()
        stack = list(resources)
        while stack:
            res = stack.pop()
            if res in seen:
                continue
            seen.add(res)
            for f in self._flows_on[res]:
                if id(f) not in members:
                    members.add(id(f))
                    stack.extend(f.demands)
        return [f for f in self.flows if id(f) in members]

    def _recompute(self, active: list[Flow]) -> None:
        """Weighted max-min fair rates of ``active``, a union of connected components."""
        if not active:
            return
        used = {k for f in active for k in f.demands}
        # in the capacities' order, so that ties between bottlenecks break as they always have
        free = {k: self.capacities[k] for k in sorted(used, key=self._rank.__getitem__)}
        lam = {id(f): 0.0 for f in active}
        unfrozen = list(active)
        for f in active:
            f.limiter = "max_rate"
        while unfrozen:
            # largest common scale (fraction of each flow's max_rate) every resource allows
            best_scale, bottleneck = 1.0, None
            for res, cap in free.items():
                use = sum(f.max_rate * f.count * f.demands.get(res, 0.0) for f in unfrozen)
                if use > _EPS:
                    scale = max(0.0, cap) / use
                    if scale < best_scale:
                        best_scale, bottleneck = scale, res
            if bottleneck is None:
                for f in unfrozen:
                    lam[id(f)] = 1.0
                break
            frozen = [f for f in unfrozen if f.demands.get(bottleneck, 0.0) > 0]
            for f in frozen:
                lam[id(f)] = best_scale
                f.limiter = bottleneck
                for res, d in f.demands.items():
                    free[res] -= best_scale * f.max_rate * f.count * d
            unfrozen = [f for f in unfrozen if f not in frozen]
        for f in active:
            f.rate = lam[id(f)] * f.max_rate

    def _run(self):
        while True:
            horizon = min(((f.remaining / f.rate) if f.rate > 0 else float("inf") for f in self.flows),
                          default=float("inf"))
            if horizon == float("inf"):
                self._idle = self.env.event()
                yield self._idle
                self._idle = None
                continue
            self._sleeping = True
            try:
                yield self.env.timeout(max(horizon, 0.0))
            except simpy.Interrupt:
                pass
            self._sleeping = False
            self._advance()
            now = self.env.now
            # done: all but a rounding error, or so little left that it would end at this very instant
            # (a time step below the clock's float resolution would never advance it)
            finished = [f for f in self.flows if f.remaining <= f.work * 1e-9 + _EPS
                        or (f.rate > 0 and now + f.remaining / f.rate <= now)]
            if finished:
                self.flows = [f for f in self.flows if f not in finished]
                for f in finished:
                    for k in f.demands:
                        self._flows_on[k].remove(f)
                self._recompute(self._component([k for f in finished for k in f.demands], []))
                for f in finished:
                    f.remaining = 0.0
                    f.done.succeed(f)
