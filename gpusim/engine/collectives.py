"""Links and collectives of a multi-GPU system: the fabric, the algorithms NCCL uses, and their cost.

A system description becomes a :class:`Fabric`: per GPU, one NVLink (or Infinity Fabric / PCIe) port
and one network port, each full duplex with a per-direction bandwidth and a per-hop latency. A
collective on ``n`` GPUs (``g`` of them per node) is planned as a :class:`CollectivePlan` for one
representative GPU: how many bytes it pushes through each of its ports and how much latency the
algorithm's steps add. Every GPU of a ring or tree does the same work, so one representative stands for
all of them (symmetry). The engine (:mod:`gpusim.engine.cluster`) runs a plan as a fluid flow over those
port resources, where it shares bandwidth with whatever else uses the ports at the same time; alone on
its ports a plan takes exactly :meth:`CollectivePlan.time_s`.

Algorithms (as in NCCL; Jeaugey, "Massively Scale Your Deep Learning Training with NCCL 2.4", 2019;
NCCL documentation "Collective Operations"; nccl-tests PERFORMANCE.md for algbw/busbw):

* ``ring``: all-reduce = reduce-scatter + all-gather, ``2(n-1)`` steps, each GPU sends ``2(n-1)/n``
  of the message; across nodes one ring per rail, so a node's NICs carry the ring's crossing.
* ``tree``: NCCL's double binary tree between nodes (``2 log2 N`` network hops, every node sends and
  receives about the whole message once each way) with a chain inside each node.
* ``nvls``: NVLink SHARP in-switch reduction (NVSwitch gen3): each GPU reads its reduced shard through
  the switch (multimem load-reduce) and writes it back as a multicast, so its port carries
  ``S (1 + 1/n)`` each way whatever ``n`` is; across nodes, NVLS inside the node and a ring per rail
  between nodes (NCCL's NVLS-tree/CollNet-style hierarchy). The message moves in NCCL's loops of one
  chunk per channel and GPU, the chunk shrinking with the message (:func:`nvls_loops`), and every loop
  after the first waits for its own round trip through the switch.
* ``hierarchical``: reduce-scatter inside the node, all-reduce of ``S/g`` between nodes on each rail,
  all-gather inside the node.

Protocols (NCCL LL / LL128 / Simple) trade latency for bandwidth: LL sends 8-byte flag+data words
(half the link carries payload), LL128 carries 120 payload bytes per 128-byte line, Simple moves the
whole link but synchronises with heavier fences. The model picks, like NCCL's tuner, the algorithm and
protocol with the smallest predicted time for the message size and topology.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpusim.engine.machine import machine_from_gpu
from gpusim.errors import SimulationError

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "broadcast")


@dataclass(frozen=True)
class Protocol:
    name: str
    payload_fraction: float
    """Share of the link's bytes that carry payload (LL: 8 of 16 bytes; LL128: 120 of 128)."""
    base_latency_s: float
    """Fixed cost of one collective call with this protocol (kernel start, first synchronisation)."""
    hop_factor: float
    """Multiplier on a link's per-hop latency for one pipeline step with this protocol."""


# Base latencies and per-step factors are of the order of NCCL's own tuning model (NCCL source,
# src/graph/tuning.cc: base latencies of ~6.6 us (LL), ~14 us (LL128), ~8.4 us (Simple) per ring call and
# NVLink per-hop latencies of ~0.6 / 1.9 / 3.4 us); here the hop latency comes from the hardware
# description and the protocols scale it.
PROTOCOLS = (
    Protocol("LL", 0.5, 6.6e-6, 0.6),
    Protocol("LL128", 120 / 128, 14.0e-6, 1.9),
    Protocol("Simple", 1.0, 8.4e-6, 3.4),
)


