"""FP8 linear layers pay their Transformer Engine quantization kernels (te.Linear), derived by hand."""

import dataclasses

import pytest

from gpusim.workload import load_workload
from gpusim.workload.expand import forward_nodes, training_nodes
from gpusim.workload.layers import FwdOp, Layer
from gpusim.workload.ops import Matmul
from gpusim.workload.precision import policy

M, K, N = 4096, 1024, 3072  # tokens x in-features -> out-features


def _layer(dtype: str) -> Layer:
    gemm = Matmul(m=M, n=N, k=K, dtype=dtype)
    return Layer("fc", 0, (FwdOp("proj", gemm, num_parameters=K * N, weight=True),), input_bytes=2.0 * M * K)


def _by_name(nodes):
    return {n.name: n.op for n in nodes}


def test_training_casts_input_weight_and_output_gradient():
    nodes = _by_name(training_nodes([_layer("fp8")], fusion="default", checkpointing="none", micro_batches=1,
                                    optimizer="adamw", policy=policy("fp8")))
    x, w, g = nodes["fc.proj_fp8_input"], nodes["fc.proj_fp8_weight"], nodes["fc.proj.fp8_grad"]
    # each reads BF16 (2 B) and writes FP8 twice (row-major and transposed, 1 B each)
    for op, elements in ((x, M * K), (w, K * N), (g, M * N)):
        assert op.num_elements == elements
        assert op.bytes_read() == 2.0 * elements
        assert op.bytes_written() == 2.0 * elements
    order = list(nodes)
    assert order.index("fc.proj_fp8_input") < order.index("fc.proj_fp8_weight") < order.index("fc.proj")
    assert order.index("fc.proj.fp8_grad") < order.index("fc.proj.dgrad") < order.index("fc.proj.wgrad")


def test_inference_casts_only_the_input_once():
    nodes = _by_name(forward_nodes([_layer("fp8")], fusion="default", phase="forward"))
    assert set(nodes) == {"fc.proj_fp8_input", "fc.proj"}
    cast = nodes["fc.proj_fp8_input"]
    assert cast.bytes_read() == 2.0 * M * K and cast.bytes_written() == 1.0 * M * K


def test_bf16_layers_have_no_casts():
    nodes = training_nodes([_layer("bf16")], fusion="default", checkpointing="none", micro_batches=1,
                           optimizer="adamw", policy=policy("bf16"))
    assert not [n for n in nodes if "fp8" in n.name]


def test_an_fp8_kv_cache_is_read_and_written_in_one_byte_per_value():
    # Llama-2-7B in FP16 (32 heads of 128, no GQA), batch 2, 100-token prompt, 10 decode steps in one
    # bucket at their mean context, 100 + 5.5 + 1 keys rounded to 106. A decode step's attention reads Q
    # (FP16) and K, V from the cache: 2 x 32 x 106 x 128 values each, 1 byte in FP8, 2 in FP16. The
    # prompt's attention reads the K, V its projection just wrote (FP16 either way). Appending a
    # token's K and V reads them in FP16 and writes them in the cache's dtype.
    from gpusim.workload import load_workload

    def ops(kv):
        items = ["batch_size=2", "prompt_len=100", "generate_len=10", "decode_buckets=1"]
        wl = load_workload("llama2_7b_inference", items + ([f"kv_cache_dtype={kv}"] if kv else []))
        first = {}
        for n in wl.graph.nodes:
            first.setdefault((n.phase, n.name.split(".")[-1]), n.op)
        return first

    bf16, fp8 = ops(None), ops("fp8")
    q_bytes = 2 * 32 * 1 * 128 * 2
    kv_values = 2 * 32 * 106 * 128
    assert bf16[("decode", "attention")].bytes_read() == q_bytes + 2 * kv_values * 2
    assert fp8[("decode", "attention")].bytes_read() == q_bytes + 2 * kv_values * 1
    assert fp8[("prefill", "attention")].bytes_read() == bf16[("prefill", "attention")].bytes_read()
    tokens = 2 * 1
    assert bf16[("decode", "kv_append")].num_bytes == 2 * tokens * 32 * 128 * 2
    assert fp8[("decode", "kv_append")].num_bytes == tokens * 32 * 128 * (2 + 1)


