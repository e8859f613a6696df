"""Op values: FLOP and bytes derived by hand."""

from __future__ import annotations

import pytest

from gpusim.workload import (
    AllGather, AllReduce, Attention, Conv2d, Copy, Elementwise, HostToDevice, LayerNorm, Matmul, OptimizerUpdate,
    ReduceScatter, RMSNorm, Softmax,
)


def test_matmul_flop_and_bytes():
    op = Matmul(m=128, n=256, k=64, dtype="bf16")
    assert op.flop() == 2 * 128 * 256 * 64
    assert op.bytes_read() == (128 * 64 + 64 * 256) * 2
    assert op.bytes_written() == 128 * 256 * 2


def test_batched_matmul_with_shared_weight_reads_it_once():
    shared = Matmul(m=16, n=32, k=8, batch=4, b_batch=1, dtype="fp32")
    assert shared.flop() == 2 * 4 * 16 * 32 * 8
    assert shared.bytes_read() == (4 * 16 * 8 + 1 * 8 * 32) * 4


def test_fp8_gemm_writes_bf16():
    op = Matmul(m=64, n=64, k=64, dtype="fp8")
    assert op.out_dtype == "bf16"
    assert op.bytes_read() == 2 * 64 * 64 * 1
    assert op.bytes_written() == 64 * 64 * 2


def test_epilogue_adds_vector_flop_and_residual_bytes_not_matrix_flop():
    plain = Matmul(m=64, n=32, k=16)
    fused = Matmul(m=64, n=32, k=16, epilogue=("bias_add", "gelu", "add"))
    assert fused.matrix_flop() == plain.matrix_flop()
    assert fused.vector_flop() == (1 + 10 + 1) * 64 * 32
    assert fused.bytes_read() == plain.bytes_read() + 64 * 32 * 2  # the residual input
    assert fused.bytes_written() == plain.bytes_written()


def test_conv_implicit_gemm_resnet_3x3():
    op = Conv2d(batch=2, in_channels=64, out_channels=128, height=56, width=56, kernel_size=3, stride=1, padding=1,
                dtype="fp16")
    m, n, k = op.implicit_gemm()
    assert (m, n, k) == (2 * 56 * 56, 128, 64 * 9)
    assert op.flop() == 2 * m * n * k
    assert op.bytes_read() == (2 * 64 * 56 * 56 + 128 * 64 * 9) * 2
    assert op.bytes_written() == 2 * 128 * 56 * 56 * 2


def test_conv_strided_and_grouped():
    op = Conv2d(batch=1, in_channels=32, out_channels=64, height=224, width=224, kernel_size=7, stride=2, padding=3,
                groups=4)
    assert (op.out_height, op.out_width) == (112, 112)
    assert op.implicit_gemm() == (112 * 112, 16, 8 * 49)
    assert op.gemm_batch() == 4
    assert op.flop() == 2 * 4 * 112 * 112 * 16 * 8 * 49


def test_conv_gradients_have_forward_flop():
    fwd = Conv2d(batch=8, in_channels=64, out_channels=64, height=28, width=28, kernel_size=3, padding=1)
    for variant in ("dgrad", "wgrad"):
        grad = Conv2d(**{**fwd.__dict__, "variant": variant})
        assert grad.flop() == fwd.flop()
        m, n, k = grad.implicit_gemm()
        assert 2 * m * n * k == pytest.approx(fwd.flop(), rel=1e-9)


def test_attention_flop_and_decomposition():
    b, h, s, d = 2, 8, 256, 64
    op = Attention(batch=b, heads=h, seq_len_q=s, seq_len_kv=s, head_dim=d, causal=True, dtype="bf16")
    assert op.matrix_flop() == 4 * b * h * s * s * d
    parts = op.decompose()
    assert [p.kind for p in parts] == ["matmul", "softmax", "matmul"]
    assert sum(p.matrix_flop() for p in parts) == op.matrix_flop()
    assert sum(p.flop() for p in parts) == op.flop()
    # a causal fused kernel executes only the visible pairs: s(s+1)/2 of s^2
    assert op.executed_flop() == pytest.approx(op.flop() * (s + 1) / (2 * s))
    unfused = Attention(batch=b, heads=h, seq_len_q=s, seq_len_kv=s, head_dim=d, causal=True, kernel="unfused")
    assert unfused.executed_flop() == unfused.flop()


