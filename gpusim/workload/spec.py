"""The workload file schema (schema_version 1): single-op / op-list files and model files.

An op-list file::

    schema_version: 1
    name: gemm-8192-bf16
    ops:
      - {name: gemm, op: matmul, m: 8192, n: 8192, k: 8192, dtype: bf16}

Ops run in file order unless ``after: [names]`` says otherwise (``after: []``: no dependency).
``repeat: N`` runs an op N times back to back.

A model file names a builder (``model:``) and its ``config:``; see :class:`ModelWorkloadSpec`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BeforeValidator, Field, model_validator

from gpusim.config.hardware import DTYPES
from gpusim.config.types import Spec, count, field_error
from gpusim.workload import ops as O
from gpusim.workload.precision import PRECISIONS


def _dtype(value: Any) -> Any:
    if isinstance(value, str) and value not in DTYPES:
        raise ValueError(f"unknown dtype {value!r}; expected one of {', '.join(DTYPES)}")
    if not isinstance(value, str):
        raise ValueError(f"expected a dtype name such as bf16, got {value!r}")
    return value


Dtype = Annotated[str, BeforeValidator(_dtype)]
Size = count(le=10**13)
SmallCount = count(le=10**9)
NumBytes = Annotated[float, BeforeValidator(lambda v: _num_bytes(v)), Field(gt=0, le=1e18)]


def _num_bytes(value: Any) -> Any:
    from gpusim.units import parse_quantity

    if isinstance(value, bool):
        raise ValueError("expected a data size, got a boolean")
    if isinstance(value, (str, int, float)):
        return parse_quantity(value, "bytes")
    return value


ALLOWED_DTYPES: dict[str, tuple[str, ...]] = {
    "matmul": O.FLOAT_DTYPES + ("int8",),
    "conv2d": O.FLOAT_DTYPES + ("int8",),
    "attention": ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8"),
    "softmax": O.VECTOR_DTYPES, "layernorm": O.VECTOR_DTYPES, "rmsnorm": O.VECTOR_DTYPES,
    "batchnorm": O.VECTOR_DTYPES, "elementwise": O.VECTOR_DTYPES, "reduction": O.VECTOR_DTYPES,
    "pool2d": O.VECTOR_DTYPES, "embedding": ("fp64", "fp32", "fp16", "bf16", "fp8"),
    "optimizer_update": ("fp32", "fp16", "bf16"),
}


class OpSpecBase(Spec):
    name: str = Field(min_length=1, max_length=200)
    after: Optional[tuple[str, ...]] = None
    """Names of ops this one waits for; absent: the previous op in the file."""
    repeat: SmallCount = 1

    @model_validator(mode="after")
    def _dtype_allowed(self) -> "OpSpecBase":
        kind = getattr(self, "op")
        allowed = ALLOWED_DTYPES.get(kind)
        dtype = getattr(self, "dtype", None)
        if allowed is not None and dtype is not None and dtype not in allowed:
            raise field_error("dtype", f"{kind} cannot use dtype {dtype} (allowed: {', '.join(allowed)})")
        return self

    def op_fields(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if k not in ("name", "after", "repeat", "op")}


class MatmulSpec(OpSpecBase):
    op: Literal["matmul"]
    m: Size
    n: Size
    k: Size
    batch: Size = 1
    dtype: Dtype
    accumulate_dtype: Optional[Literal["fp16", "fp32", "fp64", "int32"]] = None
    transpose_a: bool = False
    transpose_b: bool = False
    b_batch: Optional[Size] = None
    tile: Optional[str] = None
    """Pin the kernel's tiling, e.g. ``64x64x32_s6_w4`` (see gpusim.workload.ops.Matmul)."""
    split_accumulator: bool = False
    """FP8 only: promote the partial sums into FP32 every 128 elements of K (fast accumulation off)."""

    @model_validator(mode="after")
    def _tile_label(self) -> "MatmulSpec":
        if self.tile is not None:
            from gpusim.mapping.plan import Tile

            try:
                Tile.parse(self.tile)
            except ValueError as exc:
                raise field_error("tile", str(exc)) from None
        return self

    @model_validator(mode="after")
    def _accumulate(self) -> "MatmulSpec":
        acc = self.accumulate_dtype
        if acc == "fp16" and self.dtype != "fp16":
            raise field_error("accumulate_dtype", f"fp16 accumulation needs dtype fp16 (got {self.dtype})")
        if (acc == "int32") != (self.dtype == "int8") and acc is not None:
            raise field_error("accumulate_dtype", "int32 accumulation goes with (and only with) dtype int8")
        if acc == "fp64" and self.dtype != "fp64":
            raise field_error("accumulate_dtype", "fp64 accumulation needs dtype fp64")
        if self.split_accumulator and self.dtype != "fp8":
            raise field_error("split_accumulator", f"a split accumulator is for fp8 products (got dtype {self.dtype})")
        if self.b_batch is not None and self.b_batch > self.batch:
            raise field_error("b_batch", f"b_batch {self.b_batch} is larger than batch {self.batch}")
        return self

    def op_fields(self) -> dict[str, Any]:
        d = super().op_fields()
        if d["accumulate_dtype"] is None:
            d["accumulate_dtype"] = {"int8": "int32", "fp64": "fp64"}.get(self.dtype, "fp32")
        return d


