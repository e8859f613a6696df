"""Eager (fusion none) lowering: the kernels an eager framework launches for attention and for
functions written as several tensor ops, the inference LM-head option and BERT's classifier head,
and the single-GPU end-to-end rows of the accuracy dataset that use them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpusim.accuracy import Skipped
from gpusim.accuracy_cluster import _single_gpu_case, _time_without_optimizer
from gpusim.config.library import load_hardware
from gpusim.engine.simulate import simulate
from gpusim.errors import ConfigError
from gpusim.measurements import load_training_cases
from gpusim.workload import Matmul, load_workload
from gpusim.workload.expand import _eager_kv_repeats
from gpusim.workload.layers import FwdOp, saved_bytes
from gpusim.workload.ops import EAGER_COMPOSITIONS, ELEMENTWISE_FUNCTIONS, Reduction

B, H, S = 2, 20, 1024  # GPT-2 Large: 20 heads; fp32 scores of 4 bytes


def _nodes(name: str, items: list[str]):
    return load_workload(name, items).graph.nodes


def test_eager_causal_attention_scales_and_masks_the_scores_in_kernels_of_their_own():
    nodes = {n.name: n for n in _nodes("gpt2_large_train", ["fusion=none", "precision=fp32", "config.num_layers=1",
                                                            f"batch_size={B}"])}
    scores_bytes = B * H * S * S * 4
    for step in ("scale", "mask_fill"):
        fwd = nodes[f"layer0.attention_{step}"]
        assert (fwd.bytes_read(), fwd.bytes_written()) == (scores_bytes, scores_bytes)
        grad = nodes[f"layer0.attention_{step}.grad"]
        assert (grad.bytes_read(), grad.bytes_written()) == (scores_bytes, scores_bytes)
    order = [n.name for n in nodes.values() if n.phase == "forward" and n.name.startswith("layer0.attention")]
    assert order[:4] == ["layer0.attention_qk", "layer0.attention_scale", "layer0.attention_mask_fill",
                         "layer0.attention_softmax"]
    # the scale is contiguous; the causal mask is broadcast over batch and heads, in the forward and
    # in its gradient (PyTorch's index-computing kernel over 2 dimensions)
    assert nodes["layer0.attention_scale"].op.index_dims == 0
    assert nodes["layer0.attention_mask_fill"].op.index_dims == 2
    assert nodes["layer0.attention_mask_fill.grad"].op.index_dims == 2


def test_eager_bidirectional_attention_adds_a_padding_mask_without_a_backward_kernel():
    nodes = {n.name: n for n in _nodes("bert_large_train", ["fusion=none", "config.num_layers=1", "batch_size=2"])}
    scores_bytes = 2 * 16 * 512 * 512 * 2  # batch 2, 16 heads, 512 x 512 BF16 scores
    assert "layer0.attention_scale" in nodes
    add = nodes["layer0.attention_mask_add"]
    assert (add.bytes_read(), add.bytes_written()) == (scores_bytes, scores_bytes)
    assert "layer0.attention_mask_add.grad" not in nodes  # the gradient of x + mask is the gradient of x
    assert add.op.index_dims == 3  # keys, heads x queries, batch
    assert not any("mask_fill" in name for name in nodes)


def test_alibi_replaces_the_position_table_with_a_bias_on_the_scores():
    """ALiBi (MPT, BLOOM): no position embedding; fused attention adds the bias in the kernel, eager
    code in a kernel of its own between the scale and the causal mask, with no backward kernel (the
    bias is not learned and x + b passes its gradient through)."""
    items = ["config.position_embedding=alibi", "config.num_layers=1", f"batch_size={B}", "precision=fp32"]
    fused = {n.name: n for n in _nodes("gpt2_large_train", items)}
    assert not any("positions" in name for name in fused)
    assert fused["layer0.attention"].op.score_bias
    eager = {n.name: n for n in _nodes("gpt2_large_train", items + ["fusion=none"])}
    order = [n for n in eager if n.startswith("layer0.attention_") and eager[n].phase == "forward"]
    assert order[:4] == ["layer0.attention_qk", "layer0.attention_scale", "layer0.attention_alibi_add",
                         "layer0.attention_mask_fill"]
    scores_bytes = B * H * S * S * 4
    add = eager["layer0.attention_alibi_add"]
    assert add.bytes_written() == scores_bytes and add.bytes_read() >= scores_bytes
    assert "layer0.attention_alibi_add.grad" not in eager
    learned = {n.name for n in _nodes("gpt2_large_train", items[1:])}
    assert "embedding.positions" in learned and not any("alibi" in name for name in learned)


def test_fused_attention_has_no_separate_scale_or_mask_kernels():
    names = {n.name for n in _nodes("gpt2_large_train", ["config.num_layers=1"])}
    assert not any(name.endswith(("_scale", "_mask_fill", "_mask_add")) for name in names)


def test_attention_only_fusion_is_eager_but_keeps_the_fused_attention_kernel():
    """llm-foundry's MPT: eager PyTorch (bias, GELU, residual adds as kernels of their own) calling a
    FlashAttention kernel. Its forward is fusion none's with the six lowered attention ops replaced
    by the one fused kernel; its backward runs the fused kernel's backward."""
    def nodes(fusion):
        return [n for n in _nodes("gpt2_large_train", [f"fusion={fusion}", "config.num_layers=1", f"batch_size={B}"])
                if n.name.startswith("layer0")]

    def forward(fusion):
        return [(n.name, n.op) for n in nodes(fusion) if n.phase == "forward"]

    eager, only = forward("none"), forward("attention_only")
    fused_attention = dict(forward("default"))["layer0.attention"]
    names = [name for name, _ in eager]
    first = names.index("layer0.attention_qk")
    assert names[first:first + 6] == ["layer0.attention_qk", "layer0.attention_scale", "layer0.attention_mask_fill",
                                      "layer0.attention_softmax", "layer0.attention_dropout", "layer0.attention_av"]
    assert [op for _, op in only] == ([op for _, op in eager[:first]] + [fused_attention]
                                      + [op for _, op in eager[first + 6:]])
    assert not any(isinstance(op, Matmul) and op.epilogue for _, op in only)
    backward_attention = [n.op for n in nodes("attention_only")
                          if n.phase == "backward" and n.name.startswith("layer0.attention")]
    assert replace(fused_attention, variant="backward") in backward_attention
    w = load_workload("gpt2_large_train", ["fusion=attention_only", "config.num_layers=1", f"batch_size={B}"])
    none = load_workload("gpt2_large_train", ["fusion=none", "config.num_layers=1", f"batch_size={B}"])
    assert w.fusion.mode == "attention_only"
    assert w.fusion.num_kernels_removed == none.graph.num_kernels() - w.graph.num_kernels() > 0


