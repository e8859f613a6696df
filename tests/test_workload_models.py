"""Model workloads: parameter counts and FLOP against published numbers and closed forms."""

from __future__ import annotations

import time

import pytest

from gpusim.workload import Attention, Matmul, list_workloads, load_workload


def closed_form_train_flop(batch, seq, layers, hidden, vocab):
    """Narayanan et al. 2021 (SC'21), eq. 3 without recompute: 72 B s l h^2 (1 + s/6h + V/12lh)."""
    return 72 * batch * seq * layers * hidden ** 2 * (1 + seq / (6 * hidden) + vocab / (12 * layers * hidden))


@pytest.mark.parametrize("name,expected,rel", [
    ("gpt3_175b_train", 174.6e9, 0.01),
    ("llama2_7b_train", 6.74e9, 0.002),
    ("bert_large_train", 3.35e8, 0.01),
    ("resnet50_train", 2.56e7, 0.01),
    ("bert_base_train", 1.10e8, 0.01),
    ("gpt2_large_train", 7.74e8, 0.005),
    ("llama3_8b_train", 8.03e9, 0.005),
    ("llama2_70b_inference", 6.98e10, 0.015),
    ("mixtral_8x7b_inference", 4.67e10, 0.005),
    ("mixtral_8x7b_train", 4.67e10, 0.005),
])
def test_parameter_counts_match_published_models(name, expected, rel):
    assert load_workload(name).num_parameters == pytest.approx(expected, rel=rel)


def test_resnet50_parameters_exact():
    # torchvision resnet50: 25,557,032 parameters (conv weights, batch-norm scales and shifts, fc)
    assert load_workload("resnet50_train").num_parameters == 25_557_032


def test_mnist_models_parameters_exact():
    assert load_workload("mlp_mnist").num_parameters == 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10
    # conv 1->32 3x3, conv 32->64 3x3, fc 9216->128, fc 128->10 (with biases)
    assert load_workload("cnn_mnist").num_parameters == 320 + 18_496 + 1_179_776 + 1_290


@pytest.mark.parametrize("name,dims", [
    ("gpt3_175b_train", (8, 2048, 96, 12288, 50257)),
    ("gpt2_large_train", (4, 1024, 36, 1280, 50257)),
])
@pytest.mark.parametrize("fusion", ["default", "none"])
def test_gpt_training_flop_matches_closed_form(name, dims, fusion):
    w = load_workload(name, [f"fusion={fusion}"])
    expected = closed_form_train_flop(*dims)
    assert w.flop_per_step() == pytest.approx(expected, rel=0.02)
    assert w.model_flop_per_step == pytest.approx(expected, rel=0.02)
    assert w.tokens_per_step == dims[0] * dims[1]


def test_resnet50_forward_is_4_1_gmac_per_image():
    w = load_workload("resnet50_inference", ["batch_size=1"])
    gmac = w.graph.total_matrix_flop() / 2 / 1e9
    assert gmac == pytest.approx(4.1, rel=0.01)


def test_training_backward_is_about_twice_forward():
    w = load_workload("gpt2_large_train")
    phases = w.graph.summary_by("phase")
    assert phases["backward"]["flop"] / phases["forward"]["flop"] == pytest.approx(2.0, rel=0.02)
    assert "recompute" not in phases and "optimizer" in phases


def test_full_checkpointing_adds_one_forward_of_the_layers():
    plain = load_workload("gpt2_large_train")
    full = load_workload("gpt2_large_train", ["activation_checkpointing=full"])
    recompute = full.graph.summary_by("phase")["recompute"]["flop"]
    layer_forward = sum(n.flop() for n in plain.graph.nodes if n.phase == "forward" and n.layer is not None)
    assert recompute == pytest.approx(layer_forward)
    assert full.model_flop_per_step == pytest.approx(plain.model_flop_per_step)
    assert full.flop_per_step() > plain.flop_per_step()


def test_selective_checkpointing_recomputes_only_attention():
    w = load_workload("llama2_7b_train")
    kinds = {n.op.kind for n in w.graph.nodes if n.phase == "recompute"}
    assert kinds == {"attention"}


