"""Timing the kernels on a real GPU: suite definitions, the event timer, and the result tables.

A suite is a list of :class:`MeasureCase` values (pure: shapes, plans, FLOP and bytes per launch).
:func:`run_suite` times each one with a *timer* (``cuda_event_timer`` on a GPU; tests inject a fake)
on launches built by a *launcher factory* (:func:`cuda_launcher` on a GPU). :func:`kernel_rows`,
:func:`plan_rows` and :func:`timing_rows` turn the timings into tidy rows; the command writes them.

* ``kernels`` rows use exactly the columns of ``measurements/published/kernels.csv`` (so
  ``gpusim accuracy --measurements`` loads them), for the ops that file knows;
* ``plans`` rows give each own-kernel case's plan (grid, threads, tile, shared memory) and the time
  the engine simulates for exactly that plan;
* ``timings`` rows keep every case (also the FMA, reduction and attention kernels, which the
  published format has no op for) with median, min and max.

Method: warm-up launches, then ``num_repeats`` launches each timed with a pair of CUDA events;
inputs rotate among enough copies that together exceed twice the L2 (so a repeat does not find its
inputs in L2), except for the cache microbenchmarks, which measure a cache on purpose.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from gpusim.cuda_backend import plans as P
from gpusim.engine.machine import Machine
from gpusim.mapping.plan import KernelPlan
from gpusim.measurements import KernelCase, columns

KiB, MiB, GiB = 2**10, 2**20, 2**30

CHASE_L1_EDGE_BYTES = tuple(KiB * s for s in (112, 120, 128, 136, 176, 184, 192, 200, 240, 248, 264))
"""Chases around where the L1 of a described NVIDIA GPU ends (its share of the 128, 192 or 256 KiB
L1/shared pool, less the smallest shared-memory carve-out): how the hit share falls past the
capacity, which gpusim takes as a step (the A100's 196 KB published chase sits 11-13% above it)."""
CHASE_WORKING_SETS_BYTES = tuple(sorted({16 * KiB * 4**i for i in range(9)} | set(CHASE_L1_EDGE_BYTES)))
"""16 KiB .. 1 GiB in steps of 4, and the L1 edges."""
CHASE_STEPS = 100_000
STREAM_OCCUPANCY_FRACTIONS = (0.125, 0.25, 0.5, 1.0)
STREAM_ARRAY_BYTES = 1 * GiB
L2_FOOTPRINTS_BYTES = tuple(MiB * 2**i for i in range(9))  # 1 MiB .. 256 MiB
L2_READ_BYTES = 8 * GiB
"""Bytes an L2 case reads per launch (passes = this / footprint)."""
FMA_ITERATIONS = 4096
COPY_BYTES = (1 * MiB, 16 * MiB, 256 * MiB, 1 * GiB)
GEMM_SHAPES = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (1000, 1000, 1000), (4096, 1024, 4096))
ELEMENTWISE_SIZES = (2**20, 2**24, 2**26)
ROW_SHAPES = ((4096, 1024), (4096, 4096), (16384, 512), (1024, 32768))
REDUCTION_SIZES = (2**24, 2**26)
ATTENTION_SHAPES = ((4, 16, 1024, 1024, 32),)  # batch, heads, seq_q, seq_kv, head_dim (shared memory fits 48 KiB)

PUBLISHED_OPS = frozenset({"matmul", "elementwise", "softmax", "layernorm", "stream", "l2_bandwidth",
                           "pointer_chase", "memcpy_h2d", "memcpy_d2h"})


