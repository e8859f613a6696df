"""``gpusim measure --suite library`` without a GPU: the exit code, and the rows a stand-in run writes."""

from __future__ import annotations

import pytest

from gpusim.accuracy import simulate_case
from gpusim.config.library import load_hardware
from gpusim.cuda_backend import library as L
from gpusim.cuda_backend import plans as P
from gpusim.measurements import load_kernel_cases

HOPPER_GEMM = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_"
               "execute_segment_k_off_kernel__5x_cublas")


@pytest.fixture(scope="module")
def h100():
    return P.load_machine("h100_sxm5_80gb")


def test_library_suite_without_pytorch_exits_2_with_one_line(monkeypatch, capsys):
    from gpusim.cli import main

    monkeypatch.setattr(L, "torch_unavailable_reason", lambda: "PyTorch sees no CUDA GPU")
    assert main(["measure", "--suite", "library"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "gpusim: measure --suite library: PyTorch sees no CUDA GPU\n"


def test_library_suite_runs_on_its_own(capsys):
    from gpusim.cli import main

    assert main(["measure", "--suite", "library", "--suite", "micro"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "run it on its own, not with micro" in err[0]


def test_rotations_span_twice_the_l2():
    l2 = 50 * 2**20
    assert L.rotations_for(L.LibraryProbe(8192, 8192, 8192, "bf16"), l2) == 1  # 384 MiB a set
    # 1024^3 BF16: 6 MiB a set, 100 MiB / 6 MiB -> 17 sets, capped at 8
    assert L.rotations_for(L.LibraryProbe(1024, 1024, 1024, "bf16"), l2) == 8
    assert L.rotations_for(L.LibraryProbe(4096, 4096, 4096, "fp32"), l2) == 1  # 192 MiB a set


def test_probe_shapes_are_distinct_and_of_known_dtypes():
    ids = [p.case_id("x") for p in L.LIBRARY_PROBES]
    assert len(ids) == len(set(ids))
    assert {p.dtype for p in L.LIBRARY_PROBES} == set(L.LIBRARY_DTYPES)


def _fake_runner(probes, num_warmups, num_repeats, l2_bytes, progress):
    kernels = {
        "bf16": ((HOPPER_GEMM, 120e-6),),
        "fp32": (("ampere_sgemm_128x64_nn", 80e-6), ("splitKreduce_kernel", 2e-6)),
        "tf32": (("a_kernel_whose_name_states_no_tile", 50e-6),),
    }
    return [L.LibraryResult(p, (1.3e-4, 1.2e-4, 1.1e-4), kernels[p.dtype], num_warmups, 2) for p in probes]


def test_library_rows_load_as_measurements_and_pin_the_named_tile(h100, tmp_path):
    from gpusim.commands.measure import execute_library

    probes = [L.LibraryProbe(4096, 4096, 4096, "bf16"), L.LibraryProbe(1024, 1024, 1024, "fp32"),
              L.LibraryProbe(1024, 1024, 1024, "tf32")]
    provenance = {"gpu_name": "NVIDIA H100 80GB HBM3", "gpusim_version": "x", "date": "2026-11-25",
                  "torch_version": "2.5", "torch_cuda_version": "12.4", "l2_bytes": 50 * 2**20}
    written = execute_library(probes, h100, "h100_sxm5_80gb", provenance, tmp_path, _fake_runner, 3, 3)
    assert [p.name for p in written] == ["library.csv", "library_provenance.json"]
    cases = {c.dtype: c for c in load_kernel_cases(tmp_path / "library.csv")}
    bf16, fp32, tf32 = cases["bf16"], cases["fp32"], cases["tf32"]
    assert bf16.case_id == "h100_sxm5_80gb_torch_bf16_mm_4096x4096x4096"
    assert bf16.measured_time_s == pytest.approx(1.2e-4)  # the median call
    assert bf16.measured_flop_per_s == pytest.approx(2 * 4096**3 / 1.2e-4, rel=1e-5)
    # cuBLAS's 128 x 256 (column-major M x N) is PyTorch's 256 x 128; 227 KiB / 48 KiB a stage -> 4 stages
    assert bf16.kernel_tile == "256x128x64_s4_w8"
    assert HOPPER_GEMM in bf16.notes
    # the longest kernel is the GEMM; the split-K reduction is reported, not parsed
    assert fp32.kernel_tile == "64x128x8_s2_w4"  # ampere_sgemm_128x64, transposed
    assert "the GEMM split K" in fp32.notes and "TF32 disabled" in fp32.notes
    assert tf32.kernel_tile is None and "states no tile" in tf32.notes
    # the rows simulate, the first with the tile its kernel's name states
    device = load_hardware("h100_sxm5_80gb").gpu
    for case in cases.values():
        seconds, _ = simulate_case(case, h100, device)
        assert seconds > 0


def test_fp8_probes_run_only_where_fp8_tensor_cores_exist():
    fp8 = [p for p in L.LIBRARY_PROBES if p.dtype == "fp8_e4m3"]
    square = [p for p in fp8 if p.m == 8192]
    assert [p.k for p in square if not p.fast_accum] == [512, 1024, 2048, 4096, 8192, 16384]
    assert [p.k for p in square if p.fast_accum] == [2048, 8192]  # the same products, fast accumulation
    # the prefill rows, each beside a BF16 product of the same shape
    rows = [(p.m, p.n, p.k) for p in fp8 if p.m != 8192]
    assert rows == [(128, 8192, 8192), (512, 8192, 8192), (2048, 8192, 8192)]
    assert set(rows) <= {(p.m, p.n, p.k) for p in L.LIBRARY_PROBES if p.dtype == "bf16"}
    # the BF16 sweep at the same output shape, whose 8192 point is the BF16 square
    bf16_k = {p.k for p in L.LIBRARY_PROBES if p.dtype == "bf16" and (p.m, p.n) == (8192, 8192)}
    assert bf16_k == {512, 1024, 2048, 4096, 8192, 16384}
    for capability, with_fp8 in (("7.0", False), ("8.0", False), ("8.6", False), ("8.9", True), ("9.0", True),
                                 ("10.0", True)):
        kept = L.supported_probes(L.LIBRARY_PROBES, capability)
        assert (len(kept) == len(L.LIBRARY_PROBES)) is with_fp8
        assert len(kept) == len(L.LIBRARY_PROBES) - (0 if with_fp8 else len(fp8))


def test_fp8_rotations_count_one_byte_operands_and_a_bf16_output():
    # 4096 x 4096 x 1024 FP8: A and B 4 MiB each, the BF16 output 32 MiB; twice a 50 MiB L2 -> 3 sets
    assert L.rotations_for(L.LibraryProbe(4096, 4096, 1024, "fp8_e4m3"), 50 * 2**20) == 3


def test_fp8_rows_name_the_scaled_mm_call_and_simulate(h100, tmp_path):
    from gpusim.commands.measure import execute_library

    # the promoting kernel CUDA 13.0 runs on the H200 (two accumulators per output: a 144x128 tile)
    kernel = "nvjet_sm90_qqtst_144x128_128x6_1x2_h_bz_coopA_algo2_TNN"

    def runner(probes, num_warmups, num_repeats, l2_bytes, progress):
        return [L.LibraryResult(p, (2.0e-4, 1.0e-4, 3.0e-4), ((kernel, 95e-6),), num_warmups, 1) for p in probes]

    probe = L.LibraryProbe(8192, 8192, 2048, "fp8_e4m3")
    provenance = {"gpu_name": "NVIDIA H100 80GB HBM3", "gpusim_version": "x", "date": "2026-11-26",
                  "torch_version": "2.5", "torch_cuda_version": "12.4", "l2_bytes": 50 * 2**20}
    execute_library([probe], h100, "h100_sxm5_80gb", provenance, tmp_path, runner, 3, 3)
    (case,) = load_kernel_cases(tmp_path / "library.csv")
    assert case.case_id == "h100_sxm5_80gb_torch_fp8_e4m3_mm_8192x8192x2048"
    assert case.dtype == "fp8_e4m3" and case.measured_time_s == pytest.approx(2.0e-4)
    assert "torch._scaled_mm" in case.notes and "BF16 output" in case.notes
    assert case.variant == "split_accumulator"
    assert case.kernel_tile is not None and case.kernel_tile.startswith("128x144x128_")  # transposed
    seconds, _ = simulate_case(case, h100, load_hardware("h100_sxm5_80gb").gpu)
    # 2 x 8192^2 x 2048 FLOP cannot beat the H100's dense FP8 peak (1,979 TFLOP/s)
    assert seconds > 2 * 8192**2 * 2048 / 1979e12


class _FakeTensor:
    def __init__(self, shape, dtype, transposed=False):
        self.shape, self.dtype, self.transposed = tuple(shape), dtype, transposed

    def to(self, dtype):
        return _FakeTensor(self.shape, dtype, self.transposed)

    def t(self):
        return _FakeTensor(self.shape[::-1], self.dtype, not self.transposed)


class _FakeTorch:
    """Just enough of torch to record what the library suite would launch (no GPU here)."""
    float32, float16, bfloat16, float8_e4m3fn = "float32", "float16", "bfloat16", "float8_e4m3fn"

    def __init__(self):
        self.calls = []

    def randn(self, *shape, device, dtype="float32"):
        assert device == "cuda"
        return _FakeTensor(shape, dtype)

    def empty(self, *shape, device, dtype):
        return _FakeTensor(shape, dtype)

    def ones(self, shape, device, dtype):
        return _FakeTensor(shape, dtype)

    def mm(self, a, b, out):
        self.calls.append(("mm", a, b, out))

    def _scaled_mm(self, a, b, *, scale_a, scale_b, out_dtype, use_fast_accum):
        self.calls.append(("_scaled_mm", a, b, scale_a, scale_b, out_dtype, use_fast_accum))


def test_fp8_probe_multiplies_row_major_a_by_column_major_b_into_bf16():
    torch = _FakeTorch()
    make_set, call = L._torch_product(torch, L.LibraryProbe(8, 4, 16, "fp8_e4m3"))
    a, b = make_set()
    assert (a.shape, a.dtype, a.transposed) == ((8, 16), "float8_e4m3fn", False)
    assert (b.shape, b.dtype, b.transposed) == ((16, 4), "float8_e4m3fn", True)  # a transposed N x K matrix
    call(a, b)
    name, _, _, scale_a, scale_b, out_dtype, fast = torch.calls[-1]
    assert name == "_scaled_mm" and out_dtype == "bfloat16" and fast is False
    assert scale_a.shape == scale_b.shape == () and scale_a.dtype == "float32"
    make_set, call = L._torch_product(torch, L.LibraryProbe(8, 4, 16, "fp8_e4m3", fast_accum=True))
    call(*make_set())
    assert torch.calls[-1][-1] is True
    # the other formats: torch.mm of row-major operands into a preallocated output of their dtype
    make_set, call = L._torch_product(torch, L.LibraryProbe(8, 4, 16, "bf16"))
    a, b, c = make_set()
    assert (a.shape, b.shape, c.shape) == ((8, 16), (16, 4), (8, 4)) and not b.transposed
    assert a.dtype == b.dtype == c.dtype == "bfloat16"
    call(a, b, c)
    assert torch.calls[-1] == ("mm", a, b, c)


def test_k_major_b_is_the_transpose_of_a_row_major_n_by_k_matrix():
    # nn.Linear's layout: B (K x N) is a transposed view of a row-major N x K weight, so both
    # operands run along K, the only layout Hopper's TF32 tensor-core instructions read
    torch = _FakeTorch()
    probe = L.LibraryProbe(8, 4, 16, "tf32", b_k_major=True)
    a, b, c = L._torch_product(torch, probe)[0]()
    assert (a.shape, a.transposed) == ((8, 16), False)
    assert (b.shape, b.transposed) == ((16, 4), True)
    assert probe.case_id("g") == "g_torch_tf32_mm_8x4x16_bkmajor"
    assert L.LibraryProbe(8, 4, 16, "fp8_e4m3", fast_accum=True).case_id("g") == "g_torch_fp8_e4m3_mm_8x4x16_fastaccum"
    # every TF32 square in the suite also comes with B along K, and a BF16 control at 1024^3
    tf32 = {(p.m, p.b_k_major) for p in L.LIBRARY_PROBES if p.dtype == "tf32"}
    assert tf32 == {(s, major) for s in (512, 1024, 2048, 4096) for major in (False, True)}
    assert L.LibraryProbe(1024, 1024, 1024, "bf16", b_k_major=True) in L.LIBRARY_PROBES


def test_layout_and_accumulation_rows_say_so_and_simulate(h100, tmp_path):
    from gpusim.commands.measure import execute_library

    probes = [L.LibraryProbe(1024, 1024, 1024, "tf32", b_k_major=True),
              L.LibraryProbe(8192, 8192, 2048, "fp8_e4m3", fast_accum=True),
              L.LibraryProbe(8192, 8192, 2048, "fp8_e4m3")]

    def runner(probes, num_warmups, num_repeats, l2_bytes, progress):
        return [L.LibraryResult(p, (1.0e-4,), (("some_gemm", 90e-6),), num_warmups, 1) for p in probes]

    provenance = {"gpu_name": "NVIDIA H100 80GB HBM3", "gpusim_version": "x", "date": "2026-11-26",
                  "torch_version": "2.5", "torch_cuda_version": "12.4", "l2_bytes": 50 * 2**20}
    execute_library(probes, h100, "h100_sxm5_80gb", provenance, tmp_path, runner, 3, 1)
    tf32, fast, promoted = load_kernel_cases(tmp_path / "library.csv")
    assert (tf32.variant, fast.variant, promoted.variant) == ("b_k_major", "fast_accum", "split_accumulator")
    assert "B the transpose of a row-major N x K matrix" in tf32.notes
    assert "fast accumulation" in fast.notes and "promoted to FP32" in promoted.notes
    device = load_hardware("h100_sxm5_80gb").gpu
    for case in (tf32, fast, promoted):
        assert simulate_case(case, h100, device)[0] > 0


def test_a_cublas_tile_is_read_in_pytorchs_row_major_terms():
    """PyTorch runs C = A B as cuBLAS's C^T = B^T A^T: a decode product of one row ran a kernel whose
    name says 128 x 8, which is 8 rows (the one row, padded) by 128 columns."""
    from gpusim.mapping.kernel_names import tile_of_kernel_name
    from gpusim.mapping.plan import Tile

    named = tile_of_kernel_name("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_NNT", P.load_machine("h200_sxm_141gb"), "bf16")
    assert (named.block_m, named.block_n, named.cluster, named.cluster_n) == (128, 8, 4, 1)
    tile = L.row_major_tile(named)
    assert (tile.block_m, tile.block_n, tile.block_k, tile.num_stages) == (8, 128, 64, 12)
    assert (tile.cluster, tile.cluster_n) == (1, 4)
    assert L.row_major_tile(tile) == named
    assert isinstance(tile, Tile)
