"""Collective algorithms and their cost on hand-derivable fabrics."""

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from gpusim.config import load_hardware
from gpusim.engine.cluster import ChunkModel, LayerCollective, LayoutPlan, StageModel, run_step
from gpusim.engine.collectives import (PROTOCOLS, Fabric, busbw_factor, fabric_of, nvls_chunk_bytes, nvls_loops,
                                      plan_collective)
from gpusim.errors import SimulationError

SIMPLE = PROTOCOLS[2]


def tiny(port=1e9, hop=1e-6, gpus=4, nodes=1, nic=0.0, nvls=False, topology="nvswitch", links=1):
    return Fabric("tiny", gpus, nodes, topology, port / links, links, port, hop, nvls, nic, 2e-6, 0.0)


def test_ring_all_reduce_is_exact_on_a_tiny_system():
    f = tiny()
    plan = plan_collective("all_reduce", 3e9, 4, f, algorithm="ring", protocol="Simple")
    # 2(n-1) = 6 steps of 3.4 x 1 us, Simple base 8.4 us, each GPU sends 2 * 3/4 * 3 GB at 1 GB/s
    assert plan.time_s == pytest.approx(4.5 + 8.4e-6 + 6 * 3.4e-6, rel=1e-12)
    assert plan.busbw_bytes_per_s == pytest.approx(3e9 * 1.5 / plan.time_s)


def test_all_gather_moves_half_of_all_reduce():
    f = tiny()
    ar = plan_collective("all_reduce", 8e9, 4, f, algorithm="ring", protocol="Simple")
    ag = plan_collective("all_gather", 8e9, 4, f, algorithm="ring", protocol="Simple")
    assert ag.intra_bytes == pytest.approx(ar.intra_bytes / 2)


def test_small_messages_are_latency_bound_and_large_bandwidth_bound():
    f = fabric_of(load_hardware("dgx_a100"))
    small = plan_collective("all_reduce", 1024, 8, f)
    large = plan_collective("all_reduce", 2**34, 8, f)
    assert small.transfer_s < small.latency_s
    assert large.transfer_s > 100 * large.latency_s
    assert small.protocol == "LL" and large.protocol == "Simple"


def test_nvls_chosen_for_large_all_reduce_where_the_switch_reduces():
    f = fabric_of(load_hardware("dgx_h100"))
    assert plan_collective("all_reduce", 2**30, 8, f).algorithm == "nvls"
    assert plan_collective("all_reduce", 2**30, 8, fabric_of(load_hardware("dgx_a100"))).algorithm == "ring"


def test_nvls_chunks_shrink_for_mid_size_messages_as_nccl_picks_them():
    # 16 channels x 8 GPUs = 128 chunks per loop; the chunk is 128 KiB from 64 x 128 x 128 KiB = 1 GiB up,
    # 64 KiB from 8 x 128 x 64 KiB = 64 MiB, 32 KiB from 2 x 128 x 32 KiB = 8 MiB, 16 KiB below
    assert [nvls_chunk_bytes(2**k, 16, 8) // 1024 for k in (34, 30, 29, 26, 25, 23, 22, 15)] == [
        128, 128, 64, 64, 32, 32, 16, 16]
    assert [nvls_loops(2**k, 16, 8) for k in (34, 30, 26, 24, 20)] == [1024, 64, 8, 4, 1]
    # NVLS-tree starts from 512 KiB chunks: 1 GiB < 32 x 128 x 512 KiB = 2 GiB takes 256 KiB
    assert nvls_chunk_bytes(2**30, 16, 8, tree=True) == 256 * 1024


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 2**36), st.integers(3, 8), st.sampled_from([1, 2, 4, 8, 16, 24, 32, 64]), st.booleans())
def test_more_nvls_channels_never_add_loops_and_twice_the_bytes_never_take_fewer(nbytes, gpus, channels, tree):
    loops = nvls_loops(nbytes, channels, gpus, tree)
    assert 1 <= loops
    assert nvls_loops(nbytes, 2 * channels, gpus, tree) <= loops
    assert nvls_loops(2 * nbytes, channels, gpus, tree) >= loops


