"""Pipeline schedules, overlap and layouts of the multi-GPU engine."""

import pytest

from gpusim.config import load_hardware
from gpusim.engine.cluster import ChunkModel, LayerCollective, LayoutPlan, StageModel, run_step, simulate_system
from gpusim.engine.collectives import fabric_of
from gpusim.workload.schedule import pipeline_order
from gpusim.errors import ConfigError
from gpusim.workload import load_workload


def uniform(p, m, v=1, schedule="1f1b", f=1.0, b=2.0):
    stages = [StageModel([ChunkModel(f / v, b / v, 1) for _ in range(v)]) for _ in range(p)]
    return run_step(None, stages, LayoutPlan(schedule, p, m, v))


@pytest.mark.parametrize("p,m", [(2, 1), (4, 8), (8, 16), (16, 16), (3, 7)])
def test_1f1b_bubble_matches_formula(p, m):
    stats = uniform(p, m)
    assert stats.step_s == pytest.approx((m + p - 1) * 3.0)
    assert stats.bubble_s / stats.step_s == pytest.approx((p - 1) / (m + p - 1))


def test_gpipe_same_step_as_1f1b_on_uniform_stages():
    assert uniform(4, 8, schedule="gpipe").step_s == pytest.approx(uniform(4, 8).step_s)


def test_interleaving_shrinks_the_bubble():
    assert uniform(4, 8, v=2, schedule="interleaved").bubble_s < uniform(4, 8).bubble_s


def test_every_schedule_runs_each_microbatch_forward_and_backward_once():
    for schedule, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 3)):
        order = pipeline_order(schedule, 4, 8, 1, v)
        assert sorted(order) == sorted({(k, i, c) for k in "FB" for i in range(8) for c in range(v)})


def _gpt(extra):
    return load_workload("gpt2_large_train", ["config.num_layers=8", "batch_size=2"] + extra)


@pytest.mark.parametrize("zero_stage", [0, 3])
def test_overlap_never_makes_a_step_slower(zero_stage):
    hw = load_hardware("dgx_a100")
    common = ["parallelism.data=8", f"parallelism.zero_stage={zero_stage}", "gradient_accumulation_steps=2"]
    on = simulate_system(hw, _gpt(common + ["parallelism.overlap_communication=true", "parallelism.bucket_bytes=10 MB"]))
    off = simulate_system(hw, _gpt(common + ["parallelism.overlap_communication=false"]))
    assert on.step_time_s <= off.step_time_s
    assert on.time_breakdown_s["exposed_communication"] < off.time_breakdown_s["exposed_communication"]


def test_layout_reports_and_breakdown_add_up():
    hw = load_hardware("dgx_h100")
    r = simulate_system(hw, _gpt(["parallelism.tensor=2", "parallelism.pipeline=2", "parallelism.data=2",
                                  "parallelism.microbatches=4"]))
    assert r.num_gpus == 8
    assert sum(r.time_breakdown_s.values()) == pytest.approx(r.step_time_s, rel=1e-6)
    assert 0 < r.mfu_fraction < 1
    assert any(k.endswith("nvlink_tx") for k in r.link_utilization)


def test_tensor_parallelism_splits_compute():
    hw = load_hardware("dgx_h100")
    one = simulate_system(hw, _gpt(["parallelism.data=1"]))
    two = simulate_system(hw, _gpt(["parallelism.tensor=4"]))
    assert two.time_breakdown_s["compute"] < one.time_breakdown_s["compute"]


@pytest.mark.parametrize("items,key", [
    (["parallelism.pipeline=3"], "parallelism.pipeline"),
    # 8 layers in 2 x 3 chunks
    (["parallelism.pipeline=2", "parallelism.schedule=interleaved", "parallelism.virtual_stages=3",
      "parallelism.microbatches=4"], "parallelism.pipeline"),
    (["parallelism.data=16"], "parallelism"),
])
def test_impossible_layouts_are_config_errors(items, key):
    with pytest.raises(ConfigError) as err:
        simulate_system(load_hardware("dgx_h100"), _gpt(items))
    assert err.value.key_path == key


def test_a_layout_that_does_not_fit_is_reported():
    hw = load_hardware("dgx_h100")
    r = simulate_system(hw, load_workload("gpt3_175b_train", ["batch_size=1", "parallelism.tensor=8",
                                                               "config.num_layers=48"]))
    assert not r.fits_in_memory and any("does not fit" in w for w in r.warnings)


def test_tensor_parallel_inference_is_faster_per_token():
    hw = load_hardware("dgx_a100")
    one = simulate_system(hw, load_workload("llama2_7b_inference", ["parallelism.tensor=1"]))
    four = simulate_system(hw, load_workload("llama2_7b_inference", ["parallelism.tensor=4"]))
    assert four.num_gpus == 4 and four.step_time_s < one.step_time_s


def _one_stage_zero3_step(sm_fraction: float):
    # One GPU stage, one micro-batch of 1 s forward compute over 2 layers and no backward compute;
    # ZeRO-3 gathers each layer's parameters before it runs: 0.2 s alone on the port per layer (0.4 s
    # per GB).
    import dataclasses

    from gpusim.engine.collectives import CollectivePlan

    fabric = dataclasses.replace(fabric_of(load_hardware("dgx_h100")), collective_sm_fraction=sm_fraction)
    rate = fabric.intra_port_bytes_per_s
    def plan(collective: str, nbytes: float) -> CollectivePlan:
        return CollectivePlan(collective, "ring", "Simple", nbytes, 8, 0.0, 0.4 * rate * nbytes / 1e9, 0.0, rate, 0.0)

    stage = StageModel([ChunkModel(1.0, 0.0, 2, param_bytes=1e9, grad_bytes=1e9)])
    return run_step(fabric, [stage], LayoutPlan("1f1b", 1, 1, 1, zero_stage=3, overlap=True, dp_plan=plan))


