"""Precision policies: which dtype each kind of op computes and stores in.

* ``fp32``: everything FP32.
* ``tf32``: FP32 storage, TF32 tensor-core matmuls (PyTorch ``allow_tf32``).
* ``fp16`` / ``bf16``: 16-bit weights, activations and gradients; training keeps FP32 master weights
  and FP32 optimizer states (Micikevicius et al. 2018, "Mixed Precision Training").
* ``fp8``: FP8 GEMM inputs with BF16 outputs and BF16 everything else, as NVIDIA Transformer Engine
  does; training keeps BF16 working weights plus FP32 master weights; serving stores the GEMM weights
  in FP8 (embeddings and norms in BF16).
  Attention runs in BF16 (FlashAttention-2), and so do the output head and an MoE router
  (:attr:`PrecisionPolicy.unquantized_matmul_dtype`). Each FP8 linear layer pays its quantization kernels
  (input, weight and output-gradient casts, as ``te.Linear``; see gpusim.workload.expand).
"""

from __future__ import annotations

from dataclasses import dataclass

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")


@dataclass(frozen=True)
class PrecisionPolicy:
    name: str
    matmul_dtype: str
    """GEMM and convolution inputs."""
    attention_dtype: str
    activation_dtype: str
    """Element-wise, normalization and softmax kernels; saved activations."""
    weight_dtype: str
    """Working weights in training (what the forward reads). Serving stores each weight in the dtype
    its op reads it in (an FP8 model's GEMM weights in FP8)."""
    grad_dtype: str
    master_weights: bool
    """Training keeps an FP32 master copy of the weights (mixed precision)."""

    @property
    def unquantized_matmul_dtype(self) -> str:
        """GEMMs an FP8 recipe leaves in 16 bits: the output head (logits) and an MoE router. Megatron-LM
        and NeMo build them as plain BF16 layers, not Transformer Engine FP8 modules (``output_layer``
        is a ``ColumnParallelLinear``), llm-foundry's tied head multiplies by the BF16 embedding, and
        TensorRT Model Optimizer's FP8 recipes leave ``*lm_head*`` and ``*router*`` unquantized."""
        return "bf16" if self.matmul_dtype == "fp8" else self.matmul_dtype


def policy(name: str) -> PrecisionPolicy:
    if name in ("fp32", "tf32"):
        return PrecisionPolicy(name, name, name, "fp32", "fp32", "fp32", False)
    if name in ("fp16", "bf16"):
        return PrecisionPolicy(name, name, name, name, name, name, True)
    if name == "fp8":
        return PrecisionPolicy(name, "fp8", "bf16", "bf16", "bf16", "bf16", True)
    raise ValueError(f"unknown precision {name!r}; expected one of {', '.join(PRECISIONS)}")