def test_nvls_all_reduce_pays_a_switch_round_trip_per_loop_on_a_tiny_system():
    f = replace(tiny(nvls=True), nvls_channels=2)
    # 8 MiB over 2 channels x 4 GPUs: 64 KiB chunks (8 MiB < 64 x 8 x 128 KiB, not < 8 x 8 x 64 KiB),
    # 16 loops; each GPU's port carries S (1 + 1/4) at 1 GB/s; Simple base 8.4 us, 2 hops of 3.4 x 1 us,
    # and 15 more loops of the same 2 hops
    plan = plan_collective("all_reduce", 8 * 2**20, 4, f, algorithm="nvls")
    assert nvls_loops(8 * 2**20, 2, 4) == 16
    assert plan.time_s == pytest.approx(8 * 2**20 * 1.25 / 1e9 + 8.4e-6 + 2 * 3.4e-6 + 15 * 2 * 3.4e-6, rel=1e-12)
    # more channels, fewer loops: over 16 x 4 chunks NCCL shrinks the chunk to 32 KiB (8 MiB < 8 x 64 x
    # 64 KiB), so 4 loops of 2 MiB
    wide = plan_collective("all_reduce", 8 * 2**20, 4, replace(f, nvls_channels=16), algorithm="nvls")
    assert wide.time_s == pytest.approx(8 * 2**20 * 1.25 / 1e9 + 8.4e-6 + 2 * 3.4e-6 + 3 * 2 * 3.4e-6, rel=1e-12)


def test_nvls_loses_a_sixth_of_its_port_rate_to_round_trips_at_16_gib():
    # 8x H200: 1,024 loops of 10.2 us (3.4 x 2 x 1.5 us) beside 16 GiB x 9/8 at the ring-calibrated port
    # rate; what the old fitted NVLS factor (0.83) stood for
    f = fabric_of(load_hardware("hgx_h200"))
    plan = plan_collective("all_reduce", 2**34, 8, f)
    assert plan.algorithm == "nvls" and f.nvls_fraction == 1.0
    assert plan.latency_s - plan_collective("all_reduce", 2**20, 8, f, algorithm="nvls").latency_s == \
        pytest.approx(1023 * 3.4 * 2 * f.intra_hop_latency_s)
    assert plan.transfer_s / plan.time_s == pytest.approx(0.84, abs=0.01)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"]),
       st.floats(1e3, 1e11), st.integers(2, 8), st.integers(1, 4))
def test_doubling_link_bandwidth_never_slows_a_collective(collective, nbytes, gpus_per_node, nodes):
    n = gpus_per_node * nodes if collective != "send_recv" else 2
    slow = tiny(port=100e9, gpus=gpus_per_node, nodes=nodes, nic=25e9)
    fast = tiny(port=200e9, gpus=gpus_per_node, nodes=nodes, nic=50e9)
    if n > slow.num_gpus:
        return
    assert plan_collective(collective, nbytes, n, fast).time_s <= plan_collective(collective, nbytes, n, slow).time_s


def test_busbw_factors_follow_nccl_tests():
    assert busbw_factor("all_reduce", 8) == pytest.approx(1.75)
    assert busbw_factor("all_gather", 8) == pytest.approx(0.875)
    assert busbw_factor("send_recv", 2) == 1.0


def test_too_many_gpus_is_an_error():
    with pytest.raises(SimulationError):
        plan_collective("all_reduce", 1e6, 16, tiny())


