"""From model layers to kernels: fusion, the training expansion (backward, recompute, optimizer) and
the activation memory that follows from it.

Fusion ``default``:
* element-wise ops that directly follow a GEMM or convolution with the same output size and can run
  in an epilogue (bias add, activation, dropout, residual add) are folded into that GEMM's epilogue
  (cuBLASLt / CUTLASS epilogues; in training an activation's input is written as an extra output);
* the remaining runs of consecutive element-wise ops of equal size become one kernel;
* attention stays one fused (FlashAttention-style) kernel.
Fusion ``none`` (eager PyTorch): every op is its own kernel; attention is lowered to QK^T, scale,
mask (causal or padding), softmax, (dropout), AV, and functions that models write as several tensor ops
run as one kernel per tensor op: GPT-2's GELU, gated MLPs and rotary embeddings
(:data:`~gpusim.workload.ops.EAGER_COMPOSITIONS`) and RMSNorm (:func:`eager_rmsnorm_ops`). RMSNorm and
the gated MLPs as Llama's reference code, Hugging Face and torchtitan write them; rotary embedding in
Hugging Face's ``rotate_half`` form (the negation of a half, the concatenation, two products and the
sum; its gradient fills and copies the two slices), or with ``config.rotary_form: complex`` as the
reference code and torchtitan multiply complex numbers in FP32 (:func:`eager_complex_rotary_ops`);
grouped-query keys and values copied out to the query heads before attention (:func:`_eager_kv_repeats`).
Fusion ``attention_only`` (eager PyTorch whose model code calls a FlashAttention kernel, as
llm-foundry's MPT does): as ``none``, but attention stays its fused kernel.
Fusion ``megatron`` (Megatron-LM's hand-fused kernels around plain cuBLAS GEMMs, as GPT training ran
before fused attention kernels): a GEMM takes a lone bias into its epilogue (``F.linear`` with a bias)
but nothing else; the element-wise runs after it merge into one kernel (the fused bias-GeLU and
bias-dropout-add); attention is lowered to QK^T (the scale in its alpha), one fused scale-mask-softmax
kernel, dropout and AV.

Training, per micro-batch: the forward kernels; then, layer by layer in reverse, the recomputed
forward (activation checkpointing), then for each op in reverse its backward kernels: the backward
of its element-wise epilogue, the input-gradient (dgrad) GEMM and the weight-gradient (wgrad) GEMM;
then, once per step, one optimizer update per layer that has parameters. With gradient accumulation
the forward, recompute and backward nodes have ``repeat`` = number of micro-batches.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from gpusim.workload.graph import OpNode
from gpusim.workload.layers import (FwdOp, Layer, attention_kept_bytes, kept_when_recomputed,
                                   replicated_without_sequence_parallel, saved_bytes)
from gpusim.workload.ops import (
    EAGER_BACKWARD_COMPOSITIONS,
    EAGER_COMPOSITIONS,
    EAGER_INDEX_DIMS,
    EAGER_STEP_ELEMENTS,
    ELEMENTWISE_FUNCTIONS,
    MASK_BYTES,
    VECTOR_DTYPES,
    Attention,
    BatchNorm,
    Conv2d,
    Elementwise,
    Embedding,
    LayerNorm,
    Matmul,
    Op,
    OptimizerUpdate,
    Pool2d,
    Reduction,
    RMSNorm,
    Softmax,
    dtype_bytes,
)
from gpusim.workload.precision import PrecisionPolicy


# ------------------------------------------------------------------------------------ lowering


SCORE_MASK_INDEX_DIMS = {"scale": 0, "mask_add": 3, "mask_fill": 2}
"""Index dimensions of eager attention's score kernels (:attr:`Elementwise.index_dims`): the scale is
contiguous; a padding mask (batch, 1, 1, keys) added to the (batch, heads, queries, keys) scores
broadcasts over heads and queries (keys, heads x queries, batch: 3); a causal mask (1, 1, queries,
keys) broadcasts over batch and heads (queries x keys, batch x heads: 2). An ALiBi bias is added as
a padding mask is."""


def _lower_attention(f: FwdOp, training: bool, fused_softmax: bool = False) -> list[FwdOp]:
    """Unfused attention's kernels. ``fused_softmax``: the scale runs in the QK^T GEMM's alpha and the
    mask (or score bias) inside the softmax kernel, as Megatron-LM's FusedScaleMaskSoftmax does."""
    op = f.op
    assert isinstance(op, Attention)
    qk, softmax, av = replace(op, kernel="unfused").decompose()
    group = f.recompute_group
    q_bytes, kv_bytes = op._q_bytes(), op._kv_bytes()
    probs_bytes = softmax.elements() * dtype_bytes(softmax.dtype)
    out = [FwdOp(f"{f.name}_qk", qk, saved_bytes=q_bytes + kv_bytes, recompute_group=group, kept_bytes=q_bytes + kv_bytes)]
    # eager code scales the scores (a matmul call has no alpha) and masks them in kernels of their
    # own: a causal mask with torch.where, an encoder's padding mask by adding it (BERT-style models
    # add it even when nothing is padded); an ALiBi bias is added like a padding mask (MPT's torch
    # attention: scale, add the bias, then mask)
    steps = ("scale",) + (("alibi_add",) if op.score_bias else ()) + (("mask_fill",) if op.causal else ("mask_add",))
    if fused_softmax:
        steps = ()
    for step in steps:
        function = "mask_add" if step == "alibi_add" else step
        score_op = Elementwise(num_elements=softmax.elements(), function=function, dtype=softmax.dtype,
                               index_dims=SCORE_MASK_INDEX_DIMS[function])
        out.append(FwdOp(f"{f.name}_{step}", score_op, saved_bytes=0.0, recompute_group=group))
    out.append(FwdOp(f"{f.name}_softmax", softmax, saved_bytes=probs_bytes, recompute_group=group))
    dropout = training and f.attention_dropout
    if dropout:
        out.append(FwdOp(f"{f.name}_dropout", Elementwise(num_elements=softmax.elements(), function="dropout",
                                                            dtype=softmax.dtype), recompute_group=group))
    # AV keeps V, and the dropped-out probabilities when they differ from the softmax output.
    av_saved = kv_bytes + (probs_bytes if dropout else 0.0)
    out.append(FwdOp(f"{f.name}_av", av, saved_bytes=av_saved, recompute_group=group, kept_bytes=kv_bytes))
    return out


