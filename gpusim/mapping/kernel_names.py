"""The GEMM tile a vendor library's kernel name states.

A profile (``torch.profiler``, Nsight Systems) names the kernel a library ran, and the names of
cuBLAS's and CUTLASS's GEMM kernels carry their tile. :func:`tile_of_kernel_name` reads it, so a
measured row can pin the tile the library chose (the ``kernel_tile`` column) instead of the one gpusim
would pick. The formats read (examples in ``tests/test_kernel_names.py``):

* CUTLASS 2.x: ``cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_nn_align8``: threadblock
  M x N, then k-step x stages.
* cuBLAS's Volta/Turing/Ampere kernels: ``ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn``
  (M x N, then ``stages_<k-step>x<stages>``), ``volta_h884gemm_256x128_ldg8_nn`` and the CUDA-core
  ``ampere_sgemm_128x64_nn`` (M x N only).
* cuBLAS's xmma kernels: Hopper's ``sm90_xmma_gemm_..._tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_on_...``
  (M x N x k-step, consumer warpgroups of 4 warps, ``segment_k_on`` = a stream-K schedule, optional
  ``cluster2x1x1``) and Ampere's ``sm80_xmma_gemm_..._tilesize128x128x32_stage3_warpsize2x2x1_...``
  (stages and a grid of warps).
* cuBLAS 12.8+ ``nvjet`` kernels: ``nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNT``: M x N, k-step x
  stages, cluster M x N; ``coop`` (the cooperative schedule) = two consumer warpgroups, 8 warps.

What a name leaves out is filled in by gpusim's own rules, so the tile is one gpusim's search could
have produced: warps as :func:`gpusim.mapping.gemm.default_num_warps` gives them, CUDA-core tiles
with a k-step of 8 and 2 stages, a k-step of 64 bytes' worth where none is stated, and for Hopper names, which state no
stage count, as many stages as the CTA's shared memory holds (CUTLASS's ``StageCountAutoCarveout``).
A split-K factor is never in the name (cuBLAS runs a separate ``splitKreduce`` kernel), so the tile
has none. Names of other kernels give None.
"""

from __future__ import annotations

import re

from gpusim.engine.machine import Machine
from gpusim.mapping.gemm import default_num_warps
from gpusim.mapping.plan import Tile
from gpusim.workload.ops import DTYPE_BYTES

_CUTLASS2 = re.compile(r"cutlass_\d+_(tensorop|simt|wmma_tensorop)_\w*?_(\d+)x(\d+)_(\d+)x(\d+)_(?:nn|nt|tn|tt)(?:_|$)")
_LEGACY = re.compile(r"(?:maxwell|pascal|volta|turing|ampere|sm\d+)_(\w*?)gemm\w*?_(\d+)x(\d+)(?:_|$)")
_LEGACY_STAGES = re.compile(r"_stages_(\d+)x(\d+)")
_SM90 = re.compile(r"tilesize(\d+)x(\d+)x(\d+)")
_SM90_WARPGROUPS = re.compile(r"warpgroupsize(\d+)x(\d+)x\d+")
_SM90_CLUSTER = re.compile(r"cluster(\d+)x(\d+)x\d+")
_XMMA_STAGES = re.compile(r"_stage(\d+)_")
_XMMA_WARPS = re.compile(r"_warpsize(\d+)x(\d+)x\d+")
_NVJET = re.compile(r"nvjet_\w+?_(\d+)x(\d+)_(\d+)x(\d+)_(\d+)x(\d+)_")

SIMT_BLOCK_K = 8
SIMT_STAGES = 2


def stages_that_fit(machine: Machine, dtype: str, block_m: int, block_n: int, block_k: int) -> int:
    """As many pipeline stages of A and B tiles as one CTA's shared memory holds (at least 2)."""
    per_stage = (block_m + block_n) * block_k * DTYPE_BYTES[dtype]
    return max(2, int(machine.max_shared_bytes_per_cta // per_stage))


def tile_of_kernel_name(name: str, machine: Machine, dtype: str) -> Tile | None:
    """The tile a cuBLAS or CUTLASS GEMM kernel's name states (see the module docstring), or None
    when the name is not one of the formats read."""
    text = name.strip()
    if (m := _CUTLASS2.search(text)) is not None:
        bm, bn, bk, stages = (int(g) for g in m.groups()[1:])
        simt = m.group(1) == "simt"
        return Tile(bm, bn, bk, stages, default_num_warps(bm, bn, matrix=not simt))
    if (m := _NVJET.search(text)) is not None:
        bm, bn, bk, stages, cluster_m, cluster_n = (int(g) for g in m.groups())
        # ``coop``: the cooperative schedule, two consumer warpgroups of 64 rows or more sharing the
        # tile (8 warps)
        warps = 8 if "_coop" in text and bm >= 128 else default_num_warps(bm, bn, matrix=True)
        return Tile(bm, bn, bk, stages, warps, cluster=cluster_m, cluster_n=cluster_n)
    if (m := _SM90.search(text)) is not None:
        bm, bn, bk = (int(g) for g in m.groups())
        groups, warp_grid = _SM90_WARPGROUPS.search(text), _XMMA_WARPS.search(text)
        if groups is not None:  # Hopper: consumer warpgroups of 4 warps
            warps = 4 * int(groups.group(1)) * int(groups.group(2))
        elif warp_grid is not None:  # sm80 xmma kernels: a grid of warps
            warps = int(warp_grid.group(1)) * int(warp_grid.group(2))
        else:
            warps = default_num_warps(bm, bn, matrix=True)
        stages = _XMMA_STAGES.search(text)
        cluster = _SM90_CLUSTER.search(text)
        cluster_m, cluster_n = (int(cluster.group(1)), int(cluster.group(2))) if cluster else (1, 1)
        return Tile(bm, bn, bk, int(stages.group(1)) if stages else stages_that_fit(machine, dtype, bm, bn, bk),
                    warps, cluster=cluster_m, cluster_n=cluster_n, stream_k="segment_k_on" in text)
    if (m := _LEGACY.search(text)) is not None:
        bm, bn = int(m.group(2)), int(m.group(3))
        if m.group(1) in ("s", "d", "c", "z"):  # sgemm, dgemm, ...: CUDA-core kernels
            return Tile(bm, bn, SIMT_BLOCK_K, SIMT_STAGES, default_num_warps(bm, bn, matrix=False))
        stages = _LEGACY_STAGES.search(text)
        if stages is not None:
            bk, count = int(stages.group(1)), int(stages.group(2))
        else:
            bk = max(8, int(64 // DTYPE_BYTES[dtype]))
            count = stages_that_fit(machine, dtype, bm, bn, bk)
        return Tile(bm, bn, bk, count, default_num_warps(bm, bn, matrix=True))
    return None
