"""Transformer builder for GPT, BERT, Llama and mixture-of-experts models.

One builder covers the families through its settings: normalization (LayerNorm or RMSNorm) before
or after each sub-block, GELU or gated (SwiGLU) MLPs, learned, rotary or ALiBi positions, biases, tied
input/output embeddings, grouped-query attention, and top-k routed experts. ``model:`` picks the
family's defaults; every setting can be given in ``config:``.

Sources for the family defaults: GPT-2/3 (Radford et al. 2019; Brown et al. 2020: pre-LN, GELU,
learned positions, tied embeddings, 4h MLP), BERT (Devlin et al. 2019: post-LN, token types, MLM +
NSP heads), Llama 2 (Touvron et al. 2023: RMSNorm, SwiGLU, rotary, no biases, untied, GQA for 70B),
Mixtral (Jiang et al. 2024: 8 experts, top-2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal, Optional

from pydantic import model_validator

from gpusim.config.types import Spec, count, field_error, number
from gpusim.workload.layers import FwdOp, Layer, ModelError, attention_kept_bytes, saved_bytes
from gpusim.workload.ops import (
    Attention,
    Copy,
    Elementwise,
    Embedding,
    HostToDevice,
    INDEX_BYTES,
    LayerNorm,
    Matmul,
    RMSNorm,
    Softmax,
    dtype_bytes,
)
from gpusim.workload.precision import PrecisionPolicy


class TransformerConfig(Spec):
    num_layers: count(le=100_000)
    hidden_size: count(le=10**6)
    num_heads: count(le=100_000)
    num_kv_heads: Optional[count(le=100_000)] = None
    """Key/value heads (grouped-query attention); default num_heads; 1 is multi-query attention."""
    head_dim: Optional[count(le=100_000)] = None
    """Default hidden_size / num_heads."""
    ffn_hidden_size: Optional[count(le=10**7)] = None
    """MLP (per expert) inner size; default 4*hidden, or Llama's 8/3*hidden rounded up to 256 for gated MLPs."""
    seq_len: count(le=10**8)
    """Training sequence length (and the number of learned positions)."""
    vocab_size: count(le=10**8)
    norm: Optional[Literal["layernorm", "rmsnorm"]] = None
    norm_position: Optional[Literal["pre", "post"]] = None
    activation: Optional[Literal["gelu", "gelu_new", "relu", "silu", "swiglu", "geglu"]] = None
    position_embedding: Optional[Literal["learned", "rotary", "alibi", "none"]] = None
    """``learned`` (a position table added to the tokens), ``rotary`` (RoPE on Q and K), ``alibi``
    (Press et al. 2022, as MPT and BLOOM: no table, a per-head linear bias added to every attention
    score inside the attention kernel) or ``none``."""
    rotary_form: Literal["rotate_half", "complex"] = "rotate_half"
    """How eager model code (fusions ``none`` and ``attention_only``) writes rotary embedding:
    ``rotate_half`` as Hugging Face's ``apply_rotary_pos_emb`` (products with cos and sin tables and a
    negated, concatenated half), ``complex`` as Meta's reference code and torchtitan (pairs viewed as
    complex FP32 numbers times a complex table). The fused modes run either as one kernel."""
    bias: Optional[bool] = None
    tied_embeddings: Optional[bool] = None
    dropout: Optional[number(gt=None, ge=0.0, le=1.0)] = None
    causal: Optional[bool] = None
    type_vocab_size: Optional[count(ge=0, le=1000)] = None
    head: Optional[Literal["lm", "mlm", "classifier"]] = None
    """``lm``: next-token logits; ``mlm``: BERT's masked-LM transform + NSP + pooler; ``classifier``:
    BERT's sequence classification (pooler + a two-class linear layer on the first token)."""
    num_experts: Optional[count(le=100_000)] = None
    top_k: Optional[count(le=100_000)] = None
    attention_kernel: Literal["fused", "fused_async", "fused_unpipelined"] = "fused"
    """With fusion default: ``fused`` is FlashAttention-2 (PyTorch SDPA's flash backend, the
    flash-attn 2 package); ``fused_async`` a warp-specialized Hopper kernel (FlashAttention-3, cuDNN
    fused attention as Transformer Engine uses it); ``fused_unpipelined`` the 2022 Triton
    FlashAttention without software pipelining (MPT's ``attn_impl: triton``). Fusion none always runs
    attention unfused."""

    @model_validator(mode="after")
    def _consistent(self) -> "TransformerConfig":
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise field_error("num_heads", f"hidden_size {self.hidden_size} is not divisible by num_heads "
                              f"{self.num_heads} (or give head_dim)")
        if self.num_kv_heads is not None and self.num_heads % self.num_kv_heads:
            raise field_error("num_kv_heads", f"num_heads {self.num_heads} is not divisible by num_kv_heads "
                              f"{self.num_kv_heads}")
        if self.top_k is not None and self.num_experts is not None and self.top_k > self.num_experts:
            raise field_error("top_k", f"top_k {self.top_k} is larger than num_experts {self.num_experts}")
        if self.top_k is not None and self.num_experts is None:
            raise field_error("top_k", "top_k needs num_experts")
        return self


