"""What a fused attention kernel costs besides its products: causal tiles, the softmax's FP32
instructions, the shared-memory operand traffic, and the backward's helper kernels. Every expected
number below is worked out by hand from the tile shapes."""

from dataclasses import replace

import pytest

from gpusim.config import load_hardware
from gpusim.engine.kernel import _cta_compute_and_in_flight
from gpusim.engine.machine import machine_of
from gpusim.mapping import map_op
from gpusim.mapping.attention import masked_tiles_per_head, shared_bytes_per_tile, visible_tiles_per_head
from gpusim.workload.ops import Attention


@pytest.fixture(scope="module")
def h100():
    return machine_of(load_hardware("h100_sxm5_80gb"))


@pytest.fixture(scope="module")
def a100():
    return machine_of(load_hardware("a100_sxm4_80gb"))


def _op(variant="forward", kernel="fused", causal=False, seq=512, **kw):
    return Attention(batch=1, heads=1, seq_len_q=seq, seq_len_kv=seq, head_dim=128, causal=causal, kernel=kernel,
                     variant=variant, **kw)


def test_causal_tiles_count_the_diagonal_whole():
    # 512 tokens, 128-row own blocks, 64-row streamed tiles: 4 x 8 = 32 tiles without a mask. Causal
    # forward: query block b's last row (127, 255, 383, 511) sees 2, 4, 6, 8 key tiles = 20; backward:
    # key block c is seen from query tile 2c on, 8 - 2c = 8, 6, 4, 2 = 20 (the exact visible share
    # is about half, 16.5 tiles' worth: the diagonal tiles are computed whole).
    assert visible_tiles_per_head(_op(), True, 128, 64) == 32
    assert visible_tiles_per_head(_op(causal=True), True, 128, 64) == 20
    assert visible_tiles_per_head(_op("backward", causal=True), False, 128, 64) == 20
    # a decode step (1 query aligned to the end of 512 keys) sees every key tile
    decode = Attention(batch=1, heads=1, seq_len_q=1, seq_len_kv=512, head_dim=128, causal=True)
    assert visible_tiles_per_head(decode, True, 16, 64) == 8


def test_the_mask_is_applied_to_the_diagonal_tiles_only(h100):
    # 512 tokens, 128-row own blocks, 64-row streamed tiles. Forward: query block b's rows
    # 128b..128b+127 straddle the diagonal in key tiles 2b and 2b+1 (keys 128b..128b+127), 2 of its
    # 2b+2 visible tiles: 8 of 20. Backward: key block c is straddled by query tiles 2c and 2c+1: 8.
    assert masked_tiles_per_head(_op(causal=True), True, 128, 64) == 8
    assert masked_tiles_per_head(_op("backward", causal=True), False, 128, 64) == 8
    assert masked_tiles_per_head(_op(), True, 128, 64) == 0
    # a decode step's query sees every key: nothing to mask
    decode = Attention(batch=1, heads=1, seq_len_q=1, seq_len_kv=512, head_dim=128, causal=True)
    assert masked_tiles_per_head(decode, True, 16, 64) == 0
    # the compare-and-select per masked score is FP32 work of the CTA (on H100 in series with the
    # products). FlashAttention-2's forward, 128-row own blocks and 64-key tiles: each of a head's 4
    # CTAs runs 5 visible tiles (40,960 scores) at 3.5 + 128 / 64 softmax instructions each, and masks
    # 2 tiles (16,384 scores) at 2 more
    plan = map_op(_op(causal=True), h100)[0]
    assert (plan.tile.block_m, plan.tile.block_n, plan.grid) == (128, 64, 4)
    assert plan.vector_ops_per_cta == pytest.approx(5.5 * 40_960 + 2.0 * 16_384)
    assert map_op(_op(), h100)[0].vector_ops_per_cta == pytest.approx(5.5 * 8 * 128 * 64)  # no mask, 8 tiles


