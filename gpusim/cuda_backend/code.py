"""The compiled code of gpusim's own kernels, as the engine times it.

Each own kernel's SASS (:mod:`gpusim.cuda_backend.sass`) gives what one of its warps issues, stalls on
and loads over the whole kernel (a :class:`~gpusim.cuda_backend.sass.WarpPath`). Its loops are walked
once each and counted as often as this kernel family runs them:

* **GEMM** (:func:`gemm_path`): every step of k, each thread copies its share of the A and B tiles
  element by element (a round trip per element: the store to shared memory waits for the load) and
  then multiplies ``block_k`` rows of them out of shared memory;
* **element-wise and reduction** (:func:`load_loop_path`): the thread's loads, in the groups the
  code issues together;
* **rows** (softmax, layernorm; :func:`row_path`): two or three passes over the row, each a loop of
  ``vec`` elements per iteration (the compiler's unrolled loop and its remainder loop), with
  block-wide reductions between them.

:func:`compiled_plan` turns a kernel's path into the plan fields the engine times it with: its warp
instructions and stall cycles per round trip, the bytes a CTA has in flight per trip, the registers
the compiler gave a thread (occupancy), and, for the tiled GEMMs, delayed hits
(:attr:`gpusim.mapping.plan.KernelPlan.delayed_hits`).

Compiling needs numba-cuda, the CUDA toolkit's NVVM and NVRTC libraries, ``ptxas`` and ``nvdisasm``
(:func:`compile_sass`); the rest of this module reads text and needs none of them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace

from gpusim.cuda_backend.sass import NOTHING, WarpPath, count, innermost_loops, loops, walk
from gpusim.cuda_backend.plans import with_resources
from gpusim.engine.machine import Machine
from gpusim.mapping.plan import KernelPlan


def _outside(instructions, spans: list[tuple[int, int]], start: int, stop: int, shared_cycles: float) -> WarpPath:
    """The path of ``instructions[start:stop]`` less the ``spans`` (loops walked on their own)."""
    path, at = NOTHING, start
    for lo, hi in sorted(spans):
        if hi <= start or lo >= stop:
            continue
        path = path + walk(instructions, at, max(at, lo), shared_cycles)
        at = max(at, hi)
    return path + walk(instructions, at, stop, shared_cycles)


def _per_load(path: WarpPath) -> WarpPath:
    return path.times(1.0 / path.loads) if path.loads else NOTHING


def gemm_path(instructions, labels, block_m: int, block_n: int, block_k: int, threads: int, reg_m: int, reg_n: int,
              num_k_tiles: int, shared_cycles: float) -> WarpPath:
    """One warp of a tiled GEMM CTA that steps k ``num_k_tiles`` times (see the module)."""
    inner = innermost_loops(instructions, labels)
    math_loops = [span for span in inner if count(instructions, *span, "FFMA")]
    copy_loops = [span for span in inner if count(instructions, *span, "LDG")]
    if len(math_loops) != 1 or not copy_loops:
        raise ValueError(f"expected one FFMA loop and element-copy loops, found {len(math_loops)} and {len(copy_loops)}")
    (math_span,) = math_loops
    k_loops = [span for span in loops(instructions, labels) if span[0] < math_span[0] and math_span[1] <= span[1]]
    if not k_loops:
        raise ValueError("no loop over k around the FFMA loop")
    k_span = min(k_loops, key=lambda s: s[1] - s[0])
    element = _per_load(sum((walk(instructions, *span, shared_cycles) for span in copy_loops), NOTHING))
    products = walk(instructions, *math_span, shared_cycles)
    steps_per_body = count(instructions, *math_span, "FFMA") / (reg_m * reg_n)
    elements = (block_m * block_k + block_k * block_n) / threads
    straight = _outside(instructions, inner, *k_span, shared_cycles)
    # the straight code of the k step holds the copy loops' peeled iterations: they are among `elements`
    peeled = element.times(straight.loads)
    overhead = WarpPath(max(0.0, straight.instructions - peeled.instructions), max(0.0, straight.cycles - peeled.cycles),
                        max(0.0, straight.round_trips - peeled.round_trips), 0.0)
    step = element.times(elements) + products.times(block_k / steps_per_body) + overhead
    rest = _outside(instructions, [k_span], 0, len(instructions), shared_cycles)
    return step.times(num_k_tiles) + rest


def load_loop_path(instructions, labels, loads_per_thread: float, shared_cycles: float) -> WarpPath:
    """One warp of a kernel whose loops all load: each loop runs until the thread has issued its
    ``loads_per_thread`` (those of the straight code first), the loops sharing them evenly."""
    spans = [span for span in innermost_loops(instructions, labels) if count(instructions, *span, "LDG")]
    straight = _outside(instructions, spans, 0, len(instructions), shared_cycles)
    left = max(0.0, loads_per_thread - straight.loads)
    path = straight
    for span in spans:
        body = walk(instructions, *span, shared_cycles)
        path = path + body.times(left / len(spans) / body.loads)
    return path


def row_path(instructions, labels, iterations: int, loads_per_iteration: tuple[int, ...],
             shared_cycles: float) -> WarpPath:
    """One warp of a row kernel whose busiest thread runs ``iterations`` iterations per pass, pass p
    loading ``loads_per_iteration[p]`` elements per iteration. The loops of a pass are those with no
    barrier between them: the compiler's loop, unrolled over as many iterations as its loads hold, and
    maybe a remainder loop with fewer; the iterations the loops leave are peeled into the straight
    code, which is walked once."""
    spans = [span for span in innermost_loops(instructions, labels) if count(instructions, *span, "LDG")]
    passes: list[list[tuple[int, int]]] = []
    for span in spans:
        if passes and count(instructions, passes[-1][-1][1], span[0], "BAR") == 0:
            passes[-1].append(span)
        else:
            passes.append([span])
    if len(passes) != len(loads_per_iteration):
        raise ValueError(f"expected {len(loads_per_iteration)} passes over the row, found {len(passes)}")
    path = _outside(instructions, spans, 0, len(instructions), shared_cycles)
    for group, per_iteration in zip(passes, loads_per_iteration):
        bodies = sorted((walk(instructions, *span, shared_cycles) for span in group), key=lambda b: -b.loads)
        left = iterations
        for body in bodies:  # the unrolled loop first, then the remainder loop
            unroll = max(1, round(body.loads / per_iteration))
            path = path + body.times(left // unroll)
            left %= unroll
    return path


def compiled_plan(plan: KernelPlan, path: WarpPath, registers_per_thread: int, machine: Machine,
                  delayed_hits: bool = False) -> KernelPlan:
    """``plan`` as its compiled code runs it: one warp's ``path`` (over the whole kernel, for one CTA)
    spread over its round trips, the bytes a CTA has in flight per trip that make the engine count
    exactly those trips, and the occupancy the compiler's registers allow. The path's instructions
    replace the plan's estimate of a library kernel's issue overhead (its ``issue_factor``)."""
    if path.round_trips <= 0:
        raise ValueError(f"{plan.name}: its compiled code makes no round trip to memory")
    resized = with_resources(plan, machine, registers_per_thread, plan.shared_bytes_per_cta)
    loads = max(plan.l2_bytes_per_cta - plan.store_bytes_per_cta, 0.0)
    return replace(resized, bytes_in_flight_per_cta=loads / path.round_trips,
                   warp_instructions_per_trip=path.instructions / path.round_trips,
                   warp_stall_cycles_per_trip=path.stall_cycles / path.round_trips, delayed_hits=delayed_hits,
                   issue_factor=1.0)


# ------------------------------------------------------------------------------------- compiling

CODE_COLUMNS = ("case_id", "plan_name", "compute_capability", "registers_per_thread", "warp_instructions",
                "warp_stall_cycles", "round_trips", "global_loads", "delayed_hits", "shared_latency_cycles",
                "numba_cuda_version", "ptxas_version")
"""``kernels_sass.csv``: per own kernel, what one warp of a CTA does over the whole kernel."""


class CannotCompile(RuntimeError):
    """numba-cuda or a CUDA toolkit tool that compiling to SASS needs is not installed, or cannot
    compile for the target."""


def _tool(name: str) -> str:
    import shutil

    path = shutil.which(name)
    if path is None:
        raise CannotCompile(f"{name} is not on PATH (CUDA toolkit, or pip install nvidia-cuda-nvdisasm for nvdisasm)")
    return path


def toolchain_versions() -> dict[str, str]:
    """The numba-cuda and ptxas versions that compile the kernels."""
    import subprocess
    from importlib.metadata import PackageNotFoundError, version

    try:
        numba_cuda = version("numba-cuda")
    except PackageNotFoundError as exc:
        raise CannotCompile("numba-cuda is not installed (pip install numba-cuda)") from exc
    out = subprocess.run([_tool("ptxas"), "--version"], capture_output=True, text=True, check=True).stdout
    return {"numba_cuda_version": numba_cuda, "ptxas_version": out.strip().splitlines()[-1]}


@functools.lru_cache(maxsize=None)
def compile_sass(kernel, signature: tuple, compute_capability: tuple[int, int]) -> tuple[str, int]:
    """(SASS text, registers per thread) of a ``cuda.jit`` kernel for ``signature``, compiled as a
    launch compiles it (Numba to PTX, ``ptxas`` to machine code) for a device of
    ``compute_capability``, which need not be present: numba-cuda compiles a kernel's device
    functions for the current device, so that lookup is answered with the target meanwhile."""
    import re
    import subprocess
    import tempfile
    import types as pytypes
    from pathlib import Path
    from unittest import mock

    from numba import cuda
    import numba.cuda.dispatcher as dispatcher

    target = pytypes.SimpleNamespace(compute_capability=tuple(compute_capability))
    arch = f"sm_{compute_capability[0]}{compute_capability[1]}"
    try:
        with mock.patch.object(dispatcher, "get_current_device", lambda: target):
            ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=tuple(compute_capability))
        with tempfile.TemporaryDirectory() as folder:
            source, binary = Path(folder) / "kernel.ptx", Path(folder) / "kernel.cubin"
            source.write_text(ptx)
            report = subprocess.run([_tool("ptxas"), f"-arch={arch}", "-v", str(source), "-o", str(binary)],
                                    capture_output=True, text=True, check=True).stderr
            text = subprocess.run([_tool("nvdisasm"), "-c", str(binary)], capture_output=True, text=True,
                                  check=True).stdout
    except CannotCompile:
        raise
    except subprocess.CalledProcessError as exc:
        raise CannotCompile(f"{exc.cmd[0]} failed for {arch}: {' '.join((exc.stderr or '').split())[:200]}") from exc
    except Exception as exc:  # numba-cuda's own errors (an unsupported target, a missing NVVM or NVRTC)
        raise CannotCompile(f"numba-cuda cannot compile for {arch}: {' '.join(str(exc).split())[:200]}") from exc
    registers = re.search(r"Used (\d+) registers", report)
    if registers is None:
        raise RuntimeError(f"ptxas reported no register count: {report.strip()}")
    return text, int(registers.group(1))


def own_kernel_code(case, machine: Machine, compute_capability: tuple[int, int]) -> dict | None:
    """The ``kernels_sass.csv`` row of one case of the kernels suite (a
    :class:`gpusim.cuda_backend.measure.MeasureCase`): its kernel compiled as the suite launches it,
    its whole-kernel warp path; None for the ops :func:`gpusim.accuracy.own_kernel_plan` does not
    rebuild (reduction, attention)."""
    from numba import types

    from gpusim.cuda_backend import kernels as K
    from gpusim.cuda_backend.plans import elementwise_layout, gemm_layout, row_layout
    from gpusim.cuda_backend.sass import parse_sass

    K._bind_cuda()
    plan, dtype = case.plan, case.dtype
    shared_cycles = machine.shared_latency_s * machine.unit_clock_hz
    scalar = K._types(dtype)
    delayed_hits = False
    if case.op == "matmul":
        tile = plan.tile
        layout = gemm_layout(tile)
        kernel = K._gemm_kernel(tile.block_m, tile.block_n, tile.block_k, tile.num_stages, layout.threads,
                                layout.threads_m, layout.threads_n, layout.reg_m, layout.reg_n, tile.split_k,
                                tile.swizzle, dtype, K.gemm_out_dtype(dtype), False)
        operand = types.Array(scalar, 3, "C")
        signature = (operand, operand, operand, types.Array(types.float32, 4, "C")) + (types.int64,) * 6
        text, registers = compile_sass(kernel, signature, compute_capability)
        instructions, labels = parse_sass(text)
        k_tiles = math.ceil(math.ceil(case.get("k") / tile.split_k) / tile.block_k)
        path = gemm_path(instructions, labels, tile.block_m, tile.block_n, tile.block_k, layout.threads,
                         layout.reg_m, layout.reg_n, k_tiles, shared_cycles)
        delayed_hits = True
    elif case.op == "elementwise":
        layout = elementwise_layout(plan, case.get("num_elements"), dtype)
        kernel = K._elementwise_kernel(case.variant, layout.threads, layout.vec, layout.vectors_per_thread, dtype)
        vector = types.Array(scalar, 1, "C")
        text, registers = compile_sass(kernel, (vector, vector, vector, types.int64), compute_capability)
        instructions, labels = parse_sass(text)
        inputs = 2 if case.variant == "add" else 1
        path = load_loop_path(instructions, labels, inputs * layout.vec * layout.vectors_per_thread, shared_cycles)
    elif case.op in ("softmax", "layernorm"):
        rows, cols = case.get("rows"), case.get("cols")
        layout = row_layout(plan, rows, cols, dtype)
        kernel = K._row_kernel(case.op, layout.threads, layout.rows_per_cta, layout.threads_per_row, layout.vec, dtype)
        matrix, vector = types.Array(scalar, 2, "C"), types.Array(scalar, 1, "C")
        stats = types.Array(types.float32, 1, "C") if case.op == "layernorm" else vector
        signature = (matrix, matrix, stats, stats, vector, vector, types.int64, types.int64)
        text, registers = compile_sass(kernel, signature, compute_capability)
        instructions, labels = parse_sass(text)
        iterations = math.ceil(math.ceil(cols / layout.vec) / layout.threads_per_row)
        # softmax reads the row in each of its three passes; layernorm reads it twice, then the row,
        # gamma and beta
        passes = (1, 1, 1) if case.op == "softmax" else (1, 1, 3)
        path = row_path(instructions, labels, iterations, tuple(p * layout.vec for p in passes), shared_cycles)
    else:
        return None
    return {"case_id": case.case_id, "plan_name": plan.name,
            "compute_capability": f"{compute_capability[0]}.{compute_capability[1]}",
            "registers_per_thread": registers, "warp_instructions": path.instructions,
            "warp_stall_cycles": path.stall_cycles, "round_trips": path.round_trips, "global_loads": path.loads,
            "delayed_hits": delayed_hits, "shared_latency_cycles": shared_cycles}


def code_rows(cases, machine: Machine, compute_capability: tuple[int, int], progress=None) -> list[dict]:
    """The ``kernels_sass.csv`` rows of the kernels-suite ``cases`` that have one, with the toolchain's
    versions; ``progress(case, row)`` after each. Raises :class:`CannotCompile` when it cannot compile."""
    versions = toolchain_versions()
    rows = []
    for case in cases:
        row = own_kernel_code(case, machine, compute_capability)
        if row is not None:
            rows.append({**row, **versions})
            if progress is not None:
                progress(case, rows[-1])
    return rows


def plan_from_code_row(plan: KernelPlan, row: dict[str, str], machine: Machine) -> KernelPlan:
    """``plan`` as the compiled code of a ``kernels_sass.csv`` row runs it (:func:`compiled_plan`);
    ValueError naming the case and the column for a cell that is not what it should be."""
    def number(column: str, kind=float):
        try:
            return kind(row[column])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"kernels_sass.csv, case {row.get('case_id')}: {column} {row.get(column)!r} is not "
                             f"{'a whole number' if kind is int else 'a number'}") from None

    path = WarpPath(number("warp_instructions"), number("warp_instructions") + number("warp_stall_cycles"),
                    number("round_trips"), number("global_loads"))
    hits = str(row.get("delayed_hits", "")).strip().lower()
    if hits not in ("true", "false"):
        raise ValueError(f"kernels_sass.csv, case {row.get('case_id')}: delayed_hits {row.get('delayed_hits')!r} "
                         "is not True or False")
    return compiled_plan(plan, path, number("registers_per_thread", int), machine, hits == "true")