FAMILY_DEFAULTS: dict[str, dict] = {
    "gpt": dict(norm="layernorm", norm_position="pre", activation="gelu", position_embedding="learned", bias=True,
                tied_embeddings=True, dropout=0.1, causal=True, type_vocab_size=0, head="lm"),
    "bert": dict(norm="layernorm", norm_position="post", activation="gelu", position_embedding="learned", bias=True,
                 tied_embeddings=True, dropout=0.1, causal=False, type_vocab_size=2, head="mlm"),
    "llama": dict(norm="rmsnorm", norm_position="pre", activation="swiglu", position_embedding="rotary", bias=False,
                  tied_embeddings=False, dropout=0.0, causal=True, type_vocab_size=0, head="lm"),
    "moe": dict(norm="rmsnorm", norm_position="pre", activation="swiglu", position_embedding="rotary", bias=False,
                tied_embeddings=False, dropout=0.0, causal=True, type_vocab_size=0, head="lm", top_k=2),
}


@dataclass(frozen=True)
class Resolved:
    """A transformer configuration with the family defaults filled in."""

    family: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_hidden_size: int
    seq_len: int
    vocab_size: int
    norm: str
    norm_position: str
    activation: str
    position_embedding: str
    bias: bool
    tied_embeddings: bool
    dropout: float
    causal: bool
    type_vocab_size: int
    head: str
    num_experts: int
    top_k: int
    attention_kernel: str = "fused"
    rotary_form: str = "rotate_half"

    @property
    def gated(self) -> bool:
        return self.activation in ("swiglu", "geglu")


def resolve(family: str, cfg: TransformerConfig) -> Resolved:
    d = dict(FAMILY_DEFAULTS[family])
    for key, value in cfg.model_dump().items():
        if value is not None:
            d[key] = value
    if family == "moe" and cfg.num_experts is None:
        raise ModelError("config.num_experts", "a mixture-of-experts model needs num_experts")
    gated = d["activation"] in ("swiglu", "geglu")
    ffn = cfg.ffn_hidden_size
    if ffn is None:
        ffn = 256 * math.ceil(8 * cfg.hidden_size / 3 / 256) if gated else 4 * cfg.hidden_size
    return Resolved(
        family=family, num_layers=cfg.num_layers, hidden_size=cfg.hidden_size, num_heads=cfg.num_heads,
        num_kv_heads=cfg.num_kv_heads or cfg.num_heads, head_dim=cfg.head_dim or cfg.hidden_size // cfg.num_heads,
        ffn_hidden_size=ffn, seq_len=cfg.seq_len, vocab_size=cfg.vocab_size, norm=d["norm"],
        norm_position=d["norm_position"], activation=d["activation"], position_embedding=d["position_embedding"],
        bias=d["bias"], tied_embeddings=d["tied_embeddings"], dropout=d["dropout"], causal=d["causal"],
        type_vocab_size=d["type_vocab_size"], head=d["head"], num_experts=d.get("num_experts") or 1,
        top_k=d.get("top_k") or 1 if d.get("num_experts") else 1,
        attention_kernel=cfg.attention_kernel, rotary_form=cfg.rotary_form,
    )


