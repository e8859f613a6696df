"""Memory footprints: model states per parameter, checkpointing, KV cache, sharding, fits."""

from __future__ import annotations

import pytest

from gpusim.workload import MemoryFootprint, fits, load_workload
from gpusim.workload.expand import training_activation_bytes
from gpusim.workload.memory import peak_activation_bytes, stage_chunks, stage_layers
from gpusim.workload.models import transformer as T
from gpusim.workload.precision import policy as precision_policy


def test_mixed_precision_adam_is_16_bytes_per_parameter():
    w = load_workload("gpt2_large_train")
    m = w.memory
    n = w.num_parameters
    assert m.weights_bytes == 2 * n
    assert m.gradients_bytes == 2 * n
    assert m.optimizer_bytes == 12 * n
    assert (m.weights_bytes + m.gradients_bytes + m.optimizer_bytes) / n == 16


def test_fp32_adam_and_sgd_states():
    adam = load_workload("cnn_mnist")  # fp32, adam: 4 + 4 + 8
    n = adam.num_parameters
    assert (adam.memory.weights_bytes, adam.memory.gradients_bytes, adam.memory.optimizer_bytes) == (4 * n, 4 * n, 8 * n)
    sgd = load_workload("mlp_mnist")  # fp32 sgd: no state
    assert sgd.memory.optimizer_bytes == 0


def test_full_checkpointing_uses_less_memory():
    for name in ("gpt3_175b_train", "resnet50_train", "llama3_8b_train"):
        none = load_workload(name, ["activation_checkpointing=none"])
        full = load_workload(name, ["activation_checkpointing=full"])
        assert full.memory.activations_bytes < none.memory.activations_bytes
        assert full.memory.total_bytes < none.memory.total_bytes


def test_selective_sits_between_for_unfused_attention():
    vals = [load_workload("gpt2_large_train", ["fusion=none", f"activation_checkpointing={c}"]).memory.activations_bytes
            for c in ("none", "selective", "full")]
    assert vals[0] > vals[1] > vals[2]


def test_activations_match_korthikanti_formula_without_fusion():
    # per layer s*b*h*(34 + 5*a*s/h) bytes with 16-bit activations (Korthikanti et al. 2022, eq. 1)
    s, b, h, a, layers = 1024, 4, 1280, 20, 36
    w = load_workload("gpt2_large_train", ["fusion=none"])
    per_layer = s * b * h * (34 + 5 * a * s / h)
    body = w.memory.activations_bytes
    assert body == pytest.approx(layers * per_layer, rel=0.1)
    assert body > layers * per_layer  # plus embedding and logits


def test_kv_cache_bytes():
    w = load_workload("llama2_7b_inference")
    # 2 (K and V) x layers x heads x head_dim x tokens x requests x 2 bytes
    assert w.memory.kv_cache_bytes == 2 * 32 * 32 * 128 * (512 + 128) * 8 * 2
    assert w.memory.gradients_bytes == 0 and w.memory.optimizer_bytes == 0
    assert w.memory.weights_bytes == 2 * w.num_parameters


def test_fp8_inference_stores_its_gemm_weights_in_one_byte_and_tensor_parallel_shards():
    # the GEMM weights in one byte; the embedding, the (BF16) output head and the 161 RMSNorm weight
    # vectors in two, all over 4 tensor-parallel ranks
    w = load_workload("llama2_70b_inference")
    bf16_params = 2 * 32000 * 8192 + (2 * 80 + 1) * 8192
    assert w.memory.weights_bytes == pytest.approx((w.num_parameters + bf16_params) / 4)
    gqa_kv = 2 * 80 * 8 * 128 * (1024 + 256) * 16 * 2 / 4
    assert w.memory.kv_cache_bytes == pytest.approx(gqa_kv)


# GPT-2 Large's largest layer: the token and position embeddings, (50,257 + 1,024) x 1,280 parameters
GPT2_LARGE_EMBEDDING = (50257 + 1024) * 1280


@pytest.mark.parametrize("stage,factors,gathered", [(0, (1, 1, 1), 0), (1, (1, 1, 8), 0), (2, (1, 8, 8), 0),
                                                    (3, (8, 8, 8), GPT2_LARGE_EMBEDDING)])
