"""Fused (flash) attention kernels: the tiles each CTA multiplies, the softmax arithmetic between the
products, the shared-memory traffic that feeds the tensor cores, and the small kernels around the
backward.

Forward (FlashAttention-2 and -3): each CTA owns ``block`` query rows of one head and streams the
head's K and V in ``kv_block`` rows; per K/V tile it computes S = Q K^T, the online softmax of S,
and O += P V. Backward: each CTA owns ``block`` key rows and streams the head's Q and dO in
``kv_block`` rows; per tile it recomputes S and P, computes dP = dO V^T, dS = P (dP - D), and the
products dV += P^T dO, dK += dS^T Q and dQ += dS K, whose dQ it adds into an FP32 accumulator in
global memory. Around the backward run two streaming kernels: a preprocess (D = rowsum(dO * O) and
zeroing the FP32 dQ accumulator) and a postprocess (the accumulator converted to dQ), as in
FlashAttention-2 (``flash_bwd_dot_do_o_kernel``, ``flash_bwd_convert_dq_kernel``) and
FlashAttention-3 (``flash_bwd_preprocess_kernel.h``, ``flash_bwd_postprocess_kernel.h``).
"""

from __future__ import annotations

import math
from dataclasses import replace

from gpusim.config.hardware import DTYPE_BYTES
from gpusim.engine.machine import NATIVE_ONLY_MATRIX_DTYPES, Machine
from gpusim.errors import SimulationError
from gpusim.mapping.gemm import uses_matrix_pipe
from gpusim.mapping.occupancy import ctas_per_unit
from gpusim.mapping.plan import KernelPlan, Tile
from gpusim.mapping.streaming import elementwise_launch, streaming_plan
from gpusim.workload.ops import STATS_BYTES

UNPIPELINED_WAITS_PER_TRIP = 3
"""Loads the 2022 Triton FlashAttention waits for in each trip of its main loop (flash_attn_triton.py,
num_stages=1): forward the K block, a scratch store-and-reload of the rescale factors (its
workaround for a compiler bug) and the V block; backward the Q block, the dO block and the row
statistics (LSE and D)."""

FORWARD_ALU_OPS_PER_SCORE = 3.5
"""FP32 instructions per score of the forward's online softmax besides the exponential (which runs on
the SFUs): the running row maximum, the scale-and-subtract FMA that forms the exponent, the row sum,
and half a pack of two scores into 16-bit P. Rescaling the O accumulator adds head_dim / kv_block
per score (one multiply per O element per K/V tile)."""

BACKWARD_ALU_OPS_PER_SCORE = 4.0
"""FP32 instructions per score of the backward besides the exponential that recomputes P: the
scale-and-subtract FMA of the exponent, dS = P (dP - D) (a subtract and a multiply), and half a pack
each of P and dS into 16-bit operands for the products that read them from shared memory."""

UNPIPELINED_FORWARD_ALU_OPS_PER_SCORE = 4.5
"""The 2022 Triton kernel's forward FP32 instructions per score besides the exponential
(flash_attn_triton.py ``_fwd_kernel``, no bias): the row maximum, the scale-and-subtract FMA, the
multiply by log2(e) that ``tl.exp`` adds before its base-2 exponential, the row sum, and half a pack
of P to 16 bits; rescaling O adds head_dim / kv_block per score, as in the other kernels."""

UNPIPELINED_BACKWARD_ALU_OPS_PER_SCORE = 6.0
"""The 2022 Triton kernel's backward FP32 instructions per score besides the exponential
(``_bwd_kernel_one_col_block``, no bias): the scale-and-subtract FMA and the log2(e) multiply of
``tl.exp``, dS = P (dP - D) x scale (a subtract and two multiplies), and half a pack each of P and dS."""