def test_any_storage_format_can_hold_the_kv_cache():
    # an INT8 or FP4 cache is read at its own width (1 and 0.5 bytes per value); no format is refused
    from gpusim.workload import load_workload

    def decode_kv_read(kv):
        wl = load_workload("llama2_7b_inference", ["batch_size=1", "prompt_len=8", "generate_len=2",
                                                   "decode_buckets=1", f"kv_cache_dtype={kv}"])
        att = next(n.op for n in wl.graph.nodes if n.phase == "decode" and n.name.endswith("attention"))
        return att.bytes_read() - att._q_bytes()

    assert decode_kv_read("int8") == decode_kv_read("fp8") == 2 * decode_kv_read("fp4")


def test_gradient_gemms_split_their_accumulator_and_the_forward_one_does_not():
    # Transformer Engine: _2X_ACC_FPROP False, _2X_ACC_DGRAD and _2X_ACC_WGRAD True
    nodes = _by_name(training_nodes([_layer("fp8")], fusion="default", checkpointing="none", micro_batches=1,
                                    optimizer="adamw", policy=policy("fp8")))
    assert not nodes["fc.proj"].split_accumulator
    assert nodes["fc.proj.dgrad"].split_accumulator and nodes["fc.proj.wgrad"].split_accumulator
    bf16 = _by_name(training_nodes([_layer("bf16")], fusion="default", checkpointing="none", micro_batches=1,
                                   optimizer="adamw", policy=policy("bf16")))
    assert not any(getattr(op, "split_accumulator", False) for op in bf16.values())


def test_only_fp8_products_split_their_accumulator():
    import pytest

    with pytest.raises(ValueError, match="split_accumulator"):
        Matmul(m=M, n=N, k=K, dtype="bf16", split_accumulator=True)


def test_expert_gemms_split_and_activation_products_do_not():
    # an MoE layer's expert GEMMs are FP8 weight GEMMs (te.GroupedLinear): both gradients split; a
    # product of two activations has no FP8 weight and its second-operand gradient (dgrad_b) does not
    experts = Matmul(m=512, n=N, k=K, batch=8, b_batch=8, dtype="fp8")
    product = Matmul(m=M, n=N, k=K, dtype="fp8")
    layer = Layer("moe", 0, (FwdOp("experts", experts, num_parameters=8 * K * N, weight=True, expert=True),
                             FwdOp("product", product)), input_bytes=2.0 * M * K)
    nodes = _by_name(training_nodes([layer], fusion="default", checkpointing="none", micro_batches=1,
                                    optimizer="adamw", policy=policy("fp8")))
    assert nodes["moe.experts.dgrad"].split_accumulator and nodes["moe.experts.wgrad"].split_accumulator
    assert nodes["moe.experts.wgrad"].batch == 8
    assert not nodes["moe.product.dgrad"].split_accumulator and not nodes["moe.product.dgrad_b"].split_accumulator


def test_weights_cast_once_per_step_when_the_copies_are_kept():
    # Megatron-LM/NeMo pass Transformer Engine is_first_microbatch: the weight's FP8 copies are made in
    # the first of 4 micro-batches and kept; the input and gradient casts run in every micro-batch, and
    # a recomputed forward does not cast the weight again
    def nodes(per_step: bool, checkpointing: str = "none"):
        layer = dataclasses.replace(_layer("fp8"), checkpointable=True)
        return {n.name: n for n in training_nodes([layer], fusion="default", checkpointing=checkpointing,
                                                  micro_batches=4, optimizer="adamw", policy=policy("fp8"),
                                                  fp8_weights_per_step=per_step)}

    kept, every = nodes(True), nodes(False)
    assert kept["fc.proj_fp8_weight"].repeat == 1 and every["fc.proj_fp8_weight"].repeat == 4
    assert kept["fc.proj_fp8_input"].repeat == kept["fc.proj.fp8_grad"].repeat == 4
    assert kept["fc.proj_fp8_weight"].once_per_step and not every["fc.proj_fp8_weight"].once_per_step
    assert [n for n in kept.values() if n.once_per_step] == [kept["fc.proj_fp8_weight"]]
    assert not any(n.once_per_step for n in every.values())
    recomputed = nodes(True, "full")
    assert "fc.proj_fp8_input.recompute" in recomputed and "fc.proj_fp8_weight.recompute" not in recomputed
    assert "fc.proj_fp8_weight.recompute" in nodes(False, "full")


