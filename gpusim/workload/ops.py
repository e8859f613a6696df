"""Operators: frozen, hashable values with pure FLOP and byte counts.

Conventions (every op follows them, so totals can be compared and conserved):

* **FLOP**: a multiply-accumulate is 2 FLOP. ``flop()`` is the *model* FLOP of an op, the count the
  usual MFU formulas use: ``matrix_flop()`` (tensor-core work) plus ``vector_flop()`` (element-wise
  work on CUDA cores). ``executed_flop()`` is what a kernel actually has to execute; it differs only
  where a kernel skips work (causal fused attention skips the masked half, see :class:`Attention`)
  or redoes work (the fused attention backward recomputes the score matrix).
* **Bytes**: ``bytes_read()`` / ``bytes_written()`` are the minimum HBM (DRAM) traffic of one
  launch: every input read once, every output written once, no cache reuse assumed between ops.
  Element sizes come from :data:`gpusim.config.hardware.DTYPE_BYTES`. Broadcast operands (biases,
  norm weights, rotary tables) are counted where they are not negligible by construction.
* **Dtypes**: every op has a ``dtype`` (one of fp64 fp32 tf32 fp16 bf16 fp8 int8 fp4). GEMMs in
  FP8/INT8/FP4 write BF16 results (:meth:`Matmul.out_dtype`), as Transformer Engine and cuBLASLt do.
* ``kind`` is the YAML ``op`` value; ``category`` tells the mapper which pipe does the work:
  ``matrix`` (tensor cores), ``vector`` (CUDA cores, element-wise and reductions), ``memory``
  (copies), ``transfer`` (host link) or ``collective`` (multi-GPU).

Element-wise costs per element (``flop_per_element``) are approximate operation counts (a
transcendental such as exp or tanh counts as 1 FLOP); they matter only for small, memory-bound
kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from gpusim.config.hardware import DTYPE_BYTES, DTYPES

FLOAT_DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "fp4")
VECTOR_DTYPES = ("fp64", "fp32", "fp16", "bf16")
"""Element-wise, normalization and reduction kernels compute in these (TF32/FP8/FP4 are tensor-core
input formats, INT8 a quantized GEMM format)."""
ACCUMULATE_DTYPES = ("fp16", "fp32", "fp64", "int32")
STATS_BYTES = 4.0
"""Per-row statistics (mean, rstd, log-sum-exp) are kept in FP32."""
INDEX_BYTES = 8.0
"""Token ids and pooling indices are int64 (PyTorch's default)."""
MASK_BYTES = 1.0
"""A dropout mask is one byte per element (PyTorch's bool mask)."""


def dtype_bytes(dtype: str) -> float:
    return float(DTYPE_BYTES[dtype])


# ---------------------------------------------------------------------------------- element-wise


@dataclass(frozen=True)
class ElementwiseFunction:
    """Cost of one element-wise function, per output element."""

    name: str
    num_inputs: int
    num_outputs: int
    flop_per_element: float
    extra_read_bytes_per_element: float = 0.0
    """Bytes per element read besides the dtype-sized inputs (a dropout mask in the backward)."""
    extra_write_bytes_per_element: float = 0.0
    """Bytes per element written besides the dtype-sized outputs (the dropout mask)."""
    backward: str | None = None
    """The function that computes the input gradient(s); None where no kernel is needed."""
    saves: str = "none"
    """What training keeps for the backward: none, input (the first input), inputs (all), mask."""
    epilogue: bool = False
    """Can run in a GEMM epilogue (applied to the GEMM output as it is written)."""


def _f(*args: Any, **kwargs: Any) -> ElementwiseFunction:
    return ElementwiseFunction(*args, **kwargs)


ELEMENTWISE_FUNCTIONS: dict[str, ElementwiseFunction] = {f.name: f for f in (
    _f("add", 2, 1, 1, backward="add", epilogue=True),
    _f("sub", 2, 1, 1, backward="add"),
    _f("mul", 2, 1, 1, backward="mul_backward", saves="inputs"),
    _f("div", 2, 1, 1, backward="mul_backward", saves="inputs"),
    _f("scale", 1, 1, 1, backward="scale", epilogue=True),
    _f("bias_add", 1, 1, 1, backward=None, epilogue=True),
    _f("scale_shift", 1, 1, 2, backward=None, epilogue=True),
    _f("relu", 1, 1, 1, backward="relu_backward", saves="input", epilogue=True),
    _f("gelu", 1, 1, 10, backward="gelu_backward", saves="input", epilogue=True),
    _f("gelu_new", 1, 1, 10, backward="gelu_backward", saves="input", epilogue=True),
    _f("silu", 1, 1, 4, backward="silu_backward", saves="input", epilogue=True),
    _f("sigmoid", 1, 1, 3, backward="sigmoid_backward", saves="input", epilogue=True),
    _f("tanh", 1, 1, 1, backward="tanh_backward", saves="input", epilogue=True),
    _f("exp", 1, 1, 1, backward="mul", saves="input"),
    _f("swiglu", 2, 1, 5, backward="swiglu_backward", saves="inputs"),
    _f("geglu", 2, 1, 11, backward="geglu_backward", saves="inputs"),
    _f("dropout", 1, 1, 2, extra_write_bytes_per_element=MASK_BYTES, backward="dropout_backward", saves="mask",
       epilogue=True),
    _f("rotary", 1, 1, 3, backward="rotary_backward"),
    _f("rotary_complex", 1, 1, 3, backward="rotary_backward"),  # the same function written as complex products
    _f("cast", 1, 1, 0, backward="cast"),
    # the steps of functions that eager model code writes as tensor ops (EAGER_COMPOSITIONS, _eager_rmsnorm)
    _f("square", 1, 1, 1, backward="square_backward", saves="input"),
    _f("rsqrt", 1, 1, 2, backward="rsqrt_backward", saves="input"),
    _f("mul_bcast", 1, 1, 1, backward="mul_bcast", saves="input"),  # x times a broadcast operand (a row
    # statistic, a weight vector) read once: ``broadcast_elements``
    _f("mul_table", 1, 1, 1, backward="mul_table"),  # x times a constant table (rotary cos / sin): saves nothing
    # rotate_half(x) = cat(-x2, x1) as eager PyTorch runs it: the negation of one half (a slice, whose
    # elements the step counts) and the concatenation of the two strided halves (CatArrayBatchedCopy)
    _f("neg", 1, 1, 1, backward="neg"),
    _f("slice_neg", 1, 1, 1, backward="slice_neg_backward"),
    _f("cat", 1, 1, 0, backward="cat_backward"),
    # a broadcast operand written out at full size (a mean's gradient; eager grouped-query K and V
    # repeated over the query heads)
    _f("expand", 0, 1, 0),
    _f("copy", 1, 1, 0),
    _f("shift", 1, 1, 1),  # x + constant: its gradient passes through unchanged
    _f("cube", 1, 1, 2, backward="cube_backward", saves="input"),
    _f("mask_fill", 1, 1, 0, backward="mask_fill"),  # torch.where(mask, x, c): the mask is a broadcast buffer
    _f("mask_add", 1, 1, 1),  # x + an additive (padding) mask broadcast over heads and queries, or an ALiBi bias
    # FP8 quantization (Transformer Engine): scale and track amax (2 FLOP), write 1 byte per element;
    # the cast-transpose variant also writes the transposed FP8 copy the backward GEMMs read
    _f("fp8_cast", 1, 0, 2, extra_write_bytes_per_element=1.0),
    _f("fp8_cast_transpose", 1, 0, 2, extra_write_bytes_per_element=2.0),
    _f("fill", 0, 1, 0),
    _f("cross_entropy_backward", 1, 1, 2),
    _f("relu_backward", 2, 1, 1),
    _f("gelu_backward", 2, 1, 14),
    _f("silu_backward", 2, 1, 8),
    _f("sigmoid_backward", 2, 1, 3),
    _f("tanh_backward", 2, 1, 3),
    _f("cube_backward", 2, 1, 3),
    _f("square_backward", 2, 1, 2),
    _f("rsqrt_backward", 2, 1, 3),
    _f("mul_backward", 3, 2, 2),
    _f("swiglu_backward", 3, 2, 10),
    _f("geglu_backward", 3, 2, 18),
    _f("dropout_backward", 1, 1, 1, extra_read_bytes_per_element=MASK_BYTES),
    _f("rotary_backward", 1, 1, 3),
    # rotate_half's gradients as one kernel each (the eager lowering runs autograd's steps instead,
    # EAGER_BACKWARD_COMPOSITIONS): the half negated into a zeroed whole; the other half's gradient
    # written into a zeroed whole and added to x's
    _f("slice_neg_backward", 1, 2, 1),
    _f("cat_backward", 2, 1, 1),
)}
"""Known element-wise functions. A fused chain is written ``"bias_add+gelu"``."""

EAGER_COMPOSITIONS: dict[str, tuple[str, ...]] = {
    # GPT-2's GELU as its reference code and Hugging Face's NewGELUActivation write it in Python:
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), one tensor op per step: x^3, scale, add x,
    # scale, tanh, add 1, 0.5 x, multiply
    "gelu_new": ("cube", "scale", "add", "scale", "tanh", "shift", "scale", "mul"),
    # gated MLPs as Llama's reference code, Hugging Face and torchtitan write them: act(gate) * up
    "swiglu": ("silu", "mul"),
    "geglu": ("gelu", "mul"),
    # rotary embedding as Hugging Face's apply_rotary_pos_emb writes it: x * cos + rotate_half(x) * sin,
    # rotate_half(x) = cat(-x[..., half:], x[..., :half]): the negation of the second half, the
    # concatenation, the two products and the sum (measurements/h200_sxm_141gb/block_kernels.csv:
    # neg_kernel_cuda, CatArrayBatchedCopy, two products, an add, for q and for k)
    "rotary": ("mul_table", "slice_neg", "cat", "mul_table", "add"),
}
"""Element-wise functions that eager frameworks run as several kernels, one per tensor op (fusions
``none`` and ``attention_only``); the other fusions run them as one kernel. RMSNorm's eager form is
:func:`gpusim.workload.expand.eager_rmsnorm_ops` (it has a reduction in it)."""