def test_an_overlapped_collective_takes_its_sms_from_the_compute():
    # The forward exposes the first layer's gather (0.2 s), then computes the first layer while the
    # second layer's gather runs (0.2 s): with a quarter of the SMs held by the collective's CTAs the
    # compute advances 0.75 x 0.2 s there, so the forward ends 0.25 x 0.2 = 0.05 s later than without.
    # The backward has no compute to slow.
    free, held = _one_stage_zero3_step(0.0), _one_stage_zero3_step(0.25)
    assert held.step_s - free.step_s == pytest.approx(0.05, rel=1e-9)
    assert held.compute_s == pytest.approx(free.compute_s)
    assert held.exposed_comm_s - free.exposed_comm_s == pytest.approx(0.05, rel=1e-9)


def test_collective_sms_cost_nothing_without_overlap_and_never_speed_a_step_up():
    hw = load_hardware("dgx_a100")
    assert hw.intra_node.collective_channels
    free_hw = hw.model_copy(update={"intra_node": hw.intra_node.model_copy(update={"collective_channels": None})})
    for overlap in (True, False):
        items = ["parallelism.data=8", "parallelism.zero_stage=3", f"parallelism.overlap_communication={overlap}"]
        held, free = simulate_system(hw, _gpt(items)), simulate_system(free_hw, _gpt(items))
        if overlap:
            assert held.step_time_s > free.step_time_s
        else:
            assert held.step_time_s == pytest.approx(free.step_time_s, rel=1e-12)


def test_fsdp_gathering_fp32_parameters_moves_their_bytes():
    # ZeRO-3 per micro-batch: a forward and a backward parameter all-gather plus a gradient
    # reduce-scatter. Gathering FP32 instead of BF16 parameters moves (4 + 4 + 2) / (2 + 2 + 2) times the bytes.
    # (Layers of hidden size 2,560 keep every per-layer collective above 100 MB, where NCCL sends with
    # the Simple protocol whatever the dtype, so the bytes on the port scale with the payload.)
    hw = load_hardware("dgx_h100")
    base = ["parallelism.data=8", "parallelism.zero_stage=3", "config.hidden_size=2560", "config.num_heads=20"]
    runs = [simulate_system(hw, _gpt(base + extra)) for extra in ([], ["parallelism.param_gather_dtype=fp32"])]
    moved = [r.link_utilization["stage0.nvlink_tx"] * r.step_time_s for r in runs]
    assert moved[1] / moved[0] == pytest.approx(10 / 6, rel=1e-6)


def _one_stage_tp_step(comm_s: float, overlap: bool, sm_fraction: float = 0.0):
    # One stage, one micro-batch: 1 s of forward and 2 s of backward compute, each followed by
    # tensor-parallel collectives that alone take comm_s on the port.
    import dataclasses

    from gpusim.engine.collectives import CollectivePlan

    fabric = dataclasses.replace(fabric_of(load_hardware("dgx_h100")), collective_sm_fraction=sm_fraction)
    rate = fabric.intra_port_bytes_per_s
    plan = CollectivePlan("all_reduce", "ring", "Simple", 1e9, 8, 0.0, comm_s * rate, 0.0, rate, rate)
    stage = StageModel([ChunkModel(1.0, 2.0, 1, layer_comm_forward=((LayerCollective(plan),),),
                                   layer_comm_backward=((LayerCollective(plan),),))])
    return run_step(fabric, [stage], LayoutPlan("1f1b", 1, 1, 1, tp_overlap=overlap))


@pytest.mark.parametrize("comm_s,serial_s,overlapped_s", [(0.4, 3.8, 3.0), (1.5, 6.0, 3.5)])
def test_overlapped_tensor_parallel_collectives_wait_only_for_the_longer_of_the_two(comm_s, serial_s, overlapped_s):
    # after: 1 + c + 2 + c; beside: max(1, c) + max(2, c)
    assert _one_stage_tp_step(comm_s, False).step_s == pytest.approx(serial_s, rel=1e-9)
    overlapped = _one_stage_tp_step(comm_s, True)
    assert overlapped.step_s == pytest.approx(overlapped_s, rel=1e-9)
    assert overlapped.exposed_comm_s == pytest.approx(overlapped_s - 3.0, abs=1e-9)


def test_overlapped_tensor_parallel_collectives_take_their_sms_from_the_compute():
    # 0.4 s of collectives beside 1 s of forward compute with a quarter of the SMs held: the compute
    # advances at 0.75 for 0.4 s, so the forward ends 0.1 s later; the same in the backward.
    free, held = _one_stage_tp_step(0.4, True), _one_stage_tp_step(0.4, True, sm_fraction=0.25)
    assert held.step_s - free.step_s == pytest.approx(0.2, rel=1e-9)


def test_tp_comm_overlap_never_makes_a_step_slower():
    hw = load_hardware("dgx_h100")
    base = ["parallelism.tensor=4", "parallelism.sequence_parallel=true"]
    on = simulate_system(hw, _gpt(base + ["parallelism.tp_comm_overlap=true"]))
    off = simulate_system(hw, _gpt(base))
    assert on.step_time_s < off.step_time_s
    assert on.time_breakdown_s["exposed_communication"] < off.time_breakdown_s["exposed_communication"]


def test_tp_comm_overlap_with_expert_parallelism_is_a_one_line_error():
    with pytest.raises(ConfigError) as info:
        load_workload("mixtral_8x7b_inference", ["parallelism.data=8", "parallelism.expert=8",
                                                 "parallelism.tp_comm_overlap=true"])
    assert "tp_comm_overlap" in str(info.value) and "\n" not in str(info.value)


