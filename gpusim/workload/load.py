"""Loading workload files (op lists and models) into :class:`Workload` values."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from gpusim.config.library import builtin_files, display_path, resolve
from gpusim.config.loader import SET_SOURCE, apply_overrides, parse_set_items, read_yaml, validate
from gpusim.errors import ConfigError
from gpusim.workload import ops as O
from gpusim.workload.expand import (
    forward_nodes,
    inference_activation_bytes,
    training_activation_bytes,
    training_nodes,
)
from gpusim.workload.graph import GraphError, OpNode, WorkloadGraph, chain, order_nodes
from gpusim.workload.layers import ModelError
from gpusim.workload.memory import (LIBRARY_WORKSPACE_BYTES, MemoryFootprint, kept_fp8_weight_bytes, model_states,
                                    peak_activation_bytes, stage_chunks, stage_layers)
from gpusim.workload.models import CONFIG_CLASSES
from gpusim.workload.models import cnn, mlp, resnet
from gpusim.workload.models import transformer as T
from gpusim.workload.precision import PrecisionPolicy, policy as precision_policy
from gpusim.workload.spec import (
    LANGUAGE_MODELS,
    OP_SPECS,
    ModelWorkloadSpec,
    OpsWorkloadSpec,
)


@dataclass(frozen=True)
class FusionSummary:
    """What the workload's fusion mode saved against fusion ``none`` (zero for ``none`` and op lists)."""

    mode: str
    num_kernels_removed: int
    bytes_saved: float


SELECTIVE_WORTHWHILE_FRACTION = 0.05
"""Selective checkpointing that saves less than this share of the activations earns a warning: it
still pays the attention core's recompute (FlashAttention-era Megatron-LM runs leave it off)."""