def test_the_2022_triton_kernel_runs_its_own_softmax_and_masks_every_tile(h100):
    # llm-foundry's flash_attn_triton.py, 128 x 128 tiles: 512 causal tokens are 4 blocks seeing
    # 1 + 2 + 3 + 4 = 10 tiles, 2.5 tiles = 40,960 scores per CTA, every one of them masked (no
    # diagonal special case). Forward: 4.5 softmax instructions + 128 / 128 for rescaling O + 3 for
    # the mask (compare, select, add); backward: 6 + 2 (compare, select)
    forward = map_op(_op(kernel="fused_unpipelined", causal=True), h100)[0]
    assert (forward.tile.block_m, forward.tile.block_n, forward.grid) == (128, 128, 4)
    assert forward.vector_ops_per_cta == pytest.approx((4.5 + 1.0 + 3.0) * 40_960)
    backward = [p for p in map_op(_op("backward", kernel="fused_unpipelined", causal=True), h100)
                if "unpipelined" in p.name][0]
    assert backward.vector_ops_per_cta == pytest.approx((6.0 + 2.0) * 40_960)
    # without a mask the instructions per score are the softmax's alone, over all 16 tiles
    plain = map_op(_op(kernel="fused_unpipelined"), h100)[0]
    assert plain.vector_ops_per_cta == pytest.approx(5.5 * 4 * 128 * 128)


def test_on_ampere_only_the_triton_kernel_runs_its_softmax_in_series(a100):
    # FlashAttention-2's warps overlap one another's softmax with their products (no FP32 work in
    # series); the 2022 Triton kernel's one CTA per SM moves through both in step: the same counts as
    # on H100, (4.5 + 1 + 3) x 40,960 for 512 causal tokens
    assert map_op(_op(causal=True), a100)[0].vector_ops_per_cta == 0.0
    triton = map_op(_op(kernel="fused_unpipelined", causal=True), a100)[0]
    assert triton.ctas_per_unit == 1
    assert triton.vector_ops_per_cta == pytest.approx((4.5 + 1.0 + 3.0) * 40_960)


def test_an_alibi_bias_costs_its_instructions_per_score(h100):
    # FlashAttention-2, 512 tokens, 128 x 64 tiles, no mask: 8 tiles x 128 x 64 = 65,536 scores per
    # CTA at 3.5 + 128 / 64 softmax instructions, plus 2 for the bias (key index converted, an FMA)
    plain = map_op(_op(), h100)[0]
    biased = map_op(_op(score_bias=True), h100)[0]
    assert plain.vector_ops_per_cta == pytest.approx(5.5 * 65_536)
    assert biased.vector_ops_per_cta == pytest.approx(7.5 * 65_536)
    # the 2022 Triton kernel adds its loaded bias row in one more instruction per score (causal:
    # 10 of 16 tiles, 40,960 scores per CTA, all of them masked)
    triton = map_op(_op(kernel="fused_unpipelined", causal=True, score_bias=True), h100)[0]
    assert triton.vector_ops_per_cta == pytest.approx((4.5 + 1.0 + 1.0 + 3.0) * 40_960)
    assert biased.flop_per_cta == plain.flop_per_cta  # the bias is not model FLOP