def test_zero_stages_shard_model_states(stage, factors, gathered):
    # ZeRO-3 also holds whole the layer it runs and the one it prefetches (BF16), and the whole
    # gradients of the layer being reduce-scattered and the one being computed (BF16); in line, one
    # of each
    base = load_workload("gpt2_large_train").memory
    for overlap, held in ((True, 2), (False, 1)):
        w = load_workload("gpt2_large_train", ["parallelism.data=8", f"parallelism.zero_stage={stage}",
                                               f"parallelism.overlap_communication={overlap}"]).memory
        assert w.weights_bytes == pytest.approx(base.weights_bytes / factors[0] + held * gathered * 2)
        assert w.gradients_bytes == pytest.approx(base.gradients_bytes / factors[1] + held * gathered * 2)
        assert w.optimizer_bytes == pytest.approx(base.optimizer_bytes / factors[2])


def test_fits():
    m = MemoryFootprint(10.0, 0.0, 0.0, 5.0, 0.0, 1.0)
    assert m.total_bytes == 16
    assert fits(m, 16) == (True, 0.0)
    assert fits(m, 10) == (False, 6.0)
    gpt3 = load_workload("gpt3_175b_train")
    ok, short = fits(gpt3.memory, 80 * 2**30)
    assert not ok and short > 2e12


@pytest.mark.parametrize("schedule, virtual, in_flight", [
    ("1f1b", 1, [4, 3, 2, 1]), ("gpipe", 1, [16] * 4),
    # Megatron-LM's interleaved warm-up: 2 (p - s - 1) + (v - 1) p chunk forwards, one more before the
    # first backward, each through half the stage's layers; the first stage's p + (p - 1) / v
    ("interleaved", 2, [(6 + 4 + 1) / 2, (4 + 4 + 1) / 2, (2 + 4 + 1) / 2, (0 + 4 + 1) / 2])])
def test_each_pipeline_stage_holds_its_schedules_micro_batches_in_flight(schedule, virtual, in_flight):
    # chunks of equal size, 1/v of a micro-batch's activations each
    chunks = [1 / virtual] * virtual
    assert [peak_activation_bytes(schedule, 4, 16, virtual, s, chunks) for s in range(4)] == pytest.approx(in_flight)
    assert peak_activation_bytes(schedule, 4, 2, virtual, 0, chunks) <= 2  # never more than there are
    assert peak_activation_bytes(schedule, 1, 16, 1, 0, [3.0]) == 3.0  # one stage: one micro-batch at a time


def test_a_stage_holds_each_chunk_as_often_as_its_schedule_keeps_it_in_flight():
    # Interleaved, 2 stages x 2 chunks, 4 micro-batches; stage 1's second chunk (with the head) keeps 10
    # bytes per micro-batch, its first 1. Stage 1 runs F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 F2c0 B0c0 ...: at
    # most chunk 0 of two micro-batches and chunk 1 of one, 2 x 1 + 10 = 12 bytes (spreading its
    # 1.5 micro-batches in flight evenly over the chunks would say 1.5 x 11 = 16.5)
    assert peak_activation_bytes("interleaved", 2, 4, 2, 1, [1.0, 10.0]) == 12.0
    # the chunks themselves: virtual stage c p + s is stage s's c-th chunk
    names = [[[layer for layer in chunk] for chunk in stage] for stage in stage_chunks(
        ["embedding"] + [f"layer{i}" for i in range(4)] + ["head"], 2, 2)]
    assert names == [[["embedding", "layer0"], ["layer2"]], [["layer1"], ["layer3", "head"]]]


def test_pipeline_stages_hold_their_own_layers():
    layers = ["embedding"] + [f"layer{i}" for i in range(8)] + ["head"]
    assert stage_layers(layers, 4) == [["embedding", "layer0", "layer1"], ["layer2", "layer3"],
                                       ["layer4", "layer5"], ["layer6", "layer7", "head"]]
    # interleaved: chunk c p + s on stage s
    assert stage_layers(layers, 4, 2) == [["embedding", "layer0", "layer4"], ["layer1", "layer5"],
                                          ["layer2", "layer6"], ["layer3", "layer7", "head"]]
    assert stage_layers(layers, 1) == [layers]


