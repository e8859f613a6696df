"""Model builders: each turns a validated config into layers of forward ops."""

from __future__ import annotations

from gpusim.workload.models.cnn import CnnConfig
from gpusim.workload.models.mlp import MlpConfig
from gpusim.workload.models.resnet import ResNetConfig
from gpusim.workload.models.transformer import TransformerConfig

CONFIG_CLASSES = {
    "gpt": TransformerConfig, "bert": TransformerConfig, "llama": TransformerConfig, "moe": TransformerConfig,
    "resnet": ResNetConfig, "mlp": MlpConfig, "cnn": CnnConfig,
}
"""The ``config:`` schema of each ``model:``."""
