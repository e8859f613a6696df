"""The workload graph: named op nodes with dependencies, in a valid execution order."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Iterable, Sequence

from gpusim.workload.ops import Op

PHASES = ("single", "forward", "backward", "recompute", "optimizer", "prefill", "decode")


class GraphError(ValueError):
    """A dependency problem; ``node`` names the offending node, ``field`` is ``after`` or ``name``."""

    def __init__(self, node: str, field_name: str, message: str) -> None:
        self.node = node
        self.field = field_name
        super().__init__(message)


@dataclass(frozen=True)
class OpNode:
    """One op in a workload: it runs ``repeat`` times back to back once every node in ``after`` has
    finished. FLOP and bytes of the node are ``repeat`` times the op's."""

    name: str
    op: Op
    after: tuple[str, ...] = ()
    phase: str = "single"
    layer: int | None = None
    repeat: int = 1
    once_per_step: bool = False
    """A training node that runs in the step's first micro-batch only (``repeat`` 1 where the other
    nodes of its phase repeat per micro-batch): an FP8 weight cast whose copies are kept."""

    def flop(self) -> float:
        return self.repeat * self.op.flop()

    def executed_flop(self) -> float:
        return self.repeat * self.op.executed_flop()

    def matrix_flop(self) -> float:
        return self.repeat * self.op.matrix_flop()

    def bytes_read(self) -> float:
        return self.repeat * self.op.bytes_read()

    def bytes_written(self) -> float:
        return self.repeat * self.op.bytes_written()


@dataclass(frozen=True)
class WorkloadGraph:
    """Nodes in a topological order (every node comes after all nodes it depends on)."""

    nodes: tuple[OpNode, ...]

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self):
        return iter(self.nodes)

    @cached_property
    def _by_name(self) -> dict[str, OpNode]:
        return {n.name: n for n in self.nodes}

    def node(self, name: str) -> OpNode:
        return self._by_name[name]

    def total_flop(self) -> float:
        return float(sum(n.flop() for n in self.nodes))

    def total_executed_flop(self) -> float:
        return float(sum(n.executed_flop() for n in self.nodes))

    def total_matrix_flop(self) -> float:
        return float(sum(n.matrix_flop() for n in self.nodes))

    def total_bytes_read(self) -> float:
        return float(sum(n.bytes_read() for n in self.nodes))

    def total_bytes_written(self) -> float:
        return float(sum(n.bytes_written() for n in self.nodes))

    def total_bytes(self) -> float:
        return self.total_bytes_read() + self.total_bytes_written()

    def num_kernels(self) -> int:
        """Launches per step: every node counted ``repeat`` times (kernels, copies, collectives)."""
        return int(sum(n.repeat for n in self.nodes))

    def distinct_ops(self) -> tuple[Op, ...]:
        """Each distinct op value once, in order of first use (identical layers share op values)."""
        return tuple(dict.fromkeys(n.op for n in self.nodes))

    def phases(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n.phase for n in self.nodes))

    def select(self, phase: str) -> tuple[OpNode, ...]:
        return tuple(n for n in self.nodes if n.phase == phase)

    def summary_by(self, key: str = "kind") -> dict[str, dict[str, float]]:
        """Per op kind (``key="kind"``) or per phase (``key="phase"``): launches, FLOP, bytes."""
        out: dict[str, dict[str, float]] = {}
        for n in self.nodes:
            k = n.op.kind if key == "kind" else n.phase
            row = out.setdefault(k, {"num_kernels": 0, "flop": 0.0, "bytes_read": 0.0, "bytes_written": 0.0})
            row["num_kernels"] += n.repeat
            row["flop"] += n.flop()
            row["bytes_read"] += n.bytes_read()
            row["bytes_written"] += n.bytes_written()
        return out


def order_nodes(nodes: Sequence[OpNode]) -> WorkloadGraph:
    """Check names and dependencies and return the nodes in a topological order.

    Among nodes that are ready, the earlier one in ``nodes`` goes first, so a graph already in a
    valid order keeps it. Raises GraphError for a duplicate name, a dependency on a name that does
    not exist, a node depending on itself, or a cycle (naming the nodes on it).
    """
    index: dict[str, int] = {}
    for i, n in enumerate(nodes):
        if n.name in index:
            raise GraphError(n.name, "name", f"duplicate op name {n.name!r}")
        index[n.name] = i
    in_order = True
    for i, n in enumerate(nodes):
        for dep in n.after:
            j = index.get(dep)
            if j is None:
                raise GraphError(n.name, "after", f"{n.name!r} depends on {dep!r}, which does not exist")
            if j == i:
                raise GraphError(n.name, "after", f"{n.name!r} depends on itself")
            if j > i:
                in_order = False
    if in_order:
        return WorkloadGraph(tuple(nodes))
    # Kahn's algorithm with file order as the tie-break.
    indegree = [len(set(n.after)) for n in nodes]
    users: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        for dep in set(n.after):
            users[index[dep]].append(i)
    ready = [i for i, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    out: list[OpNode] = []
    while ready:
        i = heapq.heappop(ready)
        out.append(nodes[i])
        for u in users[i]:
            indegree[u] -= 1
            if indegree[u] == 0:
                heapq.heappush(ready, u)
    if len(out) < len(nodes):
        stuck = {i for i, d in enumerate(indegree) if d > 0}
        cycle = _find_cycle(nodes, index, stuck)
        first = nodes[min(stuck)].name
        raise GraphError(first, "after", "dependency cycle: " + " -> ".join(cycle))
    return WorkloadGraph(tuple(out))


def _find_cycle(nodes: Sequence[OpNode], index: dict[str, int], stuck: set[int]) -> list[str]:
    """Follow dependencies among the stuck nodes until a name repeats."""
    start = min(stuck)
    path: list[int] = []
    seen: dict[int, int] = {}
    i = start
    while i not in seen:
        seen[i] = len(path)
        path.append(i)
        i = next(index[d] for d in nodes[i].after if index[d] in stuck)
    cycle = path[seen[i]:] + [i]
    return [nodes[j].name for j in reversed(cycle)]


def chain(nodes: Iterable[OpNode]) -> tuple[OpNode, ...]:
    """Give each node a dependency on the one before it (linear execution)."""
    out: list[OpNode] = []
    prev: str | None = None
    for n in nodes:
        out.append(replace(n, after=(prev,) if prev else ()))
        prev = n.name
    return tuple(out)
