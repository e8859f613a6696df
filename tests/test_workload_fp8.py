"""FP8 linear layers pay their Transformer Engine quantization kernels (te.Linear), derived by hand."""

from gpusim.workload.expand import forward_nodes, training_nodes
from gpusim.workload.layers import FwdOp, Layer
from gpusim.workload.ops import Matmul
from gpusim.workload.precision import policy

M, K, N = 4096, 1024, 3072  # tokens x in-features -> out-features


def _layer(dtype: str) -> Layer:
    gemm = Matmul(m=M, n=N, k=K, dtype=dtype)
    return Layer("fc", 0, (FwdOp("proj", gemm, num_parameters=K * N, weight=True),), input_bytes=2.0 * M * K)


def _by_name(nodes):
    return {n.name: n.op for n in nodes}


def test_training_casts_input_weight_and_output_gradient():
    nodes = _by_name(training_nodes([_layer("fp8")], fusion="default", checkpointing="none", micro_batches=1,
                                    optimizer="adamw", policy=policy("fp8")))
    x, w, g = nodes["fc.proj_fp8_input"], nodes["fc.proj_fp8_weight"], nodes["fc.proj.fp8_grad"]
    # each reads BF16 (2 B) and writes FP8 twice (row-major and transposed, 1 B each)
    for op, elements in ((x, M * K), (w, K * N), (g, M * N)):
        assert op.num_elements == elements
        assert op.bytes_read() == 2.0 * elements
        assert op.bytes_written() == 2.0 * elements
    order = list(nodes)
    assert order.index("fc.proj_fp8_input") < order.index("fc.proj_fp8_weight") < order.index("fc.proj")
    assert order.index("fc.proj.fp8_grad") < order.index("fc.proj.dgrad") < order.index("fc.proj.wgrad")


def test_inference_casts_only_the_input_once():
    nodes = _by_name(forward_nodes([_layer("fp8")], fusion="default", phase="forward"))
    assert set(nodes) == {"fc.proj_fp8_input", "fc.proj"}
    cast = nodes["fc.proj_fp8_input"]
    assert cast.bytes_read() == 2.0 * M * K and cast.bytes_written() == 1.0 * M * K


def test_bf16_layers_have_no_casts():
    nodes = training_nodes([_layer("bf16")], fusion="default", checkpointing="none", micro_batches=1,
                           optimizer="adamw", policy=policy("bf16"))
    assert not [n for n in nodes if "fp8" in n.name]