def test_gradient_accumulation_repeats_micro_batches():
    one = load_workload("gpt2_large_train")
    four = load_workload("gpt2_large_train", ["gradient_accumulation_steps=4"])
    assert four.samples_per_step == 4 * one.samples_per_step
    fb = lambda w: sum(n.flop() for n in w.graph.nodes if n.phase in ("forward", "backward"))
    assert fb(four) == pytest.approx(4 * fb(one), rel=1e-3)
    opt = lambda w: sum(n.flop() for n in w.graph.nodes if n.phase == "optimizer")
    assert opt(four) == opt(one)


def test_fusion_reduces_bytes_and_kernels_but_not_matrix_flop():
    fused = load_workload("gpt2_large_train", ["fusion=default"])
    unfused = load_workload("gpt2_large_train", ["fusion=none"])
    assert fused.graph.total_bytes() < unfused.graph.total_bytes()
    assert fused.graph.num_kernels() < unfused.graph.num_kernels()
    assert fused.graph.total_matrix_flop() == pytest.approx(unfused.graph.total_matrix_flop())
    assert fused.fusion.bytes_saved == pytest.approx(unfused.graph.total_bytes() - fused.graph.total_bytes())
    assert fused.fusion.num_kernels_removed == unfused.graph.num_kernels() - fused.graph.num_kernels()
    assert any(isinstance(n.op, Matmul) and "gelu" in n.op.epilogue for n in fused.graph.nodes)
    assert not any(isinstance(n.op, Attention) for n in unfused.graph.nodes)


def test_decode_reads_all_weights_per_token():
    w = load_workload("llama2_7b_inference")
    generate = w.details["generate_len"]
    assert sum(b["num_steps"] for b in w.details["decode_buckets"]) == generate
    decode = [n for n in w.graph.nodes if n.phase == "decode"]
    weight_reads = sum(n.repeat * n.op.num_b_matrices * n.op.k * n.op.n * 2 for n in decode
                       if isinstance(n.op, Matmul) and n.op.m == w.spec.batch_size)
    # every linear weight except the input embedding table is read once per generated token
    non_embedding = w.num_parameters - 32000 * 4096
    assert weight_reads >= generate * non_embedding * 2 * 0.999
    assert sum(n.bytes_read() for n in decode) > weight_reads


def test_decode_attention_flop_is_exact_over_buckets():
    w = load_workload("llama2_7b_inference")
    prompt, gen = w.details["prompt_len"], w.details["generate_len"]
    att = sum(n.matrix_flop() for n in w.graph.nodes if n.phase == "decode" and n.op.kind == "attention")
    exact = sum(4 * 8 * 32 * 128 * (prompt + j + 1) for j in range(gen)) * 32
    assert att == pytest.approx(exact, rel=1e-3)


def test_identical_layers_share_op_values():
    w = load_workload("gpt3_175b_train")
    qkv = [n.op for n in w.graph.nodes if n.name.endswith(".qkv") and n.phase == "forward"]
    assert len(qkv) == 96 and all(op is qkv[0] for op in qkv)
    assert len(w.graph.distinct_ops()) < 80


def test_gpt3_builds_fast():
    start = time.perf_counter()
    load_workload("gpt3_175b_train")
    assert time.perf_counter() - start < 1.0


def test_graph_is_topological_and_names_unique():
    w = load_workload("llama2_7b_inference")
    seen = set()
    for n in w.graph.nodes:
        assert n.name not in seen and all(d in seen for d in n.after)
        seen.add(n.name)


def test_overrides_change_the_model():
    w = load_workload("gpt3_175b_train", ["config.num_layers=2", "batch_size=1", "precision=fp8"])
    assert w.num_parameters < 5e9
    assert any(isinstance(n.op, Matmul) and n.op.dtype == "fp8" for n in w.graph.nodes)


