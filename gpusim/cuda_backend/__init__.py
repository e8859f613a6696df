"""Numba-CUDA kernels that follow gpusim's KernelPlans, so measured and simulated describe the same work.

* :mod:`gpusim.cuda_backend.plans`: the launch of every kernel as a :class:`~gpusim.mapping.plan.KernelPlan`
  built by the mapper's own functions (``gemm_plan``, ``map_op``, ``streaming_plan``), plus the
  thread layout each kernel derives from it. Pure; never imports numba.
* :mod:`gpusim.cuda_backend.kernels`: tiled GEMM (FP32; FP16 inputs with FP32 accumulation),
  elementwise add and GELU, row softmax, layernorm, sum reduction and a tiled attention forward,
  each specialised per plan (tile sizes are compile-time constants) and cached.
* :mod:`gpusim.cuda_backend.micro`: microbenchmark kernels (pointer chase, stream, L2 read, FMA).
* :mod:`gpusim.cuda_backend.verify`: runs the kernels on small shapes and compares with numpy.
* :mod:`gpusim.cuda_backend.measure`: suite definitions, event timing and the measurement tables.

Importing this package never imports numba: every ``numba.cuda`` import lives inside a function, so
a command can still switch on Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) before numba loads.
"""

from __future__ import annotations

import os
import sys

SIMULATOR_ENV = "NUMBA_ENABLE_CUDASIM"


def simulator_requested() -> bool:
    """True when the environment asks numba for its CUDA simulator."""
    return os.environ.get(SIMULATOR_ENV, "") not in ("", "0")


def numba_loaded() -> bool:
    """True once numba has been imported in this process (its simulator switch is then fixed)."""
    return "numba" in sys.modules


def simulator_active() -> bool:
    """Whether numba.cuda in this process is (or, if numba is not loaded yet, will be) the simulator."""
    if not numba_loaded():
        return simulator_requested()
    from numba.core import config

    return bool(config.ENABLE_CUDASIM)


def gpu_status() -> tuple[bool, str]:
    """(a CUDA GPU is usable from numba, a one-phrase reason when it is not).

    Imports numba.cuda: call it only when the simulator switch no longer matters (or is on).
    """
    if simulator_active():
        return False, "numba's CUDA simulator is active (NUMBA_ENABLE_CUDASIM=1)"
    try:
        from numba import cuda
    except Exception as exc:  # numba.cuda missing from this numba build
        return False, f"numba.cuda cannot be imported: {exc}"
    try:
        if not cuda.is_available():
            return False, "no CUDA driver or device visible to numba"
        if len(cuda.gpus) == 0:
            return False, "no CUDA device"
    except Exception as exc:  # driver present but broken
        return False, " ".join(str(exc).split())[:160]
    return True, ""


def cuda_driver_library_present() -> bool:
    """A cheap check that does not import numba: is a CUDA driver library on this machine at all?"""
    import ctypes.util

    if os.environ.get("NUMBA_CUDA_DRIVER"):
        return True
    return ctypes.util.find_library("cuda") is not None
