"""ResNet (He et al. 2016, "Deep Residual Learning for Image Recognition"), torchvision's v1.5 layout:
the stride of a bottleneck sits on its 3x3 convolution. Depths 18/34 use basic blocks, 50/101/152
bottlenecks. Batch norm is a training-mode kernel in training and folds into a per-channel
scale-and-shift (fused into the convolution epilogue) in inference."""

from __future__ import annotations

from typing import Literal

from gpusim.config.types import Spec, count
from gpusim.workload.layers import FwdOp, Layer
from gpusim.workload.ops import BatchNorm, Conv2d, Elementwise, HostToDevice, Matmul, Pool2d, Softmax, dtype_bytes
from gpusim.workload.precision import PrecisionPolicy

STAGES = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}


class ResNetConfig(Spec):
    depth: Literal[18, 34, 50, 101, 152] = 50
    image_size: count(ge=32, le=100_000) = 224
    in_channels: count(le=1024) = 3
    num_classes: count(le=10**7) = 1000
    base_width: count(le=100_000) = 64


class _Block:
    def __init__(self, p: PrecisionPolicy, batch: int, training: bool) -> None:
        self.p, self.n, self.training = p, batch, training
        self.ops: list[FwdOp] = []

    def conv(self, name: str, cin: int, cout: int, hw: int, k: int, stride: int = 1, pad: int = 0,
             input_grad: bool = True) -> int:
        op = Conv2d(batch=self.n, in_channels=cin, out_channels=cout, height=hw, width=hw, kernel_size=k,
                    stride=stride, padding=pad, dtype=self.p.matmul_dtype)
        self.ops.append(FwdOp(name, op, num_parameters=op.num_weights, weight=True, input_grad=input_grad))
        out = op.out_height
        act = self.p.activation_dtype
        if self.training:
            self.ops.append(FwdOp(f"{name}_bn", BatchNorm(rows=self.n * out * out, cols=cout, dtype=act),
                                  num_parameters=2 * cout))
        else:
            self.ops.append(FwdOp(f"{name}_bn", Elementwise(num_elements=self.n * cout * out * out,
                                                            function="scale_shift", dtype=act,
                                                            broadcast_elements=2 * cout), num_parameters=2 * cout))
        return out

    def ew(self, name: str, function: str, elements: int) -> None:
        self.ops.append(FwdOp(name, Elementwise(num_elements=elements, function=function,
                                                dtype=self.p.activation_dtype)))


def build_layers(cfg: ResNetConfig, p: PrecisionPolicy, *, batch: int, training: bool) -> tuple[Layer, ...]:
    act = dtype_bytes(p.activation_dtype)
    n = batch
    layers: list[Layer] = []
    stem = _Block(p, n, training)
    hw = cfg.image_size
    stem.ops.append(FwdOp("input", HostToDevice(num_bytes=n * cfg.in_channels * hw * hw * act,
                                                 dtype=p.activation_dtype)))
    hw = stem.conv("conv1", cfg.in_channels, cfg.base_width, hw, 7, 2, 3, input_grad=False)
    stem.ew("relu", "relu", n * cfg.base_width * hw * hw)
    pool = Pool2d(batch=n, channels=cfg.base_width, height=hw, width=hw, kernel_size=3, stride=2, padding=1,
                  dtype=p.activation_dtype)
    stem.ops.append(FwdOp("maxpool", pool))
    hw = pool.out_height
    layers.append(Layer("stem", None, tuple(stem.ops), n * cfg.in_channels * cfg.image_size ** 2 * act))
    bottleneck = cfg.depth >= 50
    expansion = 4 if bottleneck else 1
    cin = cfg.base_width
    index = 0
    cache: dict[tuple, tuple[FwdOp, ...]] = {}
    for stage, num_blocks in enumerate(STAGES[cfg.depth]):
        width = cfg.base_width * 2 ** stage
        cout = width * expansion
        for b in range(num_blocks):
            stride = 2 if (b == 0 and stage > 0) else 1
            key = (cin, width, hw, stride)
            ops = cache.get(key)
            out_hw = (hw - 1) // stride + 1
            if ops is None:
                blk = _Block(p, n, training)
                if bottleneck:
                    h1 = blk.conv("conv1", cin, width, hw, 1)
                    blk.ew("relu1", "relu", n * width * h1 * h1)
                    h2 = blk.conv("conv2", width, width, h1, 3, stride, 1)
                    blk.ew("relu2", "relu", n * width * h2 * h2)
                    blk.conv("conv3", width, cout, h2, 1)
                else:
                    h1 = blk.conv("conv1", cin, width, hw, 3, stride, 1)
                    blk.ew("relu1", "relu", n * width * h1 * h1)
                    blk.conv("conv2", width, cout, h1, 3, 1, 1)
                if stride != 1 or cin != cout:
                    blk.conv("downsample", cin, cout, hw, 1, stride)
                blk.ew("residual", "add", n * cout * out_hw * out_hw)
                blk.ew("relu_out", "relu", n * cout * out_hw * out_hw)
                ops = cache[key] = tuple(blk.ops)
            layers.append(Layer(f"stage{stage + 1}.block{b}", index, ops, n * cin * hw * hw * act, checkpointable=True))
            index += 1
            cin, hw = cout, out_hw
    head = _Block(p, n, training)
    head.ops.append(FwdOp("avgpool", Pool2d(batch=n, channels=cin, height=hw, width=hw, kernel_size=hw, stride=hw,
                                            function="avg", dtype=p.activation_dtype)))
    head.ops.append(FwdOp("fc", Matmul(m=n, n=cfg.num_classes, k=cin, dtype=p.matmul_dtype),
                          num_parameters=cin * cfg.num_classes, weight=True))
    head.ops.append(FwdOp("fc_bias", Elementwise(num_elements=n * cfg.num_classes, function="bias_add",
                                                 dtype=p.activation_dtype, broadcast_elements=cfg.num_classes),
                          num_parameters=cfg.num_classes))
    if training:
        head.ops.append(FwdOp("loss", Softmax(rows=n, cols=cfg.num_classes, dtype=p.activation_dtype), loss=True))
    layers.append(Layer("head", None, tuple(head.ops), n * cin * hw * hw * act))
    return tuple(layers)