class Conv2dSpec(OpSpecBase):
    op: Literal["conv2d"]
    batch: Size
    in_channels: Size
    out_channels: Size
    height: Size
    width: Size
    kernel_size: count(le=1024)
    stride: count(le=1024) = 1
    padding: count(ge=0, le=1024) = 0
    groups: Size = 1
    dtype: Dtype


class AttentionSpec(OpSpecBase):
    op: Literal["attention"]
    batch: Size
    heads: count(le=10**6)
    kv_heads: Optional[count(le=10**6)] = None
    seq_len_q: Size
    seq_len_kv: Size
    head_dim: count(le=10**6)
    causal: bool = False
    dtype: Dtype
    kernel: Literal["fused", "fused_async", "fused_unpipelined", "unfused"] = "fused"
    """See gpusim.workload.ops.ATTENTION_KERNELS."""


class _RowSpec(OpSpecBase):
    rows: Size
    cols: Size
    dtype: Dtype


class SoftmaxSpec(_RowSpec):
    op: Literal["softmax"]


class LayerNormSpec(_RowSpec):
    op: Literal["layernorm"]


class RMSNormSpec(_RowSpec):
    op: Literal["rmsnorm"]


class BatchNormSpec(_RowSpec):
    op: Literal["batchnorm"]


class ElementwiseSpec(OpSpecBase):
    op: Literal["elementwise"]
    num_elements: Size
    function: str
    dtype: Dtype

    @model_validator(mode="after")
    def _function(self) -> "ElementwiseSpec":
        for f in self.function.split("+"):
            if f not in O.ELEMENTWISE_FUNCTIONS:
                import difflib
                close = difflib.get_close_matches(f, list(O.ELEMENTWISE_FUNCTIONS), n=1)
                hint = f"; did you mean {close[0]}?" if close else \
                    f"; expected one of {', '.join(O.ELEMENTWISE_FUNCTIONS)}"
                raise field_error("function", f"unknown element-wise function {f!r}{hint}")
        return self


class EmbeddingSpec(OpSpecBase):
    op: Literal["embedding"]
    num_tokens: Size
    vocab_size: Size
    hidden_size: Size
    dtype: Dtype


class ReductionSpec(OpSpecBase):
    op: Literal["reduction"]
    num_elements: Size
    num_outputs: Size = 1
    function: Literal["sum", "mean", "max", "min"] = "sum"
    dtype: Dtype

    @model_validator(mode="after")
    def _outputs(self) -> "ReductionSpec":
        if self.num_outputs > self.num_elements:
            raise field_error("num_outputs", "more outputs than input elements")
        return self


