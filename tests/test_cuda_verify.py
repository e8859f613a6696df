"""``gpusim verify`` under Numba's CUDA simulator: it passes, and a planted tile-loop bug makes it fail.

Kernels run in subprocesses: the simulator must be switched on before numba is imported, and this
test process may already have imported numba without it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _verify(*args: str, simulator: bool = True, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    else:
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    return subprocess.run([sys.executable, "-m", "gpusim", "verify", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_verify_passes_every_case_under_the_simulator():
    from gpusim.commands.verify import OP_KINDS

    proc = _verify()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "Numba CUDA simulator" in lines[0]
    assert lines[-1] == "19/19 cases within tolerance"
    body = "\n".join(lines[2:-1])
    for kind in OP_KINDS:
        assert kind in body
    assert "FAIL" not in body
    # The non-dividing GEMM: ceil(37/16) * ceil(45/16) = 9 CTAs of one warp.
    assert "9x32" in body


def test_dropping_the_last_k_tile_makes_verify_fail():
    proc = _verify("--op", "gemm_fp32", "--op", "gemm_fp16", "--plant-bug", "drop-last-k-tile")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("gemm_")]
    assert len(rows) == 3 and all("FAIL" in r for r in rows)
    assert proc.stdout.splitlines()[-1] == "0/3 cases within tolerance"


def test_without_the_environment_switch_verify_picks_the_simulator_itself():
    from gpusim.cuda_backend import cuda_driver_library_present

    if cuda_driver_library_present():
        pytest.skip("a CUDA driver is present: verify would use the GPU")
    proc = _verify("--op", "fma", "--op", "pointer_chase", simulator=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Numba CUDA simulator" in proc.stdout


def test_verify_reruns_itself_when_numba_is_already_loaded(capfd, monkeypatch):
    import numba  # noqa: F401  (this process now has numba; its simulator switch is fixed)

    from gpusim.cli import main
    from gpusim.cuda_backend import simulator_active

    if simulator_active():
        pytest.skip("this process already runs numba's simulator")
    rc = main(["verify", "--op", "stream", "--simulator"])
    out = capfd.readouterr().out
    assert rc == 0
    assert "Numba CUDA simulator" in out and "3/3 cases within tolerance" in out


def test_unknown_op_kind_is_a_usage_error():
    proc = _verify("--op", "gemm_fp64")
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr


def test_relative_error_measure():
    import numpy as np

    from gpusim.cuda_backend.verify import relative_error

    assert relative_error(np.array([1.0, 2.0]), np.array([1.0, 4.0])) == pytest.approx(0.5)
    assert relative_error(np.array([np.nan, 1.0]), np.array([1.0, 1.0])) == float("inf")
    assert relative_error(np.zeros(3), np.zeros(3)) == 0.0