def _result_elements(op: Op) -> int:
    if isinstance(op, Matmul):
        return op.batch * op.m * op.n
    assert isinstance(op, Conv2d)
    return op.output_elements()


FP8_CAST_DTYPE = "bf16"
"""What FP8 GEMM operands are quantized from (Transformer Engine keeps activations and gradients in BF16)."""


def _with_fp8_casts(ops: tuple[FwdOp, ...], training: bool) -> tuple[FwdOp, ...]:
    """Insert the quantization kernels of FP8 linear layers (Transformer Engine ``te.Linear``): before
    each FP8 GEMM with a weight, its BF16 input is cast to FP8 and, in training, the BF16 working
    weight too; training casts transpose as well (the backward GEMMs read the transposed copies).
    Inference reads FP8 weights stored as such. Norm-fused casts (``te.LayerNormLinear``) are not
    modelled: every cast is its own memory-bound kernel."""
    if not any(f.fp8_weight_gemm for f in ops):
        return ops
    function = "fp8_cast_transpose" if training else "fp8_cast"
    out: list[FwdOp] = []
    for f in ops:
        if f.fp8_weight_gemm:
            op = f.op
            out.append(FwdOp(f"{f.name}_fp8_input", Elementwise(num_elements=op.batch * op.m * op.k, function=function,
                                                                 dtype=FP8_CAST_DTYPE),
                             input_grad=False, saved_bytes=0.0, recompute_group=f.recompute_group))
            if training:
                out.append(FwdOp(f"{f.name}_fp8_weight", Elementwise(num_elements=op.num_b_matrices * op.k * op.n,
                                                                      function=function, dtype=FP8_CAST_DTYPE),
                                 input_grad=False, saved_bytes=0.0, recompute_group=f.recompute_group,
                                 weight_cast=True))
        out.append(f)
    return tuple(out)