def test_run_names_the_tensor_parallel_settings_it_used(capsys):
    from gpusim.cli import main

    common = ["run", "dgx_h100", "gpt2_large_train", "--set", "config.num_layers=2", "--set", "parallelism.tensor=4"]
    assert main(common + ["--set", "parallelism.sequence_parallel=true", "--set", "parallelism.tp_comm_overlap=true"]) == 0
    out = capsys.readouterr().out
    assert "tensor 4" in out and "sequence parallel, tensor-parallel collectives overlapped" in out
    assert main(common) == 0
    assert "overlapped" not in capsys.readouterr().out


def _gradient_buckets(bucket: str) -> list[float]:
    """Bytes of each gradient all-reduce GPU 0 runs, in order, for a 2-layer Llama-2 7B on 2 GPUs."""
    hw = load_hardware("dgx_h100")
    r = simulate_system(hw, load_workload("llama2_7b_train", ["config.num_layers=2", "parallelism.data=2",
                                                               f"parallelism.bucket_bytes={bucket}"]),
                        record_spans=True)
    return [dict(s.args)["bytes"] for s in sorted(r.spans, key=lambda s: s.start_s) if s.name.startswith("all_reduce grad")]


def test_gradient_buckets_fill_tensor_by_tensor_in_backward_order():
    h, f, v, g = 4096, 11008, 32000, 2  # hidden, FFN, vocabulary; BF16 gradients
    norm, qkv, proj, gate_up, down, table = h * g, 3 * h * h * g, h * h * g, 2 * h * f * g, f * h * g, v * h * g
    block = [down, gate_up, norm, proj, qkv, norm]  # the backward's order: the MLP's last GEMM first
    # a bucket smaller than every tensor: one all-reduce per tensor, the head's first, the embedding's last
    assert _gradient_buckets("1 kB") == [table, norm] + block * 2 + [table]
    # PyTorch DDP's 25 MB: a bucket closes once it holds 25 MB, so each norm rides with the tensor after it
    assert _gradient_buckets("25 MB") == [table, norm + down, gate_up, norm + proj, qkv, norm + down, gate_up,
                                          norm + proj, qkv, norm + table]
    # larger than the model: one all-reduce of every gradient after the backward
    assert _gradient_buckets("10 GB") == [table + norm + 2 * sum(block) + table]


def test_flows_on_a_port_share_its_bytes_per_second_equally():
    # 2 stages, one micro-batch, 1 s forward and 1 s backward each, a 1e12 B/s port. Stage 1 ends its
    # backward by starting a 1e12-byte gradient all-reduce (1 s alone) and sends 1e9 bytes back to
    # stage 0 (1 ms alone). Beside the all-reduce the send gets half the port: 2 ms, not the whole
    # second a share in proportion to size would give it
    from gpusim.engine.collectives import CollectivePlan

    def plan(kind, nbytes):
        return CollectivePlan(kind, "ring", "simple", nbytes, 2, 0.0, nbytes, 0.0, 1e12, 1e12)

    stages = [StageModel([ChunkModel(1.0, 1.0, 1, send_bytes=1e9)]),
              StageModel([ChunkModel(1.0, 1.0, 1, grad_bytes=1e12, send_bytes=1e9)])]
    lp = LayoutPlan("1f1b", 2, 1, 1, dp_plan=plan, p2p_plan=lambda nbytes, src, dst: plan("send_recv", nbytes))
    stats = run_step(None, stages, lp, record_spans=True)
    back = [s for s in stats.spans if s.track == "stage 1 NVLink port" and s.name == "send_recv B0"]
    assert back[0].end_s - back[0].start_s == pytest.approx(2e-3)
    # stage 0: forward (1 s), the forward's send (1 ms), stage 1's forward and backward (2 s), the
    # backward's send (2 ms), its own backward (1 s)
    assert stats.step_s == pytest.approx(4.003)


@pytest.mark.parametrize("overlap,step_s", [(True, 6.002), (False, 6.003)])
def test_blocking_pipeline_sends_hold_the_sender(overlap, step_s):
    # 2 stages, 2 micro-batches (1F1B), 1 s forward and 1 s backward, 1 ms sends. Overlapped: stage 0
    # runs F0 F1 back to back, stage 1 F0 (1.001-2.001) B0 F1 B1 (to 5.001), its last send arrives at
    # 5.002 and stage 0's B1 ends at 6.002. Blocking: stage 1 waits 1 ms after sending B0, so its F1
    # starts at 3.002, its B1 ends at 5.002, the send arrives at 5.003: one send later
    from gpusim.engine.collectives import CollectivePlan

    send = CollectivePlan("send_recv", "p2p", "simple", 1e9, 2, 0.0, 1e9, 0.0, 1e12, 1e12)
    stages = [StageModel([ChunkModel(1.0, 1.0, 1, send_bytes=1e9)]) for _ in range(2)]
    lp = LayoutPlan("1f1b", 2, 2, 1, p2p_plan=lambda nbytes, src, dst: send, p2p_overlap=overlap)
    assert run_step(None, stages, lp).step_s == pytest.approx(step_s)


def test_tensor_parallel_ranks_send_their_share_and_gather_it_without_sequence_parallelism():
    hw = load_hardware("dgx_h100")

    def first_send(sp: bool):
        wl = load_workload("llama2_7b_train", ["config.num_layers=4", "parallelism.tensor=2", "parallelism.pipeline=2",
                                               "parallelism.microbatches=2", f"parallelism.sequence_parallel={sp}"])
        r = simulate_system(hw, wl, record_spans=True)
        span = next(s for s in r.spans if s.name == "send_recv F0")
        return dict(span.args), span.end_s - span.start_s

    b, s, h = 1, 4096, 4096  # llama2_7b_train's micro-batch, sequence and width: BF16 activations
    (with_sp, t_sp), (without, t_plain) = first_send(True), first_send(False)
    assert with_sp["bytes"] == without["bytes"] == b * s * h * 2 / 2  # each rank's half
    assert (with_sp["algorithm"], without["algorithm"]) == ("p2p", "p2p+all_gather")
    assert t_plain > t_sp  # the all-gather that makes the activations whole again costs time


