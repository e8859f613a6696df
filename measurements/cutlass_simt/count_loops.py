"""Count the instructions in the main loop of CUTLASS's CUDA-core (SIMT) SGEMMs, one tile at a time.

Regenerates ``loops.csv`` beside this script, the data behind ``SIMT_LOOP_INSTRUCTIONS`` and
``SIMT_COPY_INSTRUCTIONS`` in ``gpusim/mapping/gemm.py``. Needs no GPU: ``nvcc`` and ``nvdisasm``
on PATH and CUTLASS's headers (``pip download nvidia-cutlass``; the wheel's
``cutlass_library/source/include``)::

    python measurements/cutlass_simt/count_loops.py --cutlass-include DIR [--arch sm_90]

Each tile is instantiated as ``cutlass::gemm::device::Gemm`` (A row-major, B column-major, FP32,
``OpClassSimt`` on ``Sm80``: the multistage cp.async main loop, 3 stages), compiled to a cubin and
disassembled; the innermost loop that holds the FMAs (one step of block_k = 8) is counted with
gpusim's SASS reader.
"""

from __future__ import annotations

import argparse
import collections
import csv
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from gpusim.cuda_backend.sass import innermost_loops, parse_sass

TILES = ((128, 128, 64, 64), (128, 128, 32, 64), (128, 64, 64, 32), (64, 64, 32, 32), (64, 64, 32, 64),
         (64, 32, 32, 16), (32, 32, 16, 16))
"""(block_m, block_n, warp_m, warp_n) of the tiles counted: 8 to 128 outputs per thread."""

SOURCE = """#include "cutlass/gemm/device/gemm.h"
template <int TM, int TN, int WM, int WN>
using Simt = cutlass::gemm::device::Gemm<float, cutlass::layout::RowMajor, float, cutlass::layout::ColumnMajor,
    float, cutlass::layout::RowMajor, float, cutlass::arch::OpClassSimt, cutlass::arch::Sm80,
    cutlass::gemm::GemmShape<TM, TN, 8>, cutlass::gemm::GemmShape<WM, WN, 8>, cutlass::gemm::GemmShape<1, 1, 1>,
    cutlass::epilogue::thread::LinearCombination<float, 1, float, float>,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>, 3>;
"""
RUN = """void run_{i}(float* a, float* b, float* c, int m, int n, int k) {{
  Simt<{bm}, {bn}, {wm}, {wn}> g;
  g({{{{m, n, k}}, {{a, k}}, {{b, k}}, {{c, n}}, {{c, n}}, {{1.f, 0.f}}}}); }}
"""
SECTION = re.compile(r'\n\s*\.section\s+\.text\.(\S+?),"ax",@progbits\n')
SHAPES = re.compile(r"GemmShapeILi(\d+)ELi(\d+)ELi8EEE.*?MmaSimtINS\d+_ILi(\d+)ELi(\d+)ELi8E")


def count(cutlass_include: str, arch: str) -> list[dict]:
    code = SOURCE + "".join(RUN.format(i=i, bm=bm, bn=bn, wm=wm, wn=wn) for i, (bm, bn, wm, wn) in enumerate(TILES))
    with tempfile.TemporaryDirectory() as tmp:
        src, cubin = Path(tmp) / "simt.cu", Path(tmp) / "simt.cubin"
        src.write_text(code)
        subprocess.run(["nvcc", "-std=c++17", "-O3", f"-arch={arch}", "-cubin", "-w", "-I", cutlass_include,
                        str(src), "-o", str(cubin)], check=True)
        sass = subprocess.run(["nvdisasm", "-c", str(cubin)], check=True, capture_output=True, text=True).stdout
    parts = SECTION.split(sass)
    rows = []
    for name, body in zip(parts[1::2], parts[2::2]):
        shapes = SHAPES.search(name)
        if not shapes:
            continue
        bm, bn, wm, wn = map(int, shapes.groups())
        instructions, labels = parse_sass(body)
        for start, stop in innermost_loops(instructions, labels):
            ops = collections.Counter(ins.opcode for ins in instructions[start:stop + 1])
            fmas = sum(v for k, v in ops.items() if k.split(".")[0] == "FFMA")
            if fmas < 8:
                continue
            warps = (bm // wm) * (bn // wn)
            rows.append({"block_m": bm, "block_n": bn, "warp_m": wm, "warp_n": wn, "warps": warps,
                         "outputs_per_thread": bm * bn // (32 * warps), "block_k": 8,
                         "loop_instructions": sum(ops.values()), "ffma": fmas,
                         "lds_128": ops.get("LDS.128", 0), "lds_64": ops.get("LDS.64", 0), "lds_32": ops.get("LDS", 0),
                         "ldgsts": sum(v for k, v in ops.items() if k.startswith("LDGSTS")), "arch": arch})
    return sorted(rows, key=lambda r: (-r["outputs_per_thread"], -r["block_m"] * r["block_n"]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cutlass-include", required=True, help="CUTLASS's include directory")
    parser.add_argument("--arch", default="sm_90")
    args = parser.parse_args(argv)
    rows = count(args.cutlass_include, args.arch)
    out = Path(__file__).with_name("loops.csv")
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} loops -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
