"""What model builders produce: layers of forward ops, each with the facts the training expansion
and the memory model need (parameters, whether it has a weight gradient, what it saves)."""

from __future__ import annotations

from dataclasses import dataclass

from gpusim.workload.ops import (
    ELEMENTWISE_FUNCTIONS,
    INDEX_BYTES,
    MASK_BYTES,
    STATS_BYTES,
    Attention,
    BatchNorm,
    Conv2d,
    Elementwise,
    Embedding,
    LayerNorm,
    Matmul,
    Op,
    Pool2d,
    RMSNorm,
    Softmax,
    dtype_bytes,
)


class ModelError(ValueError):
    """A model setting that cannot be built; ``key_path`` names it in the workload file."""

    def __init__(self, key_path: str, message: str) -> None:
        self.key_path = key_path
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class FwdOp:
    """One forward op of a layer.

    ``weight``: the op's B operand (GEMM) or filter (convolution) is a trainable weight, so training
    adds a weight-gradient kernel. ``input_grad``: the input gradient is needed (False for the first
    convolution of an image model and for embeddings). ``saved_bytes`` overrides the saved-activation
    rule of :func:`saved_bytes`. Ops in a ``recompute_group`` are recomputed under selective
    checkpointing; ``kept_bytes`` of their saved bytes (the group's inputs) stay stored.
    ``attention_dropout`` marks attention whose unfused form applies dropout to the probabilities;
    ``loss`` marks the softmax that is the cross-entropy loss.
    """

    name: str
    op: Op
    num_parameters: int = 0
    weight: bool = False
    input_grad: bool = True
    saved_bytes: float | None = None
    recompute_group: str | None = None
    kept_bytes: float = 0.0
    attention_dropout: bool = False
    loss: bool = False
    expert: bool = False
    """The op's weights are a mixture-of-experts layer's experts, which expert parallelism splits."""
    norm_step: bool = False
    """One of the tensor ops of a norm run op by op (eager lowering): what it keeps is the norm's."""
    weight_cast: bool = False
    """The op quantizes a layer's weight for an FP8 GEMM (see ``fp8_weight_cast`` of the workload:
    once per step or once per micro-batch)."""
    split_output: bool = False
    """The op's output is split into parts that different ops read (a fused QKV projection into
    queries, keys and values; a gated MLP's projection into gate and up). Eager autograd
    concatenates their gradients before the op's own backward (``SplitBackward``'s ``torch.cat``,
    ``CatArrayBatchedCopy`` in a profile): one copy of the output, in the eager lowering only."""

    @property
    def fp8_weight_gemm(self) -> bool:
        """An FP8 GEMM whose B operand is a trainable weight (what Transformer Engine quantizes)."""
        return isinstance(self.op, Matmul) and self.op.dtype == "fp8" and self.weight


@dataclass(frozen=True)
class Layer:
    """A group of forward ops: a transformer block, a ResNet bottleneck, the embedding, the head.

    ``input_bytes`` is the size of the layer's input activation (what full checkpointing keeps);
    ``checkpointable`` layers are the ones activation checkpointing applies to."""

    name: str
    index: int | None
    ops: tuple[FwdOp, ...]
    input_bytes: float
    checkpointable: bool = False

    def num_parameters(self) -> int:
        return sum(f.num_parameters for f in self.ops)


def _epilogue_saved(epilogue: tuple[str, ...], elements: int, out_bytes: float) -> float:
    total = 0.0
    for fn in epilogue:
        saves = ELEMENTWISE_FUNCTIONS[fn].saves
        if saves == "input":
            total += elements * out_bytes
        elif saves == "mask":
            total += elements * MASK_BYTES
    return total