UNPIPELINED_FORWARD_MASK_ALU_OPS_PER_SCORE = 3.0
UNPIPELINED_BACKWARD_MASK_ALU_OPS_PER_SCORE = 2.0
"""The 2022 Triton kernel's causal mask, applied to every visible tile (it has no diagonal special
case): forward ``qk += tl.where(q >= k, 0, -inf)`` (a compare, a select and an add), backward
``qk = tl.where(q >= k, qk, -inf)`` (a compare and a select)."""

SCORE_BIAS_ALU_OPS_PER_SCORE = 2.0
"""FP32-pipe instructions per score that add ALiBi's bias in FlashAttention-2 (csrc alibi.h, causal
form): the key index converted to FP32 and an FMA with the head's slope (the row's part is the same
for the whole row and cancels in the softmax)."""

UNPIPELINED_SCORE_BIAS_ALU_OPS_PER_SCORE = 1.0
"""The 2022 Triton kernel with a bias (``BIAS_TYPE == 'vector'``, MPT's ALiBi): ``qk * scale + bias``
then ``exp(qk - m)`` where the unbiased path has one FMA, ``exp(qk * scale - m)``: one more
instruction per score, forward and backward (the bias row it loads per tile is a few hundred bytes)."""

MASK_ALU_OPS_PER_SCORE = 2.0
"""FP32-pipe instructions per score of a tile that straddles a causal mask's diagonal: a compare of
the score's column with its row's limit and a select of -inf (FlashAttention-2's
``apply_mask_causal``, FlashAttention-3's ``Mask::apply``); tiles wholly below the diagonal skip it."""

EXPONENTIALS_PER_SCORE = 1.0
"""SFU operations per score, forward and backward (the backward recomputes P = exp(S - LSE))."""

ACCUMULATOR_BYTES = 4
"""The backward's dQ accumulator is FP32."""

_FLASH_NAMES = {"fused": "flash", "fused_async": "flash_async", "fused_unpipelined": "flash_unpipelined"}

_ROWS_PER_INSTRUCTION = {"warp": 16, "warpgroup": 64, "cta": 128}
"""Rows of A one native MMA instruction multiplies (mma.sync m16, wgmma m64, tcgen05 M=128). A
warpgroup or CTA instruction reads its B tile from shared memory itself, so a CTA tile of M rows
reads B once per instruction row block; warps load B fragments into registers once per warp tile."""