def test_gelu_new_is_eight_kernels_in_eager_mode():
    n = B * S * 5120  # GPT-2 Large FFN width 4 x 1280
    nodes = [x for x in _nodes("gpt2_large_train", ["fusion=none", "precision=fp32", "config.num_layers=1",
                                                    "config.activation=gelu_new", f"batch_size={B}"])
             if x.phase == "forward" and x.name.startswith("layer0.act_")]
    assert [x.op.function for x in nodes] == list(EAGER_COMPOSITIONS["gelu_new"])
    # x^3, scale, +x (2 inputs), scale, tanh, +1, 0.5 x, multiply (2 inputs): 10 reads and 8 writes of n
    assert sum(x.bytes_read() for x in nodes) == 10 * n * 4
    assert sum(x.bytes_written() for x in nodes) == 8 * n * 4
    assert all(ELEMENTWISE_FUNCTIONS[x.op.function].num_outputs == 1 for x in nodes)


def test_gelu_new_is_one_epilogue_when_fused_and_costs_what_gelu_costs():
    hw = load_hardware("h100_sxm5_80gb")
    times = {}
    for act in ("gelu", "gelu_new"):
        w = load_workload("gpt2_large_train", ["config.num_layers=2", f"config.activation={act}"])
        assert any(isinstance(x.op, Matmul) and act in x.op.epilogue for x in w.graph.nodes)
        times[act] = simulate(hw, w).total_time_s
    assert times["gelu_new"] == pytest.approx(times["gelu"], rel=1e-12)


