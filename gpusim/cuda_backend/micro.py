"""Microbenchmark kernels: pointer chase, stream (init/read/scale/triad), L2 read bandwidth, FMA, and
the spin kernel the event timer queues ahead of a timed launch.

The host-side helpers (:func:`chase_chain`, :func:`fma_reference`) are pure numpy, so verify can
check what the kernels compute. ``numba`` is bound on first use, as in :mod:`.kernels`.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np


CHASE_STRIDE_BYTES = 128
"""Distance between the nodes of a pointer chase: one per 128-byte cache line."""

FMA_CHAINS = 8
"""Independent FMA chains per thread (enough to cover the FMA pipeline latency)."""


cuda: Any = None
"""``numba.cuda``, bound on first use (a module global: the CUDA simulator swaps it while a kernel runs)."""


def _bind_cuda() -> None:
    global cuda
    if cuda is None:
        from numba import cuda as module

        cuda = module


def chase_chain(working_set_bytes: int, seed: int = 0) -> np.ndarray:
    """A uint64 array of ``working_set_bytes`` whose nodes (one per 128-byte line) form one cycle
    in random order: ``a[i]`` is the index of the node after ``i`` (random order defeats prefetch).
    Unsigned, so that the kernel's step is one address computation and a load: Numba wraps a signed
    index that might be negative, three more dependent instructions per step."""
    stride = CHASE_STRIDE_BYTES // 8
    n = max(1, working_set_bytes // 8)
    nodes = max(2, n // stride)
    order = np.random.default_rng(seed).permutation(nodes).astype(np.uint64) * np.uint64(stride)
    chain = np.zeros(nodes * stride, dtype=np.uint64)
    chain[order] = np.roll(order, -1)
    return chain


def num_chase_nodes(chain: np.ndarray) -> int:
    return max(2, chain.shape[0] // (CHASE_STRIDE_BYTES // 8))


@functools.lru_cache(maxsize=None)
def _chase_kernel():
    _bind_cuda()

    @cuda.jit
    def chase(chain, steps, out):
        j = out[0]
        visited = out[1] - out[1]  # a uint64 zero: adding uint64 to a signed literal would give a float
        for _ in range(steps):
            j = chain[j]
            visited += j
        out[0] = j
        out[1] = visited

    return chase


def launch_chase(chain: Any, steps: int, out: Any) -> None:
    """One thread follows ``steps`` links from ``out[0]``; writes the final node to ``out[0]`` and
    the sum of the visited node indices to ``out[1]`` (uint64 array of 2)."""
    _chase_kernel()[1, 1](chain, steps, out)


@functools.lru_cache(maxsize=None)
def _stream_kernel(variant: str):
    _bind_cuda()

    if variant == "init":
        @cuda.jit
        def init(a, b, c, scalar):
            start, step = cuda.grid(1), cuda.gridsize(1)
            for i in range(start, a.shape[0], step):
                a[i] = scalar
        return init
    if variant == "read":
        @cuda.jit
        def read(a, b, c, scalar):
            start, step = cuda.grid(1), cuda.gridsize(1)
            s = 0.0
            for i in range(start, b.shape[0], step):
                s += b[i]
            if s == scalar:  # never true for the scalars used; keeps the loads alive
                a[start] = s
        return read
    if variant == "scale":
        @cuda.jit
        def scale(a, b, c, scalar):
            start, step = cuda.grid(1), cuda.gridsize(1)
            for i in range(start, a.shape[0], step):
                a[i] = scalar * b[i]
        return scale
    if variant == "triad":
        @cuda.jit
        def triad(a, b, c, scalar):
            start, step = cuda.grid(1), cuda.gridsize(1)
            for i in range(start, a.shape[0], step):
                a[i] = b[i] + scalar * c[i]
        return triad
    raise ValueError(f"unknown stream variant {variant!r}")


def launch_stream(variant: str, grid: int, threads: int, a: Any, b: Any, c: Any, scalar: float) -> None:
    """Grid-stride stream kernel over FP64 arrays: init a = s; read sum(b); scale a = s*b;
    triad a = b + s*c."""
    _stream_kernel(variant)[grid, threads](a, b, c, scalar)


@functools.lru_cache(maxsize=None)
def _l2_read_kernel():
    _bind_cuda()

    @cuda.jit
    def l2_read(a, passes, out):
        start, step = cuda.grid(1), cuda.gridsize(1)
        n = a.shape[0]
        shift = cuda.blockDim.x
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        # Each pass a CTA reads the slice its neighbour read the pass before (another SM, most
        # likely), so the SM's own L1 does not serve the re-reads. No modulo in the inner loop.
        # Four passes at once, each into its own sum, so that a thread has four loads in flight. At
        # footprints of a few MiB the 2 x SMs x 1024 threads still hold only a few elements each per
        # pass, too few loads in flight to reach the L2's bandwidth: those sizes measure this kernel.
        p = 0
        while p + 4 <= passes:
            # the four passes start a quarter of the footprint apart: were they only one CTA's slice
            # apart, a footprint larger than the L2 would serve three of every four reads from it
            quarter = n // 4
            o0 = (p * shift) % n
            o1 = ((p + 1) * shift + quarter) % n
            o2 = ((p + 2) * shift + 2 * quarter) % n
            o3 = ((p + 3) * shift + 3 * quarter) % n
            for i in range(start, n, step):
                j0 = i + o0
                j1 = i + o1
                j2 = i + o2
                j3 = i + o3
                if j0 >= n:
                    j0 -= n
                if j1 >= n:
                    j1 -= n
                if j2 >= n:
                    j2 -= n
                if j3 >= n:
                    j3 -= n
                s0 += a[j0]
                s1 += a[j1]
                s2 += a[j2]
                s3 += a[j3]
            p += 4
        while p < passes:
            offset = (p * shift) % n
            for i in range(start, n, step):
                j = i + offset
                if j >= n:
                    j -= n
                s0 += a[j]
            p += 1
        out[start] = (s0 + s1) + (s2 + s3)

    return l2_read


def launch_l2_read(grid: int, threads: int, a: Any, passes: int, out: Any) -> None:
    """Every element of ``a`` read once per pass; ``out[thread]`` = that thread's sum (FP64)."""
    _l2_read_kernel()[grid, threads](a, passes, out)