def visible_tiles_per_head(op, forward: bool, block: int, kv_block: int) -> int:
    """(own block, streamed tile) pairs of one head that hold at least one visible (query, key) pair:
    all of them without a mask; under a causal mask (queries aligned to the end of the keys) only
    those on or below the diagonal, the diagonal ones computed whole and masked."""
    sq, skv = op.seq_len_q, op.seq_len_kv
    if forward:
        own_blocks, streamed = math.ceil(sq / block), math.ceil(skv / kv_block)
    else:
        own_blocks, streamed = math.ceil(skv / block), math.ceil(sq / kv_block)
    if not op.causal:
        return own_blocks * streamed
    offset = skv - sq
    if forward:  # query block b sees keys up to its last row + offset
        return sum(min(streamed, (min((b + 1) * block, sq) - 1 + offset) // kv_block + 1) for b in range(own_blocks))
    # key block c is seen by the queries from c * block - offset on
    return sum(streamed - max(0, c * block - offset) // kv_block for c in range(own_blocks))


def masked_tiles_per_head(op, forward: bool, block: int, kv_block: int) -> int:
    """Visible (own block, streamed tile) pairs of one head that also hold masked pairs, so the kernel
    applies the causal mask to them: the tiles on the diagonal (none without a causal mask). Layout
    as :func:`visible_tiles_per_head`; key c is visible to query r when c <= r + (keys - queries).

    Per own block the visible streamed tiles are a prefix (forward) or suffix (backward) of the
    streamed tiles and the masked ones the opposite end, so each block's count is the overlap of the
    two ranges (O(blocks) for a million-token sequence)."""
    if not op.causal:
        return 0
    sq, skv = op.seq_len_q, op.seq_len_kv
    offset = skv - sq
    count = 0
    if forward:  # own: query block b; streamed: key tile j
        tiles = math.ceil(skv / kv_block)
        for b in range(math.ceil(sq / block)):
            first, last = b * block, min((b + 1) * block, sq) - 1
            # key tiles whose first key is visible to the block's last query
            visible = min(tiles, (last + offset) // kv_block + 1) if last + offset >= 0 else 0
            # key tiles whose every key is visible to the block's first query (t = its last visible key)
            t = first + offset
            whole = min(max((t + 1) // kv_block, 0), tiles - 1) + (1 if t >= skv - 1 else 0)
            count += max(0, visible - whole)
        return count
    tiles = math.ceil(sq / kv_block)
    for c in range(math.ceil(skv / block)):  # own: key block c; streamed: query tile i
        lo, hi = c * block, min((c + 1) * block, skv) - 1
        # query tiles whose first query cannot see the block's last key (they hold masked pairs)
        partial = min(tiles, (hi - offset - 1) // kv_block + 1) if hi - offset - 1 >= 0 else 0
        # query tiles whose last query cannot see the block's first key (wholly masked)
        u = lo - offset
        hidden = min(max(u // kv_block, 0), tiles - 1) + (1 if sq - 1 < u else 0)
        count += max(0, partial - hidden)
    return count


def _operand_reads_per_k(m: int, n: int, issuers: int, issuer: str, a_in_shared: bool, whole_rows: bool) -> int:
    """Elements one step of k reads from shared memory for an M x N product split over ``issuers``
    (warps, warpgroups, or one CTA) laid out on the grid that reads least: A's rows once per issuer
    column (none when A is in registers), B's columns once per issuer row (and, for warpgroup or
    CTA instructions, once per instruction's rows). ``whole_rows``: each issuer owns whole rows (the
    forward's softmax reduces a row within one issuer; a tile with too few rows for that splits the
    columns too). No issuer takes fewer rows than its instruction multiplies."""
    per_instruction = _ROWS_PER_INSTRUCTION[issuer]
    most_row_splits = max(1, m // per_instruction)
    best = None
    for wn in range(1, issuers + 1):
        wm = issuers // wn
        if issuers % wn or wm > most_row_splits or (whole_rows and wn > 1 and issuers <= most_row_splits):
            continue
        b_reads = wm if issuer == "warp" else max(wm, math.ceil(m / per_instruction))
        reads = (m * wn if a_in_shared else 0) + n * b_reads
        best = reads if best is None else min(best, reads)
    return best


def shared_bytes_per_tile(machine: Machine, op, forward: bool, block: int, kv_block: int, warps: int) -> float:
    """Bytes one (own block, streamed tile) step moves through the SM's shared memory: the streamed
    tiles staged in it, the operands the products read from it, and (backward) P and dS written
    for the products that read them transposed, and the warp-specialized kernel's FP32 dQ tile
    staged for its bulk reduction. Warp-level kernels (FlashAttention-2, and any kernel on a device
    without a warpgroup or CTA instruction) split the CTA over its warps; the warp-specialized one
    over its two consumer warpgroups (FlashAttention-3)."""
    eb = DTYPE_BYTES[op.dtype]
    d = op.head_dim
    native = op.kernel == "fused_async" and (machine.native_mma or op.dtype in NATIVE_ONLY_MATRIX_DTYPES)
    issuer = machine.native_mma_issuer if native else "warp"
    issuers = {"warp": max(1, warps), "warpgroup": 2, "cta": 1}[issuer]
    if forward:  # S = Q K^T (M block, N kv_block, k d); O += P V (P in registers; N d, k kv_block)
        reads = (_operand_reads_per_k(block, kv_block, issuers, issuer, True, True) * d
                 + _operand_reads_per_k(block, d, issuers, issuer, False, True) * kv_block)
        staged = 2 * kv_block * d  # K and V tiles
        return (reads + staged) * eb
    q = kv_block  # streamed query rows; block = own key rows
    score_products = 2 * _operand_reads_per_k(q, block, issuers, issuer, True, False) * d  # S, dP
    weight_products = 2 * _operand_reads_per_k(block, d, issuers, issuer, True, False) * q  # dV, dK
    dq_product = _operand_reads_per_k(q, d, issuers, issuer, True, False) * block
    written = 2 * q * block + 2 * q * d  # P and dS; the Q and dO tiles staged
    dq_staged = 2 * q * d * ACCUMULATOR_BYTES if issuer != "warp" else 0.0  # FA3: smem, then bulk reduce-add
    return (score_products + weight_products + dq_product + written) * eb + dq_staged


def fused_attention_plans(machine: Machine, op) -> tuple[KernelPlan, ...]:
    """A flash-attention kernel (and, for the backward, its preprocess and postprocess kernels).
    ``fused`` kernels issue warp-synchronous MMA and run the softmax between the matrix products (as
    FlashAttention-2 does); ``fused_async`` kernels use the native asynchronous MMA and overlap the
    exponentials with the products (FlashAttention-3's warp specialization); ``fused_unpipelined``
    kernels are ``fused`` with one pipeline stage, waiting for every block they load (the 2022 Triton
    kernel). Scores never reach DRAM; CTAs of one (KV) head share its data in L2."""
    main = _main_kernel(machine, op)
    if op.variant == "forward":
        return (main,)
    q_elements = float(op.batch * op.heads * op.seq_len_q * op.head_dim)
    rows = float(op.batch * op.heads * op.seq_len_q)
    eb = DTYPE_BYTES[op.dtype]
    ctas, threads, in_flight = elementwise_launch(machine, int(q_elements), op.dtype, 2)
    pre = streaming_plan(machine, "attention_backward_preprocess", "attention", op.dtype,
                         bytes_read=2 * q_elements * eb, bytes_written=rows * STATS_BYTES + q_elements * ACCUMULATOR_BYTES,
                         flop=2 * q_elements, sfu_ops=0.0, num_ctas=ctas, threads_per_cta=threads,
                         bytes_in_flight_per_thread=in_flight)
    ctas, threads, in_flight = elementwise_launch(machine, int(q_elements), "fp32", 1)
    post = streaming_plan(machine, "attention_backward_postprocess", "attention", "fp32",
                          bytes_read=q_elements * ACCUMULATOR_BYTES, bytes_written=q_elements * eb,
                          flop=q_elements, sfu_ops=0.0, num_ctas=ctas, threads_per_cta=threads,
                          bytes_in_flight_per_thread=in_flight)
    return (_helper_kernel(pre), main, _helper_kernel(post))


def _helper_kernel(plan: KernelPlan) -> KernelPlan:
    """A helper kernel of the backward: its arithmetic is not model FLOP (the main kernel carries the op's)."""
    return replace(plan, useful_flop=0.0, executed_flop=plan.flop_per_cta * plan.grid)


def _main_kernel(machine: Machine, op) -> KernelPlan:
    asynchronous = op.kernel == "fused_async"
    # The unpipelined kernel (2022 Triton FlashAttention) loads one K/V block at a time (num_stages=1)
    # into 128 x 128 blocks with 8 warps in both passes (flash_attn_triton.py's launch parameters).
    stages = 1 if op.kernel == "fused_unpipelined" else 2
    dtype = op.dtype
    eb = DTYPE_BYTES[dtype]
    d = op.head_dim
    heads = op.batch * op.heads
    forward = op.variant == "forward"
    own_len = op.seq_len_q if forward else op.seq_len_kv
    threads = (128 if forward and stages > 1 else 256) if machine.kind == "gpu" else machine.max_threads_per_cta
    registers = 255 if machine.kind == "gpu" else 32
    # The largest tile whose shared memory fits (own block; streamed blocks of kv_block rows, one per
    # pipeline stage): devices with less shared memory per CTA (MI300X: 64 KB LDS) get smaller tiles.
    first = ((128, 128),) if stages == 1 else ()
    for block, kv_block in first + ((128, 64), (64, 64), (64, 32), (32, 32), (16, 16)):
        block = block if own_len >= block else max(16, 16 * math.ceil(own_len / 16))
        if forward:
            shared = int((block + 2 * kv_block * stages) * d * eb)
        else:
            shared = int((2 * block + 2 * kv_block) * d * eb)
        per_unit, limiter = ctas_per_unit(machine, threads, registers, shared)
        if per_unit > 0:
            break
    else:
        raise SimulationError(f"attention: no fused attention tile fits {machine.name}")
    blocks_per_head = math.ceil(own_len / block)
    grid = heads * blocks_per_head
    tiles_per_cta = visible_tiles_per_head(op, forward, block, kv_block) / blocks_per_head
    scores_per_cta = tiles_per_cta * block * kv_block
    # the softmax runs on the block's real rows only (a decode step's single query is not padded)
    softmax_scores_per_cta = tiles_per_cta * own_len / blocks_per_head * kv_block
    products = 2 if forward else 5
    flop_per_cta = 2.0 * products * scores_per_cta * d
    if op.kernel == "fused_unpipelined":  # the 2022 Triton kernel: its own softmax, the mask on every tile
        alu_per_score = (UNPIPELINED_FORWARD_ALU_OPS_PER_SCORE + d / kv_block if forward
                         else UNPIPELINED_BACKWARD_ALU_OPS_PER_SCORE)
        mask_per_score = (UNPIPELINED_FORWARD_MASK_ALU_OPS_PER_SCORE if forward
                          else UNPIPELINED_BACKWARD_MASK_ALU_OPS_PER_SCORE)
        masked_tiles = visible_tiles_per_head(op, forward, block, kv_block) if op.causal else 0
        bias_per_score = UNPIPELINED_SCORE_BIAS_ALU_OPS_PER_SCORE
    else:
        alu_per_score = FORWARD_ALU_OPS_PER_SCORE + d / kv_block if forward else BACKWARD_ALU_OPS_PER_SCORE
        mask_per_score = MASK_ALU_OPS_PER_SCORE
        masked_tiles = masked_tiles_per_head(op, forward, block, kv_block)
        bias_per_score = SCORE_BIAS_ALU_OPS_PER_SCORE
    if op.score_bias:
        alu_per_score += bias_per_score
    matrix = uses_matrix_pipe(machine, dtype)
    # The softmax's FP32 instructions run in series with the products when the products' operands
    # and accumulators keep the register file busy: asynchronous MMA updating register accumulators
    # (FlashAttention-3), or warp MMA on a device where it is not the native instruction (mma.sync on
    # Hopper, at warp_mma_fraction of the rate). Where warp MMA is native (Ampere and older, CDNA),
    # the other warps' softmax instructions issue while a warp's products run. A hypothesis that fits
    # both references: on H100 the series sum gives the FlashAttention-3 paper's FlashAttention-2
    # and -3 forward rates within 10%; on A100 the overlap gives FlashAttention-2's forward 90% of
    # its published 73 % of peak, where the series sum would give 72%. The 2022 Triton kernel runs
    # them in series everywhere: its one 8-warp CTA per SM stages every K and V block through shared
    # memory behind barriers (num_stages=1), so its warps move through products and softmax in step
    # and no other warps are in the other phase.
    native_async = asynchronous and machine.native_mma_issuer != "warp"
    warps_in_step = op.kernel == "fused_unpipelined"
    alu_in_series = matrix and (native_async or warps_in_step
                                or (not asynchronous and machine.warp_mma_fraction < 1.0))
    masked_scores_per_cta = masked_tiles / blocks_per_head * own_len / blocks_per_head * kv_block
    alu_per_cta = (alu_per_score * softmax_scores_per_cta + mask_per_score * masked_scores_per_cta
                   if alu_in_series else 0.0)
    shared_operand = (shared_bytes_per_tile(machine, op, forward, block, kv_block, threads // machine.warp_size)
                      * tiles_per_cta if matrix and machine.kind == "gpu" else 0.0)
    streamed_rows = tiles_per_cta * kv_block
    slots = per_unit * machine.num_units
    # DRAM: each CTA's own block (Q and O rows forward; K, V, dK, dV rows backward) once, and the data
    # it streams once per wave for every head group the wave touches (shared in L2 by its CTAs).
    group = max(1, op.heads // op.num_kv_heads) if forward else 1
    kv_eb = DTYPE_BYTES[op.kv_dtype or dtype]
    q_elements = float(op.batch * op.heads * op.seq_len_q * d)
    kv_elements = float(op.batch * op.num_kv_heads * op.seq_len_kv * d)
    rows = float(op.batch * op.heads * op.seq_len_q)
    if forward:  # reads Q, K, V; writes O and the log-sum-exp
        own_per_cta = 2 * block * d * eb + block * STATS_BYTES
        total = 2 * q_elements * eb + 2 * kv_elements * kv_eb + rows * STATS_BYTES
        l2_per_cta = own_per_cta + 2 * streamed_rows * d * kv_eb
    else:  # reads K, V, Q, dO, LSE, D; writes dK, dV; the FP32 dQ accumulator is read and written once
        own_per_cta = 4 * block * d * eb
        total = 2 * q_elements * eb + 4 * kv_elements * eb + 2 * rows * STATS_BYTES + 2 * q_elements * ACCUMULATOR_BYTES
        # streams Q, dO, LSE and D and read-modify-writes its dQ rows in FP32
        l2_per_cta = own_per_cta + streamed_rows * (d * (2 * eb + 2 * ACCUMULATOR_BYTES) + 2 * STATS_BYTES)
    units = heads // group
    shared_per_unit = max(0.0, total - own_per_cta * grid) / units
    waves = []
    for start in range(0, grid, slots):
        end = min(grid, start + slots)
        units_touched = (end - 1) // (blocks_per_head * group) - start // (blocks_per_head * group) + 1
        waves.append(units_touched * shared_per_unit + (end - start) * own_per_cta)
    epilogue = (block * d * eb + block * STATS_BYTES) if forward else 2 * block * d * eb  # O, LSE | dK, dV
    return KernelPlan(
        name=f"attention_{op.variant}[{_FLASH_NAMES[op.kernel]}_{block}]",
        op_kind="attention",
        pipe="matrix" if matrix else "vector",
        dtype=dtype,
        grid=grid,
        threads_per_cta=threads,
        registers_per_thread=registers,
        shared_bytes_per_cta=shared,
        ctas_per_unit=per_unit,
        occupancy_limiter=limiter,
        flop_per_cta=flop_per_cta,
        sfu_ops_per_cta=EXPONENTIALS_PER_SCORE * softmax_scores_per_cta,
        vector_ops_per_cta=alu_per_cta,
        l2_bytes_per_cta=l2_per_cta,
        bytes_in_flight_per_cta=2 * kv_block * d * eb * stages,
        wave_dram_bytes=tuple(waves),
        prologue_per_wave=True,
        # FlashAttention-3's forward loops persistent CTAs over the tiles (its backward launches one
        # CTA per tile: flash-attention hopper/flash_{fwd,bwd}_launch_template.h tile schedulers)
        persistent=forward and native_async and machine.persistent_matrix_kernels(dtype),
        useful_flop=op.flop(),
        tile=Tile(block, kv_block, d, stages, max(1, threads // 32)),
        load_waits_per_cta=0.0 if stages > 1 else UNPIPELINED_WAITS_PER_TRIP * streamed_rows / kv_block,
        epilogue_bytes_per_cta=epilogue,
        store_bytes_per_cta=epilogue,
        executed_flop=(flop_per_cta + alu_per_cta) * grid,
        warp_mma=not asynchronous,
        shared_operand_bytes_per_cta=shared_operand,
        sfu_overlaps_math=asynchronous,
    )