class Pool2dSpec(OpSpecBase):
    op: Literal["pool2d"]
    batch: Size
    channels: Size
    height: Size
    width: Size
    kernel_size: count(le=100_000)
    stride: count(le=100_000) = 1
    padding: count(ge=0, le=100_000) = 0
    function: Literal["max", "avg"] = "max"
    dtype: Dtype


class OptimizerUpdateSpec(OpSpecBase):
    op: Literal["optimizer_update"]
    num_parameters: Size
    optimizer: Literal["sgd", "momentum", "adam", "adamw"]
    dtype: Dtype
    master_weights: bool = False


class _BytesSpec(OpSpecBase):
    num_bytes: NumBytes
    dtype: Dtype = "bf16"


class CopySpec(_BytesSpec):
    op: Literal["copy"]


class HostToDeviceSpec(_BytesSpec):
    op: Literal["host_to_device"]


class DeviceToHostSpec(_BytesSpec):
    op: Literal["device_to_host"]


class _CollectiveSpec(_BytesSpec):
    num_gpus: count(le=10**7)


class AllReduceSpec(_CollectiveSpec):
    op: Literal["all_reduce"]


class AllGatherSpec(_CollectiveSpec):
    op: Literal["all_gather"]


class ReduceScatterSpec(_CollectiveSpec):
    op: Literal["reduce_scatter"]


class AllToAllSpec(_CollectiveSpec):
    op: Literal["all_to_all"]


class SendRecvSpec(_CollectiveSpec):
    op: Literal["send_recv"]
    num_gpus: count(ge=2, le=10**7) = 2


OP_SPECS: dict[str, type[OpSpecBase]] = {
    "matmul": MatmulSpec, "conv2d": Conv2dSpec, "attention": AttentionSpec, "softmax": SoftmaxSpec,
    "layernorm": LayerNormSpec, "rmsnorm": RMSNormSpec, "batchnorm": BatchNormSpec, "elementwise": ElementwiseSpec,
    "embedding": EmbeddingSpec, "reduction": ReductionSpec, "pool2d": Pool2dSpec,
    "optimizer_update": OptimizerUpdateSpec, "copy": CopySpec, "host_to_device": HostToDeviceSpec,
    "device_to_host": DeviceToHostSpec, "all_reduce": AllReduceSpec, "all_gather": AllGatherSpec,
    "reduce_scatter": ReduceScatterSpec, "all_to_all": AllToAllSpec, "send_recv": SendRecvSpec,
}
assert set(OP_SPECS) == set(O.OP_CLASSES)

OpSpec = Annotated[Union[tuple(OP_SPECS.values())], Field(discriminator="op")]  # type: ignore[valid-type]


class OpsWorkloadSpec(Spec):
    schema_version: Literal[1]
    name: str = Field(min_length=1)
    description: str = ""
    ops: tuple[OpSpec, ...] = Field(min_length=1)
    tensor_instructions: Literal["native", "warp_mma"] = "native"
    """Which tensor-core instructions the libraries issue: ``native`` (the device's own; Hopper's
    ``wgmma`` as CUDA 12 cuBLAS, cuDNN and FlashAttention-3 use) or ``warp_mma`` (libraries built for
    an older architecture, e.g. PyTorch 1.x with CUDA 11.x on Hopper: warp-synchronous ``mma.sync`` at
    the device's ``warp_mma_fraction`` of the matrix rate, no thread-block clusters)."""
    fp8_promotion: Literal["overlapped", "in_series"] = "overlapped"
    """How the libraries' split-accumulator FP8 GEMMs (Transformer Engine's dgrad and wgrad) add their
    partial sums into FP32 registers: ``overlapped`` with the next products (CUDA 13 cuBLAS) or
    ``in_series`` after them (cuBLASLt into 2025; see ``Machine.with_in_series_fp8_promotion``)."""
    sources: dict[str, str] = Field(default_factory=dict)