def test_a_collective_alone_on_its_ports_runs_as_planned_in_the_fluid_engine():
    """A data-parallel all-reduce as a fluid flow takes exactly the plan's time when nothing shares the ports."""
    f = tiny(port=10e9)
    plan = plan_collective("all_reduce", 1e9, 4, f)
    stage = StageModel([ChunkModel(0.0, 0.0, 1, grad_bytes=1e9)])
    lp = LayoutPlan("1f1b", 1, 1, 1, bucket_bytes=1e12,
                    dp_plan=lambda coll, nbytes: plan_collective(coll, nbytes, 4, f))
    stats = run_step(f, [stage], lp)
    assert stats.step_s == pytest.approx(plan.time_s, rel=1e-9)


def test_two_collectives_sharing_a_port_take_twice_as_long():
    f = tiny(port=10e9)
    plan = plan_collective("all_reduce", 1e9, 4, f, algorithm="ring", protocol="Simple")
    chunk = ChunkModel(0.0, 0.0, 1, layer_comm_backward=((LayerCollective(plan),),))
    one = run_step(f, [StageModel([chunk])], LayoutPlan("1f1b", 1, 1, 1)).step_s
    chunk2 = ChunkModel(0.0, 0.0, 1, layer_comm_backward=((LayerCollective(plan), LayerCollective(plan)),))
    two = run_step(f, [StageModel([chunk2])], LayoutPlan("1f1b", 1, 1, 1)).step_s
    assert two == pytest.approx(2 * one, rel=1e-9)


def test_collectives_replayed_from_a_cuda_graph_pay_a_graph_launch_instead_of_an_eager_one():
    hw = load_hardware("dgx_a100")
    eager = plan_collective("all_reduce", 8192.0, 8, fabric_of(hw))
    graph = plan_collective("all_reduce", 8192.0, 8, fabric_of(hw, "graph"))
    assert (eager.algorithm, eager.protocol) == (graph.algorithm, graph.protocol)
    assert eager.time_s - graph.time_s == pytest.approx(hw.gpu.launch.kernel_launch_s
                                                        - hw.gpu.launch.graph_kernel_launch_s)


def test_a_tensor_parallel_decode_on_a_system_honours_the_launch_mode():
    from gpusim.engine.cluster import simulate_system
    from gpusim.workload import load_workload

    hw = load_hardware("dgx_a100")
    wl = load_workload("llama2_7b_inference", ["batch_size=1", "prompt_len=5", "generate_len=8", "decode_buckets=2",
                                               "parallelism.tensor=2", "config.num_layers=2"])
    eager, graph = simulate_system(hw, wl), simulate_system(hw, wl, launch_mode="graph")
    assert (eager.launch_mode, graph.launch_mode) == ("eager", "graph")
    assert graph.total_time_s < eager.total_time_s


def peer_fabric(topology="nvswitch", gpus=8, nodes=1):
    """tiny() with a 2 us launch, a 0.5 us device-side launch and 1 TB/s of DRAM."""
    return Fabric("tiny", gpus, nodes, topology, 1e9, 1, 1e9, 1e-6, False, 0.0, 2e-6, 2e-6,
                  dram_bytes_per_s=1e12, device_launch_s=0.5e-6)


def test_one_shot_all_reduce_is_exact_on_a_tiny_system():
    from gpusim.engine.collectives import intra_node_all_reduce_plan

    plan = intra_node_all_reduce_plan(1e5, 4, peer_fabric())
    # launch 2 us + the staging copy's device launch 0.5 us + 3 hops of 1 us + 2 x 1e5 B through 1 TB/s
    # of DRAM; every GPU then loads the whole message from each of its 3 peers at 1 GB/s
    assert plan.algorithm == "one_shot"
    assert plan.latency_s == pytest.approx(2e-6 + 0.5e-6 + 3e-6 + 2e5 / 1e12, rel=1e-12)
    assert plan.time_s == pytest.approx(plan.latency_s + 3 * 1e5 / 1e9, rel=1e-12)