EAGER_STEP_ELEMENTS: dict[str, float] = {"slice_neg": 0.5}
"""Steps of an eager composition that run on a share of its elements: rotary's negation of one half."""

TABLE_OPERAND_FUNCTIONS = frozenset({"mul_bcast", "mul_table", "mask_add", "mask_fill"})
"""Functions with an operand besides their streamed input(s) that the kernel reads from cache for
every element: a broadcast vector (``broadcast_elements``), a constant table or an attention mask."""

EAGER_INDEX_DIMS: dict[str, int] = {
    # gpusim's gated MLP is one projection to 2 x ffn outputs (as Megatron-LM fuses it and the block
    # suite writes it, ``up(x).chunk(2, dim=-1)``): the activation and the product read its halves as
    # chunks with rows 2 x ffn apart (2 dimensions)
    "swiglu": 2,
    "geglu": 2,
    # Hugging Face's apply_rotary_pos_emb works on q and k transposed to (batch, heads, tokens,
    # head_dim) views of the projection's output, with cos / sin tables of (tokens, head_dim)
    # broadcast over heads: head_dim, heads and tokens cannot merge (3 dimensions)
    "rotary": 3,
}
"""Index dimensions (:attr:`Elementwise.index_dims`) of the kernels of an eager composition whose
operands are not all contiguous; compositions not listed (GPT-2's GELU) run on contiguous tensors."""

EAGER_BACKWARD_COMPOSITIONS: dict[str, tuple[str | tuple[str, float, int | None], ...]] = {
    # PyTorch's PowBackward for x.pow(2): grad * (2 * x.pow(1)), x.pow(1) a copy of x
    "square_backward": ("copy", "scale", "mul"),
    # rotate_half's gradient: NegBackward negates the half, then SliceBackward writes it into a zeroed
    # tensor of the whole size (a vectorized fill of twice the half's elements, then a strided copy)
    "slice_neg_backward": ("neg", ("fill", 2.0, 0), "copy"),
    # CatBackward hands each input a view of the gradient; the other half's SliceBackward zero-fills
    # the whole size and copies that half in, and autograd adds it to x's gradient from the product
    # with cos (the rotary sum's own gradient adds the third). The block profile's order per tensor:
    # two products, fill, copy, add, neg, fill, copy, add
    "cat_backward": (("fill", 1.0, 0), ("copy", 0.5, None), "add"),
}
"""Backward functions that PyTorch's autograd runs as several kernels (fusions ``none`` and
``attention_only``), one per tensor op. A step is a function over the forward step's elements and
index dimensions, or (function, share of the elements, index dimensions; None: the step's)."""