@pytest.mark.parametrize("schedule, fullest, in_flight", [("1f1b", 0, 4), ("gpipe", 3, 16)])
def test_a_pipelines_footprint_is_its_fullest_stage(schedule, fullest, in_flight):
    """GPT-2 Large cut to 8 blocks on 4 stages, 16 micro-batches. Under 1F1B the first stage is
    fullest: the embedding (50257 x 1280 + 1024 x 1280 = 65,639,680 parameters) and two blocks
    (12 h^2 + 13 h = 19,677,440 each) in 16-bit weights, and four micro-batches of their activations.
    Under GPipe every stage holds all 16 micro-batches and the last, with the head's logits, is fullest."""
    w = load_workload("gpt2_large_train", ["config.num_layers=8", "parallelism.pipeline=4", "batch_size=1",
                                           "parallelism.microbatches=16", f"parallelism.schedule={schedule}"])
    assert w.memory.pipeline_stage == fullest
    if fullest == 0:
        assert w.memory.weights_bytes == (65_639_680 + 2 * 19_677_440) * 2
    r = T.resolve(w.spec.model, w.spec.config)
    layers = T.build_layers(r, precision_policy(w.spec.precision), batch=1, seq_q=r.seq_len, seq_kv=r.seq_len,
                            training=True)
    held = stage_layers(layers, 4)[fullest]
    per_microbatch, buffer = training_activation_bytes(held, fusion=w.spec.fusion, checkpointing="none")
    assert buffer == 0
    assert w.memory.activations_bytes == pytest.approx(in_flight * per_microbatch, rel=1e-12)
    # micro-batches given as gradient accumulation hold the same
    if schedule == "1f1b":
        accumulated = load_workload("gpt2_large_train", ["config.num_layers=8", "parallelism.pipeline=4",
                                                         "batch_size=1", "gradient_accumulation_steps=16"])
        assert accumulated.memory.activations_bytes == pytest.approx(w.memory.activations_bytes)


@pytest.mark.parametrize("checkpointing, without_sp, with_sp", [
    ("none", 10 + 24 / 4 + 5 * 20 * 1024 / (1280 * 4), (34 + 5 * 20 * 1024 / 1280) / 4),
    ("selective", 10 + 24 / 4, 34 / 4),
])
def test_tensor_parallel_activations_with_and_without_sequence_parallelism(checkpointing, without_sp, with_sp):
    """Korthikanti et al. 2022, Table 2, per layer in units of s*b*h bytes at tensor 4: without sequence
    parallelism the norms' inputs, the QKV and FC1 inputs and two dropout masks (10) stay whole on each
    rank; with it everything is split. GPT-2 Large: s 1024, b 4, h 1280, a 20, 36 layers; the
    embedding and the head add a few percent."""
    s, b, h, layers = 1024, 4, 1280, 36
    got = {}
    for sp in (False, True):
        w = load_workload("gpt2_large_train", ["fusion=none", "parallelism.tensor=4", f"activation_checkpointing={checkpointing}",
                                               f"parallelism.sequence_parallel={str(sp).lower()}"])
        got[sp] = w.memory.activations_bytes / (layers * s * b * h)
    assert got[False] == pytest.approx(without_sp, rel=0.08) and got[False] > without_sp
    assert got[True] == pytest.approx(with_sp, rel=0.08) and got[True] > with_sp
    # the difference is exactly the 10 units kept whole, less their quarter
    assert got[False] - got[True] == pytest.approx(10 * (1 - 1 / 4), rel=0.02)