def test_two_shot_all_reduce_moves_the_ring_bytes_with_a_fixed_latency():
    from gpusim.engine.collectives import ONE_SHOT_MAX_BYTES, intra_node_all_reduce_plan

    f = peer_fabric()
    S = 4 * ONE_SHOT_MAX_BYTES
    plan = intra_node_all_reduce_plan(S, 4, f)
    ring = plan_collective("all_reduce", S, 4, f, algorithm="ring", protocol="Simple")
    assert plan.algorithm == "two_shot"
    assert plan.intra_bytes == pytest.approx(ring.intra_bytes)  # 2 (n-1)/n S each way
    assert plan.latency_s == pytest.approx(2.5e-6 + 6e-6 + 2 * S / 1e12, rel=1e-12)


def test_a_peer_to_peer_all_reduce_needs_one_fully_connected_node_and_at_most_10_mib():
    from gpusim.engine.collectives import TWO_SHOT_MAX_BYTES, intra_node_all_reduce_plan

    assert intra_node_all_reduce_plan(TWO_SHOT_MAX_BYTES, 8, peer_fabric()) is not None
    assert intra_node_all_reduce_plan(TWO_SHOT_MAX_BYTES + 1, 8, peer_fabric()) is None
    assert intra_node_all_reduce_plan(8192, 8, peer_fabric("full_mesh")) is not None
    assert intra_node_all_reduce_plan(8192, 8, peer_fabric("ring")) is None  # relays needed
    assert intra_node_all_reduce_plan(8192, 16, peer_fabric(gpus=8, nodes=2)) is None  # spans nodes
    assert intra_node_all_reduce_plan(8192, 1, peer_fabric()) is None


def test_one_shot_latency_does_not_grow_with_the_group_where_the_ring_s_does():
    from gpusim.engine.collectives import intra_node_all_reduce_plan

    f = fabric_of(load_hardware("dgx_a100"), "graph")
    one = [intra_node_all_reduce_plan(8192, n, f).latency_s for n in (2, 4, 8)]
    ring = [plan_collective("all_reduce", 8192, n, f, algorithm="ring").latency_s for n in (2, 4, 8)]
    assert one[0] == pytest.approx(one[2])
    assert ring[2] - ring[0] > 5e-6
    assert one[2] < ring[2]


def test_tensor_parallel_decode_with_the_intra_node_all_reduce_is_faster_where_it_applies():
    from gpusim.engine.cluster import simulate_system
    from gpusim.workload import load_workload

    items = ["batch_size=1", "prompt_len=5", "generate_len=8", "decode_buckets=2", "parallelism.tensor=8",
             "config.num_layers=2"]
    nccl = simulate_system(load_hardware("dgx_a100"), load_workload("llama2_7b_inference", items), launch_mode="graph")
    peer = simulate_system(load_hardware("dgx_a100"),
                           load_workload("llama2_7b_inference", items + ["parallelism.tp_all_reduce=intra_node"]),
                           launch_mode="graph")
    assert peer.total_time_s < nccl.total_time_s
    # the compute is the same; only the exposed communication shrinks
    assert peer.time_breakdown_s["compute"] == pytest.approx(nccl.time_breakdown_s["compute"])
    assert peer.time_breakdown_s["exposed_communication"] < nccl.time_breakdown_s["exposed_communication"]


def test_the_intra_node_all_reduce_falls_back_to_nccl_with_a_warning_across_nodes():
    from gpusim.engine.cluster import simulate_system
    from gpusim.workload import load_workload

    items = ["batch_size=1", "prompt_len=5", "generate_len=4", "decode_buckets=1", "parallelism.tensor=16",
             "config.num_layers=2"]
    hw = load_hardware("dgx_a100", [("num_nodes", 2)])
    nccl = simulate_system(hw, load_workload("llama2_7b_inference", items))
    peer = simulate_system(hw, load_workload("llama2_7b_inference", items + ["parallelism.tp_all_reduce=intra_node"]))
    assert peer.total_time_s == pytest.approx(nccl.total_time_s)
    assert any("tp_all_reduce intra_node" in w and "NCCL runs them" in w for w in peer.warnings)