def saved_bytes(f: FwdOp) -> float:
    """Bytes of activations the forward of ``f`` keeps for the backward (per micro-batch).

    Rules (each tensor counted once, by the op that needs it; Korthikanti et al. 2022, "Reducing
    Activation Recomputation in Large Transformer Models", section 4): a GEMM with a weight keeps its
    input; a GEMM of two activations keeps both; a convolution keeps its input; fused attention keeps
    Q, K, V and the FP32 log-sum-exp (its output is kept by the next GEMM); softmax keeps its output;
    norms keep their input and statistics; GELU/SiLU/ReLU keep their input, SwiGLU both inputs,
    dropout a one-byte mask; adds, bias adds and rotary embeddings keep nothing.
    """
    if f.saved_bytes is not None:
        return f.saved_bytes
    op = f.op
    if isinstance(op, Matmul):
        b = dtype_bytes(op.dtype)
        a = op.batch * op.m * op.k * b
        extra = 0.0 if f.weight else op.num_b_matrices * op.k * op.n * b
        return a + extra + _epilogue_saved(op.epilogue, op.batch * op.m * op.n, dtype_bytes(op.out_dtype))
    if isinstance(op, Conv2d):
        return (op.input_elements() * dtype_bytes(op.dtype)
                + _epilogue_saved(op.epilogue, op.output_elements(), dtype_bytes(op.out_dtype)))
    if isinstance(op, Attention):
        return op._q_bytes() + 2 * op._kv_bytes() + op._lse_bytes()
    if isinstance(op, Softmax):
        return op.elements() * dtype_bytes(op.dtype)
    if isinstance(op, (LayerNorm, RMSNorm)):
        return op.elements() * dtype_bytes(op.dtype) + op._stats_bytes()
    if isinstance(op, BatchNorm):
        return op.elements() * dtype_bytes(op.dtype) + op._stats_bytes()
    if isinstance(op, Elementwise):
        total = 0.0
        for fn in op.functions:
            spec = ELEMENTWISE_FUNCTIONS[fn]
            if spec.saves == "input":
                total += op.num_elements * dtype_bytes(op.dtype)
            elif spec.saves == "inputs":
                total += op.num_elements * dtype_bytes(op.dtype) * spec.num_inputs
            elif spec.saves == "mask":
                total += op.num_elements * MASK_BYTES
        return total
    if isinstance(op, Embedding):
        return op.num_tokens * INDEX_BYTES
    if isinstance(op, Pool2d):
        if op.function == "max":
            return op.output_elements() * INDEX_BYTES
        return 0.0
    return 0.0


def kept_when_recomputed(f: FwdOp) -> float:
    """Saved bytes that stay stored when ``f``'s recompute group is recomputed."""
    if f.recompute_group is None:
        return saved_bytes(f)
    return min(f.kept_bytes, saved_bytes(f))


COLUMN_PARALLEL_GEMMS = ("qkv", "fc1")
"""A transformer block's GEMMs that tensor parallelism splits by columns: their input, the norm's
output, is the whole hidden state on every tensor rank unless sequence parallelism splits it."""

ROW_PARALLEL_GEMMS = ("proj", "fc2")
"""The GEMMs split by rows: what follows them (bias, dropout, residual) runs on the whole hidden state."""


def replicated_without_sequence_parallel(f: FwdOp) -> float:
    """The part of ``saved_bytes(f)`` that every tensor rank keeps whole when tensor parallelism runs
    without sequence parallelism (Megatron-LM; Korthikanti et al. 2022, section 4.2.2: the norms'
    inputs, the column-parallel GEMMs' input and the dropout masks after the row-parallel GEMMs, 10 of
    the 34 s b h bytes of a GPT block). Ops are matched by the block's op names (a fused kernel keeps
    the name of the GEMM or elementwise op it starts with)."""
    op = f.op
    if isinstance(op, (LayerNorm, RMSNorm)) or f.norm_step:
        return saved_bytes(f)
    base = f.name.split("_")[0]
    if isinstance(op, Matmul) and f.name in COLUMN_PARALLEL_GEMMS:
        return op.batch * op.m * op.k * dtype_bytes(op.dtype)
    if isinstance(op, Matmul) and f.name in ROW_PARALLEL_GEMMS:
        return sum(op.batch * op.m * op.n * MASK_BYTES for fn in op.epilogue if ELEMENTWISE_FUNCTIONS[fn].saves == "mask")
    if isinstance(op, Elementwise) and base in ROW_PARALLEL_GEMMS:
        return saved_bytes(f)
    return 0.0


def attention_kept_bytes(op: Attention) -> float:
    """Q, K and V: the inputs a recomputed attention core needs."""
    return op._q_bytes() + 2 * op._kv_bytes()


__all__ = ["ModelError", "FwdOp", "Layer", "saved_bytes", "kept_when_recomputed", "attention_kept_bytes", "STATS_BYTES",
           "replicated_without_sequence_parallel"]
