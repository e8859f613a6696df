"""Workloads: operator values, model builders, training and inference graphs, memory footprints.

The public API::

    from gpusim.workload import load_workload, fits
    w = load_workload("gpt3_175b_train", ["batch_size=4"])
    w.graph.nodes, w.num_parameters, w.flop_per_step(), w.memory.total_bytes
"""

from gpusim.workload.graph import OpNode, WorkloadGraph
from gpusim.workload.load import FusionSummary, Workload, decode_buckets, list_workloads, load_workload
from gpusim.workload.memory import MemoryFootprint, fits
from gpusim.workload.ops import (
    OP_CLASSES,
    AllGather,
    AllReduce,
    AllToAll,
    Attention,
    BatchNorm,
    Collective,
    Conv2d,
    Copy,
    DeviceToHost,
    Elementwise,
    Embedding,
    HostToDevice,
    LayerNorm,
    Matmul,
    Op,
    OptimizerUpdate,
    Pool2d,
    ReduceScatter,
    Reduction,
    RMSNorm,
    SendRecv,
    Softmax,
)
from gpusim.workload.precision import PrecisionPolicy, policy

__all__ = [
    "AllGather", "AllReduce", "AllToAll", "Attention", "BatchNorm", "Collective", "Conv2d", "Copy", "DeviceToHost",
    "Elementwise", "Embedding", "FusionSummary", "HostToDevice", "LayerNorm", "Matmul", "MemoryFootprint",
    "OP_CLASSES", "Op", "OpNode", "OptimizerUpdate", "Pool2d", "PrecisionPolicy", "RMSNorm", "ReduceScatter",
    "Reduction", "SendRecv", "Softmax", "Workload", "WorkloadGraph", "decode_buckets", "fits", "list_workloads",
    "load_workload", "policy",
]