@dataclass(frozen=True)
class Fabric:
    """Per-GPU view of a system's links (per direction, achievable rates after calibration)."""

    name: str
    num_gpus_per_node: int
    num_nodes: int
    intra_topology: str
    peer_link_bytes_per_s: float
    """One peer link (full mesh: the link to one peer), per direction, calibrated."""
    num_peer_links: int
    intra_port_bytes_per_s: float
    """All of a GPU's intra-node links together, per direction, calibrated."""
    intra_hop_latency_s: float
    in_switch_reduction: bool
    nic_port_bytes_per_s: float
    """A GPU's share of its node's NICs, per direction (after fat-tree oversubscription)."""
    net_hop_latency_s: float
    launch_s: float
    """Host cost of issuing a collective kernel."""
    nvls_fraction: float = 1.0
    """Calibration (the GPU's ``in_switch_reduction_fraction``): share of the port rate NVLS reaches."""
    collective_sm_fraction: float = 0.0
    """Share of the GPU's SMs a running collective kernel holds (its channels over the SM count)."""
    dram_bytes_per_s: float = 0.0
    """The GPU's achievable DRAM rate (calibrated): a peer-to-peer all-reduce stages its input through it."""
    device_launch_s: float = 0.0
    """Device-side cost of one more launch issued by the same call (the GPU's ``graph_kernel_launch_s``)."""
    nvls_channels: int = 16
    """Channels an in-switch (NVLS) all-reduce runs on (the system's ``intra_node.nvls_channels``)."""

    @property
    def num_gpus(self) -> int:
        return self.num_gpus_per_node * self.num_nodes

    def intra_bytes_per_s(self, group_in_node: int) -> float:
        """Rate a GPU's intra-node port offers to a ring/all-to-all among ``group_in_node`` GPUs."""
        if self.intra_topology == "full_mesh":
            # one direct link per peer: a collective over g GPUs runs g-1 rings, one per link
            return self.peer_link_bytes_per_s * max(1, min(group_in_node - 1, self.num_peer_links))
        return self.intra_port_bytes_per_s

    def p2p_bytes_per_s(self) -> float:
        if self.intra_topology == "full_mesh":
            return self.peer_link_bytes_per_s
        return self.intra_port_bytes_per_s


def fabric_of(hardware, launch_mode: str = "eager") -> Fabric:
    """The :class:`Fabric` of a system description (a single GPU description is a one-GPU system).
    ``launch_mode`` (``eager``, ``native`` or ``graph``) sets the host cost of each collective's launch
    (:meth:`~gpusim.engine.machine.Machine.host_launch_s`)."""
    gpu = hardware.gpu
    cal = gpu.calibration
    peer_fraction = (cal.peer_link_fraction if cal is not None and cal.peer_link_fraction else 1.0)
    host_fraction = (cal.host_link_fraction if cal is not None and cal.host_link_fraction else 1.0)
    machine = machine_from_gpu(hardware.name, gpu)
    launch = machine.host_launch_s(launch_mode)
    nvls = (cal.in_switch_reduction_fraction if cal is not None and cal.in_switch_reduction_fraction else 1.0)
    dram = machine.dram_achievable_bytes_per_s
    device_launch = gpu.launch.graph_kernel_launch_s
    if hardware.kind != "system":
        return Fabric(hardware.name, 1, 1, "none", 0.0, 0, 0.0, 0.0, False, 0.0, 0.0, launch, nvls,
                      dram_bytes_per_s=dram, device_launch_s=device_launch)
    intra = hardware.intra_node
    if intra.topology == "pcie_switch" or gpu.peer_links is None:
        link = gpu.host_link.bandwidth_bytes_per_s * host_fraction
        num_links, port, hop = 1, link, gpu.host_link.latency_s + intra.switch_latency_s
    else:
        pl = gpu.peer_links
        link = pl.link_bandwidth_bytes_per_s * peer_fraction
        num_links = pl.num_links
        # nvswitch: every link goes to the switch; ring: the links are split between the two neighbours and a
        # bidirectional ring uses both; either way a ring collective can drive all of them
        port = num_links * link
        hop = pl.latency_s + intra.switch_latency_s
    inter = hardware.inter_node
    nic = (inter.num_nics_per_node * inter.nic_bandwidth_bytes_per_s / hardware.num_gpus_per_node
           / inter.oversubscription * peer_fraction_net(hardware))
    # a collective holds at most all SMs but one (compute CTAs still get scheduled beside it)
    sm_fraction = min(intra.collective_channels or 0, gpu.num_sms - 1) / gpu.num_sms
    return Fabric(hardware.name, hardware.num_gpus_per_node, hardware.num_nodes, intra.topology, link, num_links,
                  port, hop, intra.in_switch_reduction, nic, inter.latency_s, launch, nvls, sm_fraction, dram,
                  device_launch, intra.nvls_channels)


def peer_fraction_net(hardware) -> float:
    """Achievable share of the NIC line rate: InfiniBand/RoCE payload after headers (4 KiB MTU: ~96 %)."""
    return 0.96 if hardware.inter_node.type in ("infiniband", "roce") else 0.9


# ------------------------------------------------------------------------------------------ plans