class ParallelismSpec(Spec):
    """A parallel layout; used now to shard the memory footprint (the multi-GPU engine simulates it)."""

    data: count(le=10**7) = 1
    tensor: count(le=10**5) = 1
    pipeline: count(le=10**5) = 1
    zero_stage: Literal[0, 1, 2, 3] = 0
    """ZeRO (Rajbhandari et al. 2020): 1 shards optimizer states, 2 also gradients, 3 (= FSDP) also weights,
    over the data-parallel GPUs."""
    schedule: Literal["gpipe", "1f1b", "interleaved"] = "1f1b"
    """Pipeline schedule (GPipe: Huang et al. 2019; 1F1B: Narayanan et al. 2019 PipeDream-Flush;
    interleaved: Narayanan et al. 2021, needs virtual_stages > 1)."""
    microbatches: Optional[count(le=10**6)] = None
    """Micro-batches per step and pipeline; default gradient_accumulation_steps."""
    virtual_stages: count(le=1024) = 1
    """Model chunks per pipeline stage (interleaved schedule)."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism: tensor-parallel all-reduces become reduce-scatter + all-gather and
    norms/dropouts run on 1/tensor of the tokens."""
    context: count(le=10**5) = 1
    """Context parallelism (Megatron-LM ``--context-parallel-size``, Transformer Engine's ring attention,
    ``cp_comm_type: p2p``): each sequence is split over this many GPUs, every layer runs on 1/context
    of its tokens, and attention passes keys and values around the ring (keys, values and their
    gradients in the backward), overlapped with the attention kernels. Causal models split the
    sequence into 2 x context chunks, each GPU taking one from each end, so every GPU does the same
    attention work. Training with fused attention only. The gradient reduction (and ZeRO sharding)
    spans data x context GPUs."""
    context_comm: Literal["p2p", "a2a", "all_gather", "a2a+p2p"] = "p2p"
    """How context-parallel attention communicates (Megatron-LM ``--cp-comm-type``): ``p2p``, the ring
    above; ``a2a``, DeepSpeed-Ulysses (Jacobs et al. 2023, arXiv 2309.14509): an all-to-all before
    attention turns each GPU's share of the sequence for all heads into the whole sequence for
    1/context of the heads (queries, keys, values), one ordinary attention kernel runs, and an
    all-to-all after it returns the output (the backward mirrors both); it needs the query and
    key-value heads per tensor-parallel rank divisible by context. ``all_gather`` (the Llama 3
    paper's context parallelism, Transformer Engine's ``AttnFuncWithCPAndKVAllGather``): keys and
    values are all-gathered, each GPU's queries attend to them, and the backward gathers them again
    and reduce-scatters their gradients. ``a2a+p2p`` (Megatron-LM's hierarchical context
    parallelism): Ulysses inside groups of ``context_a2a_size`` neighbouring GPUs, then the ring
    between the groups on each group's share of the sequence. The a2a and all_gather collectives are
    not overlapped."""
    context_a2a_size: Optional[count(le=10**5)] = None
    """With ``context_comm: a2a+p2p``: the GPUs of each all-to-all group (the first of Megatron-LM's
    ``--hierarchical-context-parallel-sizes``); it divides context and lies strictly between 1 and it."""
    expert: count(le=10**5) = 1
    """Expert parallelism for mixture-of-experts models: experts split over this many data-parallel GPUs."""
    overlap_communication: bool = True
    """Overlap data-parallel gradient reduction (and ZeRO-3 parameter gathers) with compute."""
    tp_comm_overlap: bool = False
    """Overlap tensor-parallel collectives with the GEMMs that produce and consume them (Megatron-LM's
    ``--tp-comm-overlap``, Transformer Engine's userbuffers): a layer group's collectives run while its
    compute does, holding the collectives' share of the SMs, and the group waits for the longer of the
    two. Off, they run after the compute (Megatron's default)."""
    tp_wgrad_overlap: bool = True
    """In the backward, a column-parallel GEMM's input-gradient all-reduce (with sequence parallelism
    its reduce-scatter) runs beside the GEMM's weight-gradient GEMM, as Megatron-LM has done since
    late 2021 (``LinearWithGradAccumulationAndAsyncCommunication``). Off, it runs after the weight
    gradient and holds the compute (Megatron-LM before it; PyTorch's own tensor parallelism, whose
    all-reduce is a separate autograd step after the layer's backward)."""
    p2p_comm_overlap: bool = False
    """Overlap a pipeline stage's sends with its next compute (Megatron-LM's ``--overlap-p2p-communication``,
    NeMo's ``overlap_p2p_comm``). Off, a stage waits for each send to complete before its next forward
    or backward, as Megatron-LM's default blocking ``batch_isend_irecv`` and DeepSpeed's pipeline
    engine do."""
    tp_all_reduce: Literal["nccl", "intra_node"] = "nccl"
    """Who runs the tensor-parallel all-reduces. ``nccl``: NCCL, whose tuner picks ring, tree or NVLS
    and a protocol. ``intra_node``: a peer-to-peer all-reduce over NVLink inside the node, as PyTorch's
    IntraNodeComm runs it (``ENABLE_INTRA_NODE_COMM=1``, which gpt-fast's tensor-parallel command sets):
    one-shot up to 256 KiB, two-shot up to 10 MiB, NCCL beyond, and NCCL too where the group spans nodes
    or the node's GPUs are not all directly connected (see
    :func:`gpusim.engine.collectives.intra_node_all_reduce_plan`)."""
    bucket_bytes: NumBytes = 25e6
    """Gradient bucket for the overlapped data-parallel reduction (PyTorch DDP's default 25 MB)."""
    param_gather_dtype: Optional[Literal["fp32", "bf16", "fp16", "fp8"]] = None
    """Dtype ZeRO/FSDP all-gathers parameters in (FSDP ``MixedPrecision.param_dtype``); default the
    precision's working weights. Composer's early ``DEFAULT`` mixed precision gathered FP32."""
    grad_reduce_dtype: Optional[Literal["fp32", "bf16", "fp16"]] = None
    """Dtype gradients are reduced in (FSDP ``reduce_dtype``; Megatron-LM's FP32 gradient
    all-reduce); default the precision's gradients."""

    @model_validator(mode="after")
    def _schedule(self) -> "ParallelismSpec":
        if self.virtual_stages > 1 and self.schedule != "interleaved":
            raise field_error("virtual_stages", "virtual stages need schedule: interleaved")
        if self.schedule == "interleaved" and self.virtual_stages < 2:
            raise field_error("schedule", "the interleaved schedule needs virtual_stages >= 2")
        if self.schedule == "interleaved" and self.pipeline < 2:
            raise field_error("schedule", "the interleaved schedule interleaves model chunks across pipeline "
                              "stages; it needs pipeline >= 2")
        if self.tp_comm_overlap and self.expert > 1:
            raise field_error("tp_comm_overlap", "overlapping tensor-parallel collectives is modelled for dense "
                              "layers only, not with expert parallelism (its all-to-alls)")
        if self.tp_comm_overlap and self.context > 1 and self.context_comm != "p2p":
            raise field_error("tp_comm_overlap", "overlapping tensor-parallel collectives is not modelled beside "
                              f"context parallelism's blocking collectives (context_comm: {self.context_comm})")
        if self.context_comm == "a2a+p2p" and self.context > 1:
            a = self.context_a2a_size
            if a is None or self.context % a or not 1 < a < self.context:
                raise field_error("context_a2a_size", f"a2a+p2p needs the all-to-all group size, a divisor of context "
                                  f"{self.context} strictly between 1 and it (got {a})")
        elif self.context_a2a_size is not None:
            raise field_error("context_a2a_size", "only context_comm: a2a+p2p takes an all-to-all group size")
        if self.context > 1 and self.expert > 1:
            raise field_error("context", "context parallelism is modelled for dense layers only, not with expert "
                              "parallelism")
        if self.data % self.expert:
            raise field_error("expert", f"expert {self.expert} does not divide data {self.data} (experts are "
                              "spread over data-parallel GPUs)")
        return self

    @property
    def num_gpus(self) -> int:
        return self.data * self.context * self.tensor * self.pipeline

    @property
    def context_a2a(self) -> int:
        """GPUs of each context-parallel all-to-all group (1: none)."""
        if self.context <= 1:
            return 1
        return {"a2a": self.context, "a2a+p2p": self.context_a2a_size or 1}.get(self.context_comm, 1)


