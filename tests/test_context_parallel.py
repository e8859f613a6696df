"""Context parallelism: ring attention's split of the work, its exposed transfers, and the layout."""

from dataclasses import replace
from types import SimpleNamespace

import pytest

from gpusim.config import load_hardware
from gpusim.engine.cluster import (ChunkModel, LayerRing, LayoutPlan, StageModel, _ring_wait_s, run_step,
                                   simulate_system)
from gpusim.errors import ConfigError
from gpusim.workload import load_workload
from gpusim.workload.models.transformer import context_attention
from gpusim.workload.ops import Attention


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("context,comm,a2a", [(c, m, 1) for c in (2, 4, 8) for m in ("p2p", "a2a", "all_gather")]
                         + [(4, "a2a+p2p", 2), (8, "a2a+p2p", 2), (8, "a2a+p2p", 4)])
def test_every_gpu_of_the_group_does_one_share_of_the_attention(context, causal, comm, a2a):
    # p2p, causal: the local block has L(L+1)/2 visible pairs and each of the c - 1 others L x L/2, so
    # a GPU sees (c L^2 + L) / 2 = (s L + L) / 2 pairs, 1/c of the s(s+1)/2 of the whole sequence;
    # all_gather, causal: chunk 0 against itself (L/2)(L/2 + 1)/2 pairs and the last chunk against the
    # whole sequence L/2 x s - (L/2)(L/2 - 1)/2, the same (s + 1) L / 2; a2a: s x s for 1/c of the heads;
    # a2a+p2p (groups of a): the ring's 1/(c/a) of the work for 1/a of the heads
    s = 4096
    full = Attention(batch=2, heads=8, seq_len_q=s, seq_len_kv=s, head_dim=128, causal=causal)
    local = Attention(batch=2, heads=8, seq_len_q=s // context, seq_len_kv=s // context, head_dim=128, causal=causal)
    for variant in ("forward", "backward"):
        ops = [op for _, op in context_attention(replace(local, variant=variant), context, comm, a2a)]
        whole = replace(full, variant=variant)
        assert context * sum(a.executed_flop() for a in ops) == pytest.approx(whole.executed_flop(), rel=1e-12)
    if comm == "p2p":
        assert len(ops) == context and all(not a.causal for a in ops[1:])


def _records(phase, times):
    names = ["attention"] + [f"attention_ring{k}" for k in range(1, len(times))]
    return [SimpleNamespace(node=f"layer0.{n}" + (".grad" if phase == "backward" else ""), phase=phase,
                            op="attention", time_s=t, launch_gap_s=0.0) for n, t in zip(names, times)]


def test_each_hop_waits_only_for_what_the_step_beside_it_does_not_hide():
    # hops overlap steps 0 .. c-2: max(0, 5 - 2) + max(0, 5 - 7) + max(0, 5 - 4); the last step has no hop
    records = _records("forward", [2.0, 7.0, 4.0, 1.0]) + _records("backward", [9.0, 9.0, 9.0, 9.0])
    assert _ring_wait_s(records, "forward", 5.0) == pytest.approx(4.0)
    assert _ring_wait_s(records, "backward", 5.0) == 0.0
    assert _ring_wait_s(records, "recompute", 5.0) == 0.0


def test_the_rings_wait_is_exposed_communication():
    stages = [StageModel([ChunkModel(1.0, 2.0, 1, layer_ring_forward=((LayerRing(wait_s=0.3),),),
                                     layer_ring_backward=((LayerRing(wait_s=0.2), LayerRing(wait_s=0.3)),))])]
    stats = run_step(None, stages, LayoutPlan("1f1b", 1, 2, 1))
    assert stats.step_s == pytest.approx(2 * (1.0 + 0.3 + 2.0 + 0.5))
    assert stats.exposed_comm_s == pytest.approx(2 * 0.8)
    assert stats.compute_s == pytest.approx(6.0)


def test_each_layer_passes_its_ring_beside_its_compute_and_waits_for_it_where_its_attention_ends():
    # One micro-batch of two layers, 1 s of forward compute each; each layer's ring traffic takes
    # 0.4 s alone on the port and its exposed wait is 0.1 s. With the attention the whole layer the
    # hops run at 0-0.4 and 1.1-1.5, the waits at 1.0-1.1 and 2.1-2.2; with the attention from 10% to
    # 60% of each layer, the hops at 0.1-0.5 and 1.2-1.6 and the waits at 0.6-0.7 and 1.7-1.8. The
    # forward ends at 2.2 either way.
    from gpusim.engine.collectives import CollectivePlan

    hop = CollectivePlan("send_recv", "p2p", "Simple", 4e11, 2, 0.0, 4e11, 0.0, 1e12, 1e12)
    for start, at, times in ((0.0, 1.0, [0, 0.4, 1.0, 1.1, 1.1, 1.5, 2.1, 2.2]),
                             (0.1, 0.6, [0.1, 0.5, 0.6, 0.7, 1.2, 1.6, 1.7, 1.8])):
        ring = (LayerRing(hop, 0.1, at, start),)
        chunk = ChunkModel(2.0, 0.0, 2, layer_ring_forward=(ring, ring))
        stats = run_step(None, [StageModel([chunk])], LayoutPlan("1f1b", 1, 1, 1), record_spans=True)
        spans = sorted((s for s in stats.spans if "ring" in s.name), key=lambda s: s.start_s)
        assert [s.name for s in spans] == ["send_recv context ring F0 layer 0", "ring attention (exposed) F0 layer 0",
                                           "send_recv context ring F0 layer 1", "ring attention (exposed) F0 layer 1"]
        assert [t for s in spans for t in (s.start_s, s.end_s)] == pytest.approx(times)
        assert stats.step_s == pytest.approx(2.2)
        assert stats.exposed_comm_s == pytest.approx(0.2)
    with pytest.raises(ValueError):
        LayerRing(hop, 0.1, 1.5)
    with pytest.raises(ValueError):
        LayerRing(hop, 0.1, 0.5, 0.6)  # the attention cannot end before it starts
    with pytest.raises(TypeError):
        ChunkModel(1.0, 0.0, 1, layer_ring_forward=(hop,))


def _llama(items):
    return load_workload("llama2_7b_train", ["config.num_layers=4", "config.seq_len=4096", "batch_size=1",
                                             "activation_checkpointing=none"] + items)


def test_context_parallelism_splits_the_sequence_and_shards_over_data_and_context():
    hw = load_hardware("dgx_h100")
    one = _llama(["parallelism.data=4", "parallelism.zero_stage=1"])
    two = _llama(["parallelism.data=4", "parallelism.context=2", "parallelism.zero_stage=1"])
    assert two.parallelism.num_gpus == 8
    assert two.memory.activations_bytes == pytest.approx(one.memory.activations_bytes / 2)
    assert two.memory.optimizer_bytes == pytest.approx(one.memory.optimizer_bytes / 2)
    assert two.memory.weights_bytes == one.memory.weights_bytes
    r1, r2 = simulate_system(hw, one), simulate_system(hw, two)
    assert r2.num_gpus == 8
    # the same sequences on twice the GPUs: faster per step, never more than twice (each GPU still
    # runs every GEMM on half the tokens, and the ring's steps are smaller kernels)
    assert r1.step_time_s / 2 <= r2.step_time_s < r1.step_time_s
    assert r2.tokens_per_s == pytest.approx(r1.tokens_per_s * r1.step_time_s / r2.step_time_s)
    rings = [k for k in r2.kernels if k.node.startswith("layer0.attention_ring") and k.phase == "forward"]
    assert len(rings) == 1 and rings[0].flop > 0


def test_the_gradient_reduction_spans_the_context_parallel_gpus():
    hw = load_hardware("dgx_h100")
    alone = simulate_system(hw, _llama(["parallelism.data=1"]))
    ring = simulate_system(hw, _llama(["parallelism.data=1", "parallelism.context=2"]))
    assert not alone.link_utilization
    assert ring.link_utilization["stage0.nvlink_tx"] > 0


@pytest.mark.parametrize("items,fragment", [
    (["parallelism.context=2", "config.seq_len=4098"], "not divisible into 4 chunks"),
    (["parallelism.context=2", "fusion=none"], "fused attention"),
    (["parallelism.context=2", "parallelism.data=8"], "context 2"),
])
def test_impossible_context_layouts_are_one_line_errors(items, fragment):
    hw = load_hardware("dgx_h100")
    with pytest.raises(ConfigError) as info:
        simulate_system(hw, _llama(items))
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_context_parallel_inference_and_experts_are_refused():
    with pytest.raises(ConfigError, match="training only"):
        load_workload("llama2_7b_inference", ["parallelism.context=2"])
    with pytest.raises(ConfigError, match="expert"):
        _llama(["parallelism.context=2", "parallelism.expert=2", "parallelism.data=2"])


def test_ulysses_runs_one_attention_on_the_whole_sequence_for_a_share_of_the_heads():
    from gpusim.workload.models import transformer as T
    from gpusim.workload.precision import policy

    wl = _llama(["parallelism.data=1"])
    r = T.resolve("llama", wl.spec.config)
    ops = {f.name: f.op for f in T.block_ops(r, policy("bf16"), batch=1, seq_q=1024, seq_kv=1024, training=True,
                                             kv_append=False, context=4, context_comm="a2a")}
    assert not any(name.startswith("attention_ring") for name in ops)
    att = ops["attention"]
    assert (att.heads, att.num_kv_heads, att.seq_len_q, att.seq_len_kv) == (r.num_heads // 4, r.num_kv_heads // 4,
                                                                            4096, 4096)


def test_ulysses_and_the_ring_trade_places_between_a_node_and_the_network():
    # inside a node the ring's hops hide behind attention while Ulysses' all-to-alls block; across two
    # nodes every ring hop crosses InfiniBand carrying a whole share's keys and values, where Ulysses
    # moves 1/context of the activations
    def run(cp, comm):
        hw = load_hardware("dgx_h100", [("num_nodes", max(1, cp // 8))])
        return simulate_system(hw, _llama(["config.seq_len=32768", "parallelism.zero_stage=1",
                                           f"parallelism.context={cp}", f"parallelism.context_comm={comm}"]))
    assert run(2, "p2p").time_breakdown_s["exposed_communication"] < run(2, "a2a").time_breakdown_s[
        "exposed_communication"]
    assert run(16, "a2a").step_time_s < run(16, "p2p").step_time_s


@pytest.mark.parametrize("items,fragment", [
    (["parallelism.tensor=8", "parallelism.context=8", "parallelism.context_comm=a2a"], "4 query"),
    (["parallelism.tensor=2", "parallelism.context=2", "parallelism.context_comm=a2a",
      "parallelism.tp_comm_overlap=true"], "blocking collectives"),
])
def test_impossible_ulysses_layouts_are_one_line_errors(items, fragment):
    with pytest.raises(ConfigError) as info:
        _llama(items)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_gathering_keys_and_values_costs_blocking_collectives_the_ring_hides():
    # inside a node the ring hides its hops behind attention; the all-gather (and, in the backward, the
    # reduce-scatter of the key-value gradients) waits in full
    hw = load_hardware("dgx_h100")
    base = ["config.seq_len=32768", "parallelism.zero_stage=1", "parallelism.context=4"]
    runs = {comm: simulate_system(hw, _llama(base + [f"parallelism.context_comm={comm}"]))
            for comm in ("p2p", "all_gather")}
    exposed = {c: r.time_breakdown_s["exposed_communication"] for c, r in runs.items()}
    assert exposed["all_gather"] > exposed["p2p"]
    assert runs["all_gather"].step_time_s > runs["p2p"].step_time_s


def test_ulysses_inside_the_node_and_the_ring_between_nodes_beats_either_alone():
    # 16 GPUs over two nodes: all-to-alls among each node's 8 GPUs stay on NVLink, and the ring of two
    # groups has one hop per step, each carrying a share half the sequence long
    hw = load_hardware("dgx_h100", [("num_nodes", 2)])

    def run(comm, *extra):
        return simulate_system(hw, _llama(["config.seq_len=32768", "parallelism.zero_stage=1", "parallelism.context=16",
                                           f"parallelism.context_comm={comm}", *extra]))
    hierarchical = run("a2a+p2p", "parallelism.context_a2a_size=8")
    assert hierarchical.step_time_s < run("a2a").step_time_s < run("p2p").step_time_s
    kinds = {k.node.split(".")[1] for k in hierarchical.kernels if k.op == "attention"}
    assert kinds == {"attention", "attention_ring1"}  # the ring of two groups: own share, then the other's


@pytest.mark.parametrize("items,fragment", [
    (["parallelism.context=8", "parallelism.context_comm=a2a+p2p"], "all-to-all group size"),
    (["parallelism.context=8", "parallelism.context_comm=a2a+p2p", "parallelism.context_a2a_size=3"], "divisor"),
    (["parallelism.context=8", "parallelism.context_comm=a2a+p2p", "parallelism.context_a2a_size=8"], "divisor"),
    (["parallelism.context=8", "parallelism.context_a2a_size=2"], "only context_comm: a2a+p2p"),
])
def test_impossible_hierarchical_layouts_are_one_line_errors(items, fragment):
    with pytest.raises(ConfigError) as info:
        _llama(items)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_a_blocks_ring_runs_with_its_attention():
    # 16 GPUs over two nodes, a ring of 16 across InfiniBand: each hop outlasts its attention step.
    # The ring's traffic starts with the attention (after the QKV projection), and the layer waits
    # for it where the attention ends, before its output projection and MLP. With full checkpointing
    # the backward has two rings, the recompute's and the backward's, each with its own wait
    hw = load_hardware("dgx_h100", [("num_nodes", 2)])
    items = ["config.seq_len=32768", "parallelism.zero_stage=1", "parallelism.context=16",
             "parallelism.context_comm=p2p", "activation_checkpointing=full"]
    r = simulate_system(hw, _llama(items), record_spans=True)
    layer = next(s for s in r.spans if s.track == "stage 0 layers" and s.name == "F0 layer 0")
    hop = next(s for s in r.spans if s.name == "send_recv context ring F0 layer 0")
    wait = next(s for s in r.spans if s.name == "ring attention (exposed) F0 layer 0")
    assert layer.start_s < hop.start_s < wait.start_s < wait.end_s < layer.end_s
    backward = sorted((s for s in r.spans if s.name.endswith("B0 layer 0") and "ring" in s.name),
                      key=lambda s: s.start_s)
    assert [s.name.split(" B0")[0] for s in backward] == [
        "send_recv context ring", "ring attention (exposed)", "send_recv context ring", "ring attention (exposed)"]