class _Ops:
    """Collects a layer's forward ops."""

    def __init__(self, r: Resolved, policy: PrecisionPolicy, tokens: int, training: bool,
                 quantized: bool = True) -> None:
        """``quantized`` False: the linear layers stay in 16 bits under FP8 (the model's head)."""
        self.r, self.p, self.t, self.training, self.quantized = r, policy, tokens, training, quantized
        self.ops: list[FwdOp] = []

    def add(self, *a, **k) -> None:
        self.ops.append(FwdOp(*a, **k))

    def norm(self, name: str, rows: int | None = None) -> None:
        r = self.r
        cls = LayerNorm if r.norm == "layernorm" else RMSNorm
        self.add(name, cls(rows=rows or self.t, cols=r.hidden_size, dtype=self.p.activation_dtype),
                 num_parameters=(2 if r.norm == "layernorm" else 1) * r.hidden_size)

    def linear(self, name: str, n: int, k: int, *, bias: bool, rows: int | None = None, params: bool = True,
               input_grad: bool = True, split_output: bool = False, quantized: bool | None = None) -> None:
        """A linear layer; ``quantized`` False (or the collector's) keeps it in 16 bits under FP8
        (:attr:`PrecisionPolicy.unquantized_matmul_dtype`)."""
        m = rows or self.t
        quantized = self.quantized if quantized is None else quantized
        dtype = self.p.matmul_dtype if quantized else self.p.unquantized_matmul_dtype
        self.add(name, Matmul(m=m, n=n, k=k, dtype=dtype), num_parameters=k * n if params else 0,
                 weight=True, input_grad=input_grad, split_output=split_output)
        if bias:
            self.add(f"{name}_bias", Elementwise(num_elements=m * n, function="bias_add",
                                                 dtype=self.p.activation_dtype, broadcast_elements=n),
                     num_parameters=n)

    def ew(self, name: str, function: str, elements: int) -> None:
        self.add(name, Elementwise(num_elements=elements, function=function, dtype=self.p.activation_dtype))

    def dropout(self, name: str, elements: int) -> None:
        if self.training and self.r.dropout > 0:
            self.ew(name, "dropout", elements)


