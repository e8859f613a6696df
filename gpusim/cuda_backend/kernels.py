"""Numba-CUDA kernels that follow KernelPlans (see :mod:`gpusim.cuda_backend.plans`).

Tile sizes, thread layouts and pipeline depths are compile-time constants: each ``_*_kernel``
factory closes over them and returns a ``cuda.jit`` kernel, cached per constant set. Every
``launch_*`` function takes the plan, checks that the arrays match it, and launches exactly
``plan.grid`` CTAs of ``plan.threads_per_cta`` threads.

Math is FP32 everywhere (FP16 inputs are widened on load, FP16 outputs rounded on store). Reductions
across threads go through shared memory, since Numba's CUDA simulator has no warp shuffles.

``numba`` is imported inside functions only (see the package docstring).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from gpusim.cuda_backend.plans import elementwise_layout, gemm_layout, row_layout
from gpusim.mapping.plan import KernelPlan

PLANTED_BUGS = ("drop-last-k-tile",)
"""Deliberate defects verify can be asked to plant, to prove that it can fail."""

GELU_C = 0.7978845608028654  # sqrt(2 / pi)
GELU_A = 0.044715
LAYERNORM_EPS = 1e-5


cuda: Any = None
"""``numba.cuda``, bound on first use. It must be a module global: Numba's CUDA simulator runs a
kernel by swapping the ``cuda`` global of the kernel's module for its fake module."""


def _bind_cuda() -> Any:
    global cuda
    if cuda is None:
        from numba import cuda as module

        cuda = module
    return cuda


def _types(dtype: str):
    from numba import types

    return {"fp32": types.float32, "fp16": types.float16, "fp64": types.float64}[dtype]


def _grid_check(plan: KernelPlan, grid: int, threads: int) -> None:
    if grid != plan.grid or threads != plan.threads_per_cta:
        raise ValueError(f"{plan.name}: launch {grid}x{threads} differs from the plan's {plan.grid}x{plan.threads_per_cta}")


# ------------------------------------------------------------------------------------------- GEMM


