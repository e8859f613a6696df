"""Layout transforms (expert sharding, sequence parallelism) and the collectives accuracy target."""

import pytest

from gpusim.accuracy import summarize
from gpusim.accuracy_cluster import run_communication
from gpusim.config import load_hardware
from gpusim.measurements import load_communication_cases
from gpusim.workload import load_workload


def test_collectives_meet_the_accuracy_target():
    results, _ = run_communication(load_communication_cases())
    assert len(results) >= 20
    assert summarize(results)[0].mape_fraction <= 0.12


def test_schedule_fields_validate():
    from gpusim.errors import ConfigError
    with pytest.raises(ConfigError):
        load_workload("gpt2_large_train", ["parallelism.virtual_stages=2"])


def test_sequence_parallel_moves_the_same_bytes_as_all_reduce():
    from gpusim.engine.collectives import fabric_of, plan_collective
    f = fabric_of(load_hardware("dgx_a100"))
    ar = plan_collective("all_reduce", 2**28, 8, f, algorithm="ring", protocol="Simple")
    rs = plan_collective("reduce_scatter", 2**28, 8, f, algorithm="ring", protocol="Simple")
    ag = plan_collective("all_gather", 2**28, 8, f, algorithm="ring", protocol="Simple")
    assert rs.intra_bytes + ag.intra_bytes == pytest.approx(ar.intra_bytes)


def test_expert_sharding_keeps_routed_tokens_and_splits_experts():
    from gpusim.engine.cluster import _expert_shard
    from gpusim.workload.models import transformer as T
    from gpusim.workload.ops import Matmul
    from gpusim.workload.precision import policy

    cfg = T.TransformerConfig(num_layers=1, hidden_size=256, num_heads=4, seq_len=128, vocab_size=1000,
                              num_experts=8, top_k=2)
    block = T.build_layers(T.resolve("moe", cfg), policy("bf16"), batch=2, seq_q=128, seq_kv=128,
                           training=True)[1]
    sharded = _expert_shard(block, 4, Matmul)
    up = {f.name: f for f in block.ops}["experts_up"]
    up4 = {f.name: f for f in sharded.ops}["experts_up"]
    assert up4.op.batch == 2 and up4.op.m == 4 * up.op.m
    assert up4.op.flop() == pytest.approx(up.op.flop())  # same routed tokens per GPU
    assert up4.num_parameters == up.num_parameters // 4


def test_questionable_layouts_run_with_a_warning():
    from gpusim.config import load_hardware
    from gpusim.engine.cluster import simulate_system
    from gpusim.workload import load_workload

    hw = load_hardware("dgx_h100")
    wl = load_workload("gpt2_large_train", ["config.num_layers=8", "batch_size=1", "parallelism.pipeline=4",
                                            "parallelism.data=2", "parallelism.microbatches=2",
                                            "parallelism.zero_stage=3"])
    warnings = simulate_system(hw, wl).warnings
    assert any("2 micro-batches for 4 pipeline stages" in w and "= 60%" in w for w in warnings)
    assert any("zero_stage 3 with pipeline parallelism" in w for w in warnings)
    fine = load_workload("gpt2_large_train", ["config.num_layers=8", "batch_size=1", "parallelism.pipeline=4",
                                              "parallelism.data=2", "parallelism.microbatches=8",
                                              "parallelism.zero_stage=1"])
    assert not any("pipeline" in w for w in simulate_system(hw, fine).warnings)


def test_tensor_parallel_inference_reports_its_link_utilization():
    from gpusim.config import load_hardware
    from gpusim.engine.cluster import simulate_system
    from gpusim.workload import load_workload

    hw = load_hardware("dgx_h100")
    result = simulate_system(hw, load_workload("llama2_7b_inference", ["parallelism.tensor=4", "generate_len=8"]))
    util = result.link_utilization
    assert set(util) == {"stage0.nvlink_tx", "stage0.nvlink_rx"}
    assert 0 < util["stage0.nvlink_tx"] < 1
    assert result.time_breakdown_s["exposed_communication"] > 0
    # the same all-reduces over a port twice as fast use half its share, give or take the shorter step;
    # 2,048-token prompts make the prefill all-reduce 128 MiB, which both ports run as a Simple-protocol
    # ring (near a crossover between protocols the faster port can pick another, which moves other bytes)
    items = ["parallelism.tensor=4", "generate_len=8", "prompt_len=2048"]
    slow = simulate_system(hw, load_workload("llama2_7b_inference", items))
    fast = simulate_system(load_hardware("dgx_h100", ["gpu.peer_links.link_bandwidth_bytes_per_s=50GB/s"]),
                           load_workload("llama2_7b_inference", items))
    ratio = fast.link_utilization["stage0.nvlink_tx"] / slow.link_utilization["stage0.nvlink_tx"]
    assert ratio == pytest.approx(0.5 * slow.total_time_s / fast.total_time_s, rel=1e-6)