def block_ops(r: Resolved, p: PrecisionPolicy, *, batch: int, seq_q: int, seq_kv: int, training: bool,
              kv_append: bool, kv_cache_dtype: str | None = None, reads_kv_cache: bool = False,
              context: int = 1, context_comm: str = "p2p", context_a2a: int = 1) -> tuple[FwdOp, ...]:
    """The forward ops of one transformer block for ``batch`` sequences of ``seq_q`` new tokens
    attending to ``seq_kv`` keys. New keys and values are appended to the KV cache in
    ``kv_cache_dtype`` (default: the activations'); a decode step (``reads_kv_cache``) reads them
    from it, a prompt from the projection it just ran. ``context`` > 1: this GPU's ``seq_q`` tokens
    are one share of a sequence split over ``context`` GPUs, whose attention runs as
    :func:`context_attention` says for ``context_comm`` (and the all-to-all group ``context_a2a``)."""
    kv_dtype = kv_cache_dtype or p.activation_dtype
    h, H, KV, hd = r.hidden_size, r.num_heads, r.num_kv_heads, r.head_dim
    T = batch * seq_q
    o = _Ops(r, p, T, training)
    if r.norm_position == "pre":
        o.norm("norm1")
    o.linear("qkv", (H + 2 * KV) * hd, h, bias=r.bias, split_output=True)
    if r.position_embedding == "rotary":
        o.ew("rotary", "rotary" if r.rotary_form == "rotate_half" else "rotary_complex", T * (H + KV) * hd)
    if kv_append:
        # read in the activations' dtype, written in the cache's (an FP8 cache quantizes on the way)
        o.add("kv_append", Copy(num_bytes=T * KV * hd * (dtype_bytes(p.activation_dtype) + dtype_bytes(kv_dtype)),
                                dtype=p.activation_dtype))
    cached = kv_dtype if reads_kv_cache and kv_dtype != p.attention_dtype else None
    att = Attention(batch=batch, heads=H, kv_heads=KV, seq_len_q=seq_q, seq_len_kv=seq_kv, head_dim=hd,
                    causal=r.causal, dtype=p.attention_dtype, kernel=r.attention_kernel, kv_dtype=cached,
                    score_bias=r.position_embedding == "alibi")
    # this GPU keeps its own share's Q, K, V and statistics, whatever kernels run on them; keys and
    # values received from other GPUs are not kept (the backward fetches them again)
    local = FwdOp("attention", att)
    for k, (name, step) in enumerate(context_attention(att, context, context_comm, context_a2a)):
        o.add(name, step, recompute_group="core_attention", attention_dropout=r.dropout > 0,
              saved_bytes=saved_bytes(local) if k == 0 else 0.0,
              kept_bytes=attention_kept_bytes(att) if k == 0 else 0.0)
    o.linear("proj", h, H * hd, bias=r.bias)
    o.dropout("proj_dropout", T * h)
    o.ew("residual1", "add", T * h)
    o.norm("norm1" if r.norm_position == "post" else "norm2")
    ffn = r.ffn_hidden_size
    up = 2 * ffn if r.gated else ffn
    if r.num_experts > 1:
        E, k = r.num_experts, r.top_k
        o.linear("router", E, h, bias=False, quantized=False)
        o.add("router_softmax", Softmax(rows=T, cols=E, dtype=p.activation_dtype))
        routed = T * k
        o.add("dispatch", Copy(num_bytes=routed * h * dtype_bytes(p.activation_dtype), dtype=p.activation_dtype))
        per_expert = math.ceil(routed / E)
        o.add("experts_up", Matmul(m=per_expert, n=up, k=h, batch=E, b_batch=E, dtype=p.matmul_dtype),
              num_parameters=E * h * up, weight=True, expert=True, split_output=r.gated)
        o.ew("experts_act", r.activation, E * per_expert * ffn)
        o.add("experts_down", Matmul(m=per_expert, n=h, k=ffn, batch=E, b_batch=E, dtype=p.matmul_dtype),
              num_parameters=E * ffn * h, weight=True, expert=True)
        o.ew("combine", "mul", routed * h)
        o.add("gather", Copy(num_bytes=routed * h * dtype_bytes(p.activation_dtype), dtype=p.activation_dtype))
    else:
        o.linear("fc1", up, h, bias=r.bias, split_output=r.gated)
        o.ew("act", r.activation, T * ffn)
        o.linear("fc2", h, ffn, bias=r.bias)
    o.dropout("fc2_dropout", T * h)
    o.ew("residual2", "add", T * h)
    if r.norm_position == "post":
        o.norm("norm2")
    return tuple(o.ops)