def test_eager_gelu_new_is_slower_than_one_kernel():
    hw = load_hardware("h100_sxm5_80gb")
    base = ["fusion=none", "config.num_layers=2"]
    one = simulate(hw, load_workload("gpt2_large_train", base + ["config.activation=gelu"])).total_time_s
    eight = simulate(hw, load_workload("gpt2_large_train", base + ["config.activation=gelu_new"])).total_time_s
    assert eight > one


@pytest.mark.parametrize("logits,rows", [("last", 4), ("all", 4 * 1024)])
def test_prompt_logits_sets_the_rows_of_the_lm_head(logits, rows):
    nodes = _nodes("gpt2_large_train", ["mode=inference", "optimizer=null", "batch_size=4", f"prompt_logits={logits}"])
    (head,) = [n for n in nodes if n.name.endswith("head.logits")]
    assert head.op.m == rows and head.op.n == 50257


def test_prompt_logits_is_an_inference_key_of_language_models():
    with pytest.raises(ConfigError, match="prompt_logits"):
        load_workload("gpt2_large_train", ["prompt_logits=all"])
    with pytest.raises(ConfigError, match="prompt_logits"):
        load_workload("resnet50_inference", ["prompt_logits=all"])


def test_bert_classifier_head_has_no_vocabulary_projection():
    nodes = _nodes("bert_large_train", ["mode=inference", "optimizer=null", "batch_size=8", "config.head=classifier"])
    head = [n for n in nodes if n.layer is None and isinstance(n.op, Matmul) and ".head." in f".{n.name}"]
    assert sorted((n.op.m, n.op.n, n.op.k) for n in head) == [(8, 2, 1024), (8, 1024, 1024)]


def _case(case_id: str):
    return next(c for c in load_training_cases() if c.case_id == case_id)


def test_single_gpu_training_rows_are_scored_on_forward_and_backward_without_the_optimizer():
    case = _case("neusight_gpt2_large_train_1024x1_h100")
    scored = _single_gpu_case(case)
    result = simulate(load_hardware("h100_sxm5_80gb"), load_workload("gpt2_large_train", [
        "batch_size=1", "precision=fp32", "fusion=none", "config.activation=gelu_new"]))
    optimizer_s = sum(k.time_s + k.launch_gap_s for k in result.kernels if k.phase == "optimizer")
    assert optimizer_s > 0
    assert scored.simulated == pytest.approx(result.total_time_s - optimizer_s, rel=1e-9)
    assert _time_without_optimizer(result) == pytest.approx(scored.simulated, rel=1e-9)


def test_single_gpu_rows_without_a_stated_configuration_are_skipped_with_the_reason():
    outcome = _single_gpu_case(_case("neusight_neusight_gpt3_xl_inference_2048x2_h100"))
    assert isinstance(outcome, Skipped) and "head count" in outcome.reason


def test_megatron_fusion_launches_megatron_lms_kernels():
    """Megatron-LM before fused attention: the QKV GEMM adds its bias (F.linear), the other GEMMs run
    bare and hand their bias to one fused element-wise kernel (bias-GeLU, bias-dropout-add); attention
    is QK^T with the scale as its alpha, one fused scale-mask-softmax, dropout and AV."""
    items = ["config.num_layers=1", f"batch_size={B}", "precision=fp16"]
    nodes = _nodes("gpt2_large_train", items + ["fusion=megatron"])
    fwd = [(n.name, n.op) for n in nodes if n.phase == "forward" and n.name.startswith("layer0.")]
    assert [name for name, _ in fwd] == [
        "layer0.norm1", "layer0.qkv", "layer0.attention_qk", "layer0.attention_softmax", "layer0.attention_dropout",
        "layer0.attention_av", "layer0.proj", "layer0.proj_bias", "layer0.norm2", "layer0.fc1", "layer0.fc1_bias",
        "layer0.fc2", "layer0.fc2_bias"]
    ops = dict(fwd)
    assert ops["layer0.qkv"].epilogue == ("bias_add",)
    assert ops["layer0.fc1"].epilogue == ops["layer0.proj"].epilogue == ops["layer0.fc2"].epilogue == ()
    assert ops["layer0.fc1_bias"].function == "bias_add+gelu"
    assert ops["layer0.proj_bias"].function == ops["layer0.fc2_bias"].function == "bias_add+dropout+add"
    # the softmax reads the FP16 scores once and writes the probabilities once
    softmax = next(n for n in nodes if n.name == "layer0.attention_softmax")
    scores_bytes = B * H * S * S * 2
    assert (softmax.bytes_read(), softmax.bytes_written()) == (scores_bytes, scores_bytes)

    def moved(fusion):
        return sum(n.bytes_read() + n.bytes_written() for n in _nodes("gpt2_large_train", items + [f"fusion={fusion}"]))

    assert moved("default") < moved("megatron") < moved("none")


