"""Simulated vs measured for multi-GPU cases: collectives (communication.csv) and end-to-end training /
inference with a parallel layout (training.csv).

Collectives are timed by :mod:`gpusim.engine.collectives` on the row's system and scored on nccl-tests
bus bandwidth (copies on their pair bandwidth). The all-reduce rows come from ``all_reduce_bench.py``,
which times every call from the host (a ``torch.distributed`` call followed by a device synchronise), so
each simulated call pays the GPU's eager host launch cost and its device-side launch
(``launch.kernel_launch_s + launch.graph_kernel_launch_s``) on top of the collective itself.

Training rows whose model, layout and batch are stated are built as model workloads and run through
:func:`gpusim.engine.cluster.simulate_system`; inference rows (decode, first-token latency, serving
throughput) as inference workloads on their GPU or, tensor parallel, on its system, with the launch mode
their runtime uses; the rest are listed as skipped with the reason.
"""

from __future__ import annotations

import math
import re
from typing import Iterable, Sequence

from gpusim.accuracy import CaseResult, Skipped
from gpusim.config.library import load_hardware
from gpusim.engine.collectives import busbw, fabric_of, plan_collective


MPT_CONFIGS = {  # mosaicml/llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml (d_model, n_layers, n_heads)
    "mpt_1b": (2048, 24, 16), "mpt_3b": (2560, 32, 20), "mpt_7b": (4096, 32, 32), "mpt_13b": (5120, 40, 40),
    "mpt_30b": (7168, 48, 64), "mpt_70b": (8192, 80, 64),
}
MPT_VOCAB = 50368
LLAMA_GPT_MODELS = {  # model -> (a built-in workload of the family, its tokenizer's vocabulary, its config)
    "llama2_7b": ("llama2_7b_train", 32000, ()), "gpt3_175b": ("gpt3_175b_train", 50257, ()),
    "gpt3_5b": ("gpt3_175b_train", 50257, ("num_layers=24", "hidden_size=4096", "num_heads=32")),
    "gpt3_20b": ("gpt3_175b_train", 50257, ("num_layers=44", "hidden_size=6144", "num_heads=48")),
    "llama2_13b": ("llama2_7b_train", 32000, ("num_layers=40", "hidden_size=5120", "num_heads=40",
                                              "ffn_hidden_size=13824")),
    "llama2_70b": ("llama2_7b_train", 32000, ("num_layers=80", "hidden_size=8192", "num_heads=64", "num_kv_heads=8",
                                              "ffn_hidden_size=28672")),
    # Llama 3 (meta-llama/Meta-Llama-3-8B and -70B config.json): 128,256-token vocabulary
    "llama3_8b": ("llama2_7b_train", 128256, ("num_kv_heads=8", "ffn_hidden_size=14336")),
    "llama3_70b": ("llama2_7b_train", 128256, ("num_layers=80", "hidden_size=8192", "num_heads=64", "num_kv_heads=8",
                                               "ffn_hidden_size=28672")),
}
MEGATRON_VOCAB_DIVISOR = 128
"""Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by (default 128, NeMo's GPT
configs too) times the tensor-parallel size (megatron/training/tokenizer: _vocab_size_with_padding)."""
MEGATRON_A100_GPT = {  # model -> (layers, hidden, heads): Narayanan et al. 2021, Tables 1-2; Korthikanti et al.
    # 2022, Table 3; MT-NLG 530B (Smith et al. 2022) is Narayanan's 529.6B
    "gpt_1.7b": (24, 2304, 24), "gpt_3.6b": (30, 3072, 32), "gpt_7.5b": (36, 4096, 32), "gpt_18.4b": (40, 6144, 48),
    "gpt_22b": (48, 6144, 64), "gpt_39.1b": (48, 8192, 64), "gpt_76.1b": (60, 10240, 80),
    "gpt_145.6b": (80, 12288, 96), "gpt_174.6b": (96, 12288, 96), "gpt_310.1b": (96, 16384, 128),
    "gpt_529.6b": (105, 20480, 128), "gpt_1008b": (128, 25600, 160),
}
MEGATRON_A100_VOCAB = 51200
MEGATRON_A100_PAPERS = ("narayanan2021_", "korthikanti2022_", "smith2022_")
"""Case-id prefixes of the Megatron-LM runs on Selene (DGX A100) these papers report (MT-NLG's with
DeepSpeed's pipeline engine)."""
GPT2_LARGE = dict(num_layers=36, hidden_size=1280, num_heads=20, seq_len=1024, vocab_size=50257, activation="gelu_new")
# The single-GPU NeuSight rows: Hugging Face models built from their configs with eager attention,
# timed with CUDA events around the forward call and around loss.backward() (no optimizer step);
# training rows run the pre-training heads in train mode (dropout on), inference rows in eval mode
# (BERT with its sequence-classification head, causal LMs computing logits for every token).
NEUSIGHT_MODELS = {  # model column -> (a built-in workload of the same architecture, its config)
    "bert_large": ("bert_large_train", dict(num_layers=24, hidden_size=1024, num_heads=16, vocab_size=30522)),
    "gpt2_large": ("gpt2_large_train", GPT2_LARGE),
    "opt_1.3b": ("gpt2_large_train", dict(num_layers=24, hidden_size=2048, num_heads=32, vocab_size=50272, activation="relu")),
}


