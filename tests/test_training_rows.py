"""Which training rows the accuracy harness builds, and with what layout."""

from __future__ import annotations

import pytest

from gpusim.accuracy_cluster import GPT_FAST_NEW_TOKENS, _inference_workload, _training_workload, run_training
from gpusim.cli import main
from gpusim.config.library import load_hardware
from gpusim.engine.machine import machine_of
from gpusim.engine.simulate import simulate
from gpusim.measurements import heldout_dir, load_training_cases
from gpusim.workload import load_workload


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
    # a repository's issue threads are that repository's reference
    assert source_group(result("zzc0721/torch-performance-test-data issue #120 (test.py)", "x")) == \
        source_group(result("zzc0721/torch-performance-test-data@9d82827 issue #79 (test.py)", "x")) == \
        "zzc0721/torch-performance-test-data"


def test_llm_foundry_rows_run_the_libraries_of_cuda_11():
    # PyTorch 1.13's CUDA (<= 11.8) has no Hopper wgmma kernels, and the FP8 rows' Transformer Engine
    # then required CUDA 11.8: both run warp-synchronous 16-bit products; FP8 GEMMs keep the native ones
    bf16 = _training_workload(_case("llmfoundry_mpt_7b_h100_8gpu_amp_bf16"))[3]
    fp8 = _training_workload(_case("llmfoundry_mpt_3b_h100_8gpu_amp_fp8"))[3]
    assert "tensor_instructions=warp_mma" in bf16 and "tensor_instructions=warp_mma" in fp8
    legacy = machine_of(load_hardware("h100_sxm5_80gb")).with_warp_mma_libraries()
    assert legacy.persistent_matrix_kernels("fp8") and not legacy.persistent_matrix_kernels("bf16")
    # both ran the MPT yamls' attn_impl: triton (the 2022 Triton FlashAttention, one pipeline stage)
    assert "config.attention_kernel=fused_unpipelined" in bf16 and "config.attention_kernel=fused_unpipelined" in fp8


def test_gpt_fast_decode_rows_replay_cuda_graphs_and_count_the_default_200_new_tokens():
    hardware, _, name, items, launch, counted = _inference_workload(_case("gptfast_llama2_7b_bf16_tp4_a100"))
    assert (hardware, name, launch, counted) == ("dgx_a100", "llama2_7b_inference", "graph", GPT_FAST_NEW_TOKENS)
    assert {"parallelism.tensor=4", "prompt_len=5", f"generate_len={GPT_FAST_NEW_TOKENS}", "batch_size=1"} <= set(items)


def test_first_token_rows_time_the_prompt_alone_with_native_launches():
    hardware, _, name, items, launch, counted = _inference_workload(
        _case("trtllm_v0p5_llama_70b_fp8_h100_first_token_in2048_tp4"))
    assert (hardware, name, launch, counted) == ("dgx_h100", "llama2_70b_inference", "native", None)
    assert {"prompt_len=2048", "generate_len=0", "precision=fp8", "parallelism.tensor=4"} <= set(items)


def test_inference_rows_gpusim_cannot_build_say_why():
    assert _inference_workload(_case("gptfast_llama2_7b_int8_a100")) == "weight-only int8 quantization is not modelled"
    # TensorRT-LLM's H100 engines are built with --fp8_kv_cache: the batch-896 run then fits in 80 GB
    assert "kv_cache_dtype=fp8" in _inference_workload(_case("trtllm_v0p9_llama_7b_fp8_h100_b896"))[3]
    results, skipped = run_training([_case("trtllm_v0p9_llama_7b_fp8_h100_b896")])
    assert results and not skipped


def test_serving_throughput_counts_output_tokens_over_the_whole_batch_run():
    case = _case("trtllm_v0p5_llama_7b_fp16_a100_static_b64")
    (result,), _ = run_training([case])
    workload = load_workload("llama2_7b_inference", ["batch_size=64", "prompt_len=128", "generate_len=128",
                                                     "decode_buckets=4", "precision=fp16"])
    total_s = simulate(load_hardware("a100_sxm4_80gb"), workload, launch_mode="native").total_time_s
    assert result.simulated == pytest.approx(64 * 128 / total_s)