LLAMA_EAGER = ["fusion=attention_only", "config.num_layers=1", "config.hidden_size=256", "config.num_heads=4",
               "config.num_kv_heads=2", "config.ffn_hidden_size=512", "config.seq_len=128", "batch_size=2",
               "precision=bf16", "activation_checkpointing=none"]
T, D = 2 * 128, 256


def _by_name(nodes, phase: str, prefix: str):
    return [x for x in nodes if x.phase == phase and x.name.startswith(prefix)]


def test_eager_rmsnorm_is_the_eight_tensor_ops_of_the_reference_code():
    """(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * weight, one kernel per op; the
    bytes of each follow from its dtypes (n = T x D elements, T rows)."""
    from gpusim.workload.layers import saved_bytes

    nodes = _nodes("llama2_7b_train", LLAMA_EAGER)
    norm = _by_name(nodes, "forward", "layer0.norm1_")
    assert [x.name.split("_", 2)[2] for x in norm] == ["cast", "square", "mean", "eps", "rsqrt", "normalize",
                                                       "cast_back", "weight"]
    n = T * D
    reads = [x.op.bytes_read() for x in norm]
    writes = [x.op.bytes_written() for x in norm]
    assert reads == [2 * n, 4 * n, 4 * n, 4 * T, 4 * T, 4 * n + 4 * T, 4 * n, 2 * n + 2 * D]
    assert writes == [4 * n, 4 * n, 4 * T, 4 * T, 4 * T, 4 * n, 2 * n, 2 * n]
    # autograd keeps the FP32 input once, the reciprocal root and the normalized rows: 6n + 4T bytes
    from gpusim.workload.expand import lower_layer
    from gpusim.workload.models import transformer as TR
    from gpusim.workload.precision import policy

    r = TR.resolve("llama", load_workload("llama2_7b_train", LLAMA_EAGER).spec.config)
    (layer,) = [x for x in TR.build_layers(r, policy("bf16"), batch=2, seq_q=128, seq_kv=128, training=True)
                if x.name == "layer0"]

    lowered = [f for f in lower_layer(layer.ops, "attention_only", True) if f.name.startswith("norm1_")]
    assert sum(saved_bytes(f) for f in lowered) == 6 * n + 4 * T
    # the weight's D parameters sit on the weight product, whose gradient is a product and a row sum
    assert [f.num_parameters for f in lowered] == [0] * 7 + [D]
    grads = _by_name(nodes, "backward", "layer0.norm1_7_weight.")
    assert [x.name.rsplit(".", 1)[1] for x in grads] == ["grad", "operand_mul", "operand_grad"]
    assert grads[2].op.num_outputs == D and grads[2].op.bytes_read() == 2 * n