def lower_layer(ops: Sequence[FwdOp], fusion: str, training: bool) -> tuple[FwdOp, ...]:
    """Apply the fusion policy to a layer's forward ops (see the module docstring), then add the FP8
    quantization kernels of FP8 linear layers."""
    return _with_fp8_casts(_fuse(ops, fusion, training), training)


def _fused_attention(f: FwdOp) -> bool:
    """A forward attention op that runs as one fused kernel (the fusions that unfuse it lower it)."""
    return isinstance(f.op, Attention) and f.op.kernel != "unfused" and f.op.variant == "forward"


def eager_rmsnorm_ops(rows: int, cols: int, dtype: str, weight_dtype: str | None = None
                      ) -> list[tuple[str, Op, float]]:
    """RMSNorm as Llama's reference code, Hugging Face and torchtitan write it in PyTorch, one kernel per
    tensor op: ``(x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight``,
    as (step, op, bytes autograd keeps). The kernels a profile of it shows
    (measurements/h200_sxm_141gb/block_kernels.csv): the cast up, the square, the row mean, the
    epsilon, the reciprocal root, the normalizing product, the cast back, the weight product (no casts
    for FP32 input); the two products broadcast an operand over the rows (2 index dimensions, see
    :attr:`~gpusim.workload.ops.Elementwise.index_dims`). Autograd keeps the FP32 input (once), the
    row statistic and the normalized rows for the weight's gradient. A ``weight_dtype`` wider than ``dtype`` (an FP32 weight, as
    Liger-Kernel's benchmark builds it) promotes the last product to it."""
    n = rows * cols
    out_dtype = weight_dtype or dtype
    steps: list[tuple[str, Op, float]] = [
        ("cast", Elementwise(num_elements=n, function="cast", dtype="fp32", input_dtype=dtype), 0.0),
        ("square", Elementwise(num_elements=n, function="square", dtype="fp32"), 4.0 * n),
        ("mean", Reduction(num_elements=n, num_outputs=rows, function="mean", dtype="fp32"), 0.0),
        ("eps", Elementwise(num_elements=rows, function="shift", dtype="fp32"), 0.0),
        ("rsqrt", Elementwise(num_elements=rows, function="rsqrt", dtype="fp32"), 4.0 * rows),
        ("normalize", Elementwise(num_elements=n, function="mul_bcast", dtype="fp32", broadcast_elements=rows,
                                  index_dims=2), 0.0),
        ("cast_back", Elementwise(num_elements=n, function="cast", dtype=dtype, input_dtype="fp32"), 0.0),
        ("weight", Elementwise(num_elements=n, function="mul_bcast", dtype=out_dtype,
                               input_dtype=None if out_dtype == dtype else dtype, broadcast_elements=cols,
                               index_dims=2),
         n * dtype_bytes(dtype)),
    ]
    return [s for s in steps if dtype != "fp32" or s[0] not in ("cast", "cast_back")]


def _share(elements: int, share: float) -> int:
    """``share`` of ``elements``, at least one."""
    return max(1, round(elements * share))


EAGER_COMPLEX_ROTARY_INDEX_DIMS = 3
"""Index dimensions of the complex product of the complex rotary form: the (tokens, 1, pairs) table
broadcast over heads keeps pairs, heads and tokens apart."""


def eager_complex_rotary_ops(elements: int, dtype: str) -> list[tuple[str, Elementwise]]:
    """Rotary embedding as Meta's reference code and torchtitan write it, one kernel per tensor op:
    ``view_as_real(view_as_complex(x.float().reshape(..., -1, 2)) * freqs_cis).flatten(3).type_as(x)``:
    the cast up to FP32, the complex product with the broadcast table (its pairs counted as
    ``elements`` FP32 values) and the cast back. Autograd runs each step's gradient (the casts
    swapped, a product with the conjugate table); nothing is kept."""
    return [("cast", Elementwise(num_elements=elements, function="cast", dtype="fp32", input_dtype=dtype)),
            ("product", Elementwise(num_elements=elements, function="mul_table", dtype="fp32",
                                    index_dims=EAGER_COMPLEX_ROTARY_INDEX_DIMS)),
            ("cast_back", Elementwise(num_elements=elements, function="cast", dtype=dtype, input_dtype="fp32"))]