def test_flows_limited_by_the_same_port_share_it_equally_whatever_else_they_use():
    # the gradient all-reduce moves 1e12 bytes over NVLink (1 s at 1e12 B/s) and 2e11 over the network
    # port (2 s at 1e11 B/s): the network port limits it, as it limits the 1e8-byte send beside it
    # (1 ms alone). Equal shares of that port: the send takes 2 ms
    from types import SimpleNamespace

    from gpusim.engine.collectives import CollectivePlan

    fabric = SimpleNamespace(intra_port_bytes_per_s=1e12, nic_port_bytes_per_s=1e11, collective_sm_fraction=0.0)

    def reduce(kind, nbytes):
        return CollectivePlan(kind, "hierarchical", "simple", nbytes, 16, 0.0, 1e12, 2e11, 1e12, 1e11)

    def send(nbytes, src, dst):
        return CollectivePlan("send_recv", "p2p", "simple", nbytes, 2, 0.0, 0.0, nbytes, 1e12, 1e11)

    stages = [StageModel([ChunkModel(1.0, 1.0, 1, send_bytes=1e8)]),
              StageModel([ChunkModel(1.0, 1.0, 1, grad_bytes=1e12, send_bytes=1e8)])]
    stats = run_step(fabric, stages, LayoutPlan("1f1b", 2, 1, 1, dp_plan=reduce, p2p_plan=send), record_spans=True)
    back = next(s for s in stats.spans if s.track == "stage 1 network port" and s.name == "send_recv B0")
    assert back.end_s - back.start_s == pytest.approx(2e-3)


def test_a_send_between_stages_on_different_nodes_crosses_the_network():
    # tensor 4, pipeline 4 on two 8-GPU nodes: stages 0 and 1 share node 0, stages 2 and 3 node 1
    wl = load_workload("llama2_7b_train", ["config.num_layers=4", "parallelism.tensor=4", "parallelism.pipeline=4",
                                           "parallelism.microbatches=4"])
    r = simulate_system(load_hardware("dgx_h100", [("num_nodes", 2)]), wl, record_spans=True)
    tracks = {s.track for s in r.spans if s.name == "send_recv F0"}
    assert tracks == {"stage 0 NVLink port", "stage 1 network port", "stage 2 NVLink port"}


def test_overlapped_pipeline_sends_never_make_a_step_slower():
    # parallelism.p2p_comm_overlap reaches the engine: the sends leave the compute's critical path
    hw = load_hardware("dgx_h100", [("num_nodes", 2)])
    items = ["config.num_layers=4", "parallelism.tensor=4", "parallelism.pipeline=4", "parallelism.microbatches=8"]
    blocking = simulate_system(hw, load_workload("llama2_7b_train", items))
    overlapped = simulate_system(hw, load_workload("llama2_7b_train", items + ["parallelism.p2p_comm_overlap=true"]))
    assert overlapped.step_time_s < blocking.step_time_s
    assert overlapped.time_breakdown_s["exposed_communication"] < blocking.time_breakdown_s["exposed_communication"]


def _per_gb_plan(seconds_per_gb: float):
    """Collective plans taking ``seconds_per_gb`` per GB of payload on a 1e12 B/s port."""
    from gpusim.engine.collectives import CollectivePlan

    def plan(collective: str, nbytes: float) -> CollectivePlan:
        return CollectivePlan(collective, "ring", "Simple", nbytes, 8, 0.0, seconds_per_gb * nbytes * 1e3, 0.0,
                              1e12, 1e12)
    return plan


def test_tensor_parallel_collectives_run_after_each_layer():
    # One stage, one micro-batch of two layers: forward 0.3 s and 0.7 s, backward 0.6 s and 1.4 s
    # (the second layer's first), each layer followed by a 0.1 s all-reduce: the forward's at
    # 0.3-0.4 and 1.1-1.2, the backward's at 1.2 + 1.4 = 2.6-2.7 and 2.7 + 0.6 = 3.3-3.4
    plan = _per_gb_plan(0.1)("all_reduce", 1e9)
    after = (LayerCollective(plan),)
    chunk = ChunkModel(1.0, 2.0, 2, layer_comm_forward=(after, after), layer_comm_backward=(after, after),
                       forward_layer_s=(0.3, 0.7), backward_layer_s=(1.4, 0.6), layer_names=("first", "second"))
    stats = run_step(None, [StageModel([chunk])], LayoutPlan("1f1b", 1, 1, 1), record_spans=True)
    comm = sorted((s for s in stats.spans if s.track == "stage 0 NVLink port"), key=lambda s: s.start_s)
    assert [s.name for s in comm] == ["all_reduce F0 first", "all_reduce F0 second", "all_reduce B0 second",
                                      "all_reduce B0 first"]
    assert [t for s in comm for t in (s.start_s, s.end_s)] == pytest.approx([0.3, 0.4, 1.1, 1.2, 2.6, 2.7, 3.3, 3.4])
    assert stats.step_s == pytest.approx(3.4)
    assert stats.exposed_comm_s == pytest.approx(0.4)
    # each layer's compute is its own span on the layers track, between its collectives
    layers = sorted((s for s in stats.spans if s.track == "stage 0 layers"), key=lambda s: s.start_s)
    assert [s.name for s in layers] == ["F0 first", "F0 second", "B0 second", "B0 first"]
    assert [t for s in layers for t in (s.start_s, s.end_s)] == pytest.approx([0.0, 0.3, 0.4, 1.1, 1.2, 2.6, 2.7, 3.3])