def test_eager_casts_and_means_have_the_gradients_autograd_runs():
    nodes = _nodes("llama2_7b_train", LLAMA_EAGER)
    n = T * D
    accumulate, cast_grad = _by_name(nodes, "backward", "layer0.norm1_0_cast.grad")
    # the FP32 input's two gradients (from the square and the normalizing product) are added first
    assert accumulate.name.endswith(".grad_accumulate") and accumulate.op.function == "add"
    assert accumulate.op.bytes_read() + accumulate.op.bytes_written() == 12 * n
    # the gradient of a BF16 -> FP32 cast is an FP32 -> BF16 cast
    assert (cast_grad.op.dtype, cast_grad.op.input_dtype) == ("bf16", "fp32")
    assert (cast_grad.op.bytes_read(), cast_grad.op.bytes_written()) == (4 * n, 2 * n)
    (mean_grad,) = _by_name(nodes, "backward", "layer0.norm1_2_mean.grad")
    assert mean_grad.op.function == "expand"
    assert (mean_grad.op.bytes_read(), mean_grad.op.bytes_written()) == (4 * T, 4 * n)
    assert not _by_name(nodes, "backward", "layer0.norm1_3_eps.")  # x + eps passes its gradient through
    # PowBackward of x.pow(2): grad * (2 * x.pow(1)), three kernels (the profile's copy, scale, product)
    square = _by_name(nodes, "backward", "layer0.norm1_1_square.")
    assert [x.op.function for x in square] == ["copy", "scale", "mul"]
    assert all(x.op.dtype == "fp32" for x in square)
    # one fused kernel when not eager
    fused = _nodes("llama2_7b_train", [i for i in LLAMA_EAGER if not i.startswith("fusion=")])
    assert not any("square" in x.name or "grad_accumulate" in x.name for x in fused)


def test_eager_gated_mlp_and_rotary_run_their_tensor_ops_and_fused_modes_one_kernel():
    eager = _nodes("llama2_7b_train", LLAMA_EAGER)
    assert [x.op.function for x in _by_name(eager, "forward", "layer0.act_")] == ["silu", "mul"]
    assert [x.op.function for x in _by_name(eager, "forward", "layer0.rotary_")] == [
        "mul_table", "slice_neg", "cat", "mul_table", "add"]
    # rotary works on transposed head views (3 index dimensions), the gated MLP on the two halves of
    # one projection's output (2), forward and backward
    assert {x.op.index_dims for x in _by_name(eager, "forward", "layer0.rotary_")} == {3}
    assert {x.op.index_dims for x in _by_name(eager, "backward", "layer0.rotary_") if x.op.function != "fill"} == {3}
    assert {x.op.index_dims for x in _by_name(eager, "forward", "layer0.act_")} == {2}
    assert {x.op.index_dims for x in _by_name(eager, "backward", "layer0.act_")} == {2}
    fused = _nodes("llama2_7b_train", [i for i in LLAMA_EAGER if not i.startswith("fusion=")])
    forward = {x.name for x in fused if x.phase == "forward"}
    assert {"layer0.norm1", "layer0.rotary", "layer0.act"} <= forward
    assert not any("_cast" in name or "_silu" in name for name in forward)


def test_eager_autograd_concatenates_the_gradients_of_a_split_projection():
    # q, k, v = qkv(x).split(...) and gate, up = fc1(x).chunk(2): SplitBackward copies the parts'
    # gradients into one tensor of the projection's output size before its dgrad and wgrad GEMMs
    eager = _nodes("llama2_7b_train", LLAMA_EAGER)
    for name in ("qkv", "fc1"):
        (gemm,) = _by_name(eager, "forward", f"layer0.{name}")
        backward = _by_name(eager, "backward", f"layer0.{name}.")
        assert [x.name.rsplit(".", 1)[1] for x in backward][:2] == ["split_grad", "dgrad"]
        split = backward[0].op
        assert split.function == "copy" and split.num_elements == gemm.op.batch * gemm.op.m * gemm.op.n
    # the fused modes write the whole gradient from one kernel; the output projection is not split
    fused = _nodes("llama2_7b_train", [i for i in LLAMA_EAGER if not i.startswith("fusion=")])
    assert not any(x.name.endswith(".split_grad") for x in fused)
    assert not any(x.name.startswith("layer0.proj.split") for x in eager)