def context_attention(att: Attention, context: int, comm: str, a2a: int = 1) -> list[tuple[str, Attention]]:
    """(name, op) of the attention kernels one GPU runs for its share ``att`` of a sequence split over
    ``context`` GPUs (``att`` itself when not split). All-to-alls inside groups of ``a2a`` GPUs (Ulysses:
    ``a2a`` equals context; ``a2a+p2p``: a divisor of it) first turn each GPU's share for all heads into
    the group's share for 1/a2a of the heads; then, between the groups:

    * ``p2p`` and ``a2a+p2p``: the ring's steps (:func:`ring_attention_steps`);
    * ``a2a``: nothing, one attention over the whole sequence;
    * ``all_gather``: every GPU's keys and values gathered, this GPU's two chunks (chunk i and chunk
      2 x context - 1 - i of a causal sequence) each attend to the keys up to it. The representative
      GPU is the first (i = 0): a chunk against itself and the last chunk against the whole sequence,
      the same visible (query, key) pairs as every other GPU's two chunks. Without a mask, all of this
      GPU's queries against the whole sequence."""
    if comm == "a2a":
        a2a = context
    if a2a > 1:
        att = replace(att, heads=att.heads // a2a, kv_heads=att.num_kv_heads // a2a, seq_len_q=att.seq_len_q * a2a,
                      seq_len_kv=att.seq_len_kv * a2a)
        context //= a2a
    if context <= 1:
        return [("attention", att)]
    if comm == "all_gather":
        whole = att.seq_len_kv * context
        if not att.causal:
            return [("attention", replace(att, seq_len_kv=whole))]
        half = att.seq_len_q // 2
        return [("attention", replace(att, seq_len_q=half, seq_len_kv=half)),
                ("attention_gathered", replace(att, seq_len_q=half, seq_len_kv=whole))]
    return [("attention", a) if k == 0 else (f"attention_ring{k}", a)
            for k, a in enumerate(ring_attention_steps(att, context))]


def ring_attention_steps(att: Attention, context: int) -> tuple[Attention, ...]:
    """The attention kernels one GPU runs when a sequence is split over ``context`` GPUs and keys and
    values travel around the ring (Transformer Engine's ``AttnFuncWithCPAndKVP2P``; Liu et al. 2023,
    "Ring Attention", arXiv 2310.01889): ``att`` is this GPU's queries against its own keys, then one
    step per other GPU's share. A causal model's sequence is cut into 2 x ``context`` chunks and each
    GPU holds chunk i and chunk 2 x context - 1 - i, so each later step is half of this GPU's queries
    against all of an earlier share's keys or all queries against half of a later one's: a full
    (unmasked) block of seq x seq/2, and every GPU does 1/context of the causal work. Without a mask
    every step is a full seq x seq block."""
    if context <= 1:
        return (att,)
    kv = att.seq_len_kv // 2 if att.causal else att.seq_len_kv
    step = replace(att, seq_len_kv=kv, causal=False)
    return (att,) + (step,) * (context - 1)


def embedding_ops(r: Resolved, p: PrecisionPolicy, *, batch: int, seq_q: int, training: bool,
                  host_input: bool) -> tuple[FwdOp, ...]:
    h, T = r.hidden_size, batch * seq_q
    o = _Ops(r, p, T, training)
    if host_input:
        o.add("input_ids", HostToDevice(num_bytes=T * INDEX_BYTES * (2 if r.type_vocab_size else 1),
                                        dtype=p.activation_dtype))
    act = p.activation_dtype
    o.add("tokens", Embedding(num_tokens=T, vocab_size=r.vocab_size, hidden_size=h, dtype=act),
          num_parameters=r.vocab_size * h, weight=True, input_grad=False)
    if r.position_embedding == "learned":
        o.add("positions", Embedding(num_tokens=T, vocab_size=r.seq_len, hidden_size=h, dtype=act),
              num_parameters=r.seq_len * h, weight=True, input_grad=False)
        o.ew("add_positions", "add", T * h)
    if r.type_vocab_size:
        o.add("token_types", Embedding(num_tokens=T, vocab_size=r.type_vocab_size, hidden_size=h, dtype=act),
              num_parameters=r.type_vocab_size * h, weight=True, input_grad=False)
        o.ew("add_token_types", "add", T * h)
    if r.norm_position == "post":
        o.norm("norm")
    o.dropout("dropout", T * h)
    return tuple(o.ops)