def test_compiled_runtimes_launch_natively_and_pytorch_eagerly():
    # TensorRT-LLM and LMDeploy (TurboMind) launch from C++; NeuSight's Hugging Face models from Python
    assert _inference_workload(_case("lmdeploy_llama2_7b_fp16_a100"))[4] == "native"
    assert _inference_workload(_case("trtllm_v0p9_llama_7b_fp8_h200_b896"))[4] == "native"
    (result,), _ = run_training([_case("neusight_gpt2_large_inference_1024x4_h100")])
    assert result.note == "1 GPU, eager"


HELDOUT = heldout_dir() / "llmfoundry_h100_sequence_sweep.csv"


def test_heldout_llm_foundry_sweep_rows_are_all_buildable():
    # the README's other H100 rows (sequence 512-65,536, BF16 and FP8) are kept out of the score
    cases = load_training_cases(HELDOUT)
    assert len(cases) == 31 and not set(c.case_id for c in cases) & set(c.case_id for c in load_training_cases())
    assert all(_training_workload(c) is not None for c in cases)


def test_accuracy_scores_a_given_training_csv(tmp_path, capsys):
    lines = HELDOUT.read_text().splitlines()
    one = tmp_path / "one.csv"
    one.write_text("\n".join([lines[0], next(l for l in lines if "_3b_h100_8gpu_amp_bf16_seq512," in l)]) + "\n")
    assert main(["accuracy", "--suite", "training", "--training-measurements", str(one)]) == 0
    out = capsys.readouterr().out
    assert str(one) in out and "llmfoundry_mpt_3b_h100_8gpu_amp_bf16_seq512" in out and "1 cases" in out


def test_megatron_2021_rows_derive_tokens_from_the_papers_flop_count():
    """Narayanan et al. 2021 give teraFLOP/s per GPU by their Eq. 3, 96 B s l h^2 (1 + s/6h + V/16lh)
    per step; the rows store tokens/s/GPU = that rate over Eq. 3's FLOP per token. The 1T model by
    hand: 163e12 / (96 x 128 x 25600^2 x (1 + 2048/153600 + 51200/(16 x 128 x 25600))) = 19.96."""
    from gpusim.accuracy_cluster import MEGATRON_A100_GPT, MEGATRON_A100_VOCAB

    rows = [c for c in load_training_cases() if c.case_id.startswith("narayanan2021_")]
    rows += load_training_cases(heldout_dir() / "megatron_a100_narayanan2021.csv")
    assert len(rows) == 22
    one_t = next(c for c in rows if c.model == "gpt_1008b")
    assert one_t.measured_tokens_per_s_per_gpu == pytest.approx(19.96, abs=0.005)
    for c in rows:
        layers, hidden, _ = MEGATRON_A100_GPT[c.model]
        s, v = c.seq_len, MEGATRON_A100_VOCAB
        per_token = 96 * layers * hidden**2 * (1 + s / (6 * hidden) + v / (16 * layers * hidden))
        rate = c.measured_hfu_fraction * c.mfu_peak_flop_per_s
        assert c.measured_tokens_per_s_per_gpu == pytest.approx(rate / per_token, rel=1e-3), c.case_id


def test_the_1t_row_builds_the_papers_layout():
    case = next(c for c in load_training_cases() if c.case_id == "narayanan2021_gpt_1t_3072gpu")
    system, hw_over, name, items = _training_workload(case)
    assert (system, hw_over) == ("dgx_a100", [("num_nodes", 384)])
    for item in ("parallelism.tensor=8", "parallelism.pipeline=64", "parallelism.data=6",
                 "parallelism.microbatches=512", "fusion=megatron", "activation_checkpointing=full"):
        assert item in items