def _masked_tiles_by_pairs(op, forward, block, kv_block):
    """Reference count: every (own block, streamed tile) pair with a visible and a masked pair."""
    sq, skv = op.seq_len_q, op.seq_len_kv
    offset = skv - sq
    own, streamed = ((sq, skv) if forward else (skv, sq))
    count = 0
    for a in range(-(-own // block)):
        for b in range(-(-streamed // kv_block)):
            rows = (a * block, min((a + 1) * block, own) - 1)
            cols = (b * kv_block, min((b + 1) * kv_block, streamed) - 1)
            queries, keys = (rows, cols) if forward else (cols, rows)
            count += keys[0] <= queries[1] + offset and keys[1] > queries[0] + offset
    return count


@pytest.mark.parametrize("sq, skv", [(1, 1), (1, 300), (100, 100), (200, 517), (512, 512), (700, 701)])
@pytest.mark.parametrize("block, kv_block", [(128, 64), (64, 128), (16, 16), (128, 128)])
def test_masked_tile_count_matches_the_pairs_it_covers(sq, skv, block, kv_block):
    for variant in ("forward", "backward"):
        op = Attention(batch=1, heads=1, seq_len_q=sq, seq_len_kv=skv, head_dim=64, causal=True, variant=variant)
        forward = variant == "forward"
        assert masked_tiles_per_head(op, forward, block, kv_block) == _masked_tiles_by_pairs(op, forward, block,
                                                                                             kv_block)


def test_shared_memory_bytes_per_tile_forward(h100):
    # FlashAttention-2 forward, 4 warps each owning 32 of the 128 query rows, 64-key tiles, d = 128:
    # S = Q K^T reads Q once (128 x 128) and K once per warp (4 x 64 x 128); O += P V reads V once per
    # warp (4 x 64 x 128); K and V are staged (2 x 64 x 128). 98,304 BF16 elements.
    assert shared_bytes_per_tile(h100, _op(), True, 128, 64, 4) == 98_304 * 2
    # FlashAttention-3 (wgmma, 64 rows per instruction): K and V read once per 64-row half:
    # 128 x 128 + 2 x 64 x 128 + 2 x 64 x 128 + 2 x 64 x 128 = 65,536 elements.
    assert shared_bytes_per_tile(h100, _op(kernel="fused_async"), True, 128, 64, 4) == 65_536 * 2


def test_shared_memory_bytes_per_tile_backward(h100):
    # FlashAttention-2 backward, 8 warps, 128 own keys, 64-query tiles, d = 128. S and dP (64 x 128,
    # k 128) on a 2 x 4 warp grid: 64 x 4 + 128 x 2 = 512 per k, 65,536 each; dV and dK (128 x 128,
    # k 64) on 4 x 2: 128 x 2 + 128 x 4 = 768 per k, 49,152 each; dQ (64 x 128, k 128) 65,536; P and dS
    # written (2 x 64 x 128) and Q and dO staged (2 x 64 x 128). 327,680 elements.
    assert shared_bytes_per_tile(h100, _op("backward"), False, 128, 64, 8) == 327_680 * 2
    # FlashAttention-3: two consumer warpgroups of 64-row instructions. S, dP: 64 x 2 + 128 = 256 per k
    # (32,768 each); dV, dK: 128 + 128 x 2 = 384 per k (24,576 each); dQ 32,768; 32,768 written and
    # staged; plus the FP32 dQ tile written and read for the bulk reduction (2 x 64 x 128 x 4 bytes).
    expected = (3 * 32_768 + 2 * 24_576 + 32_768) * 2 + 2 * 64 * 128 * 4
    assert shared_bytes_per_tile(h100, _op("backward", kernel="fused_async"), False, 128, 64, 8) == expected


def test_backward_runs_preprocess_main_and_postprocess_kernels(h100):
    op = Attention(batch=2, heads=16, seq_len_q=2048, seq_len_kv=2048, head_dim=128, variant="backward")
    pre, main, post = map_op(op, h100)
    assert pre.name == "attention_backward_preprocess" and post.name == "attention_backward_postprocess"
    assert main.name.startswith("attention_backward[flash_")
    # the model FLOP stays with the main kernel
    assert pre.useful_flop == post.useful_flop == 0.0 and main.useful_flop == op.flop()
    elements = 2 * 16 * 2048 * 128
    # preprocess reads O and dO, writes D and zeroes the FP32 dQ accumulator; postprocess reads that
    # accumulator and writes dQ
    assert pre.dram_bytes == pytest.approx(2 * elements * 2 + 2 * 16 * 2048 * 4 + elements * 4)
    assert post.dram_bytes == pytest.approx(elements * 4 + elements * 2)


def test_softmax_instructions_in_series_on_hopper_and_hidden_on_ampere(h100, a100):
    op = Attention(batch=1, heads=16, seq_len_q=4096, seq_len_kv=4096, head_dim=128)
    (plan,) = map_op(op, h100)
    # 3.5 per score plus head_dim / kv_block = 128 / 64 for rescaling O: 5.5 per score of the CTA's
    # 128 rows x 4096 keys
    assert plan.vector_ops_per_cta == pytest.approx(5.5 * 128 * 4096)
    with_alu, _, _ = _cta_compute_and_in_flight(plan, h100, plan.grid)
    without, _, _ = _cta_compute_and_in_flight(replace(plan, vector_ops_per_cta=0.0), h100, plan.grid)
    per_unit = min(plan.ctas_per_unit, -(-plan.grid // h100.num_units))
    ops_rate = h100.vector_rate_per_unit("fp32") / 2 / per_unit
    assert with_alu - without == pytest.approx(plan.vector_ops_per_cta / ops_rate)
    (ampere,) = map_op(op, a100)
    assert ampere.vector_ops_per_cta == 0.0


def test_softmax_counts_real_rows_of_a_decode_step(h100):
    # one query per head: the tile is padded to 16 rows for the products, the softmax is not
    op = Attention(batch=8, heads=32, seq_len_q=1, seq_len_kv=4096, head_dim=128, kernel="fused_async")
    (plan,) = map_op(op, h100)
    assert plan.tile.block_m == 16
    assert plan.sfu_ops_per_cta == pytest.approx(4096)
    assert plan.flop_per_cta == pytest.approx(2 * 2 * 16 * 4096 * 128)