@functools.lru_cache(maxsize=None)
def _gemm_kernel(bm: int, bn: int, bk: int, stages: int, threads: int, tm: int, tn: int, rm: int, rn: int,
                 split_k: int, swizzle: int, in_dtype: str, out_dtype: str, drop_last_k_tile: bool):
    from numba import types

    _bind_cuda()

    f32 = types.float32
    tin = _types(in_dtype)
    tout = _types(out_dtype)

    @cuda.jit(device=True)
    def copy_tile(src, dst, slot, bat, r0, c0, rows, cols, r_end, c_end, tid):
        """Copy the rows x cols tile of ``src[bat]`` at (r0, c0) into ``dst[slot]``, the CTA's threads
        striding over it, zero-filling past row r_end and column c_end."""
        for e in range(tid, rows * cols, threads):
            r = e // cols
            q = e % cols
            if r0 + r < r_end and c0 + q < c_end:
                dst[slot, r, q] = src[bat, r0 + r, c0 + q]
            else:
                dst[slot, r, q] = 0.0

    @cuda.jit(device=True)
    def load_stage(a, b, sa, sb, slot, bat, m0, n0, kb, k_end, m, n, tid):
        """Copy the A (bm x bk) and B (bk x bn) tiles starting at k = kb into pipeline slot ``slot``,
        zero-filling past the matrix edges."""
        copy_tile(a, sa, slot, bat, m0, kb, bm, bk, m, k_end, tid)
        copy_tile(b, sb, slot, bat, kb, n0, bk, bn, k_end, n, tid)

    @cuda.jit
    def gemm(a, b, c, work, m, n, k, mt, nt, k_per_split):
        sa = cuda.shared.array((stages, bm, bk), tin)
        sb = cuda.shared.array((stages, bk, bn), tin)
        acc = cuda.local.array((rm, rn), f32)
        a_reg = cuda.local.array(rm, f32)
        b_reg = cuda.local.array(rn, f32)
        tid = cuda.threadIdx.x
        # CTA -> (batch, split, output tile) in the mapper's order: batch, split-K slice, swizzled raster.
        idx = cuda.blockIdx.x
        tiles = mt * nt
        bat = idx // (split_k * tiles)
        ks = (idx // tiles) % split_k
        t = idx % tiles
        first_row = (t // (swizzle * nt)) * swizzle
        rows_in_group = min(swizzle, mt - first_row)
        within = t % (swizzle * nt)
        m0 = (first_row + within % rows_in_group) * bm
        n0 = (within // rows_in_group) * bn
        k_begin = ks * k_per_split
        k_end = min(k, k_begin + k_per_split)
        num_kt = 0
        if k_end > k_begin:
            num_kt = (k_end - k_begin + bk - 1) // bk
        if drop_last_k_tile and num_kt > 0:
            num_kt -= 1
        ty = tid // tn
        tx = tid % tn
        for i in range(rm):
            for j in range(rn):
                acc[i, j] = 0.0
        # Software pipeline: tiles 0 .. stages-2 in flight before the first math step; at step kt the
        # CTA loads tile kt+stages-1 into the slot freed by step kt-1, then multiplies tile kt.
        for s in range(stages - 1):
            if s < num_kt:
                load_stage(a, b, sa, sb, s, bat, m0, n0, k_begin + s * bk, k_end, m, n, tid)
        for kt in range(num_kt):
            nxt = kt + stages - 1
            if nxt < num_kt:
                load_stage(a, b, sa, sb, nxt % stages, bat, m0, n0, k_begin + nxt * bk, k_end, m, n, tid)
            cuda.syncthreads()
            cur = kt % stages
            for kk in range(bk):
                for i in range(rm):
                    a_reg[i] = f32(sa[cur, ty + i * tm, kk])
                for j in range(rn):
                    b_reg[j] = f32(sb[cur, kk, tx + j * tn])
                for i in range(rm):
                    for j in range(rn):
                        acc[i, j] += a_reg[i] * b_reg[j]
            cuda.syncthreads()
        for i in range(rm):
            r = m0 + ty + i * tm
            if r < m:
                for j in range(rn):
                    q = n0 + tx + j * tn
                    if q < n:
                        if split_k == 1:
                            c[bat, r, q] = tout(acc[i, j])
                        else:
                            work[bat, ks, r, q] = acc[i, j]

    return gemm


@functools.lru_cache(maxsize=None)
def _split_k_reduce_kernel(split_k: int, out_dtype: str):
    from numba import types

    _bind_cuda()

    f32 = types.float32
    tout = _types(out_dtype)

    @cuda.jit
    def reduce_partials(work, c, m, n):
        i = cuda.grid(1)
        total = c.shape[0] * m * n
        if i < total:
            bat = i // (m * n)
            r = (i // n) % m
            q = i % n
            s = f32(0.0)
            for p in range(split_k):
                s += work[bat, p, r, q]
            c[bat, r, q] = tout(s)

    return reduce_partials


@functools.lru_cache(maxsize=1)
def _empty_workspace() -> Any:
    """The (unused) workspace argument of a kernel without split-K, allocated once."""
    return _bind_cuda().device_array((1, 1, 1, 1), dtype="float32")


def gemm_out_dtype(dtype: str) -> str:
    """The output dtype of a GEMM (as gemm_plan counts its bytes): the input dtype."""
    return dtype


def launch_gemm(plan: KernelPlan, a: Any, b: Any, c: Any, dtype: str, work: Any = None,
                planted_bug: str | None = None) -> None:
    """C[batch] = A[batch] @ B[batch] on device (or host, under the simulator) arrays with the
    plan's tile. ``work`` is the FP32 [batch, split_k, m, n] workspace a split-K plan needs; its
    partial sums are added by a second, elementwise kernel."""
    _bind_cuda()
    tile = plan.tile
    if tile is None:
        raise ValueError(f"{plan.name}: not a GEMM plan")
    if planted_bug not in (None, *PLANTED_BUGS):
        raise ValueError(f"unknown planted bug {planted_bug!r}")
    batch, m, k = a.shape
    _, k2, n = b.shape
    if k2 != k or tuple(c.shape) != (batch, m, n):
        raise ValueError(f"{plan.name}: shapes {a.shape} @ {b.shape} -> {c.shape} do not multiply")
    layout = gemm_layout(tile)
    mt, nt = math.ceil(m / tile.block_m), math.ceil(n / tile.block_n)
    grid = batch * tile.split_k * mt * nt
    _grid_check(plan, grid, layout.threads)
    k_per_split = math.ceil(k / tile.split_k)
    kernel = _gemm_kernel(tile.block_m, tile.block_n, tile.block_k, tile.num_stages, layout.threads,
                          layout.threads_m, layout.threads_n, layout.reg_m, layout.reg_n, tile.split_k,
                          tile.swizzle, dtype, gemm_out_dtype(dtype), planted_bug == "drop-last-k-tile")
    if tile.split_k > 1:
        if work is None or tuple(work.shape) != (batch, tile.split_k, m, n):
            raise ValueError(f"{plan.name}: split-K needs an FP32 workspace of shape {(batch, tile.split_k, m, n)}")
        kernel[grid, layout.threads](a, b, c, work, m, n, k, mt, nt, k_per_split)
        reduce = _split_k_reduce_kernel(tile.split_k, gemm_out_dtype(dtype))
        threads = 128
        reduce[math.ceil(batch * m * n / threads), threads](work, c, m, n)
    else:
        dummy = work if work is not None else _empty_workspace()
        kernel[grid, layout.threads](a, b, c, dummy, m, n, k, mt, nt, k_per_split)


# ------------------------------------------------------------------------------------ elementwise


ELEMENTWISE_VECTORS_IN_FLIGHT = 2
"""Vectors' worth of each input a thread loads before it computes and stores (the mapper's
``elementwise_launch`` counts two 16-byte vectors per input in flight)."""


@functools.lru_cache(maxsize=None)
def _elementwise_kernel(function: str, threads: int, vec: int, vectors: int, dtype: str):
    """Numba has no 16-byte vector loads, so each vector becomes ``vec`` scalar loads, laid out so that
    every load instruction of a warp reads consecutive elements (coalesced), and issued in groups of
    ``ELEMENTWISE_VECTORS_IN_FLIGHT`` vectors before the group's stores: the same bytes in flight per
    thread as the plan. (Loads after a store cannot be hoisted above it: ``out`` may alias an input.)"""
    from numba import types

    _bind_cuda()

    f32 = types.float32
    tout = _types(dtype)
    per_cta = threads * vec * vectors
    group = vec * ELEMENTWISE_VECTORS_IN_FLIGHT
    groups = -(-vectors // ELEMENTWISE_VECTORS_IN_FLIGHT)

    if function == "add":
        @cuda.jit
        def add(x, y, out, n):
            first = cuda.blockIdx.x * per_cta + cuda.threadIdx.x
            a = cuda.local.array(group, f32)
            b = cuda.local.array(group, f32)
            for g in range(groups):
                base = first + g * group * threads
                for e in range(group):
                    i = base + e * threads
                    if i < n:
                        a[e] = f32(x[i])
                        b[e] = f32(y[i])
                for e in range(group):
                    i = base + e * threads
                    if i < n:
                        out[i] = tout(a[e] + b[e])

        return add

    @cuda.jit
    def gelu(x, y, out, n):  # y unused: one signature for both functions
        first = cuda.blockIdx.x * per_cta + cuda.threadIdx.x
        a = cuda.local.array(group, f32)
        for g in range(groups):
            base = first + g * group * threads
            for e in range(group):
                i = base + e * threads
                if i < n:
                    a[e] = f32(x[i])
            for e in range(group):
                i = base + e * threads
                if i < n:
                    z = a[e]
                    inner = f32(GELU_C) * (z + f32(GELU_A) * z * z * z)
                    out[i] = tout(f32(0.5) * z * (f32(1.0) + math.tanh(inner)))

    return gelu


def launch_elementwise(plan: KernelPlan, function: str, x: Any, y: Any, out: Any, dtype: str) -> None:
    """out = x + y (``add``) or gelu(x) (``gelu``, tanh form) over flat arrays."""
    n = out.shape[0]
    layout = elementwise_layout(plan, n, dtype)
    _grid_check(plan, math.ceil(n / layout.elements_per_cta), layout.threads)
    kernel = _elementwise_kernel(function, layout.threads, layout.vec, layout.vectors_per_thread, dtype)
    kernel[plan.grid, layout.threads](x, x if y is None else y, out, n)


# ------------------------------------------------------------------------------------------ rows


@functools.lru_cache(maxsize=None)
def _row_kernel(kind: str, threads: int, rows_per_cta: int, threads_per_row: int, vec: int, dtype: str):
    from numba import types

    _bind_cuda()

    f32 = types.float32
    tout = _types(dtype)
    width = threads_per_row
    # Tree reduction over `width` threads (need not be a power of two): fold the upper half.
    half0 = 1
    while half0 * 2 < width:
        half0 *= 2

    @cuda.jit(device=True)
    def reduce_sum(red, lane, base, value):
        red[base + lane] = value
        cuda.syncthreads()
        h = half0
        while h > 0:
            if lane < h and lane + h < width:
                red[base + lane] += red[base + lane + h]
            cuda.syncthreads()
            h //= 2
        total = red[base]
        cuda.syncthreads()
        return total

    @cuda.jit(device=True)
    def reduce_max(red, lane, base, value):
        red[base + lane] = value
        cuda.syncthreads()
        h = half0
        while h > 0:
            if lane < h and lane + h < width:
                red[base + lane] = max(red[base + lane], red[base + lane + h])
            cuda.syncthreads()
            h //= 2
        total = red[base]
        cuda.syncthreads()
        return total

    if kind == "softmax":
        @cuda.jit
        def softmax(x, out, mean, rstd, gamma, beta, rows, cols):
            red = cuda.shared.array(threads, f32)
            t = cuda.threadIdx.x
            lane = t % width
            base = (t // width) * width
            row = cuda.blockIdx.x * rows_per_cta + t // width
            live = row < rows
            vectors = (cols + vec - 1) // vec
            m = f32(-math.inf)
            if live:
                for v in range(lane, vectors, width):
                    for e in range(vec):
                        q = v * vec + e
                        if q < cols:
                            m = max(m, f32(x[row, q]))
            m = reduce_max(red, lane, base, m)
            s = f32(0.0)
            if live:
                for v in range(lane, vectors, width):
                    for e in range(vec):
                        q = v * vec + e
                        if q < cols:
                            s += math.exp(f32(x[row, q]) - m)
            s = reduce_sum(red, lane, base, s)
            if live:
                inv = f32(1.0) / s
                for v in range(lane, vectors, width):
                    for e in range(vec):
                        q = v * vec + e
                        if q < cols:
                            out[row, q] = tout(math.exp(f32(x[row, q]) - m) * inv)

        return softmax

    @cuda.jit
    def layernorm(x, out, mean, rstd, gamma, beta, rows, cols):
        red = cuda.shared.array(threads, f32)
        t = cuda.threadIdx.x
        lane = t % width
        base = (t // width) * width
        row = cuda.blockIdx.x * rows_per_cta + t // width
        live = row < rows
        vectors = (cols + vec - 1) // vec
        s = f32(0.0)
        if live:
            for v in range(lane, vectors, width):
                for e in range(vec):
                    q = v * vec + e
                    if q < cols:
                        s += f32(x[row, q])
        mu = reduce_sum(red, lane, base, s) / f32(cols)
        s2 = f32(0.0)
        if live:
            for v in range(lane, vectors, width):
                for e in range(vec):
                    q = v * vec + e
                    if q < cols:
                        d = f32(x[row, q]) - mu
                        s2 += d * d
        var = reduce_sum(red, lane, base, s2) / f32(cols)
        r = f32(1.0) / math.sqrt(var + f32(LAYERNORM_EPS))
        if live:
            for v in range(lane, vectors, width):
                for e in range(vec):
                    q = v * vec + e
                    if q < cols:
                        out[row, q] = tout((f32(x[row, q]) - mu) * r * f32(gamma[q]) + f32(beta[q]))
            if lane == 0:
                mean[row] = mu
                rstd[row] = r

    return layernorm


def launch_rows(plan: KernelPlan, kind: str, x: Any, out: Any, dtype: str, mean: Any = None, rstd: Any = None,
                gamma: Any = None, beta: Any = None) -> None:
    """Row softmax (``softmax``) or layernorm forward (``layernorm``: also writes FP32 mean and
    1/std per row) over a [rows, cols] array."""
    rows, cols = x.shape
    layout = row_layout(plan, rows, cols, dtype)
    _grid_check(plan, math.ceil(rows / layout.rows_per_cta), layout.threads)
    kernel = _row_kernel(kind, layout.threads, layout.rows_per_cta, layout.threads_per_row, layout.vec, dtype)
    if kind == "softmax":
        mean = rstd = gamma = beta = x[0]  # unused arguments: one signature for both kernels
    elif any(v is None for v in (mean, rstd, gamma, beta)):
        raise ValueError("layernorm needs mean, rstd, gamma and beta arrays")
    kernel[plan.grid, layout.threads](x, out, mean, rstd, gamma, beta, rows, cols)


# -------------------------------------------------------------------------------------- reduction


@functools.lru_cache(maxsize=None)
def _reduction_kernel(threads: int, vec: int, vectors: int):
    from numba import types

    _bind_cuda()

    f32 = types.float32
    per_cta = threads * vec * vectors
    half0 = 1
    while half0 * 2 < threads:
        half0 *= 2

    @cuda.jit
    def reduce_sum(x, out, n):
        red = cuda.shared.array(threads, f32)
        t = cuda.threadIdx.x
        base = cuda.blockIdx.x * per_cta
        s = f32(0.0)
        for v in range(vectors):
            start = base + (v * threads + t) * vec
            for e in range(vec):
                i = start + e
                if i < n:
                    s += f32(x[i])
        red[t] = s
        cuda.syncthreads()
        h = half0
        while h > 0:
            if t < h and t + h < threads:
                red[t] += red[t + h]
            cuda.syncthreads()
            h //= 2
        if t == 0:
            cuda.atomic.add(out, 0, red[0])

    return reduce_sum


def launch_reduction(plan: KernelPlan, x: Any, out: Any, dtype: str) -> None:
    """out[0] += sum(x) (``out`` is an FP32 array of one element, zeroed by the caller)."""
    n = x.shape[0]
    layout = elementwise_layout(plan, n, dtype)
    _grid_check(plan, math.ceil(n / layout.elements_per_cta), layout.threads)
    kernel = _reduction_kernel(layout.threads, layout.vec, layout.vectors_per_thread)
    kernel[plan.grid, layout.threads](x, out, n)


# -------------------------------------------------------------------------------------- attention


@functools.lru_cache(maxsize=None)
def _attention_kernel(block_m: int, block_n: int, head_dim: int, threads: int, dtype: str):
    from numba import types

    _bind_cuda()

    f32 = types.float32
    tin = _types(dtype)
    stages = 2

    @cuda.jit
    def attention(q, k, v, out, seq_q, seq_kv, q_blocks, scale):
        sq = cuda.shared.array((block_m, head_dim), tin)
        sk = cuda.shared.array((stages, block_n, head_dim), tin)
        sv = cuda.shared.array((stages, block_n, head_dim), tin)
        acc = cuda.local.array(head_dim, f32)
        qr = cuda.local.array(head_dim, f32)
        t = cuda.threadIdx.x
        head = cuda.blockIdx.x // q_blocks
        q0 = (cuda.blockIdx.x % q_blocks) * block_m
        for e in range(t, block_m * head_dim, threads):
            r = e // head_dim
            d = e % head_dim
            if q0 + r < seq_q:
                sq[r, d] = q[head, q0 + r, d]
            else:
                sq[r, d] = 0.0
        num_kv = (seq_kv + block_n - 1) // block_n
        # K/V tile 0 before the loop; tile j+1 is loaded into the other slot while tile j is used.
        for e in range(t, block_n * head_dim, threads):
            r = e // head_dim
            d = e % head_dim
            if r < seq_kv:
                sk[0, r, d] = k[head, r, d]
                sv[0, r, d] = v[head, r, d]
            else:
                sk[0, r, d] = 0.0
                sv[0, r, d] = 0.0
        cuda.syncthreads()
        row = q0 + t
        live = t < block_m and row < seq_q
        m_run = f32(-math.inf)
        l_run = f32(0.0)
        for d in range(head_dim):
            acc[d] = 0.0
            qr[d] = 0.0
        if live:
            for d in range(head_dim):
                qr[d] = f32(sq[t, d])
        for j in range(num_kv):
            cur = j % stages
            if j + 1 < num_kv:
                nxt = (j + 1) % stages
                k0 = (j + 1) * block_n
                for e in range(t, block_n * head_dim, threads):
                    r = e // head_dim
                    d = e % head_dim
                    if k0 + r < seq_kv:
                        sk[nxt, r, d] = k[head, k0 + r, d]
                        sv[nxt, r, d] = v[head, k0 + r, d]
                    else:
                        sk[nxt, r, d] = 0.0
                        sv[nxt, r, d] = 0.0
            if live:
                keys = min(block_n, seq_kv - j * block_n)
                for c in range(keys):
                    s = f32(0.0)
                    for d in range(head_dim):
                        s += qr[d] * f32(sk[cur, c, d])
                    s *= scale
                    m_new = max(m_run, s)
                    corr = math.exp(m_run - m_new)
                    p = math.exp(s - m_new)
                    l_run = l_run * corr + p
                    for d in range(head_dim):
                        acc[d] = acc[d] * corr + p * f32(sv[cur, c, d])
                    m_run = m_new
            cuda.syncthreads()
        if live:
            inv = f32(1.0) / l_run
            for d in range(head_dim):
                out[head, row, d] = tin(acc[d] * inv)

    return attention


def launch_attention(plan: KernelPlan, q: Any, k: Any, v: Any, out: Any, dtype: str) -> None:
    """out = softmax(Q K^T / sqrt(d)) V per head; q, out: [heads, seq_q, d]; k, v: [heads, seq_kv, d]
    (batch and heads flattened). One thread per query row of the CTA's tile."""
    tile = plan.tile
    if tile is None:
        raise ValueError(f"{plan.name}: not an attention plan")
    heads, seq_q, d = q.shape
    seq_kv = k.shape[1]
    if d != tile.block_k:
        raise ValueError(f"{plan.name}: head dim {d} differs from the plan's {tile.block_k}")
    q_blocks = math.ceil(seq_q / tile.block_m)
    _grid_check(plan, heads * q_blocks, plan.threads_per_cta)
    kernel = _attention_kernel(tile.block_m, tile.block_n, d, plan.threads_per_cta, dtype)
    import numpy as np

    scale = np.float32(1.0 / math.sqrt(d))
    kernel[plan.grid, plan.threads_per_cta](q, k, v, out, seq_q, seq_kv, q_blocks, scale)