def test_fp8_keeps_the_head_and_the_router_in_bf16():
    # Megatron-LM/NeMo's output layer and MoE router are not Transformer Engine FP8 modules: no casts,
    # BF16 products in both directions; the experts and the blocks' linear layers are FP8
    w = load_workload("mixtral_8x7b_inference", ["config.num_layers=1", "precision=fp8"])
    ops = {n.name.rsplit(".", 1)[-1]: n.op for n in w.graph.nodes if n.phase == "prefill"}
    assert ops["logits"].dtype == ops["router"].dtype == "bf16"
    assert ops["experts_up"].dtype == ops["qkv"].dtype == "fp8"
    assert not any(n.name.endswith(("logits_fp8_input", "router_fp8_input")) for n in w.graph.nodes)
    train = load_workload("gpt3_175b_train", ["config.num_layers=1", "batch_size=1", "precision=fp8"])
    head = [n.op for n in train.graph.nodes if ".logits" in n.name and isinstance(n.op, Matmul)]
    assert len(head) == 3 and {op.dtype for op in head} == {"bf16"}  # forward, dgrad, wgrad
    assert not any(op.split_accumulator for op in head)


def test_moe_routes_top_k_tokens_to_experts():
    w = load_workload("mixtral_8x7b_inference")
    ups = [n.op for n in w.graph.nodes if n.name.endswith("experts_up") and n.phase == "prefill"]
    assert ups[0].batch == 8 and ups[0].m == 8 * 512 * 2 // 8


@pytest.mark.parametrize("name", [n for n, _ in list_workloads()])
def test_every_builtin_workload_loads_expands_and_reports_memory(name):
    w = load_workload(name)
    assert len(w.graph) > 0 and w.flop_per_step() > 0
    assert w.memory.total_bytes > 0
    info = w.summary()
    for key in ("num_parameters", "flop_per_step", "num_kernels", "memory"):
        assert key in info
    for key in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "total_bytes"):
        assert key in info["memory"]
    if w.kind == "model" and w.mode == "train":
        assert {"forward", "backward", "optimizer"} <= set(w.graph.phases())


def test_gradient_clipping_reads_every_gradient_once_before_the_updates():
    # mlp_mnist in FP32: 669,706 parameters in three layers. The optimizer phase starts with one
    # sum-of-squares pass per layer reading its gradients (4 bytes each, 2 FLOP each), then the
    # updates; without clipping, only the updates
    clipped = load_workload("mlp_mnist", ["mode=train", "precision=fp32"])
    plain = load_workload("mlp_mnist", ["mode=train", "precision=fp32", "gradient_clipping=false"])
    norms = [n for n in clipped.graph.nodes if n.name.endswith(".grad_norm")]
    params = clipped.num_parameters
    assert params == 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10
    assert sum(n.op.bytes_read() for n in norms) == 4 * params
    assert sum(n.op.vector_flop() for n in norms) == 2 * params
    optimizer = [n.name for n in clipped.graph.nodes if n.phase == "optimizer"]
    assert optimizer[:len(norms)] == [n.name for n in norms]
    # in BF16 the gradients are read at 2 bytes each
    bf16 = load_workload("mlp_mnist", ["mode=train", "precision=bf16"])
    assert sum(n.op.bytes_read() for n in bf16.graph.nodes if n.name.endswith(".grad_norm")) == 2 * params
    assert [(n.name, n.op) for n in plain.graph.nodes if n.phase == "optimizer"] == [
        (n.name, n.op) for n in clipped.graph.nodes if n.phase == "optimizer" and not n.name.endswith(".grad_norm")]


def test_a_context_beyond_a_rotary_models_seq_len_is_timed_with_a_warning():
    # Llama's rotary positions extend past config.seq_len (GPT-2's learned ones do not: refused)
    workload = load_workload("llama2_7b_inference", ["prompt_len=4000", "generate_len=200", "batch_size=1"])
    assert any("prompt_len + generate_len (4200) is longer than config.seq_len (4096)" in n for n in workload.notes)
    assert not load_workload("llama2_7b_inference", ["prompt_len=3896", "generate_len=200"]).notes