def test_eager_llama_block_is_slower_than_with_one_kernel_per_op():
    hw = load_hardware("h100_sxm5_80gb")
    base = [i for i in LLAMA_EAGER if not i.startswith("fusion=")]
    eager = simulate(hw, load_workload("llama2_7b_train", base + ["fusion=attention_only"])).total_time_s
    fused = simulate(hw, load_workload("llama2_7b_train", base)).total_time_s
    assert eager > fused


def test_an_eager_norm_keeps_its_tensors_whole_on_every_rank_without_sequence_parallelism():
    """Without sequence parallelism a norm's saved tensors are the whole hidden state on every tensor
    rank, its eager steps' too: the eager norms' extra 4n bytes each (the FP32 input besides the
    16-bit rows) stay whole, so dropping sequence parallelism at TP 2 costs 3 x 4n / 2 more than with
    one-kernel norms (two norms per block and the final one)."""
    base = [i for i in LLAMA_EAGER if not i.startswith("fusion=")] + ["parallelism.tensor=2"]

    def activations(fusion: str, sp: bool) -> float:
        items = base + [f"fusion={fusion}", f"parallelism.sequence_parallel={str(sp).lower()}"]
        return load_workload("llama2_7b_train", items).memory.activations_bytes

    n = T * D
    cost = {f: activations(f, False) - activations(f, True) for f in ("default", "attention_only")}
    assert cost["attention_only"] - cost["default"] == pytest.approx(3 * 4 * n / 2)


def test_eager_grouped_query_attention_copies_keys_and_values_out_to_the_query_heads():
    """Hugging Face's ``repeat_kv`` (and torchtitan's, and ``repeat_interleave``) before PyTorch's
    attention: K and V (2 key heads) are written out at the 4 query heads, reading each source once;
    their gradients sum the repeats. hd = 256 / 4 = 64: 2 x 4 x 128 x 64 = 65,536 elements from
    2 x 2 x 128 x 64 = 32,768, so each copy moves (32,768 + 65,536) x 2 bytes of DRAM."""
    eager = _nodes("llama2_7b_train", LLAMA_EAGER)
    forward = [x.name for x in eager if x.phase == "forward"]
    at = forward.index("layer0.attention")
    assert forward[at - 2:at] == ["layer0.attention_repeat_k", "layer0.attention_repeat_v"]
    for t in ("k", "v"):
        (copy,) = _by_name(eager, "forward", f"layer0.attention_repeat_{t}")
        assert (copy.op.function, copy.op.num_elements, copy.op.broadcast_elements) == ("expand", 65536, 32768)
        assert copy.op.bytes_read() + copy.op.bytes_written() == (32768 + 65536) * 2
        (grad,) = _by_name(eager, "backward", f"layer0.attention_repeat_{t}.")
        assert isinstance(grad.op, Reduction) and (grad.op.num_elements, grad.op.num_outputs) == (65536, 32768)
    # the attention kernel keeps the repeated K and V: each copy adds what it holds beyond its source
    att = next(x.op for x in eager if x.name == "layer0.attention")
    assert [saved_bytes(f) for f in _eager_kv_repeats(FwdOp("attention", att))] == [(65536 - 32768) * 2] * 2
    # no copies where every query head has its own key head, nor where a fused mode takes the
    # grouped heads as they are
    mha = _nodes("llama2_7b_train", [i for i in LLAMA_EAGER if "num_kv_heads" not in i] + ["config.num_kv_heads=4"])
    fused = _nodes("llama2_7b_train", [i for i in LLAMA_EAGER if not i.startswith("fusion=")])
    assert not any("_repeat_" in x.name for x in mha + fused)