@dataclass(frozen=True)
class MeasureCase:
    case_id: str
    suite: str
    op: str
    """A published op name (matmul, stream, ...) or fma / reduction / attention."""
    variant: str | None
    dtype: str | None
    metric: str
    """time_s | bytes_per_s | latency_s | flop_per_s: the primary value in the kernels table."""
    flop: float = 0.0
    """FLOP per launch (2 per FMA)."""
    moved_bytes: float = 0.0
    """Bytes per launch the bandwidth is computed from."""
    plan: KernelPlan | None = None
    shape: tuple[tuple[str, Any], ...] = ()
    """Published shape columns (m, n, k, batch, rows, cols, num_elements, num_bytes, working_set_bytes,
    occupancy_fraction) that apply."""
    params: tuple[tuple[str, Any], ...] = ()
    """Launch parameters of the microbenchmarks (grid, threads, steps, passes, iterations)."""
    input_set_bytes: float = 0.0
    """Bytes of one input set; rotated copies are made while their total stays under 2x L2."""
    rotate: bool = True

    def get(self, name: str) -> Any:
        return dict(self.shape).get(name, dict(self.params).get(name))


@dataclass(frozen=True)
class Timing:
    case_id: str
    times_s: tuple[float, ...]
    num_warmups: int
    num_rotations: int
    registers_per_thread: int | None = None
    """What the compiled kernel really uses (None where unknown)."""

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def min_s(self) -> float:
        return min(self.times_s)

    @property
    def max_s(self) -> float:
        return max(self.times_s)