def run_communication(cases: Iterable, include_excluded: bool = False) -> tuple[list[CaseResult], list[Skipped]]:
    results, skipped = [], []
    fabrics = {}
    for case in cases:
        if case.excluded and not include_excluded:
            skipped.append(Skipped(case.case_id, case.system, "excluded by the dataset"))
            continue
        if case.system not in fabrics:
            hardware = load_hardware(case.system)
            launch = hardware.gpu.launch
            fabrics[case.system] = (fabric_of(hardware), launch.kernel_launch_s + launch.graph_kernel_launch_s)
        fabric, harness_s = fabrics[case.system]
        if case.collective.startswith("p2p_"):
            plan = plan_collective("send_recv", 2**30, 2, fabric, protocol="Simple")
            rate = plan.num_bytes / plan.transfer_s
            if case.collective == "p2p_bidirectional":
                rate *= 2  # full duplex: both directions at once
            results.append(CaseResult(case.case_id, case.system, case.collective, "bytes_per_s",
                                      case.measured_value, rate, None, case.source))
            continue
        algorithm = "ring" if case.nvls is False else None
        plan = plan_collective(case.collective, float(case.num_bytes), case.num_gpus, fabric, algorithm=algorithm)
        seconds = plan.time_s + harness_s
        results.append(CaseResult(case.case_id, case.system, case.collective, "busbw_bytes_per_s",
                                  case.measured_value, busbw(case.collective, case.num_bytes, case.num_gpus, seconds),
                                  None, case.source, f"{plan.algorithm}/{plan.protocol}"))
    return results, skipped


def _system_of(case) -> str:
    """The built-in system a multi-GPU row ran on: its stated system, with the 40 GB A100 rows on the
    DGX A100's 320 GB version (8x A100 SXM4 40 GB), the other A100 and H100 rows on a DGX."""
    if case.gpu == "a100_sxm4_40gb":
        return "dgx_a100_320gb"
    return case.system or ("dgx_a100" if case.gpu.startswith("a100") else "dgx_h100")


def _micro_batch_items(stages: int, virtual_stages: int, micro_batches: int) -> list[str]:
    """Workload overrides for ``micro_batches`` per step: a pipeline's micro-batches (1F1B, or the
    interleaved schedule where each stage holds several chunks), else gradient accumulation."""
    if stages == 1:
        return [f"gradient_accumulation_steps={micro_batches}"]
    return [f"parallelism.microbatches={micro_batches}",
            f"parallelism.schedule={'interleaved' if virtual_stages > 1 else '1f1b'}",
            f"parallelism.virtual_stages={virtual_stages}"]