def test_collectives_run_where_their_layer_places_them():
    # One forward layer of 1 s compute whose two 0.1 s all-reduces run after 40% of it and after all
    # of it: 0.4-0.5 and 1.1-1.2; the layer's span holds the first
    plan = _per_gb_plan(0.1)("all_reduce", 1e9)
    chunk = ChunkModel(1.0, 0.0, 1, layer_comm_forward=((LayerCollective(plan, 0.4), LayerCollective(plan, 1.0)),))
    stats = run_step(None, [StageModel([chunk])], LayoutPlan("1f1b", 1, 1, 1), record_spans=True)
    comm = sorted((s for s in stats.spans if s.track == "stage 0 NVLink port"), key=lambda s: s.start_s)
    assert [t for s in comm for t in (s.start_s, s.end_s)] == pytest.approx([0.4, 0.5, 1.1, 1.2])
    layer = next(s for s in stats.spans if s.track == "stage 0 layers")
    assert (layer.start_s, layer.end_s) == pytest.approx((0.0, 1.1))
    assert stats.step_s == pytest.approx(1.2) and stats.exposed_comm_s == pytest.approx(0.2)
    # one that starts after 40% and may run beside the compute until 80% of it: hidden when it takes
    # 0.1 s; when it takes 0.6 s (0.4-1.0 s) the compute waits for it at 0.8 s, 0.2 s exposed
    for seconds, step_s in ((0.1, 1.0), (0.6, 1.2)):
        beside = _per_gb_plan(seconds)("all_reduce", 1e9)
        chunk = ChunkModel(1.0, 0.0, 1, layer_comm_forward=((LayerCollective(beside, 0.4, 0.8),),))
        stats = run_step(None, [StageModel([chunk])], LayoutPlan("1f1b", 1, 1, 1))
        assert stats.step_s == pytest.approx(step_s) and stats.exposed_comm_s == pytest.approx(step_s - 1.0)
    with pytest.raises(ValueError):
        LayerCollective(plan, 0.4, 0.2)
    with pytest.raises(ValueError):
        LayerCollective(plan, 1.5)
    with pytest.raises(ValueError):
        ChunkModel(1.0, 0.0, 2, layer_comm_forward=((LayerCollective(plan),),))
    with pytest.raises(TypeError):
        ChunkModel(1.0, 0.0, 1, layer_comm_forward=((plan,),))


def _layer_pass(items, name):
    """Llama-2 7B (2 layers) with ``items`` on a DGX H100: the span of layer pass ``name`` (``F0 layer 0``)
    on stage 0 and the collectives on its NVLink port, in order."""
    w = load_workload("llama2_7b_train", ["config.num_layers=2"] + items)
    r = simulate_system(load_hardware("dgx_h100"), w, record_spans=True)
    layer = next(s for s in r.spans if s.track == "stage 0 layers" and s.name == name)
    comm = sorted((s for s in r.spans if s.track == "stage 0 NVLink port" and s.name.endswith(name)),
                  key=lambda s: s.start_s)
    return layer, comm


@pytest.mark.parametrize("sequence_parallel, names", [
    (False, ["all_reduce", "all_reduce"]),
    (True, ["all_gather", "reduce_scatter", "all_gather", "reduce_scatter"])])
def test_a_blocks_tensor_parallel_collectives_run_between_its_gemms(sequence_parallel, names):
    # Megatron-LM's order in a block's forward: (all-gather,) QKV, attention, output projection,
    # all-reduce (reduce-scatter), norm, (all-gather,) FC1, FC2, all-reduce (reduce-scatter): only the
    # last one waits for the whole layer's compute
    sp = f"parallelism.sequence_parallel={str(sequence_parallel).lower()}"
    layer, comm = _layer_pass(["parallelism.tensor=2", sp], "F0 layer 0")
    assert [s.name.split()[0] for s in comm] == names
    # all but the last inside the layer's span
    assert all(layer.start_s < s.start_s and s.end_s < layer.end_s for s in comm[:-1])
    assert comm[-1].start_s == pytest.approx(layer.end_s)
    # the compute is the same wherever the collectives fall
    assert dict(layer.args)["compute_s"] == pytest.approx(layer.end_s - layer.start_s
                                                          - sum(s.end_s - s.start_s for s in comm[:-1]))


@pytest.mark.parametrize("sequence_parallel, names", [
    (False, ["all_reduce", "all_reduce"]),
    (True, ["all_gather", "all_gather", "reduce_scatter"] * 2)])
def test_a_blocks_backward_runs_its_input_gradient_collectives_beside_the_weight_gradients(sequence_parallel,
                                                                                            names):
    # Megatron-LM's backward, the MLP then the attention: (the output gradient all-gathered before the
    # row-parallel GEMM;) the column-parallel GEMM's input gradient all-reduced (reduce-scattered)
    # beside its weight gradient; with sequence parallelism its input all-gathered again beside its
    # data gradient first. The blocking all-gathers before the row-parallel GEMMs add their time to
    # the layer's; those beside the GEMMs are shorter than them and only take their SM share from
    # the compute while they run.
    sp = f"parallelism.sequence_parallel={str(sequence_parallel).lower()}"
    layer, comm = _layer_pass(["parallelism.tensor=2", sp], "B0 layer 0")
    assert [s.name.split()[0] for s in comm] == names
    assert all(layer.start_s < s.start_s and s.end_s < layer.end_s for s in comm)
    blocking = comm[0::3] if sequence_parallel else []
    beside = [s for s in comm if s not in blocking]
    share = fabric_of(load_hardware("dgx_h100")).collective_sm_fraction
    assert layer.end_s - layer.start_s == pytest.approx(dict(layer.args)["compute_s"]
                                                        + sum(s.end_s - s.start_s for s in blocking)
                                                        + share * sum(s.end_s - s.start_s for s in beside))