@dataclass(frozen=True)
class CollectivePlan:
    """One representative GPU's share of a collective: port bytes and algorithm latency."""

    collective: str
    algorithm: str
    protocol: str
    num_bytes: float
    num_gpus: int
    latency_s: float
    intra_bytes: float
    """Bytes through the GPU's intra-node port per direction (protocol overhead included)."""
    nic_bytes: float
    """Bytes through the GPU's network port per direction."""
    intra_bytes_per_s: float
    nic_bytes_per_s: float
    loops: int = 1
    """Loops of chunks the message moves in where each pays its own latency (NVLS); 1 otherwise."""

    @property
    def transfer_s(self) -> float:
        t = 0.0
        if self.intra_bytes > 0:
            t = max(t, self.intra_bytes / self.intra_bytes_per_s)
        if self.nic_bytes > 0:
            t = max(t, self.nic_bytes / self.nic_bytes_per_s)
        return t

    @property
    def time_s(self) -> float:
        """Alone on its ports: latency plus the slowest port's bytes at its rate."""
        return self.latency_s + self.transfer_s

    @property
    def algbw_bytes_per_s(self) -> float:
        return algbw(self.collective, self.num_bytes, self.time_s)

    @property
    def busbw_bytes_per_s(self) -> float:
        return busbw(self.collective, self.num_bytes, self.num_gpus, self.time_s)


def algbw(collective: str, num_bytes: float, time_s: float) -> float:
    """nccl-tests algorithm bandwidth: message bytes / time."""
    return num_bytes / time_s if time_s > 0 else 0.0


def busbw_factor(collective: str, num_gpus: int) -> float:
    """nccl-tests bus-bandwidth factor (PERFORMANCE.md): all-reduce 2(n-1)/n; all-gather, reduce-scatter
    and all-to-all (n-1)/n; broadcast and send/recv 1."""
    n = max(1, num_gpus)
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def busbw(collective: str, num_bytes: float, num_gpus: int, time_s: float) -> float:
    return algbw(collective, num_bytes, time_s) * busbw_factor(collective, num_gpus)


def _split(fabric: Fabric, num_gpus: int, gpus_per_node: int | None) -> tuple[int, int]:
    """(GPUs of the group per node, nodes the group spans)."""
    g = gpus_per_node or min(num_gpus, fabric.num_gpus_per_node)
    g = max(1, min(g, num_gpus, fabric.num_gpus_per_node))
    nodes = math.ceil(num_gpus / g)
    return g, nodes