def _eager_rmsnorm(f: FwdOp) -> list[FwdOp]:
    """An RMSNorm forward op as its eager kernels (:func:`eager_rmsnorm_ops`); the weight product
    carries the parameters."""
    return [replace(f, name=f"{f.name}_{i}_{name}", op=step, saved_bytes=saved, norm_step=True,
                    num_parameters=f.num_parameters if name == "weight" else 0)
            for i, (name, step, saved) in enumerate(eager_rmsnorm_ops(f.op.rows, f.op.cols, f.op.dtype))]


EAGER_KV_REPEAT_INDEX_DIMS = 4
"""Index dimensions of the copy that repeats grouped-query keys or values over the query heads
(:func:`_eager_kv_repeats`): the head dimension, the repeat (stride 0 in the source) and the tokens
of a transposed projection view cannot merge (measurements/h200_sxm_141gb/block_kernels.csv: the
copy runs PyTorch's index-computing ``elementwise_kernel<128, 4>`` with ``direct_copy_kernel_cuda``)."""


def _eager_kv_repeats(f: FwdOp) -> list[FwdOp]:
    """The copies eager model code makes of grouped-query keys and values before attention: Hugging
    Face's ``repeat_kv`` and torchtitan's (``expand`` then ``reshape``) and ``repeat_interleave``
    write K and V out at the query heads' count, since PyTorch's attention kernels of 2023-2024 take
    equal head counts. Each copy reads the source once and writes the repeated tensor; the attention
    kernel keeps the repeated tensors for its backward, so each copy adds the bytes its output holds
    beyond the source's, which the attention op counts. Its gradient sums over the repeat (a
    reduction, :func:`backward_ops`). None where every query head has its own key head."""
    att = f.op
    assert isinstance(att, Attention)
    if att.num_kv_heads >= att.heads:
        return []
    elements = att.batch * att.heads * att.seq_len_kv * att.head_dim
    source = att.batch * att.num_kv_heads * att.seq_len_kv * att.head_dim
    dtype = att.kv_dtype or att.dtype
    repeat = Elementwise(num_elements=elements, function="expand", dtype=dtype, broadcast_elements=source,
                         index_dims=EAGER_KV_REPEAT_INDEX_DIMS)
    extra = (elements - source) * dtype_bytes(dtype)
    return [FwdOp(f"{f.name}_repeat_{t}", repeat, saved_bytes=extra, input_grad=f.input_grad) for t in ("k", "v")]