def head_ops(r: Resolved, p: PrecisionPolicy, *, batch: int, seq_q: int, training: bool,
             logits_tokens: int) -> tuple[FwdOp, ...]:
    h, V, T = r.hidden_size, r.vocab_size, batch * seq_q
    o = _Ops(r, p, T, training, quantized=False)
    if r.norm_position == "pre":
        o.norm("final_norm", rows=logits_tokens)
    if r.head == "classifier":
        o.linear("pooler", h, h, bias=True, rows=batch)
        o.ew("pooler_act", "tanh", batch * h)
        o.dropout("classifier_dropout", batch * h)
        o.linear("classifier", 2, h, bias=True, rows=batch)
        if training:
            o.add("loss", Softmax(rows=batch, cols=2, dtype=p.activation_dtype), loss=True)
        return tuple(o.ops)
    if r.head == "mlm":
        o.linear("mlm_dense", h, h, bias=True, rows=logits_tokens)
        o.ew("mlm_act", "gelu", logits_tokens * h)
        o.norm("mlm_norm", rows=logits_tokens)
    o.linear("logits", V, h, bias=r.head == "mlm", rows=logits_tokens, params=not r.tied_embeddings)
    if training:
        o.add("loss", Softmax(rows=logits_tokens, cols=V, dtype=p.activation_dtype), loss=True)
    if r.head == "mlm":
        o.linear("pooler", h, h, bias=True, rows=batch)
        o.ew("pooler_act", "tanh", batch * h)
        o.linear("nsp", 2, h, bias=True, rows=batch)
        if training:
            o.add("nsp_loss", Softmax(rows=batch, cols=2, dtype=p.activation_dtype), loss=True)
    return tuple(o.ops)


def pipelined_head(r: Resolved, head: Layer) -> Layer:
    """The head as a pipeline's last stage holds it. With tied embeddings its output projection is the
    word embedding, which the first stage holds: Megatron-LM and DeepSpeed keep a copy on the last
    stage, a weight of its own with its own gradient and optimizer state (kept equal to the first
    stage's by an all-reduce of the two copies' gradients)."""
    if not r.tied_embeddings:
        return head
    ops = tuple(replace(f, num_parameters=f.op.k * f.op.n) if f.name == "logits" else f for f in head.ops)
    return replace(head, ops=ops)


def build_layers(r: Resolved, p: PrecisionPolicy, *, batch: int, seq_q: int, seq_kv: int, training: bool,
                 logits_tokens: int | None = None, kv_append: bool = False, host_input: bool = True,
                 prefix: str = "", kv_cache_dtype: str | None = None, reads_kv_cache: bool = False,
                 context: int = 1, context_comm: str = "p2p", context_a2a: int = 1) -> tuple[Layer, ...]:
    """Embedding, ``num_layers`` identical blocks (one shared op tuple) and the head (``context``: see
    :func:`block_ops`)."""
    act_bytes = dtype_bytes(p.activation_dtype)
    T = batch * seq_q
    block = block_ops(r, p, batch=batch, seq_q=seq_q, seq_kv=seq_kv, training=training, kv_append=kv_append,
                      kv_cache_dtype=kv_cache_dtype, reads_kv_cache=reads_kv_cache, context=context,
                      context_comm=context_comm, context_a2a=context_a2a)
    layers = [Layer(f"{prefix}embedding", None, embedding_ops(r, p, batch=batch, seq_q=seq_q, training=training,
                                                               host_input=host_input), T * INDEX_BYTES)]
    layer_input = T * r.hidden_size * act_bytes
    for i in range(r.num_layers):
        layers.append(Layer(f"{prefix}layer{i}", i, block, layer_input, checkpointable=True))
    layers.append(Layer(f"{prefix}head", None, head_ops(r, p, batch=batch, seq_q=seq_q, training=training,
                                                        logits_tokens=logits_tokens or T), layer_input))
    return tuple(layers)


def kv_cache_bytes(r: Resolved, *, batch: int, context: int, dtype: str) -> float:
    """Keys and values of every layer for ``batch`` sequences of ``context`` tokens."""
    return 2.0 * r.num_layers * r.num_kv_heads * r.head_dim * context * batch * dtype_bytes(dtype)