def chain_cost(functions: tuple[str, ...]) -> ElementwiseFunction:
    """The cost of element-wise functions applied one after another in one kernel.

    The first function's inputs come from memory; each later function consumes the running value
    and reads its other inputs from memory; every function's side outputs are written, plus the
    final value.
    """
    if not functions:
        raise ValueError("empty element-wise chain")
    parts = [ELEMENTWISE_FUNCTIONS[f] for f in functions]
    first = parts[0]
    num_inputs = first.num_inputs + sum(max(p.num_inputs - 1, 0) for p in parts[1:])
    num_outputs = 1 + sum(p.num_outputs - 1 for p in parts)
    return ElementwiseFunction(
        name="+".join(functions),
        num_inputs=num_inputs,
        num_outputs=num_outputs,
        flop_per_element=sum(p.flop_per_element for p in parts),
        extra_read_bytes_per_element=sum(p.extra_read_bytes_per_element for p in parts),
        extra_write_bytes_per_element=sum(p.extra_write_bytes_per_element for p in parts),
    )


# ----------------------------------------------------------------------------------------- base


@dataclass(frozen=True)
class Op:
    """Base of every operator value."""

    kind: ClassVar[str] = ""
    category: ClassVar[str] = "vector"

    def matrix_flop(self) -> float:
        return 0.0

    def vector_flop(self) -> float:
        return 0.0

    def flop(self) -> float:
        return self.matrix_flop() + self.vector_flop()

    def executed_flop(self) -> float:
        return self.flop()

    def bytes_read(self) -> float:
        raise NotImplementedError

    def bytes_written(self) -> float:
        raise NotImplementedError

    def total_bytes(self) -> float:
        return self.bytes_read() + self.bytes_written()

    def arithmetic_intensity(self) -> float:
        """FLOP per byte of minimum HBM traffic."""
        total = self.total_bytes()
        return self.flop() / total if total > 0 else math.inf

    def describe(self) -> str:
        """A short shape string for tables."""
        parts = [f"{f.name}={getattr(self, f.name)}" for f in fields(self)
                 if f.name not in ("dtype",) and getattr(self, f.name) not in (None, (), False, 0, "forward")]
        return f"{self.kind}[{', '.join(parts)}] {getattr(self, 'dtype', '')}".strip()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op": self.kind}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