def _fuse(ops: Sequence[FwdOp], fusion: str, training: bool) -> tuple[FwdOp, ...]:
    if fusion == "megatron":
        ops = tuple(x for f in ops
                    for x in (_lower_attention(f, training, fused_softmax=True) if _fused_attention(f) else (f,)))
    if fusion in ("none", "attention_only"):
        out: list[FwdOp] = []
        for f in ops:
            if isinstance(f.op, Attention) and f.op.variant == "forward":
                out.extend(_eager_kv_repeats(f))
            if fusion == "none" and _fused_attention(f):
                out.extend(_lower_attention(f, training))
            elif isinstance(f.op, Elementwise) and f.op.function in EAGER_COMPOSITIONS:
                dims = EAGER_INDEX_DIMS.get(f.op.function, 0)
                out.extend(replace(f, name=f"{f.name}_{i}_{step}", saved_bytes=None,
                                   op=replace(f.op, function=step, index_dims=dims,
                                              num_elements=_share(f.op.num_elements, EAGER_STEP_ELEMENTS.get(step, 1.0))),
                                   num_parameters=f.num_parameters if i == 0 else 0)
                           for i, step in enumerate(EAGER_COMPOSITIONS[f.op.function]))
            elif isinstance(f.op, Elementwise) and f.op.function == "rotary_complex":
                out.extend(replace(f, name=f"{f.name}_{i}_{name}", op=step, saved_bytes=0.0)
                           for i, (name, step) in enumerate(eager_complex_rotary_ops(f.op.num_elements, f.op.dtype)))
            elif isinstance(f.op, RMSNorm) and f.op.variant == "forward":
                out.extend(_eager_rmsnorm(f))
            else:
                out.append(f)
        return tuple(out)
    out = []
    i = 0
    while i < len(ops):
        f = ops[i]
        op = f.op
        if isinstance(op, (Matmul, Conv2d)) and getattr(op, "variant", "forward") == "forward" and f.weight:
            elements = _result_elements(op)
            epilogue = list(op.epilogue)
            params = f.num_parameters
            j = i + 1
            while j < len(ops):
                g = ops[j].op
                if not (isinstance(g, Elementwise) and g.num_elements == elements and len(g.functions) == 1
                        and ELEMENTWISE_FUNCTIONS[g.function].epilogue):
                    break
                epilogue.append(g.function)
                params += ops[j].num_parameters
                j += 1
            if fusion == "megatron" and epilogue[len(op.epilogue):] != ["bias_add"]:
                j = i + 1  # only a lone bias goes into the GEMM; longer runs merge below
            if j > i + 1:
                aux = sum(1 for fn in epilogue if ELEMENTWISE_FUNCTIONS[fn].saves == "input") if training else 0
                new_op = replace(op, epilogue=tuple(epilogue), epilogue_aux_outputs=aux)
                out.append(replace(f, op=new_op, num_parameters=params))
                i = j
                continue
        if isinstance(op, Elementwise):
            j = i + 1
            functions = list(op.functions)
            params = f.num_parameters
            broadcast = op.broadcast_elements
            while j < len(ops):
                g = ops[j].op
                if not (isinstance(g, Elementwise) and g.num_elements == op.num_elements and g.dtype == op.dtype):
                    break
                functions.extend(g.functions)
                params += ops[j].num_parameters
                broadcast += g.broadcast_elements
                j += 1
            if j > i + 1:
                fused = Elementwise(num_elements=op.num_elements, function="+".join(functions), dtype=op.dtype,
                                    broadcast_elements=broadcast)
                out.append(FwdOp(f.name, fused, num_parameters=params, input_grad=f.input_grad,
                                 recompute_group=f.recompute_group))
                i = j
                continue
        out.append(f)
        i += 1
    return tuple(out)


class Lowering:
    """Lowers each distinct layer op tuple once (identical layers share the result and its op values)."""

    def __init__(self, fusion: str, training: bool) -> None:
        self.fusion = fusion
        self.training = training
        self._cache: dict[int, tuple[tuple[FwdOp, ...], tuple[FwdOp, ...]]] = {}

    def __call__(self, layer: Layer) -> tuple[FwdOp, ...]:
        key = id(layer.ops)
        hit = self._cache.get(key)
        if hit is None or hit[0] is not layer.ops:
            hit = (layer.ops, lower_layer(layer.ops, self.fusion, self.training))
            self._cache[key] = hit
        return hit[1]


# ------------------------------------------------------------------------------------ backward


def _vector_dtype(dtype: str) -> str:
    return dtype if dtype in VECTOR_DTYPES else ("fp32" if dtype == "tf32" else "bf16")


def _epilogue_backward(epilogue: tuple[str, ...], elements: int, dtype: str) -> list[tuple[str, Op]]:
    functions = [ELEMENTWISE_FUNCTIONS[fn].backward for fn in reversed(epilogue)]
    functions = [fn for fn in functions if fn is not None]
    if not functions:
        return []
    return [("epilogue_grad", Elementwise(num_elements=elements, function="+".join(functions),
                                          dtype=_vector_dtype(dtype)))]