def test_attention_fused_bytes_are_qkvo_and_unfused_include_scores():
    b, h, kv, s, d = 1, 8, 2, 128, 64
    op = Attention(batch=b, heads=h, kv_heads=kv, seq_len_q=s, seq_len_kv=s, head_dim=d)
    assert op.bytes_read() == (b * h * s * d + 2 * b * kv * s * d) * 2
    assert op.bytes_written() == b * h * s * d * 2 + b * h * s * 4
    unfused = Attention(batch=b, heads=h, kv_heads=kv, seq_len_q=s, seq_len_kv=s, head_dim=d, kernel="unfused")
    scores = b * h * s * s * 2
    assert unfused.bytes_written() == scores * 2 + b * h * s * d * 2  # S, P, O
    assert unfused.bytes_read() > op.bytes_read() + 2 * scores - 1


def test_attention_decode_reads_kv_cache():
    op = Attention(batch=4, heads=32, seq_len_q=1, seq_len_kv=1000, head_dim=128, causal=True)
    assert op.useful_fraction() == 1.0
    assert op.bytes_read() >= 2 * 4 * 32 * 1000 * 128 * 2


def test_attention_backward_flop():
    fwd = Attention(batch=1, heads=4, seq_len_q=64, seq_len_kv=64, head_dim=32)
    bwd = Attention(batch=1, heads=4, seq_len_q=64, seq_len_kv=64, head_dim=32, variant="backward")
    assert bwd.matrix_flop() == 2 * fwd.matrix_flop()
    assert bwd.executed_flop() > bwd.flop()  # the fused backward recomputes the scores
    assert sum(p.matrix_flop() for p in bwd.decompose()) == bwd.matrix_flop()


def test_row_ops_and_elementwise():
    sm = Softmax(rows=10, cols=100, dtype="fp32")
    assert sm.bytes_read() == sm.bytes_written() == 1000 * 4
    ln = LayerNorm(rows=10, cols=100, dtype="bf16")
    assert ln.bytes_read() == 1000 * 2 + 2 * 100 * 2
    assert ln.bytes_written() == 1000 * 2 + 2 * 10 * 4
    rms = RMSNorm(rows=10, cols=100, dtype="bf16")
    assert rms.bytes_read() == 1000 * 2 + 100 * 2
    add = Elementwise(num_elements=1000, function="add", dtype="bf16")
    assert (add.num_inputs, add.num_outputs, add.flop_per_element) == (2, 1, 1)
    assert add.bytes_read() == 4000 and add.bytes_written() == 2000
    drop = Elementwise(num_elements=1000, function="dropout", dtype="bf16")
    assert drop.bytes_written() == 1000 * (2 + 1)  # output and a one-byte mask
    chain = Elementwise(num_elements=1000, function="bias_add+gelu", dtype="bf16")
    assert (chain.num_inputs, chain.num_outputs) == (1, 1)
    assert chain.flop_per_element == 11


def test_optimizer_bytes_per_parameter():
    adam = OptimizerUpdate(num_parameters=10, optimizer="adamw", dtype="bf16", master_weights=True)
    assert adam.state_bytes_per_parameter() == 12
    # reads grad 2 + master 4 + m 4 + v 4; writes master, m, v and the bf16 copy
    assert adam.bytes_per_parameter() == 28
    sgd = OptimizerUpdate(num_parameters=10, optimizer="sgd", dtype="fp32")
    assert sgd.bytes_per_parameter() == 12 and sgd.state_bytes_per_parameter() == 0


def test_copies_and_collectives():
    assert Copy(num_bytes=100).total_bytes() == 200
    h2d = HostToDevice(num_bytes=100)
    assert (h2d.bytes_read(), h2d.bytes_written()) == (0, 100)
    ar = AllReduce(num_bytes=800, num_gpus=8)
    assert ar.wire_bytes_per_gpu() == 2 * 7 / 8 * 800
    assert AllGather(num_bytes=800, num_gpus=8).bytes_read() == 100
    assert ReduceScatter(num_bytes=800, num_gpus=8).bytes_written() == 100


def test_ops_are_hashable_values():
    a = Matmul(m=8, n=8, k=8)
    b = Matmul(m=8, n=8, k=8)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1


@pytest.mark.parametrize("make", [
    lambda: Matmul(m=0, n=1, k=1),
    lambda: LayerNorm(rows=1, cols=1, dtype="fp8"),
    lambda: Attention(batch=1, heads=6, kv_heads=4, seq_len_q=1, seq_len_kv=1, head_dim=8),
    lambda: Elementwise(num_elements=4, function="nope"),
])
def test_invalid_ops_raise(make):
    with pytest.raises(ValueError):
        make()
