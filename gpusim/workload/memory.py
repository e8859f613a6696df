"""Memory footprint of a workload on one GPU, and whether it fits.

Model states per parameter (Rajbhandari et al. 2020, "ZeRO", section 3.1): mixed-precision Adam keeps
2 bytes of 16-bit weights, 2 of 16-bit gradients and 12 of FP32 master weights, momentum and variance
(16 bytes); FP32 Adam keeps 4 + 4 + 8. Activations come from the ops each layer saves for its backward
(:func:`gpusim.workload.layers.saved_bytes`), per micro-batch, after checkpointing. The workspace is
a library workspace (cuBLAS) plus the largest single output a kernel writes that is not counted
elsewhere.

Sharding with a parallel layout: tensor (t) and pipeline (p) parallelism split the model states over
t*p GPUs; ZeRO stage 1/2/3 further splits optimizer states / + gradients / + weights over the data-
parallel GPUs. Activations are split over t (with sequence parallelism all of them; without it the
norms' inputs, the column-parallel GEMMs' input and the dropout masks stay whole on every rank,
Korthikanti et al. 2022) and over the context-parallel GPUs c, each of which holds 1/c of every
sequence (ZeRO then shards over the data x context GPUs, which all hold the same weights); under
the 1F1B pipeline schedule the first stage holds min(p, micro-batches) micro-batches of 1/p of the
layers (GPipe all of them, the interleaved schedule p + (p - 1) / v; see
:func:`pipeline_microbatches_in_flight`). The KV cache is split over min(t, kv_heads) and p.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

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


def pipeline_microbatches_in_flight(schedule: str, stages: int, microbatches: int, virtual_stages: int = 1) -> float:
    """Micro-batches whose activations the first pipeline stage holds at its peak, in units of one
    micro-batch through all the stage's layers: GPipe runs every forward before any backward (all
    m); 1F1B starts a backward after p forwards (min(p, m)); the interleaved schedule's first stage
    warms up (p - 1) more model chunks of 1/v of its layers, p (1 + (p - 1) / (p v)) micro-batches
    (Korthikanti et al. 2022, section 4.2.3). One stage: one micro-batch at a time."""
    if stages <= 1:
        return 1.0
    if schedule == "gpipe":
        return float(microbatches)
    if schedule == "interleaved":
        return min(float(microbatches), stages + (stages - 1) / virtual_stages)
    return float(min(stages, microbatches))


def model_states(num_parameters: int, *, training: bool, weight_bytes: float, grad_bytes: float,
                 optimizer_state_bytes: float, tensor: int = 1, pipeline: int = 1, data: int = 1,
                 zero_stage: int = 0) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per GPU."""
    model_split = tensor * pipeline
    weights = num_parameters * weight_bytes / model_split
    if not training:
        return weights, 0.0, 0.0
    grads = num_parameters * grad_bytes / model_split
    optim = num_parameters * optimizer_state_bytes / model_split
    if zero_stage >= 1:
        optim /= data
    if zero_stage >= 2:
        grads /= data
    if zero_stage >= 3:
        weights /= data
    return weights, grads, optim