def num_rotations(input_set_bytes: float, l2_capacity_bytes: float, dram_capacity_bytes: float,
                  max_sets: int = 16) -> int:
    """Copies of the inputs to cycle through: enough that they exceed twice the L2 (a repeat then
    finds its inputs evicted), at most ``max_sets`` and at most a quarter of device memory."""
    if input_set_bytes <= 0:
        return 1
    wanted = math.floor(2 * l2_capacity_bytes / input_set_bytes) + 1
    by_memory = max(1, int(0.25 * dram_capacity_bytes // input_set_bytes))
    return max(1, min(max_sets, wanted, by_memory))


# ------------------------------------------------------------------------------------------ suites


def micro_suite(machine: Machine) -> list[MeasureCase]:
    cases: list[MeasureCase] = []
    for ws in CHASE_WORKING_SETS_BYTES:
        cases.append(MeasureCase(f"pointer_chase_{ws // KiB}kib", "micro", "pointer_chase", "ld_global", None,
                                 "latency_s", shape=(("working_set_bytes", ws),),
                                 params=(("steps", CHASE_STEPS), ("grid", 1), ("threads", 1)), rotate=False))
    n = STREAM_ARRAY_BYTES // 8
    for variant, (reads, writes) in P.STREAM_VARIANTS.items():
        for occ in STREAM_OCCUPANCY_FRACTIONS:
            plan = P.plan_for_stream(machine, variant, n, occ)
            cases.append(MeasureCase(
                f"stream_{variant}_occ{occ:g}", "micro", "stream", variant, "fp64", "bytes_per_s",
                flop=plan.useful_flop, moved_bytes=(reads + writes) * n * 8.0, plan=plan,
                shape=(("num_bytes", n * 8), ("occupancy_fraction", occ)),
                params=(("grid", plan.grid), ("threads", plan.threads_per_cta)), rotate=False))
    threads = 1024
    grid = 2 * machine.num_units
    for footprint in L2_FOOTPRINTS_BYTES:
        passes = max(1, L2_READ_BYTES // footprint)
        cases.append(MeasureCase(f"l2_read_{footprint // MiB}mib", "micro", "l2_bandwidth", "read", "fp64",
                                 "bytes_per_s", flop=float(footprint // 8 * passes),
                                 moved_bytes=float(footprint * passes),
                                 shape=(("working_set_bytes", footprint),),
                                 params=(("grid", grid), ("threads", threads), ("passes", passes)), rotate=False))
    fma_grid, fma_threads = 8 * machine.num_units, 256
    fma_flop = 2.0 * 8 * FMA_ITERATIONS * fma_grid * fma_threads
    cases.append(MeasureCase("fma_fp32", "micro", "fma", "fp32", "fp32", "flop_per_s", flop=fma_flop,
                             params=(("grid", fma_grid), ("threads", fma_threads), ("iterations", FMA_ITERATIONS)),
                             rotate=False))
    for direction in ("h2d", "d2h"):
        for nbytes in COPY_BYTES:
            cases.append(MeasureCase(f"memcpy_{direction}_{nbytes // MiB}mib", "micro", f"memcpy_{direction}",
                                     "pinned", None, "bytes_per_s", moved_bytes=float(nbytes),
                                     shape=(("num_bytes", nbytes),), rotate=False))
    return cases


def kernels_suite(machine: Machine) -> list[MeasureCase]:
    cases: list[MeasureCase] = []
    for dtype in P.KERNEL_DTYPES:
        eb = 4 if dtype == "fp32" else 2
        for m, n, k in GEMM_SHAPES:
            plan = P.choose_gemm_plan(machine, m, n, k, dtype)
            cases.append(MeasureCase(
                f"gemm_{dtype}_{m}x{n}x{k}", "kernels", "matmul", f"numba_{plan.tile.label()}", dtype, "time_s",
                flop=2.0 * m * n * k, moved_bytes=float((m * k + k * n + m * n) * eb), plan=plan,
                shape=(("m", m), ("n", n), ("k", k), ("batch", 1)), input_set_bytes=(m * k + k * n) * eb))
        for function in ("add", "gelu"):
            for size in ELEMENTWISE_SIZES:
                plan = P.plan_for_elementwise(machine, function, size, dtype)
                inputs = 2 if function == "add" else 1
                cases.append(MeasureCase(
                    f"elementwise_{function}_{dtype}_{size}", "kernels", "elementwise", function, dtype, "time_s",
                    flop=plan.useful_flop, moved_bytes=float((inputs + 1) * size * eb), plan=plan,
                    shape=(("num_elements", size),), input_set_bytes=inputs * size * eb))
        for kind in ("softmax", "layernorm"):
            for rows, cols in ROW_SHAPES:
                plan = P.plan_for_rows(machine, kind, rows, cols, dtype)
                cases.append(MeasureCase(
                    f"{kind}_{dtype}_{rows}x{cols}", "kernels", kind, None, dtype, "time_s",
                    flop=plan.useful_flop, moved_bytes=2.0 * rows * cols * eb, plan=plan,
                    shape=(("rows", rows), ("cols", cols)), input_set_bytes=rows * cols * eb))
        for size in REDUCTION_SIZES:
            plan = P.plan_for_reduction(machine, size, dtype)
            cases.append(MeasureCase(f"reduction_{dtype}_{size}", "kernels", "reduction", "sum", dtype, "time_s",
                                     flop=float(size), moved_bytes=float(size * eb), plan=plan,
                                     shape=(("num_elements", size),), input_set_bytes=size * eb))
        for batch, heads, sq, skv, d in ATTENTION_SHAPES:
            plan = P.plan_for_attention(machine, batch, heads, sq, skv, d, dtype)
            if plan.shared_bytes_per_cta > P.STATIC_SHARED_LIMIT_BYTES:
                continue
            cases.append(MeasureCase(
                f"attention_{dtype}_b{batch}h{heads}q{sq}kv{skv}d{d}", "kernels", "attention", "forward", dtype,
                "time_s", flop=plan.useful_flop, moved_bytes=float(batch * heads * (2 * sq + 2 * skv) * d * eb),
                plan=plan, params=(("batch", batch), ("heads", heads), ("seq_len_q", sq), ("seq_len_kv", skv),
                                   ("head_dim", d)), input_set_bytes=batch * heads * (sq + 2 * skv) * d * eb))
    return cases


SUITES: dict[str, Callable[[Machine], list[MeasureCase]]] = {"micro": micro_suite, "kernels": kernels_suite}


# ------------------------------------------------------------------------------------------ timing

Launch = Callable[[int], None]
"""Runs the case once on input set ``i % num_rotations`` (asynchronously, on the default stream)."""
Timer = Callable[[Launch, int, int], list[float]]
"""(launch, warm-ups, repeats) -> seconds of each repeat."""


@dataclass
class Launcher:
    launch: Launch
    num_rotations: int = 1
    registers_per_thread: int | None = None
    release: Callable[[], None] = field(default=lambda: None)


HOST_COVER_FLOOR_S = 1e-3
"""Least time the spin kernel keeps the GPU busy ahead of each timed launch."""
SPIN_CALIBRATION_ITERATIONS = 1 << 20
ENQUEUE_PROBES = 2


def cuda_event_timer(launch: Launch, num_warmups: int, num_repeats: int) -> list[float]:
    """Each repeat between two CUDA events on the default stream, after ``num_warmups`` launches.

    The host needs tens of microseconds to hand a launch to the driver (Numba's argument handling,
    a synchronous copy's setup); an idle GPU would record the start event at once and count that
    time as the kernel's. So a spin kernel is queued first, long enough (four times the least enqueue
    time of ``ENQUEUE_PROBES`` untimed launches, at least ``HOST_COVER_FLOOR_S``) for the host to queue the
    start event, the launch and the end event behind it: the events then bracket the kernel alone."""
    import time

    from numba import cuda

    from gpusim.cuda_backend import micro as U

    sink = cuda.device_array(1, dtype="float32")
    for i in range(num_warmups):
        launch(i)
    cuda.synchronize()
    enqueue_s = math.inf
    for i in range(ENQUEUE_PROBES):  # untimed; the least of them, so that a compile does not count
        before = time.perf_counter()
        launch(i)
        enqueue_s = min(enqueue_s, time.perf_counter() - before)
        cuda.synchronize()
    spin_iterations = max(1, math.ceil(max(HOST_COVER_FLOOR_S, 4 * enqueue_s) / _spin_seconds_per_iteration()))
    times = []
    for r in range(num_repeats):
        start, end = cuda.event(timing=True), cuda.event(timing=True)
        U.launch_spin(sink, spin_iterations)
        start.record()
        launch(num_warmups + r)
        end.record()
        end.synchronize()
        times.append(cuda.event_elapsed_time(start, end) / 1e3)
    return times


@functools.lru_cache(maxsize=None)
def _spin_seconds_per_iteration() -> float:
    """Seconds per iteration of the spin kernel, timed once per process (a long run, so the launch's
    own host time is a small share of it)."""
    from numba import cuda

    from gpusim.cuda_backend import micro as U

    sink = cuda.device_array(1, dtype="float32")
    U.launch_spin(sink, 16)  # compile
    cuda.synchronize()
    start, end = cuda.event(timing=True), cuda.event(timing=True)
    start.record()
    U.launch_spin(sink, SPIN_CALIBRATION_ITERATIONS)
    end.record()
    end.synchronize()
    return max(cuda.event_elapsed_time(start, end) / 1e3, 1e-9) / SPIN_CALIBRATION_ITERATIONS


def run_suite(cases: Iterable[MeasureCase], make_launcher: Callable[[MeasureCase], Launcher], timer: Timer,
              num_warmups: int = 3, num_repeats: int = 20,
              progress: Callable[[MeasureCase, Timing], None] | None = None) -> list[Timing]:
    import sys

    timings = []
    for case in cases:
        try:
            launcher = make_launcher(case)
            try:
                times = timer(launcher.launch, num_warmups, num_repeats)
            finally:
                launcher.release()
        except Exception as exc:  # the driver refused the launch: say so and time the other cases
            if "OUT_OF_RESOURCES" not in str(exc):
                raise
            print(f"gpusim: measure: {case.case_id} left out: the GPU refused the launch ({str(exc)[:90]})",
                  file=sys.stderr)
            continue
        if len(times) != num_repeats or not all(t > 0 and math.isfinite(t) for t in times):
            raise ValueError(f"{case.case_id}: the timer returned {times!r}")
        timing = Timing(case.case_id, tuple(times), num_warmups, launcher.num_rotations,
                        launcher.registers_per_thread)
        timings.append(timing)
        if progress:
            progress(case, timing)
    return timings


def _registers(kernel: Any) -> int | None:
    try:
        regs = kernel.get_regs_per_thread()
    except Exception:  # not on every numba version / the simulator
        return None
    if isinstance(regs, dict):
        return max(regs.values()) if regs else None
    return int(regs)


def cuda_launcher(case: MeasureCase, machine: Machine) -> Launcher:
    """Device arrays and a launch closure for one case (needs numba.cuda: a GPU, or the simulator
    for tiny cases)."""
    from numba import cuda

    from gpusim.cuda_backend import kernels as K
    from gpusim.cuda_backend import micro as U

    rng = np.random.default_rng(0)
    sets = 1
    if case.rotate:
        sets = num_rotations(case.input_set_bytes, machine.l2_capacity_bytes, machine.dram_capacity_bytes)
    plan = case.plan
    op = case.op
    dtype = case.dtype or "fp64"
    npd = P.NUMPY_DTYPES.get(dtype, "float64")

    def dev(shape, low=-1.0, high=1.0, dt=npd):
        return cuda.to_device(rng.uniform(low, high, shape).astype(dt))

    if op == "matmul":
        m, n, k = case.get("m"), case.get("n"), case.get("k")
        a_sets = [dev((1, m, k)) for _ in range(sets)]
        b_sets = [dev((1, k, n)) for _ in range(sets)]
        c = cuda.device_array((1, m, n), dtype=npd)
        split = plan.tile.split_k
        work = cuda.device_array((1, split, m, n), dtype="float32") if split > 1 else None
        K.launch_gemm(plan, a_sets[0], b_sets[0], c, dtype, work)

        def launch(i):
            K.launch_gemm(plan, a_sets[i % sets], b_sets[i % sets], c, dtype, work)
        return Launcher(launch, sets, _registers(_last_gemm_kernel(plan, dtype)))
    if op in ("elementwise", "reduction"):
        size = case.get("num_elements")
        xs = [dev(size) for _ in range(sets)]
        if op == "elementwise":
            ys = [dev(size) for _ in range(sets)] if case.variant == "add" else [None] * sets
            out = cuda.device_array(size, dtype=npd)

            def launch(i):
                K.launch_elementwise(plan, case.variant, xs[i % sets], ys[i % sets], out, dtype)
        else:
            out = cuda.device_array(1, dtype="float32")

            def launch(i):
                K.launch_reduction(plan, xs[i % sets], out, dtype)
        return Launcher(launch, sets)
    if op in ("softmax", "layernorm"):
        rows, cols = case.get("rows"), case.get("cols")
        xs = [dev((rows, cols)) for _ in range(sets)]
        out = cuda.device_array((rows, cols), dtype=npd)
        mean = cuda.device_array(rows, dtype="float32")
        rstd = cuda.device_array(rows, dtype="float32")
        gamma, beta = dev(cols), dev(cols)

        def launch(i):
            K.launch_rows(plan, op, xs[i % sets], out, dtype, mean, rstd, gamma, beta)
        return Launcher(launch, sets)
    if op == "attention":
        b, h, sq, skv, d = (case.get(x) for x in ("batch", "heads", "seq_len_q", "seq_len_kv", "head_dim"))
        qs = [dev((b * h, sq, d)) for _ in range(sets)]
        ks = [dev((b * h, skv, d)) for _ in range(sets)]
        vs = [dev((b * h, skv, d)) for _ in range(sets)]
        out = cuda.device_array((b * h, sq, d), dtype=npd)

        def launch(i):
            K.launch_attention(plan, qs[i % sets], ks[i % sets], vs[i % sets], out, dtype)
        return Launcher(launch, sets)
    if op == "pointer_chase":
        chain = cuda.to_device(U.chase_chain(case.get("working_set_bytes")))
        out = cuda.to_device(np.zeros(2, np.uint64))
        steps = case.get("steps")
        return Launcher(lambda i: U.launch_chase(chain, steps, out), 1)
    if op == "stream":
        n = case.get("num_bytes") // 8
        a, b, c = (cuda.to_device(np.full(n, v)) for v in (1.0, 2.0, 0.5))
        grid, threads = case.get("grid"), case.get("threads")
        return Launcher(lambda i: U.launch_stream(case.variant, grid, threads, a, b, c, 3.0), 1)
    if op == "l2_bandwidth":
        footprint = case.get("working_set_bytes")
        a = cuda.to_device(np.full(footprint // 8, 1.0))
        grid, threads, passes = case.get("grid"), case.get("threads"), case.get("passes")
        out = cuda.device_array(grid * threads, dtype="float64")
        return Launcher(lambda i: U.launch_l2_read(grid, threads, a, passes, out), 1)
    if op == "fma":
        grid, threads, iterations = case.get("grid"), case.get("threads"), case.get("iterations")
        out = cuda.device_array(grid * threads, dtype="float32")
        return Launcher(lambda i: U.launch_fma(grid, threads, out, iterations, 0.999, 0.001), 1)
    if op in ("memcpy_h2d", "memcpy_d2h"):
        nbytes = case.get("num_bytes")
        host = cuda.pinned_array(nbytes, dtype=np.uint8)
        host[:] = 1
        device = cuda.device_array(nbytes, dtype=np.uint8)
        if op == "memcpy_h2d":
            return Launcher(lambda i: device.copy_to_device(host), 1)
        return Launcher(lambda i: device.copy_to_host(host), 1)
    raise ValueError(f"no launcher for op {op!r}")


def _last_gemm_kernel(plan: KernelPlan, dtype: str) -> Any:
    from gpusim.cuda_backend import kernels as K

    tile = plan.tile
    layout = P.gemm_layout(tile)
    return K._gemm_kernel(tile.block_m, tile.block_n, tile.block_k, tile.num_stages, layout.threads,
                          layout.threads_m, layout.threads_n, layout.reg_m, layout.reg_n, tile.split_k,
                          tile.swizzle, dtype, K.gemm_out_dtype(dtype), False)


# -------------------------------------------------------------------------------------- provenance


GPU_STEMS = (  # (substring of the CUDA device name, gpusim hardware stem)
    ("H100 80GB HBM3", "h100_sxm5_80gb"), ("H100 SXM", "h100_sxm5_80gb"), ("H100 PCIe", "h100_pcie_80gb"),
    ("H200", "h200_sxm_141gb"), ("A100-SXM4-80GB", "a100_sxm4_80gb"), ("A100-SXM4-40GB", "a100_sxm4_40gb"),
    ("A100-PCIE-40GB", "a100_pcie_40gb"), ("V100-SXM2", "v100_sxm2_32gb"), ("RTX 4090", "rtx_4090"),
    ("RTX 3090", "rtx_3090"),
)


def gpu_stem(device_name: str) -> str | None:
    """The gpusim hardware stem of a CUDA device name, when one is known."""
    for needle, stem in GPU_STEMS:
        if needle.lower() in device_name.lower():
            return stem
    return None


def folder_name(device_name: str) -> str:
    """A file-system-safe folder for a device: its stem, else its name in lower case."""
    stem = gpu_stem(device_name)
    if stem:
        return stem
    return "".join(c if c.isalnum() else "_" for c in device_name.lower()).strip("_") or "unknown_gpu"


def _version(package: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""


def nvml_clocks() -> dict[str, Any]:
    """SM and memory clocks (current and maximum, Hz) and the driver string from NVML, when the
    ``pynvml`` module is importable; empty values otherwise."""
    out: dict[str, Any] = {"sm_clock_hz": None, "max_sm_clock_hz": None, "memory_clock_hz": None,
                           "max_memory_clock_hz": None, "driver_version": None}
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return out
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        out["sm_clock_hz"] = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM) * 1e6
        out["max_sm_clock_hz"] = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM) * 1e6
        out["memory_clock_hz"] = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM) * 1e6
        out["max_memory_clock_hz"] = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM) * 1e6
        driver = pynvml.nvmlSystemGetDriverVersion()
        out["driver_version"] = driver.decode() if isinstance(driver, bytes) else str(driver)
        pynvml.nvmlShutdown()
    except Exception:  # NVML present but not usable: leave the clocks empty
        pass
    return out


def source_commit() -> str:
    """The git commit of the gpusim source that runs, with ``+changes`` when its tracked files differ
    from it; empty when gpusim is not run from a git checkout (an installed wheel)."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return ""
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return commit + ("+changes" if dirty else "")


def base_provenance(hardware: str, date_iso: str) -> dict[str, Any]:
    """Versions and date (no GPU needed)."""
    import platform

    from gpusim import __version__

    return {
        "gpusim_version": __version__,
        "gpusim_commit": source_commit(),
        "numba_version": _version("numba"),
        "numba_cuda_version": _version("numba-cuda"),
        "numpy_version": _version("numpy"),
        "python_version": platform.python_version(),
        "date": date_iso,
        "plan_hardware": hardware,
    }


def device_provenance() -> dict[str, Any]:
    """Name, compute capability, SM count, CUDA driver API version and NVML clocks of GPU 0."""
    from numba import cuda

    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    try:
        major, minor = cuda.cudadrv.driver.driver.get_version()
        driver_api = f"{major}.{minor}"
    except Exception:
        driver_api = ""
    info = {
        "gpu_name": name,
        "compute_capability": "{}.{}".format(*dev.compute_capability),
        "num_sms": int(dev.MULTIPROCESSOR_COUNT),
        "cuda_driver_api_version": driver_api,
    }
    info.update(nvml_clocks())
    return info


# ---------------------------------------------------------------------------------------- the rows

KERNEL_COLUMNS = columns(KernelCase)
"""The published kernels.csv columns, in file order (the rows this module writes load as measurements)."""
PLAN_COLUMNS = (
    "case_id", "plan_name", "pipe", "compute_dtype", "grid", "threads_per_cta", "registers_per_thread",
    "measured_registers_per_thread", "shared_bytes_per_cta", "ctas_per_sm", "block_m", "block_n", "block_k",
    "num_stages", "num_warps", "split_k", "swizzle", "simulated_time_s",
)
TIMING_COLUMNS = (
    "case_id", "suite", "op", "variant", "dtype", "median_time_s", "min_time_s", "max_time_s", "num_repeats",
    "num_warmups", "num_rotations", "flop_per_launch", "bytes_per_launch", "median_flop_per_s",
    "median_bytes_per_s", "median_latency_s",
)


def _latency(case: MeasureCase, t: float) -> float | None:
    steps = case.get("steps")
    return t / steps if case.op == "pointer_chase" and steps else None


def kernel_rows(cases: list[MeasureCase], timings: list[Timing], gpu: str, provenance: dict[str, Any]
                ) -> list[dict[str, Any]]:
    """Rows in the published kernels.csv format, for the ops that format knows."""
    by_id = {t.case_id: t for t in timings}
    source = (f"gpusim {provenance.get('gpusim_version', '')} measure (numba kernels) on "
              f"{provenance.get('gpu_name', '?')}, {provenance.get('date', '')}")
    rows = []
    for case in cases:
        timing = by_id.get(case.case_id)
        if timing is None or case.op not in PUBLISHED_OPS:
            continue
        t = timing.median_s
        row: dict[str, Any] = {c: "" for c in KERNEL_COLUMNS}
        row.update(case_id=case.case_id, gpu=gpu, op=case.op, variant=case.variant or "", dtype=case.dtype or "")
        for name, value in case.shape:
            row[name] = value
        row["measured_time_s"] = t
        if case.flop > 0 and case.op == "matmul":
            row["measured_flop_per_s"] = case.flop / t
        if case.moved_bytes > 0:
            row["measured_bytes_per_s"] = case.moved_bytes / t
        latency = _latency(case, t)
        if latency is not None:
            row["measured_latency_s"] = latency
        row["metric"] = case.metric
        row["timing_method"] = "kernel_only"
        row["library"] = "numba"
        row["source"] = source
        row["kind"] = "M"
        row["confidence"] = "A"
        note = (f"median of {len(timing.times_s)} CUDA-event-timed repeats after {timing.num_warmups} warm-ups "
                f"(min {timing.min_s:.6g} s, max {timing.max_s:.6g} s); {timing.num_rotations} rotating input set(s)")
        if case.plan is not None:
            note += f"; plan {case.plan.name} (see plans.csv)"
        if case.op == "stream":
            note += "; num_bytes is one FP64 array; grid-stride kernel filling every SM to the occupancy"
        if case.op == "pointer_chase":
            note += f"; {case.get('steps')} dependent loads, one node per 128-byte line in random cyclic order"
        row["notes"] = note
        rows.append(row)
    return rows


def plan_rows(cases: list[MeasureCase], timings: list[Timing], machine: Machine) -> list[dict[str, Any]]:
    """The exact plan of every own-kernel case and the engine's time for that plan alone."""
    from gpusim.engine.kernel import simulate_kernel

    by_id = {t.case_id: t for t in timings}
    rows = []
    for case in cases:
        plan = case.plan
        if plan is None or case.case_id not in by_id:
            continue
        tile = plan.tile
        row: dict[str, Any] = {
            "case_id": case.case_id, "plan_name": plan.name, "pipe": plan.pipe, "compute_dtype": plan.dtype,
            "grid": plan.grid, "threads_per_cta": plan.threads_per_cta,
            "registers_per_thread": plan.registers_per_thread,
            "measured_registers_per_thread": by_id[case.case_id].registers_per_thread or "",
            "shared_bytes_per_cta": plan.shared_bytes_per_cta, "ctas_per_sm": plan.ctas_per_unit,
            "block_m": "", "block_n": "", "block_k": "", "num_stages": "", "num_warps": "", "split_k": "",
            "swizzle": "",
            "simulated_time_s": simulate_kernel(plan, machine).time_s + machine.graph_kernel_launch_s,
        }
        if tile is not None:
            row.update(block_m=tile.block_m, block_n=tile.block_n, block_k=tile.block_k, num_stages=tile.num_stages,
                       num_warps=tile.num_warps, split_k=tile.split_k, swizzle=tile.swizzle)
        rows.append(row)
    return rows


def timing_rows(cases: list[MeasureCase], timings: list[Timing]) -> list[dict[str, Any]]:
    by_id = {t.case_id: t for t in timings}
    rows = []
    for case in cases:
        timing = by_id.get(case.case_id)
        if timing is None:
            continue
        t = timing.median_s
        latency = _latency(case, t)
        rows.append({
            "case_id": case.case_id, "suite": case.suite, "op": case.op, "variant": case.variant or "",
            "dtype": case.dtype or "", "median_time_s": t, "min_time_s": timing.min_s, "max_time_s": timing.max_s,
            "num_repeats": len(timing.times_s), "num_warmups": timing.num_warmups,
            "num_rotations": timing.num_rotations, "flop_per_launch": case.flop, "bytes_per_launch": case.moved_bytes,
            "median_flop_per_s": case.flop / t if case.flop else "",
            "median_bytes_per_s": case.moved_bytes / t if case.moved_bytes else "",
            "median_latency_s": latency if latency is not None else "",
        })
    return rows