def test_expert_parallelism_splits_the_experts_states(tmp_path):
    """4 layers x 8 experts x (1024 x 4096 + 2048 x 1024) expert weights = 201,326,592 parameters (2 bytes
    each in BF16): expert parallelism e keeps 1/e of them per GPU; the dense weights stay whole."""
    path = tmp_path / "moe.yaml"
    path.write_text("schema_version: 1\nname: moe\nmodel: llama\nconfig: {num_layers: 4, hidden_size: 1024, "
                    "num_heads: 16, num_kv_heads: 8, ffn_hidden_size: 2048, num_experts: 8, top_k: 2, seq_len: 1024, "
                    "vocab_size: 32000}\nmode: train\nbatch_size: 1\nprecision: bf16\noptimizer: adamw\n")
    expert_bytes = 4 * 8 * (1024 * 4096 + 2048 * 1024) * 2
    weights = {e: load_workload(path, ["parallelism.data=8", f"parallelism.expert={e}"]).memory.weights_bytes
               for e in (1, 2, 8)}
    assert weights[1] - weights[2] == pytest.approx(expert_bytes / 2)
    assert weights[1] - weights[8] == pytest.approx(expert_bytes * 7 / 8)
    # ZeRO-1 shards the experts' optimizer states over the 8 / e GPUs that hold the same experts: 1/8
    # of them per GPU whatever e is, as without expert parallelism
    optim = {e: load_workload(path, ["parallelism.data=8", f"parallelism.expert={e}", "parallelism.zero_stage=1"]
                              ).memory.optimizer_bytes for e in (1, 2, 8)}
    assert optim[1] == pytest.approx(optim[2]) and optim[1] == pytest.approx(optim[8])
    unsharded = load_workload(path, ["parallelism.data=8"]).memory.optimizer_bytes
    assert unsharded == pytest.approx(8 * optim[1])


def test_selective_checkpointing_that_saves_almost_nothing_is_flagged():
    fused = load_workload("gpt2_large_train", ["activation_checkpointing=selective"])
    assert any("selective checkpointing saves" in n and "still recomputes the attention core" in n
               for n in fused.notes)
    # unfused attention keeps its score and probability matrices: selective checkpointing earns its keep
    unfused = load_workload("gpt2_large_train", ["activation_checkpointing=selective", "fusion=none"])
    assert unfused.notes == ()
    assert load_workload("gpt2_large_train", ["activation_checkpointing=none"]).notes == ()


def test_a_pipeline_stage_recomputes_one_layer_at_a_time():
    """Full checkpointing on the first of 4 stages under 1F1B: 4 micro-batches keep each checkpointed
    layer's input, and one layer's full activations are rebuilt at a time, for whichever micro-batch
    runs its backward: the recompute buffer counts once, not once per micro-batch."""
    items = ["config.num_layers=8", "config.vocab_size=1024", "parallelism.pipeline=4", "batch_size=1",
             "parallelism.microbatches=16", "activation_checkpointing=full"]  # (a small head: stage 0 is fullest)
    w = load_workload("llama2_7b_train", items)
    r = T.resolve(w.spec.model, w.spec.config)
    layers = T.build_layers(r, precision_policy(w.spec.precision), batch=1, seq_q=r.seq_len, seq_kv=r.seq_len,
                            training=True)
    kept, buffer = training_activation_bytes(stage_layers(layers, 4)[0], fusion=w.spec.fusion, checkpointing="full")
    assert buffer > kept > 0  # a block's activations outweigh its input and the embedding's
    assert w.memory.pipeline_stage == 0
    assert w.memory.activations_bytes == pytest.approx(4 * kept + buffer, rel=1e-12)


def test_a_pipelined_head_owns_its_tied_projection():
    w = load_workload("gpt2_large_train", ["config.num_layers=2"])
    r = T.resolve(w.spec.model, w.spec.config)
    layers = T.build_layers(r, precision_policy(w.spec.precision), batch=1, seq_q=8, seq_kv=8, training=True)
    assert layers[-1].num_parameters() == 2_560  # the final norm; the projection is the embedding's
    assert T.pipelined_head(r, layers[-1]).num_parameters() == 2_560 + 50_257 * 1_280
    spec = load_workload("llama2_7b_train").spec
    llama = T.resolve(spec.model, spec.config)  # untied: unchanged
    head = T.build_layers(llama, precision_policy("bf16"), batch=1, seq_q=8, seq_kv=8, training=True)[-1]
    assert T.pipelined_head(llama, head) is head


def test_the_last_stage_holds_a_copy_of_tied_embeddings():
    """GPT-2 ties its output projection to the word embedding; under a pipeline the last stage keeps
    a copy (Megatron-LM, DeepSpeed): 2 blocks of 19,677,440 parameters, the final norm's 2,560 and
    50,257 x 1,280 = 64,328,960 embedding weights, in 16-bit weights, 16-bit gradients and 12 bytes of
    optimizer state each."""
    w = load_workload("gpt2_large_train", ["config.num_layers=8", "parallelism.pipeline=4", "batch_size=1"])
    assert w.memory.pipeline_stage == 3
    params = 2 * 19_677_440 + 2_560 + 50_257 * 1_280
    assert (w.memory.weights_bytes, w.memory.gradients_bytes, w.memory.optimizer_bytes) == (2 * params, 2 * params,
                                                                                             12 * params)