def test_the_reduce_scatter_waits_for_the_second_all_gather():
    # Llama-2 7B on TP 8 with sequence parallelism: the input's all-gather beside FC1's and QKV's
    # data gradients outlasts them, and the input gradient's reduce-scatter starts only once it ends
    # (one stream of collectives; Megatron-LM waits on the gather before it reduce-scatters)
    _, comm = _layer_pass(["parallelism.tensor=8", "parallelism.sequence_parallel=true"], "B0 layer 0")
    assert [s.name.split()[0] for s in comm] == ["all_gather", "all_gather", "reduce_scatter"] * 2
    for gather, scatter in ((comm[1], comm[2]), (comm[4], comm[5])):
        assert scatter.start_s >= gather.end_s - 1e-12


def test_expert_gemms_and_the_head_gather_what_their_frameworks_gather():
    # Mixtral's experts get their inputs whole from the token dispatcher: with sequence parallelism
    # only the attention's QKV gathers its input a second time in the backward. The head's output
    # layer is column-parallel: it gathers its input after the final norm in the forward, and in the
    # backward gathers it again beside its data gradient and reduce-scatters the input gradient
    w = load_workload("mixtral_8x7b_train", ["config.num_layers=2", "batch_size=1", "parallelism.tensor=2",
                                             "parallelism.data=4", "parallelism.expert=4",
                                             "parallelism.sequence_parallel=true", "activation_checkpointing=none"])
    r = simulate_system(load_hardware("dgx_h100"), w, record_spans=True)
    names = [part for s in sorted(r.spans, key=lambda s: s.start_s)
             if s.track == "stage 0 NVLink port" and s.name.endswith("B0 layer 1") for part in s.name.split()[0].split("+")]
    # the MLP: the output gradient's gather (with the first all-to-all), the input gradient's
    # reduce-scatter; the attention: two gathers and a reduce-scatter
    assert names.count("all_gather") == 3 and names.count("reduce_scatter") == 2 and names.count("all_to_all") == 2
    w = load_workload("llama2_7b_train", ["config.num_layers=2", "parallelism.tensor=2",
                                          "parallelism.sequence_parallel=true"])
    r = simulate_system(load_hardware("dgx_h100"), w, record_spans=True)
    head = {kind: [s.name.split()[0] for s in sorted(r.spans, key=lambda s: s.start_s)
                   if s.track == "stage 0 NVLink port" and s.name.endswith(f"{kind}0 head")] for kind in "FB"}
    assert head == {"F": ["all_gather"], "B": ["all_gather", "reduce_scatter"]}
    layer = next(s for s in r.spans if s.track == "stage 0 layers" and s.name == "F0 head")
    gather = next(s for s in r.spans if s.track == "stage 0 NVLink port" and s.name == "all_gather F0 head")
    assert gather.start_s > layer.start_s  # after the final norm


@pytest.mark.parametrize("overlap,step_s,exposed_s", [(True, 4.6, 0.6), (False, 5.2, 1.2)])
def test_zero3_gathers_each_layer_before_it_runs_and_reduce_scatters_its_gradients_after(overlap, step_s, exposed_s):
    # One stage, one micro-batch of two layers with 1 s of forward and 1 s of backward compute each;
    # each layer's gather and reduce-scatter take 0.2 s alone on the port.
    # Overlapped (FSDP's prefetch): the first gather is exposed (0-0.2), the second runs beside the
    # first layer (0.2-0.4), the forward ends at 2.2. The backward gathers the second layer
    # (2.2-2.4, exposed) then the first beside it, computes to 3.4, reduce-scatters the second layer's
    # gradients beside the first layer's backward (3.4-3.6) and waits for the first's (4.4-4.6).
    # In line: a gather before and, in the backward, a reduce-scatter after every layer: 6 x 0.2 s + 4 s
    # (the backward's reduce-scatters at 2.4 + 0.2 + 1 = 3.6 and 3.8 + 0.2 + 1 = 5.0).
    chunk = ChunkModel(2.0, 2.0, 2, param_bytes=2e9, grad_bytes=2e9)
    stats = run_step(None, [StageModel([chunk])], LayoutPlan("1f1b", 1, 1, 1, zero_stage=3, overlap=overlap,
                                                           dp_plan=_per_gb_plan(0.2)), record_spans=True)
    assert stats.step_s == pytest.approx(step_s)
    assert stats.exposed_comm_s == pytest.approx(exposed_s)
    scatters = sorted(s.start_s for s in stats.spans if s.name.startswith("reduce_scatter"))
    # each starts once its layer's backward has finished (layer 1's at 3.4, layer 0's at 4.4)
    assert scatters == pytest.approx([3.4, 4.4] if overlap else [3.6, 5.0])


def test_a_layers_collectives_on_different_ports_run_in_turn():
    # One forward layer with no compute and two collectives of 0.1 s each alone: on the same port
    # they merge into one flow of 0.2 s; one on NVLink and one on the network still take 0.2 s, one
    # after the other (not 0.1 s side by side)
    from gpusim.engine.collectives import CollectivePlan

    nvlink = CollectivePlan("all_reduce", "ring", "Simple", 1e11, 8, 0.0, 1e11, 0.0, 1e12, 1e12)
    network = CollectivePlan("all_to_all", "direct", "Simple", 1e11, 8, 0.0, 0.0, 1e11, 1e12, 1e12)
    for pair, tracks in (((nvlink, nvlink), ["NVLink port"]), ((nvlink, network), ["NVLink port", "network port"])):
        chunk = ChunkModel(0.0, 0.0, 1, layer_comm_forward=(tuple(map(LayerCollective, pair)),))
        stats = run_step(None, [StageModel([chunk])], LayoutPlan("1f1b", 1, 1, 1), record_spans=True)
        assert stats.step_s == pytest.approx(0.2)
        comm = sorted((s for s in stats.spans if s.track.endswith("port")), key=lambda s: s.start_s)
        assert [s.track for s in comm] == [f"stage 0 {t}" for t in tracks]


