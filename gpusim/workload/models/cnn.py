"""A small convolutional classifier: the PyTorch examples MNIST network by default (two 3x3
convolutions with ReLU, 2x2 max pooling, dropout, a 128-unit hidden layer, 10 classes; 1.2 M
parameters)."""

from __future__ import annotations

from pydantic import Field

from gpusim.config.types import Spec, count, number
from gpusim.workload.layers import FwdOp, Layer
from gpusim.workload.models.mlp import linear_layer
from gpusim.workload.ops import Conv2d, Elementwise, HostToDevice, Pool2d, Softmax, dtype_bytes
from gpusim.workload.precision import PrecisionPolicy


class CnnConfig(Spec):
    image_size: count(le=100_000) = 28
    in_channels: count(le=1024) = 1
    conv_channels: tuple[count(le=100_000), ...] = Field(default=(32, 64), min_length=1, max_length=100)
    kernel_size: count(le=31) = 3
    pool_size: count(le=64) = 2
    hidden_size: count(le=10**7) = 128
    num_classes: count(le=10**7) = 10
    dropout: number(gt=None, ge=0.0, le=1.0) = 0.25


def build_layers(cfg: CnnConfig, p: PrecisionPolicy, *, batch: int, training: bool) -> tuple[Layer, ...]:
    act = p.activation_dtype
    b = dtype_bytes(act)
    hw, cin = cfg.image_size, cfg.in_channels
    layers = [Layer("input", None, (FwdOp("input", HostToDevice(num_bytes=batch * cin * hw * hw * b, dtype=act)),),
                    0.0)]
    for i, cout in enumerate(cfg.conv_channels):
        if hw < cfg.kernel_size:
            from gpusim.workload.layers import ModelError
            raise ModelError("config.conv_channels", f"image too small for {len(cfg.conv_channels)} convolutions")
        conv = Conv2d(batch=batch, in_channels=cin, out_channels=cout, height=hw, width=hw,
                      kernel_size=cfg.kernel_size, dtype=p.matmul_dtype)
        out = conv.out_height
        n = batch * cout * out * out
        ops = (FwdOp("conv", conv, num_parameters=conv.num_weights, weight=True, input_grad=i > 0),
               FwdOp("bias", Elementwise(num_elements=n, function="bias_add", dtype=act, broadcast_elements=cout),
                     num_parameters=cout),
               FwdOp("relu", Elementwise(num_elements=n, function="relu", dtype=act)))
        layers.append(Layer(f"conv{i + 1}", i, ops, batch * cin * hw * hw * b, checkpointable=True))
        cin, hw = cout, out
    pool = Pool2d(batch=batch, channels=cin, height=hw, width=hw, kernel_size=cfg.pool_size, stride=cfg.pool_size,
                  dtype=act)
    pool_ops = [FwdOp("maxpool", pool)]
    flat = cin * pool.out_height * pool.out_width
    if training and cfg.dropout > 0:
        pool_ops.append(FwdOp("dropout", Elementwise(num_elements=batch * flat, function="dropout", dtype=act)))
    layers.append(Layer("pool", None, tuple(pool_ops), batch * cin * hw * hw * b))
    n = len(cfg.conv_channels)
    layers.append(linear_layer("fc1", n, p, batch, flat, cfg.hidden_size, "relu", training and cfg.dropout > 0,
                               first=False))
    head = linear_layer("head", None, p, batch, cfg.hidden_size, cfg.num_classes, None, False, first=False)
    if training:
        head = Layer("head", None, head.ops + (FwdOp("loss", Softmax(rows=batch, cols=cfg.num_classes, dtype=act),
                                                     loss=True),), head.input_bytes)
    layers.append(head)
    return tuple(layers)