def test_a_pipelined_servers_footprint_is_its_fullest_stage():
    """Llama-2 7B served on 4 stages: the last holds 8 blocks of 202,383,360 parameters and the head
    (the 32,000 x 4,096 output projection and the final norm's 4,096 weights), 4,096 parameters more
    than the first stage's 8 blocks and embedding; 16-bit weights, a quarter of the KV cache."""
    whole = load_workload("llama2_7b_inference").memory
    staged = load_workload("llama2_7b_inference", ["parallelism.pipeline=4"]).memory
    assert staged.pipeline_stage == 3
    assert staged.weights_bytes == (8 * 202_383_360 + 32_000 * 4_096 + 4_096) * 2
    assert staged.kv_cache_bytes == whole.kv_cache_bytes / 4
    assert staged.activations_bytes == whole.activations_bytes  # the head's logits, on the last stage


def test_in_flight_micro_batches_follow_the_schedules_closed_forms():
    """With chunks of equal size a stage's peak is the closed form of its schedule: GPipe every
    micro-batch, 1F1B's stage s min(p - s, m), the interleaved schedule's 2 (p - s - 1) + (v - 1) p + 1
    chunk forwards (Megatron-LM's warm-up and one more), 1/v of a micro-batch each."""
    def closed_form(schedule, p, m, v, s):
        if schedule == "gpipe":
            return m
        if schedule == "interleaved":
            return min(m * v, 2 * (p - s - 1) + (v - 1) * p + 1) / v
        return min(p - s, m)

    for schedule, chunks in (("1f1b", (1,)), ("gpipe", (1,)), ("interleaved", (2, 3))):
        for p in range(2, 6):
            for v in chunks:
                for m in range(p, 3 * p + 1, p):
                    for s in range(p):
                        assert peak_activation_bytes(schedule, p, m, v, s, [1 / v] * v) == pytest.approx(
                            closed_form(schedule, p, m, v, s)), (schedule, p, v, m, s)


def test_each_pipeline_stage_counts_the_workspace_of_its_own_kernels():
    # Llama 3 8B (sequence 8192, micro-batch 1, BF16) on 4 stages: each stage's workspace is the
    # library's 32 MiB plus the largest output its own kernels write. The first stage's is the
    # embedding's dense gradient table (128,256 x 4,096 x 2 B), the last's the head's logits
    # (8,192 x 128,256 x 2 B), the middle stages' the MLP's fused gate and up projections
    # (8,192 x 2 x 14,336 x 2 B). The footprint reported is the fullest stage's.
    from gpusim.workload.memory import LIBRARY_WORKSPACE_BYTES

    w = load_workload("llama3_8b_train", ["parallelism.pipeline=4", "parallelism.microbatches=8"])
    stages = w.memory_by_stage
    assert [m.pipeline_stage for m in stages] == [0, 1, 2, 3]
    block = 8192 * 2 * 14336 * 2
    assert [m.workspace_bytes - LIBRARY_WORKSPACE_BYTES for m in stages] == [
        128256 * 4096 * 2, block, block, 8192 * 128256 * 2]
    assert w.memory == max(stages, key=lambda m: m.total_bytes)
    assert w.summary()["memory_by_stage"][1]["workspace_bytes"] == LIBRARY_WORKSPACE_BYTES + block
    # without a pipeline there are no stages to list
    assert load_workload("llama3_8b_train").memory_by_stage == ()


def test_context_parallelism_splits_the_workspace_of_sequence_sized_outputs():
    # Llama 3 8B at sequence 32,768: each of c context-parallel ranks writes 1/c of the logits
    # (32,768 x 128,256 x 2 B), but the embedding's gradient table (128,256 x 4,096 x 2 B) whole
    from gpusim.workload.memory import LIBRARY_WORKSPACE_BYTES

    logits, table = 32768 * 128256 * 2, 128256 * 4096 * 2
    for context, largest in ((2, logits / 2), (16, table)):
        w = load_workload("llama3_8b_train", ["config.seq_len=32768", f"parallelism.context={context}"])
        assert w.memory.workspace_bytes == LIBRARY_WORKSPACE_BYTES + largest