@functools.lru_cache(maxsize=None)
def _fma_kernel():
    _bind_cuda()
    from numba import types

    f32 = types.float32

    @cuda.jit
    def fma(out, iterations, mul, add):
        i = cuda.grid(1)
        x0 = f32(i % 7) * f32(0.001)
        x1 = x0 + f32(0.1)
        x2 = x0 + f32(0.2)
        x3 = x0 + f32(0.3)
        x4 = x0 + f32(0.4)
        x5 = x0 + f32(0.5)
        x6 = x0 + f32(0.6)
        x7 = x0 + f32(0.7)
        for _ in range(iterations):
            x0 = x0 * mul + add
            x1 = x1 * mul + add
            x2 = x2 * mul + add
            x3 = x3 * mul + add
            x4 = x4 * mul + add
            x5 = x5 * mul + add
            x6 = x6 * mul + add
            x7 = x7 * mul + add
        out[i] = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7

    return fma


def launch_fma(grid: int, threads: int, out: Any, iterations: int, mul: float, add: float) -> None:
    """Each thread runs FMA_CHAINS independent chains of ``iterations`` FP32 FMAs
    (2 FLOP each) and writes their sum."""
    _fma_kernel()[grid, threads](out, iterations, np.float32(mul), np.float32(add))


def fma_reference(num_threads: int, iterations: int, mul: float, add: float) -> np.ndarray:
    """What :func:`launch_fma` writes, computed with numpy in FP32 (FMA vs multiply-add rounding
    differs by at most an ulp per step)."""
    i = np.arange(num_threads)
    x0 = (i % 7).astype(np.float32) * np.float32(0.001)
    xs = [x0 + np.float32(o) for o in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)]
    mul32, add32 = np.float32(mul), np.float32(add)
    for _ in range(iterations):
        xs = [x * mul32 + add32 for x in xs]
    return np.sum(xs, axis=0, dtype=np.float32)


@functools.lru_cache(maxsize=None)
def _spin_kernel():
    _bind_cuda()
    from numba import types

    f32 = types.float32

    @cuda.jit
    def spin(out, iterations):
        x = f32(cuda.threadIdx.x) * f32(1e-3)
        for _ in range(iterations):
            x = x * f32(0.999) + f32(1e-3)  # each FMA waits for the one before
        out[0] = x

    return spin


def launch_spin(out: Any, iterations: int) -> None:
    """One thread of ``iterations`` dependent FP32 FMAs: keeps the stream busy for a while without
    touching memory, so that work queued behind it starts the moment it ends."""
    _spin_kernel()[1, 1](out, iterations)