def test_eager_rotate_half_negates_one_half_concatenates_and_its_gradient_fills_and_copies_slices():
    """Hugging Face's ``rotate_half``, cat(-x[..., half:], x[..., :half]), as the H200 block profile
    shows it: forward the negation of the half, the concatenation, two products and the sum (5
    kernels); backward two products, and per slice a zero fill of the whole size and a copy of the
    half, the half's negation, and two adds that gather x's three gradients (9 kernels). q and k of
    the test block: 2 x 128 tokens x (4 + 2) heads x 64 = 98,304 elements."""
    n = 2 * 128 * 6 * 64
    eager = _nodes("llama2_7b_train", LLAMA_EAGER)
    forward = [(x.op.function, x.op.num_elements) for x in _by_name(eager, "forward", "layer0.rotary_")]
    assert forward == [("mul_table", n), ("slice_neg", n // 2), ("cat", n), ("mul_table", n), ("add", n)]
    backward = sorted((x.op.function, x.op.num_elements, x.op.index_dims)
                      for x in _by_name(eager, "backward", "layer0.rotary_"))
    assert backward == sorted([("mul_table", n, 3), ("mul_table", n, 3), ("add", n, 3), ("add", n, 3),
                               ("neg", n // 2, 3), ("fill", n, 0), ("fill", n, 0), ("copy", n // 2, 3),
                               ("copy", n // 2, 3)])


def test_the_strided_concatenation_runs_pytorchs_cat_kernel_one_element_per_thread():
    """CatArrayBatchedCopy: per input, 2 CTAs of 512 threads per SM (132 SMs on an H200) striding one
    element at a time, each issuing the counted 117 instructions per element between its trips: it
    takes at least the issue time of n x 117 / 32 warp instructions on 132 SMs x 4 schedulers at
    1.98 GHz (58.7 us for 16.8M elements), longer than PyTorch's index-computing copy of the same
    bytes (56.5 instructions per element at 3 index dimensions)."""
    from gpusim.engine.kernel import simulate_kernel
    from gpusim.engine.machine import machine_of
    from gpusim.mapping import map_op
    from gpusim.workload.ops import Elementwise

    machine = machine_of(load_hardware("h200_sxm_141gb"))
    n = 4096 * 32 * 128
    (cat,) = map_op(Elementwise(num_elements=n, function="cat", dtype="bf16", index_dims=3), machine)
    (copy,) = map_op(Elementwise(num_elements=n, function="copy", dtype="bf16", index_dims=3), machine)
    assert (cat.grid, cat.threads_per_cta, cat.warp_instructions_per_trip) == (2 * 2 * 132, 512, 117.0)
    assert cat.bytes_in_flight_per_cta == 512 * 2
    issue_s = n * 117 / 32 / (machine.num_units * machine.num_schedulers_per_unit * machine.unit_clock_hz)
    assert issue_s == pytest.approx(58.7e-6, rel=1e-3)
    assert simulate_kernel(cat, machine).time_s >= issue_s > simulate_kernel(copy, machine).time_s


def test_complex_rotary_form_casts_up_multiplies_complex_pairs_and_casts_back():
    """Meta's reference code and torchtitan: x.float() viewed as complex pairs times the complex table,
    then cast back: 3 kernels each way (the casts swap in the backward), FP32 in the middle, nothing
    kept; torchtitan's rows are scored with it. The fused modes run either form as one kernel."""
    n = 2 * 128 * 6 * 64
    eager = _nodes("llama2_7b_train", LLAMA_EAGER + ["config.rotary_form=complex"])
    forward = [(x.op.function, x.op.num_elements, x.op.dtype, x.op.input_dtype)
               for x in _by_name(eager, "forward", "layer0.rotary_")]
    assert forward == [("cast", n, "fp32", "bf16"), ("mul_table", n, "fp32", None), ("cast", n, "bf16", "fp32")]
    backward = [(x.op.function, x.op.dtype, x.op.input_dtype) for x in _by_name(eager, "backward", "layer0.rotary_")]
    assert backward == [("cast", "fp32", "bf16"), ("mul_table", "fp32", None), ("cast", "bf16", "fp32")]
    fused = _nodes("llama2_7b_train", [i for i in LLAMA_EAGER if not i.startswith("fusion=")]
                   + ["config.rotary_form=complex"])
    assert [x.op.num_elements for x in fused if x.name == "layer0.rotary"] == [n]
    from gpusim.accuracy_cluster import _training_workload
    case = next(c for c in load_training_cases("measurements/heldout/torchtitan_a100_llama.csv")
                if c.model == "llama2_13b")
    assert "config.rotary_form=complex" in _training_workload(case)[3]
