"""``gpusim measure --suite library``: time the vendor library's GEMMs and record the kernels it ran.

gpusim picks the tile it predicts fastest; cuBLAS's heuristic does not always (small CUDA-core
SGEMMs, TF32 on small grids, N % 16 == 8 on the RTX 4090: see README, "Library heuristics"). This
suite runs ``torch.mm`` (cuBLAS) on a sweep of shapes and dtypes, times each call with CUDA events
(median of repeats after warm-ups, inputs rotated so the L2 does not flatter), profiles one more call
with ``torch.profiler`` to get the names and durations of the kernels it launched, and writes rows in
the published kernels.csv format whose ``kernel_tile`` is the tile the GEMM kernel's name states
(:func:`gpusim.mapping.kernel_names.tile_of_kernel_name`). ``gpusim accuracy --measurements`` then
simulates the kernel the library ran, and the name of every kernel is in the row's notes. FP8
products run ``torch._scaled_mm`` (cuBLASLt), on GPUs that have FP8 tensor cores only.

Only :func:`run_library_probes` needs PyTorch and a GPU; everything else runs anywhere.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Any, Callable

from gpusim.engine.machine import Machine
from gpusim.accuracy import gpusim_dtype
from gpusim.mapping.gemm import output_bytes_per_element, promotes_partial_sums, tile_misfit_reason
from gpusim.mapping.kernel_names import tile_of_kernel_name
from gpusim.mapping.plan import Tile
from gpusim.measurements import KernelCase, columns
from gpusim.workload.ops import DTYPE_BYTES

LIBRARY_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8_e4m3")
"""``fp32`` runs with TF32 disabled (CUDA-core SGEMM); ``tf32`` is FP32 data with TF32 tensor cores allowed;
``fp8_e4m3`` multiplies E4M3 operands with per-tensor scales into a BF16 output (``torch._scaled_mm``)."""

FP8_MIN_COMPUTE_CAPABILITY = (8, 9)
"""FP8 tensor cores (and ``torch._scaled_mm``) start with Ada (8.9) and Hopper (9.0)."""


@dataclass(frozen=True)
class LibraryProbe:
    """One ``torch.mm`` of an M x K by a K x N matrix, both row-major (PyTorch's default layout), or
    with ``b_k_major`` a K x N matrix that is the transpose of a row-major N x K one (``nn.Linear``'s
    weight), so that both operands run along K. FP8 products always take B that way (cuBLASLt needs
    it); ``fast_accum`` lets them accumulate in the tensor cores' own precision
    (``torch._scaled_mm(use_fast_accum=True)``) instead of promoting partial sums to FP32."""

    m: int
    n: int
    k: int
    dtype: str
    b_k_major: bool = False
    fast_accum: bool = False

    def case_id(self, gpu: str) -> str:
        suffix = ("_bkmajor" if self.b_k_major else "") + ("_fastaccum" if self.fast_accum else "")
        return f"{gpu}_torch_{self.dtype}_mm_{self.m}x{self.n}x{self.k}{suffix}"

    @property
    def flop(self) -> float:
        return 2.0 * self.m * self.n * self.k


def _squares(dtype: str, sizes) -> list[LibraryProbe]:
    return [LibraryProbe(s, s, s, dtype) for s in sizes]


LIBRARY_PROBES: tuple[LibraryProbe, ...] = tuple(
    _squares("bf16", (256, 512, 1024, 2048, 4096, 8192))
    + _squares("fp16", (1024, 4096))
    + _squares("tf32", (512, 1024, 2048, 4096))
    + _squares("fp32", (512, 1024, 2048, 4096))
    # short k: is the epilogue of each wave hidden under the next wave's math?
    + [LibraryProbe(4096, 4096, k, "bf16") for k in (256, 512)]
    # a k sweep at one 8192 x 8192 output, BF16 and FP8: a per-tile cost that the next tile's math does
    # not hide (the epilogue) takes time that does not shrink with k. End-to-end FP8 runs are simulated
    # too fast where their GEMMs have k = 2048-4096 (README, the llm-foundry and NeMo FP8 runs)
    + [LibraryProbe(8192, 8192, k, "bf16") for k in (512, 1024, 2048, 4096, 16384)]
    + [LibraryProbe(8192, 8192, k, "fp8_e4m3") for k in (512, 1024, 2048, 4096, 8192, 16384)]
    # FP8 accumulation: Transformer Engine runs its forward GEMMs with fast accumulation and its
    # backward ones promoting to FP32 (the default here); what does the promotion cost?
    + [LibraryProbe(8192, 8192, k, "fp8_e4m3", fast_accum=True) for k in (2048, 8192)]
    # operand layout: Hopper's TF32 tensor-core instructions read both operands along K only, and
    # PyTorch's row-major B runs along N. gpusim simulates small and mid TF32 GEMMs on an H100 20-35%
    # too fast in every source (README); the same products with B along K, and a BF16 control
    # (whose instructions take either layout), say whether the layout is why
    + [LibraryProbe(s, s, s, "tf32", b_k_major=True) for s in (512, 1024, 2048, 4096)]
    + [LibraryProbe(1024, 1024, 1024, "bf16", b_k_major=True)]
    # N % 16 == 8 and its neighbours (the RTX 4090 rows whose profile named a CUTLASS 64x64 kernel)
    + [LibraryProbe(2048, n, 2048, "bf16") for n in (2040, 2056, 2072)]
    # batch-1 decode: GEMV-shaped products
    + [LibraryProbe(1, n, 4096, "bf16") for n in (4096, 12288)]
    # prefill-sized rows (a batch of 128-token prompts): is FP8's gain over BF16 smaller where few row
    # tiles fill the chip? TensorRT-LLM's FP8 first-token times are simulated 16-35% short
    + [LibraryProbe(m, 8192, 8192, dtype) for m in (128, 512, 2048) for dtype in ("bf16", "fp8_e4m3")]
)
"""The shapes the suite runs: where the library's choice is what gpusim does not know."""

HOST_COVER_CYCLES = 2_000_000
"""GPU clock cycles (about 1 ms at the 1.4-2 GHz of the GPUs measured) that ``torch.cuda._sleep`` keeps
the stream busy before each timed call: the host queues the start event, the call (PyTorch's
dispatch and cuBLAS's heuristic, tens of microseconds) and the end event behind it, so the events
bracket the kernels alone. Without it a small product's time is mostly the host's."""

SPLIT_K_MARKERS = ("splitkreduce", "split_k_reduce", "splitk_reduce", "_splitk_")
"""Lower-case name fragments of a split-K GEMM or its reduction kernel (cuBLAS's ``splitKreduce_kernel``;
``nvjet_..._splitK_...`` GEMMs)."""


@dataclass(frozen=True)
class LibraryResult:
    probe: LibraryProbe
    times_s: tuple[float, ...]
    """CUDA-event time of each timed call."""
    kernels: tuple[tuple[str, float], ...]
    """(name, device seconds) of every kernel one profiled call launched, in launch order."""
    num_warmups: int
    num_rotations: int

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def gemm_kernel(self) -> str | None:
        """The name of the call's longest kernel (the GEMM itself; casts and reductions are shorter)."""
        return max(self.kernels, key=lambda kernel: kernel[1])[0] if self.kernels else None


def library_rows(results: list[LibraryResult], gpu: str, provenance: dict[str, Any], machine: Machine
                 ) -> list[dict[str, Any]]:
    """Rows in the published kernels.csv format: the median call time, and the tile the GEMM kernel's
    name states as ``kernel_tile`` (left empty when the name states none or the tile cannot run on
    ``machine``, whose description the row is then simulated on)."""
    source = (f"gpusim {provenance.get('gpusim_version', '')} measure --suite library (torch "
              f"{provenance.get('torch_version', '?')}, CUDA {provenance.get('torch_cuda_version', '?')}) on "
              f"{provenance.get('gpu_name', '?')}, {provenance.get('date', '')}")
    rows = []
    for result in results:
        probe = result.probe
        t = result.median_s
        row: dict[str, Any] = {c: "" for c in columns(KernelCase)}
        row.update(case_id=probe.case_id(gpu), gpu=gpu, op="matmul", dtype=probe.dtype, m=probe.m, n=probe.n,
                   k=probe.k, batch=1, measured_time_s=t, measured_flop_per_s=probe.flop / t, metric="time_s",
                   timing_method="kernel_only", library="torch", source=source, kind="M", confidence="A")
        kernel = result.gemm_kernel
        dtype = gpusim_dtype(probe.dtype)
        tile = tile_of_kernel_name(kernel, machine, dtype) if kernel else None
        if tile is not None:
            tile = row_major_tile(tile)
        if probe.dtype.startswith("fp8"):
            call = ("torch._scaled_mm, E4M3 A row-major times B column-major (as cuBLASLt requires), per-tensor "
                    "scales of 1, BF16 output, " + ("fast accumulation" if probe.fast_accum
                                                    else "partial sums promoted to FP32"))
            row["variant"] = "fast_accum" if probe.fast_accum else "split_accumulator"
        elif probe.b_k_major:
            call = "torch.mm, A row-major, B the transpose of a row-major N x K matrix (both along K)"
            row["variant"] = "b_k_major"
        else:
            call = "torch.mm, row-major operands"
        # a row's tile is kept where it can run as the row is simulated (accuracy.matmul_plan)
        promotes = promotes_partial_sums(machine, dtype, row["variant"] == "split_accumulator")
        if tile is not None and tile_misfit_reason(machine, dtype, tile, promotes) is None:
            row["kernel_tile"] = tile.label()
        notes = [f"{call}; median of {len(result.times_s)} CUDA-event-timed calls after "
                 f"{result.num_warmups} warm-ups (min {min(result.times_s):.6g} s, max {max(result.times_s):.6g} s); "
                 f"{result.num_rotations} rotating input set(s)"]
        if probe.dtype == "fp32":
            notes.append("TF32 disabled")
        if result.kernels:
            listed = "; ".join(f"{name} ({seconds * 1e6:.3g} us)" for name, seconds in result.kernels)
            notes.append(f"kernels: {listed}")
        if any(marker in name.lower() for name, _ in result.kernels for marker in SPLIT_K_MARKERS):
            notes.append("the GEMM split K; the split factor is not in the kernel names, so the tile has none")
        if kernel and tile is None:
            notes.append("the GEMM kernel's name states no tile gpusim reads")
        row["notes"] = "; ".join(notes)
        rows.append(row)
    return rows


def row_major_tile(tile: Tile) -> Tile:
    """The tile of a cuBLAS kernel that PyTorch ran, in PyTorch's terms. cuBLAS is column-major, so
    PyTorch computes the row-major C = A B as the column-major C^T = B^T A^T: the kernel's M side
    runs along PyTorch's N and its N side along M (a 1 x 12288 x 4096 product ran
    ``nvjet_..._128x8_...``: 128 along the 12288 columns, 8 along the one row)."""
    return replace(tile, block_m=tile.block_n, block_n=tile.block_m, cluster=tile.cluster_n, cluster_n=tile.cluster)


def rotations_for(probe: LibraryProbe, l2_bytes: float, max_sets: int = 8) -> int:
    """Input sets to cycle through so that consecutive calls do not find their operands in L2: enough
    to span twice the L2, at most ``max_sets``."""
    dtype = gpusim_dtype(probe.dtype)
    per_set = ((probe.m * probe.k + probe.k * probe.n) * DTYPE_BYTES[dtype]
               + probe.m * probe.n * output_bytes_per_element(dtype))
    return max(1, min(max_sets, math.ceil(2.0 * l2_bytes / per_set)))


def has_fp8_tensor_cores(compute_capability: str) -> bool:
    """Whether a GPU of ``compute_capability`` ("major.minor") has FP8 tensor cores
    (:data:`FP8_MIN_COMPUTE_CAPABILITY`)."""
    major, minor = (int(part) for part in compute_capability.split(".")[:2])
    return (major, minor) >= FP8_MIN_COMPUTE_CAPABILITY


def supported_probes(probes, compute_capability: str) -> list[LibraryProbe]:
    """The probes a GPU of ``compute_capability`` can run: FP8 ones need FP8 tensor cores."""
    fp8 = has_fp8_tensor_cores(compute_capability)
    return [p for p in probes if fp8 or not p.dtype.startswith("fp8")]


def torch_unavailable_reason() -> str | None:
    """Why the library suite cannot run here (None when it can)."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed (the library suite times cuBLAS through it)"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA GPU"
    return None


def torch_provenance() -> dict[str, Any]:
    """GPU 0 as PyTorch sees it, and the versions that decide which kernels cuBLAS has."""
    import torch

    props = torch.cuda.get_device_properties(0)
    return {"gpu_name": props.name, "compute_capability": f"{props.major}.{props.minor}",
            "num_sms": props.multi_processor_count, "torch_version": torch.__version__,
            "torch_cuda_version": torch.version.cuda or "", "l2_bytes": getattr(props, "L2_cache_size", 0)}


def profiler_event_seconds(event) -> float:
    """Device time of one profiler event in seconds (the attribute's name differs across PyTorch versions)."""
    micros = getattr(event, "device_time_total", None)
    if micros is None:
        micros = getattr(event, "cuda_time_total", 0.0)
    return float(micros) * 1e-6


def _torch_product(torch, probe: LibraryProbe):
    """(a function making one operand set on the GPU, the call that multiplies a set) for ``probe``:
    ``torch.mm`` into a preallocated output (B along N, or along K with ``b_k_major``), or for FP8
    ``torch._scaled_mm`` of an E4M3 row-major A by a column-major B (cuBLASLt's FP8 layout) with
    per-tensor scales of 1 into BF16, with or without fast accumulation."""
    if probe.dtype.startswith("fp8"):
        fp8 = torch.float8_e4m3fn
        one = torch.ones((), device="cuda", dtype=torch.float32)

        def make_fp8_set():
            return (torch.randn(probe.m, probe.k, device="cuda").to(fp8),
                    torch.randn(probe.n, probe.k, device="cuda").to(fp8).t())

        def scaled_mm(a, b):
            torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                             use_fast_accum=probe.fast_accum)

        return make_fp8_set, scaled_mm
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(probe.dtype, torch.float32)

    def make_set():
        b = (torch.randn(probe.n, probe.k, device="cuda", dtype=dtype).t() if probe.b_k_major
             else torch.randn(probe.k, probe.n, device="cuda", dtype=dtype))
        return (torch.randn(probe.m, probe.k, device="cuda", dtype=dtype), b,
                torch.empty(probe.m, probe.n, device="cuda", dtype=dtype))

    def mm(a, b, c):
        torch.mm(a, b, out=c)

    return make_set, mm


def run_library_probes(probes, num_warmups: int, num_repeats: int, l2_bytes: float,
                       progress: Callable[[LibraryProbe, LibraryResult], None] | None = None) -> list[LibraryResult]:
    """Run every probe on GPU 0 with PyTorch (see the module docstring)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    results = []
    for probe in probes:
        torch.backends.cuda.matmul.allow_tf32 = probe.dtype == "tf32"
        make_set, call = _torch_product(torch, probe)
        sets = [make_set() for _ in range(rotations_for(probe, l2_bytes))]
        for i in range(num_warmups):
            call(*sets[i % len(sets)])
        torch.cuda.synchronize()
        times = []
        for i in range(num_repeats):
            operands = sets[i % len(sets)]
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(HOST_COVER_CYCLES)  # the host queues the call behind it (see the constant)
            start.record()
            call(*operands)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            call(*sets[0])
            torch.cuda.synchronize()
        kernels = tuple((e.name, profiler_event_seconds(e)) for e in prof.events()
                        if str(getattr(e, "device_type", "")).endswith("CUDA"))
        result = LibraryResult(probe, tuple(times), kernels, num_warmups, len(sets))
        results.append(result)
        if progress is not None:
            progress(probe, result)
        del sets
        torch.cuda.empty_cache()
    torch.backends.cuda.matmul.allow_tf32 = False
    return results