def backward_ops(f: FwdOp, grad_accumulation: bool, fusion: str) -> list[tuple[str, Op]]:
    """The backward kernels of one forward op, in execution order, as (name suffix, op)."""
    op = f.op
    out: list[tuple[str, Op]] = []
    if isinstance(op, Matmul):
        if f.split_output and fusion in ("none", "attention_only"):
            out.append(("split_grad", Elementwise(num_elements=op.batch * op.m * op.n, function="copy",
                                                  dtype=_vector_dtype(op.out_dtype))))
        out += _epilogue_backward(op.epilogue, op.batch * op.m * op.n, op.out_dtype)
        fp8 = f.fp8_weight_gemm
        if fp8:
            # the output gradient is quantized (and transposed) for the FP8 dgrad and wgrad GEMMs
            out.append(("fp8_grad", Elementwise(num_elements=op.batch * op.m * op.n, function="fp8_cast_transpose",
                                                dtype=FP8_CAST_DTYPE)))
        # Transformer Engine runs both gradient GEMMs with a split FP32 accumulator and the forward one
        # without (transformer_engine/pytorch/module/base.py: _2X_ACC_FPROP False, _2X_ACC_DGRAD and
        # _2X_ACC_WGRAD True); torchao's float8 training makes the same choice
        if f.input_grad:
            out.append(("dgrad", replace(op, m=op.m, n=op.k, k=op.n, transpose_b=not op.transpose_b, epilogue=(),
                                         epilogue_aux_outputs=0, accumulate_output=False, tile=None,
                                         split_accumulator=fp8)))
        if f.weight:
            shared = op.num_b_matrices == 1 and op.batch > 1
            wgrad = Matmul(m=op.k, n=op.n, k=op.m * (op.batch if shared else 1), batch=1 if shared else op.batch,
                           dtype=op.dtype, accumulate_dtype=op.accumulate_dtype, transpose_a=True,
                           accumulate_output=grad_accumulation, split_accumulator=fp8)
            # a bias in the epilogue: its gradient is reduced in the wgrad epilogue
            if "bias_add" in op.epilogue:
                wgrad = replace(wgrad, epilogue=())
            out.append(("wgrad", wgrad))
        elif f.input_grad:
            out.append(("dgrad_b", Matmul(m=op.k, n=op.n, k=op.m, batch=op.batch, dtype=op.dtype,
                                          accumulate_dtype=op.accumulate_dtype, transpose_a=True)))
        return out
    if isinstance(op, Conv2d):
        out += _epilogue_backward(op.epilogue, op.output_elements(), op.out_dtype)
        base = replace(op, epilogue=(), epilogue_aux_outputs=0, accumulate_output=False)
        if f.input_grad:
            out.append(("dgrad", replace(base, variant="dgrad")))
        if f.weight:
            out.append(("wgrad", replace(base, variant="wgrad", accumulate_output=grad_accumulation)))
        return out
    if isinstance(op, Attention):
        return [("grad", replace(op, variant="backward"))]
    if isinstance(op, Softmax):
        if f.loss:
            return [("grad", Elementwise(num_elements=op.elements(), function="cross_entropy_backward",
                                         dtype=op.dtype))]
        return [("grad", replace(op, variant="backward"))]
    if isinstance(op, (LayerNorm, RMSNorm, BatchNorm)):
        return [("grad", replace(op, variant="backward"))]
    if isinstance(op, Elementwise):
        functions = [ELEMENTWISE_FUNCTIONS[fn].backward for fn in reversed(op.functions)]
        functions = [fn for fn in functions if fn is not None]
        eager = fusion in ("none", "attention_only")
        if f.input_grad and f.norm_step and eager and op.function == "cast" and op.dtype == "fp32":
            # the FP32 copy of an eager norm's input feeds the square and the normalizing product:
            # autograd adds their two gradients before the cast's
            out.append(("grad_accumulate", Elementwise(num_elements=op.num_elements, function="add", dtype="fp32")))
        if functions and f.input_grad:
            # a cast's gradient is cast back: the dtypes swap
            dtype, input_dtype = ((op.input_dtype, op.dtype) if op.function == "cast" and op.input_dtype
                                  not in (None, op.dtype) else (op.dtype, None))
            broadcast = op.broadcast_elements if "mul_bcast" in op.functions else 0
            if eager and len(functions) == 1 and functions[0] in EAGER_BACKWARD_COMPOSITIONS:
                for i, step in enumerate(EAGER_BACKWARD_COMPOSITIONS[functions[0]]):
                    fn, share, dims = step if isinstance(step, tuple) else (step, 1.0, None)
                    out.append((f"grad_{i}_{fn}", Elementwise(
                        num_elements=_share(op.num_elements, share), function=fn, dtype=op.dtype,
                        index_dims=op.index_dims if dims is None else dims)))
            else:
                # the gradient runs over the same operand layouts as the forward
                out.append(("grad", Elementwise(num_elements=op.num_elements, function="+".join(functions),
                                                dtype=dtype, input_dtype=input_dtype, broadcast_elements=broadcast,
                                                index_dims=op.index_dims)))
        if op.functions == ("expand",) and op.broadcast_elements and f.input_grad:
            # a repeated tensor's gradient sums the repeats (autograd's sum over the expanded dimension)
            out.append(("grad", Reduction(num_elements=op.num_elements, num_outputs=op.broadcast_elements,
                                          dtype=op.dtype)))
        if "bias_add" in op.functions and op.broadcast_elements:
            out.append(("bias_grad", Reduction(num_elements=op.num_elements, num_outputs=op.broadcast_elements,
                                               dtype=op.dtype)))
        if op.functions == ("mul_bcast",) and op.broadcast_elements:
            # the broadcast operand's gradient (a weight vector's, a row statistic's): the product of
            # the output gradient and the saved input, then its sum over the broadcast dimension
            out.append(("operand_mul", Elementwise(num_elements=op.num_elements, function="mul", dtype=op.dtype)))
            out.append(("operand_grad", Reduction(num_elements=op.num_elements, num_outputs=op.broadcast_elements,
                                                  dtype=op.dtype)))
        return out
    if isinstance(op, Reduction):
        # the gradient of a sum or a mean is the output gradient broadcast back to the input's size
        if f.input_grad and op.function in ("sum", "mean"):
            out.append(("grad", Elementwise(num_elements=op.num_elements, function="expand", dtype=op.dtype,
                                            broadcast_elements=op.num_outputs)))
        return out
    if isinstance(op, Embedding):
        return [("grad", replace(op, variant="backward"))]
    if isinstance(op, Pool2d):
        return [("grad", replace(op, variant="backward"))] if f.input_grad else []
    return []