def _training_workload(case):
    """(system, hardware overrides, workload name, overrides) for a case gpusim can build, else a reason."""
    par = (case.parallelism or "").upper()
    n = case.num_gpus
    if case.model in MPT_CONFIGS and case.mode == "train" and par == "FSDP FULL_SHARD" and n:
        d, layers, heads = MPT_CONFIGS[case.model]
        system = _system_of(case)
        hw_over = [("num_nodes", max(1, n // 8))]
        precision = "fp8" if "fp8" in (case.precision or "") else "bf16"
        items = [f"config.num_layers={layers}", f"config.hidden_size={d}", f"config.num_heads={heads}",
                 f"config.seq_len={case.seq_len}", f"config.vocab_size={MPT_VOCAB}", "config.bias=false",
                 "config.dropout=0", f"batch_size={case.micro_batch_size}", f"precision={precision}",
                 # ALiBi: no position-embedding table; the bias is added inside the attention kernel
                 "config.position_embedding=alibi",
                 f"gradient_accumulation_steps={case.grad_accum_steps}", f"parallelism.data={n}",
                 "parallelism.zero_stage=3",
                 f"activation_checkpointing={case.activation_checkpointing or 'none'}",
                 # the MPT yamls' attn_impl: triton, llm-foundry's flash_attn_triton.py (2022 Triton
                 # FlashAttention, num_stages=1), in the BF16 and the FP8 runs alike; the rest of the
                 # block is eager PyTorch (no torch.compile): nn.GELU and the residual adds run as
                 # kernels of their own, not in the GEMMs' epilogues
                 "config.attention_kernel=fused_unpipelined", "fusion=attention_only"]
        if (case.precision or "").startswith("amp_"):
            # Composer's FSDP mixed precision 'DEFAULT' of that time (the README's 'MP Mode' column):
            # parameters all-gathered in FP32 (cast to 16 bits by autocast), gradients reduced in
            # the autocast precision; 'PURE' (the plain bf16 rows) keeps everything in BF16
            items.append("parallelism.param_gather_dtype=fp32")
        # The tables predate the move to PyTorch 2.0 (the README's "TODO: Update tables with torch
        # 2.0"): PyTorch 1.13 ships CUDA <= 11.8, whose libraries have no Hopper wgmma kernels. The FP8
        # rows ran Transformer Engine, whose 2023 releases required CUDA 11.8 (its installation guide,
        # releases 0.1-0.9): their BF16 products ran the same warp-synchronous kernels, and their FP8
        # GEMMs the native ones (a stack that runs FP8 on Hopper has those; Machine.with_warp_mma_libraries)
        items.append("tensor_instructions=warp_mma")
        # and Transformer Engine's gradient GEMMs split their accumulator, which that cuBLASLt promoted
        # in series with the products
        items.append("fp8_promotion=in_series")
        return system, hw_over, "gpt2_large_train", items
    if case.case_id.startswith("neusight_gpt2_large_train_1024_gbs") and n == 4:
        system = _system_of(case)
        kind = par[:2].lower()
        batch = case.global_batch_size
        # Hugging Face GPT-2 in eager PyTorch 2.1: every op its own kernel, attention unfused
        items = [f"config.{k}={v}" for k, v in GPT2_LARGE.items()] + ["precision=fp32", "fusion=none"]
        if kind == "dp":
            items += [f"batch_size={batch // 4}", "parallelism.data=4"]
        elif kind == "tp":
            # PyTorch 2.1's tensor parallelism: the input gradient's all-reduce is an autograd step of
            # its own after the layer's backward, none beside the weight gradient
            items += [f"batch_size={batch}", "parallelism.tensor=4", "parallelism.tp_wgrad_overlap=false"]
        else:
            # the NeuSight pipeline runs the global batch as one micro-batch through 4 stages (GPipe)
            items += [f"batch_size={batch}", "parallelism.pipeline=4", "parallelism.schedule=gpipe"]
        return system, [], "gpt2_large_train", items
    layout = dict(re.findall(r"\b(TP|PP|VP|CP)(\d+)\b", par))
    if case.case_id.startswith(MEGATRON_A100_PAPERS) and case.model in MEGATRON_A100_GPT and n and case.seq_len \
            and case.global_batch_size and case.micro_batch_size and (par == "ZERO-3" or "TP" in layout):
        # Megatron-LM of 2021-2022 on Selene (DGX A100): mixed precision, its hand-fused kernels
        # around cuBLAS GEMMs, no distributed optimizer; "SP" adds sequence parallelism, "VPn" the
        # interleaved schedule; ZeRO-3 rows shard everything over data parallelism alone. Its default
        # DDP (``--DDP-impl local``) all-reduced the gradients after the pipeline's last backward
        # (``train_step``: ``allreduce_gradients()`` after ``forward_backward_func``), and DeepSpeed's
        # pipeline engine (MT-NLG) reduces them after the schedule too: no overlap with the backward
        layers, hidden, heads = MEGATRON_A100_GPT[case.model]
        t, p = (1, 1) if par == "ZERO-3" else (int(layout["TP"]), int(layout.get("PP", 1)))
        v = int(layout.get("VP", 1))
        d = n // (t * p)
        if n % (t * p) or case.global_batch_size % (d * case.micro_batch_size):
            return None  # Megatron needs whole data-parallel groups and micro-batches
        m = case.global_batch_size // (d * case.micro_batch_size)
        items = [f"config.num_layers={layers}", f"config.hidden_size={hidden}", f"config.num_heads={heads}",
                 f"config.seq_len={case.seq_len}", f"config.vocab_size={MEGATRON_A100_VOCAB}",
                 f"batch_size={case.micro_batch_size}", "precision=fp16",
                 f"activation_checkpointing={case.activation_checkpointing or 'none'}",
                 "fusion=megatron", f"parallelism.tensor={t}", f"parallelism.pipeline={p}", f"parallelism.data={d}",
                 f"parallelism.zero_stage={3 if par == 'ZERO-3' else 0}",
                 f"parallelism.sequence_parallel={str('SP' in par.split()).lower()}",
                 "parallelism.overlap_communication=false",
                 # the input-gradient all-reduce beside the weight gradient came to Megatron-LM late in
                 # 2021, after the 2021 paper's runs and Megatron-DeepSpeed's fork for MT-NLG; the 2022
                 # paper's sequence parallelism has it
                 f"parallelism.tp_wgrad_overlap={str(case.case_id.startswith('korthikanti2022_')).lower()}"]
        items += _micro_batch_items(p, v, m)
        return "dgx_a100", [("num_nodes", max(1, n // 8))], "gpt2_large_train", items
    if case.case_id.startswith("torchtitan_") and case.model in LLAMA_GPT_MODELS and par == "FSDP" and n \
            and case.seq_len and case.micro_batch_size:
        # torchtitan of 2024 in eager PyTorch: FSDP2 over every GPU, parameters gathered in BF16 and
        # gradients reduced in FP32 (its mixed_precision_reduce default), no gradient accumulation,
        # attention through PyTorch SDPA's FlashAttention-2 kernel and the rest of each block op by op,
        # rotary embedding as complex products (torchtitan's apply_rotary_emb)
        workload, vocab, config = LLAMA_GPT_MODELS[case.model]
        items = [f"config.{c}" for c in config] + ["config.rotary_form=complex",
                 f"config.seq_len={case.seq_len}", f"config.vocab_size={vocab}", f"batch_size={case.micro_batch_size}",
                 "precision=bf16", f"activation_checkpointing={case.activation_checkpointing or 'none'}",
                 "fusion=attention_only", "config.attention_kernel=fused", f"parallelism.data={n}",
                 "parallelism.zero_stage=3", "parallelism.grad_reduce_dtype=fp32"]
        return _system_of(case), [("num_nodes", max(1, n // 8))], workload, items
    if case.case_id.startswith("nemo_") and case.model in LLAMA_GPT_MODELS and n and case.global_batch_size \
            and case.seq_len and "TP" in layout and "PP" in layout:
        # NeMo's performance recipes: the table's micro-batch (1 where it gives none), Megatron's
        # distributed optimizer (ZeRO-1), sequence parallelism with tensor parallelism, whose
        # collectives userbuffers overlap with the GEMMs on H100 (the recipes' MegatronCommOverlapCallback
        # with the tp_overlap_configs/userbuffers.py presets), Transformer Engine FP8 with cuDNN fused
        # attention, which with "CPn" runs as Transformer Engine's P2P ring; with an interleaved
        # pipeline the recipes overlap the stages' sends with compute (``overlap_p2p_comm``)
        t, p, v, cp = int(layout["TP"]), int(layout["PP"]), int(layout.get("VP", 1)), int(layout.get("CP", 1))
        d = n // (t * p * cp)
        mbs = case.micro_batch_size or 1
        micro = case.global_batch_size // (d * mbs)
        multiple = MEGATRON_VOCAB_DIVISOR * t
        workload, vocab, config = LLAMA_GPT_MODELS[case.model]
        vocab = math.ceil(vocab / multiple) * multiple
        items = [f"config.{c}" for c in config] + [
                 f"config.seq_len={case.seq_len}", f"config.vocab_size={vocab}", f"batch_size={mbs}",
                 f"precision={case.precision}",
                 "activation_checkpointing=none", "config.attention_kernel=fused_async",
                 f"parallelism.tensor={t}", f"parallelism.pipeline={p}", f"parallelism.data={d}",
                 f"parallelism.context={cp}",
                 "parallelism.zero_stage=1", f"parallelism.sequence_parallel={str(t > 1).lower()}",
                 f"parallelism.tp_comm_overlap={str(t > 1).lower()}",
                 f"parallelism.p2p_comm_overlap={str(v > 1).lower()}",
                 # NeMo's 2024 containers ship a CUDA 12 cuBLASLt, which promotes the split FP8
                 # accumulator of Transformer Engine's gradient GEMMs in series with the products
                 "fp8_promotion=in_series"]
        items += _micro_batch_items(p, v, micro)
        return "dgx_h100", [("num_nodes", max(1, n // 8))], workload, items
    return None


INFERENCE_MODELS = {  # model column -> a built-in workload with its architecture
    "llama2_7b": "llama2_7b_inference", "llama_7b": "llama2_7b_inference",  # LLaMA-1 7B: the same dimensions
    "llama2_70b": "llama2_70b_inference", "llama_70b": "llama2_70b_inference",
}
INFERENCE_MODES = ("decode", "prefill", "serve_throughput")
NATIVE_RUNTIMES = ("TensorRT-LLM", "lmdeploy")
"""Inference runtimes whose kernels are launched by compiled C++ (the ``native`` launch mode)."""

GPT_FAST_NEW_TOKENS = 200
"""gpt-fast's ``generate.py`` default ``--max_new_tokens`` (its README's benchmarks use the defaults)."""


def _inference_workload(case):
    """(hardware, hardware overrides, workload name, overrides, launch mode, tokens counted) for an
    inference row gpusim can build, else the reason it cannot.

    ``decode`` rows (gpt-fast, LMDeploy) time whole generate calls, prefill included, and report generated
    tokens per second; ``prefill`` rows (TensorRT-LLM first-token latency) time the prompt's forward
    pass; ``serve_throughput`` rows report output tokens per second of a batch run to completion."""
    if case.model not in INFERENCE_MODELS:
        return f"{case.model}: no built-in workload with its architecture"
    if case.precision in ("int8", "int4"):
        return f"weight-only {case.precision} quantization is not modelled"
    software = case.software or ""
    batch = case.global_batch_size or 1
    if case.mode == "decode":
        prompt = case.input_tokens or 5  # gpt-fast's benchmark prompt, "Hello, my name is"
        generate = case.output_tokens or (GPT_FAST_NEW_TOKENS if "gpt-fast" in software else None)
        if generate is None:
            return "generated tokens not stated"
        counted = batch * generate
    elif case.mode == "prefill":
        prompt, generate, counted = case.input_tokens, 0, None
    elif case.mode == "serve_throughput":
        prompt, generate = case.input_tokens, case.output_tokens
        counted = batch * (generate or 0)
    else:
        return f"mode {case.mode} is not an inference mode gpusim runs"
    if not prompt or (case.mode != "prefill" and not generate):
        return "prompt or output length not stated"
    # torch.compile(mode="reduce-overhead") replays CUDA graphs; TensorRT-LLM's and LMDeploy's (TurboMind)
    # C++ runtimes launch each kernel from compiled code, without Python's per-op cost
    if "torch.compile" in software:
        launch = "graph"
    elif software.startswith(NATIVE_RUNTIMES):
        launch = "native"
    else:
        launch = "eager"
    items = [f"batch_size={batch}", f"prompt_len={prompt}", f"generate_len={generate}",
             f"precision={case.precision or 'fp16'}"]
    if generate:
        items.append(f"decode_buckets={min(4, generate)}")
    if "TensorRT-LLM" in software and case.precision == "fp8":
        # its performance.md builds the H100 engines with --enable_fp8 --fp8_kv_cache
        items.append("kv_cache_dtype=fp8")
    tensor = int(m.group(1)) if (m := re.search(r"\bTP(\d+)\b", case.parallelism or "")) else 1
    if tensor > 1:
        items.append(f"parallelism.tensor={tensor}")
        if "gpt-fast" in software:
            # its README runs tensor parallelism as `ENABLE_INTRA_NODE_COMM=1 torchrun ... generate.py`:
            # PyTorch's peer-to-peer all-reduce, not NCCL's, for the small per-token messages
            items.append("parallelism.tp_all_reduce=intra_node")
        return _system_of(case), [], INFERENCE_MODELS[case.model], items, launch, counted
    return case.gpu, [], INFERENCE_MODELS[case.model], items, launch, counted


def _single_gpu_workload(case):
    """(hardware, workload name, overrides) for a single-GPU NeuSight row gpusim can build, else a reason."""
    if not case.case_id.startswith("neusight_"):
        return "only the NeuSight single-GPU rows state their model and batch"
    if case.model not in NEUSIGHT_MODELS:
        return f"{case.model}: the dataset does not state its full configuration (head count, experts)"
    base, config = NEUSIGHT_MODELS[case.model]
    config = dict(config, seq_len=case.seq_len)
    items = [f"mode={case.mode}", f"batch_size={case.global_batch_size}", "precision=fp32",
             "fusion=none"] + [f"config.{k}={v}" for k, v in config.items()]
    if case.mode == "inference":
        items += ["optimizer=null", "config.head=classifier" if base.startswith("bert") else "prompt_logits=all"]
    return case.gpu, base, items


def sustained(result, hardware):
    """``result`` as a sustained run (every measured training or serving row is one): each kernel that
    would draw more than the board's TDP runs at the clock the power cap sets, as ``gpusim run``
    prints it (:func:`gpusim.energy.apply_power_cap`)."""
    from gpusim.energy import apply_power_cap

    return apply_power_cap(result, hardware)[0]


def _time_without_optimizer(result) -> float:
    """The run's time less its optimizer kernels (the single-GPU timeline runs kernels one after another)."""
    return result.total_time_s - sum(k.time_s + k.launch_gap_s for k in result.kernels if k.phase == "optimizer")


def _single_gpu_case(case, workload_items: Sequence[str] = ()) -> CaseResult | Skipped:
    from gpusim.engine.simulate import simulate
    from gpusim.workload import load_workload

    built = _single_gpu_workload(case)
    if isinstance(built, str):
        return Skipped(case.case_id, case.gpu, built)
    if case.metric != "time_s":
        return Skipped(case.case_id, case.gpu, f"metric {case.metric} not simulated")
    hardware, name, items = built
    try:
        hw = load_hardware(hardware)
        result = sustained(simulate(hw, load_workload(name, [*items, *workload_items])), hw)
    except Exception as exc:  # reported, not hidden
        return Skipped(case.case_id, case.gpu, f"cannot simulate: {exc}")
    return CaseResult(case.case_id, case.gpu, case.mode, case.metric, case.measured_value,
                      _time_without_optimizer(result), None, case.source, "1 GPU, eager")


def _inference_case(case, workload_items: Sequence[str] = ()) -> CaseResult | Skipped:
    from gpusim.engine.cluster import simulate_system
    from gpusim.engine.simulate import simulate
    from gpusim.workload import load_workload
    from gpusim.workload.precision import policy as precision_policy

    built = _inference_workload(case)
    if isinstance(built, str):
        return Skipped(case.case_id, case.gpu, built)
    hardware, hw_over, name, items, launch, counted = built
    try:
        hw = load_hardware(hardware, hw_over)
        wl = load_workload(name, [*items, *workload_items])
        run = simulate_system if hw.kind == "system" else simulate
        r = sustained(run(hw, wl, launch_mode=launch), hw)
    except Exception as exc:  # reported, not hidden
        return Skipped(case.case_id, case.gpu, f"cannot simulate: {exc}")
    if not r.fits_in_memory:
        kv_dtype = wl.spec.kv_cache_dtype or precision_policy(wl.precision).activation_dtype
        return Skipped(case.case_id, case.gpu, f"does not fit with a {kv_dtype} KV cache and the row does not state "
                                               "its KV-cache dtype")
    if case.metric == "time_s":
        simulated = r.total_time_s
    elif case.metric in ("tokens_per_s", "tokens_per_s_per_gpu") and counted:
        simulated = counted / r.total_time_s / (r.num_gpus if case.metric == "tokens_per_s_per_gpu" else 1)
    else:
        return Skipped(case.case_id, case.gpu, f"metric {case.metric} not simulated for mode {case.mode}")
    return CaseResult(case.case_id, case.gpu, case.mode, case.metric, case.measured_value, simulated, None,
                      case.source, f"launch {launch}, {case.parallelism or '1 GPU'}")


def reference_of(source: str) -> str:
    """The reference a ``source`` cell names: its repository or document, without commit and path
    (a repository's issue threads count as the repository: ``owner/repo issue #9`` -> ``owner/repo``)."""
    repository = re.match(r"[\w.-]+/[\w.-]+(?=[@ ]|$)", source)
    return repository.group(0) if repository else source.split("@")[0].split(" (")[0]


def source_group(result: CaseResult) -> str:
    """The reference a training case comes from (its repository or document), single-GPU rows apart."""
    return reference_of(result.source) + (", 1 GPU" if result.note.startswith("1 GPU") else "")


def run_training(cases: Iterable, include_excluded: bool = False,
                 workload_items: Sequence[str] = ()) -> tuple[list[CaseResult], list[Skipped]]:
    """Simulate every training and serving case. ``workload_items`` (``KEY=VALUE``) are applied to
    every case's workload after the row's own settings: what the error would be had every run used
    them (e.g. ``fp8_promotion=overlapped``)."""
    from gpusim.engine.cluster import simulate_system
    from gpusim.workload import load_workload

    results, skipped = [], []
    for case in cases:
        if case.excluded and not include_excluded:
            skipped.append(Skipped(case.case_id, case.gpu, "excluded by the dataset"))
            continue
        if case.mode in INFERENCE_MODES:
            outcome = _inference_case(case, workload_items)
            (skipped if isinstance(outcome, Skipped) else results).append(outcome)
            continue
        if (case.num_gpus or 1) <= 1:
            outcome = _single_gpu_case(case, workload_items)
            (skipped if isinstance(outcome, Skipped) else results).append(outcome)
            continue
        built = _training_workload(case)
        if built is None:
            skipped.append(Skipped(case.case_id, case.gpu, "layout, batch or model not stated in a form gpusim "
                                                           "can build"))
            continue
        system, hw_over, name, items = built
        try:
            hw = load_hardware(system, hw_over)
            wl = load_workload(name, [*items, *workload_items])
            r = sustained(simulate_system(hw, wl), hw)
        except Exception as exc:  # reported, not hidden
            skipped.append(Skipped(case.case_id, case.gpu, f"cannot simulate: {exc}"))
            continue
        if case.metric == "time_s":
            simulated = r.step_time_s
        elif case.metric == "tokens_per_s_per_gpu":
            simulated = r.tokens_per_s / r.num_gpus
        elif case.metric == "tokens_per_s":
            simulated = r.tokens_per_s
        elif case.metric == "mfu_fraction":
            simulated = r.mfu_fraction
        else:
            skipped.append(Skipped(case.case_id, case.gpu, f"metric {case.metric} not simulated"))
            continue
        results.append(CaseResult(case.case_id, case.gpu, case.mode, case.metric, case.measured_value, simulated,
                                  None, case.source, case.parallelism or ""))
    return results, skipped
