"""Which training rows the accuracy harness builds, and with what layout."""

from __future__ import annotations

from gpusim.accuracy_cluster import _training_workload
from gpusim.measurements import load_training_cases


def _case(case_id: str):
    return next(c for c in load_training_cases() if c.case_id == case_id)


def test_nemo_gpt3_row_runs_its_stated_3d_layout():
    system, hw_over, name, items = _training_workload(_case("nemo_gpt3_175b_128gpu"))
    assert (system, hw_over, name) == ("dgx_h100", [("num_nodes", 16)], "gpt3_175b_train")
    # 128 GPUs = TP 4 x PP 8 x DP 4; global batch 256 = DP 4 x 64 micro-batches of 1 sequence
    for item in ("parallelism.tensor=4", "parallelism.pipeline=8", "parallelism.data=4", "parallelism.microbatches=64",
                 "parallelism.schedule=interleaved", "parallelism.virtual_stages=6", "config.seq_len=2048",
                 "precision=fp8", "parallelism.sequence_parallel=true"):
        assert item in items


def test_nemo_data_parallel_row_accumulates_its_global_batch():
    _, hw_over, name, items = _training_workload(_case("nemo_llama2_7b_8gpu"))
    assert (hw_over, name) == ([("num_nodes", 1)], "llama2_7b_train")
    assert "gradient_accumulation_steps=16" in items and "parallelism.data=8" in items  # 128 = 8 x 16
    assert not any(i.startswith("parallelism.microbatches") for i in items)


def test_rows_without_a_buildable_layout_are_not_built():
    assert _training_workload(_case("nemo_llama3_70b_64gpu")) is None  # context parallelism, no global batch
    assert _training_workload(_case("nemo_gpt3_175b_512gpu")) is None  # layout not stated
    assert _training_workload(_case("megatron_gpt3_175b_strong_scaling_96gpu")) is None


def test_training_cases_group_by_reference_and_single_gpu_rows_apart():
    from gpusim.accuracy import CaseResult
    from gpusim.accuracy_cluster import source_group

    def result(source, note):
        return CaseResult("c", "h100_sxm5_80gb", "train", "time_s", 1.0, 1.0, None, source, note)

    assert source_group(result("sitar-lab/NeuSight@6945927 scripts/x.json", "DP4")) == "sitar-lab/NeuSight"
    assert source_group(result("sitar-lab/NeuSight@6945927 scripts/x.json", "1 GPU, eager")) == \
        "sitar-lab/NeuSight, 1 GPU"
    assert source_group(result("NVIDIA NeMo 24.12 performance summary (docs.nvidia.com/x)", "TP1 PP1")) == \
        "NVIDIA NeMo 24.12 performance summary"