@dataclass(frozen=True)
class Workload:
    """A loaded workload: its graph and, for models, the numbers the engine and reports need.

    ``model_flop_per_step`` is the MFU numerator: forward + backward model FLOP of the step without
    recompute and optimizer (training), or the forward FLOP (inference). ``samples_per_step`` is
    micro-batch x gradient-accumulation steps (training) or the number of requests (inference);
    ``tokens_per_step`` counts tokens of language models (prompt + generated for inference)."""

    name: str
    kind: str
    mode: str | None
    graph: WorkloadGraph
    spec: Any
    source: str
    description: str
    num_parameters: int
    samples_per_step: int
    tokens_per_step: int | None
    model_flop_per_step: float
    memory: MemoryFootprint
    """The footprint of the fullest GPU: under a pipeline, the fullest stage's."""
    fusion_mode: str
    precision: str | None = None
    parallelism: Any = None
    details: dict = field(default_factory=dict, compare=False)
    notes: tuple[str, ...] = ()
    """Warnings about the workload itself that every run of it carries."""
    memory_by_stage: tuple[MemoryFootprint, ...] = ()
    """Each pipeline stage's footprint, first to last (empty without a pipeline)."""
    unfused_nodes: Callable[[], Sequence[OpNode]] | None = field(default=None, compare=False, repr=False)
    """Builds the graph's nodes under fusion ``none``, for :attr:`fusion` (None: the graph is unfused)."""

    @cached_property
    def fusion(self) -> FusionSummary:
        """What the fusion mode saved against fusion ``none``. Built on first use: it needs the whole
        unfused graph, which doubles a model's loading time and only ``workload show`` prints."""
        if self.unfused_nodes is None:
            return FusionSummary(self.fusion_mode, 0, 0.0)
        baseline = self.unfused_nodes()
        return FusionSummary(self.fusion_mode, sum(n.repeat for n in baseline) - self.graph.num_kernels(),
                             sum(n.bytes_read() + n.bytes_written() for n in baseline) - self.graph.total_bytes())

    def flop_per_step(self) -> float:
        """Every FLOP of the step: training forward + backward + recompute + optimizer; inference the
        forward passes (prefill and every decode step)."""
        return self.graph.total_flop()

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description (SI units)."""
        g = self.graph
        return {
            "name": self.name,
            "source": self.source,
            "description": self.description,
            "kind": self.kind,
            "mode": self.mode,
            "precision": self.precision,
            "num_parameters": self.num_parameters,
            "samples_per_step": self.samples_per_step,
            "tokens_per_step": self.tokens_per_step,
            "flop_per_step": self.flop_per_step(),
            "model_flop_per_step": self.model_flop_per_step,
            "executed_flop_per_step": g.total_executed_flop(),
            "matrix_flop_per_step": g.total_matrix_flop(),
            "bytes_read_per_step": g.total_bytes_read(),
            "bytes_written_per_step": g.total_bytes_written(),
            "num_kernels": g.num_kernels(),
            "num_nodes": len(g),
            "num_distinct_ops": len(g.distinct_ops()),
            "memory": self.memory.to_dict(),
            **({"memory_by_stage": [m.to_dict() for m in self.memory_by_stage]} if self.memory_by_stage else {}),
            "fusion": {"mode": self.fusion.mode, "num_kernels_removed": self.fusion.num_kernels_removed,
                       "bytes_saved": self.fusion.bytes_saved},
            "parallelism": self.parallelism.model_dump() if self.parallelism is not None else None,
            "by_kind": g.summary_by("kind"),
            "by_phase": g.summary_by("phase"),
            **({"details": self.details} if self.details else {}),
            "warnings": list(self.notes),
        }


# ------------------------------------------------------------------------------------ helpers


def list_workloads() -> list[tuple[str, Path]]:
    return sorted(builtin_files("workloads").items())


def _prefixed(exc: ConfigError, prefix: str) -> ConfigError:
    return exc.moved(key_path=f"{prefix}.{exc.key_path}" if exc.key_path else prefix)


def _pairs(overrides: Sequence[Any] | Iterable[str]) -> list[tuple[str, Any]]:
    items = list(overrides)
    if all(isinstance(o, tuple) for o in items):
        return items  # type: ignore[return-value]
    return parse_set_items(str(o) for o in items)


def _apply_op_overrides(data: dict[str, Any], pairs: list[tuple[str, Any]]
                        ) -> tuple[list[tuple[str, Any]], list[str]]:
    """``ops.<index or name>.<key>=value`` changes one op of a list. Returns the other pairs, and the
    keys changed as ``ops.<index>.<key>`` (how errors name them)."""
    rest = []
    applied = []
    ops = data.get("ops")
    for key, value in pairs:
        parts = key.split(".")
        if parts[0] != "ops":
            rest.append((key, value))
            continue
        if len(parts) != 3 or not isinstance(ops, list):
            raise ConfigError(SET_SOURCE, key, "expected ops.<index or name>.<key>")
        target = None
        if parts[1].isdigit() and int(parts[1]) < len(ops):
            target = ops[int(parts[1])]
        else:
            target = next((o for o in ops if isinstance(o, dict) and o.get("name") == parts[1]), None)
        if not isinstance(target, dict):
            raise ConfigError(SET_SOURCE, key, f"no op {parts[1]!r} in this workload")
        target[parts[2]] = value
        applied.append(f"ops.{next(i for i, o in enumerate(ops) if o is target)}.{parts[2]}")
    return rest, applied


# ------------------------------------------------------------------------------------ loading


def load_workload(name_or_path: str | Path, overrides: Sequence[Any] | Iterable[str] = ()) -> Workload:
    """Load and build a workload: a built-in stem (``gpt3_175b_train``) or a file path.

    ``overrides`` are ``KEY.PATH=VALUE`` strings (or parsed pairs): ``batch_size=16``,
    ``config.num_layers=2``, ``precision=fp8``, ``ops.gemm.m=4096``. Every problem is a one-line
    ConfigError naming the file and key."""
    pairs = _pairs(overrides)
    path = resolve(name_or_path, "workloads")
    source = display_path(path, "workloads")
    data = read_yaml(path)
    if "kind" in data:
        raise ConfigError(source, "kind", "workload files have no kind: key (is this a hardware description?)")
    if "ops" in data and "model" in data:
        raise ConfigError(source, "", "a workload has either ops: (an op list) or model: (a model), not both")
    if "ops" not in data and "model" not in data:
        raise ConfigError(source, "", "a workload needs ops: (an op list) or model: (a model)")
    if "schema_version" not in data:
        raise ConfigError(source, "schema_version", "missing required key (this gpusim reads schema_version: 1)")
    if data["schema_version"] != 1:
        raise ConfigError(source, "schema_version",
                          f"unsupported version {data['schema_version']!r}; this gpusim reads 1")
    for key, _ in pairs:
        if key.split(".")[0] in ("schema_version", "model", "ops") and "." not in key:
            raise ConfigError(SET_SOURCE, key, "cannot be overridden")
    set_keys = [key for key, _ in pairs]
    if "ops" in data:
        pairs, applied = _apply_op_overrides(data, pairs)
        set_keys = [key for key, _ in pairs] + applied
    try:
        merged = apply_overrides(data, pairs)
        return _load_ops(merged, source, pairs) if "ops" in data else _load_model(merged, source, pairs)
    except ConfigError as exc:
        # a bad value that came in with --set is the --set's fault, not the file's
        if exc.source == source and any(_same_key(key, exc.key_path) for key in set_keys):
            raise exc.moved(source=SET_SOURCE) from None
        raise


def _same_key(set_key: str, error_key: str) -> bool:
    """Whether an error at ``error_key`` is about the value ``--set set_key`` gave (the key itself, a
    key inside the mapping it set, or the mapping that holds it)."""
    return bool(error_key) and (set_key == error_key or set_key.startswith(error_key + ".")
                                or error_key.startswith(set_key + "."))


def _load_ops(data: dict[str, Any], source: str, pairs: list[tuple[str, Any]]) -> Workload:
    entries = data["ops"]
    if not isinstance(entries, list) or not entries:
        raise ConfigError(source, "ops", "must be a non-empty list of ops")
    specs = []
    ops: list[O.Op] = []
    for i, entry in enumerate(entries):
        where = f"ops.{i}"
        if not isinstance(entry, dict):
            raise ConfigError(source, where, f"expected a mapping of keys, got {entry!r}")
        kind = entry.get("op")
        if kind is None:
            raise ConfigError(source, f"{where}.op", f"missing required key (one of: {', '.join(OP_SPECS)})")
        if kind not in OP_SPECS:
            close = difflib.get_close_matches(str(kind), list(OP_SPECS), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else f"; expected one of: {', '.join(OP_SPECS)}"
            raise ConfigError(source, f"{where}.op", f"unknown op {kind!r}{hint}")
        try:
            spec = validate(OP_SPECS[kind], entry, source)
        except ConfigError as exc:
            raise _prefixed(exc, where) from None
        try:
            op = O.OP_CLASSES[kind](**spec.op_fields())
        except ValueError as exc:
            message = str(exc)
            message = message.split(": ", 1)[1] if message.startswith(f"{kind}: ") else message
            raise ConfigError(source, where, message) from None
        specs.append(spec)
        ops.append(op)
    document = dict(data)
    document["ops"] = specs
    top = validate(OpsWorkloadSpec, document, source, pairs)
    nodes = []
    for i, (spec, op) in enumerate(zip(specs, ops)):
        after = spec.after if spec.after is not None else ((specs[i - 1].name,) if i else ())
        nodes.append(OpNode(spec.name, op, tuple(after), "single", None, spec.repeat))
    try:
        graph = order_nodes(nodes)
    except GraphError as exc:
        index = next((i for i, s in enumerate(specs) if s.name == exc.node), None)
        if exc.field == "name":
            index = max(i for i, s in enumerate(specs) if s.name == exc.node)
        raise ConfigError(source, f"ops.{index}.{exc.field}", str(exc)) from None
    largest = max((n.op.bytes_read() + n.op.bytes_written() for n in graph.nodes), default=0.0)
    memory = MemoryFootprint(0.0, 0.0, 0.0, largest, 0.0, 0.0)
    return Workload(
        name=top.name, kind="ops", mode=None, graph=graph, spec=top, source=source, description=top.description,
        num_parameters=0, samples_per_step=1, tokens_per_step=None, model_flop_per_step=graph.total_flop(),
        memory=memory, fusion_mode="none",
    )


def _load_model(data: dict[str, Any], source: str, pairs: list[tuple[str, Any]]) -> Workload:
    raw_config = data.get("config")
    top_data = dict(data)
    top_data["config"] = None
    top = validate(ModelWorkloadSpec, top_data, source, [p for p in pairs if not p[0].startswith("config.")])
    if raw_config is None:
        raw_config = {}
    if not isinstance(raw_config, dict):
        raise ConfigError(source, "config", f"expected a mapping of keys, got {raw_config!r}")
    config_pairs = [(k[len("config."):], v) for k, v in pairs if k.startswith("config.")]
    try:
        cfg = validate(CONFIG_CLASSES[top.model], raw_config, source, config_pairs)
    except ConfigError as exc:
        raise _prefixed(exc, "config") from None
    spec = top.model_copy(update={"config": cfg})
    try:
        return _build_model(spec, cfg, source)
    except ModelError as exc:
        raise ConfigError(source, exc.key_path, exc.message) from None


def _check_parallelism(spec: ModelWorkloadSpec, r: T.Resolved | None, num_layers: int) -> None:
    par = spec.parallelism
    if r is not None and r.num_heads % par.tensor:
        raise ModelError("parallelism.tensor", f"num_heads {r.num_heads} is not divisible by tensor {par.tensor}")
    if par.pipeline > num_layers:
        raise ModelError("parallelism.pipeline", f"pipeline {par.pipeline} is larger than the {num_layers} layers")
    if r is None and (par.tensor > 1 or par.pipeline > 1):
        raise ModelError("parallelism", f"tensor and pipeline parallelism need a transformer model, not {spec.model}; "
                         "use data parallelism")
    if r is not None and num_layers % (par.pipeline * par.virtual_stages):
        # every stage holds as many blocks (the step engine and the per-stage memory need it)
        raise ModelError("parallelism.pipeline", f"{num_layers} layers are not divisible by pipeline {par.pipeline}"
                         f" x virtual_stages {par.virtual_stages}")
    m = par.microbatches or spec.gradient_accumulation_steps
    if r is not None and par.schedule == "interleaved" and m % par.pipeline:
        raise ModelError("parallelism.microbatches", f"the interleaved schedule needs micro-batches ({m}) divisible "
                         f"by pipeline {par.pipeline}")
    c = par.context
    if c > 1:
        if r is None:
            raise ModelError("parallelism.context", "context parallelism splits a transformer's sequence; "
                             f"{spec.model} has none")
        if spec.mode != "train":
            raise ModelError("parallelism.context", "context parallelism is modelled for training only")
        chunks = 2 * c if r.causal else c
        if r.seq_len % chunks:
            raise ModelError("parallelism.context", f"seq_len {r.seq_len} is not divisible into {chunks} chunks "
                             f"(context {c}{' x 2, for causal load balancing' if r.causal else ''})")
        a = par.context_a2a
        if a > 1:
            heads, kv = r.num_heads // par.tensor, max(1, r.num_kv_heads // par.tensor)
            if heads % a or kv % a:
                raise ModelError("parallelism.context_comm", f"{par.context_comm} (Ulysses) splits heads over {a} "
                                 f"GPUs, but each tensor-parallel rank holds {heads} query and {kv} key-value heads")
        if spec.fusion in ("none", "megatron") or r.attention_kernel == "unfused":
            raise ModelError("parallelism.context", "context parallelism needs a fused attention kernel; fusion "
                             f"{spec.fusion!r} with attention_kernel {r.attention_kernel!r} runs it unfused")


def _build_model(spec: ModelWorkloadSpec, cfg: Any, source: str) -> Workload:
    p = precision_policy(spec.precision)
    training = spec.mode == "train"
    batch = spec.batch_size
    ga = spec.gradient_accumulation_steps
    par = spec.parallelism
    details: dict[str, Any] = {}
    notes: list[str] = []
    kv_bytes = 0.0
    tokens: int | None = None
    r: T.Resolved | None = None
    if spec.model in LANGUAGE_MODELS:
        r = T.resolve(spec.model, cfg)
        _check_parallelism(spec, r, r.num_layers)
        if training:
            layers = T.build_layers(r, p, batch=batch, seq_q=r.seq_len, seq_kv=r.seq_len, training=True)
            tokens = batch * r.seq_len * ga
        else:
            prompt = spec.prompt_len or r.seq_len
            if r.position_embedding == "learned" and prompt + spec.generate_len > r.seq_len:
                raise ModelError("prompt_len", f"prompt_len + generate_len ({prompt + spec.generate_len}) exceeds "
                                 f"the {r.seq_len} learned positions (config.seq_len)")
            if prompt + spec.generate_len > r.seq_len:
                notes.append(f"prompt_len + generate_len ({prompt + spec.generate_len}) is longer than config.seq_len "
                             f"({r.seq_len}), the context the model was built for; timed as asked")
            tokens = batch * (prompt + spec.generate_len)
            details["prompt_len"] = prompt
            details["generate_len"] = spec.generate_len
    else:
        if spec.model == "resnet":
            build = resnet.build_layers
        elif spec.model == "mlp":
            build = mlp.build_layers
        else:
            build = cnn.build_layers
        layers = build(cfg, p, batch=batch, training=training)
        _check_parallelism(spec, None, sum(1 for l in layers if l.checkpointable) or 1)

    def make_nodes(fusion: str, details: dict[str, Any] = details) -> list[OpNode]:
        if training:
            return training_nodes(layers, fusion=fusion, checkpointing=spec.activation_checkpointing,
                                  micro_batches=ga, optimizer=spec.optimizer_name, policy=p,
                                  clip_gradients=spec.gradient_clipping,
                                  fp8_weights_per_step=spec.fp8_weights_per_step)
        if r is None:
            return forward_nodes(layers, fusion=fusion, phase="forward")
        return _inference_nodes(spec, r, p, fusion, details)

    if not training and r is not None:
        lm = r.head == "lm"
        prompt = details["prompt_len"]
        layers = T.build_layers(r, p, batch=batch, seq_q=prompt, seq_kv=prompt, training=False,
                                logits_tokens=_logits_tokens(spec, r, batch, prompt), kv_append=lm)
        if lm:
            kv_dtype = spec.kv_cache_dtype or p.activation_dtype
            kv_bytes = T.kv_cache_bytes(r, batch=batch, context=prompt + spec.generate_len, dtype=kv_dtype)
            kv_bytes /= min(par.tensor, r.num_kv_heads) * par.pipeline

    nodes = make_nodes(spec.fusion)
    graph = WorkloadGraph(chain(nodes))

    num_parameters = sum(l.num_parameters() for l in layers)
    if training:
        model_flop = float(sum(n.flop() for n in graph.nodes if n.phase in ("forward", "backward")))
    else:
        model_flop = graph.total_flop()

    # memory
    from gpusim.workload.ops import Embedding, OptimizerUpdate, dtype_bytes
    # a library workspace and the largest output a kernel of the GPU's layers writes, this rank's
    # share: each layer's largest output (by name: ``layer3.fc1``, ``prefill.layer3.fc1``; None for a
    # kernel of no layer, which every stage counts), split over the tensor-parallel ranks and, but for
    # the weight gradients (a weight-gradient GEMM's, the embedding's table), the context-parallel ones
    names = {layer.name for layer in layers}
    written: dict[str | None, float] = {}
    for n in graph.nodes:
        if n.phase != "optimizer":
            owner = next((part for part in n.name.split(".")[:2] if part in names), None)
            weight_sized = n.name.endswith(".wgrad") or (isinstance(n.op, Embedding) and n.phase == "backward")
            share = n.op.bytes_written() / (par.tensor * (1 if weight_sized else par.context))
            written[owner] = max(written.get(owner, 0.0), share)

    def workspace_of(held: Sequence) -> float:
        largest = max([written.get(None, 0.0)] + [written.get(layer.name, 0.0) for layer in held])
        return LIBRARY_WORKSPACE_BYTES + largest
    # each pipeline stage holds its own model chunks (the first the embedding, the last the head, with
    # its copy of a tied embedding)
    if r is not None:
        staged = list(layers[:-1]) + [T.pipelined_head(r, layers[-1]) if par.pipeline > 1 else layers[-1]]
        chunks_by_stage = stage_chunks(staged, par.pipeline, par.virtual_stages)
        held_by_stage = stage_layers(staged, par.pipeline, par.virtual_stages)
    else:
        chunks_by_stage, held_by_stage = [[list(layers)]], [list(layers)]
    if training:
        state = OptimizerUpdate(num_parameters=1, optimizer=spec.optimizer_name, dtype=p.weight_dtype,
                                master_weights=p.master_weights).state_bytes_per_parameter()
        # a mixture-of-experts layer's experts are split over the expert-parallel GPUs, and ZeRO shards
        # them over the data-parallel GPUs that hold the same experts (data / expert):
        # (expert split, ZeRO group) of the dense weights and of the experts'
        sharding = {False: (1, par.data * par.context), True: (par.expert, par.data // par.expert)}

        def activations_of(held: Sequence, checkpointing: str) -> tuple[float, float]:
            """(kept, recompute buffer) bytes of one micro-batch through ``held`` on this GPU."""
            kept, buffer = training_activation_bytes(held, fusion=spec.fusion, checkpointing=checkpointing,
                                                     tensor=par.tensor, sequence_parallel=par.sequence_parallel)
            return kept / par.context, buffer / par.context

        def stage_footprint(stage: int, held: Sequence, chunks: Sequence) -> MemoryFootprint:
            """Stage ``stage``'s footprint: the model states of its ``held`` layers, the activations
            of its model ``chunks`` in flight."""
            expert_params = sum(f.num_parameters for layer in held for f in layer.ops if f.expert)
            dense_params = sum(layer.num_parameters() for layer in held) - expert_params
            states = [model_states(
                n, training=True, weight_bytes=dtype_bytes(p.weight_dtype), grad_bytes=dtype_bytes(p.grad_dtype),
                optimizer_state_bytes=state, tensor=par.tensor * sharding[expert][0],
                data=sharding[expert][1], zero_stage=par.zero_stage)
                for n, expert in ((dense_params, False), (expert_params, True))]
            weights, grads, optim = (sum(parts) for parts in zip(*states))
            if par.zero_stage >= 3:
                # FSDP / ZeRO-3 holds whole the layer it runs and, overlapped, the one it prefetches; and a
                # layer's whole gradient until its reduce-scatter ends, overlapped beside the next layer's
                # (this GPU's tensor- and expert-parallel shares of what is sharded at all)
                def gathered(f) -> float:
                    split, group = sharding[bool(f.expert)]
                    return f.num_parameters / split if group > 1 else 0.0
                largest = max(sum(gathered(f) for f in layer.ops) for layer in held) / par.tensor
                held_layers = 2 if par.overlap_communication else 1
                weights += held_layers * largest * dtype_bytes(par.param_gather_dtype or p.weight_dtype)
                grads += held_layers * largest * dtype_bytes(par.grad_reduce_dtype or p.grad_dtype)
            if spec.fp8_weights_per_step:
                # FP8 weights cast in a step's first micro-batch are kept for its others
                weights += kept_fp8_weight_bytes(held, tensor=par.tensor, expert=par.expert)
            # the chunk forwards the schedule keeps in flight at the stage's peak; one layer is
            # recomputed at a time
            per_chunk = [activations_of(chunk, spec.activation_checkpointing) for chunk in chunks]
            activations = peak_activation_bytes(par.schedule, par.pipeline, par.microbatches or ga, par.virtual_stages,
                                                stage, [kept for kept, _ in per_chunk]) + max(b for _, b in per_chunk)
            return MemoryFootprint(weights, grads, optim, activations, kv_bytes, workspace_of(held),
                                   pipeline_stage=stage if par.pipeline > 1 else None)

        # each stage also holds the micro-batches its schedule keeps in flight; the footprint is the
        # largest stage's
        by_stage = [stage_footprint(s, held, chunks)
                    for s, (held, chunks) in enumerate(zip(held_by_stage, chunks_by_stage))]
        if spec.activation_checkpointing == "selective":
            kept_all = sum(activations_of(layers, "none"))
            saved = kept_all - sum(activations_of(layers, "selective"))
            if kept_all > 0 and saved < SELECTIVE_WORTHWHILE_FRACTION * kept_all:
                notes.append(f"selective checkpointing saves {saved / kept_all:.1%} of the "
                             "activations here (a fused attention kernel keeps only Q, K, V and its statistics) "
                             "and still recomputes the attention core")
    else:

        def serving_footprint(stage: int, held: Sequence) -> MemoryFootprint:
            # every weight in the dtype its op reads it in: an FP8 model's GEMM weights in one byte,
            # its BF16 head, embeddings and norms in two
            params = sum(layer.num_parameters() for layer in held)
            stored = sum(f.num_parameters * dtype_bytes(f.op.dtype) for layer in held for f in layer.ops)
            weights, grads, optim = model_states(params, training=False,
                                                 weight_bytes=stored / params if params else 0.0,
                                                 grad_bytes=0, optimizer_state_bytes=0, tensor=par.tensor)
            activations = inference_activation_bytes(held, spec.fusion) / par.tensor
            return MemoryFootprint(weights, grads, optim, activations, kv_bytes, workspace_of(held),
                                   pipeline_stage=stage if par.pipeline > 1 else None)

        # each stage holds its own layers' weights and its blocks' share of the KV cache
        by_stage = [serving_footprint(s, held) for s, held in enumerate(held_by_stage)]

    memory = max(by_stage, key=lambda f: f.total_bytes)
    samples = batch * ga if training else batch
    return Workload(
        name=spec.name, kind="model", mode=spec.mode, graph=graph, spec=spec, source=source,
        description=spec.description, num_parameters=int(num_parameters), samples_per_step=samples,
        tokens_per_step=tokens, model_flop_per_step=model_flop, memory=memory, fusion_mode=spec.fusion,
        precision=spec.precision, parallelism=par, details=details, notes=tuple(notes),
        memory_by_stage=tuple(by_stage) if par.pipeline > 1 else (),
        unfused_nodes=(lambda: make_nodes("none", dict(details))) if spec.fusion != "none" else None,
    )


def decode_buckets(prompt: int, generate: int, buckets: int) -> list[tuple[int, int]]:
    """(number of steps, context length) per bucket. Step j (0-based) attends to prompt + j + 1 keys
    (the cache plus the new token); a bucket runs at the rounded mean context of its steps, so the
    attention FLOP and KV bytes, linear in the context, are exact up to that rounding."""
    buckets = max(1, min(buckets, generate))
    out = []
    start = 0
    for b in range(buckets):
        end = round(generate * (b + 1) / buckets)
        steps = end - start
        if steps > 0:
            mean_context = prompt + (start + end - 1) / 2 + 1
            out.append((steps, int(round(mean_context))))
        start = end
    return out


def _logits_tokens(spec: ModelWorkloadSpec, r: T.Resolved, batch: int, prompt: int) -> int | None:
    """Prompt tokens the LM head runs on (None: every token, for heads other than ``lm``)."""
    if r.head != "lm":
        return None
    return batch * prompt if spec.prompt_logits == "all" else batch


def _inference_nodes(spec: ModelWorkloadSpec, r: T.Resolved, p: PrecisionPolicy, fusion: str,
                     details: dict[str, Any]) -> list[OpNode]:
    batch = spec.batch_size
    prompt = details["prompt_len"]
    lm = r.head == "lm"
    layers = T.build_layers(r, p, batch=batch, seq_q=prompt, seq_kv=prompt, training=False,
                            logits_tokens=_logits_tokens(spec, r, batch, prompt), kv_append=lm,
                            kv_cache_dtype=spec.kv_cache_dtype)
    nodes = forward_nodes(layers, fusion=fusion, phase="prefill" if lm else "forward",
                          prefix="prefill." if lm else "")
    plan = decode_buckets(prompt, spec.generate_len, spec.decode_buckets) if spec.generate_len else []
    details["decode_buckets"] = [{"num_steps": s, "context_len": c} for s, c in plan]
    for j, (steps, context) in enumerate(plan):
        dl = T.build_layers(r, p, batch=batch, seq_q=1, seq_kv=context, training=False, logits_tokens=batch,
                            kv_append=True, host_input=False, kv_cache_dtype=spec.kv_cache_dtype,
                            reads_kv_cache=True)
        nodes += forward_nodes(dl, fusion=fusion, phase="decode", prefix=f"decode{j}.", repeat=steps)
    return nodes