def candidate_plans(collective: str, num_bytes: float, num_gpus: int, fabric: Fabric, *,
                    gpus_per_node: int | None = None) -> list[CollectivePlan]:
    """Every (algorithm, protocol) this system can run the collective with."""
    if collective not in COLLECTIVES:
        raise SimulationError(f"unknown collective {collective!r}; expected one of {', '.join(COLLECTIVES)}")
    n = int(num_gpus)
    S = float(num_bytes)
    if n < 1:
        raise SimulationError("a collective needs at least one GPU")
    if n > fabric.num_gpus:
        raise SimulationError(f"{collective} over {n} GPUs, but {fabric.name} has {fabric.num_gpus}")
    if n == 1:
        return [CollectivePlan(collective, "local", "none", S, 1, 0.0, 0.0, 0.0, 1.0, 1.0)]
    g, N = _split(fabric, n, gpus_per_node)
    intra_rate = fabric.intra_bytes_per_s(g) if g > 1 else 1.0
    nic_rate = fabric.nic_port_bytes_per_s if N > 1 else 1.0
    if N > 1 and nic_rate <= 0:
        raise SimulationError(f"{fabric.name} has no network between nodes")
    a_in, a_net = fabric.intra_hop_latency_s, fabric.net_hop_latency_s
    plans: list[CollectivePlan] = []

    def add(algorithm: str, proto: Protocol, hops_in: float, hops_net: float, intra: float, nic: float,
            intra_r: float = intra_rate, extra_latency: float = 0.0, loops: int = 1) -> None:
        latency = (fabric.launch_s + proto.base_latency_s + extra_latency
                   + proto.hop_factor * (hops_in * a_in + hops_net * a_net))
        plans.append(CollectivePlan(collective, algorithm, proto.name, S, n, latency,
                                    intra / proto.payload_fraction, nic / proto.payload_fraction,
                                    intra_r, nic_rate, loops))

    # share of a ring's sends that stay inside the node / cross to the next node (one ring per rail)
    in_share = (g - 1) / g if N > 1 else 1.0
    net_share = 1.0 / g if N > 1 else 0.0
    node_share = (g - 1) / g
    if collective == "all_reduce":
        for proto in PROTOCOLS:
            w = 2 * (n - 1) / n * S
            add("ring", proto, 2 * (n - 1), 0, w * in_share, w * net_share)
            if N > 1:
                # ring steps that cross nodes pay the network latency instead of the NVLink one
                plans[-1] = _relatency(plans[-1], fabric, proto, 2 * (n - N), 2 * N)
                # double binary tree between nodes, chain inside: every node sends/receives ~S each way
                add("tree", proto, 2 * (g - 1), 2 * math.log2(N), 2 * S * node_share, 2 * S / g)
                ws = 2 * (N - 1) / N * S / g
                add("hierarchical", proto, 2 * (g - 1), 2 * (N - 1), 2 * S * node_share, ws)
        if fabric.in_switch_reduction and g > 2:
            proto = PROTOCOLS[2]
            rate = intra_rate * fabric.nvls_fraction
            nvls_bytes = S * (1 + 1 / g)
            # every loop after the first waits for its own round trip through the switch
            loops = nvls_loops(S, fabric.nvls_channels, g, tree=N > 1)
            loop_latency = (loops - 1) * proto.hop_factor * 2 * a_in
            if N == 1:
                add("nvls", proto, 2, 0, nvls_bytes, 0.0, intra_r=rate, extra_latency=loop_latency, loops=loops)
            else:
                add("nvls_tree", proto, 2, 2 * math.log2(N), nvls_bytes, 2 * S / g, intra_r=rate,
                    extra_latency=loop_latency, loops=loops)
    elif collective in ("all_gather", "reduce_scatter"):
        for proto in PROTOCOLS:
            w = (n - 1) / n * S
            add("ring", proto, n - 1, 0, w * in_share, w * net_share)
            if N > 1:
                plans[-1] = _relatency(plans[-1], fabric, proto, n - N, N)
    elif collective == "broadcast":
        for proto in PROTOCOLS:
            add("ring", proto, n - 1, 0, S * in_share, S * net_share)
            if N > 1:
                plans[-1] = _relatency(plans[-1], fabric, proto, n - N, N)
    elif collective == "all_to_all":
        for proto in PROTOCOLS[1:]:
            # every GPU sends S/n to each peer at once: (g-1)/n of S over NVLink, (n-g)/n over the network
            add("direct", proto, 1, 1 if N > 1 else 0, S * (g - 1) / n, S * (n - g) / n)
    elif collective == "send_recv":
        for proto in PROTOCOLS:
            if N > 1:
                add("p2p", proto, 0, 1, 0.0, S)
            else:
                add("p2p", proto, 1, 0, S, 0.0, intra_r=fabric.p2p_bytes_per_s())
    return plans


# NCCL's chunk for an NVLS all-reduce (src/enqueue.cc, the chunk-size step of its work setup, 2.18-2.27):
# it starts at the largest chunk and takes the next smaller one while the message is under ``multiple``
# x channels x GPUs x the current chunk, so mid-size messages move in small chunks and several loops.
_NVLS_CHUNKS = ((131072, ((64, 65536), (8, 32768), (2, 16384))),
                (524288, ((32, 262144), (16, 131072), (4, 65536), (1, 32768))))
"""(largest chunk bytes, ((multiple, next chunk bytes), ...)) for NVLS in one node, then NVLS-tree."""


def nvls_chunk_bytes(num_bytes: float, num_channels: int, num_heads: int, tree: bool = False) -> int:
    """Bytes of each chunk NCCL's NVLS (``tree``: NVLS-tree) all-reduce moves per channel and GPU."""
    chunk, steps = _NVLS_CHUNKS[1 if tree else 0]
    concurrent = num_channels * num_heads
    for multiple, smaller in steps:
        if num_bytes < multiple * concurrent * chunk and chunk > smaller:
            chunk = smaller
    return chunk


def nvls_loops(num_bytes: float, num_channels: int, num_heads: int, tree: bool = False) -> int:
    """Loops an NVLS all-reduce of ``num_bytes`` takes: each moves one chunk per channel and GPU (head)
    through the switch's reduction and multicast."""
    chunk = nvls_chunk_bytes(num_bytes, num_channels, num_heads, tree)
    return max(1, math.ceil(num_bytes / (num_channels * num_heads * chunk)))