class BackwardCache:
    def __init__(self, grad_accumulation: bool, fusion: str) -> None:
        self.grad_accumulation = grad_accumulation
        self.fusion = fusion
        self._cache: dict[int, tuple[FwdOp, list[tuple[str, Op]]]] = {}

    def __call__(self, f: FwdOp) -> list[tuple[str, Op]]:
        hit = self._cache.get(id(f))
        if hit is None or hit[0] is not f:
            hit = (f, backward_ops(f, self.grad_accumulation, self.fusion))
            self._cache[id(f)] = hit
        return hit[1]


# ------------------------------------------------------------------------------- expansions


def training_nodes(layers: Sequence[Layer], *, fusion: str, checkpointing: str, micro_batches: int,
                   optimizer: str, policy: PrecisionPolicy, clip_gradients: bool = False,
                   fp8_weights_per_step: bool = False) -> list[OpNode]:
    """Forward, recompute, backward and optimizer nodes of one training step (in order). With
    ``clip_gradients`` the optimizer phase starts with a sum-of-squares pass over each layer's
    gradients (``<layer>.grad_norm``, in the policy's gradient dtype), the local part of the global
    gradient norm. With ``fp8_weights_per_step`` the FP8 weight casts run in the first micro-batch's
    forward only (repeat 1, ``OpNode.once_per_step``) and are not recomputed: the FP8 copies are kept
    for the step's other micro-batches."""
    lower = Lowering(fusion, training=True)
    backward = BackwardCache(micro_batches > 1, fusion)
    nodes: list[OpNode] = []
    r = micro_batches

    def cached(f: FwdOp) -> bool:
        return fp8_weights_per_step and f.weight_cast

    for layer in layers:
        for f in lower(layer):
            nodes.append(OpNode(f"{layer.name}.{f.name}", f.op, (), "forward", layer.index, 1 if cached(f) else r,
                                once_per_step=cached(f)))
    for layer in reversed(layers):
        lowered = [f for f in lower(layer) if not cached(f)]
        if checkpointing == "full" and layer.checkpointable:
            for f in lowered:
                nodes.append(OpNode(f"{layer.name}.{f.name}.recompute", f.op, (), "recompute", layer.index, r))
        elif checkpointing == "selective":
            for f in lowered:
                if f.recompute_group is not None:
                    nodes.append(OpNode(f"{layer.name}.{f.name}.recompute", f.op, (), "recompute", layer.index, r))
        for f in reversed(lowered):
            for suffix, op in backward(f):
                nodes.append(OpNode(f"{layer.name}.{f.name}.{suffix}", op, (), "backward", layer.index, r))
    if clip_gradients:
        for layer in layers:
            params = layer.num_parameters()
            if params:
                op = Reduction(num_elements=params, function="sum_squares", dtype=policy.grad_dtype)
                nodes.append(OpNode(f"{layer.name}.grad_norm", op, (), "optimizer", layer.index, 1))
    update_cache: dict[int, OptimizerUpdate] = {}
    for layer in layers:
        params = layer.num_parameters()
        if params:
            op = update_cache.get(params)
            if op is None:
                op = update_cache[params] = OptimizerUpdate(
                    num_parameters=params, optimizer=optimizer, dtype=policy.weight_dtype,
                    master_weights=policy.master_weights)
            nodes.append(OpNode(f"{layer.name}.optimizer", op, (), "optimizer", layer.index, 1))
    return nodes


