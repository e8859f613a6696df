"""GEMM-like kernels (matmul, implicit-GEMM convolution, attention): tile candidates, the L2 reuse
model of concurrently running CTAs, and library-like selection of the fastest predicted tile.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Iterable

import numpy as np

from gpusim.config.hardware import DTYPE_BYTES
from gpusim.engine.kernel import gemm_wave_fill_s
from gpusim.engine.machine import NATIVE_ONLY_MATRIX_DTYPES, Machine
from gpusim.mapping.occupancy import ctas_per_unit
from gpusim.mapping.plan import KernelPlan, Tile

ACCUMULATOR_OVERHEAD_REGISTERS = 40
"""Registers a GEMM thread needs besides its accumulators (addresses, fragments, loop state);
CUTLASS sm80 kernels with 128 accumulators per thread report about 160-170 registers."""


FP8_PROMOTION_INTERVAL_K = 128
"""Elements of K between two promotions of an FP8 product's partial sums from the tensor cores into
FP32 registers when the kernel splits its accumulator (cuBLASLt with ``CUBLASLT_MATMUL_DESC_FAST_ACCUM``
off): Hopper's FP8 tensor cores keep about 14 bits of their accumulation, and 128 elements is 4 WGMMA
instructions of K = 32, CUTLASS's default ``mma_promotion_interval`` (the ``Arguments`` of its sm90
FP8 mainloops) and the interval DeepSeek-V3's technical report (arXiv 2412.19437, section 3.3.2)
names as the smallest that keeps the promotion affordable. Each promotion is one FP32 add per output
element on the vector pipe, at its calibrated rate (``vector_efficiency_fraction``, fitted on SIMT
GEMMs: the pipe's sustained issue rate)."""


def promotion_adds_per_cta(tile: Tile, k_per_cta: int) -> float:
    """FP32 adds a CTA of a split-accumulator FP8 GEMM issues: one per output element and promotion."""
    return float(tile.block_m * tile.block_n * math.ceil(k_per_cta / FP8_PROMOTION_INTERVAL_K))


def promotes_partial_sums(machine: Machine, dtype: str, split_accumulator: bool) -> bool:
    """Whether a GEMM asked to split its accumulator does so on this device: only Hopper's FP8
    products (wgmma, issued by a warpgroup), the ones whose reduced-precision sums are documented;
    Blackwell's tcgen05 accumulates in FP32 in tensor memory."""
    return (split_accumulator and dtype == "fp8" and uses_matrix_pipe(machine, dtype)
            and machine.native_mma_issuer == "warpgroup")


def output_bytes_per_element(dtype: str) -> float:
    """GEMM outputs: FP8/INT8/FP4 GEMMs write BF16/INT32-scaled-to-16-bit results, others their dtype."""
    return 2.0 if dtype in ("fp8", "int8", "fp4") else float(DTYPE_BYTES[dtype])


def uses_matrix_pipe(machine: Machine, dtype: str) -> bool:
    return machine.matrix_rate_per_unit(dtype) is not None


def persistent_gemm(machine: Machine, dtype: str) -> bool:
    """Whether the library's GEMM for this dtype is a persistent kernel (tensor-core GEMMs on a
    device whose libraries build them so; see ``Machine.persistent_matrix_kernels``)."""
    return uses_matrix_pipe(machine, dtype) and machine.persistent_matrix_kernels(dtype)


STREAM_K_MIN_K_ITERATIONS = 8
"""k-steps a tile needs before its k-iterations are shared out (CUTLASS 3.x sm90 stream-K scheduler,
``min_iters_per_sk_unit_ = 8``)."""


def stream_k_tail(machine: Machine, dtype: str, tile: Tile, tiles: int, slots: int, k_iters: int) -> bool:
    """Whether a persistent kernel runs its last wave of ``tiles`` output tiles on ``slots`` SM slots
    as a stream-K tail, by the rule of CUTLASS 3.x's sm90 stream-K scheduler (``get_num_sk_tiles``,
    heuristic mode): only when the last wave is partial, after at least one full wave, less than half
    full, and each tile has more than ``STREAM_K_MIN_K_ITERATIONS`` k-steps to share; otherwise
    whole tiles (data-parallel). Split-K tiles have no tail."""
    full, rest = divmod(tiles, slots)
    return (tile.stream_k and tile.split_k == 1 and persistent_gemm(machine, dtype) and full >= 1
            and 0 < 2 * rest < slots and k_iters > STREAM_K_MIN_K_ITERATIONS)


def wave_traffic(machine: Machine, m: int, n: int, k: int, batch: int, tile: Tile, in_bytes: float,
                 out_bytes: float, slots: int, a_unique_fraction: float = 1.0, b_unique_fraction: float = 1.0,
                 b_group: int = 1, extra_c_bytes_per_element: float = 0.0
                 ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(DRAM bytes, memory-side-cache hit bytes) of each wave: see :func:`_wave_traffic`."""
    return _wave_traffic(machine.l2_capacity_bytes, m, n, k, batch, tile.block_m, tile.block_n, tile.split_k,
                         tile.swizzle, in_bytes, out_bytes, slots, a_unique_fraction, b_unique_fraction, b_group,
                         extra_c_bytes_per_element, machine.l2_private_partitions, machine.llc_capacity_bytes or 0.0)


SPLIT_K_WORKSPACE_L2_FRACTION = 0.5
"""Share of a shared L2 a split-K GEMM's FP32 partial workspace may take and still stay there between
the CTA that writes a partial and the one that adds it up (the rest holds the operand panels)."""


def split_k_workspace_bytes(m: int, n: int, batch: int, split_k: int) -> float:
    """The FP32 partial sums a split-K GEMM writes: one M x N tile set per slice of k (0 without split-K)."""
    return 4.0 * batch * m * n * split_k if split_k > 1 else 0.0


def split_k_workspace_in_l2(workspace_bytes: float, l2_capacity_bytes: float, private_partitions: int) -> bool:
    """Whether split-K partials stay in L2: the workspace takes at most ``SPLIT_K_WORKSPACE_L2_FRACTION``
    of an L2 that every SM shares. Where each partition serves only its own SMs (MI300X's XCDs), the
    CTA that adds up a tile's partials reads most of them from other partitions, so they go to memory."""
    return 0.0 < workspace_bytes <= SPLIT_K_WORKSPACE_L2_FRACTION * l2_capacity_bytes and private_partitions <= 1


@functools.lru_cache(maxsize=4096)
def _wave_traffic(capacity: float, m: int, n: int, k: int, batch: int, bm: int, bn: int, sk: int, swizzle: int,
                  in_bytes: float, out_bytes: float, slots: int, a_unique_fraction: float,
                  b_unique_fraction: float, b_group: int, extra_c_bytes_per_element: float,
                  private_partitions: int = 1, llc_capacity: float = 0.0
                  ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """DRAM bytes and memory-side-cache (LLC) hit bytes per wave of ``slots`` concurrently resident CTAs.

    CTAs are issued batch by batch, split-K slice by slice, tiles in a swizzled raster (groups of
    ``tile.swizzle`` row-blocks). The A row-panels and B column-panels a wave needs are read once per
    wave unless an earlier wave left them in L2 (least-recently-used, L2 capacity); the CTAs of a wave
    that share a panel hit in L2. With ``private_partitions`` > 1 the CTAs go round-robin to L2
    partitions that each cache only their own CTAs' panels (capacity split evenly), so CTAs that
    share a panel share it in L2 only on the same partition. An L2 miss on a panel that this kernel
    already read and that is still in the memory-side cache (``llc_capacity`` > 0, LRU) is an LLC
    hit; every other miss reads DRAM (a kernel's inputs are not assumed resident from earlier
    kernels). C tiles are written once, to DRAM. ``b_group`` consecutive batch entries share one B
    matrix (a weight shared by a batch; grouped-query attention). The unique fractions scale panels
    whose DRAM bytes are smaller than the GEMM view (implicit-GEMM convolution reads each input pixel
    once, not once per filter tap).
    """
    k_len = math.ceil(k / sk)
    # Each CTA writes its share of C; with split-K it also writes FP32 partials that are read back:
    # through DRAM, unless the workspace stays in a shared L2 (it then takes that much from the panels)
    workspace = split_k_workspace_bytes(m, n, batch, sk)
    in_l2 = split_k_workspace_in_l2(workspace, capacity, private_partitions)
    c_bytes_per_element = (out_bytes + extra_c_bytes_per_element) / sk + (8.0 if sk > 1 and not in_l2 else 0.0)
    waves = _compiled_lru_wave_traffic()(m, n, batch, bm, bn, sk, swizzle, k_len * in_bytes * a_unique_fraction,
                                         k_len * in_bytes * b_unique_fraction, max(1, b_group), c_bytes_per_element,
                                         int(slots), float(capacity - workspace if in_l2 else capacity),
                                         max(1, int(private_partitions)), float(llc_capacity))
    return tuple(float(w) for w in waves[0]), tuple(float(w) for w in waves[1])


@functools.cache
def _compiled_lru_wave_traffic():
    """The LRU wave model compiled with numba on first use (importing gpusim does not import numba,
    so the CUDA backend can still switch numba to its CUDA simulator)."""
    import numba

    return numba.njit(cache=True)(_lru_wave_traffic)


def _lru_wave_traffic(m, n, batch, bm, bn, sk, swizzle, a_bytes_per_row, b_bytes_per_col, b_group,
                      c_bytes_per_element, slots, capacity, parts, llc_capacity):  # pragma: no cover (compiled)
    """Per wave, [DRAM bytes, LLC hit bytes]: CTAs in issue order (batch, split-K slice, swizzled tile
    raster), CTA i on L2 partition i % parts. Each cache (the ``parts`` L2 partitions, then the LLC
    as cache number ``parts``) holds whole A row-panels and B column-panels in an LRU list of panel
    ids (a doubly linked list per cache)."""
    mt = (m + bm - 1) // bm
    nt = (n + bn - 1) // bn
    tiles = mt * nt
    total = batch * sk * tiles
    num_a = batch * sk * mt
    num_panels = num_a + ((batch + b_group - 1) // b_group) * sk * nt
    num_waves = (total + slots - 1) // slots
    out = np.zeros((2, num_waves))
    caches = parts + 1
    cap = np.full(caches, capacity / parts)
    cap[parts] = llc_capacity
    prev = np.full((caches, num_panels), -1, np.int64)
    nxt = np.full((caches, num_panels), -1, np.int64)
    cached = np.zeros((caches, num_panels), np.bool_)
    seen = np.full((parts, num_panels), -1, np.int64)
    size_of = np.zeros(num_panels)
    head = np.full(caches, -1, np.int64)  # most recently used
    tail = np.full(caches, -1, np.int64)  # least recently used
    used = np.zeros(caches)
    for w in range(num_waves):
        for i in range(w * slots, min(total, (w + 1) * slots)):
            part = i % parts
            b = i // (sk * tiles)
            ks = (i // tiles) % sk
            u = i % tiles
            first_row = (u // (swizzle * nt)) * swizzle
            rows_in_group = min(swizzle, mt - first_row)
            within = u % (swizzle * nt)
            row = first_row + within % rows_in_group
            col = within // rows_in_group
            out[0, w] += min(bm, m - row * bm) * min(bn, n - col * bn) * c_bytes_per_element
            for j in range(2):
                if j == 0:
                    pid = (b * sk + ks) * mt + row
                    size = min(bm, m - row * bm) * a_bytes_per_row
                else:
                    pid = num_a + ((b // b_group) * sk + ks) * nt + col
                    size = min(bn, n - col * bn) * b_bytes_per_col
                if seen[part, pid] == w:
                    continue
                seen[part, pid] = w
                size_of[pid] = size
                for level in range(2):  # the CTA's L2 partition, then the LLC
                    c = part if level == 0 else parts
                    if level == 1 and llc_capacity <= 0:
                        out[0, w] += size
                        break
                    hit = cached[c, pid]
                    if hit:  # unlink; it moves to the front below
                        if prev[c, pid] != -1:
                            nxt[c, prev[c, pid]] = nxt[c, pid]
                        else:
                            head[c] = nxt[c, pid]
                        if nxt[c, pid] != -1:
                            prev[c, nxt[c, pid]] = prev[c, pid]
                        else:
                            tail[c] = prev[c, pid]
                    else:
                        cached[c, pid] = True
                        used[c] += size
                    prev[c, pid] = -1
                    nxt[c, pid] = head[c]
                    if head[c] != -1:
                        prev[c, head[c]] = pid
                    head[c] = pid
                    if tail[c] == -1:
                        tail[c] = pid
                    while used[c] > cap[c] and tail[c] != -1 and tail[c] != head[c]:
                        old = tail[c]
                        tail[c] = prev[c, old]
                        nxt[c, tail[c]] = -1
                        prev[c, old] = -1
                        cached[c, old] = False
                        used[c] -= size_of[old]
                    if hit:
                        if level == 1:
                            out[1, w] += size
                        break
                    if level == 1:
                        out[0, w] += size
    return out


def default_num_warps(block_m: int, block_n: int, matrix: bool) -> int:
    """Warps of a CTA computing a ``block_m x block_n`` output tile: tensor-core tiles 4 up to 128 x 128
    outputs, else 8; CUDA-core (SIMT) tiles one warp per 8 x 8 x 32 outputs (8 x 8 per thread), 2 to 16."""
    if matrix:
        return 4 if block_m * block_n <= 128 * 128 else 8
    return max(2, min(16, block_m * block_n // (8 * 8 * 32)))


SIMT_NARROW_TILES = ((32, 32), (64, 32), (32, 128), (128, 32))
"""CUDA-core tiles narrower than 64 x 64, which cuBLAS's heuristic runs only where 64 x 64 tiles
cannot fill the SMs (or would pad a matrix narrower than 64). Its FP32 GEMMs of square sizes 128, 256
and 512 run ``ampere_sgemm_32x32_sliced1x4`` or ``64x32_sliced1x4`` and 1024-4096 run
``ampere_sgemm_128x64`` (S. Boehm, "How to Optimize a CUDA Matmul Kernel for cuBLAS-like Performance",
2022, profiling cuBLAS on an 84-SM A6000). NeuSight's profile of ``nn.Linear`` at 1024^3 on an L4
(PyTorch 2.1, CUDA 12.1; sitar-lab/NeuSight's test set) names ``ampere_sgemm_128x64`` too, and its
A100 PCIe time there (219 us) is two waves of 128 such tiles on 108 SMs, not 64 x 64 tiles. Hence
the same rule one size up: 64 x 64 only where 128 x 64 tiles underfill."""

SIMT_WIDE_TILES = ((128, 128, 4), (256, 128, 8), (128, 256, 8))
"""CUDA-core tiles of 128 outputs per thread (block_m, block_n, warps), the largest register tile
cuBLAS and CUTLASS ship (CUTLASS's sm80 SIMT SGEMMs 128x128 with 2x2 warps, 256x128 with 4x2;
cuBLAS ``sm80_xmma_gemm_f32f32..._tilesize128x128x8_warpsize2x2x1``, which NeuSight's profiles of
``nn.Linear`` on an H100 name for its large shapes). They spend the fewest issue slots per FMA
(:func:`simt_issue_factor`)."""

SIMT_LOOP_INSTRUCTIONS = 37.5
"""Warp instructions a CUDA-core GEMM thread issues per step of ``block_k`` besides its FMAs, shared
loads and operand copies: barrier, pipeline waits, stage pointers and the loop's branch. With
:data:`SIMT_COPY_INSTRUCTIONS`, a least-squares fit to the main loops of seven CUTLASS 4.2 SIMT
SGEMMs (``MmaMultistage``, 3 stages, A row-major and B column-major, as ``nn.Linear`` calls them)
compiled by ``nvcc`` 13.0 for sm_90 and read with ``nvdisasm``: tiles 32x32 to 128x128 with 8 to 128
outputs per thread, 138 to 1,224 instructions per loop, each within 14 of the fit
(``measurements/cutlass_simt/loops.csv``, from ``count_loops.py`` there)."""

SIMT_COPY_INSTRUCTIONS = 6.9
"""Warp instructions per operand element a CUDA-core GEMM thread copies from global to shared memory
(one 4-byte ``LDGSTS``, as a transposing copy issues them, plus its address and predicate
arithmetic); see :data:`SIMT_LOOP_INSTRUCTIONS`."""


def simt_thread_instructions(tile: Tile, threads: int) -> tuple[float, float]:
    """(FMAs, all warp instructions) one thread of a CUDA-core GEMM tile issues per step of
    ``block_k``: a thread tile of tm x tn outputs (as square as a power of two allows) takes tm x tn
    FMAs and (tm + tn) / 4 128-bit shared loads per k, plus the loop's own instructions and its share
    of the operand copies (CUTLASS's counts, :data:`SIMT_LOOP_INSTRUCTIONS`)."""
    outputs = tile.block_m * tile.block_n / threads
    tm = 2.0 ** math.ceil(math.log2(max(outputs, 1.0)) / 2)
    tn = max(1.0, outputs / tm)
    fmas = tile.block_k * outputs
    shared_loads = tile.block_k * (math.ceil(tm / 4) + math.ceil(tn / 4))
    copies = (tile.block_m + tile.block_n) * tile.block_k / threads
    return fmas, fmas + shared_loads + SIMT_LOOP_INSTRUCTIONS + SIMT_COPY_INSTRUCTIONS * copies


def _simt_issue_ratio(machine: Machine, dtype: str, tile: Tile) -> float:
    """Issue cycles over FMA-pipe cycles of one warp of a CUDA-core GEMM tile (at least 1): a scheduler
    issues one warp instruction per cycle, and its share of the SM's lanes takes warp-size / lanes
    cycles per FMA (1 on 128-lane SMs, where every other instruction costs an FMA's slot; 2 on 64-lane
    ones, which issue the rest between their FMAs). A scheduler with two dispatch units (Pascal)
    pairs each FMA with another instruction: its FMAs alone set the pace while the rest are fewer."""
    flop_per_cycle = machine.vector_flop_per_cycle_of(machine.simt_gemm_dtype(dtype))
    if not flop_per_cycle:
        return 1.0
    lanes_per_scheduler = flop_per_cycle / 2.0 / machine.num_schedulers_per_unit
    fmas, instructions = simt_thread_instructions(tile, tile.num_warps * machine.warp_size)
    issue_cycles = max(fmas, instructions / machine.dispatch_units_per_scheduler)
    return max(1.0, issue_cycles / (fmas * machine.warp_size / lanes_per_scheduler))


def simt_issue_factor(machine: Machine, dtype: str, tile: Tile) -> float:
    """A CUDA-core GEMM tile's issue-limited math time relative to the library's leanest tile
    (:data:`SIMT_WIDE_TILES`, 128 outputs per thread), whose rate ``vector_efficiency_fraction`` is
    fitted to: 1 on SMs whose schedulers have issue slots to spare between FMAs, above 1 for small
    register tiles on SMs with 32 FP32 lanes per scheduler (Ampere GA10x, Ada, Hopper, Blackwell),
    where the counts give 128 outputs per thread 1.16-1.19 issue cycles per FMA cycle, 64 outputs
    1.23-1.30 and 32 outputs 1.46. CPUs and dtypes the tensor cores take: 1."""
    if machine.kind == "cpu" or uses_matrix_pipe(machine, dtype):
        return 1.0
    leanest = min(_simt_issue_ratio(machine, dtype, Tile(bm, bn, 8, 2, warps)) for bm, bn, warps in SIMT_WIDE_TILES)
    return max(1.0, _simt_issue_ratio(machine, dtype, tile) / leanest)


SIMT_GEMV_TILES = ((1, 32), (1, 64), (1, 128))
"""One-row output tiles of a CUDA-core GEMV (cuBLAS ``gemv2T_kernel``, what a batch-1 FP32 linear layer
launches): each CTA reduces a slice of the weight's columns over K without padding M."""

SPLIT_K_MAX_WAVES = 2
"""Split-K candidates are offered up to the split that makes this many waves of CTAs (one CTA per SM):
more slices only add partial sums to reduce once every SM has work."""


def tile_candidates(machine: Machine, dtype: str, m: int, n: int, k: int, batch: int,
                    promotes: bool = False) -> list[Tile]:
    """Realistic tile configurations for this device and dtype (as CUTLASS/cuBLAS enumerate).

    Tensor-core tiles of 128x128 and up also come in thread-block clusters where the device has
    them: a pair along M that multicasts each B tile (Hopper's cuBLAS ``cluster2x1`` kernels; on
    Blackwell, the ``cta_group::2`` pair that runs one MMA across two SMs), and on devices whose native
    MMA is issued per CTA (Blackwell) also a 2x2 cluster that multicasts A to the CTA beside it along
    N as well (CUTLASS's sm100 example defaults to cluster 2x2 with 2-SM MMA; cuBLAS sm100 kernels are
    named ``..._2x2_2cta``). Per-CTA MMA also gets tile widths between 128 and 256 in steps of 16.
    Where the library's kernels are persistent, every tile without split-K also comes as a stream-K
    tail variant (:func:`stream_k_tail` says where one can run). A tile whose own output tiles cannot
    fill the SMs also comes split along k, into up to ``SPLIT_K_MAX_WAVES`` waves of CTAs.

    A GEMM that ``promotes`` its FP8 partial sums holds two accumulators per output (see
    :func:`_cta_needs`), so 128 x 256 tiles no longer fit a thread's registers; it also gets the
    two-warpgroup (8-warp) tiles 128 x 128, 128 x 144 and 128 x 160, the ones cuBLAS's promoting
    FP8 kernels use on Hopper (CUDA 13.0 on our H200 runs ``nvjet_sm90_qqtst_144x128``, ``128x160``
    and ``128x128 ... coopA``, ``measurements/h200_sxm_141gb/library.csv`` and ``block_kernels.csv``)."""
    eb = DTYPE_BYTES[dtype]
    out: list[Tile] = []
    if machine.kind == "cpu":
        # oneDNN-style cache blocking: a core's A and B panels (double-buffered) sit in its L2
        for bm in (64, 128, 256):
            for bn in (64, 128, 256):
                out.append(Tile(bm, bn, 256, 2, 1, 1, 8))
        return out
    matrix = uses_matrix_pipe(machine, dtype)
    per_cta_mma = machine.native_mma and machine.native_mma_issuer == "cta"
    if matrix:
        shapes = [(64, 64), (64, 128), (128, 64), (128, 128), (128, 256), (256, 128), (64, 256), (256, 64)]
        bk_options = sorted({max(8, int(64 // eb)), max(8, int(128 // eb))})
        if per_cta_mma:
            # per-CTA MMA (tcgen05) takes any N that is a multiple of 16 up to 256, and cuBLAS ships
            # such widths to even out the last wave (sm100 kernels 256x224, 256x176, 256x144 per pair)
            shapes += [(128, n) for n in range(144, 256, 16)]
    else:
        # CUDA-core (SIMT) GEMMs: the register-blocked tiles cuBLAS and CUTLASS ship (8x8 outputs per
        # thread), e.g. ampere_sgemm_128x64, volta_sgemm_128x128. cuBLAS runs a smaller tile only where
        # the next larger one cannot fill the SMs (or would pad a narrow matrix): 64x64 where 128x64
        # tiles underfill, its narrow tiles (SIMT_NARROW_TILES) where 64x64 ones do, and a one-row
        # product (batch-1) as a GEMV (gemv2T_kernel): no padding of M to a tile's rows, which on CUDA
        # cores would be paid in FLOP.
        def underfills(bm: int, bn: int) -> bool:
            return min(m, n) < max(bm, bn) or batch * math.ceil(m / bm) * math.ceil(n / bn) < machine.num_units

        shapes = [(128, 64), (64, 128), (128, 128), (256, 128)]
        if underfills(128, 64):
            shapes.append((64, 64))
        if underfills(64, 64):
            shapes += SIMT_NARROW_TILES
        if m == 1:
            shapes += SIMT_GEMV_TILES
        bk_options = [8, 16]
    shapes = [(bm, bn, default_num_warps(bm, bn, matrix)) for bm, bn in shapes]
    if not matrix and machine.kind != "cpu" and m > 1:
        shapes += list(SIMT_WIDE_TILES)
    if promotes and matrix:
        shapes += [(128, bn, 8) for bn in (128, 144, 160)]
    split_options = [s for s in (2, 4, 8, 16, 32) if k // s >= 64] if k >= 256 else []
    # persistent kernels may also run their last, partial wave as a stream-K tail
    tails = (False, True) if persistent_gemm(machine, dtype) else (False,)
    for bm, bn, warps in shapes:
        # split-K (serial reduction of FP32 partials) when this tile's output alone cannot fill the SMs,
        # into at most SPLIT_K_MAX_WAVES waves of CTAs
        tiles = batch * math.ceil(m / bm) * math.ceil(n / bn)
        # a CTA with fewer warps than the SM has schedulers fills only that share of its SM
        sms_filled = tiles * machine.issue_share(warps)
        splits = [1] + ([s for s in split_options if sms_filled * s <= SPLIT_K_MAX_WAVES * machine.num_units]
                        if sms_filled < machine.num_units else [])
        for bk in bk_options:
            for stages in (2, 3, 4, 5, 6) if matrix else (2,):
                for sk in splits:
                    for stream_k in tails if sk == 1 else (False,):
                        out.append(Tile(bm, bn, bk, stages, warps, sk, 8, stream_k=stream_k))
                        if matrix and machine.max_cluster_size >= 2 and bm * bn >= 128 * 128:
                            out.append(Tile(bm, bn, bk, stages, warps, sk, 8, cluster=2, stream_k=stream_k))
                            if per_cta_mma and machine.max_cluster_size >= 4:
                                out.append(Tile(bm, bn, bk, stages, warps, sk, 8, cluster=2, cluster_n=2,
                                                stream_k=stream_k))
    return out


def _resources(machine: Machine, dtype: str, tile: Tile, promotes: bool = False
               ) -> tuple[int, int, int, float, int, str] | None:
    """(threads, registers per thread, shared bytes, bytes in flight, CTAs per unit, occupancy limiter)
    of a tile's CTA, or None if it does not fit."""
    threads, registers, shared, in_flight, per_unit, limiter = _cta_needs(machine, dtype, tile, promotes)
    if per_unit == 0 or in_flight <= 0:
        return None
    return threads, registers, shared, in_flight, per_unit, limiter


def tile_misfit_reason(machine: Machine, dtype: str, tile: Tile, promotes: bool = False) -> str | None:
    """Why a tile cannot run on this device (None when it can): the CTA's threads, registers or
    shared memory exceed what one SM holds, or its cluster exceeds the device's."""
    if tile.cluster * tile.cluster_n > machine.max_cluster_size:
        return (f"a cluster of {tile.cluster * tile.cluster_n} CTAs; {machine.name} forms clusters of at most "
                f"{machine.max_cluster_size}")
    threads, registers, shared, _, per_unit, limiter = _cta_needs(machine, dtype, tile, promotes)
    if per_unit == 0:
        split = " (two accumulators per output: a split FP8 accumulator)" if promotes else ""
        return (f"its CTA ({threads} threads, {registers} registers per thread{split}, {shared} bytes of shared "
                f"memory) exceeds the SM's {limiter.replace('_', ' ')}")
    return None


def _cta_needs(machine: Machine, dtype: str, tile: Tile, promotes: bool = False
               ) -> tuple[int, int, int, float, int, str]:
    """(threads, registers per thread, shared bytes, bytes in flight, CTAs per unit, occupancy limiter)
    of a tile's CTA; 0 CTAs per unit when it does not fit. A CTA that ``promotes`` its FP8 partial
    sums holds two accumulators per output element (the tensor cores' and the FP32 one they are added
    into, as CUTLASS's FP8 accumulation does)."""
    eb = DTYPE_BYTES[dtype]
    bm, bn, bk = tile.block_m, tile.block_n, tile.block_k
    shared = int(tile.num_stages * (bm + bn) * bk * eb)
    if machine.kind == "cpu":
        threads, registers = machine.max_threads_per_cta, 32
        in_flight = machine.max_bytes_in_flight_per_unit or 0.0
    else:
        threads = tile.num_warps * machine.warp_size
        acc_words = bm * bn * (2 if dtype == "fp64" or promotes else 1)
        registers = math.ceil(acc_words / threads) + ACCUMULATOR_OVERHEAD_REGISTERS
        in_flight = max(1, tile.num_stages - 1) * (bm + bn) * bk * eb
    per_unit, limiter = ctas_per_unit(machine, threads, registers, shared)
    return threads, registers, shared, in_flight, per_unit, limiter


def compulsory_dram_bytes(m: int, n: int, k: int, batch: int, dtype: str, a_unique_fraction: float = 1.0,
                          b_unique_fraction: float = 1.0, b_group: int = 1) -> float:
    """The DRAM bytes no tiling of a (batched) GEMM can avoid: every entry's A and C once, and one B
    per ``b_group`` consecutive entries that share it."""
    num_b = math.ceil(batch / max(1, b_group))
    return ((batch * m * k * a_unique_fraction + num_b * k * n * b_unique_fraction) * DTYPE_BYTES[dtype]
            + batch * m * n * output_bytes_per_element(dtype))


def gemm_lower_bound_s(machine: Machine, m: int, n: int, k: int, batch: int, dtype: str, tile: Tile,
                       min_dram_bytes: float, math_speedup: float = 1.0, promotes: bool = False) -> float:
    """A cheap bound no simulation of this tile can beat: every wave's pipeline fill, its CTAs' math
    at the SM's rate and its epilogue drain (a persistent kernel's first fill and last drain only),
    or the operands' DRAM bytes at full bandwidth. It orders the candidates
    and stops the search once no remaining tile can win."""
    resources = _resources(machine, dtype, tile, promotes)
    rate = machine.matrix_rate_per_unit(dtype) if uses_matrix_pipe(machine, dtype) else machine.simt_gemm_rate_per_unit(dtype)
    if resources is None or not rate:
        return math.inf
    threads, _, _, _, per_unit, _ = resources
    warps = math.ceil(threads / machine.warp_size)
    k_iters = max(1, math.ceil(math.ceil(k / tile.split_k) / tile.block_k))
    cta_flop = 2.0 * tile.block_m * tile.block_n * k_iters * tile.block_k / math_speedup
    grid = batch * tile.split_k * math.ceil(m / tile.block_m) * math.ceil(n / tile.block_n)
    slots = per_unit * machine.num_units

    c_tile_bytes = tile.block_m * tile.block_n * output_bytes_per_element(dtype)
    shared_s = shared_operand_bytes_per_cta(machine, dtype, tile, warps, k_iters) / machine.shared_bytes_per_s_per_unit

    issue = simt_issue_factor(machine, dtype, tile)

    def main_and_epilogue_s(count: int) -> tuple[float, float]:
        on_busiest = min(per_unit, math.ceil(count / machine.num_units))
        share = machine.issue_share(on_busiest * warps)
        # the busiest SM writes its C tiles at its own bandwidth (a drain adds one L2 latency)
        epilogue = on_busiest * c_tile_bytes / machine.l1_bytes_per_s_per_unit
        return max(cta_flop * issue / (rate * share), shared_s) * on_busiest, epilogue

    full, rest = divmod(grid, slots)
    main_full, epilogue_full = main_and_epilogue_s(slots)
    main_rest, epilogue_rest = main_and_epilogue_s(rest) if rest else (0.0, 0.0)
    if tile.stream_k:
        if not stream_k_tail(machine, dtype, tile, grid, slots, k_iters):
            return math.inf
        # a stream-K tail: every slot does rest / slots of a full CTA's main loop (its partial tiles'
        # exchange only adds to that)
        main_rest, epilogue_rest = main_full * rest / slots, 0.0
    waves = full + bool(rest)
    total = full * (main_full + epilogue_full) + main_rest + epilogue_rest + machine.l2_latency_s
    if persistent_gemm(machine, dtype):  # one pipeline fill, one drain latency
        total += gemm_wave_fill_s(machine)
    else:
        total += waves * gemm_wave_fill_s(machine) + (waves - 1) * machine.l2_latency_s
    operand_l2_bytes = grid * tile.l2_operand_elements_per_k() * k_iters * tile.block_k * DTYPE_BYTES[dtype]
    return max(total, min_dram_bytes / machine.dram_achievable_bytes_per_s,
               operand_l2_bytes / machine.l2_achievable_bytes_per_s)


def shared_operand_elements_per_k(machine: Machine, tile: Tile, warps: int, dtype: str = "bf16") -> float:
    """Elements a CTA moves through shared memory per step of k: the A rows and B columns it stages
    (written once) plus what its MMA issuers read back. Warp-level MMA (``mma.sync``, AMD MFMA, and
    any kernel built without the device's native instruction) reads each warp's rows of A and columns
    of B; warpgroup MMA (Hopper ``wgmma``) reads them once per warpgroup of 4 warps; CTA-level MMA
    (Blackwell ``tcgen05``) reads the CTA's tile once, and in a cluster pair each CTA stages and reads
    only its share of B. Issuers are laid out on the grid that reads least (warp tiles as square as
    the tile allows). FP8/FP4 have only the native instruction."""
    bm, bn = tile.block_m, tile.block_n
    native = machine.native_mma or dtype in NATIVE_ONLY_MATRIX_DTYPES
    issuer = machine.native_mma_issuer if native else "warp"
    if issuer == "cta":
        return 2.0 * (bm + bn / tile.cluster)
    group = 4 if issuer == "warpgroup" else 1
    issuers = max(1, warps // group)
    reads = min(bm * wn + bn * (issuers // wn) for wn in range(1, issuers + 1) if issuers % wn == 0)
    return float(reads + bm + bn)


def shared_operand_bytes_per_cta(machine: Machine, dtype: str, tile: Tile, warps: int, k_iters: int) -> float:
    """Shared-memory bytes a tensor-core GEMM CTA moves over its ``k_iters`` steps of ``block_k``
    (0 for CUDA-core GEMMs and CPUs, whose operands the model does not route through shared memory)."""
    if machine.kind == "cpu" or not uses_matrix_pipe(machine, dtype):
        return 0.0
    return shared_operand_elements_per_k(machine, tile, warps, dtype) * k_iters * tile.block_k * DTYPE_BYTES[dtype]


def gemm_plan(machine: Machine, name: str, op_kind: str, m: int, n: int, k: int, batch: int, dtype: str,
              tile: Tile, useful_flop: float, a_unique_fraction: float = 1.0, b_unique_fraction: float = 1.0,
              b_group: int = 1, extra_c_bytes_per_element: float = 0.0,
              sfu_ops_per_output: float = 0.0, split_accumulator: bool = False) -> KernelPlan | None:
    """The plan of one tile configuration, or None if it cannot run (resources, unsupported dtype).
    ``split_accumulator``: an FP8 product that promotes its partial sums (:data:`FP8_PROMOTION_INTERVAL_K`)
    on a device whose matrix instruction a warpgroup issues (Hopper's wgmma); the adds run on the vector
    pipe, overlapping the products unless the machine's libraries promote in series
    (:meth:`Machine.with_in_series_fp8_promotion`)."""
    eb = DTYPE_BYTES[dtype]
    ob = output_bytes_per_element(dtype)
    matrix = uses_matrix_pipe(machine, dtype)
    if not matrix and machine.simt_gemm_rate_per_unit(dtype) is None:
        return None
    bm, bn, bk, sk = tile.block_m, tile.block_n, tile.block_k, tile.split_k
    k_iters = max(1, math.ceil(math.ceil(k / sk) / bk))
    promotes = promotes_partial_sums(machine, dtype, split_accumulator)
    resources = _resources(machine, dtype, tile, promotes)
    if resources is None:
        return None
    threads, registers, shared, in_flight, per_unit, limiter = resources
    grid = batch * sk * math.ceil(m / bm) * math.ceil(n / bn)
    slots = per_unit * machine.num_units
    tail_work = 1.0
    if tile.stream_k:
        # data-parallel full waves, then every slot takes an equal share of the leftover tiles'
        # k-iterations (see stream_k_tail)
        if not stream_k_tail(machine, dtype, tile, grid, slots, k_iters):
            return None
        full, rest = divmod(grid, slots)
        grid, tail_work = (full + 1) * slots, rest / slots
    waves, llc_waves = wave_traffic(machine, m, n, k, batch, tile, eb, ob, slots, a_unique_fraction,
                                    b_unique_fraction, b_group, extra_c_bytes_per_element)
    partials = (bm * bn * 4.0 * 2) if sk > 1 else 0.0
    l2_per_cta = tile.l2_operand_elements_per_k() * k_iters * bk * eb + bm * bn * (ob + extra_c_bytes_per_element) + partials
    flop_per_cta = 2.0 * bm * bn * k_iters * bk
    c_store = bm * bn * (ob + extra_c_bytes_per_element) + partials / 2  # C tile (and split-K partials)
    shared_operand = shared_operand_bytes_per_cta(machine, dtype, tile, math.ceil(threads / machine.warp_size), k_iters)
    return KernelPlan(
        name=f"{name}[{tile.label()}]" + ("[split_acc]" if promotes else ""),
        op_kind=op_kind,
        pipe="matrix" if matrix else "vector",
        dtype=dtype,
        grid=grid,
        threads_per_cta=threads,
        registers_per_thread=registers,
        shared_bytes_per_cta=shared,
        ctas_per_unit=per_unit,
        occupancy_limiter=limiter,
        flop_per_cta=flop_per_cta,
        sfu_ops_per_cta=sfu_ops_per_output * bm * bn,
        vector_ops_per_cta=promotion_adds_per_cta(tile, k_iters * bk) if promotes else 0.0,
        vector_ops_overlap_math=promotes and not machine.fp8_promotion_in_series,
        l2_bytes_per_cta=l2_per_cta,
        bytes_in_flight_per_cta=in_flight,
        wave_dram_bytes=waves,
        prologue_per_wave=True,
        persistent=persistent_gemm(machine, dtype),
        useful_flop=useful_flop,
        tile=tile,
        wave_llc_bytes=llc_waves if any(llc_waves) else (),
        epilogue_bytes_per_cta=c_store,
        store_bytes_per_cta=c_store,
        shared_operand_bytes_per_cta=shared_operand,
        tail_work_fraction=tail_work,
        stream_k_partial_bytes=bm * bn * 4.0 if tile.stream_k else 0.0,
        issue_factor=simt_issue_factor(machine, dtype, tile),
    )


def select_fastest(plans: Iterable[KernelPlan | None], estimate: Callable[[KernelPlan], float]) -> KernelPlan:
    """Library-like heuristic: the candidate with the lowest predicted time (ties: fewer CTAs)."""
    best: tuple[float, int, KernelPlan] | None = None
    for plan in plans:
        if plan is None:
            continue
        key = (estimate(plan), plan.grid)
        if best is None or key < best[:2]:
            best = (key[0], key[1], plan)
    if best is None:
        raise ValueError("no tile configuration fits this device")
    return best[2]