def _positive(op: Op, *names: str) -> None:
    for name in names:
        value = getattr(op, name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{op.kind}: {name} must be positive (got {value!r})")


def _check_dtype(op: Op, allowed: tuple[str, ...]) -> None:
    dtype = getattr(op, "dtype")
    if dtype not in DTYPES:
        raise ValueError(f"{op.kind}: unknown dtype {dtype!r}")
    if dtype not in allowed:
        raise ValueError(f"{op.kind}: cannot use dtype {dtype} (allowed: {', '.join(allowed)})")


# --------------------------------------------------------------------------------------- GEMMs


def gemm_output_dtype(dtype: str) -> str:
    """FP8/INT8/FP4 GEMMs write BF16 results; other GEMMs write their input dtype."""
    return "bf16" if dtype in ("fp8", "int8", "fp4") else dtype


def _epilogue_costs(epilogue: tuple[str, ...]) -> tuple[int, int, float, float, float]:
    """(extra inputs, extra outputs, flop/element, extra read B/element, extra write B/element)."""
    if not epilogue:
        return 0, 0, 0.0, 0.0, 0.0
    parts = [ELEMENTWISE_FUNCTIONS[f] for f in epilogue]
    extra_in = sum(max(p.num_inputs - 1, 0) for p in parts)
    extra_out = sum(p.num_outputs - 1 for p in parts)
    return (extra_in, extra_out, sum(p.flop_per_element for p in parts),
            sum(p.extra_read_bytes_per_element for p in parts), sum(p.extra_write_bytes_per_element for p in parts))


@dataclass(frozen=True)
class Matmul(Op):
    """``C[batch, m, n] = A[batch, m, k] @ B[batch, k, n]`` (optionally transposed operands).

    ``b_batch`` is the number of distinct B matrices (1 for a weight shared by the whole batch,
    ``batch * kv_heads / heads`` for grouped-query attention); None means ``batch``.
    ``epilogue`` lists element-wise functions fused into the output write (``bias_add``, ``gelu``,
    ``add`` for a residual, ...); ``epilogue_aux_outputs`` extra m x n outputs it writes (the
    pre-activation kept for the backward); ``accumulate_output`` means C += A @ B (C is read).
    ``split_accumulator`` (FP8 only): the kernel adds the tensor cores' partial sums into FP32
    registers every :data:`gpusim.mapping.gemm.FP8_PROMOTION_INTERVAL_K` elements of K, as cuBLASLt
    does with fast accumulation off; Transformer Engine runs its dgrad and wgrad GEMMs this way.
    ``tile`` pins the kernel's tiling (a :meth:`gpusim.mapping.plan.Tile.label` such as
    ``64x64x32_s6_w4``, e.g. the kernel a profiler shows the library ran); None lets the mapper pick
    the fastest predicted one.
    """

    kind: ClassVar[str] = "matmul"
    category: ClassVar[str] = "matrix"

    m: int
    n: int
    k: int
    batch: int = 1
    dtype: str = "bf16"
    accumulate_dtype: str = "fp32"
    transpose_a: bool = False
    transpose_b: bool = False
    b_batch: int | None = None
    epilogue: tuple[str, ...] = ()
    epilogue_aux_outputs: int = 0
    accumulate_output: bool = False
    tile: str | None = None
    split_accumulator: bool = False

    def __post_init__(self) -> None:
        _positive(self, "m", "n", "k", "batch")
        if self.split_accumulator and self.dtype != "fp8":
            raise ValueError(f"matmul: split_accumulator applies to fp8 products only (got dtype {self.dtype})")
        if self.tile is not None:
            from gpusim.mapping.plan import Tile  # imported here: the mapping package imports this module

            Tile.parse(self.tile)  # raises ValueError naming the malformed label
        _check_dtype(self, FLOAT_DTYPES + ("int8",))
        if self.b_batch is not None and not 1 <= self.b_batch <= self.batch:
            raise ValueError(f"matmul: b_batch must be between 1 and batch (got {self.b_batch})")
        for f in self.epilogue:
            if f not in ELEMENTWISE_FUNCTIONS:
                raise ValueError(f"matmul: unknown epilogue function {f!r}")

    @property
    def out_dtype(self) -> str:
        return gemm_output_dtype(self.dtype)

    @property
    def num_b_matrices(self) -> int:
        return self.batch if self.b_batch is None else self.b_batch

    def row_strides_bytes(self) -> tuple[int, int, int]:
        """Bytes between consecutive rows of A, B and C as stored (A is m x k, or k x m when
        transposed; B k x n, or n x k; C m x n)."""
        in_b, out_b = dtype_bytes(self.dtype), dtype_bytes(self.out_dtype)
        a = self.m if self.transpose_a else self.k
        b = self.k if self.transpose_b else self.n
        return int(a * in_b), int(b * in_b), int(self.n * out_b)

    def matrix_flop(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k

    def vector_flop(self) -> float:
        return _epilogue_costs(self.epilogue)[2] * self.batch * self.m * self.n

    def bytes_read(self) -> float:
        ein, _, _, eread, _ = _epilogue_costs(self.epilogue)
        in_b, out_b = dtype_bytes(self.dtype), dtype_bytes(self.out_dtype)
        c_elements = self.batch * self.m * self.n
        return (self.batch * self.m * self.k * in_b + self.num_b_matrices * self.k * self.n * in_b
                + c_elements * out_b * (ein + (1 if self.accumulate_output else 0)) + c_elements * eread)

    def bytes_written(self) -> float:
        _, eout, _, _, ewrite = _epilogue_costs(self.epilogue)
        c_elements = self.batch * self.m * self.n
        return c_elements * dtype_bytes(self.out_dtype) * (1 + eout + self.epilogue_aux_outputs) + c_elements * ewrite


@dataclass(frozen=True)
class Conv2d(Op):
    """2-D convolution (NCHW semantics, square kernels), lowered to an implicit GEMM.

    ``variant`` is ``forward``, ``dgrad`` (input gradient) or ``wgrad`` (weight gradient); all three
    have the forward's FLOP (the same multiply-accumulates). ``groups`` > 1 runs ``groups``
    independent GEMMs (:meth:`gemm_batch`).
    """

    kind: ClassVar[str] = "conv2d"
    category: ClassVar[str] = "matrix"

    batch: int
    in_channels: int
    out_channels: int
    height: int
    width: int
    kernel_size: int
    stride: int = 1
    padding: int = 0
    groups: int = 1
    dtype: str = "bf16"
    variant: str = "forward"
    epilogue: tuple[str, ...] = ()
    epilogue_aux_outputs: int = 0
    accumulate_output: bool = False

    def __post_init__(self) -> None:
        _positive(self, "batch", "in_channels", "out_channels", "height", "width", "kernel_size", "stride", "groups")
        _check_dtype(self, FLOAT_DTYPES + ("int8",))
        if self.padding < 0:
            raise ValueError("conv2d: padding must not be negative")
        if self.in_channels % self.groups or self.out_channels % self.groups:
            raise ValueError("conv2d: in_channels and out_channels must be divisible by groups")
        if self.out_height < 1 or self.out_width < 1:
            raise ValueError("conv2d: kernel larger than the padded input")
        if self.variant not in ("forward", "dgrad", "wgrad"):
            raise ValueError(f"conv2d: unknown variant {self.variant!r}")

    @property
    def out_height(self) -> int:
        return (self.height + 2 * self.padding - self.kernel_size) // self.stride + 1

    @property
    def out_width(self) -> int:
        return (self.width + 2 * self.padding - self.kernel_size) // self.stride + 1

    @property
    def out_dtype(self) -> str:
        return gemm_output_dtype(self.dtype)

    @property
    def num_weights(self) -> int:
        return self.out_channels * (self.in_channels // self.groups) * self.kernel_size ** 2

    def input_elements(self) -> int:
        return self.batch * self.in_channels * self.height * self.width

    def output_elements(self) -> int:
        return self.batch * self.out_channels * self.out_height * self.out_width

    def gemm_batch(self) -> int:
        return self.groups

    def implicit_gemm(self) -> tuple[int, int, int]:
        """(m, n, k) of each of the ``groups`` GEMMs.

        forward: m = batch*out_h*out_w, n = out_channels/groups, k = in_channels/groups*kh*kw.
        dgrad: m = batch*height*width, n = in_channels/groups, k = out_channels/groups*kh*kw/stride^2
        (the stride-decomposed data gradient; m*n*k equals the forward's up to rounding).
        wgrad: m = out_channels/groups, n = in_channels/groups*kh*kw, k = batch*out_h*out_w.
        """
        ic, oc, kk = self.in_channels // self.groups, self.out_channels // self.groups, self.kernel_size ** 2
        npq = self.batch * self.out_height * self.out_width
        if self.variant == "forward":
            return npq, oc, ic * kk
        if self.variant == "dgrad":
            return self.batch * self.height * self.width, ic, max(1, math.ceil(oc * kk / self.stride ** 2))
        return oc, ic * kk, npq

    def matrix_flop(self) -> float:
        return 2.0 * self.batch * self.out_height * self.out_width * self.out_channels \
            * (self.in_channels // self.groups) * self.kernel_size ** 2

    def vector_flop(self) -> float:
        return _epilogue_costs(self.epilogue)[2] * self._result_elements()

    def _result_elements(self) -> int:
        if self.variant == "forward":
            return self.output_elements()
        if self.variant == "dgrad":
            return self.input_elements()
        return self.num_weights

    def bytes_read(self) -> float:
        b, ob = dtype_bytes(self.dtype), dtype_bytes(self.out_dtype)
        if self.variant == "forward":
            operands = (self.input_elements() + self.num_weights) * b
        elif self.variant == "dgrad":
            operands = (self.output_elements() + self.num_weights) * b
        else:
            operands = (self.input_elements() + self.output_elements()) * b
        ein, _, _, eread, _ = _epilogue_costs(self.epilogue)
        result = self._result_elements()
        return operands + result * ob * (ein + (1 if self.accumulate_output else 0)) + result * eread

    def bytes_written(self) -> float:
        _, eout, _, _, ewrite = _epilogue_costs(self.epilogue)
        result = self._result_elements()
        return result * dtype_bytes(self.out_dtype) * (1 + eout + self.epilogue_aux_outputs) + result * ewrite


# ---------------------------------------------------------------------------------- attention

SOFTMAX_FLOP_PER_ELEMENT = 5.0
"""max, subtract, exp, sum, divide."""
SOFTMAX_BACKWARD_FLOP_PER_ELEMENT = 4.0
"""dx = y * (dy - sum(dy * y)): multiply, sum, subtract, multiply."""


ATTENTION_KERNELS = ("fused", "fused_async", "fused_unpipelined", "unfused")
"""``fused``: one FlashAttention-2 style kernel (warp-synchronous MMA, softmax between the matrix
products); ``fused_async``: one warp-specialized kernel with asynchronous MMA whose softmax overlaps
the matrix products (FlashAttention-3, cuDNN's Hopper attention); ``fused_unpipelined``: the same
algorithm as ``fused`` without software pipelining, so each CTA waits for its K/V (or Q/dO) blocks
before every pair of products (the 2022 Triton FlashAttention, ``flash_attn_triton.py``:
``num_stages=1``, 128 x 128 blocks, 8 warps; MPT's ``attn_impl: triton``); ``unfused``: separate
GEMM, softmax and GEMM kernels with the score matrix in DRAM."""


@dataclass(frozen=True)
class Attention(Op):
    """Scaled dot-product attention ``softmax(Q K^T / sqrt(d)) V`` with grouped-query heads.

    FLOP convention: ``flop()`` counts the full ``seq_len_q x seq_len_kv`` score matrix, causal or
    not (4*b*h*sq*skv*d for the two matrix products plus the softmax), which is the convention of the
    standard model-FLOP formulas (Narayanan et al. 2021, the 72*B*s*l*h^2 closed form) and what the
    unfused kernels really execute. A causal *fused* kernel skips the masked blocks: its
    ``executed_flop()`` counts only the visible (query, key) pairs (:meth:`useful_fraction`, about
    half). The backward's model FLOP is twice the forward's matrix FLOP; the fused (FlashAttention-2
    style) backward executes 5 products instead of 4 because it recomputes the scores.

    Queries are aligned to the end of the keys (a decode step sees every cached key).
    """

    kind: ClassVar[str] = "attention"
    category: ClassVar[str] = "matrix"

    batch: int
    heads: int
    seq_len_q: int
    seq_len_kv: int
    head_dim: int
    kv_heads: int | None = None
    causal: bool = False
    dtype: str = "bf16"
    kernel: str = "fused"
    variant: str = "forward"
    kv_dtype: str | None = None
    """Dtype K and V are read in when it differs from ``dtype``: a decode step reading an FP8, INT8 or
    FP4 KV cache (the kernel dequantizes in registers and multiplies in ``dtype``)."""
    score_bias: bool = False
    """An additive bias on every score before the softmax (ALiBi's per-head linear bias): fused
    kernels add it in registers, eager code in a kernel of its own."""

    def __post_init__(self) -> None:
        _positive(self, "batch", "heads", "seq_len_q", "seq_len_kv", "head_dim")
        _check_dtype(self, ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8"))
        if self.kv_dtype is not None and self.kv_dtype not in DTYPE_BYTES:
            raise ValueError(f"attention: unknown kv_dtype {self.kv_dtype!r}")
        if self.kv_heads is not None and (self.kv_heads < 1 or self.heads % self.kv_heads):
            raise ValueError("attention: kv_heads must divide heads")
        if self.kernel not in ATTENTION_KERNELS:
            raise ValueError(f"attention: kernel must be one of {', '.join(ATTENTION_KERNELS)} (got {self.kernel!r})")
        if self.variant not in ("forward", "backward"):
            raise ValueError(f"attention: unknown variant {self.variant!r}")
        if self.causal and self.seq_len_q > self.seq_len_kv:
            raise ValueError("attention: causal attention needs seq_len_q <= seq_len_kv")

    @property
    def num_kv_heads(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    def num_scores(self) -> int:
        return self.batch * self.heads * self.seq_len_q * self.seq_len_kv

    def useful_fraction(self) -> float:
        """Share of (query, key) pairs that are not masked: 1 unless causal."""
        if not self.causal:
            return 1.0
        sq, skv = self.seq_len_q, self.seq_len_kv
        visible = sq * skv - sq * (sq - 1) / 2
        return visible / (sq * skv)

    def _products(self) -> int:
        return 2 if self.variant == "forward" else 4

    def matrix_flop(self) -> float:
        return 2.0 * self._products() * self.num_scores() * self.head_dim

    def vector_flop(self) -> float:
        per = SOFTMAX_FLOP_PER_ELEMENT if self.variant == "forward" else SOFTMAX_BACKWARD_FLOP_PER_ELEMENT
        return per * self.num_scores()

    def executed_flop(self) -> float:
        if self.kernel == "unfused":
            return sum(op.executed_flop() for op in self.decompose())
        products = 2 if self.variant == "forward" else 5
        frac = self.useful_fraction()
        vector = self.vector_flop() * (1 if self.variant == "forward" else 2)  # backward recomputes softmax
        return (2.0 * products * self.num_scores() * self.head_dim + vector) * frac

    def _q_bytes(self) -> float:
        return self.batch * self.heads * self.seq_len_q * self.head_dim * dtype_bytes(self.dtype)

    def _kv_bytes(self) -> float:
        """K or V (one of them)."""
        return self.batch * self.num_kv_heads * self.seq_len_kv * self.head_dim * dtype_bytes(self.kv_dtype or self.dtype)

    def _lse_bytes(self) -> float:
        return self.batch * self.heads * self.seq_len_q * STATS_BYTES

    def bytes_read(self) -> float:
        if self.kernel == "unfused":
            return sum(op.bytes_read() for op in self.decompose())
        if self.variant == "forward":
            return self._q_bytes() + 2 * self._kv_bytes()
        # Q, K, V, O, dO and the log-sum-exp
        return 3 * self._q_bytes() + 2 * self._kv_bytes() + self._lse_bytes()

    def bytes_written(self) -> float:
        if self.kernel == "unfused":
            return sum(op.bytes_written() for op in self.decompose())
        if self.variant == "forward":
            return self._q_bytes() + self._lse_bytes()
        return self._q_bytes() + 2 * self._kv_bytes()

    def decompose(self) -> tuple[Op, ...]:
        """The separate kernels of the unfused computation (full score matrix, mask and any score bias
        applied in the softmax kernel, 1/sqrt(d) folded into the first GEMM's alpha).

        forward: S = Q K^T (batched Matmul), P = softmax(S), O = P V (batched Matmul).
        backward: dV = P^T dO, dP = dO V^T, dS = softmax_backward(P, dP), dQ = dS K, dK = dS^T Q.
        Their FLOP sum equals :meth:`flop` and their matrix FLOP :meth:`matrix_flop`.
        """
        bh, sq, skv, d = self.batch * self.heads, self.seq_len_q, self.seq_len_kv, self.head_dim
        b_kv = self.batch * self.num_kv_heads
        mm_dtype = self.dtype
        s_dtype = gemm_output_dtype(mm_dtype)
        vec_dtype = s_dtype if s_dtype in VECTOR_DTYPES else "fp32"
        if self.variant == "forward":
            return (
                Matmul(m=sq, n=skv, k=d, batch=bh, b_batch=b_kv, dtype=mm_dtype, transpose_b=True),
                Softmax(rows=bh * sq, cols=skv, dtype=vec_dtype),
                Matmul(m=sq, n=d, k=skv, batch=bh, b_batch=b_kv, dtype=mm_dtype),
            )
        return (
            Matmul(m=skv, n=d, k=sq, batch=bh, dtype=mm_dtype, transpose_a=True),   # dV = P^T dO
            Matmul(m=sq, n=skv, k=d, batch=bh, b_batch=b_kv, dtype=mm_dtype, transpose_b=True),  # dP = dO V^T
            Softmax(rows=bh * sq, cols=skv, dtype=vec_dtype, variant="backward"),
            Matmul(m=sq, n=d, k=skv, batch=bh, b_batch=b_kv, dtype=mm_dtype),      # dQ = dS K
            Matmul(m=skv, n=d, k=sq, batch=bh, dtype=mm_dtype, transpose_a=True),  # dK = dS^T Q
        )


# --------------------------------------------------------------------------- row-wise kernels


@dataclass(frozen=True)
class _RowOp(Op):
    rows: int
    cols: int
    dtype: str = "bf16"
    variant: str = "forward"

    def __post_init__(self) -> None:
        _positive(self, "rows", "cols")
        _check_dtype(self, VECTOR_DTYPES)
        if self.variant not in ("forward", "backward"):
            raise ValueError(f"{self.kind}: unknown variant {self.variant!r}")

    def elements(self) -> int:
        return self.rows * self.cols


@dataclass(frozen=True)
class Softmax(_RowOp):
    """Softmax over ``cols`` for each of ``rows``; the backward reads y and dy and writes dx."""

    kind: ClassVar[str] = "softmax"

    def vector_flop(self) -> float:
        per = SOFTMAX_FLOP_PER_ELEMENT if self.variant == "forward" else SOFTMAX_BACKWARD_FLOP_PER_ELEMENT
        return per * self.elements()

    def bytes_read(self) -> float:
        return self.elements() * dtype_bytes(self.dtype) * (1 if self.variant == "forward" else 2)

    def bytes_written(self) -> float:
        return self.elements() * dtype_bytes(self.dtype)


@dataclass(frozen=True)
class _NormOp(_RowOp):
    """Normalization over ``cols`` with a learned scale (and shift).

    Forward reads x and the parameters, writes y and the per-row statistics (FP32). Backward reads
    x, dy, the statistics and the parameters; writes dx and the parameter gradients."""

    forward_flop_per_element: ClassVar[float] = 8.0
    backward_flop_per_element: ClassVar[float] = 14.0
    num_param_vectors: ClassVar[int] = 2
    num_stats: ClassVar[int] = 2

    def vector_flop(self) -> float:
        per = self.forward_flop_per_element if self.variant == "forward" else self.backward_flop_per_element
        return per * self.elements()

    def _params_bytes(self) -> float:
        return self.num_param_vectors * self.cols * dtype_bytes(self.dtype)

    def _stats_bytes(self) -> float:
        return self.num_stats * self.rows * STATS_BYTES

    def bytes_read(self) -> float:
        b = dtype_bytes(self.dtype)
        if self.variant == "forward":
            return self.elements() * b + self._params_bytes()
        return 2 * self.elements() * b + self._params_bytes() + self._stats_bytes()

    def bytes_written(self) -> float:
        b = dtype_bytes(self.dtype)
        if self.variant == "forward":
            return self.elements() * b + self._stats_bytes()
        return self.elements() * b + self._params_bytes()


@dataclass(frozen=True)
class LayerNorm(_NormOp):
    """Layer normalization (Ba et al. 2016): mean and rstd per row, a scale and a shift."""

    kind: ClassVar[str] = "layernorm"


@dataclass(frozen=True)
class RMSNorm(_NormOp):
    """Root-mean-square normalization (Zhang and Sennrich 2019): a scale, no shift, no mean."""

    kind: ClassVar[str] = "rmsnorm"
    forward_flop_per_element: ClassVar[float] = 5.0
    backward_flop_per_element: ClassVar[float] = 10.0
    num_param_vectors: ClassVar[int] = 1
    num_stats: ClassVar[int] = 1


@dataclass(frozen=True)
class BatchNorm(_NormOp):
    """Batch normalization in training mode: statistics per channel (``cols``) over
    ``rows`` = batch*height*width positions."""

    kind: ClassVar[str] = "batchnorm"

    def _stats_bytes(self) -> float:
        return self.num_stats * self.cols * STATS_BYTES


# ------------------------------------------------------------------------------ element-wise


@dataclass(frozen=True)
class Elementwise(Op):
    """An element-wise kernel over ``num_elements`` outputs; ``function`` names one function of
    :data:`ELEMENTWISE_FUNCTIONS` or a fused chain ``"a+b+c"``. Inputs, outputs and FLOP per element
    follow from the function(s). ``broadcast_elements`` is the size of a broadcast operand (a bias
    vector), read once."""

    kind: ClassVar[str] = "elementwise"

    num_elements: int
    function: str
    dtype: str = "bf16"
    broadcast_elements: int = 0
    input_dtype: str | None = None
    """The inputs' dtype where it differs from the output's (a cast); None: ``dtype``."""
    index_dims: int = 0
    """Dimensions over which PyTorch's kernel splits each element's index, after merging those that
    allow it: 0 when every operand is contiguous (``vectorized_elementwise_kernel``); an operand that
    is broadcast (a row statistic, a weight vector, a rotary table) or a strided view (heads
    transposed out of a projection's output) makes the kernel compute every operand's offset from
    the index (``elementwise_kernel``), as the eager lowering of fusions ``none`` and
    ``attention_only`` says where."""

    def __post_init__(self) -> None:
        _positive(self, "num_elements")
        _check_dtype(self, VECTOR_DTYPES)
        if self.index_dims < 0:
            raise ValueError(f"elementwise: index_dims must be 0 or more, not {self.index_dims}")
        if self.input_dtype is not None and self.input_dtype not in VECTOR_DTYPES:
            raise ValueError(f"elementwise: input_dtype must be one of {', '.join(sorted(VECTOR_DTYPES))}, "
                             f"not {self.input_dtype!r}")
        for f in self.functions:
            if f not in ELEMENTWISE_FUNCTIONS:
                raise ValueError(f"elementwise: unknown function {f!r}")

    @property
    def functions(self) -> tuple[str, ...]:
        return tuple(self.function.split("+"))

    @property
    def casts_on_load(self) -> bool:
        """Whether PyTorch converts each element between dtypes as it loads and stores it (its
        dynamic-casting kernels, ``LoadWithCast`` in a profile): an op whose inputs' dtype differs
        from its output's, except a narrowing copy (FP32 to BF16 or FP16), which PyTorch's copy
        kernel vectorizes (measurements/h200_sxm_141gb/block_kernels.csv, PyTorch 2.11: ``x.float()``
        runs ``unrolled_elementwise_kernel`` with ``LoadWithCast<1>``, ``.to(torch.bfloat16)``
        ``vectorized_elementwise_kernel<8>``)."""
        if self.input_dtype in (None, self.dtype):
            return False
        return not (self.function == "cast" and dtype_bytes(self.dtype) < dtype_bytes(self.input_dtype))

    @property
    def scalar_loads(self) -> bool:
        """Whether PyTorch runs it with one element's loads in flight per thread (an index-computing
        or casting kernel) rather than its vectorized kernel."""
        return self.index_dims > 0 or self.casts_on_load

    @property
    def tensor_inputs(self) -> int:
        """Tensors the framework's kernel reads for each element: the streamed inputs, plus the
        broadcast operand or table of ``mul_bcast`` and ``mul_table``."""
        return self.num_inputs + sum(1 for f in self.functions if f in TABLE_OPERAND_FUNCTIONS)

    @property
    def cost(self) -> ElementwiseFunction:
        fs = self.functions
        return ELEMENTWISE_FUNCTIONS[fs[0]] if len(fs) == 1 else chain_cost(fs)

    @property
    def num_inputs(self) -> int:
        return self.cost.num_inputs

    @property
    def num_outputs(self) -> int:
        return self.cost.num_outputs

    @property
    def flop_per_element(self) -> float:
        return self.cost.flop_per_element

    def vector_flop(self) -> float:
        return self.cost.flop_per_element * self.num_elements

    def bytes_read(self) -> float:
        c = self.cost
        inputs = dtype_bytes(self.input_dtype or self.dtype)
        return self.num_elements * (c.num_inputs * inputs + c.extra_read_bytes_per_element) \
            + self.broadcast_elements * dtype_bytes(self.dtype)

    def bytes_written(self) -> float:
        c = self.cost
        return self.num_elements * (c.num_outputs * dtype_bytes(self.dtype) + c.extra_write_bytes_per_element)


@dataclass(frozen=True)
class Reduction(Op):
    """Reduce ``num_elements`` inputs to ``num_outputs`` results (a bias gradient, a loss mean)."""

    kind: ClassVar[str] = "reduction"

    num_elements: int
    num_outputs: int = 1
    function: str = "sum"
    dtype: str = "bf16"

    def __post_init__(self) -> None:
        _positive(self, "num_elements", "num_outputs")
        _check_dtype(self, VECTOR_DTYPES)
        if self.function not in ("sum", "mean", "max", "min", "sum_squares"):
            raise ValueError(f"reduction: unknown function {self.function!r}")
        if self.num_outputs > self.num_elements:
            raise ValueError("reduction: more outputs than inputs")

    def vector_flop(self) -> float:
        return float(self.num_elements) * (2.0 if self.function == "sum_squares" else 1.0)

    def bytes_read(self) -> float:
        return self.num_elements * dtype_bytes(self.dtype)

    def bytes_written(self) -> float:
        return self.num_outputs * dtype_bytes(self.dtype)


@dataclass(frozen=True)
class Embedding(Op):
    """Row gather from a ``vocab_size x hidden_size`` table for ``num_tokens`` int64 ids.

    The backward writes a dense table gradient (zero-filled, then rows scattered-added)."""

    kind: ClassVar[str] = "embedding"
    category: ClassVar[str] = "memory"

    num_tokens: int
    vocab_size: int
    hidden_size: int
    dtype: str = "bf16"
    variant: str = "forward"

    def __post_init__(self) -> None:
        _positive(self, "num_tokens", "vocab_size", "hidden_size")
        _check_dtype(self, ("fp64", "fp32", "fp16", "bf16", "fp8"))
        if self.variant not in ("forward", "backward"):
            raise ValueError(f"embedding: unknown variant {self.variant!r}")

    def vector_flop(self) -> float:
        return 0.0 if self.variant == "forward" else float(self.num_tokens * self.hidden_size)

    def bytes_read(self) -> float:
        rows = self.num_tokens * self.hidden_size * dtype_bytes(self.dtype)
        return self.num_tokens * INDEX_BYTES + rows

    def bytes_written(self) -> float:
        if self.variant == "forward":
            return self.num_tokens * self.hidden_size * dtype_bytes(self.dtype)
        return self.vocab_size * self.hidden_size * dtype_bytes(self.dtype)


@dataclass(frozen=True)
class Pool2d(Op):
    """Max or average pooling (square window); the max backward uses saved int64 indices."""

    kind: ClassVar[str] = "pool2d"

    batch: int
    channels: int
    height: int
    width: int
    kernel_size: int
    stride: int = 1
    padding: int = 0
    function: str = "max"
    dtype: str = "bf16"
    variant: str = "forward"

    def __post_init__(self) -> None:
        _positive(self, "batch", "channels", "height", "width", "kernel_size", "stride")
        _check_dtype(self, VECTOR_DTYPES)
        if self.function not in ("max", "avg"):
            raise ValueError(f"pool2d: function must be max or avg (got {self.function!r})")
        if self.out_height < 1 or self.out_width < 1:
            raise ValueError("pool2d: window larger than the padded input")
        if self.variant not in ("forward", "backward"):
            raise ValueError(f"pool2d: unknown variant {self.variant!r}")

    @property
    def out_height(self) -> int:
        return (self.height + 2 * self.padding - self.kernel_size) // self.stride + 1

    @property
    def out_width(self) -> int:
        return (self.width + 2 * self.padding - self.kernel_size) // self.stride + 1

    def input_elements(self) -> int:
        return self.batch * self.channels * self.height * self.width

    def output_elements(self) -> int:
        return self.batch * self.channels * self.out_height * self.out_width

    def vector_flop(self) -> float:
        return float(self.output_elements() * self.kernel_size ** 2)

    def bytes_read(self) -> float:
        b = dtype_bytes(self.dtype)
        if self.variant == "forward":
            return self.input_elements() * b
        indices = self.output_elements() * INDEX_BYTES if self.function == "max" else 0.0
        return self.output_elements() * b + indices

    def bytes_written(self) -> float:
        b = dtype_bytes(self.dtype)
        if self.variant == "forward":
            indices = self.output_elements() * INDEX_BYTES if self.function == "max" else 0.0
            return self.output_elements() * b + indices
        return self.input_elements() * b


# --------------------------------------------------------------------------------- optimizer

OPTIMIZER_STATES = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}
"""FP32 state tensors per parameter (momentum buffer; Adam's first and second moments)."""
OPTIMIZER_FLOP_PER_PARAMETER = {"sgd": 2.0, "momentum": 4.0, "adam": 12.0, "adamw": 14.0}
"""Approximate arithmetic per parameter of one update (moment updates, bias correction, sqrt,
divide, learning rate, weight decay)."""
MASTER_WEIGHT_BYTES = 4.0


@dataclass(frozen=True)
class OptimizerUpdate(Op):
    """One optimizer step over ``num_parameters`` (a fused multi-tensor kernel).

    ``dtype`` is the working weights' and gradients' dtype. With ``master_weights`` (mixed precision)
    the update reads the gradient, the FP32 master weight and the FP32 states, and writes the master
    weight, the states and the low-precision working copy."""

    kind: ClassVar[str] = "optimizer_update"

    num_parameters: int
    optimizer: str = "adamw"
    dtype: str = "fp32"
    master_weights: bool = False

    def __post_init__(self) -> None:
        _positive(self, "num_parameters")
        _check_dtype(self, ("fp32", "fp16", "bf16"))
        if self.optimizer not in OPTIMIZER_STATES:
            raise ValueError(f"optimizer_update: unknown optimizer {self.optimizer!r}")

    def state_bytes_per_parameter(self) -> float:
        """Memory the optimizer holds per parameter: FP32 states plus the FP32 master copy."""
        master = MASTER_WEIGHT_BYTES if self.master_weights else 0.0
        return 4.0 * OPTIMIZER_STATES[self.optimizer] + master

    def _main_weight_bytes(self) -> float:
        return MASTER_WEIGHT_BYTES if self.master_weights else dtype_bytes(self.dtype)

    def read_bytes_per_parameter(self) -> float:
        return dtype_bytes(self.dtype) + self._main_weight_bytes() + 4.0 * OPTIMIZER_STATES[self.optimizer]

    def write_bytes_per_parameter(self) -> float:
        working = dtype_bytes(self.dtype) if self.master_weights else 0.0
        return self._main_weight_bytes() + 4.0 * OPTIMIZER_STATES[self.optimizer] + working

    def bytes_per_parameter(self) -> float:
        """HBM bytes moved per parameter by one update (read + write); 28 for mixed-precision Adam."""
        return self.read_bytes_per_parameter() + self.write_bytes_per_parameter()

    def vector_flop(self) -> float:
        return OPTIMIZER_FLOP_PER_PARAMETER[self.optimizer] * self.num_parameters

    def bytes_read(self) -> float:
        return self.read_bytes_per_parameter() * self.num_parameters

    def bytes_written(self) -> float:
        return self.write_bytes_per_parameter() * self.num_parameters


# ------------------------------------------------------------------------ copies and transfers


@dataclass(frozen=True)
class _BytesOp(Op):
    num_bytes: float
    dtype: str = "bf16"

    def __post_init__(self) -> None:
        _positive(self, "num_bytes")
        if self.dtype not in DTYPES:
            raise ValueError(f"{self.kind}: unknown dtype {self.dtype!r}")

    def num_elements(self) -> float:
        return self.num_bytes / dtype_bytes(self.dtype)


@dataclass(frozen=True)
class Copy(_BytesOp):
    """A device-to-device copy inside one GPU's memory."""

    kind: ClassVar[str] = "copy"
    category: ClassVar[str] = "memory"

    def bytes_read(self) -> float:
        return float(self.num_bytes)

    def bytes_written(self) -> float:
        return float(self.num_bytes)


@dataclass(frozen=True)
class HostToDevice(_BytesOp):
    """Host memory to GPU memory over the host link; HBM only sees the write."""

    kind: ClassVar[str] = "host_to_device"
    category: ClassVar[str] = "transfer"

    def bytes_read(self) -> float:
        return 0.0

    def bytes_written(self) -> float:
        return float(self.num_bytes)

    def link_bytes(self) -> float:
        return float(self.num_bytes)


@dataclass(frozen=True)
class DeviceToHost(_BytesOp):
    kind: ClassVar[str] = "device_to_host"
    category: ClassVar[str] = "transfer"

    def bytes_read(self) -> float:
        return float(self.num_bytes)

    def bytes_written(self) -> float:
        return 0.0

    def link_bytes(self) -> float:
        return float(self.num_bytes)


# ------------------------------------------------------------------------------ collectives


@dataclass(frozen=True)
class Collective(Op):
    """A collective over ``num_gpus`` GPUs. ``num_bytes`` is the full buffer on each GPU, as in
    nccl-tests: the reduced buffer (all_reduce), the gathered output (all_gather), the input before
    scattering (reduce_scatter), the send buffer (all_to_all, send_recv).

    ``bytes_read``/``bytes_written`` are the GPU's own input and output once; ``wire_bytes_per_gpu``
    what a bandwidth-optimal (ring) algorithm sends per GPU; ``vector_flop`` the reduction adds."""

    category: ClassVar[str] = "collective"
    num_bytes: float
    num_gpus: int
    dtype: str = "bf16"

    def __post_init__(self) -> None:
        _positive(self, "num_bytes", "num_gpus")
        if self.dtype not in DTYPES:
            raise ValueError(f"{self.kind}: unknown dtype {self.dtype!r}")

    def _share(self) -> float:
        return (self.num_gpus - 1) / self.num_gpus

    def wire_bytes_per_gpu(self) -> float:
        return self._share() * self.num_bytes

    def bytes_read(self) -> float:
        return float(self.num_bytes)

    def bytes_written(self) -> float:
        return float(self.num_bytes)


@dataclass(frozen=True)
class AllReduce(Collective):
    kind: ClassVar[str] = "all_reduce"

    def wire_bytes_per_gpu(self) -> float:
        return 2 * self._share() * self.num_bytes

    def vector_flop(self) -> float:
        return self._share() * self.num_bytes / dtype_bytes(self.dtype)


@dataclass(frozen=True)
class AllGather(Collective):
    kind: ClassVar[str] = "all_gather"

    def bytes_read(self) -> float:
        return self.num_bytes / self.num_gpus


@dataclass(frozen=True)
class ReduceScatter(Collective):
    kind: ClassVar[str] = "reduce_scatter"

    def bytes_written(self) -> float:
        return self.num_bytes / self.num_gpus

    def vector_flop(self) -> float:
        return self._share() * self.num_bytes / dtype_bytes(self.dtype)


@dataclass(frozen=True)
class AllToAll(Collective):
    kind: ClassVar[str] = "all_to_all"


@dataclass(frozen=True)
class SendRecv(Collective):
    """Point-to-point: one GPU sends ``num_bytes`` to a peer (pipeline-parallel activations)."""

    kind: ClassVar[str] = "send_recv"

    def wire_bytes_per_gpu(self) -> float:
        return float(self.num_bytes)


OP_CLASSES: dict[str, type[Op]] = {cls.kind: cls for cls in (
    Matmul, Conv2d, Attention, Softmax, LayerNorm, RMSNorm, BatchNorm, Elementwise, Reduction, Embedding,
    Pool2d, OptimizerUpdate, Copy, HostToDevice, DeviceToHost, AllReduce, AllGather, ReduceScatter, AllToAll,
    SendRecv,
)}
"""Every op kind, by its YAML ``op`` value."""

GEMM_KINDS = ("matmul", "conv2d", "attention")