def test_gradient_buckets_leave_when_their_layers_backward_ends():
    # One micro-batch: 1 s forward, then a backward of 1.5 s for the last layer and 0.5 s for the
    # first, each finishing 1 GB of gradients; 1 GB buckets, 0.1 s per all-reduce. The buckets leave
    # at 1 + 1.5 = 2.5 s and 3.0 s (not at 2.0 s, as equally long layers would have it); the step
    # ends with the last all-reduce at 3.1 s
    chunk = ChunkModel(1.0, 2.0, 2, backward_layer_s=(1.5, 0.5), grad_bytes=2e9, grad_layers=((1e9,), (1e9,)))
    lp = LayoutPlan("1f1b", 1, 1, 1, bucket_bytes=1e9, dp_plan=_per_gb_plan(0.1))
    stats = run_step(None, [StageModel([chunk])], lp, record_spans=True)
    starts = sorted(s.start_s for s in stats.spans if s.name.startswith("all_reduce grad"))
    assert starts == pytest.approx([2.5, 3.0])
    assert stats.step_s == pytest.approx(3.1)


def test_tied_embedding_copies_meet_after_the_backward():
    # Two stages of 1 s forward and 1 s backward, one micro-batch: stage 1's backward ends at 3 s,
    # stage 0's at 4 s; the last stage's copy of a tied embedding waits for the first stage's (1 s of
    # bubble), then both all-reduce the copies' gradients (0.2 s) before the optimizer: a 4.2 s step
    tied = _per_gb_plan(0.2)("all_reduce", 1e9)
    stages = [StageModel([ChunkModel(1.0, 1.0, 1)]) for _ in range(2)]
    stats = run_step(None, stages, LayoutPlan("1f1b", 2, 1, 1, tied_plan=tied), record_spans=True)
    assert stats.step_s == pytest.approx(4.2)
    assert stats.exposed_comm_s == pytest.approx(0.2)
    assert stats.bubble_s == pytest.approx(2.0)  # stage 0 waits 1-3 s for its backward, stage 1 0-1 and 3-4 s
    spans = sorted((s.track, s.start_s, s.end_s) for s in stats.spans if "tied" in s.name)
    assert spans == [("stage 0 NVLink port", pytest.approx(4.0), pytest.approx(4.2)),
                     ("stage 1 NVLink port", pytest.approx(4.0), pytest.approx(4.2))]


@pytest.mark.parametrize("workload, tied", [("gpt2_large_train", True), ("llama2_7b_train", False)])
def test_a_pipelined_model_with_tied_embeddings_reduces_their_copies(workload, tied):
    # GPT-2 ties its head to its embedding, Llama 2 does not
    w = load_workload(workload, ["config.num_layers=4", "batch_size=1", "parallelism.pipeline=2"])
    r = simulate_system(load_hardware("dgx_h100"), w, record_spans=True)
    reduced = {s.track for s in r.spans if s.name == "all_reduce tied embedding gradients"}
    assert reduced == ({"stage 0 NVLink port", "stage 1 NVLink port"} if tied else set())


@pytest.mark.parametrize("workload, items", [
    ("llama2_7b_train", ["parallelism.tensor=2", "activation_checkpointing=full"]),
    ("llama2_7b_train", ["parallelism.tensor=2", "parallelism.sequence_parallel=true", "fusion=megatron"]),
    ("llama2_7b_train", ["parallelism.tensor=2", "fusion=none", "activation_checkpointing=selective"]),
    ("llama2_7b_train", ["parallelism.context=2", "parallelism.context_comm=a2a"]),
    ("llama2_7b_train", ["parallelism.context=2", "parallelism.context_comm=all_gather",
                         "activation_checkpointing=selective"]),
    ("gpt2_large_train", ["parallelism.tensor=2", "parallelism.pipeline=2", "fusion=none"]),
    ("gpt3_175b_train", ["parallelism.tensor=2", "parallelism.pipeline=2", "fusion=megatron"]),
    ("gpt3_175b_train", ["parallelism.tensor=2", "fusion=default"]),
    ("bert_large_train", ["parallelism.tensor=2", "parallelism.sequence_parallel=true"]),
    ("mixtral_8x7b_train", ["parallelism.tensor=2", "parallelism.data=4", "parallelism.expert=4",
                            "activation_checkpointing=full"]),
])
def test_every_built_in_block_places_its_collectives(workload, items):
    # each collective finds the GEMM or attention it follows or precedes in the block's kernels, and
    # each weight tensor of the embedding, the blocks and the head the kernel that finishes its
    # gradient (a bias its GEMM's, in an epilogue, or its own reduction)
    w = load_workload(workload, ["config.num_layers=2", "batch_size=1"] + items)
    r = simulate_system(load_hardware("dgx_h100"), w)
    assert not [x for x in r.warnings if "has no kernels named" in x or "no weight-gradient kernels" in x]


def test_the_input_gradients_all_reduce_runs_beside_the_weight_gradient():
    # Megatron-LM's backward: FC1's input-gradient all-reduce starts when FC1's data gradient is done
    # and runs beside its weight-gradient GEMM; PyTorch's own tensor parallelism runs it after both
    runs = {}
    for overlap in (True, False):
        w = load_workload("llama2_7b_train", ["config.num_layers=2", "parallelism.tensor=2",
                                              f"parallelism.tp_wgrad_overlap={str(overlap).lower()}"])
        r = simulate_system(load_hardware("dgx_h100"), w, record_spans=True)
        first = min((s for s in r.spans if s.track == "stage 0 NVLink port" and s.name == "all_reduce B0 layer 1"),
                    key=lambda s: s.start_s)
        runs[overlap] = (first.start_s, r.time_breakdown_s["exposed_communication"], r.step_time_s)
    assert runs[True][0] < runs[False][0]  # it starts before the weight gradient ends
    assert runs[True][1] < runs[False][1] and runs[True][2] < runs[False][2]  # and less of it is exposed