MODEL_NAMES = ("gpt", "bert", "llama", "moe", "resnet", "mlp", "cnn")
LANGUAGE_MODELS = ("gpt", "bert", "llama", "moe")


class ModelWorkloadSpec(Spec):
    schema_version: Literal[1]
    name: str = Field(min_length=1)
    description: str = ""
    model: Literal[MODEL_NAMES]  # type: ignore[valid-type]
    config: Any = None
    """The builder's settings (validated by the builder's own schema)."""
    mode: Literal["train", "inference"]
    batch_size: count(le=10**9)
    """Per-GPU micro-batch (train) or concurrent requests (inference)."""
    precision: Literal[PRECISIONS] = "bf16"  # type: ignore[valid-type]
    optimizer: Optional[Literal["sgd", "momentum", "adam", "adamw"]] = None
    """Training only; default adamw."""
    gradient_clipping: bool = True
    """Training only: the optimizer step first takes the global norm of the gradients (a kernel
    reading each GPU's gradients, then an all-reduce of one number over the GPUs holding distinct
    shares of them, which every pipeline stage waits for), as Megatron-LM, NeMo, Hugging Face's
    Trainer and torchtitan do by default and llm-foundry's MPT recipes through Composer's
    GradientClipping algorithm (all clipping at 1.0). The rescale applied when the norm exceeds the
    threshold depends on the run's data and is not simulated."""
    activation_checkpointing: Literal["none", "selective", "full"] = "none"
    gradient_accumulation_steps: count(le=10**6) = 1
    fusion: Literal["none", "attention_only", "default", "megatron"] = "default"
    """Kernel fusion: ``default`` (epilogues folded into GEMMs, element-wise runs merged, attention one
    fused kernel), ``none`` (eager PyTorch: every op its own kernel, attention lowered to its tensor
    ops), ``attention_only`` (eager PyTorch calling a fused attention kernel: every op its own
    kernel except attention, which stays the kernel ``config.attention_kernel`` names) or
    ``megatron`` (Megatron-LM before fused attention: GEMMs take only a lone bias, the element-wise
    runs after them are one kernel each, attention is QK^T, a fused scale-mask-softmax, dropout, AV)."""
    tensor_instructions: Literal["native", "warp_mma"] = "native"
    """Which tensor-core instructions the libraries issue: ``native`` (the device's own; Hopper's
    ``wgmma`` as CUDA 12 cuBLAS, cuDNN and FlashAttention-3 use) or ``warp_mma`` (libraries built for
    an older architecture, e.g. PyTorch 1.x with CUDA 11.x on Hopper: warp-synchronous ``mma.sync`` at
    the device's ``warp_mma_fraction`` of the matrix rate, no thread-block clusters)."""
    fp8_promotion: Literal["overlapped", "in_series"] = "overlapped"
    """How the libraries' split-accumulator FP8 GEMMs (Transformer Engine's dgrad and wgrad) add their
    partial sums into FP32 registers: ``overlapped`` with the next products (CUDA 13 cuBLAS) or
    ``in_series`` after them (cuBLASLt into 2025; see ``Machine.with_in_series_fp8_promotion``)."""
    fp8_weight_cast: Literal["auto", "per_step", "per_microbatch"] = "auto"
    """FP8 training: how often each layer casts its BF16 weight to FP8 (and transposes it).
    ``per_step``: in the step's first micro-batch, the copies kept for the others (Megatron-LM and NeMo
    pass Transformer Engine ``is_first_microbatch``); ``per_microbatch``: in every micro-batch (a
    Transformer Engine module called without it); ``auto``: per micro-batch under ZeRO-3/FSDP over
    more than one GPU, which gathers the weights again for every micro-batch, else per step."""
    prompt_len: Optional[count(le=10**8)] = None
    """Inference of language models: prompt tokens per request (default config.seq_len)."""
    prompt_logits: Literal["last", "all"] = "last"
    """Inference of causal language models: the LM head runs on each request's last prompt token
    (serving engines) or on every prompt token (a plain forward call of a Hugging Face model)."""
    generate_len: count(ge=0, le=10**8) = 0
    """Inference of causal language models: tokens decoded per request after the prompt."""
    decode_buckets: count(le=10_000) = 4
    """Decode steps are grouped into this many context-length buckets (each simulated at its mean context)."""
    kv_cache_dtype: Optional[Dtype] = None
    parallelism: ParallelismSpec = Field(default_factory=ParallelismSpec)
    sources: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _mode_keys(self) -> "ModelWorkloadSpec":
        if self.mode == "inference":
            if self.optimizer is not None:
                raise field_error("optimizer", "only applies to mode: train")
            if self.activation_checkpointing != "none":
                raise field_error("activation_checkpointing", "only applies to mode: train")
            if self.gradient_accumulation_steps != 1:
                raise field_error("gradient_accumulation_steps", "only applies to mode: train")
            if "gradient_clipping" in self.model_fields_set:
                raise field_error("gradient_clipping", "only applies to mode: train")
        else:
            for key in ("prompt_len", "kv_cache_dtype"):
                if getattr(self, key) is not None:
                    raise field_error(key, "only applies to mode: inference")
            if self.generate_len:
                raise field_error("generate_len", "only applies to mode: inference")
            if "prompt_logits" in self.model_fields_set:
                raise field_error("prompt_logits", "only applies to mode: inference")
        if self.model not in LANGUAGE_MODELS:
            for key in ("prompt_len", "kv_cache_dtype"):
                if getattr(self, key) is not None:
                    raise field_error(key, f"only applies to language models, not {self.model}")
            if "prompt_logits" in self.model_fields_set:
                raise field_error("prompt_logits", f"only applies to language models, not {self.model}")
            if self.generate_len:
                raise field_error("generate_len", f"only applies to language models, not {self.model}")
        if self.model == "bert" and self.generate_len:
            raise field_error("generate_len", "BERT is an encoder; it does not decode tokens")
        if self.activation_checkpointing == "selective" and self.model not in LANGUAGE_MODELS:
            raise field_error("activation_checkpointing", "selective checkpointing (of the attention core) applies "
                              "to transformer models; use none or full")
        if self.decode_buckets > max(self.generate_len, 1) and "decode_buckets" in self.model_fields_set:
            raise field_error("decode_buckets", f"more buckets ({self.decode_buckets}) than decode steps "
                              f"(generate_len {self.generate_len})")
        return self

    @property
    def optimizer_name(self) -> str:
        return self.optimizer or "adamw"

    @property
    def fp8_weights_per_step(self) -> bool:
        """Whether FP8 weight casts run once per step (``fp8_weight_cast`` resolved)."""
        if self.fp8_weight_cast == "auto":
            par = self.parallelism
            return par.zero_stage < 3 or par.data * par.context == 1  # ZeRO-3 over one GPU gathers nothing
        return self.fp8_weight_cast == "per_step"