def _relatency(plan: CollectivePlan, fabric: Fabric, proto: Protocol, hops_in: float, hops_net: float
               ) -> CollectivePlan:
    latency = (fabric.launch_s + proto.base_latency_s
               + proto.hop_factor * (hops_in * fabric.intra_hop_latency_s + hops_net * fabric.net_hop_latency_s))
    return replace(plan, latency_s=latency)


def plan_collective(collective: str, num_bytes: float, num_gpus: int, fabric: Fabric, *,
                    gpus_per_node: int | None = None, algorithm: str | None = None,
                    protocol: str | None = None) -> CollectivePlan:
    """The plan NCCL's tuner would pick (smallest predicted time), or the one ``algorithm``/``protocol``
    force (e.g. ``algorithm="ring"`` for ``NCCL_NVLS_ENABLE=0``)."""
    plans = candidate_plans(collective, num_bytes, num_gpus, fabric, gpus_per_node=gpus_per_node)
    if algorithm is not None:
        plans = [p for p in plans if p.algorithm in (algorithm, "local")]
    if protocol is not None:
        plans = [p for p in plans if p.protocol == protocol]
    if not plans:
        raise SimulationError(f"{fabric.name} cannot run {collective} over {num_gpus} GPUs with "
                              f"algorithm {algorithm or 'any'} / protocol {protocol or 'any'}")
    return min(plans, key=lambda p: p.time_s)


# PyTorch's IntraNodeComm (torch/csrc/distributed/c10d/intra_node_comm.cu, 2024): its one-shot kernel
# all-reduces messages up to kOneShotThreshBytes, its two-shot kernel those up to kTwoShotThreshBytes;
# larger ones go to NCCL.
ONE_SHOT_MAX_BYTES = 256 * 2**10
TWO_SHOT_MAX_BYTES = 10 * 2**20
FULLY_CONNECTED_TOPOLOGIES = ("nvswitch", "full_mesh")
"""Intra-node topologies where every GPU reaches every other over one NVLink hop (IntraNodeComm's
``FULLY_CONNECTED``); in a ring of direct links it would need relays."""


def intra_node_all_reduce_plan(num_bytes: float, num_gpus: int, fabric: Fabric) -> CollectivePlan | None:
    """The all-reduce of a peer-to-peer library inside one node (PyTorch's IntraNodeComm; TensorRT-LLM's
    and vLLM's custom all-reduce work alike), or None where it does not apply (more than
    :data:`TWO_SHOT_MAX_BYTES`, a group wider than a node, GPUs not all directly connected): NCCL then.

    One call (one host launch cost) copies the GPU's input into a buffer its peers can read (a second
    launch, paid on the device; the bytes are read and written once in DRAM) and launches one kernel that
    * waits at a barrier: each GPU raises a flag on every peer and spins on its own (one hop);
    * one-shot (up to :data:`ONE_SHOT_MAX_BYTES`): loads the whole message from every peer's buffer and
      sums it (one round trip, 2 hops); each GPU's port carries ``(n-1) S`` each way;
    * two-shot: loads and sums only its ``1/n`` share (a reduce-scatter), passes a second barrier, then
      loads the other GPUs' reduced shares (an all-gather): 2 barriers and 2 round trips, ``2 (n-1)/n S``
      each way, the ring's bytes.
    No pipeline of steps as in NCCL's ring: the latency is the launches and 3 or 6 hops, whatever ``n``."""
    n = int(num_gpus)
    S = float(num_bytes)
    if (n < 2 or n > fabric.num_gpus_per_node or S > TWO_SHOT_MAX_BYTES
            or fabric.intra_topology not in FULLY_CONNECTED_TOPOLOGIES):
        return None
    one_shot = S <= ONE_SHOT_MAX_BYTES
    hops = 3 if one_shot else 6
    port_bytes = (n - 1) * S if one_shot else 2 * (n - 1) / n * S
    staging_s = 2 * S / fabric.dram_bytes_per_s if fabric.dram_bytes_per_s > 0 else 0.0
    latency = fabric.launch_s + fabric.device_launch_s + hops * fabric.intra_hop_latency_s + staging_s
    return CollectivePlan("all_reduce", "one_shot" if one_shot else "two_shot", "p2p", S, n, latency,
                          port_bytes, 0.0, fabric.intra_bytes_per_s(n), 1.0)


def collective_time_s(collective: str, num_bytes: float, num_gpus: int, fabric: Fabric, **kwargs) -> float:
    return plan_collective(collective, num_bytes, num_gpus, fabric, **kwargs).time_s