def forward_nodes(layers: Sequence[Layer], *, fusion: str, phase: str, prefix: str = "",
                  repeat: int = 1) -> list[OpNode]:
    lower = Lowering(fusion, training=False)
    nodes = []
    for layer in layers:
        for f in lower(layer):
            nodes.append(OpNode(f"{prefix}{layer.name}.{f.name}", f.op, (), phase, layer.index, repeat))
    return nodes


# ------------------------------------------------------------------------------ activations


def training_activation_bytes(layers: Sequence[Layer], *, fusion: str, checkpointing: str, tensor: int = 1,
                              sequence_parallel: bool = True) -> tuple[float, float]:
    """(kept, recompute buffer): the activation bytes one tensor rank keeps from the forward of one
    micro-batch until its backward (see :func:`saved_bytes`), and those it holds only while a layer
    is recomputed (the same for every micro-batch, needed once at a time).

    ``full``: each checkpointable layer keeps only its input, and one layer's full activations are
    the recompute buffer; ``selective``: the recompute groups (the attention core) keep only their
    inputs. Tensor parallelism over ``tensor`` ranks splits them all with ``sequence_parallel``;
    without it the norms' inputs, the column-parallel GEMMs' input, the dropout masks on the hidden
    state and a checkpointed layer's input stay whole on every rank
    (:func:`replicated_without_sequence_parallel`)."""
    lower = Lowering(fusion, training=True)
    per_layer: dict[int, tuple[float, float, float]] = {}
    split = whole = 0.0  # bytes split over the tensor ranks / kept whole on each
    largest_recomputed = (0.0, 0.0)
    for layer in layers:
        key = id(layer.ops)
        if key not in per_layer:
            lowered = lower(layer)
            per_layer[key] = (sum(saved_bytes(f) for f in lowered), sum(kept_when_recomputed(f) for f in lowered),
                              sum(replicated_without_sequence_parallel(f) for f in lowered))
        full, selective, replicated = per_layer[key]
        if checkpointing == "full" and layer.checkpointable:
            whole += layer.input_bytes
            if full > sum(largest_recomputed):
                largest_recomputed = (full - replicated, replicated)
        else:
            kept = selective if checkpointing == "selective" else full
            split += kept - replicated
            whole += replicated

    def per_rank(split_bytes: float, whole_bytes: float) -> float:
        return (split_bytes + whole_bytes) / tensor if sequence_parallel else split_bytes / tensor + whole_bytes

    return per_rank(split, whole), per_rank(*largest_recomputed)


def inference_activation_bytes(layers: Sequence[Layer], fusion: str) -> float:
    """Peak live activations of a forward pass without saving: the largest layer input (the residual
    stream) plus the largest single kernel's activation inputs and outputs (weights excluded)."""
    lower = Lowering(fusion, training=False)
    largest_io = 0.0
    for layer in layers:
        for f in lower(layer):
            op = f.op
            io = op.bytes_read() + op.bytes_written()
            if isinstance(op, Matmul) and f.weight:
                io -= op.num_b_matrices * op.k * op.n * dtype_bytes(op.dtype)
            elif isinstance(op, Conv2d):
                io -= op.num_weights * dtype_bytes(op.dtype)
            largest_io = max(largest_io, io)
    return max((l.input_bytes for l in layers), default=0.0) + largest_io


__all__ = [
    "lower_layer", "Lowering", "backward_ops", "training_nodes", "forward_nodes", "training_activation_bytes",
    "inference_activation_bytes", "attention_kept_bytes", "MASK_BYTES",
]