def test_sequence_parallel_selective_recompute_and_interleaving_come_from_the_row():
    """Korthikanti et al. 2022's 175B run with the paper's method: TP 8, PP 8 with 3 interleaved
    stages per GPU, sequence parallelism, selective recomputation, 64 micro-batches."""
    case = next(c for c in load_training_cases(heldout_dir() / "megatron_a100_korthikanti2022.csv")
                if c.case_id == "korthikanti2022_gpt_174.6b_64gpu_selective_sp")
    system, hw_over, _, items = _training_workload(case)
    assert (system, hw_over) == ("dgx_a100", [("num_nodes", 8)])
    for item in ("parallelism.sequence_parallel=true", "activation_checkpointing=selective",
                 "parallelism.schedule=interleaved", "parallelism.virtual_stages=3", "parallelism.microbatches=64",
                 "parallelism.data=1"):
        assert item in items
    full = next(c for c in load_training_cases(heldout_dir() / "megatron_a100_korthikanti2022.csv")
                if c.case_id == "korthikanti2022_gpt_174.6b_64gpu_full_recompute")
    items = _training_workload(full)[3]
    assert "parallelism.sequence_parallel=false" in items and "activation_checkpointing=full" in items


def test_nemo_rows_run_the_tables_micro_batch():
    """NeMo 24.07's GPT-3 5B row: 64 GPUs, global batch 2,048, micro-batch 4, no model parallelism: 8
    micro-batches per GPU of 4 sequences each. The 24.12 rows give no micro-batch: 1."""
    case = next(c for c in load_training_cases(heldout_dir() / "nemo_2407_h100_fp8.csv")
                if c.case_id == "nemo_2407_gpt3_5b_64gpu")
    items = _training_workload(case)[3]
    for item in ("config.num_layers=24", "config.hidden_size=4096", "batch_size=4", "gradient_accumulation_steps=8",
                 "parallelism.data=64", "precision=fp8"):
        assert item in items
    scored = next(c for c in load_training_cases() if c.case_id == "nemo_llama2_7b_8gpu")
    items = _training_workload(scored)[3]
    assert "batch_size=1" in items and "gradient_accumulation_steps=16" in items
    assert "parallelism.tp_comm_overlap=false" in items  # no tensor parallelism, nothing to overlap
    tp4 = next(c for c in load_training_cases() if c.case_id == "nemo_gpt3_175b_128gpu")
    assert "parallelism.tp_comm_overlap=true" in _training_workload(tp4)[3]  # NeMo's userbuffers on H100



def test_a_megatron_row_whose_batch_does_not_split_is_skipped_with_a_reason():
    import dataclasses

    case = next(c for c in load_training_cases() if c.case_id == "narayanan2021_gpt_1t_3072gpu")
    results, skipped = run_training([dataclasses.replace(case, global_batch_size=3001)])  # 6 data-parallel groups
    assert not results and len(skipped) == 1 and "layout, batch or model" in skipped[0].reason


def test_rows_of_2023_2024_libraries_promote_the_fp8_accumulator_in_series():
    # NeMo's 2024 containers and llm-foundry's 2023 Transformer Engine ran a CUDA 12 (or 11.8)
    # cuBLASLt, whose split-accumulator FP8 GEMMs add the partial sums after the products
    for case_id in ("nemo_llama2_7b_8gpu", "nemo_gpt3_175b_128gpu", "llmfoundry_mpt_3b_h100_8gpu_amp_fp8"):
        assert "fp8_promotion=in_series" in _training_workload(_case(case_id))[3], case_id
    machine = machine_of(load_hardware("h100_sxm5_80gb"))
    assert not machine.fp8_promotion_in_series and machine.with_in_series_fp8_promotion().fp8_promotion_in_series


def test_a_workload_setting_applies_to_every_row_after_its_own():
    # the rows' in-series promotion overridden: the same run with CUDA 13's overlapped adds is faster
    case = _case("nemo_llama2_7b_8gpu")
    (recorded,), _ = run_training([case])
    (overlapped,), _ = run_training([case], workload_items=("fp8_promotion=overlapped",))
    assert case.metric.startswith("tokens_per_s")
    assert overlapped.simulated > recorded.simulated
    results, skipped = run_training([case], workload_items=("no_such_key=1",))
    assert not results and "no_such_key" in skipped[0].reason


def test_a_mistyped_workload_setting_is_one_line_before_any_row_runs(capsys):
    from gpusim.cli import main

    assert main(["accuracy", "--suite", "training", "--workload-set", "fp8_promotoin=overlapped"]) != 0
    err = capsys.readouterr().err
    assert "--workload-set" in err and "fp8_promotoin" in err and "did you mean fp8_promotion" in err