def test_fp8_weight_cast_auto_is_per_microbatch_only_under_zero3():
    # FSDP/ZeRO-3 gathers the weights again for every micro-batch, so their casts run again too
    def spec(*items):
        return load_workload("llama2_7b_train", ["precision=fp8", *items]).spec

    assert spec().fp8_weights_per_step
    assert not spec("parallelism.zero_stage=3", "parallelism.data=8").fp8_weights_per_step
    assert spec("parallelism.zero_stage=3").fp8_weights_per_step  # one data-parallel GPU: nothing to gather
    assert spec("parallelism.zero_stage=3", "parallelism.data=8", "fp8_weight_cast=per_step").fp8_weights_per_step
    assert not spec("fp8_weight_cast=per_microbatch").fp8_weights_per_step


def test_a_step_saves_the_repeated_weight_casts_of_its_later_micro_batches():
    # 4 micro-batches on one GPU: casting the weights once saves 3 x the casts' time, nothing else
    from gpusim.config.library import load_hardware
    from gpusim.engine.simulate import simulate

    h100 = load_hardware("h100_sxm5_80gb")
    items = ["precision=fp8", "config.num_layers=2", "batch_size=1", "config.seq_len=1024",
             "gradient_accumulation_steps=4"]
    kept = simulate(h100, load_workload("llama2_7b_train", items + ["fp8_weight_cast=per_step"]))
    every = simulate(h100, load_workload("llama2_7b_train", items + ["fp8_weight_cast=per_microbatch"]))
    casts = [k for k in kept.kernels if k.node.endswith("_fp8_weight")]
    assert len(casts) == 2 * 4  # two layers, four projections each (QKV, output, gate-and-up, down)
    assert all(k.repeat == 1 for k in casts)
    one_pass_s = sum(k.time_s + k.launch_gap_s for k in casts)  # each cast with its launch
    assert every.total_time_s - kept.total_time_s == pytest.approx(3 * one_pass_s, rel=0.02)


def test_the_cluster_engine_casts_the_weights_in_the_first_micro_batch_only():
    # 8 data-parallel GPUs save what one GPU saves (3 of 4 micro-batches' casts); 2 pipeline stages of
    # one layer each save half of it on each stage, side by side
    from gpusim.config.library import load_hardware
    from gpusim.engine.cluster import simulate_system
    from gpusim.engine.simulate import simulate

    items = ["precision=fp8", "config.num_layers=2", "batch_size=1", "config.seq_len=1024",
             "gradient_accumulation_steps=4"]

    def saved_s(layout: list[str] | None) -> float:
        times = []
        for mode in ("per_step", "per_microbatch"):
            w = load_workload("llama2_7b_train", items + [f"fp8_weight_cast={mode}"] + (layout or []))
            times.append(simulate(load_hardware("h100_sxm5_80gb"), w).total_time_s if layout is None
                         else simulate_system(load_hardware("dgx_h100"), w).step_time_s)
        return times[1] - times[0]

    one_gpu = saved_s(None)
    assert one_gpu > 0
    # the casts stay in the step's reported kernels, once each
    w = load_workload("llama2_7b_train", items + ["fp8_weight_cast=per_step", "parallelism.data=8"])
    casts = [k for k in simulate_system(load_hardware("dgx_h100"), w).kernels if k.node.endswith("_fp8_weight")]
    assert len(casts) == 4 and all(k.repeat == 1 for k in casts)  # the block's four projections
    assert saved_s(["parallelism.data=8"]) == pytest.approx(one_gpu, rel=0.01)
    assert saved_s(["parallelism.data=4", "parallelism.pipeline=2"]) == pytest.approx(one_gpu / 2, rel=0.02)


def test_the_fp8_copies_kept_for_a_step_are_counted_in_the_weights():
    # 2 layers of hidden 256, FFN 512, 4 heads (no grouped queries): each layer's FP8 GEMM weights are
    # QKV 256 x 768, output 256 x 256, gate-and-up 256 x 1024, down 512 x 256 = 655,360; kept as an FP8
    # copy and its transpose, 2 bytes each, halved by tensor parallelism 2; the head stays BF16
    config = ["config.num_layers=2", "config.hidden_size=256", "config.ffn_hidden_size=512", "config.num_heads=4",
              "config.num_kv_heads=4", "config.vocab_size=1000", "precision=fp8", "parallelism.tensor=2"]

    def weights(cast: str) -> float:
        return load_workload("llama2_7b_train", config + [f"fp8_weight_cast={cast}"]).memory.weights_bytes

    assert weights("per_step") - weights("per_microbatch") == pytest.approx(2 * 2 * 655_360 / 2)
    bf16 = load_workload("llama2_7b_train", [c for c in config if c != "precision=fp8"] + ["precision=bf16"])
    assert weights("per_microbatch") == pytest.approx(bf16.memory.weights_bytes)