def test_gradient_buckets_leave_where_their_weight_gradients_finish():
    # One layer: 1 s forward, 2 s backward whose two 1 GB weight gradients are finished 75% and 100%
    # of the way through it (a recompute first finishes none): 1 GB buckets leave at 2.5 s and 3.0 s
    # (a steady rate would send the first at 2.0 s); 0.1 s each, the step ends at 3.1 s
    chunk = ChunkModel(1.0, 2.0, 1, grad_bytes=2e9, grad_layers=((1e9, 1e9),), grad_layers_at=((0.75, 1.0),))
    lp = LayoutPlan("1f1b", 1, 1, 1, bucket_bytes=1e9, dp_plan=_per_gb_plan(0.1))
    stats = run_step(None, [StageModel([chunk])], lp, record_spans=True)
    starts = sorted(s.start_s for s in stats.spans if s.name.startswith("all_reduce grad"))
    assert starts == pytest.approx([2.5, 3.0]) and stats.step_s == pytest.approx(3.1)


@pytest.mark.parametrize("clip, step_s", [(True, 4.35), (False, 4.3)])
def test_every_stage_waits_for_the_global_gradient_norm_before_its_update(clip, step_s):
    # Two stages, one micro-batch, 1 s per pass: stage 0 computes 0-1 and 3-4 s, stage 1 1-3 s.
    # Each takes its local gradient norm in 0.1 s, then (clipping) both meet at 4.1 s and all-reduce
    # it in 0.05 s, then update in 0.2 s: both end at 4.35 s, stage 1 having waited 3.1-4.1 s for
    # stage 0's norm. Without the norm each stage updates alone: stage 0 ends at 4.3 s, stage 1 at
    # 3.3 s and idles to the step's end. Either way each stage idles 2 s in all.
    stages = [StageModel([ChunkModel(1.0, 1.0, 1)], optimizer_s=0.3, grad_norm_s=0.1) for _ in range(2)]
    lp = LayoutPlan("1f1b", 2, 1, 1, norm_plan=_per_gb_plan(0.05)("all_reduce", 1e9) if clip else None)
    stats = run_step(None, stages, lp, record_spans=True)
    assert stats.step_s == pytest.approx(step_s)
    assert stats.optimizer_s == pytest.approx(0.3)
    assert stats.exposed_comm_s == pytest.approx(0.05 if clip else 0.0)
    assert stats.bubble_s == pytest.approx(2.0)
    assert stats.compute_s + stats.exposed_comm_s + stats.bubble_s + stats.optimizer_s == pytest.approx(step_s)
    assert {s.name for s in stats.spans if s.name.endswith("gradient norm")} == (
        {"all_reduce gradient norm", "gradient norm"} if clip else set())
    with pytest.raises(ValueError):
        StageModel([ChunkModel(1.0, 1.0, 1)], optimizer_s=0.1, grad_norm_s=0.2)


def test_gradient_clipping_adds_a_norm_pass_over_the_gradients_and_its_all_reduce():
    # Llama-2 7B (2 layers) on TP 2 x PP 2: the optimizer phase gains a sum-of-squares kernel per
    # layer, and the step an all-reduce of one number on every stage, between the norm and the update
    base = ["config.num_layers=2", "parallelism.tensor=2", "parallelism.pipeline=2", "parallelism.microbatches=2"]
    runs = {clip: simulate_system(load_hardware("dgx_h100"), load_workload(
        "llama2_7b_train", base + [f"gradient_clipping={str(clip).lower()}"]), record_spans=True)
        for clip in (True, False)}
    assert runs[True].step_time_s > runs[False].step_time_s
    assert runs[True].time_breakdown_s["optimizer"] > runs[False].time_breakdown_s["optimizer"]
    assert sorted(s.track for s in runs[True].spans if s.name == "all_reduce gradient norm") == [
        "stage 0 NVLink port", "stage 1 NVLink port"]
    for s in (0, 1):
        compute = {x.name: x for x in runs[True].spans if x.track == f"stage {s} compute"}
        reduced = next(x for x in runs[True].spans if x.track == f"stage {s} NVLink port"
                       and x.name == "all_reduce gradient norm")
        assert compute["gradient norm"].end_s <= reduced.start_s < reduced.end_s <= compute["optimizer"].start_s
    assert not [s for s in runs[False].spans if "gradient norm" in s.name]


def test_zero_shards_the_experts_optimizer_work_only_over_the_gpus_holding_the_same_experts():
    # Mixtral (2 layers) on 8 GPUs with 8-way expert parallelism: each GPU holds the dense weights
    # (embedding and head 2 x 32,000 x 4,096, per layer attention 4,096 x (6,144 + 4,096) and a
    # router) and one expert per layer (3 x 4,096 x 14,336). ZeRO-1 splits the dense weights' update
    # over the 8 GPUs but cannot split an expert that only one GPU holds: the optimizer takes
    # f + (1 - f) / 8 of its time without ZeRO, f the experts' share of the GPU's parameters
    dense = 2 * 32000 * 4096 + 2 * (4096 * (6144 + 4096) + 4096 * 8 + 2 * 4096) + 4096
    experts = 2 * 3 * 4096 * 14336
    f = experts / (experts + dense)
    optimizer_s = {}
    for zero in (0, 1):
        w = load_workload("mixtral_8x7b_train", ["config.num_layers=2", "batch_size=1", "parallelism.data=8",
                                                 "parallelism.expert=8", f"parallelism.zero_stage={zero}"])
        optimizer_s[zero] = simulate_system(load_hardware("dgx_h100"), w).time_breakdown_s["optimizer"]
    assert optimizer_s[1] / optimizer_s[0] == pytest.approx(f + (1 - f) / 8, rel=0.01)
