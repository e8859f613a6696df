"""Do the CUDA kernels compute the right numbers? Small shapes against a float64 numpy reference.

Shapes are chosen so tiles do not divide them (edge tiles, partial K tiles, partial rows and
vectors) while the grids stay at a few CTAs: Numba's CUDA simulator runs every thread as a Python
thread (about 1-2 ms each). Each case builds its plan with :mod:`gpusim.cuda_backend.plans`, runs
the kernel through the ``launch_*`` function that enforces that plan, and reports the error.

Error measure: ``max |out - ref| / max |ref|`` (the reference in float64). Tolerances: FP32 data
1e-5; FP16 inputs (FP32 accumulation, FP16 output rounding at 2^-11 = 4.9e-4) 2e-3; FP64 stream
kernels 1e-12; the pointer chase and the split of work must match exactly.

The ``numba`` import happens inside :func:`run_cases`; the caller decides beforehand whether the
CUDA simulator is on.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np

from gpusim.cuda_backend import plans as P
from gpusim.engine.machine import Machine
from gpusim.mapping.plan import KernelPlan, Tile

TOLERANCE = {"fp32": 1e-5, "fp16": 2e-3, "fp64": 1e-12, "exact": 0.0}

OP_KINDS = ("gemm_fp32", "gemm_fp16", "elementwise_add", "elementwise_gelu", "softmax", "layernorm", "reduction",
            "attention", "pointer_chase", "stream", "l2_read", "fma")


@dataclass(frozen=True)
class VerifyCase:
    op_kind: str
    label: str
    dtype: str
    """Data dtype; picks the tolerance (``exact`` for integer results)."""
    run: Callable[[Machine, str | None], tuple[np.ndarray, np.ndarray, KernelPlan | None]]
    """(machine, planted bug) -> (kernel output, float64 reference, plan or None)."""


@dataclass(frozen=True)
class VerifyResult:
    op_kind: str
    label: str
    dtype: str
    grid: int | None
    threads_per_cta: int | None
    shared_bytes_per_cta: int | None
    tile: str
    error_fraction: float
    tolerance_fraction: float
    wall_s: float

    @property
    def passed(self) -> bool:
        return self.error_fraction <= self.tolerance_fraction


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """max |out - ref| / max |ref| (inf when out has NaN/inf where ref is finite)."""
    out64 = np.asarray(out, dtype=np.float64)
    ref64 = np.asarray(ref, dtype=np.float64)
    if out64.shape != ref64.shape or not np.all(np.isfinite(out64)):
        return math.inf
    scale = float(np.max(np.abs(ref64))) if ref64.size else 0.0
    err = float(np.max(np.abs(out64 - ref64))) if ref64.size else 0.0
    return err / scale if scale > 0 else err


def _rng(label: str) -> np.random.Generator:
    return np.random.default_rng(sum(ord(c) for c in label))


# ------------------------------------------------------------------------------------------ cases


def _gemm_case(label: str, dtype: str, m: int, n: int, k: int, batch: int, tile: Tile) -> VerifyCase:
    def run(machine: Machine, bug: str | None):
        from gpusim.cuda_backend.kernels import launch_gemm

        plan = P.plan_for_gemm(machine, m, n, k, dtype, tile, batch)
        npd = P.NUMPY_DTYPES[dtype]
        rng = _rng(label)
        a = rng.uniform(-1, 1, (batch, m, k)).astype(npd)
        b = rng.uniform(-1, 1, (batch, k, n)).astype(npd)
        c = np.zeros((batch, m, n), npd)
        work = np.zeros((batch, tile.split_k, m, n), np.float32) if tile.split_k > 1 else None
        launch_gemm(plan, a, b, c, dtype, work, planted_bug=bug)
        return c, np.matmul(a.astype(np.float64), b.astype(np.float64)), plan

    kind = "gemm_fp32" if dtype == "fp32" else "gemm_fp16"
    return VerifyCase(kind, label, dtype, run)


def gelu_reference(x: np.ndarray) -> np.ndarray:
    from gpusim.cuda_backend.kernels import GELU_A, GELU_C

    x = x.astype(np.float64)
    return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + GELU_A * x**3)))


def _elementwise_case(function: str, dtype: str, n: int) -> VerifyCase:
    label = f"{function} n={n} {dtype}"

    def run(machine: Machine, bug: str | None):
        from gpusim.cuda_backend.kernels import launch_elementwise

        plan = P.plan_for_elementwise(machine, function, n, dtype)
        rng = _rng(label)
        npd = P.NUMPY_DTYPES[dtype]
        x = rng.standard_normal(n).astype(npd)
        y = rng.standard_normal(n).astype(npd)
        out = np.zeros(n, npd)
        launch_elementwise(plan, function, x, y if function == "add" else None, out, dtype)
        ref = x.astype(np.float64) + y.astype(np.float64) if function == "add" else gelu_reference(x)
        return out, ref, plan

    return VerifyCase(f"elementwise_{function}", label, dtype, run)


def softmax_reference(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _rows_case(kind: str, dtype: str, rows: int, cols: int) -> VerifyCase:
    label = f"{kind} {rows}x{cols} {dtype}"

    def run(machine: Machine, bug: str | None):
        from gpusim.cuda_backend.kernels import LAYERNORM_EPS, launch_rows

        plan = P.plan_for_rows(machine, kind, rows, cols, dtype)
        rng = _rng(label)
        npd = P.NUMPY_DTYPES[dtype]
        x = (rng.standard_normal((rows, cols)) * 3 + 1).astype(npd)
        out = np.zeros((rows, cols), npd)
        if kind == "softmax":
            launch_rows(plan, kind, x, out, dtype)
            return out, softmax_reference(x), plan
        gamma = rng.standard_normal(cols).astype(npd)
        beta = rng.standard_normal(cols).astype(npd)
        mean = np.zeros(rows, np.float32)
        rstd = np.zeros(rows, np.float32)
        launch_rows(plan, kind, x, out, dtype, mean, rstd, gamma, beta)
        xd = x.astype(np.float64)
        mu = xd.mean(axis=1)
        r = 1.0 / np.sqrt(xd.var(axis=1) + LAYERNORM_EPS)
        ref = (xd - mu[:, None]) * r[:, None] * gamma.astype(np.float64) + beta.astype(np.float64)
        # The statistics are outputs too: each part is compared at its own scale.
        scale = float(np.max(np.abs(ref)))
        stats_out = np.concatenate([mean, rstd]).astype(np.float64)
        stats_ref = np.concatenate([mu, r])
        stats_scale = float(np.max(np.abs(stats_ref)))
        return (np.concatenate([out.astype(np.float64).ravel() / scale, stats_out / stats_scale]),
                np.concatenate([ref.ravel() / scale, stats_ref / stats_scale]), plan)

    return VerifyCase(kind, label, dtype, run)


def _reduction_case(dtype: str, n: int) -> VerifyCase:
    label = f"sum n={n} {dtype}"

    def run(machine: Machine, bug: str | None):
        from gpusim.cuda_backend.kernels import launch_reduction

        plan = P.plan_for_reduction(machine, n, dtype)
        rng = _rng(label)
        x = rng.uniform(0, 1, n).astype(P.NUMPY_DTYPES[dtype])
        out = np.zeros(1, np.float32)
        launch_reduction(plan, x, out, dtype)
        return out, np.array([x.astype(np.float64).sum()]), plan

    return VerifyCase("reduction", label, dtype, run)


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    s = np.einsum("hqd,hkd->hqk", q, k) / math.sqrt(q.shape[-1])
    return np.einsum("hqk,hkd->hqd", softmax_reference(s), v)


def _attention_case(dtype: str, heads: int, seq_q: int, seq_kv: int, head_dim: int) -> VerifyCase:
    label = f"attention h={heads} q={seq_q} kv={seq_kv} d={head_dim} {dtype}"

    def run(machine: Machine, bug: str | None):
        from gpusim.cuda_backend.kernels import launch_attention

        plan = P.plan_for_attention(machine, 1, heads, seq_q, seq_kv, head_dim, dtype)
        rng = _rng(label)
        npd = P.NUMPY_DTYPES[dtype]
        q, k, v = (rng.standard_normal((heads, s, head_dim)).astype(npd) for s in (seq_q, seq_kv, seq_kv))
        out = np.zeros((heads, seq_q, head_dim), npd)
        launch_attention(plan, q, k, v, out, dtype)
        return out, attention_reference(q, k, v), plan

    return VerifyCase("attention", label, dtype, run)


def _chase_case(working_set_bytes: int) -> VerifyCase:
    label = f"pointer chase {working_set_bytes} B"

    def run(machine: Machine, bug: str | None):
        from gpusim.cuda_backend.micro import chase_chain, launch_chase, num_chase_nodes

        chain = chase_chain(working_set_bytes, seed=1)
        nodes = num_chase_nodes(chain)
        stride = chain.shape[0] // nodes
        out = np.zeros(2, np.uint64)
        launch_chase(chain, nodes, out)
        # One full cycle returns to the start having visited every node once.
        ref = np.array([0, stride * nodes * (nodes - 1) // 2], dtype=np.uint64)
        return out, ref, None

    return VerifyCase("pointer_chase", label, "exact", run)


def _stream_case(variant: str, n: int, grid: int, threads: int) -> VerifyCase:
    label = f"stream {variant} n={n} grid={grid}x{threads}"

    def run(machine: Machine, bug: str | None):
        from gpusim.cuda_backend.micro import launch_stream

        rng = _rng(label)
        a = np.zeros(n)
        b = rng.standard_normal(n)
        c = rng.standard_normal(n)
        s = 3.0
        launch_stream(variant, grid, threads, a, b, c, s)
        ref = {"init": np.full(n, s), "scale": s * b, "triad": b + s * c, "read": np.zeros(n)}[variant]
        return a, ref, None

    return VerifyCase("stream", label, "fp64", run)


def _l2_case(n: int, passes: int, grid: int, threads: int) -> VerifyCase:
    label = f"l2 read n={n} passes={passes} grid={grid}x{threads}"

    def run(machine: Machine, bug: str | None):
        from gpusim.cuda_backend.micro import launch_l2_read

        a = _rng(label).uniform(0, 1, n)
        out = np.zeros(grid * threads)
        launch_l2_read(grid, threads, a, passes, out)
        return np.array([out.sum()]), np.array([a.sum() * passes]), None

    return VerifyCase("l2_read", label, "fp64", run)


def _fma_case(grid: int, threads: int, iterations: int) -> VerifyCase:
    label = f"fma grid={grid}x{threads} iterations={iterations}"

    def run(machine: Machine, bug: str | None):
        from gpusim.cuda_backend.micro import fma_reference, launch_fma

        out = np.zeros(grid * threads, np.float32)
        launch_fma(grid, threads, out, iterations, 0.999, 0.001)
        return out, fma_reference(grid * threads, iterations, 0.999, 0.001).astype(np.float64), None

    return VerifyCase("fma", label, "fp32", run)


def default_cases() -> list[VerifyCase]:
    """The verify set: every op kind, with edge tiles that do not divide the shapes."""
    return [
        _gemm_case("37x45x70 tile 16x16x8 s2 w1", "fp32", 37, 45, 70, 1, Tile(16, 16, 8, 2, 1)),
        _gemm_case("batch 2, 17x20x40 split-K 2, tile 16x16x8 s3 w1, swizzle 2", "fp32", 17, 20, 40, 2,
                   Tile(16, 16, 8, 3, 1, split_k=2, swizzle=2)),
        _gemm_case("37x45x70 tile 16x16x16 s3 w1", "fp16", 37, 45, 70, 1, Tile(16, 16, 16, 3, 1)),
        _elementwise_case("add", "fp32", 2500),
        _elementwise_case("add", "fp16", 1000),
        _elementwise_case("gelu", "fp32", 2500),
        _rows_case("softmax", "fp32", 7, 37),
        _rows_case("softmax", "fp32", 2, 600),
        _rows_case("layernorm", "fp32", 7, 37),
        _rows_case("layernorm", "fp16", 2, 600),
        _reduction_case("fp32", 5000),
        _attention_case("fp32", 2, 20, 150, 16),
        _attention_case("fp16", 1, 20, 37, 16),
        _chase_case(16 * 1024),
        _stream_case("init", 1000, 2, 64),
        _stream_case("scale", 1000, 2, 64),
        _stream_case("triad", 1000, 2, 64),
        _l2_case(1000, 7, 2, 64),  # a group of four passes and three single ones
        _fma_case(1, 64, 100),
    ]


def select_cases(op_kinds: list[str] | None) -> list[VerifyCase]:
    cases = default_cases()
    if not op_kinds:
        return cases
    unknown = sorted(set(op_kinds) - set(OP_KINDS))
    if unknown:
        raise ValueError(f"unknown op kind {unknown[0]!r}; one of {', '.join(OP_KINDS)}")
    return [c for c in cases if c.op_kind in op_kinds]


def run_cases(cases: list[VerifyCase], machine: Machine, planted_bug: str | None = None) -> list[VerifyResult]:
    """Run every case (in this process's numba.cuda: GPU or simulator) and compare."""
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba's under-utilization and implicit-copy performance hints
        for case in cases:
            start = time.perf_counter()
            out, ref, plan = case.run(machine, planted_bug)
            wall = time.perf_counter() - start
            tile = ""
            if plan is not None and plan.tile is not None:
                tile = plan.tile.label()
            results.append(VerifyResult(
                op_kind=case.op_kind, label=case.label, dtype=case.dtype,
                grid=plan.grid if plan else None, threads_per_cta=plan.threads_per_cta if plan else None,
                shared_bytes_per_cta=plan.shared_bytes_per_cta if plan else None, tile=tile,
                error_fraction=relative_error(out, ref), tolerance_fraction=TOLERANCE[case.dtype], wall_s=wall))
    return results
