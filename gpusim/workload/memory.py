"""Memory footprint of a workload on one GPU, and whether it fits.

Model states per parameter (Rajbhandari et al. 2020, "ZeRO", section 3.1): mixed-precision Adam keeps
2 bytes of 16-bit weights, 2 of 16-bit gradients and 12 of FP32 master weights, momentum and variance
(16 bytes); FP32 Adam keeps 4 + 4 + 8. Activations come from the ops each layer saves for its backward
(:func:`gpusim.workload.layers.saved_bytes`), per micro-batch, after checkpointing. The workspace is
a library workspace (cuBLAS) plus the largest single output a kernel writes that is not counted
elsewhere. FP8 training that casts its weights once per step keeps their FP8 copies (and transposes)
with the weights (:func:`kept_fp8_weight_bytes`).

Sharding with a parallel layout: tensor (t) parallelism splits a pipeline stage's model states over t
GPUs; ZeRO stage 1/2/3 further splits optimizer states / + gradients / + weights over the data-
parallel GPUs. Activations are split over t (with sequence parallelism all of them; without it the
norms' inputs, the column-parallel GEMMs' input and the dropout masks stay whole on every rank,
Korthikanti et al. 2022) and over the context-parallel GPUs c, each of which holds 1/c of every
sequence (ZeRO then shards over the data x context GPUs, which all hold the same weights). A
pipeline stage holds its own layers' states (the first stage the embedding, the last the head; see
:func:`stage_chunks`) and the activations of the chunk forwards its schedule keeps in flight at its
peak (1F1B's stage s min(p - s, micro-batches), GPipe all of them; see
:func:`peak_activation_bytes`); a training footprint is its fullest stage's. The KV cache is split
over min(t, kv_heads) and p.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from gpusim.workload.schedule import pipeline_order

if TYPE_CHECKING:
    from gpusim.workload.layers import Layer

LIBRARY_WORKSPACE_BYTES = 32 * 2**20
"""cuBLAS workspace PyTorch reserves on Hopper-class GPUs (32 MiB)."""


@dataclass(frozen=True)
class MemoryFootprint:
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    kv_cache_bytes: float
    workspace_bytes: float
    pipeline_stage: int | None = None
    """The pipeline stage these bytes are on: the one that needs most (None without a pipeline)."""

    @property
    def total_bytes(self) -> float:
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.activations_bytes
                + self.kv_cache_bytes + self.workspace_bytes)

    def to_dict(self) -> dict[str, float]:
        out = asdict(self)
        out["total_bytes"] = self.total_bytes
        return out


def fits(footprint: MemoryFootprint, capacity_bytes: float) -> tuple[bool, float]:
    """(True, 0) when the footprint fits in ``capacity_bytes``; otherwise (False, bytes missing)."""
    shortfall = footprint.total_bytes - capacity_bytes
    return (shortfall <= 0, max(0.0, shortfall))


def peak_activation_bytes(schedule: str, stages: int, microbatches: int, virtual_stages: int, stage: int,
                          chunk_bytes: Sequence[float]) -> float:
    """The most activation bytes pipeline stage ``stage`` keeps at once: its schedule's forwards and
    backwards replayed (:func:`gpusim.workload.schedule.pipeline_order`, the order the step engine
    runs), each forward of model chunk c keeping ``chunk_bytes[c]`` until its backward. GPipe keeps
    every micro-batch; 1F1B's stage s min(p - s, m); the interleaved schedule's stage s its
    2 (p - s - 1) + (v - 1) p warm-up chunk forwards and one more (Megatron-LM's schedule; for equal
    chunks on the first stage p (1 + (p - 1) / (p v)) micro-batches, Korthikanti et al. 2022,
    section 4.2.3), as many of each chunk as the order runs. One stage: one micro-batch at a time."""
    if stages <= 1:
        return float(sum(chunk_bytes))
    live = peak = 0.0
    for kind, _, chunk in pipeline_order(schedule, stages, microbatches, stage, virtual_stages):
        live += chunk_bytes[chunk] if kind == "F" else -chunk_bytes[chunk]
        peak = max(peak, live)
    return peak


def stage_chunks(layers: Sequence[Layer], stages: int, virtual_stages: int = 1) -> list[list[list[Layer]]]:
    """The model chunks of a language model (embedding, blocks, head) that each pipeline stage holds:
    the blocks in ``stages x virtual_stages`` equal chunks, chunk c p + s the stage's c-th, the
    embedding with the first chunk and the head with the last, as the step engine runs them."""
    if stages * virtual_stages <= 1:
        return [[list(layers)]]
    embedding, blocks, head = layers[0], layers[1:-1], layers[-1]
    chunks = stages * virtual_stages
    per_chunk = len(blocks) // chunks
    out: list[list[list[Layer]]] = [[] for _ in range(stages)]
    for vs in range(chunks):
        out[vs % stages].append([embedding] * (vs == 0) + list(blocks[vs * per_chunk:(vs + 1) * per_chunk])
                                + [head] * (vs == chunks - 1))
    return out


def stage_layers(layers: Sequence[Layer], stages: int, virtual_stages: int = 1) -> list[list[Layer]]:
    """The layers each pipeline stage holds, its chunks' (:func:`stage_chunks`) in order."""
    return [[layer for chunk in chunks for layer in chunk] for chunks in stage_chunks(layers, stages, virtual_stages)]


KEPT_FP8_WEIGHT_BYTES = 2
"""Bytes per weight of the FP8 copies a step keeps when its weights are cast once per step: the
quantized weight and its transpose, one byte each (Transformer Engine's cached ``weight_fp8`` and
``weight_t_fp8`` workspaces; the backward's data-gradient GEMM reads the transpose)."""


def kept_fp8_weight_bytes(held: Sequence[Layer], *, tensor: int = 1, expert: int = 1) -> float:
    """Bytes one GPU keeps for the FP8 copies of ``held`` layers' FP8 GEMM weights (this GPU's tensor-
    and, for experts, expert-parallel share), cast once per step and kept for the other micro-batches
    (:attr:`gpusim.workload.spec.ModelWorkloadSpec.fp8_weights_per_step`)."""
    total = 0.0
    for layer in held:
        for f in layer.ops:
            if f.fp8_weight_gemm:
                share = tensor * (expert if f.expert else 1)
                total += f.op.num_b_matrices * f.op.k * f.op.n / share
    return KEPT_FP8_WEIGHT_BYTES * total


def model_states(num_parameters: int, *, training: bool, weight_bytes: float, grad_bytes: float,
                 optimizer_state_bytes: float, tensor: int = 1, data: int = 1,
                 zero_stage: int = 0) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per GPU of ``num_parameters`` (a pipeline stage's)."""
    weights = num_parameters * weight_bytes / tensor
    if not training:
        return weights, 0.0, 0.0
    grads = num_parameters * grad_bytes / tensor
    optim = num_parameters * optimizer_state_bytes / tensor
    if zero_stage >= 1:
        optim /= data
    if zero_stage >= 2:
        grads /= data
    if zero_stage >= 3:
        weights /= data
    return weights, grads, optim
