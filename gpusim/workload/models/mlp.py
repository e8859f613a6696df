"""A multi-layer perceptron classifier (the classic 784-512-512-10 MNIST network by default)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpusim.config.types import Spec, count, number
from gpusim.workload.layers import FwdOp, Layer
from gpusim.workload.ops import Elementwise, HostToDevice, Matmul, Softmax, dtype_bytes
from gpusim.workload.precision import PrecisionPolicy


class MlpConfig(Spec):
    input_size: count(le=10**8) = 784
    hidden_sizes: tuple[count(le=10**7), ...] = Field(default=(512, 512), min_length=1, max_length=1000)
    num_classes: count(le=10**7) = 10
    activation: Literal["relu", "gelu", "silu", "tanh", "sigmoid"] = "relu"
    dropout: number(gt=None, ge=0.0, le=1.0) = 0.0


def linear_layer(name: str, index: int | None, p: PrecisionPolicy, batch: int, n_in: int, n_out: int,
                 activation: str | None, dropout: bool, first: bool) -> Layer:
    act = p.activation_dtype
    ops = [FwdOp("linear", Matmul(m=batch, n=n_out, k=n_in, dtype=p.matmul_dtype), num_parameters=n_in * n_out,
                 weight=True, input_grad=not first),
           FwdOp("bias", Elementwise(num_elements=batch * n_out, function="bias_add", dtype=act,
                                     broadcast_elements=n_out), num_parameters=n_out)]
    if activation:
        ops.append(FwdOp("act", Elementwise(num_elements=batch * n_out, function=activation, dtype=act)))
    if dropout:
        ops.append(FwdOp("dropout", Elementwise(num_elements=batch * n_out, function="dropout", dtype=act)))
    return Layer(name, index, tuple(ops), batch * n_in * dtype_bytes(act), checkpointable=index is not None)


def build_layers(cfg: MlpConfig, p: PrecisionPolicy, *, batch: int, training: bool) -> tuple[Layer, ...]:
    act = p.activation_dtype
    layers = [Layer("input", None, (FwdOp("input", HostToDevice(num_bytes=batch * cfg.input_size * dtype_bytes(act),
                                                                  dtype=act)),), 0.0)]
    n_in = cfg.input_size
    for i, n_out in enumerate(cfg.hidden_sizes):
        layers.append(linear_layer(f"fc{i + 1}", i, p, batch, n_in, n_out, cfg.activation,
                                   training and cfg.dropout > 0, first=i == 0))
        n_in = n_out
    head = linear_layer("head", None, p, batch, n_in, cfg.num_classes, None, False, first=False)
    if training:
        head = Layer(head.name, None, head.ops + (FwdOp("loss", Softmax(rows=batch, cols=cfg.num_classes, dtype=act),
                                                         loss=True),), head.input_bytes)
    layers.append(head)
    return tuple(layers)
