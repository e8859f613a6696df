"""Pipeline schedules, overlap and layouts of the multi-GPU engine."""

import pytest

from gpusim.config import load_hardware
from gpusim.engine.cluster import ChunkModel, LayoutPlan, StageModel, pipeline_order, run_step, simulate_system
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


def test_overlap_never_makes_a_step_slower():
    hw = load_hardware("dgx_a100")
    on = simulate_system(hw, _gpt(["parallelism.data=8", "parallelism.overlap_communication=true",
                                   "parallelism.bucket_bytes=10 MB"]))
    off = simulate_system(hw, _gpt(["parallelism.data=8", "parallelism.overlap_communication=false"]))
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
